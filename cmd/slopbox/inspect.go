package main

import (
	"encoding/json"
	"errors"
	"os"

	"github.com/spf13/cobra"
)

func inspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect IMAGE...",
		Short: "Show sandbox or image metadata as JSON",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openBackend()
			if err != nil {
				return err
			}
			var out []any
			var errs []error
			for _, ref := range args {
				if sb, err := b.Open(ref); err == nil {
					out = append(out, sb.Info())
					continue
				}
				m, err := b.Store().Inspect(ref)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out = append(out, m)
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "    ")
			if out == nil {
				out = []any{}
			}
			if err := enc.Encode(out); err != nil {
				return err
			}
			if len(errs) > 0 {
				return &exitError{code: 1, err: errors.Join(errs...)}
			}
			return nil
		},
	}
}
