package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/term"
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
			if output == "" {
				if term.IsTerminal(int(os.Stdout.Fd())) {
					return fmt.Errorf("save: refusing to write a tarball to a terminal; use -o FILE or redirect stdout")
				}
				return s.Save(args, os.Stdout)
			}
			// Write beside the target and rename, so a failed save leaves no partial file.
			f, err := os.CreateTemp(filepath.Dir(output), ".slopbox-save-")
			if err != nil {
				return err
			}
			defer os.Remove(f.Name())
			if err := s.Save(args, f); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			return os.Rename(f.Name(), output)
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "", "write to FILE instead of stdout")
	return c
}
