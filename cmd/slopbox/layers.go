package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/slopbox/slopbox/imagebuild"
	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/internal/regfile"
)

func diffCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "diff SANDBOX",
		Short: "List the files a sandbox added (A), changed (C) or deleted (D) in its image",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			changes, err := sb.Changes()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			for _, c := range changes {
				fmt.Printf("%c %s\n", "CAD"[c.Kind], c.Path)
			}
			return nil
		},
	}
}

func exportCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "export [-o FILE] SANDBOX",
		Short: "Write a sandbox's filesystem as a tar archive (to stdout without -o)",
		Long: `Write a sandbox's filesystem as a tar archive, to stdout or (-o) to FILE.
FILE is written whole or not at all (a new file renamed over it: an existing
regular file is replaced). No symlink is followed in FILE or the directories
above it, which a sandbox may have planted: such a path is refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				if term.IsTerminal(int(os.Stdout.Fd())) {
					return &exitError{code: 1, err: fmt.Errorf("refusing to write a tar archive to a terminal: redirect stdout or use -o FILE")}
				}
				if err := sb.Export(os.Stdout); err != nil {
					return &exitError{code: 1, err: err}
				}
				return nil
			}
			// Never through a symlink, which a sandbox may have planted
			// where FILE lies; a failed export leaves no file. 0600, as the docker
			// CLI writes it: the archive is the sandbox's whole filesystem.
			f, err := atomicfile.CreateOutput(output, 0o600)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("export -o: %w", err)}
			}
			defer f.Close()
			if err := sb.Export(f); err != nil {
				return &exitError{code: 1, err: err}
			}
			if err := f.Commit(); err != nil {
				return &exitError{code: 1, err: fmt.Errorf("export -o: %w", err)}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "", "write to FILE instead of stdout")
	return c
}

func historyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "history IMAGE",
		Short: "Show the history of an image (its config's, newest first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := openStore()
			if err != nil {
				return err
			}
			img, err := st.Get(args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tCREATED\tCREATED BY\tCOMMENT")
			h := img.Config.History
			for i := len(h) - 1; i >= 0; i-- {
				id := "<missing>"
				if i == len(h)-1 {
					id = strings.TrimPrefix(img.ID, "sha256:")[:12]
				}
				fmt.Fprintf(tw, "%s\t%s ago\t%s\t%s\n", id, time.Since(h[i].Created.Time).Truncate(time.Hour), h[i].CreatedBy, h[i].Comment)
			}
			return tw.Flush()
		},
	}
}

func importCmd() *cobra.Command {
	var changes []string
	var message string
	c := &cobra.Command{
		Use:   "import [-c CHANGE]... FILE|- [REPOSITORY[:TAG]]",
		Short: "Make an image of a root filesystem tarball (plain or gzip; - reads stdin)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var cfg v1.Config
			if err := imagebuild.ApplyChanges(&cfg, changes); err != nil {
				return &exitError{code: 1, err: err}
			}
			st, err := openStore()
			if err != nil {
				return err
			}
			var r io.Reader = os.Stdin
			if args[0] != "-" {
				// A FIFO is refused, not waited on: a stream is piped
				// in as -.
				f, err := regfile.Open(args[0])
				if errors.Is(err, regfile.ErrNotRegular) {
					err = fmt.Errorf("import: %w (to import a stream, pipe it in: slopbox import - < %s)", err, args[0])
				}
				if err != nil {
					return &exitError{code: 1, err: err}
				}
				defer f.Close()
				r = f
			}
			ref := ""
			if len(args) == 2 {
				ref = args[1]
			}
			ctx, cancel := signalContext()
			defer cancel()
			id, err := st.Import(ctx, r, ref, cfg, message)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			fmt.Println(id)
			return nil
		},
	}
	c.Flags().StringArrayVarP(&changes, "change", "c", nil, "apply a Dockerfile instruction to the image's config (CMD, ENTRYPOINT, ENV, LABEL, USER, WORKDIR, EXPOSE, STOPSIGNAL)")
	c.Flags().StringVarP(&message, "message", "m", "", "the comment of the image's history entry")
	return c
}
