package main

import "github.com/spf13/cobra"

func tagCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "tag SOURCE TARGET",
		Short: "Give an image another name",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			return s.Tag(args[0], args[1])
		},
	}
}
