package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/slopbox/slopbox/backend"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/dockercompat/filters"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// volumeCmd is docker's volume group: named volumes kept under the state
// root (sandbox/volumes.go).
func volumeCmd() *cobra.Command {
	c := &cobra.Command{Use: "volume", Short: "Manage named volumes"}
	c.AddCommand(volumeCreateCmd(), volumeLsCmd(), volumeInspectCmd(), volumeRmCmd(), volumePruneCmd())
	return c
}

// volumeCreateCmd is volume create.
func volumeCreateCmd() *cobra.Command {
	var labels []string
	var driver string
	create := &cobra.Command{
		Use:   "create [VOLUME]",
		Short: "Create a volume (a new name when none is given)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if driver != "local" {
				return fmt.Errorf("volume driver %q is not supported: slopbox's volumes are local directories", driver)
			}
			lm, err := backend.ParseLabels(labels)
			if err != nil {
				return err
			}
			b, err := openService()
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			v, err := b.CreateVolume(name, lm)
			if err != nil {
				return err
			}
			fmt.Println(v.Name)
			return nil
		},
	}
	create.Flags().StringArrayVarP(&labels, "label", "l", nil, "set metadata KEY=VALUE")
	create.Flags().StringVarP(&driver, "driver", "d", "local", "volume driver (local only)")
	return create
}

// volumeLsCmd is volume ls.
func volumeLsCmd() *cobra.Command {
	var quiet bool
	var filterFlags []string
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List volumes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openService()
			if err != nil {
				return err
			}
			f, err := filters.FromFlags(filterFlags)
			if err != nil {
				return err
			}
			list, err := b.ListVolumes(f)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
			if !quiet {
				fmt.Fprintln(tw, "DRIVER\tVOLUME NAME")
			}
			for _, v := range list {
				if quiet {
					fmt.Fprintln(tw, v.Name)
				} else {
					fmt.Fprintf(tw, "%s\t%s\n", v.Driver, v.Name)
				}
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVarP(&quiet, "quiet", "q", false, "only display volume names")
	ls.Flags().StringArrayVarP(&filterFlags, "filter", "f", nil, "filter (Docker's rules): name=, label=KEY[=VALUE], label!=KEY, dangling=true|false, driver=local")
	return ls
}

// volumeInspectCmd is volume inspect.
func volumeInspectCmd() *cobra.Command {
	inspect := &cobra.Command{
		Use:   "inspect VOLUME...",
		Short: "Show volumes as JSON",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openService()
			if err != nil {
				return err
			}
			out := []any{}
			var errs []error
			for _, name := range args {
				v, err := b.Volume(name)
				if err != nil {
					errs = append(errs, fmt.Errorf("get %s: no such volume", name))
					continue
				}
				out = append(out, map[string]any{"Name": v.Name, "Driver": v.Driver, "Mountpoint": v.Mountpoint,
					"CreatedAt": v.CreatedAt.Format("2006-01-02T15:04:05Z07:00"), "Labels": v.Labels, "Options": v.Options, "Scope": "local"})
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "    ")
			enc.Encode(out)
			if len(errs) > 0 {
				return &exitError{code: 1, err: errors.Join(errs...)}
			}
			return nil
		},
	}
	return inspect
}

// volumeRmCmd is volume rm.
func volumeRmCmd() *cobra.Command {
	var force bool
	rm := &cobra.Command{
		Use:     "rm VOLUME...",
		Aliases: []string{"remove"},
		Short:   "Remove volumes (not one a sandbox uses, even with --force)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openService()
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				if err := b.RemoveVolume(name, force); err != nil {
					if errors.Is(err, service.ErrVolumeNotFound) {
						err = fmt.Errorf("get %s: no such volume", name)
					}
					errs = append(errs, err)
					continue
				}
				fmt.Println(name)
			}
			if len(errs) > 0 {
				return &exitError{code: 1, err: errors.Join(errs...)}
			}
			return nil
		},
	}
	rm.Flags().BoolVarP(&force, "force", "f", false, "no error for a volume that does not exist")
	return rm
}

// volumePruneCmd is volume prune.
func volumePruneCmd() *cobra.Command {
	var all, yes bool
	var pruneFlags []string
	prune := &cobra.Command{
		Use:   "prune [-a] [--filter KEY=VALUE]...",
		Short: "Remove the anonymous volumes no sandbox uses (-a: every unused one)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := filters.FromFlags(pruneFlags)
			if err != nil {
				return err
			}
			b, err := openService()
			if err != nil {
				return err
			}
			removed, err := b.PruneVolumes(f, all)
			if len(removed) > 0 {
				fmt.Println("Deleted Volumes:")
				for _, n := range removed {
					fmt.Println(n)
				}
				fmt.Println()
			}
			fmt.Println("Total reclaimed space: 0B")
			return err
		},
	}
	prune.Flags().BoolVarP(&all, "all", "a", false, "remove every unused volume, not only anonymous ones")
	prune.Flags().StringArrayVar(&pruneFlags, "filter", nil, "only volumes matching (Docker's prune filters): label=KEY[=VALUE], label!=KEY[=VALUE]")
	prune.Flags().BoolVarP(&yes, "force", "f", false, "do not prompt for confirmation (slopbox never prompts)")
	return prune
}
