package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/internal/copytar"
)

// splitCopyArg reads SANDBOX:PATH; a plain path (or one with a slash
// before any colon) is the host's.
func splitCopyArg(a string) (ref, p string, ok bool) {
	ref, p, found := strings.Cut(a, ":")
	if !found || ref == "" || strings.Contains(ref, "/") {
		return "", a, false
	}
	return ref, p, true
}

func cpCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "cp SANDBOX:SRC DEST|-\n  slopbox cp SRC|- SANDBOX:DEST",
		Short: "Copy files between a sandbox and the host (modes and symlinks kept; no symlink followed out of either side)",
		Long: `Copy a file or directory between a running sandbox and the host, as docker cp does:
an existing directory receives the copy under its own name; otherwise the copy
takes the destination's name; SRC ending in /. copies a directory's contents;
- reads or writes a tar stream. Symlinks are copied as symlinks and never
followed, on the host not even in the paths given (a sandbox may have
planted them), and nothing is written outside the destination; as with docker
cp, an existing directory is never replaced by a file, nor a file by a
directory (the copy fails and nothing is removed). Files copied out
are owned by you, files copied in by the sandbox's root; setuid and setgid
bits are dropped.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			srcRef, src, srcIn := splitCopyArg(args[0])
			dstRef, dst, dstIn := splitCopyArg(args[1])
			if srcIn == dstIn {
				return &exitError{code: 1, err: fmt.Errorf("cp: exactly one of SRC and DEST must be SANDBOX:PATH")}
			}
			ref := srcRef
			if dstIn {
				ref = dstRef
			}
			sb, err := openSandbox(ref)
			if err != nil {
				return err
			}
			fail := func(err error) error { return &exitError{code: 1, err: fmt.Errorf("cp: %w", err)} }
			if srcIn { // out of the sandbox
				if dst == "-" {
					if err := sb.CopyOut(ctx, src, os.Stdout); err != nil {
						return fail(err)
					}
					return nil
				}
				// The host's side: no symlink followed in DEST (a sandbox
				// may have planted one), and everything extracted through
				// descriptors beneath it.
				o := copytar.Options{UID: os.Getuid(), GID: os.Getgid(), NoSymlinks: true}
				_, name := copytar.Source(src)
				into, rename, err := copytar.Into(dst, name == ".", o)
				if err != nil {
					return fail(err)
				}
				defer into.Close()
				pr, pw := io.Pipe()
				done := make(chan error, 1)
				go func() {
					err := copytar.Extract(pr, into, rename, o)
					pr.CloseWithError(err)
					done <- err
				}()
				err = sb.CopyOut(ctx, src, pw)
				pw.CloseWithError(err)
				if xerr := <-done; err == nil {
					err = xerr
				}
				if err != nil {
					return fail(err)
				}
				return nil
			}
			// into the sandbox
			if src == "-" {
				if err := sb.CopyIn(ctx, os.Stdin, dst, true); err != nil {
					return fail(err)
				}
				return nil
			}
			dir, name := copytar.Source(src)
			if _, err := os.Lstat(dir); err != nil {
				return fail(err)
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(copytar.Write(pw, dir, name, copytar.Options{NoSymlinks: true})) }()
			if err := sb.CopyIn(ctx, pr, dst, name == "."); err != nil {
				pr.CloseWithError(err)
				return fail(err)
			}
			return nil
		},
	}
	c.Flags().BoolP("archive", "a", false, "accepted for compatibility (modes are always kept; owners are as described above)")
	return c
}
