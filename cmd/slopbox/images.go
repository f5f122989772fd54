package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/image"
)

func imagesCmd() *cobra.Command {
	var quiet, asJSON bool
	c := &cobra.Command{
		Use:     "images",
		Aliases: []string{"image ls"},
		Short:   "List images in the store",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			list, err := s.List()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			if quiet {
				for _, i := range list {
					fmt.Println(shortID(i.ID))
				}
				return nil
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(w, "REPOSITORY\tTAG\tIMAGE ID\tCREATED\tSIZE")
			for _, i := range list {
				repo, tag := splitName(image.DockerName(i.Name)) // as Docker prints it: busybox, not index.docker.io/library/busybox
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", repo, tag, shortID(i.ID), ago(i.Created), size(i.Size))
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "only show image ids")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func shortID(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	return d[:min(12, len(d))]
}

// splitName splits "reg/repo:tag" or "reg/repo@sha256:…" for display.
func splitName(n string) (string, string) {
	if i := strings.LastIndex(n, "@"); i >= 0 {
		return n[:i], "<none>"
	}
	if i := strings.LastIndex(n, ":"); i > strings.LastIndex(n, "/") {
		return n[:i], n[i+1:]
	}
	return n, "<none>"
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "N/A"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "Less than a minute ago"
	case d < time.Hour:
		return fmt.Sprintf("%d minutes ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d hours ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

func size(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fGB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fMB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fkB", float64(n)/1e3)
	}
	return fmt.Sprintf("%dB", n)
}
