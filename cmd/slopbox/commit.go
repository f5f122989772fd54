package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/imagebuild"
)

// commitCmd is docker commit: the sandbox's changes as an image.
func commitCmd() *cobra.Command {
	var (
		o     imagebuild.CommitOptions
		pause bool
	)
	c := &cobra.Command{
		Use:   "commit [flags] CONTAINER [REPOSITORY[:TAG]]",
		Short: "Create an image from a sandbox's changes",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Container, o.NoPause = args[0], !pause
			if len(args) == 2 {
				o.Name = args[1]
			}
			b, err := openService()
			if err != nil {
				return err
			}
			defer b.Close()
			res, err := b.Commit(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res.ID)
			return nil
		},
	}
	f := c.Flags()
	f.StringArrayVarP(&o.Changes, "change", "c", nil, "apply a Dockerfile instruction (CMD, ENTRYPOINT, ENV, EXPOSE, LABEL, STOPSIGNAL, USER, VOLUME, WORKDIR)")
	f.StringVarP(&o.Comment, "message", "m", "", "commit message")
	f.StringVarP(&o.Author, "author", "a", "", "author")
	f.BoolVarP(&pause, "pause", "p", true, "pause the sandbox while committing")
	return c
}
