package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	rdebug "runtime/debug"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/sandbox/ociruntime"
)

// ociMain is the runc-compatible command line (`slopbox oci …`, or the
// binary invoked as slopbox-runc): the contract containerd's runc shim
// and the runtime-spec's validation tools use. It returns the exit status.
func ociMain(args []string) int {
	// Most invocations live a few milliseconds (containerd's shim runs
	// create, start, state, delete per container): no collection is worth
	// its cost there. The two that can run long, events without --stats
	// and an attached exec, turn it back on (as GOGC had it).
	gcPercent := rdebug.SetGCPercent(-1)
	var rt ociruntime.Runtime
	var logPath, logFormat, rootless string
	var debug, criu bool
	root := &cobra.Command{
		Use:           "slopbox-runc",
		Short:         "slopbox as an OCI runtime (runc's command line)",
		Version:       version + "\nspec: " + specs.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return ociruntime.SetupLog(logPath, logFormat, debug)
		},
	}
	root.SetVersionTemplate("slopbox-runc version {{.Version}}\n")
	f := root.PersistentFlags()
	f.StringVar(&rt.Root, "root", ociruntime.DefaultRoot(), "directory for the containers' state")
	f.StringVar(&logPath, "log", "", "log file (containerd's shim reads the last error from it)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.BoolVar(&rt.SystemdCgroup, "systemd-cgroup", false, "cgroups through systemd (the bundle's cgroupsPath is slice:prefix:name)")
	f.BoolVar(&debug, "debug", false, "debug logging")
	f.StringVar(&rootless, "rootless", "auto", "accepted for runc compatibility: rootless is decided by the caller's uid")
	f.BoolVar(&criu, "criu", false, "accepted for runc compatibility; checkpoint/restore is not supported")
	f.MarkHidden("criu")

	one := func(use, short string, run func(id string) error) *cobra.Command {
		return &cobra.Command{Use: use + " ID", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(_ *cobra.Command, a []string) error { return run(a[0]) }}
	}

	state := one("state", "print the container's state (JSON)", func(id string) error {
		st, err := rt.State(id)
		if err != nil {
			return err
		}
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Println(string(b))
		return nil
	})

	var force bool
	del := &cobra.Command{Use: "delete [--force] ID", Short: "remove a stopped (or, forced, running) container", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error { return rt.Delete(a[0], force) }}
	del.Flags().BoolVarP(&force, "force", "f", false, "kill a running container first")

	features := &cobra.Command{Use: "features", Short: "print the runtime's features (JSON)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b, _ := json.MarshalIndent(ociruntime.Features(), "", "    ")
			fmt.Println(string(b))
			return nil
		}}

	var code int
	root.AddCommand(ociSpecCmd(), ociCreateCmd(&rt), one("start", "start a created container's process", rt.Start), state, ociKillCmd(&rt), del, ociExecCmd(&rt, gcPercent, &code), ociPsCmd(&rt),
		one("pause", "freeze every process of the container", rt.Pause), one("resume", "thaw a paused container", rt.Resume), features, ociUpdateCmd(&rt), ociEventsCmd(&rt, gcPercent))
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		if logPath != "" {
			ociruntime.LogError(err)
		}
		fmt.Fprintln(os.Stderr, "slopbox-runc:", err)
		return 1
	}
	return code
}

// ociCreateCmd is create: a container set up from a bundle.
func ociCreateCmd(rt *ociruntime.Runtime) *cobra.Command {
	var co ociruntime.CreateOpts
	var preserveFDs int
	create := &cobra.Command{Use: "create [flags] ID", Short: "set a container up from a bundle, its process waiting for start", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			if preserveFDs > 0 {
				return errors.New("--preserve-fds is not supported")
			}
			return rt.Create(a[0], co)
		}}
	create.Flags().StringVarP(&co.Bundle, "bundle", "b", ".", "the bundle's directory (config.json, rootfs)")
	create.Flags().StringVar(&co.PidFile, "pid-file", "", "write the container process's pid here")
	create.Flags().StringVar(&co.ConsoleSocket, "console-socket", "", "unix socket that receives the terminal's master")
	create.Flags().BoolVar(&co.NoPivot, "no-pivot", false, "do not pivot_root (ramdisk roots)")
	create.Flags().BoolVar(&co.NoNewKeyring, "no-new-keyring", false, "keep the caller's session keyring")
	create.Flags().IntVar(&preserveFDs, "preserve-fds", 0, "not supported")
	return create
}

// ociKillCmd is kill.
func ociKillCmd(rt *ociruntime.Runtime) *cobra.Command {
	var killAll bool
	kill := &cobra.Command{Use: "kill [--all] ID [SIGNAL]", Short: "signal the container's process (default SIGTERM)", Args: cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, a []string) error {
			s := "SIGTERM"
			if len(a) == 2 {
				s = a[1]
			}
			sig, err := backend.ParseSignal(s)
			if err != nil {
				return err
			}
			return rt.Kill(a[0], sig, killAll)
		}}
	kill.Flags().BoolVarP(&killAll, "all", "a", false, "signal every process of the container")
	return kill
}

// ociExecCmd is exec; code is where its exit status goes, and the collector is set back to gcPercent unless it detaches.
func ociExecCmd(rt *ociruntime.Runtime, gcPercent int, code *int) *cobra.Command {
	var eo ociruntime.ExecOpts
	var ef ociruntime.ExecFlags
	var procFile string
	var noNewPrivs bool
	var gids []uint
	execC := &cobra.Command{Use: "exec [flags] ID [COMMAND [ARG...]]", Short: "run a process in a running container", Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			var p *specs.Process
			var err error
			switch {
			case procFile != "":
				p, err = readProcess(procFile)
			case len(a) < 2:
				err = errors.New("exec needs a command or --process")
			default:
				for _, g := range gids {
					ef.AdditionalGids = append(ef.AdditionalGids, uint32(g))
				}
				p, err = rt.ExecProcess(a[0], a[1:], ef)
			}
			if err != nil {
				return err
			}
			if !eo.Detach {
				rdebug.SetGCPercent(gcPercent)
			}
			*code, err = rt.Exec(a[0], p, eo)
			return err
		}}
	execC.Flags().SetInterspersed(false)
	execC.Flags().StringVarP(&procFile, "process", "p", "", "the process as runtime-spec JSON")
	execC.Flags().BoolVarP(&eo.Detach, "detach", "d", false, "return once it has started")
	execC.Flags().StringVar(&eo.PidFile, "pid-file", "", "write its pid here")
	execC.Flags().StringVar(&eo.ConsoleSocket, "console-socket", "", "unix socket that receives the terminal's master")
	execC.Flags().BoolVarP(&ef.Tty, "tty", "t", false, "give it a terminal (with --console-socket)")
	execC.Flags().StringVar(&ef.Cwd, "cwd", "", "working directory (default: the bundle process's)")
	execC.Flags().StringArrayVarP(&ef.Env, "env", "e", nil, "KEY=VALUE to add to the bundle process's environment")
	execC.Flags().StringVarP(&ef.User, "user", "u", "", "UID[:GID] (default: the bundle process's)")
	execC.Flags().UintSliceVarP(&gids, "additional-gids", "g", nil, "more groups")
	execC.Flags().StringArrayVarP(&ef.Caps, "cap", "c", nil, "a capability to add")
	execC.Flags().BoolVar(&noNewPrivs, "no-new-privs", true, "accepted: slopbox always sets no_new_privileges on exec")
	return execC
}

// ociUpdateCmd is update: a container's cgroup limits.
func ociUpdateCmd(rt *ociruntime.Runtime) *cobra.Command {
	var resources string
	var upd struct {
		memory, swap, reservation, quota, period, shares, pids, weight string
	}
	var cpus, mems string
	update := &cobra.Command{Use: "update [flags] ID", Short: "change a container's cgroup limits", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			var res *specs.LinuxResources
			var err error
			if resources != "" {
				res, err = ociruntime.ReadResources(resources, os.Stdin)
			} else {
				res, err = ociruntime.ResourcesFromFlags(map[string]string{
					"memory": upd.memory, "memory-swap": upd.swap, "memory-reservation": upd.reservation,
					"cpu-quota": upd.quota, "cpu-period": upd.period, "cpu-share": upd.shares,
					"pids-limit": upd.pids, "blkio-weight": upd.weight, "cpuset-cpus": cpus, "cpuset-mems": mems,
				})
			}
			if err != nil {
				return err
			}
			return rt.Update(a[0], res)
		}}
	uf := update.Flags()
	uf.StringVarP(&resources, "resources", "r", "", "a runtime-spec LinuxResources JSON file, or - for stdin (the other flags are then ignored)")
	uf.StringVar(&upd.memory, "memory", "", "memory limit (bytes, or with a unit: 512m; -1 for none)")
	uf.StringVar(&upd.swap, "memory-swap", "", "memory plus swap limit")
	uf.StringVar(&upd.reservation, "memory-reservation", "", "memory soft limit")
	uf.StringVar(&upd.quota, "cpu-quota", "", "CFS quota (µs per period; -1 for none)")
	uf.StringVar(&upd.period, "cpu-period", "", "CFS period (µs)")
	uf.StringVar(&upd.shares, "cpu-share", "", "CPU shares")
	uf.StringVar(&cpus, "cpuset-cpus", "", "CPUs it may use (0-3, 0,1)")
	uf.StringVar(&mems, "cpuset-mems", "", "memory nodes it may use")
	uf.StringVar(&upd.pids, "pids-limit", "", "most processes at once")
	uf.StringVar(&upd.weight, "blkio-weight", "", "block IO weight (10 to 1000)")
	return update
}

// ociEventsCmd is events; the collector is set back to gcPercent unless --stats.
func ociEventsCmd(rt *ociruntime.Runtime, gcPercent int) *cobra.Command {
	var statsOnce bool
	var interval time.Duration
	events := &cobra.Command{Use: "events [--stats] [--interval D] ID", Short: "print the container's resource usage as JSON events", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			if !statsOnce {
				rdebug.SetGCPercent(gcPercent)
			}
			return rt.Events(a[0], statsOnce, interval, os.Stdout)
		}}
	events.Flags().BoolVar(&statsOnce, "stats", false, "print the stats once and exit")
	events.Flags().DurationVar(&interval, "interval", 5*time.Second, "how often to print them")
	return events
}

// ociPsCmd is ps.
func ociPsCmd(rt *ociruntime.Runtime) *cobra.Command {
	var psFormat string
	ps := &cobra.Command{Use: "ps [--format table|json] ID", Short: "list the container's processes", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			pids, err := rt.Ps(a[0])
			if err != nil {
				return err
			}
			if psFormat == "json" {
				if pids == nil {
					pids = []int{}
				}
				return json.NewEncoder(os.Stdout).Encode(pids)
			}
			fmt.Println("PID")
			for _, p := range pids {
				fmt.Println(p)
			}
			return nil
		}}
	ps.Flags().StringVarP(&psFormat, "format", "f", "table", "table or json")
	return ps
}

// ociSpecCmd is spec: an example config.json.
func ociSpecCmd() *cobra.Command {
	var specBundle string
	var specRootless bool
	specC := &cobra.Command{Use: "spec [--bundle DIR] [--rootless]", Short: "write an example config.json", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			// Never through a symlink at the name or on the way.
			path := filepath.Join(specBundle, "config.json")
			f, err := atomicfile.CreateOutput(path, 0o666)
			if err != nil {
				return fmt.Errorf("spec: %w", err)
			}
			defer f.Close()
			if f.Previous() != nil {
				return fmt.Errorf("file %s exists: remove it first", path)
			}
			b, _ := json.MarshalIndent(ociruntime.ExampleSpec(specRootless), "", "\t")
			if _, err := f.Write(append(b, '\n')); err != nil {
				return err
			}
			return f.Commit()
		}}
	specC.Flags().StringVarP(&specBundle, "bundle", "b", ".", "the bundle's directory")
	specC.Flags().BoolVar(&specRootless, "rootless", false, "for a container run by an unprivileged user")
	return specC
}

// readProcess reads exec's --process JSON.
func readProcess(path string) (*specs.Process, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p specs.Process
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("--process: %w", err)
	}
	return &p, nil
}
