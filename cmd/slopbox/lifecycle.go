package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/go-units"
	"github.com/spf13/cobra"
	"golang.org/x/text/width"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/dockercompat/filters"
	"github.com/slopbox/slopbox/dockercompat/service"
)

func createCmd() *cobra.Command {
	var sf spawnFlags
	var o service.DetachOptions
	var rm bool
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
			svc, err := openService()
			if err != nil {
				return err
			}
			img, err := ensureImage(ctx, svc, args[0])
			if err != nil {
				return err
			}
			spec, opts, err := sf.spec(cmd.Flags(), args[0], args[1:])
			if err != nil {
				return err
			}
			if err := dockercompat.CheckRestartPolicy(opts.RestartPolicy, rm); err != nil {
				return err // --rm with a restart policy, as Docker refuses it
			}
			spec.AutoRemove = rm // as docker create --rm: removed when its command ends or it is stopped
			res, err := svc.CreateContainer(ctx, service.CreateRequest{Spec: spec, Options: opts, Image: img, Detach: o})
			if err != nil {
				return err
			}
			for _, w := range res.Warnings {
				fmt.Fprintln(os.Stderr, "WARNING:", w)
			}
			sb := res.Container
			fmt.Println(sb.ID())
			return nil
		},
	}
	c.Flags().SetInterspersed(false)
	sf.register(c.Flags())
	c.Flags().BoolVarP(&o.TTY, "tty", "t", false, "run the command on a terminal of the sandbox's own (see logs)")
	c.Flags().BoolVarP(&o.OpenStdin, "interactive", "i", false, "keep the command's stdin open")
	c.Flags().BoolVar(&rm, "rm", false, "remove the sandbox when its command exits or it is stopped")
	return c
}

// eachSandbox applies f to every named sandbox and joins the errors.
func eachSandbox(args []string, f func(*service.Container) error) error {
	svc, err := openService()
	if err != nil {
		return err
	}
	var errs []error
	for _, ref := range args {
		sb, err := svc.Open(ref)
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
			return eachSandbox(args, func(sb *service.Container) error {
				return sb.Start(ctx, service.AttachedStart{})
			})
		},
	}
}

func stopCmd() *cobra.Command {
	var grace int
	var sigName string
	c := &cobra.Command{
		Use:   "stop [-t SECONDS] [-s SIGNAL] SANDBOX...",
		Short: "Stop sandboxes: the stop signal to the main command, then every process is killed after the grace period; their files are kept",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sigName != "" {
				if _, err := backend.ParseSignal(sigName); err != nil {
					return err
				}
			}
			ctx, cancel := signalContext()
			defer cancel()
			var t *int // without -t: the container's StopTimeout, else 10 s
			if cmd.Flags().Changed("time") {
				t = &grace
			}
			return eachSandbox(args, func(sb *service.Container) error {
				sig, grace, err := sb.StopPlan(sigName, t)
				if err != nil {
					return err
				}
				_, err = sb.Stop(ctx, sig, grace)
				return err
			})
		},
	}
	stopFlags(c, &grace, &sigName)
	return c
}

// stopFlags are stop's and restart's -t and -s.
func stopFlags(c *cobra.Command, grace *int, sigName *string) {
	c.Flags().IntVarP(grace, "time", "t", dockercompat.DefaultStopTimeout, "seconds to wait for the main command to exit before killing every process (default: the container's --stop-timeout, else 10; -1 waits for ever)")
	c.Flags().StringVarP(sigName, "signal", "s", "", "signal sent to the main command first (default: the container's --stop-signal or its image's STOPSIGNAL, else TERM)")
}

func restartCmd() *cobra.Command {
	var grace int
	var sigName string
	c := &cobra.Command{
		Use:   "restart [-t SECONDS] [-s SIGNAL] SANDBOX...",
		Short: "Restart sandboxes: stopped as stop does when they run, then started",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sigName != "" {
				if _, err := backend.ParseSignal(sigName); err != nil {
					return err
				}
			}
			ctx, cancel := signalContext()
			defer cancel()
			var t *int
			if cmd.Flags().Changed("time") {
				t = &grace
			}
			return eachSandbox(args, func(sb *service.Container) error { return sb.Restart(ctx, sigName, t) })
		},
	}
	stopFlags(c, &grace, &sigName)
	return c
}

func killCmd() *cobra.Command {
	var sigName string
	c := &cobra.Command{
		Use:   "kill [-s SIGNAL] SANDBOX...",
		Short: "Kill sandboxes (SIGKILL: every process, like stop), or send their main command a signal",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sig, err := backend.ParseSignal(sigName)
			if err != nil {
				return err
			}
			return eachSandbox(args, func(sb *service.Container) error { return sb.Kill(sig) })
		},
	}
	c.Flags().StringVarP(&sigName, "signal", "s", "KILL", "signal: KILL stops the sandbox; TERM, HUP, INT, USR1, … go to the main command's processes (run -d)")
	return c
}

func rmCmd() *cobra.Command {
	var force, volumes bool
	c := &cobra.Command{
		Use:   "rm [-f] [-v] SANDBOX...",
		Short: "Remove sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSandbox(args, func(sb *service.Container) error {
				return sb.RemoveByHand(force, volumes)
			})
		},
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "remove running sandboxes too")
	c.Flags().BoolVarP(&volumes, "volumes", "v", false, "remove the anonymous volumes (-v /path) of the sandboxes too")
	return c
}

func pruneCmd() *cobra.Command {
	var filterFlags []string
	var yes bool
	c := &cobra.Command{
		Use:   "prune [--filter KEY=VALUE]...",
		Short: "Remove stopped sandboxes and what killed slopbox processes left behind",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := filters.FromFlags(filterFlags)
			if err != nil {
				return err
			}
			if err := stopPoolOfRoot(); err != nil {
				return err
			}
			svc, err := openService()
			if err != nil {
				return err
			}
			rep, err := svc.PruneContainers(f)
			for _, id := range rep.Deleted {
				fmt.Println("Deleted:", id)
			}
			if gcErr := svc.Store().GC(); err == nil {
				err = gcErr
			}
			return err
		},
	}
	c.Flags().StringArrayVar(&filterFlags, "filter", nil, "only sandboxes matching (Docker's prune filters): until=TIME, label=KEY[=VALUE], label!=KEY[=VALUE]")
	c.Flags().BoolVarP(&yes, "force", "f", false, "do not prompt for confirmation (slopbox never prompts)")
	return c
}

func psCmd() *cobra.Command {
	var all, quiet, asJSON, noTrunc, pool bool
	var filterFlags []string
	var format string
	c := &cobra.Command{
		Use:   "ps [-a] [--filter KEY=VALUE]... [--format TEMPLATE]",
		Short: "List sandboxes with their age and idle time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pool {
				return listPool()
			}
			f, err := filters.FromFlags(filterFlags)
			if err != nil {
				return err
			}
			tmpl, err := parseListTemplate("ps", format)
			if err != nil {
				return err
			}
			svc, err := openService()
			if err != nil {
				return err
			}
			shown, err := svc.ListContainers(service.ListOptions{All: all, Filters: f, Broken: true})
			if err != nil {
				return err
			}
			switch {
			case asJSON || format == "json":
				if format == "json" {
					for _, i := range shown {
						b, _ := json.Marshal(row(i, noTrunc))
						fmt.Println(string(b))
					}
					return nil
				}
				printJSON(shown)
			case quiet && (format == "" || format == "table"):
				// As docker ps -q: the short id, unless --no-trunc; a
				// format of one's own wins over -q, as docker's does.
				for _, i := range shown {
					fmt.Println(row(i, noTrunc).ID)
				}
			case tmpl != nil:
				rows := make([]psRow, len(shown))
				for n, i := range shown {
					rows[n] = row(i, noTrunc)
				}
				return writeList(tmpl, psHeader, rows)
			default:
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
				fmt.Fprintln(w, "SANDBOX ID\tIMAGE\tCOMMAND\tCREATED\tSTATUS\tIDLE\tPORTS\tNAMES")
				for _, i := range shown {
					r := row(i, noTrunc)
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Image, r.Command, r.RunningFor, r.Status, human(time.Since(i.LastExec)), r.Ports, r.Names)
				}
				w.Flush()
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "show stopped sandboxes too")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "only ids")
	c.Flags().BoolVar(&noTrunc, "no-trunc", false, "whole ids and commands")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&pool, "pool", false, "list the sandboxes kept ready (slopbox pool keep) instead")
	c.Flags().StringArrayVarP(&filterFlags, "filter", "f", nil, "only sandboxes matching (Docker's rules: one key's values OR, keys and labels AND): id=, name=, label=KEY[=VALUE], status=created|running|paused|exited|dead, exited=CODE, ancestor=IMAGE, before=, since=, network=, volume=, publish=, expose=")
	c.Flags().StringVar(&format, "format", "", "Go template over .ID .Image .Command .CreatedAt .RunningFor .Status .State .Ports .Names .Labels (\"table …\" adds a header; \"json\": one object a line)")
	return c
}

// psRow is one sandbox as ps --format sees it (docker's field names).
type psRow struct {
	ID, Image, Command, CreatedAt, RunningFor, Status, State, Ports, Names, Labels string
}

var psHeader = psRow{ID: "SANDBOX ID", Image: "IMAGE", Command: "COMMAND", CreatedAt: "CREATED AT", RunningFor: "CREATED",
	Status: "STATUS", State: "STATE", Ports: "PORTS", Names: "NAMES", Labels: "LABELS"}

// row is i as ps shows it. As docker's: the command as dockerd lists it,
// quoted, and unless noTrunc the id's first 12 characters, the command
// cut to 20 columns and the image without its digest (an image named by
// its id, that id's first 12).
func row(i service.Info, noTrunc bool) psRow {
	id, img, command := i.ID, service.ImageName(i), service.Command(i)
	if !noTrunc {
		id = id[:min(12, len(id))]
		img = shortImage(img)
		command = ellipsis(command, 20)
	}
	r := psRow{ID: id, Image: img, Command: strconv.Quote(command), Names: i.Name,
		CreatedAt: i.Created.Format("2006-01-02 15:04:05 -0700 MST"), RunningFor: units.HumanDuration(time.Since(i.Created)) + " ago",
		State: service.State(i), Status: service.Status(i)}
	var labels []string
	for k, v := range i.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	r.Labels = strings.Join(labels, ",")
	if i.Running {
		var ports []string
		for _, p := range i.Ports {
			ports = append(ports, p.String())
		}
		r.Ports = strings.Join(ports, ", ")
	}
	return r
}

// shortImage is an image reference without its digest (name:tag@sha256:…
// is name:tag), or an image id's first 12 hex digits; docker ps's
// <no image> for none.
func shortImage(ref string) string {
	if ref == "" {
		return "<no image>"
	}
	if hex := strings.TrimPrefix(ref, "sha256:"); len(hex) == 64 && strings.Trim(hex, "0123456789abcdef") == "" {
		return hex[:12]
	}
	if name, _, ok := strings.Cut(ref, "@"); ok {
		return name
	}
	return ref
}

// ellipsis is s cut to n columns, its last an ellipsis, when it is wider:
// as docker's, an East Asian wide or fullwidth character takes two.
func ellipsis(s string, n int) string {
	cols := 0
	for _, r := range s {
		cols += columns(r)
	}
	if cols <= n {
		return s
	}
	cols = 0
	for i, r := range s {
		if cols+columns(r) > n-1 {
			return s[:i] + "…"
		}
		cols += columns(r)
	}
	return s
}

// columns is how many columns a terminal gives r.
func columns(r rune) int {
	if k := width.LookupRune(r).Kind(); k == width.EastAsianWide || k == width.EastAsianFullwidth {
		return 2
	}
	return 1
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
