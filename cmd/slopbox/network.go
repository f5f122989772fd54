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
	"github.com/slopbox/slopbox/dockercompat/networks"
)

// networkCmd is docker's network group, over the same service as serve's
// /networks (dockercompat/networks): flags → options → service → print.
func networkCmd() *cobra.Command {
	c := &cobra.Command{Use: "network", Short: "Manage networks (user-defined bridge networks, and Docker's predefined bridge, host and none)"}
	service := func() (*networks.Service, error) {
		b, err := openService()
		if err != nil {
			return nil, err
		}
		return b.Networks(), nil
	}
	c.AddCommand(networkLsCmd(service), networkInspectCmd(service), networkCreateCmd(service), networkRmCmd(service),
		networkPruneCmd(service), networkConnectCmd(service, "connect"), networkConnectCmd(service, "disconnect"))
	return c
}

// networkLsCmd is network ls.
func networkLsCmd(service func() (*networks.Service, error)) *cobra.Command {
	var quiet, noTrunc bool
	var filterFlags []string
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List networks",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := filters.FromFlags(filterFlags)
			if err != nil {
				return err
			}
			svc, err := service()
			if err != nil {
				return err
			}
			list, err := svc.List(f)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
			if !quiet {
				fmt.Fprintln(tw, "NETWORK ID\tNAME\tDRIVER\tSCOPE")
			}
			for _, n := range list {
				id := n.ID
				if !noTrunc {
					id = id[:12]
				}
				if quiet {
					fmt.Fprintln(tw, id)
				} else {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, n.Name, n.Driver, n.Scope)
				}
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVarP(&quiet, "quiet", "q", false, "only display network ids")
	ls.Flags().BoolVar(&noTrunc, "no-trunc", false, "do not truncate ids")
	ls.Flags().StringArrayVarP(&filterFlags, "filter", "f", nil, "filter (Docker's rules): name=, id=, driver=, label=KEY[=VALUE], scope=local, type=builtin|custom, dangling=true|false")
	return ls
}

// networkInspectCmd is network inspect.
func networkInspectCmd(service func() (*networks.Service, error)) *cobra.Command {
	inspect := &cobra.Command{
		Use:   "inspect NETWORK...",
		Short: "Show networks as JSON",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			svc, err := service()
			if err != nil {
				return err
			}
			var out []networks.Network
			for _, ref := range args {
				n, err := svc.Inspect(ref)
				if err != nil {
					return err
				}
				out = append(out, n)
			}
			b, _ := json.MarshalIndent(out, "", "    ")
			fmt.Println(string(b))
			return nil
		},
	}
	return inspect
}

// networkCreateCmd is network create.
func networkCreateCmd(service func() (*networks.Service, error)) *cobra.Command {
	var o networks.CreateOptions
	var labels []string
	create := &cobra.Command{
		Use:   "create NETWORK",
		Short: "Create a user-defined bridge network",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			var err error
			if o.Labels, err = backend.ParseLabels(labels); err != nil {
				return err
			}
			svc, err := service()
			if err != nil {
				return err
			}
			res, err := svc.Create(o)
			if err != nil {
				return err
			}
			fmt.Println(res.ID)
			return nil
		},
	}
	create.Flags().StringVarP(&o.Driver, "driver", "d", "bridge", "driver")
	create.Flags().BoolVar(&o.Internal, "internal", false, "no outbound access")
	create.Flags().StringArrayVar(&labels, "label", nil, "set metadata KEY=VALUE")
	var subnet, gateway, ipRange string
	create.Flags().StringVar(&subnet, "subnet", "", "IPv4 subnet in CIDR form (default: the next free one of 172.18-31.0.0/16, 192.168.0.0/16 in /20s)")
	create.Flags().StringVar(&gateway, "gateway", "", "the gateway's address (default: the subnet's first)")
	create.Flags().StringVar(&ipRange, "ip-range", "", "allocate container addresses from this sub-range")
	create.Flags().BoolVar(&o.Attachable, "attachable", false, "accepted (every slopbox network is)")
	create.PreRun = func(cmd *cobra.Command, args []string) {
		if subnet != "" || gateway != "" || ipRange != "" {
			o.IPAM = networks.IPAM{Config: []networks.IPAMConfig{{Subnet: subnet, Gateway: gateway, IPRange: ipRange}}}
		}
	}
	return create
}

// networkRmCmd is network rm.
func networkRmCmd(service func() (*networks.Service, error)) *cobra.Command {
	var rmForce bool
	rm := &cobra.Command{
		Use:     "rm NETWORK...",
		Aliases: []string{"remove"},
		Short:   "Remove networks",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			svc, err := service()
			if err != nil {
				return err
			}
			for _, ref := range args {
				if err := svc.Remove(ref); err != nil {
					if rmForce && errors.Is(err, networks.ErrNotFound) {
						continue
					}
					return err
				}
				fmt.Println(ref)
			}
			return nil
		},
	}

	rm.Flags().BoolVarP(&rmForce, "force", "f", false, "do not fail when a network does not exist")
	return rm
}

// networkPruneCmd is network prune.
func networkPruneCmd(service func() (*networks.Service, error)) *cobra.Command {
	var pruneFlags []string
	var yes bool
	prune := &cobra.Command{
		Use:   "prune [--filter KEY=VALUE]...",
		Short: "Remove unused user-defined networks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := filters.FromFlags(pruneFlags)
			if err != nil {
				return err
			}
			svc, err := service()
			if err != nil {
				return err
			}
			res, err := svc.Prune(f)
			if err != nil {
				return err
			}
			if len(res.NetworksDeleted) > 0 {
				fmt.Println("Deleted Networks:")
				for _, n := range res.NetworksDeleted {
					fmt.Println(n)
				}
			}
			return nil
		},
	}
	prune.Flags().StringArrayVar(&pruneFlags, "filter", nil, "only networks matching: until=TIME, label=KEY[=VALUE], label!=KEY")
	prune.Flags().BoolVarP(&yes, "force", "f", false, "do not prompt for confirmation (slopbox never prompts)")
	return prune
}

// networkConnectCmd is network connect and network disconnect (verb).
func networkConnectCmd(service func() (*networks.Service, error), verb string) *cobra.Command {
	var co networks.ConnectOptions
	var force bool
	c := &cobra.Command{
		Use:   verb + " NETWORK CONTAINER",
		Short: map[bool]string{true: "Connect a container to a user-defined network", false: "Disconnect a container from a user-defined network"}[verb == "connect"],
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			svc, err := service()
			if err != nil {
				return err
			}
			if verb == "connect" {
				return svc.Connect(args[0], args[1], co)
			}
			return svc.Disconnect(args[0], args[1])
		},
	}
	if verb == "connect" {
		c.Flags().StringArrayVar(&co.Aliases, "alias", nil, "another name the network's DNS gives the container")
		c.Flags().StringVar(&co.IPv4, "ip", "", "the container's IPv4 address on the network")
	} else {
		c.Flags().BoolVarP(&force, "force", "f", false, "accepted")
	}
	return c
}
