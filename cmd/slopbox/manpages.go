package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manpagesCmd writes one man page per verb (slopbox.1, slopbox-run.1,
// slopbox-container-ls.1, …) from the commands themselves; make install
// and make deb run it. Hidden: it is for packaging, not for users.
func manpagesCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "__manpages DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // the same pages from the same commands
			hdr := &doc.GenManHeader{Title: "SLOPBOX", Section: "1", Source: "slopbox " + version, Manual: "slopbox manual"}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			return nil
		},
	}
}
