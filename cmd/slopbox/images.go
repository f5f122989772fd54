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
	var format string
	c := &cobra.Command{
		Use:     "images [REPOSITORY[:TAG]]",
		Aliases: []string{"image ls"},
		Short:   "List images in the store",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tmpl, err := parseListTemplate("images", format)
			if err != nil {
				return err
			}
			s, err := openStore()
			if err != nil {
				return err
			}
			all, err := s.List()
			if err != nil {
				return err
			}
			// docker images REPOSITORY[:TAG]: the images of that
			// repository (and tag), by the names Docker prints.
			var list []image.Summary
			for _, i := range all {
				if len(args) == 0 || imageMatches(args[0], image.DockerName(i.Name)) {
					list = append(list, i)
				}
			}
			switch {
			case asJSON:
				if list == nil {
					list = []image.Summary{}
				}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			case quiet:
				for _, i := range list {
					fmt.Println(shortID(i.ID))
				}
				return nil
			case format == "json":
				for _, i := range list {
					b, _ := json.Marshal(imageRowOf(i))
					fmt.Println(string(b))
				}
				return nil
			case tmpl != nil:
				rows := make([]imageRow, len(list))
				for n, i := range list {
					rows[n] = imageRowOf(i)
				}
				header := imageRow{Repository: "REPOSITORY", Tag: "TAG", ID: "IMAGE ID", CreatedSince: "CREATED", CreatedAt: "CREATED AT", Size: "SIZE", Digest: "DIGEST"}
				return writeList(tmpl, header, rows)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(w, "REPOSITORY\tTAG\tIMAGE ID\tCREATED\tSIZE")
			for _, i := range list {
				r := imageRowOf(i)
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Repository, r.Tag, r.ID, r.CreatedSince, r.Size)
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "only show image ids")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().StringVar(&format, "format", "", "Go template over .Repository .Tag .ID .CreatedSince .CreatedAt .Size .Digest (\"table …\" adds a header; \"json\": one object a line)")
	return c
}

// imageRow is one image as images --format sees it (docker's field names).
type imageRow struct {
	Repository, Tag, ID, CreatedSince, CreatedAt, Size, Digest string
}

func imageRowOf(i image.Summary) imageRow {
	// As Docker prints it: busybox, not index.docker.io/library/busybox.
	repo, tag := splitName(image.DockerName(i.Name))
	return imageRow{Repository: repo, Tag: tag, ID: shortID(i.ID), CreatedSince: ago(i.Created),
		CreatedAt: i.Created.Format("2006-01-02 15:04:05 -0700 MST"), Size: size(i.Size), Digest: i.Digest}
}

// imageMatches is docker images' REPOSITORY[:TAG] argument against a name
// as Docker prints it.
func imageMatches(arg, name string) bool {
	repo, tag := splitName(name)
	wantRepo, wantTag := splitName(arg)
	if wantTag == "<none>" {
		return repo == image.DockerName(wantRepo)
	}
	return repo == image.DockerName(wantRepo) && tag == wantTag
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
