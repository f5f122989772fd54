package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/slopbox/slopbox/image"
)

func loadCmd() *cobra.Command {
	var input string
	var stdin bool
	c := &cobra.Command{
		Use:   "load [-i FILE|-]",
		Short: "Load images from a docker-save tarball, an OCI archive or an OCI layout directory (stdin without -i)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if input == "" || input == "-" {
				// docker save … | slopbox load: the archive is read whole
				// first (its index may come last).
				if term.IsTerminal(int(os.Stdin.Fd())) {
					return fmt.Errorf("load: no input: pipe an archive in (docker save IMAGE | slopbox load) or give -i FILE")
				}
				f, err := os.CreateTemp("", "slopbox-load-*.tar")
				if err != nil {
					return err
				}
				defer os.Remove(f.Name())
				n, err := io.Copy(f, os.Stdin)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("load: reading stdin: %w", err)
				}
				if n == 0 {
					return fmt.Errorf("load: stdin is empty: pipe an archive in (docker save IMAGE | slopbox load) or give -i FILE")
				}
				input, stdin = f.Name(), true
			}
			s, err := openStore()
			if err != nil {
				return err
			}
			names, err := s.Load(cmd.Context(), input)
			if err != nil && stdin {
				// Name what the user gave, not the spool file.
				return errors.New(strings.ReplaceAll(err.Error(), input, "stdin"))
			}
			if err != nil {
				return err
			}
			for _, n := range names {
				fmt.Println("Loaded image:", image.DockerName(n))
			}
			return nil
		},
	}
	c.Flags().StringVarP(&input, "input", "i", "", "archive or layout to read (- or none: stdin)")
	return c
}
