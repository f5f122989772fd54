package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// updateCmd is docker update: new resource limits (set on the running
// sandbox's cgroup, kept for its next start) and restart policy (which
// the sandbox's monitor carries out at its next exit: dockercompat/service).
func updateCmd() *cobra.Command {
	var memory, restart string
	var cpus float64
	var pids int64
	c := &cobra.Command{
		Use:   "update [OPTIONS] SANDBOX...",
		Short: "Change the resource limits or restart policy of sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			var mem int64
			if fl.Changed("memory") {
				n, err := dockercompat.ParseSize("--memory", memory)
				if err != nil {
					return err
				}
				mem = n
			}
			var policy dockercompat.RestartPolicy
			if restart != "" {
				p, err := dockercompat.ParseRestartPolicy(restart)
				if err != nil {
					return err
				}
				policy = p
			}
			return eachSandbox(args, func(sb *service.Container) error {
				l := sb.Info().Limits
				if fl.Changed("memory") {
					l.MemoryBytes = mem
				}
				if fl.Changed("cpus") {
					l.CPUs = cpus
				}
				if fl.Changed("pids-limit") {
					l.Pids = max(pids, 0)
				}
				if fl.Changed("memory") || fl.Changed("cpus") || fl.Changed("pids-limit") {
					warnings, err := sb.Update(l)
					if err != nil {
						return err
					}
					for _, w := range warnings {
						fmt.Fprintf(os.Stderr, "WARNING: %s: %s\n", sb.Name(), w)
					}
				}
				if restart != "" {
					if err := dockercompat.CheckRestartPolicy(policy, sb.Info().AutoRemove); err != nil {
						return err
					}
					return dockercompat.UpdateCreated(sb.Info().StateDir, func(c *dockercompat.CreateRecord) error {
						c.RestartPolicy = policy
						return nil
					})
				}
				return nil
			})
		},
	}
	fs := c.Flags()
	fs.StringVarP(&memory, "memory", "m", "", "memory limit (e.g. 512m, 2g; 0: none)")
	fs.Float64Var(&cpus, "cpus", 0, "number of CPUs (0: no limit)")
	fs.Int64Var(&pids, "pids-limit", 0, "maximum number of processes (0 or -1: no limit)")
	fs.StringVar(&restart, "restart", "", "restart policy: no, always, unless-stopped, on-failure[:N] (carried out at the next exit, with or without serve)")
	return c
}
