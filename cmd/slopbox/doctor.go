package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/sandbox"
)

func doctorCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check what sandboxes need of this host, with a remedy for each problem",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var checks []sandbox.Check
			if b, err := openBackend(); err != nil {
				// Nothing else can be checked without a store: say why.
				checks = []sandbox.Check{{Name: "store", Status: sandbox.Fail, Detail: err.Error(),
					Remedy: "choose a --root this user can write (and others can traverse)"}}
			} else {
				defer b.Close()
				checks = b.Doctor()
			}
			failed := 0
			for _, c := range checks {
				if c.Status == sandbox.Fail {
					failed++
				}
			}
			if asJSON {
				printJSON(checks)
			} else {
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				for _, c := range checks {
					fmt.Fprintf(w, "%s\t%s\t%s\n", c.Status, c.Name, c.Detail)
					if c.Remedy != "" && c.Status != sandbox.Pass {
						fmt.Fprintf(w, "\t\t→ %s\n", c.Remedy)
					}
				}
				w.Flush()
			}
			if failed > 0 {
				return &exitError{code: 1, silent: true}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the checks as JSON")
	return c
}
