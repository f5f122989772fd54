package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func loadCmd() *cobra.Command {
	var input string
	c := &cobra.Command{
		Use:   "load -i FILE",
		Short: "Load images from a docker-save tarball, an OCI archive or an OCI layout directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if input == "" {
				return fmt.Errorf("load: give the archive with -i FILE (reading stdin is not supported)")
			}
			s, err := openStore()
			if err != nil {
				return err
			}
			names, err := s.Load(cmd.Context(), input)
			if err != nil {
				return err
			}
			for _, n := range names {
				fmt.Println("Loaded image:", n)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&input, "input", "i", "", "archive or layout to read")
	return c
}
