package main

import (
	"cmp"
	"fmt"

	"github.com/spf13/cobra"
)

// pushCmd is docker push: the image to a registry (as NAME, or as REF).
func pushCmd() *cobra.Command {
	var quiet bool
	c := &cobra.Command{
		Use:   "push [flags] NAME[:TAG] [REF]",
		Short: "Push an image to a registry (as REF when given)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			dest := ""
			if len(args) == 2 {
				dest = args[1]
			}
			dgst, err := s.Push(cmd.Context(), args[0], dest, nil)
			if err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: digest: %s\n", cmp.Or(dest, args[0]), dgst)
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), dgst)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the digest")
	return c
}
