package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/local"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/sandbox"
)

func envCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "env",
		Short: "Run SlopCodeBench environment specs (configs/environments/*.yaml)",
	}
	c.AddCommand(envRunCmd(), envShellCmd())
	return c
}

// envFlags are what env run and env shell take besides the spec.
type envFlags struct {
	workspace, image, entry string
	eval                    bool
	assets, ports, env      []string
	// The operator's leave, which neither a spec nor a config can give
	// itself: allowUnsafe and allowHostLoopback as run's flags,
	// allowSpec for what a spec asks for under a policy file.
	allowUnsafe       []string
	allowHostLoopback bool
	allowSpec         dockercompat.SpecAllowances
	// allowVolumes: an rlm_code config's named volumes and --volumes-from.
	allowVolumes bool
}

func (f *envFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.workspace, "workspace", "", "host workspace directory (required)")
	c.Flags().BoolVar(&f.eval, "eval", false, "evaluation context: eval_commands run, the user defaults to 1000:1000")
	c.Flags().StringVar(&f.image, "image", "", "run this image instead of docker.image")
	c.Flags().StringArrayVar(&f.assets, "asset", nil, "static asset NAME=PATH, mounted read-only at /static/NAME ({{static:NAME}} in the command)")
	c.Flags().StringArrayVar(&f.ports, "port", nil, "publish HOST:CONTAINER (docker -p syntax, {host: container} as SlopCodeBench's exec runtime; on 127.0.0.1; ignored with network: host and type: local, as upstream)")
	c.Flags().StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE")
	c.Flags().StringArrayVar(&f.allowUnsafe, "allow-unsafe", nil, "allow one weakening the policy refuses, as run's flag (a spec or config cannot allow its own)")
	c.Flags().BoolVar(&f.allowHostLoopback, "allow-host-loopback", false, "with a bridge network: let the sandbox reach the host's loopback (at 10.0.2.2)")
	c.Flags().BoolVar(&f.allowSpec.Local, "allow-local", false, "under a policy file: let a spec be type: local (policy key allow_local)")
	c.Flags().BoolVar(&f.allowSpec.HostNetwork, "allow-host-network", false, "under a policy file: let a spec use network: host (policy key allow_host_network)")
	c.Flags().BoolVar(&f.allowSpec.OSEnv, "allow-os-env", false, "under a policy file: let a spec pass this process's environment in, include_os_env; an rlm_code config's env_allowlist the named variables (policy key allow_os_env)")
	c.Flags().BoolVar(&f.allowVolumes, "allow-volumes", false, "let an rlm_code config's extra_args use named volumes and --volumes-from (policy key allow_volumes)")
}

// open loads the spec and makes the sandbox it describes, or the local
// runtime for type: local.
func (f *envFlags) open(cmd *cobra.Command, file string) (*dockercompat.Spec, backend.Sandbox, []dockercompat.StaticAsset, func(), error) {
	spec, err := dockercompat.LoadSpec(file)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if f.workspace == "" {
		return nil, nil, nil, nil, fmt.Errorf("--workspace DIR is required")
	}
	var ports []backend.PortMapping
	for _, p := range f.ports {
		pm, err := dockercompat.ParsePort(p)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("--port: %w", err)
		}
		ports = append(ports, pm)
	}
	var assets []dockercompat.StaticAsset
	for _, a := range f.assets {
		name, p, ok := strings.Cut(a, "=")
		if !ok || name == "" || p == "" {
			return nil, nil, nil, nil, fmt.Errorf("--asset %q: want NAME=PATH", a)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("--asset %s: %w", name, err)
		}
		assets = append(assets, dockercompat.StaticAsset{Name: name, Source: abs, SavePath: name, IsDir: fi.IsDir()})
	}
	env, err := parseEnv(f.env)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ws, err := workspaceAbs(f.workspace)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	sp, err := spec.SpawnSpec(dockercompat.SpawnOptions{Workspace: ws, Evaluation: f.eval, Image: f.image,
		Assets: assets, Env: env, AgentUser: backend.AgentUserFromEnv()})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	pol, err := loadPolicy()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	// Before anything is pulled, created or run.
	if err := pol.CheckSpec(spec, sp, f.allowSpec); err != nil {
		return nil, nil, nil, nil, err
	}
	if sp.Network != backend.NetworkHost {
		sp.Ports = ports // _resolve_ports: none in host mode
	}
	pol.ApplySpec(&sp)
	sp.Unsafe = append(sp.Unsafe, f.allowUnsafe...)
	sp.AllowHostLoopback = f.allowHostLoopback
	ctx, cancel := signalContext()
	defer cancel()
	var b backend.Backend
	var s backend.Sandbox
	if spec.Type == "local" {
		b = local.New()
		s, err = b.Spawn(ctx, sp)
	} else {
		sb, oerr := openBackend()
		if oerr != nil {
			return nil, nil, nil, nil, oerr
		}
		if _, ierr := ensureImage(ctx, sb, sp.Image); ierr != nil {
			return nil, nil, nil, nil, ierr
		}
		b = sb
		// Owned by this process: prune removes it (its network helper
		// and ports too) if this process is killed before Cleanup.
		s, err = spawnOwned(ctx, sb, sp)
	}
	if err != nil {
		b.Close()
		return nil, nil, nil, nil, err
	}
	done := func() {
		if err := s.Cleanup(); err != nil {
			fmt.Fprintln(os.Stderr, "slopbox: cleanup:", err)
		}
		if sp.Keep {
			name := s.ID()
			if i, ok := s.(*sandbox.Sandbox); ok {
				name = i.Name()
			}
			fmt.Fprintf(os.Stderr, "slopbox: kept sandbox %s (keep_container_after_clean): slopbox exec -it %s sh; remove it with slopbox rm -f %s\n", name, name, name)
		}
		b.Close()
	}
	return spec, s, assets, done, nil
}

func envRunCmd() *cobra.Command {
	var f envFlags
	var ef execFlags
	c := &cobra.Command{
		Use:   "run SPEC.yaml --workspace DIR [flags] [--entry FILE | -- CMD...]",
		Short: "Run a command in the environment a spec describes (setup per context, then the command)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ef.validate(); err != nil {
				return err
			}
			if (f.entry == "") == (len(args) == 1) {
				return fmt.Errorf("give either --entry FILE or -- CMD (one of them)")
			}
			if data, err := os.ReadFile(args[0]); err == nil && dockercompat.IsRLMConfig(data) {
				return runRLM(cmd, f, ef, args[0], args[1:])
			}
			spec, sb, assets, done, err := f.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer done()
			var shell string
			if f.entry != "" {
				shell, err = spec.Command(f.entry, !f.eval)
			} else {
				shell = backend.ShellQuote(args[1:])
			}
			if err == nil {
				shell, err = dockercompat.ResolvePlaceholders(shell, assets, spec.Type == "docker")
			}
			if err != nil {
				return err
			}
			req := backend.ExecRequest{Shell: shell, Timeout: seconds(ef.timeout)}
			ctx, cancel := signalContext()
			defer cancel()
			if ef.asJSON || ef.interactive {
				if ef.interactive {
					in, err := io.ReadAll(os.Stdin)
					if err != nil {
						return err
					}
					req.Stdin = [][]byte{in}
				}
				res, err := sb.Exec(ctx, req)
				if res == nil {
					return err
				}
				if ef.asJSON {
					printJSON(res)
				} else {
					os.Stdout.WriteString(res.Stdout)
					os.Stderr.WriteString(res.Stderr)
				}
				return exitWith(res.ExitCode)
			}
			res, err := stream(ctx, sb, req) // as run --backend local streams
			if err != nil {
				return err
			}
			return exitWith(res.ExitCode)
		},
	}
	f.register(c)
	c.Flags().StringVar(&f.entry, "entry", "", "entry file: runs commands.command (agent_command for agent runs) with it, as commands.entry_file names it")
	ef.register(c)
	return c
}

func envShellCmd() *cobra.Command {
	var f envFlags
	c := &cobra.Command{
		Use:   "shell SPEC.yaml --workspace DIR [flags]",
		Short: "Open a shell in the environment a spec describes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, sb, _, done, err := f.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := signalContext()
			defer cancel()
			if s, ok := sb.(*sandbox.Sandbox); ok {
				code, err := s.Attach(ctx, backend.ExecRequest{Argv: []string{"/bin/sh"}}, os.Stdin, os.Stdout, os.Stderr, false)
				if err != nil {
					return err
				}
				return exitWith(code)
			}
			return fmt.Errorf("env shell: a local spec runs on this host: use your own shell in %s", f.workspace)
		},
	}
	f.register(c)
	return c
}

// runRLM runs command as rlm_code's docker runtime would under the
// sandbox: block of the rlm_code config in file: the docker command line it
// builds (its extra_args included) goes through slopbox's one docker
// parser and the operator's policy, its mount roots (without a policy
// file: the config's directory and the workspace) narrowed by the
// config's allowed_mount_roots, with default_timeout_seconds as the
// timeout. Every bind but the workspace's is the config's and keeps its
// host owners. What only the operator may allow (operatorOnly, a name
// without a value for -e, :U) is refused in extra_args.
func runRLM(cmd *cobra.Command, f envFlags, ef execFlags, file string, command []string) error {
	cfg, err := dockercompat.LoadRLMConfig(file)
	if err != nil {
		return err
	}
	switch {
	case f.workspace == "":
		return fmt.Errorf("--workspace DIR is required (rlm_code's workdir, mounted at /workspace)")
	case f.eval || len(f.assets) > 0 || len(f.ports) > 0 || f.allowSpec.Local || f.allowSpec.HostNetwork:
		return fmt.Errorf("%s is an rlm_code config: --eval, --asset, --port, --allow-local and --allow-host-network belong to SlopCodeBench specs", file)
	}
	op, ws, err := rlmPolicy(cfg, file, f.workspace)
	if err != nil {
		return err
	}
	argv, err := rlmArgv(cfg, f, op, file, ws, command)
	if err != nil {
		return err
	}
	return runRLMArgv(cmd, file, op, argv, rlmRunOptions(cmd, f, ef, cfg))
}

// rlmPolicy is the operator's policy (an empty one without a policy
// file) and the workspace's absolute path. It sets the policy run
// applies (globals.rlmPolicy): the operator's, its mount roots narrowed
// by the config's. A config bounds what it mounts, it cannot widen what
// the operator allows (with no policy file, its own directory and the
// workspace); it replaces no policy file: the operator's stays in force.
func rlmPolicy(cfg *dockercompat.RLMSandbox, file, workspace string) (*dockercompat.Policy, string, error) {
	op, err := loadPolicy()
	if err != nil {
		return nil, "", err
	}
	if op == nil {
		op = &dockercompat.Policy{}
	}
	ws, err := workspaceAbs(workspace)
	if err != nil {
		return nil, "", err
	}
	roots, err := cfg.MountRoots(ws)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	narrowed, err := cfg.Roots(op.AllowedMountRoots, ws)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	switch {
	case len(narrowed) == 0 && len(op.AllowedMountRoots) == 0:
		return nil, "", fmt.Errorf("%w: %s: no root of sandbox.allowed_mount_roots %q lies inside the config's directory %s or the workspace %s, so nothing can be mounted: without a policy file a config mounts from those only (the operator allows more with allowed_mount_roots in a policy file, --policy FILE)",
			backend.ErrUnsafe, file, roots, cfg.Dir, ws)
	case len(narrowed) == 0:
		return nil, "", fmt.Errorf("%w: %s: no root of sandbox.allowed_mount_roots %q lies inside the policy file %s's allowed_mount_roots %q, so nothing can be mounted (a config can only narrow the operator's roots)",
			backend.ErrUnsafe, file, roots, op.File, op.AllowedMountRoots)
	}
	// Every bind but the workspace's is the config's: it keeps its owners.
	globals.rlmPolicy = &dockercompat.Policy{AllowedMountRoots: narrowed, AllowUnsafe: op.AllowUnsafe, File: op.File, KeepOwnersOutside: ws}
	return op, ws, nil
}

// rlmArgv is the docker command line the config makes for command (the
// entry file's, with --entry), with --image and the environment the
// operator gives (-e, the allowlist's values the operator allows). What
// only the operator may give is refused in it (refuseOperatorOnly).
func rlmArgv(cfg *dockercompat.RLMSandbox, f envFlags, op *dockercompat.Policy, file, ws string, command []string) ([]string, error) {
	if f.entry != "" {
		// rlm_code runs `python /workspace/<file name>`: the file sits in
		// the workdir.
		command = []string{"python", "/workspace/" + filepath.Base(f.entry)}
	}
	if f.image != "" {
		cfg.Docker.Image = f.image
	}
	extra, err := parseEnv(f.env)
	if err != nil {
		return nil, err
	}
	lookup, err := allowlistLookup(file, cfg, f.env, op.AllowOSEnv || f.allowSpec.OSEnv, op.File)
	if err != nil {
		return nil, err
	}
	env := cfg.Env(lookup)
	maps.Copy(env, extra)
	argv, err := cfg.DockerArgv(ws, env, command)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// Checked on the very command line run parses, before the operator's
	// own allowances are added to it.
	if err := refuseOperatorOnly(file, argv[2:], append([]string{cfg.Docker.Image}, command...), op.AllowVolumes || f.allowVolumes); err != nil {
		return nil, err
	}
	return argv, nil
}

// rlmRunOptions are the options of run env run gives beside the
// config's: the timeout (default_timeout_seconds unless --timeout),
// --json, -i, and the operator's allowances, given outside the config.
func rlmRunOptions(cmd *cobra.Command, f envFlags, ef execFlags, cfg *dockercompat.RLMSandbox) []string {
	timeout := cfg.DefaultTimeoutSeconds
	if cmd.Flags().Changed("timeout") {
		timeout = ef.timeout
	}
	opts := []string{"--timeout", strconv.FormatFloat(timeout, 'f', -1, 64)}
	if ef.asJSON {
		opts = append(opts, "--json")
	}
	if ef.interactive {
		opts = append(opts, "-i")
	}
	// The operator's allowances, given outside the config.
	for _, u := range f.allowUnsafe {
		opts = append(opts, "--allow-unsafe", u)
	}
	if f.allowHostLoopback {
		opts = append(opts, "--allow-host-loopback")
	}
	return opts
}

// runRLMArgv runs the config's command line argv with opts before its
// own options, as run; a mount outside the roots says how the operator
// allows more.
func runRLMArgv(cmd *cobra.Command, file string, op *dockercompat.Policy, argv, opts []string) error {
	run := startsSandbox(runCmd())
	run.SilenceErrors, run.SilenceUsage = true, true
	run.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitRuntime, err: fmt.Errorf("%s: docker.extra_args: %w", file, err)}
	})
	run.SetArgs(append(append(argv[1:2:2], opts...), argv[2:]...))
	err := run.ExecuteContext(cmd.Context())
	if errors.Is(err, oci.ErrMountNotAllowed) {
		how := "without a policy file an rlm_code config mounts from its own directory and the workspace only; the operator allows more with allowed_mount_roots in a policy file, --policy FILE"
		if len(op.AllowedMountRoots) > 0 {
			how = "an rlm_code config mounts only within the allowed_mount_roots of the policy file " + op.File + ", narrowed by its own; the operator allows more there"
		}
		return &exitError{code: exitRuntime, err: fmt.Errorf("%s: %w (%s)", file, err, how)}
	}
	return err
}

// operatorOnly are run's options by which the operator, and only the
// operator, weakens a sandbox or takes it away, with how the operator
// gives each.
var operatorOnly = []struct{ name, how string }{
	{"allow-unsafe", "env run --allow-unsafe VALUE, or allow_unsafe: [VALUE] in the policy file"},
	{"allow-host-loopback", "env run --allow-host-loopback"},
	{"backend", "nobody: an rlm_code config runs in a sandbox (slopbox run --backend local is the operator's own command)"},
	// It reads a host file, outside the mount roots, into the sandbox.
	{"env-file", "nobody: pass the variables with env run -e"},
	// It copies another sandbox's environment, its secrets included.
	{"link", "nobody: pass the variables with env run -e"},
	// The workspace is the one bind mounted as the sandbox's own.
	{"workspace", "env run --workspace DIR"},
	// The run's lifetime is the operator's: -d returns at once and leaves
	// the sandbox running past the timeout, --timeout replaces the
	// operator's, --keep leaves it behind (and --rm=false: below).
	{"detach", "nobody: env run waits for the command and removes the sandbox"},
	{"timeout", "env run --timeout SECONDS (default_timeout_seconds otherwise)"},
	{"keep", "nobody: env run removes the sandbox"},
	// A fixed name is how other commands and sandboxes address a sandbox
	// (exec, rm, --volumes-from, --link): the operator's namespace, and
	// parallel runs of one config would collide. rlm_code names none.
	{"name", "nobody: an rlm_code run is unnamed, as rlm_code's own"},
}

// allowlistLookup is how the config's env_allowlist takes host values:
// only those the operator allows, by env run -e NAME (in envFlags) or
// allow_os_env (policy key, or --allow-os-env). A name set in this
// process's environment that the operator does not allow is refused: the
// allowlist is the config's, and the harness's secrets (API keys) are in
// that environment. An unset name passes nothing either way, as rlm_code.
func allowlistLookup(file string, cfg *dockercompat.RLMSandbox, envFlags []string, osEnv bool, policy string) (func(string) (string, bool), error) {
	if osEnv {
		return os.LookupEnv, nil
	}
	operator := map[string]bool{}
	for _, kv := range envFlags {
		k, _, _ := strings.Cut(kv, "=")
		operator[k] = true
	}
	for _, k := range cfg.EnvAllowlist {
		k = strings.TrimSpace(k)
		if _, set := os.LookupEnv(k); k == "" || !set || operator[k] {
			continue
		}
		where := "allow_os_env: true in a policy file (--policy FILE)"
		if policy != "" {
			where = "allow_os_env: true in the policy file " + policy
		}
		return nil, fmt.Errorf("%w: %s: sandbox.env_allowlist names %s, which is set in slopbox's environment: a config cannot take the harness's variables (its API keys included), only the operator can give them (env run -e %s, or every name of the allowlist with env run --allow-os-env or %s)",
			backend.ErrUnsafe, file, k, k, where)
	}
	return func(k string) (string, bool) {
		if !operator[k] {
			return "", false
		}
		return os.LookupEnv(k)
	}, nil
}

// refuseOperatorOnly refuses the docker command line an rlm_code config
// makes (args: what follows "run") when it gives one of operatorOnly: a
// config cannot allow its own weakenings. The args are parsed exactly as
// run parses them (every spelling: --allow-unsafe X, --allow-unsafe=X),
// and a line that does not parse is refused here: nothing unchecked runs.
func refuseOperatorOnly(file string, args, positional []string, allowVolumes bool) error {
	fs := runCmd().Flags()
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %s: sandbox.docker.extra_args: %v", dockercompat.ErrBadSpec, file, err)
	}
	// A flag ending extra_args takes the image as its value (--network
	// IMAGE), a word among them becomes the image: what follows the flags
	// must be the image and the command as given, or the values checked
	// here are not the ones that run.
	if got := fs.Args(); !slices.Equal(got, positional) {
		return fmt.Errorf("%w: %s: sandbox.docker.extra_args take the place of the image and the command: run would take %q as them, not %q (a flag that wants a value ends extra_args, or a word is not a flag)",
			backend.ErrUnsafe, file, got, positional)
	}
	if err := refuseWeakenings(fs, file); err != nil {
		return err
	}
	if err := refuseOthersData(fs, file, allowVolumes); err != nil {
		return err
	}
	return refuseHostValues(fs, file)
}

// refusal is refuseOperatorOnly's error for what extra_args gives, with
// how the operator (or nobody) gives it instead.
func refusal(file, what, how string) error {
	return fmt.Errorf("%w: %s: sandbox.docker.extra_args gives %s: a config cannot allow its own weakenings, only the operator can (%s)",
		backend.ErrUnsafe, file, what, how)
}

// refuseWeakenings refuses the options of operatorOnly, --rm=false and a
// network shared with the host or another sandbox in the parsed
// extra_args fs.
func refuseWeakenings(fs *pflag.FlagSet, file string) error {
	for _, o := range operatorOnly {
		if fs.Changed(o.name) {
			return refusal(file, "--"+o.name, o.how)
		}
	}
	// The command line starts with --rm (rlm_code's); --rm=false after it
	// leaves the sandbox behind.
	if rm, _ := fs.GetBool("rm"); fs.Changed("rm") && !rm {
		return refusal(file, "--rm=false", "nobody: env run removes the sandbox")
	}
	// The network as parsed (--network, --net, = or split): rlm_code
	// refuses host; another sandbox's namespace is no better.
	nets, _ := fs.GetStringArray("network")
	for _, n := range nets {
		if n == "host" || strings.HasPrefix(n, "container:") {
			return fmt.Errorf("%w: %s: sandbox.docker.extra_args give --network %s: it shares the host's or another sandbox's network; rlm_code's policy refuses it (network_enabled governs the network)",
				backend.ErrUnsafe, file, n)
		}
	}
	return nil
}

// refuseOthersData refuses, in the parsed extra_args fs, named volumes
// and --volumes-from (other sandboxes' data) unless allowVolumes, and a
// bind of a credentials directory whatever the roots.
func refuseOthersData(fs *pflag.FlagSet, file string, allowVolumes bool) error {
	// Named volumes and --volumes-from are other sandboxes' data.
	if from, _ := fs.GetStringArray("volumes-from"); len(from) > 0 && !allowVolumes {
		return refusal(file, "--volumes-from "+from[0]+" (another sandbox's mounts and data)", "env run --allow-volumes, or allow_volumes: true in the policy file")
	}
	vols, _ := fs.GetStringArray("volume")
	mounts, _ := fs.GetStringArray("mount")
	var binds []string
	for _, v := range vols {
		m, err := dockercompat.ParseVolume(v)
		if err != nil {
			continue // run refuses it
		}
		if m.Volume != "" && !allowVolumes {
			return refusal(file, "--volume "+v+" (the named volume "+m.Volume+": another sandbox's data)", "env run --allow-volumes, or allow_volumes: true in the policy file")
		}
		if m.Source != "" {
			binds = append(binds, m.Source)
		}
	}
	for _, v := range mounts {
		m, err := dockercompat.ParseMount(v)
		if err != nil {
			continue
		}
		switch {
		case m.Type == "volume" && m.Source != "" && !allowVolumes:
			return refusal(file, "--mount "+v+" (the named volume "+m.Source+": another sandbox's data)", "env run --allow-volumes, or allow_volumes: true in the policy file")
		case m.Type == "bind":
			binds = append(binds, m.Source)
		}
	}
	// Keys: never from a config, wherever the roots reach.
	for _, src := range binds {
		real, _ := filepath.EvalSymlinks(src)
		if backend.InCredentialsDir(filepath.Clean(src)) || real != "" && backend.InCredentialsDir(real) {
			return refusal(file, "a bind of "+src+" (a credentials directory, .ssh or .gnupg)", "nobody: the operator mounts keys with its own slopbox run")
		}
	}
	return nil
}

// refuseHostValues refuses, in the parsed extra_args fs, what hands the
// sandbox something of the host's: -e NAME without a value, and :U.
func refuseHostValues(fs *pflag.FlagSet, file string) error {
	// -e NAME, without a value, takes NAME's value from this process's
	// environment (the harness's API keys included).
	envs, _ := fs.GetStringArray("env")
	for _, kv := range envs {
		if !strings.Contains(kv, "=") {
			return refusal(file, fmt.Sprintf("--env %s (a name without =VALUE: its value from slopbox's own environment)", kv), "env run -e "+kv)
		}
	}
	// :U hands the source's root-owned files to the sandbox's user.
	vols, _ := fs.GetStringArray("volume")
	for _, v := range vols {
		if m, err := dockercompat.ParseVolume(v); err == nil && m.HandOver {
			return refusal(file, fmt.Sprintf("--volume %s (:U gives the source's root-owned files to the sandbox's user)", v), "nobody: a config's mounts keep their owners")
		}
	}
	return nil
}

func exitWith(code int) error {
	if code != 0 {
		return &exitError{code: code, silent: true}
	}
	return nil
}

// spawnOwned is b.SpawnForeground as a backend.Sandbox (a nil *Sandbox on
// error stays a nil interface).
func spawnOwned(ctx context.Context, b *sandbox.Backend, sp backend.SpawnSpec) (backend.Sandbox, error) {
	sb, err := b.SpawnForeground(ctx, sp, nil)
	if err != nil {
		return nil, err
	}
	return sb, nil
}
