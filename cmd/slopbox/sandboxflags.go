package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/go-units"
	"github.com/spf13/pflag"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/sandbox"
)

// Docker's exit codes for failures of the runtime itself.
const (
	exitRuntime = 125
)

// spawnFlags are the docker-style flags of run and create.
type spawnFlags struct {
	name, workdir, user, network, workspace, memory string
	volumes, env, setup, tmpfs, storageOpts         []string
	capAdd, capDrop, securityOpts, allowUnsafe      []string
	devices, mounts, labels, envFiles               []string
	addHosts, dns, dnsSearch, dnsOptions            []string
	publish                                         []string
	groupAdd                                        []string
	hostname, entrypoint, platform                  string
	initFlag                                        bool
	privileged                                      bool
	pidNS, ipcNS, utsNS, userNS                     string
	cpus                                            float64
	pids                                            int64
	keep, strict, readOnly, allowHostLoopback       bool
}

func (f *spawnFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.name, "name", "", "name of the sandbox")
	fs.StringArrayVar(&f.groupAdd, "group-add", nil, "add a supplementary group (a name in the image's /etc/group, or an id) to the command and every exec")
	fs.StringArrayVarP(&f.volumes, "volume", "v", nil, "bind mount HOST:CONTAINER[:ro|rw], or a named volume VOLUME:CONTAINER (with --workspace, a relative HOST is a path under it)")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE (KEY alone takes the value from the host)")
	fs.StringVarP(&f.workdir, "workdir", "w", "", "working directory of commands (and the workspace's mount point with --workspace)")
	fs.StringVarP(&f.user, "user", "u", "", "user: name|uid[:group|gid] from the image's /etc/passwd")
	fs.StringVar(&f.network, "network", "none", "network: none (loopback only), bridge (its own, with outbound access through slirp4netns) or host")
	fs.BoolVar(&f.allowHostLoopback, "allow-host-loopback", false, "with --network bridge: let the sandbox reach the host's loopback (at 10.0.2.2)")
	fs.StringVar(&f.network, "net", "none", "alias of --network")
	fs.StringVar(&f.workspace, "workspace", "", "host directory mounted read-write at --workdir (default /workspace)")
	fs.StringVarP(&f.memory, "memory", "m", "", "memory limit (e.g. 512m, 2g)")
	fs.Float64Var(&f.cpus, "cpus", 0, "number of CPUs")
	fs.Int64Var(&f.pids, "pids-limit", 0, "maximum number of processes")
	fs.StringArrayVar(&f.setup, "setup", nil, "run this setup command first, through the HANDLE_ENTRY.sh entry script (repeatable); its output is reported apart")
	fs.BoolVar(&f.keep, "keep", false, "keep the sandbox after the command (for inspection)")
	fs.BoolVar(&f.strict, "strict-limits", false, "fail when a limit cannot be enforced on this host")
	fs.BoolVar(&f.readOnly, "read-only", false, "mount the root filesystem read-only")
	fs.StringArrayVar(&f.tmpfs, "tmpfs", nil, "mount a tmpfs at /tmp: /tmp[:size=64m] (the only path supported)")
	fs.StringArrayVar(&f.storageOpts, "storage-opt", nil, "size=N: bound what the root filesystem can hold (kept in memory, lost at stop)")
	fs.StringArrayVar(&f.capAdd, "cap-add", nil, "add a capability to Docker's default set (unsafe ones need --allow-unsafe cap-add=NAME)")
	fs.StringArrayVar(&f.capDrop, "cap-drop", nil, "drop a capability (or ALL)")
	fs.StringArrayVar(&f.securityOpts, "security-opt", nil, "seccomp=unconfined (needs --allow-unsafe seccomp=unconfined), no-new-privileges (always on)")
	fs.StringArrayVar(&f.mounts, "mount", nil, "type=bind,source=HOST,target=PATH[,readonly] or type=tmpfs,target=/tmp[,tmpfs-size=64m]")
	fs.StringArrayVarP(&f.labels, "label", "l", nil, "set a label KEY=VALUE (ps --filter label=KEY[=VALUE])")
	fs.StringArrayVar(&f.envFiles, "env-file", nil, "read KEY=VALUE lines from a file (# comments; -e wins)")
	fs.StringVarP(&f.hostname, "hostname", "h", "", "the sandbox's host name (default: from its name)")
	fs.StringArrayVar(&f.addHosts, "add-host", nil, "add NAME:IP to the sandbox's /etc/hosts")
	fs.StringArrayVarP(&f.publish, "publish", "p", nil, "publish a container port, [HOSTIP:][HOSTPORT:]CONTAINERPORT[/tcp|udp], on 127.0.0.1 unless HOSTIP is given (needs --network bridge; ignored with host)")
	fs.StringArrayVar(&f.dns, "dns", nil, "the sandbox's DNS server (replaces the host's)")
	fs.StringArrayVar(&f.dnsSearch, "dns-search", nil, "a DNS search domain ('.' for none)")
	fs.StringArrayVar(&f.dnsOptions, "dns-option", nil, "a resolv.conf option (ndots:2, …)")
	fs.Bool("help", false, "help for this command (-h is --hostname, as in docker)")
	fs.StringVar(&f.entrypoint, "entrypoint", "", "replace the image's entrypoint (\"\" clears it)")
	fs.StringVar(&f.platform, "platform", "", "only this host's platform can run")
	fs.BoolVar(&f.initFlag, "init", false, "accepted: the sandbox's PID 1 already reaps orphans and forwards nothing")
	fs.StringArrayVar(&f.allowUnsafe, "allow-unsafe", nil, "allow one weakening the policy refuses: cap-add=NAME, seccomp=unconfined or mount=PATH")
	// Docker's flags that would share the host with the sandbox: known,
	// so that the refusal names the policy rather than an unknown flag.
	fs.BoolVar(&f.privileged, "privileged", false, "refused: slopbox has no privileged mode")
	fs.StringVar(&f.pidNS, "pid", "", "refused when host: the host's process namespace is never shared")
	fs.StringVar(&f.ipcNS, "ipc", "", "refused when host")
	fs.StringVar(&f.utsNS, "uts", "", "refused when host")
	fs.StringVar(&f.userNS, "userns", "", "refused when host: container root is never host root")
	fs.StringArrayVar(&f.devices, "device", nil, "refused: host devices are not passed into sandboxes")
	for _, n := range []string{"privileged", "pid", "ipc", "uts", "userns", "device"} {
		fs.Lookup(n).Hidden = true
	}
	fs.Lookup("net").Hidden = true
}

// spec turns the flags into a SpawnSpec for image.
func (f *spawnFlags) spec(img string) (backend.SpawnSpec, error) {
	s := backend.SpawnSpec{Image: img, Name: f.name, User: f.user, Network: f.network, Keep: f.keep,
		DisableSetup: len(f.setup) == 0, Setup: backend.Setup{Commands: f.setup}, ReadOnlyRootfs: f.readOnly,
		CapAdd: f.capAdd, CapDrop: f.capDrop, Unsafe: f.allowUnsafe}
	for _, o := range f.securityOpts {
		switch strings.ReplaceAll(o, ":", "=") {
		case "seccomp=unconfined":
			s.SeccompUnconfined = true
		case "no-new-privileges", "no-new-privileges=true":
		default:
			return s, fmt.Errorf("--security-opt %q is not supported (seccomp=unconfined, no-new-privileges)", o)
		}
	}
	if err := f.refuseHostSharing(); err != nil {
		return s, err
	}
	if f.workspace != "" {
		ws, err := filepath.Abs(f.workspace)
		if err != nil {
			return s, err
		}
		s.Workspace, s.Workdir = ws, f.workdir
	} else {
		s.NoWorkspaceMount = true
		s.Cwd = f.workdir
	}
	if f.platform != "" && f.platform != image.HostPlatform().String() && f.platform != image.HostPlatform().OS+"/"+image.HostPlatform().Architecture {
		return s, fmt.Errorf("--platform %s: this host runs %s images only", f.platform, image.HostPlatform())
	}
	s.Hostname = f.hostname
	s.GroupAdd = f.groupAdd
	s.ExtraHosts, s.DNS, s.DNSSearch, s.DNSOptions = f.addHosts, f.dns, f.dnsSearch, f.dnsOptions
	for _, p := range f.publish {
		pm, err := backend.ParsePort(p)
		if err != nil {
			return s, err
		}
		s.Ports = append(s.Ports, pm)
	}
	if len(s.Ports) > 0 && f.network == backend.NetworkHost {
		fmt.Fprintln(os.Stderr, "WARNING: Published ports are discarded when using host network mode")
		s.Ports = nil
	}
	s.AllowHostLoopback = f.allowHostLoopback
	env := map[string]string{}
	for _, file := range f.envFiles {
		kvs, err := readEnvFile(file)
		if err != nil {
			return s, err
		}
		fileEnv, err := parseEnv(kvs)
		if err != nil {
			return s, fmt.Errorf("--env-file %s: %w", file, err)
		}
		maps.Copy(env, fileEnv)
	}
	flagEnv, err := parseEnv(f.env)
	if err != nil {
		return s, err
	}
	maps.Copy(env, flagEnv)
	if len(env) > 0 {
		s.Env = env
	}
	for _, l := range f.labels {
		k, v, _ := strings.Cut(l, "=")
		if k == "" {
			return s, fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[k] = v
	}
	for _, m := range f.mounts {
		mnt, tmp, err := parseMount(m)
		if err != nil {
			return s, err
		}
		if tmp != "" {
			f.tmpfs = append(f.tmpfs, tmp)
			continue
		}
		s.Mounts = append(s.Mounts, mnt)
	}
	for _, v := range f.volumes {
		m, err := backend.ParseVolume(v)
		if err != nil {
			return s, err
		}
		if m.Volume != "" && s.Workspace != "" {
			// With --workspace a relative source stays slopbox's: a path
			// in the workspace, not a volume name.
			m.Source, m.Volume = m.Volume, ""
		}
		s.Mounts = append(s.Mounts, m)
	}
	if s.Limits, err = f.limits(); err != nil {
		return s, err
	}
	pol, err := loadPolicy()
	if err != nil {
		return s, err
	}
	if pol != nil {
		s.AllowedMountRoots = pol.AllowedMountRoots
		s.Unsafe = append(slices.Clone(pol.AllowUnsafe), s.Unsafe...)
	}
	// Before anything is pulled or created.
	if err := s.CheckPolicy(); err != nil {
		return s, err
	}
	for _, note := range s.HandOverWorkdir(f.workdir) {
		fmt.Fprintln(os.Stderr, "slopbox: note:", note)
	}
	return s, nil
}

// defaultPolicy is the operator's policy file when --policy and
// $SLOPBOX_POLICY name none.
const defaultPolicy = "/etc/slopbox/policy.yaml"

// loadPolicy reads the policy file in force, if any.
func loadPolicy() (*dockercompat.Policy, error) {
	if globals.rlmPolicy != nil {
		return globals.rlmPolicy, nil
	}
	file := globals.policy
	if file == "" {
		if _, err := os.Stat(defaultPolicy); err != nil {
			return nil, nil
		}
		file = defaultPolicy
	}
	return dockercompat.LoadPolicy(file)
}

// limits parses and checks --memory, --cpus and --pids-limit, so a bad
// value is refused before anything is pulled or created.
func (f *spawnFlags) limits() (backend.Limits, error) {
	l := backend.Limits{CPUs: f.cpus, Pids: f.pids, Strict: f.strict}
	if f.memory != "" {
		n, err := parseMemory(f.memory)
		if err != nil {
			return l, err
		}
		l.MemoryBytes = n
	}
	for _, t := range f.tmpfs {
		dst, opts, _ := strings.Cut(t, ":")
		if filepath.Clean(dst) != "/tmp" {
			return l, fmt.Errorf("--tmpfs %q: only /tmp can be a tmpfs for now", t)
		}
		l.TmpBytes = 64 << 20 // as a tmpfs without size= would get half the RAM
		for _, o := range strings.Split(opts, ",") {
			if v, ok := strings.CutPrefix(o, "size="); ok {
				n, err := units.RAMInBytes(v)
				if err != nil || n <= 0 {
					return l, fmt.Errorf("--tmpfs %q: invalid size %q (want e.g. size=64m)", t, v)
				}
				l.TmpBytes = n
			} else if o != "" && o != "rw" && o != "nosuid" && o != "nodev" {
				return l, fmt.Errorf("--tmpfs %q: option %q is not supported (size= only)", t, o)
			}
		}
	}
	for _, o := range f.storageOpts {
		v, ok := strings.CutPrefix(o, "size=")
		n, err := units.RAMInBytes(v)
		if !ok || err != nil || n <= 0 {
			return l, fmt.Errorf("--storage-opt %q: only size=N is supported (e.g. size=1g)", o)
		}
		l.RootfsBytes = n
	}
	return l, l.Validate()
}

// parseMemory reads a docker-style size (512m, 2g, 1.5GiB, 1048576).
// go-units converts the number it parses to int64 unchecked, so a value
// too large for that would wrap to a negative limit: it is refused here.
func parseMemory(v string) (int64, error) {
	n, err := units.RAMInBytes(v)
	if err != nil {
		return 0, fmt.Errorf("invalid --memory %q: %v (want a size such as 512m or 2g)", v, err)
	}
	// Split number and suffix as go-units does.
	sep := strings.LastIndexAny(v, "0123456789. ")
	num, sfx := v[:sep+1], strings.ToLower(v[sep+1:])
	mul := 1.0
	if sfx != "" {
		mul = math.Ldexp(1, 10*(strings.IndexByte("bkmgtp", sfx[0])))
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(f) || f*mul >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid --memory %q: too large (a limit must be below 8 EiB)", v)
	}
	return n, nil
}

// checkFlags refuses bad --memory, --cpus and --timeout values before
// anything is pulled or created.
func checkFlags(sf *spawnFlags, ef *execFlags) error {
	if _, err := sf.limits(); err != nil {
		return err
	}
	return ef.validate()
}

// validate checks --timeout: a number of seconds, 0 for none.
func (f *execFlags) validate() error {
	if math.IsNaN(f.timeout) || f.timeout < 0 || f.timeout*float64(time.Second) >= math.MaxInt64 {
		return fmt.Errorf("invalid --timeout %v: want a number of seconds, at most 292 years (0 means no timeout)", f.timeout)
	}
	return nil
}

// parseEnv reads KEY=VALUE pairs; a bare KEY takes the host's value, as
// docker does.
func parseEnv(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if k == "" {
			return nil, fmt.Errorf("-e %q: want KEY=VALUE", kv)
		}
		if !ok {
			v, ok = os.LookupEnv(k)
			if !ok {
				continue
			}
		}
		env[k] = v
	}
	return env, nil
}

// openBackend opens the sandbox backend with the global flags. A CLI
// process spawns at most one sandbox: it keeps none ready.
func openBackend() (*sandbox.Backend, error) {
	b, err := sandbox.New(globals.root,
		image.WithInsecureRegistries(globals.insecure...),
		image.WithProgress(progressMode()),
		image.WithLogger(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }))
	if err != nil {
		return nil, err
	}
	b.KeepReady(false)
	b.UseSpawnHelper(os.Getenv("SLOPBOX_SPAWN_HELPER")) // documented in the README
	return b, nil
}

// ensureImage pulls ref when it is not in the store, as docker run does.
func ensureImage(ctx context.Context, b *sandbox.Backend, ref string) (*image.Image, error) {
	img, err := b.Store().Get(ref)
	if err == nil {
		return img, nil
	}
	if !errors.Is(err, image.ErrNotFound) {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "Unable to find image '%s' locally\n", ref)
	return b.Store().Pull(ctx, ref)
}

// imageCommandWith is ENTRYPOINT + (args, or the image's CMD); a replaced
// entrypoint (--entrypoint) drops the image's CMD too, as docker does.
func imageCommandWith(img *image.Image, args []string, entrypoint *string) []string {
	cfg := img.Config.Config
	if entrypoint != nil {
		ep := strings.Fields(*entrypoint)
		return append(ep, args...)
	}
	if len(args) == 0 {
		args = cfg.Cmd
	}
	return append(append([]string{}, cfg.Entrypoint...), args...)
}

// entrypointOverride is --entrypoint when it was given.
func (f *spawnFlags) entrypointOverride(fs *pflag.FlagSet) *string {
	if fs.Changed("entrypoint") {
		return &f.entrypoint
	}
	return nil
}

// readEnvFile reads docker's --env-file: KEY=VALUE or KEY lines, blank
// lines and # comments skipped.
func readEnvFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--env-file: %w", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimRight(l, "\r")
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		out = append(out, strings.TrimLeft(l, " \t"))
	}
	return out, nil
}

// parseMount reads --mount: a bind mount, or a tmpfs at /tmp (returned as
// the --tmpfs spelling).
func parseMount(v string) (m backend.Mount, tmpfs string, err error) {
	kind := "volume"
	var size string
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		switch k {
		case "type":
			kind = val
		case "source", "src":
			m.Source = val
		case "target", "destination", "dst":
			m.Target = val
		case "readonly", "ro":
			m.ReadOnly = val == "" || val == "true" || val == "1"
		case "tmpfs-size":
			size = val
		case "bind-propagation", "consistency":
		default:
			return m, "", fmt.Errorf("--mount %q: option %q is not supported (type, source, target, readonly, tmpfs-size)", v, k)
		}
	}
	if m.Target == "" {
		return m, "", fmt.Errorf("--mount %q: target is required", v)
	}
	switch kind {
	case "volume":
		m.Volume, m.AnonymousVolume, m.Source = m.Source, m.Source == "", ""
		return m, "", nil
	case "bind":
		if m.Source == "" {
			return m, "", fmt.Errorf("--mount %q: source is required for a bind mount", v)
		}
		return m, "", nil
	case "tmpfs":
		if size != "" {
			return m, m.Target + ":size=" + size, nil
		}
		return m, m.Target, nil
	}
	return m, "", fmt.Errorf("--mount %q: type %q is not supported (bind, volume or tmpfs)", v, kind)
}

// signalContext is cancelled on SIGINT and SIGTERM, so the running command
// is killed and the sandbox cleaned up.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// refuseHostSharing refuses the flags that would share a host namespace
// or device (backend.HostSharing).
func (f *spawnFlags) refuseHostSharing() error {
	return backend.HostSharing{Privileged: f.privileged, Devices: f.devices, PidMode: f.pidNS, IpcMode: f.ipcNS, UTSMode: f.utsNS, UsernsMode: f.userNS}.Check()
}
