//go:build slopbox_manpages

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Only in a build with the slopbox_manpages tag, which scripts/install.sh
// makes from the same source: cobra's man page generator brings a
// markdown parser whose package initialisation (214 KiB of allocations,
// over a third of all of slopbox's) would otherwise run at every start of
// the installed binary.
func init() { packagingVerbs = append(packagingVerbs, manpagesCmd) }

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
