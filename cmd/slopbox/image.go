package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/dockercompat/service"
)

// imageCmd is docker's `image` group: inspect, ls and rm, as the harnesses
// and docker users call them.
func imageCmd() *cobra.Command {
	c := &cobra.Command{Use: "image", Short: "Manage images (docker's image group)"}
	ls := imagesCmd()
	ls.Use, ls.Aliases = "ls", []string{"list"}
	rm := rmiCmd()
	rm.Use = "rm [flags] IMAGE..."
	c.AddCommand(imageInspectCmd(), ls, rm, imagePruneCmd())
	return c
}

// imageInspectCmd prints a JSON array of the images, as docker does, and
// exits 1 naming the first image that is missing (open_atp checks only
// the exit code).
func imageInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect IMAGE...",
		Short: "Show images as JSON; exit 1 if one is missing",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			var out []service.ImageInspect
			for _, ref := range args {
				d, err := s.Inspect(ref)
				if err != nil {
					return &exitError{code: 1, err: fmt.Errorf("no such image: %s", ref)}
				}
				out = append(out, service.ImageInspectOf(d))
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "    ")
			return enc.Encode(out)
		},
	}
}
