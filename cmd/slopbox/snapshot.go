package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/internal/atomicfile"
)

// snapshotFlags choose what a snapshot keeps: a spec's snapshot block (or
// its defaults), plus globs from the command line.
type snapshotFlags struct {
	spec, compression string
	keep, ignore      []string
}

func (f *snapshotFlags) register(c *cobra.Command, compression bool) {
	c.Flags().StringVar(&f.spec, "spec", "", "environment spec whose snapshot block applies (default: that block's defaults)")
	c.Flags().StringArrayVar(&f.keep, "keep", nil, "keep only files matching GLOB (fnmatch; repeatable; added to keep_globs)")
	c.Flags().StringArrayVar(&f.ignore, "ignore", nil, "leave out files matching GLOB, and directories matching GLOB with a trailing / (repeatable; added to ignore_globs)")
	if compression {
		c.Flags().StringVar(&f.compression, "compression", "", "gz, bz2, xz or none (default: the spec's, gz)")
	}
}

func (f *snapshotFlags) options() (*dockercompat.Spec, dockercompat.SnapshotOptions, error) {
	opts := dockercompat.DefaultSnapshotOptions()
	var spec *dockercompat.Spec
	if f.spec != "" {
		var err error
		if spec, err = dockercompat.LoadSpec(f.spec); err != nil {
			return nil, opts, err
		}
		opts = spec.SnapshotOptions(nil)
	}
	opts.Keep = append(slices.Clone(opts.Keep), f.keep...)
	opts.Ignore = append(slices.Clone(opts.Ignore), f.ignore...)
	if f.compression != "" {
		opts.Compression = f.compression
	}
	if _, err := dockercompat.SnapshotExt(opts.Compression); err != nil {
		return nil, opts, err
	}
	return spec, opts, nil
}

func snapshotCmd() *cobra.Command {
	var f snapshotFlags
	var output string
	c := &cobra.Command{
		Use:   "snapshot DIR [--spec SPEC.yaml] [--keep GLOB]... [--ignore GLOB]... [--compression gz|bz2|xz|none] [-o FILE|-]",
		Short: "Write a workspace snapshot archive, as a spec's snapshot block describes",
		Long: `Write a tar archive of DIR, as SlopCodeBench's snapshot block describes it
(keep_globs, ignore_globs plus tests/assets, compression). Modes and symlinks
are kept; a symlink is stored as a link and never followed, so nothing
outside DIR is read.

The archive goes to -o FILE (- for stdout); else, when the spec sets
archive_save_dir, to <archive_save_dir>/<YYYYmmddTHHMMSS>.<8 hex>.<DIR's name><ext>;
else to ./slop_code_snapshot<ext> in the current directory. A failed
snapshot leaves no partial file; an existing regular file is replaced. No
symlink is followed in that path or the directories above it, which a
sandbox may have planted: such a path is refused. The path written is
printed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, opts, err := f.options()
			if err != nil {
				return err
			}
			dir := args[0]
			if output == "-" {
				if term.IsTerminal(int(os.Stdout.Fd())) {
					return fmt.Errorf("snapshot: refusing to write an archive to a terminal; use -o FILE or redirect stdout")
				}
				res, err := dockercompat.WriteSnapshot(dir, opts, os.Stdout)
				if err != nil {
					return err
				}
				warnSkipped(res)
				return nil
			}
			where := "snapshot -o" // what named the path, for a refusal
			if output == "" {
				where = "snapshot"
				ext, _ := dockercompat.SnapshotExt(opts.Compression)
				output = dockercompat.ArchiveName + ext
				if spec != nil && spec.Snapshot.ArchiveSaveDir != "" {
					name, err := dockercompat.SnapshotArchiveName(dir, opts.Compression, time.Now())
					if err != nil {
						return err
					}
					// Made one directory at a time, none through a symlink.
					if err := atomicfile.MkdirAll(spec.Snapshot.ArchiveSaveDir, 0o755); err != nil {
						return fmt.Errorf("snapshot: archive_save_dir: %w", err)
					}
					output = filepath.Join(spec.Snapshot.ArchiveSaveDir, name)
					where = "snapshot: archive_save_dir"
				}
			}
			res, err := dockercompat.SnapshotToFile(dir, opts, output)
			if _, ok := errors.AsType[*atomicfile.SymlinkError](err); ok {
				return fmt.Errorf("%s: %w", where, err)
			}
			if err != nil {
				return err
			}
			warnSkipped(res)
			fmt.Println(output)
			return nil
		},
	}
	f.register(c, true)
	c.Flags().StringVarP(&output, "output", "o", "", "write the archive to FILE (- for stdout)")
	c.AddCommand(snapshotDiffCmd())
	return c
}

func warnSkipped(res *dockercompat.SnapshotResult) {
	for _, p := range res.Skipped {
		fmt.Fprintf(os.Stderr, "slopbox: snapshot: %s is not a file, directory or symlink: not archived\n", p)
	}
}

func snapshotDiffCmd() *cobra.Command {
	var f snapshotFlags
	var asJSON, exitCode bool
	c := &cobra.Command{
		Use:   "diff A B [--json] [--exit-code]",
		Short: "Report the files created, deleted and modified from snapshot A to snapshot B (archives or directories)",
		Long: `Compare two snapshots, each an archive (tar, plain, gz, bz2 or xz) or a
directory (read as a snapshot with --spec/--keep/--ignore would store it).
Every file and symlink counts: contents, mode and symlink target changes
are modifications; text files get lines added and removed, binary files
their sizes.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, opts, err := f.options()
			if err != nil {
				return err
			}
			d, err := dockercompat.Diff(args[0], args[1], opts)
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(struct {
					*dockercompat.DiffResult
					Stats dockercompat.DiffStats `json:"stats"`
				}{d, d.Stats()})
			} else {
				for _, c := range d.Changes {
					fmt.Printf("%-8s  %s%s\n", c.Change, c.Path, describeChange(c))
				}
			}
			if exitCode && len(d.Changes) > 0 {
				return &exitError{code: 1, silent: true}
			}
			return nil
		},
	}
	f.register(c, false)
	c.Flags().BoolVar(&asJSON, "json", false, "print the changes and counts as JSON")
	c.Flags().BoolVar(&exitCode, "exit-code", false, "exit 1 when there are changes")
	return c
}

// describeChange is what follows a path in diff's text output.
func describeChange(c dockercompat.FileChange) string {
	var s string
	switch {
	case c.Type == "symlink" && c.Change != dockercompat.Deleted:
		s = " -> " + c.NewTarget
	case c.Type == "symlink":
		s = " -> " + c.OldTarget
	}
	if c.OldType != "" {
		s += fmt.Sprintf(" (was a %s)", c.OldType)
	} else if c.Type == "symlink" && c.Change == dockercompat.Modified {
		s += fmt.Sprintf(" (was -> %s)", c.OldTarget)
	}
	if c.Contents && c.Type == "file" || c.OldType == "file" {
		if c.Binary {
			switch {
			case c.OldSize != nil && c.NewSize != nil:
				s += fmt.Sprintf("  binary, %d -> %d bytes", *c.OldSize, *c.NewSize)
			case c.NewSize != nil:
				s += fmt.Sprintf("  binary, %d bytes", *c.NewSize)
			case c.OldSize != nil:
				s += fmt.Sprintf("  binary, %d bytes", *c.OldSize)
			}
		} else if c.LinesUncounted {
			s += fmt.Sprintf("  text over %d MiB, lines not counted", dockercompat.MaxDiffText>>20)
		} else {
			s += fmt.Sprintf("  +%d -%d", c.LinesAdded, c.LinesRemoved)
		}
	}
	if c.ModeChanged() {
		s += fmt.Sprintf("  mode %s -> %s", c.OldMode, c.NewMode)
	}
	return s
}
