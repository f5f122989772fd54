package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/slopbox/slopbox/dockercompat/service"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
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
// network is the first --network: the mode, or the user-defined network
// --network-alias and --ip are for.
func (f *spawnFlags) network() string {
	if len(f.networks) == 0 {
		return ""
	}
	return f.networks[0]
}

type spawnFlags struct {
	name, workdir, user, workspace, memory     string
	networks, networkAliases                   []string
	ip                                         string
	volumes, env, setup, tmpfs, storageOpts    []string
	capAdd, capDrop, securityOpts, allowUnsafe []string
	devices, mounts, labels, envFiles          []string
	addHosts, dns, dnsSearch, dnsOptions       []string
	publish                                    []string
	groupAdd                                   []string
	hostname, entrypoint, platform             string
	initFlag                                   bool
	privileged                                 bool
	pidNS, ipcNS, utsNS, userNS                string
	cpus                                       float64
	pids                                       int64
	keep, strict, readOnly, allowHostLoopback  bool
	// Docker's create options kept for inspect (dockercompat.Echoed).
	cpusetCpus, cpusetMems, runtime, isolation, volumeDriver string
	macAddress, memorySwap                                   string
	volumesFrom, links, deviceCgroupRules                    []string
	stopTimeout                                              int
	stopSignal                                               string
	memorySwappiness                                         int64
	cpuRtPeriod, cpuRtRuntime                                int64
	// The restart policy and healthcheck, carried out by the container's
	// monitor (dockercompat/service), with serve or without.
	restart                                          string
	healthCmd                                        string
	healthInterval, healthTimeout, healthStartPeriod time.Duration
	healthRetries                                    int
	noHealthcheck                                    bool
}

func (f *spawnFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.name, "name", "", "name of the sandbox")
	fs.StringArrayVar(&f.groupAdd, "group-add", nil, "add a supplementary group (a name in the image's /etc/group, or an id) to the command and every exec")
	fs.StringArrayVarP(&f.volumes, "volume", "v", nil, "bind mount HOST:CONTAINER[:ro|rw], a named volume VOLUME:CONTAINER[:ro|rw] or an anonymous one CONTAINER (with --workspace, a relative HOST is a path under it)")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE (KEY alone takes the value from the host)")
	fs.StringVarP(&f.workdir, "workdir", "w", "", "working directory of commands (and the workspace's mount point with --workspace)")
	fs.StringVarP(&f.user, "user", "u", "", "user: name|uid[:group|gid] from the image's /etc/passwd")
	fs.StringArrayVar(&f.networks, "network", nil, "network: none (loopback only; the default), bridge (its own, with outbound access through slirp4netns; the default with -p), host, or a user-defined network's name (slopbox network create); repeated, one more user-defined network each time")
	fs.StringArrayVar(&f.networkAliases, "network-alias", nil, "another name the user-defined network's DNS gives the sandbox")
	fs.StringVar(&f.ip, "ip", "", "the sandbox's IPv4 address on its user-defined network")
	fs.BoolVar(&f.allowHostLoopback, "allow-host-loopback", false, "with --network bridge: let the sandbox reach the host's loopback (at 10.0.2.2)")
	fs.StringArrayVar(&f.networks, "net", nil, "alias of --network")
	fs.StringVar(&f.workspace, "workspace", "", "host directory mounted read-write at --workdir (default /workspace)")
	fs.StringVarP(&f.memory, "memory", "m", "", "memory limit (e.g. 512m, 2g)")
	fs.Float64Var(&f.cpus, "cpus", 0, "number of CPUs")
	fs.Int64Var(&f.pids, "pids-limit", 0, "maximum number of processes")
	fs.StringArrayVar(&f.setup, "setup", nil, "run this setup command first, through the HANDLE_ENTRY.sh entry script (repeatable); its output is reported apart")
	fs.BoolVar(&f.keep, "keep", false, "keep the sandbox after the command (for inspection)")
	fs.BoolVar(&f.strict, "strict-limits", false, "fail when a limit cannot be enforced on this host")
	fs.BoolVar(&f.readOnly, "read-only", false, "mount the root filesystem read-only")
	fs.StringArrayVar(&f.tmpfs, "tmpfs", nil, "mount a tmpfs: PATH[:size=64m] (64m by default; it counts as the sandbox's memory)")
	fs.StringArrayVar(&f.storageOpts, "storage-opt", nil, "size=N: bound what the root filesystem can hold (kept in memory, lost at stop)")
	fs.StringArrayVar(&f.capAdd, "cap-add", nil, "add a capability to Docker's default set (unsafe ones need --allow-unsafe cap-add=NAME)")
	fs.StringArrayVar(&f.capDrop, "cap-drop", nil, "drop a capability (or ALL)")
	fs.StringArrayVar(&f.securityOpts, "security-opt", nil, "seccomp=unconfined (needs --allow-unsafe seccomp=unconfined), no-new-privileges (always on)")
	fs.StringArrayVar(&f.mounts, "mount", nil, "type=bind,source=HOST,target=PATH[,readonly], type=volume[,source=VOLUME],target=PATH[,readonly] or type=tmpfs,target=/tmp[,tmpfs-size=64m]")
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
	fs.StringVar(&f.stopSignal, "stop-signal", "", "the signal stop sends the main command first (default: the image's STOPSIGNAL, else TERM)")
	fs.IntVar(&f.stopTimeout, "stop-timeout", dockercompat.DefaultStopTimeout, "seconds stop waits for the main command before killing every process (-1: for ever)")
	fs.StringVar(&f.restart, "restart", "no", "restart policy when the main command exits: no, always, unless-stopped, on-failure[:N] (carried out with or without serve; stop, kill and rm end it)")
	fs.StringVar(&f.healthCmd, "health-cmd", "", "command run in the container (by sh -c) to check its health: inspect's State.Health")
	fs.DurationVar(&f.healthInterval, "health-interval", 0, "time between health checks, ms|s|m|h (default 30s; at most one a second)")
	fs.DurationVar(&f.healthTimeout, "health-timeout", 0, "longest a health check may run, ms|s|m|h (default 30s)")
	fs.DurationVar(&f.healthStartPeriod, "health-start-period", 0, "time during which failed checks do not count, ms|s|m|h (default 0s)")
	fs.IntVar(&f.healthRetries, "health-retries", 0, "consecutive failures that make the container unhealthy (default 3)")
	fs.BoolVar(&f.noHealthcheck, "no-healthcheck", false, "disable the image's HEALTHCHECK")
	fs.StringArrayVar(&f.volumesFrom, "volumes-from", nil, "mount the volumes and bind mounts of a container, CONTAINER[:ro|rw]")
	fs.StringArrayVar(&f.links, "link", nil, "CONTAINER[:ALIAS]: its name and environment in ALIAS_NAME, ALIAS_ENV_KEY (Docker's legacy links)")
	fs.StringVar(&f.runtime, "runtime", "", "runc only (slopbox runs runc's libcontainer)")
	fs.StringVar(&f.isolation, "isolation", "", "default only")
	fs.StringVar(&f.volumeDriver, "volume-driver", "", "local only, for the volumes it uses")
	fs.StringVar(&f.cpusetCpus, "cpuset-cpus", "", "accepted with a warning: not applied")
	fs.StringVar(&f.cpusetMems, "cpuset-mems", "", "accepted with a warning: not applied")
	fs.StringVar(&f.memorySwap, "memory-swap", "", "memory plus swap: the --memory value (no swap) is applied, another is accepted with a warning")
	fs.Int64Var(&f.memorySwappiness, "memory-swappiness", -1, "accepted with a warning: not applied")
	fs.Int64Var(&f.cpuRtPeriod, "cpu-rt-period", 0, "refused: slopbox gives sandboxes no real-time CPU budget")
	fs.Int64Var(&f.cpuRtRuntime, "cpu-rt-runtime", 0, "refused: slopbox gives sandboxes no real-time CPU budget")
	fs.StringVar(&f.macAddress, "mac-address", "", "accepted with a warning: not applied")
	fs.StringArrayVar(&f.deviceCgroupRules, "device-cgroup-rule", nil, "refused: host devices are not passed into sandboxes")
	fs.StringArrayVar(&f.allowUnsafe, "allow-unsafe", nil, "allow one weakening the policy refuses: cap-add=NAME, seccomp=unconfined or mount=PATH")
	// Docker's flags that would share the host with the sandbox: known,
	// so that the refusal names the policy rather than an unknown flag.
	fs.BoolVar(&f.privileged, "privileged", false, "refused: slopbox has no privileged mode")
	fs.StringVar(&f.pidNS, "pid", "", "refused when host: the host's process namespace is never shared")
	fs.StringVar(&f.ipcNS, "ipc", "", "refused when host")
	fs.StringVar(&f.utsNS, "uts", "", "refused when host")
	fs.StringVar(&f.userNS, "userns", "", "refused when host: container root is never host root")
	fs.StringArrayVar(&f.devices, "device", nil, "refused: host devices are not passed into sandboxes")
	for _, n := range []string{"privileged", "pid", "ipc", "uts", "userns", "device", "device-cgroup-rule"} {
		fs.Lookup(n).Hidden = true
	}
	fs.Lookup("net").Hidden = true
}

// options turns the flags, the image and the command's arguments into
// Docker's create options: dockercompat.CreateOptions.ToSpawnSpec is the
// one translator the CLI and the Engine API share.
func (f *spawnFlags) options(fs *pflag.FlagSet, img string, args []string) (dockercompat.CreateOptions, error) {
	o := f.limitOptions()
	o.Mounts = nil
	for _, m := range f.mounts {
		mo, err := dockercompat.ParseMount(m)
		if err != nil {
			return o, err
		}
		o.Mounts = append(o.Mounts, mo)
	}
	o.Name, o.Image, o.Cmd, o.User, o.Hostname, o.Workdir = f.name, img, args, f.user, f.hostname, f.workdir
	o.Network, o.AllowHostLoopback, o.Publish, o.Volumes, o.Labels = f.network(), f.allowHostLoopback, f.publish, f.volumes, f.labels
	for _, n := range f.networks[min(1, len(f.networks)):] {
		// Docker 25's repeated --network: the first is the mode or
		// network the aliases and --ip are for, each further one another
		// network.
		o.Networks = append(o.Networks, backend.NetworkAttachment{Network: n})
	}
	o.NetworkAliases, o.IP = f.networkAliases, f.ip
	o.CallerDir, _ = os.Getwd()
	o.ReadOnly, o.Keep, o.Setup = f.readOnly, f.keep, f.setup
	o.CapAdd, o.CapDrop, o.SecurityOpt, o.AllowUnsafe = f.capAdd, f.capDrop, f.securityOpts, f.allowUnsafe
	o.ExtraHosts, o.DNS, o.DNSSearch, o.DNSOptions = f.addHosts, f.dns, f.dnsSearch, f.dnsOptions
	o.GroupAdd = f.groupAdd
	o.CPURealtimePeriod, o.CPURealtimeRuntime = f.cpuRtPeriod, f.cpuRtRuntime
	o.HostSharing = backend.HostSharing{Privileged: f.privileged, Devices: f.devices, DeviceCgroupRules: f.deviceCgroupRules, PidMode: f.pidNS, IpcMode: f.ipcNS, UTSMode: f.utsNS, UsernsMode: f.userNS}
	o.Echoed = dockercompat.Echoed{CpusetCpus: f.cpusetCpus, CpusetMems: f.cpusetMems, Runtime: f.runtime, Isolation: f.isolation,
		VolumeDriver: f.volumeDriver, VolumesFrom: f.volumesFrom, Links: f.links, MacAddress: f.macAddress, StopSignal: f.stopSignal}
	o.Lookup = func(ref string) (dockercompat.Container, error) {
		b, err := openBackend() // only when --volumes-from or --link names one
		if err != nil {
			return dockercompat.Container{}, err
		}
		return service.Lookup(service.New(b))(ref)
	}
	if fs != nil && fs.Changed("init") {
		o.Init = &f.initFlag
	}
	if fs != nil && fs.Changed("stop-timeout") {
		o.StopTimeout = &f.stopTimeout
	}
	if err := f.supervision(&o); err != nil {
		return o, err
	}
	if fs != nil && fs.Changed("memory-swappiness") {
		o.MemorySwappiness = &f.memorySwappiness
	}
	if f.memorySwap != "" {
		n := int64(-1)
		if f.memorySwap != "-1" {
			var err error
			if n, err = dockercompat.ParseSize("--memory-swap", f.memorySwap); err != nil {
				return o, err
			}
		}
		o.MemorySwap = n
	}
	if fs != nil && fs.Changed("entrypoint") {
		o.Entrypoint = []string{f.entrypoint} // one word, as docker's: "" clears it
	}
	if f.workspace != "" {
		ws, err := workspaceAbs(f.workspace)
		if err != nil {
			return o, err
		}
		o.Workspace = ws
	}
	if f.platform != "" && f.platform != image.HostPlatform().String() && f.platform != image.HostPlatform().OS+"/"+image.HostPlatform().Architecture {
		return o, fmt.Errorf("--platform %s: this host runs %s images only", f.platform, image.HostPlatform())
	}
	env := []map[string]string{}
	for _, file := range f.envFiles {
		kvs, err := readEnvFile(file)
		if err != nil {
			return o, err
		}
		fileEnv, err := parseEnv(kvs)
		if err != nil {
			return o, fmt.Errorf("--env-file %s: %w", file, err)
		}
		env = append(env, fileEnv)
	}
	flagEnv, err := parseEnv(f.env)
	if err != nil {
		return o, err
	}
	o.Env = dockercompat.MergeEnv(append(env, flagEnv)...)
	pol, err := loadPolicy()
	if err != nil {
		return o, err
	}
	pol.Apply(&o)
	return o, nil
}

// supervision puts --restart and the --health-* flags into o, as the
// docker CLI puts them into its create request.
func (f *spawnFlags) supervision(o *dockercompat.CreateOptions) error {
	p, err := dockercompat.ParseRestartPolicy(f.restart)
	if err != nil {
		return err
	}
	o.RestartPolicy = p
	if f.noHealthcheck {
		if f.healthCmd != "" || f.healthInterval != 0 || f.healthTimeout != 0 || f.healthStartPeriod != 0 || f.healthRetries != 0 {
			return backend.InvalidValue("--no-healthcheck conflicts with --health-* options")
		}
		o.Healthcheck = &v1.HealthConfig{Test: []string{"NONE"}}
		return nil
	}
	if f.healthCmd == "" && f.healthInterval == 0 && f.healthTimeout == 0 && f.healthStartPeriod == 0 && f.healthRetries == 0 {
		return nil
	}
	h := &v1.HealthConfig{Interval: f.healthInterval, Timeout: f.healthTimeout, StartPeriod: f.healthStartPeriod, Retries: f.healthRetries}
	if f.healthCmd != "" {
		h.Test = []string{"CMD-SHELL", f.healthCmd}
	}
	for name, d := range map[string]time.Duration{"--health-interval": h.Interval, "--health-timeout": h.Timeout, "--health-start-period": h.StartPeriod} {
		if d < 0 {
			return backend.InvalidValue("%s cannot be negative", name)
		}
	}
	if h.Retries < 0 {
		return backend.InvalidValue("--health-retries cannot be negative")
	}
	o.Healthcheck = h
	return nil
}

// spec is the SpawnSpec of the flags (see options), its warnings and
// notes printed as docker prints its warnings.
func (f *spawnFlags) spec(fs *pflag.FlagSet, img string, args []string) (backend.SpawnSpec, dockercompat.CreateOptions, error) {
	o, err := f.options(fs, img, args)
	if err != nil {
		return backend.SpawnSpec{}, o, err
	}
	s, warnings, notes, err := o.ToSpawnSpec()
	if err != nil {
		return s, o, err
	}
	for _, w := range warnings {
		fmt.Fprintln(os.Stderr, "WARNING:", w)
	}
	for _, note := range notes {
		fmt.Fprintln(os.Stderr, "slopbox: note:", note)
	}
	return s, o, nil
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

// limitOptions are the flags that set limits, as create options.
func (f *spawnFlags) limitOptions() dockercompat.CreateOptions {
	o := dockercompat.CreateOptions{Memory: f.memory, CPUs: f.cpus, PidsLimit: f.pids, StrictLimits: f.strict,
		Tmpfs: f.tmpfs, StorageOpt: f.storageOpts}
	for _, m := range f.mounts {
		if mo, err := dockercompat.ParseMount(m); err == nil {
			o.Mounts = append(o.Mounts, mo)
		}
	}
	return o
}

// limits parses and checks --memory, --cpus, --pids-limit, --tmpfs and
// --storage-opt, so a bad value is refused before anything is pulled or
// created.
func (f *spawnFlags) limits() (backend.Limits, error) {
	for _, m := range f.mounts {
		if _, err := dockercompat.ParseMount(m); err != nil {
			return backend.Limits{}, err
		}
	}
	o := f.limitOptions()
	return o.Limits()
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
	return backend.ParseEnv("-e", kvs, os.LookupEnv)
}

// openBackend opens the sandbox backend with the global flags. A CLI
// process spawns at most one sandbox: it keeps none ready.
// openService is the Docker service over the state root: what the Docker
// verbs call.
func openService() (*service.Service, error) {
	b, err := openBackend()
	if err != nil {
		return nil, err
	}
	return service.New(b), nil
}

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
func ensureImage(ctx context.Context, b interface{ Store() *image.Store }, ref string) (*image.Image, error) {
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

// signalContext is cancelled on SIGINT and SIGTERM, so the running command
// is killed and the sandbox cleaned up.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
