package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/sandbox/ociruntime"
)

// ociMain is the runc-compatible command line (`slopbox oci …`, or the
// binary invoked as slopbox-runc): the contract containerd's runc shim
// and the runtime-spec's validation tools use. It returns the exit status.
func ociMain(args []string) int {
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

	state := one("state", "print the container's state (JSON)", func(id string) error {
		st, err := rt.State(id)
		if err != nil {
			return err
		}
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Println(string(b))
		return nil
	})

	var killAll bool
	kill := &cobra.Command{Use: "kill [--all] ID [SIGNAL]", Short: "signal the container's process (default SIGTERM)", Args: cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, a []string) error {
			s := "SIGTERM"
			if len(a) == 2 {
				s = a[1]
			}
			sig, err := ociruntime.ParseSignal(s)
			if err != nil {
				return err
			}
			return rt.Kill(a[0], sig, killAll)
		}}
	kill.Flags().BoolVarP(&killAll, "all", "a", false, "signal every process of the container")

	var force bool
	del := &cobra.Command{Use: "delete [--force] ID", Short: "remove a stopped (or, forced, running) container", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error { return rt.Delete(a[0], force) }}
	del.Flags().BoolVarP(&force, "force", "f", false, "kill a running container first")

	var eo ociruntime.ExecOpts
	var procFile, cwd, user string
	var env []string
	var tty bool
	var code int
	execC := &cobra.Command{Use: "exec [flags] ID [COMMAND [ARG...]]", Short: "run a process in a running container", Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			p, err := execProcess(a, procFile, cwd, user, env, tty)
			if err != nil {
				return err
			}
			code, err = rt.Exec(a[0], p, eo)
			return err
		}}
	execC.Flags().SetInterspersed(false)
	execC.Flags().StringVarP(&procFile, "process", "p", "", "the process as runtime-spec JSON")
	execC.Flags().BoolVarP(&eo.Detach, "detach", "d", false, "return once it has started")
	execC.Flags().StringVar(&eo.PidFile, "pid-file", "", "write its pid here")
	execC.Flags().StringVar(&eo.ConsoleSocket, "console-socket", "", "unix socket that receives the terminal's master")
	execC.Flags().BoolVarP(&tty, "tty", "t", false, "give it a terminal (with --console-socket)")
	execC.Flags().StringVar(&cwd, "cwd", "", "working directory")
	execC.Flags().StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE to add")
	execC.Flags().StringVarP(&user, "user", "u", "", "UID[:GID]")

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

	features := &cobra.Command{Use: "features", Short: "print the runtime's features (JSON)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b, _ := json.MarshalIndent(ociruntime.Features(), "", "    ")
			fmt.Println(string(b))
			return nil
		}}

	var specBundle string
	var specRootless bool
	specC := &cobra.Command{Use: "spec [--bundle DIR] [--rootless]", Short: "write an example config.json", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			path := filepath.Join(specBundle, "config.json")
			if _, err := os.Stat(path); err == nil {
				return fmt.Errorf("file %s exists: remove it first", path)
			}
			b, _ := json.MarshalIndent(ociruntime.ExampleSpec(specRootless), "", "\t")
			return os.WriteFile(path, append(b, '\n'), 0o666)
		}}
	specC.Flags().StringVarP(&specBundle, "bundle", "b", ".", "the bundle's directory")
	specC.Flags().BoolVar(&specRootless, "rootless", false, "for a container run by an unprivileged user")

	root.AddCommand(specC, create, one("start", "start a created container's process", rt.Start), state, kill, del, execC, ps,
		one("pause", "freeze every process of the container", rt.Pause), one("resume", "thaw a paused container", rt.Resume), features)
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

// execProcess is exec's process: --process's JSON, or the command line's.
func execProcess(args []string, procFile, cwd, user string, env []string, tty bool) (*specs.Process, error) {
	var p specs.Process
	if procFile != "" {
		b, err := os.ReadFile(procFile)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("--process: %w", err)
		}
		return &p, nil
	}
	if len(args) < 2 {
		return nil, errors.New("exec needs a command or --process")
	}
	p.Args, p.Cwd, p.Terminal = args[1:], cwd, tty
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	p.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	if user != "" {
		u, g, _ := strings.Cut(user, ":")
		var uid, gid uint32
		if _, err := fmt.Sscan(u, &uid); err != nil {
			return nil, fmt.Errorf("--user %q: want UID[:GID]", user)
		}
		if g != "" {
			if _, err := fmt.Sscan(g, &gid); err != nil {
				return nil, fmt.Errorf("--user %q: want UID[:GID]", user)
			}
		}
		p.User = specs.User{UID: uid, GID: gid}
	}
	return &p, nil
}
