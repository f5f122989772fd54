package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/sandbox"
)

func createCmd() *cobra.Command {
	var sf spawnFlags
	var o sandbox.DetachOptions
	c := &cobra.Command{
		Use:   "create [flags] IMAGE [COMMAND [ARG...]]",
		Short: "Create a sandbox without starting it",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			if _, err := sf.limits(); err != nil {
				return err
			}
			b, err := openBackend()
			if err != nil {
				return err
			}
			img, err := ensureImage(ctx, b, args[0])
			if err != nil {
				return err
			}
			spec, err := sf.spec(args[0])
			if err != nil {
				return err
			}
			sb, err := b.Create(ctx, spec, imageCommand(img, args[1:]))
			if err != nil {
				return err
			}
			if o != (sandbox.DetachOptions{}) {
				if err := sb.SetDetachOptions(o); err != nil {
					sb.Remove()
					return err
				}
			}
			fmt.Println(sb.ID())
			return nil
		},
	}
	c.Flags().SetInterspersed(false)
	sf.register(c.Flags())
	c.Flags().BoolVarP(&o.TTY, "tty", "t", false, "run the command on a terminal of the sandbox's own (see logs)")
	c.Flags().BoolVarP(&o.OpenStdin, "interactive", "i", false, "keep the command's stdin open")
	return c
}

// eachSandbox applies f to every named sandbox and joins the errors.
func eachSandbox(args []string, f func(*sandbox.Sandbox) error) error {
	b, err := openBackend()
	if err != nil {
		return err
	}
	var errs []error
	for _, ref := range args {
		sb, err := b.Open(ref)
		if err == nil {
			err = f(sb)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Println(ref)
	}
	if len(errs) > 0 {
		return &exitError{code: 1, err: errors.Join(errs...)}
	}
	return nil
}

func startCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "start SANDBOX...",
		Short: "Start created or stopped sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return eachSandbox(args, func(sb *sandbox.Sandbox) error { return sb.Start(ctx) })
		},
	}
}

func stopCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "stop SANDBOX...",
		Short: "Stop sandboxes (every process in them); their files are kept",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSandbox(args, func(sb *sandbox.Sandbox) error { return sb.Stop() })
		},
	}
	c.Flags().IntP("time", "t", 0, "accepted for compatibility; processes are killed at once")
	return c
}

func killCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "kill SANDBOX...",
		Short: "Kill every process in sandboxes (like stop)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSandbox(args, func(sb *sandbox.Sandbox) error { return sb.Stop() })
		},
	}
	c.Flags().StringP("signal", "s", "KILL", "accepted for compatibility; SIGKILL is always used")
	return c
}

func rmCmd() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "rm [-f] SANDBOX...",
		Short: "Remove sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSandbox(args, func(sb *sandbox.Sandbox) error {
				if sb.Running() && !force {
					return fmt.Errorf("cannot remove running sandbox %s: stop it first or use rm -f", sb.Name())
				}
				return sb.Remove()
			})
		},
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "remove running sandboxes too")
	return c
}

func pruneCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "prune",
		Short: "Remove stopped sandboxes and what killed slopbox processes left behind",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openBackend()
			if err != nil {
				return err
			}
			ids, err := b.Prune(false)
			for _, id := range ids {
				fmt.Println("Deleted:", id)
			}
			if gcErr := b.Store().GC(); err == nil {
				err = gcErr
			}
			return err
		},
	}
}

func psCmd() *cobra.Command {
	var all, quiet, asJSON bool
	c := &cobra.Command{
		Use:   "ps [-a]",
		Short: "List sandboxes with their age and idle time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openBackend()
			if err != nil {
				return err
			}
			list, err := b.List()
			if err != nil {
				return err
			}
			var shown []sandbox.Info
			for _, i := range list {
				if all || i.Running {
					shown = append(shown, i)
				}
			}
			switch {
			case asJSON:
				if shown == nil {
					shown = []sandbox.Info{}
				}
				printJSON(shown)
			case quiet:
				for _, i := range shown {
					fmt.Println(i.ID)
				}
			default:
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
				fmt.Fprintln(w, "SANDBOX ID\tIMAGE\tCOMMAND\tCREATED\tSTATUS\tIDLE\tNAMES")
				for _, i := range shown {
					status := "Exited"
					if !i.FinishedAt.IsZero() {
						status = fmt.Sprintf("Exited (%d) %s ago", i.ExitCode, human(time.Since(i.FinishedAt)))
					}
					if i.Broken != "" {
						status = "Broken: " + i.Broken
					} else if i.Running {
						status = "Up " + human(time.Since(i.Created))
					} else if i.Pid == 0 {
						status = "Created"
					}
					command := strings.Join(i.Command, " ")
					if len(command) > 24 {
						command = command[:23] + "…"
					}
					fmt.Fprintf(w, "%s\t%s\t%q\t%s ago\t%s\t%s\t%s\n", i.ID[:12], i.Image, command, human(time.Since(i.Created)), status, human(time.Since(i.LastExec)), i.Name)
				}
				w.Flush()
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "show stopped sandboxes too")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "only ids")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func human(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
