package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/dockercompat/service"
)

// openSandbox opens one sandbox; a missing one exits 1, as docker's
// "No such container" does.
func openSandbox(ref string) (*service.Container, error) {
	svc, err := openService()
	if err != nil {
		return nil, err
	}
	sb, err := svc.Open(ref)
	if err != nil {
		return nil, &exitError{code: 1, err: err}
	}
	return sb, nil
}

func logsCmd() *cobra.Command {
	var follow, timestamps bool
	var tail, since, until string
	c := &cobra.Command{
		Use:   "logs [-f] [--tail N] [-t] [--since T] [--until T] SANDBOX",
		Short: "Show the output of a sandbox's main command (run -d, start)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := service.LogWindow(tail, since, until, time.Now())
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			o.Follow, o.Timestamps = follow, timestamps
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			return sb.Logs(ctx, o, os.Stdout, os.Stderr)
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing output until the sandbox stops")
	c.Flags().StringVarP(&tail, "tail", "n", "all", "only the last N lines")
	c.Flags().BoolVarP(&timestamps, "timestamps", "t", false, "prefix each line with its time (RFC 3339)")
	c.Flags().StringVar(&since, "since", "", "only lines since a time (2006-01-02T15:04:05Z, Unix seconds) or a duration ago (10m)")
	c.Flags().StringVar(&until, "until", "", "only lines before a time (2006-01-02T15:04:05Z, Unix seconds) or a duration ago (10m)")
	return c
}

func waitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "wait SANDBOX...",
		Short: "Wait until sandboxes stop, then print their main command's exit code",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			var failed error
			svc, err := openService()
			if err != nil {
				return err
			}
			for _, ref := range args {
				sb, err := svc.Open(ref)
				if err != nil {
					fmt.Fprintln(os.Stderr, "slopbox:", err)
					failed = &exitError{code: 1, silent: true}
					continue
				}
				// The one wait of the CLI and the API, Docker's default
				// condition.
				code, err := svc.Wait(ctx, sb.ID(), service.WaitNotRunning)
				if err != nil {
					return err
				}
				fmt.Println(code)
			}
			return failed
		},
	}
}

func renameCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rename SANDBOX NEW_NAME",
		Short: "Rename a sandbox",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openService()
			if err != nil {
				return err
			}
			if err := b.Rename(args[0], args[1]); err != nil {
				return &exitError{code: 1, err: err}
			}
			return nil
		},
	}
}

// pauseCmd is docker pause and unpause (SIGSTOP/SIGCONT to every process
// but PID 1; see sandbox.Pause).
func pauseCmd(verb string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " SANDBOX...",
		Short: map[string]string{"pause": "Stop every process of sandboxes until unpause", "unpause": "Continue paused sandboxes"}[verb],
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if verb == "pause" {
				return eachSandbox(args, (*service.Container).Pause)
			}
			return eachSandbox(args, (*service.Container).Unpause)
		},
	}
}

func topCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "top SANDBOX",
		Short: "Show the processes of a sandbox (host pids)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			procs, err := sb.Processes()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			top := service.Top(procs, time.Now())
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(w, strings.Join(top.Titles, "\t"))
			for _, row := range top.Processes {
				fmt.Fprintln(w, strings.Join(row, "\t"))
			}
			return w.Flush()
		},
	}
}

func statsCmd() *cobra.Command {
	var noStream, all bool
	c := &cobra.Command{
		Use:   "stats [--no-stream] [SANDBOX...]",
		Short: "Show the CPU, memory and process use of sandboxes",
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openService()
			if err != nil {
				return err
			}
			if len(args) == 0 {
				list, err := b.ListContainers(service.ListOptions{All: true, Broken: true})
				if err != nil {
					return err
				}
				for _, i := range list {
					if i.Running || all {
						args = append(args, i.ID)
					}
				}
			}
			type sample struct {
				at  time.Time
				cpu time.Duration
			}
			prev := map[string]sample{}
			for {
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
				fmt.Fprintln(w, "SANDBOX ID\tNAME\tCPU %\tMEM USAGE / LIMIT\tMEM %\tPIDS")
				var failed error
				for _, ref := range args {
					sb, err := b.Open(ref)
					if err != nil {
						failed = &exitError{code: 1, err: err}
						continue
					}
					info := sb.Info()
					st, err := sb.Stats()
					if err != nil {
						fmt.Fprintf(w, "%s\t%s\t--\t-- / --\t--\t0\n", info.ID[:12], info.Name)
						continue
					}
					now := time.Now()
					// CPU % over the last interval, or since the start.
					p, ok := prev[info.ID]
					if !ok {
						p = sample{at: info.Created}
					}
					cpu := 100 * float64(st.CPU-p.cpu) / float64(max(now.Sub(p.at), time.Millisecond))
					prev[info.ID] = sample{now, st.CPU}
					limit, pct := "--", "--"
					if st.MemoryLimit > 0 {
						limit = bytesHuman(st.MemoryLimit)
						pct = fmt.Sprintf("%.2f%%", 100*float64(st.MemoryBytes)/float64(st.MemoryLimit))
					}
					fmt.Fprintf(w, "%s\t%s\t%.2f%%\t%s / %s\t%s\t%d\n", info.ID[:12], info.Name, cpu, bytesHuman(st.MemoryBytes), limit, pct, st.Pids)
				}
				w.Flush()
				if noStream || failed != nil {
					return failed
				}
				time.Sleep(time.Second)
			}
		},
	}
	c.Flags().BoolVar(&noStream, "no-stream", false, "print once and exit")
	c.Flags().BoolVarP(&all, "all", "a", false, "stopped sandboxes too")
	return c
}

func bytesHuman(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// containerCmd is docker's `container` group: the same verbs, under it.
func containerCmd() *cobra.Command {
	c := &cobra.Command{Use: "container", Short: "Manage sandboxes (docker's container group)"}
	ls := psCmd()
	ls.Use, ls.Aliases = "ls", []string{"list", "ps"}
	c.AddCommand(startsSandbox(runCmd()), startsSandbox(createCmd()), startCmd(), execCmd(), ls, killCmd(), stopCmd(), restartCmd(), rmCmd(), pruneCmd(),
		logsCmd(), waitCmd(), renameCmd(), topCmd(), statsCmd(), cpCmd(), inspectCmd(), portCmd(), pauseCmd("pause"), pauseCmd("unpause"))
	return c
}

// imagePruneCmd is docker's `image prune`: unreferenced blobs and layers go;
// with -a every image no sandbox uses goes too. There is no prompt (-f is
// accepted).
func imagePruneCmd() *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "prune [-a] [-f]",
		Short: "Remove unused image data (with -a, every image no sandbox uses)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return pruneImages(all)
		},
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "remove every image that no sandbox uses")
	c.Flags().BoolP("force", "f", false, "accepted: slopbox does not prompt")
	return c
}

func pruneImages(all bool) error {
	s, err := openStore()
	if err != nil {
		return err
	}
	if all {
		list, err := s.List()
		if err != nil {
			return err
		}
		for _, img := range list {
			names, err := s.Remove(img.Name)
			if err != nil {
				continue // in use by a sandbox: kept
			}
			for _, n := range names {
				fmt.Println("Untagged:", n)
			}
		}
	}
	// Build cache no image uses goes too, then what only it kept (GC).
	_, err = s.PruneBuildCache()
	return err
}

// systemPruneCmd is docker's `system prune`: stopped sandboxes, then image
// data (every unused image with -a).
func systemPruneCmd() *cobra.Command {
	var all bool
	sys := &cobra.Command{Use: "system", Short: "Manage slopbox (docker's system group)"}
	c := &cobra.Command{
		Use:   "prune [-a] [-f]",
		Short: "Remove stopped sandboxes and unused image data",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := stopPoolOfRoot(); err != nil {
				return err
			}
			b, err := openService()
			if err != nil {
				return err
			}
			ids, err := b.PruneAll()
			for _, id := range ids {
				fmt.Println("Deleted:", id)
			}
			if err != nil {
				return err
			}
			return pruneImages(all)
		},
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "also remove every image that no sandbox uses")
	c.Flags().BoolP("force", "f", false, "accepted: slopbox does not prompt")
	sys.AddCommand(c, infoCmd())
	return sys
}
