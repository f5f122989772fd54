package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/slopbox/slopbox/internal/atomicfile"
)

func saveCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "save [-o FILE] IMAGE...",
		Short: "Write images as a docker-save tarball",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				if term.IsTerminal(int(os.Stdout.Fd())) {
					return fmt.Errorf("save: refusing to write a tarball to a terminal; use -o FILE or redirect stdout")
				}
				return s.Save(args, os.Stdout)
			}
			// Written beside FILE and renamed over it, so a failed save
			// leaves no partial file; never through a symlink, which a
			// sandbox may have planted where FILE lies.
			f, err := atomicfile.CreateOutput(output, 0o600)
			if err != nil {
				return fmt.Errorf("save -o: %w", err)
			}
			defer f.Close()
			if err := s.Save(args, f); err != nil {
				return err
			}
			if err := f.Commit(); err != nil {
				return fmt.Errorf("save -o: %w", err)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "", "write to FILE instead of stdout")
	return c
}
