package dockercompat

import (
	"maps"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/go-units"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/backend"
)

// CreateOptions are Docker's container create options, in the form its
// command line gives them (podman's compat handlers do the same: the
// Engine API's Config and HostConfig are turned into the options of the
// command line, and one piece of code goes on from there). The slopbox
// CLI (run, create, the docker argv mode, rlm_code configs) and the
// Engine API (serve) fill one in, and ToSpawnSpec turns it into the
// backend.SpawnSpec with the same parsers, defaults and policy.
type CreateOptions struct {
	Name, Image, User, Hostname string
	// Workdir is --workdir / Config.WorkingDir; with Workspace (a host
	// directory, slopbox's own) it is also where that is mounted.
	Workdir, Workspace string
	// Entrypoint replaces the image's when not nil (--entrypoint is one
	// word, never split; "" or [""] clears it); either way a replaced
	// entrypoint drops the image's CMD, as the daemon does.
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE, later ones win
	// EnvNames are names given without a value through the Engine API:
	// kept in inspect's Config.Env as given, not set (as dockerd).
	EnvNames []string
	Labels   []string // KEY=VALUE
	// Network is none, bridge or host; "" (or "default") is bridge when
	// a port is published, else none: the sandbox's own loopback only.
	Network string
	// NetworkAliases and IP are for the network Network names when it is
	// a user-defined one (--network-alias, --ip); Networks are further
	// user networks (the Engine API's NetworkingConfig.EndpointsConfig).
	NetworkAliases    []string
	IP                string
	Networks          []backend.NetworkAttachment
	AllowHostLoopback bool
	Publish           []string // -p syntax
	Volumes           []string // -v / HostConfig.Binds
	// CallerDir is the CLI caller's working directory: without a
	// Workspace, a -v source starting with "." resolves against it, as
	// Docker's CLI resolves it (the Engine API gives none).
	CallerDir string
	// AnonymousVolumes are Config.Volumes: an anonymous volume at each
	// path no other mount (nor the /tmp tmpfs) covers.
	AnonymousVolumes []string
	Mounts           []MountOption
	Tmpfs            []string // --tmpfs PATH[:size=N] / HostConfig.Tmpfs
	StorageOpt       []string // size=N
	// Memory is a size in go-units' form (512m, 2g, 1048576).
	Memory                                    string
	CPUs                                      float64
	PidsLimit                                 int64
	StrictLimits, ReadOnly, Keep, AutoRemove  bool
	CapAdd, CapDrop, SecurityOpt, AllowUnsafe []string
	Setup                                     []string
	ExtraHosts, DNS, DNSSearch, DNSOptions    []string
	HostSharing                               backend.HostSharing
	AllowedMountRoots                         []string // the operator's policy
	PolicyUnsafe                              []string // the operator's allow_unsafe
	// KeepOwnersOutside, when set (an rlm_code config's run: the
	// operator's workspace), says the command line is a config's, not the
	// caller's: every bind whose source lies outside this directory keeps
	// its host owners (backend.Mount.KeepOwners), so that a config never
	// gives the sandbox host root's files and sockets, or another user's,
	// as its own.
	KeepOwnersOutside string
	// GroupAdd are supplementary groups (--group-add, HostConfig.GroupAdd).
	GroupAdd []string
	// Recorded for inspect and acted on by serve (extra.go).
	RestartPolicy RestartPolicy
	LogConfig     LogConfig
	CpuShares     int64
	Healthcheck   *v1.HealthConfig
	// CPURealtimePeriod and CPURealtimeRuntime (µs: --cpu-rt-period,
	// --cpu-rt-runtime, HostConfig.CpuRealtimePeriod and
	// CpuRealtimeRuntime) are refused when set (realtime.go).
	CPURealtimePeriod, CPURealtimeRuntime int64
	// Kept for inspect, and honoured, checked or warned of (echoed.go).
	Echoed
	// Lookup finds another container by name or id, for VolumesFrom and
	// Links (nil: neither can be used).
	Lookup func(ref string) (Container, error)
}

// Container is what VolumesFrom and Links read of another container.
type Container struct {
	Name string
	Env  []string // KEY=VALUE
	// Mounts are its bind mounts, Volume set for a volume's.
	Mounts []backend.Mount
}

// MountOption is one --mount (or HostConfig.Mounts entry): a bind mount,
// a volume (a named one, or an anonymous one without Source) or a tmpfs.
type MountOption struct {
	Type, Source, Target string
	ReadOnly             bool
	TmpfsSize            string // tmpfs-size, a go-units size
}

// flag is the option that asked for bind mount m, as the errors name it:
// the same from the CLI's --mount (src= and dst= spelt source= and
// target=) and from the Engine API's HostConfig.Mounts, which docker's
// --mount sends.
func (m MountOption) flag() string {
	f := "--mount type=bind,source=" + m.Source + ",target=" + m.Target
	if m.ReadOnly {
		f += ",readonly"
	}
	return f
}

// ToSpawnSpec checks the options and turns them into a SpawnSpec. The
// warnings are what Docker warns of on create (the CLI prints them, the
// Engine API returns them in Warnings); the notes are slopbox's advice.
// Every error is a bad value or a policy
// refusal: the CLI exits 125 for it and the Engine API answers 400.
// Each group of options has its own step, in this order: the options
// recorded for inspect, security, the workspace, the network, the
// environment and labels, the mounts, the limits, the echoed options
// and last the anonymous volumes (they fill what no other mount covers).
func (o *CreateOptions) ToSpawnSpec() (s backend.SpawnSpec, warnings, notes []string, err error) {
	s = backend.SpawnSpec{Image: o.Image, Name: o.Name, User: o.User, Hostname: o.Hostname, Keep: o.Keep, AutoRemove: o.AutoRemove,
		DisableSetup: len(o.Setup) == 0, Setup: backend.Setup{Commands: o.Setup}, ReadOnlyRootfs: o.ReadOnly,
		CapAdd: o.CapAdd, CapDrop: o.CapDrop, AllowHostLoopback: o.AllowHostLoopback,
		ExtraHosts: o.ExtraHosts, DNS: o.DNS, DNSSearch: o.DNSSearch, DNSOptions: o.DNSOptions,
		AllowedMountRoots: o.AllowedMountRoots, Unsafe: append(slices.Clone(o.PolicyUnsafe), o.AllowUnsafe...), GroupAdd: o.GroupAdd}
	if err := o.checkRecorded(); err != nil {
		return s, nil, nil, err
	}
	if err := o.securityOpts(&s); err != nil {
		return s, nil, nil, err
	}
	if o.Workspace != "" {
		s.Workspace, s.Workdir = o.Workspace, o.Workdir
	} else {
		s.NoWorkspaceMount, s.Cwd = true, o.Workdir
	}
	if warnings, err = o.network(&s); err != nil {
		return s, nil, nil, err
	}
	if err := o.envAndLabels(&s); err != nil {
		return s, nil, nil, err
	}
	tmpfs, err := o.mounts(&s)
	if err != nil {
		return s, nil, nil, err
	}
	if err := o.specLimits(&s, tmpfs); err != nil {
		return s, nil, nil, err
	}
	volumes := len(o.AnonymousVolumes) > 0
	for _, m := range s.Mounts {
		volumes = volumes || m.Volume != "" || m.AnonymousVolume
	}
	w, err := o.checkEchoed(s.Limits.MemoryBytes, volumes)
	if err != nil {
		return s, nil, nil, err
	}
	warnings = append(warnings, w...)
	o.anonymousVolumes(&s)
	// What the spec may be, the backend checks once (SpawnSpec.Validate)
	// before it creates anything.
	return s, warnings, nil, nil
}

// checkRecorded checks the options slopbox records for inspect and serve
// acts on (host sharing, restart policy, log config, CPU shares,
// healthcheck, realtime), none of which goes into the SpawnSpec.
func (o *CreateOptions) checkRecorded() error {
	if err := o.HostSharing.Check(); err != nil {
		return err
	}
	if err := CheckRestartPolicy(o.RestartPolicy, o.AutoRemove); err != nil {
		return err
	}
	if err := checkLogConfig(o.LogConfig); err != nil {
		return err
	}
	if o.CpuShares < 0 {
		return backend.InvalidValue("invalid CPU shares (%d): the minimum is 0", o.CpuShares)
	}
	if err := checkHealthcheck(o.Healthcheck); err != nil {
		return err
	}
	return CheckRealtime(o.CPURealtimePeriod, o.CPURealtimeRuntime)
}

// securityOpts turns --security-opt into s: seccomp=unconfined is the one
// slopbox acts on, no-new-privileges is what it always does, and any
// other is refused.
func (o *CreateOptions) securityOpts(s *backend.SpawnSpec) error {
	for _, opt := range o.SecurityOpt {
		switch strings.ReplaceAll(opt, ":", "=") {
		case "seccomp=unconfined":
			s.SeccompUnconfined = true
		case "no-new-privileges", "no-new-privileges=true":
		default:
			return backend.InvalidValue("--security-opt %q is not supported (seccomp=unconfined, no-new-privileges)", opt)
		}
	}
	return nil
}

// network turns -p, --network, --network-alias, --ip and the further
// user networks into s's ports, network mode and attachments. Its
// warning is Docker's for ports published on the host network (which
// are dropped).
func (o *CreateOptions) network(s *backend.SpawnSpec) (warnings []string, err error) {
	for _, p := range o.Publish {
		pm, err := ParsePort(p)
		if err != nil {
			return nil, err
		}
		s.Ports = append(s.Ports, pm)
	}
	switch o.Network {
	case "", "default":
		// Docker's default network is bridge; slopbox's is the
		// sandbox's own loopback, unless a port is published, which
		// only bridge can do.
		s.Network = backend.NetworkNone
		if len(s.Ports) > 0 {
			s.Network = backend.NetworkBridge
		}
	case backend.NetworkNone, backend.NetworkBridge, backend.NetworkHost:
		s.Network = o.Network
	default:
		if strings.HasPrefix(o.Network, "container:") {
			return nil, backend.InvalidValue("network mode %q: sharing another container's network namespace is not supported by slopbox (use a user-defined network: slopbox network create NAME, then --network NAME)", o.Network)
		}
		// A user-defined network: the backend checks it exists.
		s.Network = o.Network
	}
	if (len(o.NetworkAliases) > 0 || o.IP != "") && backend.IsPredefinedNetwork(s.Network) {
		return nil, backend.InvalidValue("network-scoped aliases and --ip are only supported for user-defined networks (not %s)", s.Network)
	}
	if !backend.IsPredefinedNetwork(s.Network) {
		s.Networks = append(s.Networks, backend.NetworkAttachment{Network: s.Network, Aliases: o.NetworkAliases, IPv4: o.IP})
	}
	for _, n := range o.Networks {
		if !backend.IsPredefinedNetwork(n.Network) {
			s.Networks = append(s.Networks, n)
		}
	}
	if len(s.Networks) > 0 {
		// The first user network names the mode (Docker's NetworkMode);
		// the backend takes the attachments in order, one per network.
		s.Network = s.Networks[0].Network
	}
	if len(s.Ports) > 0 && s.Network == backend.NetworkHost {
		warnings = append(warnings, "Published ports are discarded when using host network mode")
		s.Ports = nil
	}
	return warnings, nil
}

// envAndLabels turns --link's environment, -e and --label into s's Env
// and Labels. It comes after network: links cannot be used with the host
// network.
func (o *CreateOptions) envAndLabels(s *backend.SpawnSpec) error {
	env := map[string]string{}
	if len(o.Links) > 0 && s.Network == backend.NetworkHost {
		return backend.InvalidValue("conflicting options: host type networking can't be used with links. This would result in undefined behavior")
	}
	for _, l := range o.Links {
		// As Docker's legacy links: the linked container's name and
		// environment, before the container's own (which wins).
		c, alias, err := o.linked(l)
		if err != nil {
			return err
		}
		for _, kv := range LinkEnv(o.Name, alias, c.Env) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	// A bare KEY (an Engine API Env entry; the CLI looks its own up) is
	// set empty, as slopbox always has (dockerd unsets the image's KEY).
	own, err := backend.ParseEnv("-e", o.Env, func(string) (string, bool) { return "", true })
	if err != nil {
		return err
	}
	maps.Copy(env, own)
	if len(env) > 0 {
		s.Env = env
	}
	if len(o.Labels) > 0 {
		if s.Labels, err = backend.ParseLabels(o.Labels); err != nil {
			return err
		}
	}
	return nil
}

// mounts turns --mount, -v and --volumes-from into s's Mounts, in that
// order, and marks the binds that keep their host owners. It returns the
// tmpfs mounts (--tmpfs and --mount type=tmpfs), which are limits.
func (o *CreateOptions) mounts(s *backend.SpawnSpec) (tmpfs []string, err error) {
	tmpfs = slices.Clone(o.Tmpfs)
	for _, m := range o.Mounts {
		switch m.Type {
		case "bind", "":
			if m.Source == "" || m.Target == "" {
				return nil, backend.InvalidValue("mount %s:%s: a bind mount needs a source and a target", m.Source, m.Target)
			}
			s.Mounts = append(s.Mounts, backend.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly, Flag: m.flag()})
		case "volume":
			if m.Target == "" {
				return nil, backend.InvalidValue("mount %s: a volume mount needs a target", m.Source)
			}
			s.Mounts = append(s.Mounts, backend.Mount{Volume: m.Source, AnonymousVolume: m.Source == "", Target: m.Target, ReadOnly: m.ReadOnly})
		case "tmpfs":
			t := m.Target
			if m.TmpfsSize != "" {
				t += ":size=" + m.TmpfsSize
			}
			tmpfs = append(tmpfs, t)
		default:
			return nil, backend.InvalidValue("mount type %q is not supported (bind, volume or tmpfs)", m.Type)
		}
	}
	if err := o.volumes(s); err != nil {
		return nil, err
	}
	for _, v := range o.VolumesFrom {
		ms, err := o.volumesFrom(v, s.Mounts)
		if err != nil {
			return nil, err
		}
		s.Mounts = append(s.Mounts, ms...)
	}
	if o.KeepOwnersOutside != "" {
		ws := filepath.Clean(o.KeepOwnersOutside)
		for i, m := range s.Mounts {
			if m.Source != "" && !(filepath.IsAbs(m.Source) && within(filepath.Clean(m.Source), ws)) {
				s.Mounts[i].KeepOwners = true
			}
		}
	}
	return tmpfs, nil
}

// volumes adds -v's mounts to s. With a workspace a relative source is a
// path in it; without one, a source starting with "." is the caller's.
func (o *CreateOptions) volumes(s *backend.SpawnSpec) error {
	for _, v := range o.Volumes {
		m, err := ParseVolume(v)
		if err != nil {
			return err
		}
		if m.Volume != "" && o.Workspace != "" {
			// With a workspace a relative source stays slopbox's: a
			// path in the workspace, not a volume name.
			m.Source, m.Volume = m.Volume, ""
		}
		if o.Workspace == "" && o.CallerDir != "" && strings.HasPrefix(m.Source, ".") {
			m.Source = filepath.Join(o.CallerDir, m.Source)
		}
		s.Mounts = append(s.Mounts, m)
	}
	return nil
}

// specLimits sets s's Limits (tmpfs the mounts gave) and refuses a tmpfs
// at a path another mount has.
func (o *CreateOptions) specLimits(s *backend.SpawnSpec, tmpfs []string) (err error) {
	if s.Limits, err = o.limits(tmpfs); err != nil {
		return err
	}
	for _, m := range s.Mounts {
		if t := path.Clean(m.Target); s.Limits.Tmpfs[t] > 0 || t == "/tmp" && s.Limits.TmpBytes > 0 {
			return backend.InvalidValue("Duplicate mount point: %s (a tmpfs and another mount)", t)
		}
	}
	return nil
}

// anonymousVolumes adds an anonymous volume for each of Config.Volumes no
// other mount or tmpfs covers. It starts empty: the image's files there
// are not copied in (dockerd copies them).
func (o *CreateOptions) anonymousVolumes(s *backend.SpawnSpec) {
	for _, target := range o.AnonymousVolumes {
		covered := s.Limits.TmpBytes > 0 && path.Clean(target) == "/tmp" || s.Limits.Tmpfs[path.Clean(target)] > 0
		for _, m := range s.Mounts {
			covered = covered || path.Clean(m.Target) == path.Clean(target)
		}
		if !covered {
			s.Mounts = append(s.Mounts, backend.Mount{Target: target, AnonymousVolume: true})
		}
	}
}

// linked finds the container a link names.
func (o *CreateOptions) linked(l string) (Container, string, error) {
	ref, alias, err := ParseLink(l)
	if err != nil {
		return Container{}, "", err
	}
	if o.Lookup == nil {
		return Container{}, "", backend.InvalidValue("links are not supported here")
	}
	c, err := o.Lookup(ref)
	if err != nil {
		return Container{}, "", backend.InvalidValue("could not get container for %s: %v", ref, err)
	}
	return c, alias, nil
}

// volumesFrom is the mounts VolumesFrom entry v (CONTAINER[:ro|rw]) adds:
// the container's bind mounts and volumes at their paths, read-only with
// ro, read-write with rw, else as they are there; a path one of have
// already covers is left out.
func (o *CreateOptions) volumesFrom(v string, have []backend.Mount) ([]backend.Mount, error) {
	ref, mode, _ := strings.Cut(v, ":")
	if mode != "" && mode != "ro" && mode != "rw" {
		return nil, backend.InvalidValue("invalid mode for volumes-from: %s", mode)
	}
	if o.Lookup == nil {
		return nil, backend.InvalidValue("volumes-from is not supported here")
	}
	c, err := o.Lookup(ref)
	if err != nil {
		return nil, backend.InvalidValue("volumes-from %s: %v", ref, err)
	}
	var out []backend.Mount
	for _, m := range c.Mounts {
		covered := false
		for _, h := range append(slices.Clone(have), out...) {
			covered = covered || path.Clean(h.Target) == path.Clean(m.Target)
		}
		if covered {
			continue
		}
		nm := backend.Mount{Target: m.Target, ReadOnly: m.ReadOnly}
		if mode != "" {
			nm.ReadOnly = mode == "ro"
		}
		if m.Volume != "" {
			nm.Volume = m.Volume
		} else {
			nm.Source = m.Source
		}
		out = append(out, nm)
	}
	return out, nil
}

// Limits checks --memory, --cpus, --pids-limit, --tmpfs and --storage-opt
// alone, so that a bad value is refused before an image is pulled.
func (o *CreateOptions) Limits() (backend.Limits, error) {
	tmpfs := slices.Clone(o.Tmpfs)
	for _, m := range o.Mounts {
		if m.Type == "tmpfs" && m.TmpfsSize != "" {
			tmpfs = append(tmpfs, m.Target+":size="+m.TmpfsSize)
		}
	}
	return o.limits(tmpfs)
}

func (o *CreateOptions) limits(tmpfs []string) (backend.Limits, error) {
	l := backend.Limits{CPUs: o.CPUs, Strict: o.StrictLimits}
	if o.PidsLimit > 0 {
		l.Pids = o.PidsLimit
	}
	if o.Memory != "" {
		n, err := ParseSize("--memory", o.Memory)
		if err != nil {
			return l, err
		}
		l.MemoryBytes = n
	}
	for _, t := range tmpfs {
		dst, n, err := ParseTmpfs(t)
		if err != nil {
			return l, err
		}
		if dst == "/tmp" {
			l.TmpBytes = n
			continue
		}
		if l.Tmpfs == nil {
			l.Tmpfs = map[string]int64{}
		}
		l.Tmpfs[dst] = n
	}
	for _, opt := range o.StorageOpt {
		v, ok := strings.CutPrefix(opt, "size=")
		n, err := ParseSize("--storage-opt size", v)
		if !ok || err != nil || n <= 0 {
			return l, backend.InvalidValue("--storage-opt %q: only size=N is supported (e.g. size=1g)", opt)
		}
		l.RootfsBytes = n
	}
	return l, l.Validate()
}

// DefaultTmpBytes is the size of a /tmp tmpfs given without size=: a
// tmpfs without one would get half the host's memory.
const DefaultTmpBytes = 64 << 20

// ParseTmpfs reads --tmpfs PATH[:OPTIONS] (HostConfig.Tmpfs is the same,
// path and options apart) and returns the path, cleaned, and the tmpfs's
// size: size=N is a size as Docker reads it (go-units' RAMInBytes:
// size=64 is 64 bytes, size=64m 64 MiB), refused when it does not fit in
// 63 bits; without it DefaultTmpBytes (a tmpfs counts as the sandbox's
// memory: Docker's default, half the host's memory, is not taken). PATH
// is any absolute path but the root.
func ParseTmpfs(t string) (string, int64, error) {
	dst, opts, _ := strings.Cut(t, ":")
	if !path.IsAbs(dst) || path.Clean(dst) == "/" {
		return "", 0, backend.InvalidValue("--tmpfs %q: invalid mount path %q (an absolute path other than /)", t, dst)
	}
	dst = path.Clean(dst)
	size := int64(DefaultTmpBytes)
	for _, o := range strings.Split(opts, ",") {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			n, err := ParseSize("--tmpfs "+dst+" size", v)
			if err != nil {
				return "", 0, err
			}
			if n <= 0 {
				return "", 0, backend.InvalidValue("--tmpfs %q: invalid size %q (want e.g. size=64m)", t, v)
			}
			size = n
		} else if o != "" && o != "rw" && o != "nosuid" && o != "nodev" && o != "noexec" && o != "exec" {
			return "", 0, backend.InvalidValue("--tmpfs %q: option %q is not supported (size= only)", t, o)
		}
	}
	return dst, size, nil
}

// ParseSize reads a size as Docker does (go-units' RAMInBytes: 512m, 2g,
// 1.5GiB, 1048576, binary multiples). go-units converts the number it
// parses to int64 unchecked, so a value too large for that, which would
// wrap to a negative or small one, is refused here.
func ParseSize(what, v string) (int64, error) {
	n, err := units.RAMInBytes(v)
	if err != nil {
		return 0, backend.InvalidValue("invalid %s %q: %v (want a size such as 512m or 2g)", what, v, err)
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
		return 0, backend.InvalidValue("invalid %s %q: too large (a size must be below 8 EiB)", what, v)
	}
	return n, nil
}

// Command is the command a container runs: ENTRYPOINT + CMD, the
// options' or the image's, merged as the daemon does: an entrypoint
// given (even an empty one) drops the image's CMD, and [""] clears it.
func (o *CreateOptions) Command(imageEntrypoint, imageCmd []string) []string {
	ep, cmd := o.Entrypoint, o.Cmd
	if len(ep) == 0 {
		if len(cmd) == 0 {
			cmd = imageCmd
		}
		if ep == nil {
			ep = imageEntrypoint
		}
	}
	if len(ep) == 1 && ep[0] == "" {
		ep = nil
	}
	return append(slices.Clone(ep), cmd...)
}

// EffectiveEntrypoint is the entrypoint Command uses (inspect's
// Config.Entrypoint).
func (o *CreateOptions) EffectiveEntrypoint(imageEntrypoint []string) []string {
	switch {
	case o.Entrypoint == nil:
		return imageEntrypoint
	case len(o.Entrypoint) == 1 && o.Entrypoint[0] == "":
		return nil
	}
	return o.Entrypoint
}

// MergeEnv is env files' pairs then the flags' (a flag wins), as
// CreateOptions.Env wants them.
func MergeEnv(lists ...map[string]string) []string {
	all := map[string]string{}
	for _, l := range lists {
		maps.Copy(all, l)
	}
	out := make([]string, 0, len(all))
	for _, k := range slices.Sorted(maps.Keys(all)) {
		out = append(out, k+"="+all[k])
	}
	return out
}

// ParseMount reads --mount: type=bind,source=HOST,target=PATH[,readonly],
// type=volume[,source=VOLUME],target=PATH[,readonly] (the default type;
// without a source, an anonymous volume) or
// type=tmpfs,target=/tmp[,tmpfs-size=N].
func ParseMount(v string) (MountOption, error) {
	m := MountOption{Type: "volume"}
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "type":
			m.Type = val
		case "source", "src":
			m.Source = val
		case "target", "destination", "dst":
			m.Target = val
		case "readonly", "ro":
			m.ReadOnly = val == "" || val == "true" || val == "1"
		case "tmpfs-size":
			m.TmpfsSize = val
		case "bind-propagation", "consistency":
		default:
			return m, backend.InvalidValue("--mount %q: option %q is not supported (type, source, target, readonly, tmpfs-size)", v, k)
		}
	}
	switch {
	case m.Target == "":
		return m, backend.InvalidValue("--mount %q: target is required", v)
	case m.Type == "bind" && m.Source == "":
		return m, backend.InvalidValue("--mount %q: source is required for a bind mount", v)
	case m.Type != "bind" && m.Type != "volume" && m.Type != "tmpfs":
		return m, backend.InvalidValue("--mount %q: type %q is not supported (bind, volume or tmpfs)", v, m.Type)
	}
	return m, nil
}
