package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func pullCmd() *cobra.Command {
	var quiet bool
	c := &cobra.Command{
		Use:   "pull [flags] IMAGE",
		Short: "Pull an image from a registry",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			start := time.Now()
			img, err := s.Pull(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "pulled %s (%d layers) in %.2fs\n", img.Name, len(img.Layers), time.Since(start).Seconds())
			}
			fmt.Fprintln(cmd.OutOrStdout(), img.Digest)
			return nil
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the digest")
	return c
}
