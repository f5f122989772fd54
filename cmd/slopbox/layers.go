package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func diffCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "diff SANDBOX",
		Short: "List the files a sandbox added (A), changed (C) or deleted (D) in its image",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			changes, err := sb.Changes()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			for _, c := range changes {
				fmt.Printf("%c %s\n", "CAD"[c.Kind], c.Path)
			}
			return nil
		},
	}
}

func exportCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "export [-o FILE] SANDBOX",
		Short: "Write a sandbox's filesystem as a tar archive (to stdout without -o)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			var w io.Writer = os.Stdout
			if output == "" && term.IsTerminal(int(os.Stdout.Fd())) {
				return &exitError{code: 1, err: fmt.Errorf("refusing to write a tar archive to a terminal: redirect stdout or use -o FILE")}
			}
			if output != "" {
				f, err := os.OpenFile(output, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					return &exitError{code: 1, err: err}
				}
				defer f.Close()
				w = f
			}
			if err := sb.Export(w); err != nil {
				return &exitError{code: 1, err: err}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "", "write to FILE instead of stdout")
	return c
}

func historyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "history IMAGE",
		Short: "Show the history of an image (its config's, newest first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := openStore()
			if err != nil {
				return err
			}
			img, err := st.Get(args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tCREATED\tCREATED BY\tCOMMENT")
			h := img.Config.History
			for i := len(h) - 1; i >= 0; i-- {
				id := "<missing>"
				if i == len(h)-1 {
					id = strings.TrimPrefix(img.ID, "sha256:")[:12]
				}
				fmt.Fprintf(tw, "%s\t%s ago\t%s\t%s\n", id, time.Since(h[i].Created.Time).Truncate(time.Hour), h[i].CreatedBy, h[i].Comment)
			}
			return tw.Flush()
		},
	}
}
