package oci

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Opt changes a spec. Options are applied in order by New.
type Opt func(*specs.Spec) error

// ErrBadOption is wrapped by every option that rejects its arguments.
var ErrBadOption = errdefs.ErrInvalidArgument.WithMessage("invalid spec option")

// Defaults used by New.
const (
	DefaultHostname = "slopbox"
	DefaultPath     = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// CPUPeriod is the CFS period (µs) of --cpus quotas.
	CPUPeriod = 100000
)

// Network modes accepted by WithNetwork.
const (
	NetworkNone   = "none"
	NetworkHost   = "host"
	NetworkBridge = "bridge"
)

// DefaultCapabilities is Docker's default capability set less CAP_SETFCAP:
// through an idmapped mount whose owner is host root (a root-owned
// workspace or bind directory), file capabilities a sandbox set would be
// stored for host root, and seccomp cannot filter setxattr by name. Build
// steps, which write only into the store, get it back. It is given to the
// bounding, effective and permitted sets; inheritable and ambient stay empty.
var DefaultCapabilities = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FSETID",
	"CAP_FOWNER",
	"CAP_MKNOD",
	"CAP_NET_RAW",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_KILL",
	"CAP_AUDIT_WRITE",
}

// DefaultMaskedPaths are hidden from the container (runc's defaults plus
// /sys/devices/virtual/powercap, as Docker does).
var DefaultMaskedPaths = []string{
	"/proc/acpi",
	"/proc/asound",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/sys/firmware",
	"/sys/devices/virtual/powercap",
}

// DefaultReadonlyPaths are remounted read-only (runc's defaults).
var DefaultReadonlyPaths = []string{
	"/proc/bus",
	"/proc/fs",
	"/proc/irq",
	"/proc/sys",
	"/proc/sysrq-trigger",
}

// sysfsMount is the /sys mount used with a private network namespace.
func sysfsMount() specs.Mount {
	return specs.Mount{
		Destination: "/sys",
		Type:        "sysfs",
		Source:      "sysfs",
		Options:     []string{"nosuid", "noexec", "nodev", "ro"},
	}
}

// sysBindMount is the /sys mount used with the host's network namespace: a
// fresh sysfs cannot be mounted without owning the network namespace.
func sysBindMount() specs.Mount {
	return specs.Mount{
		Destination: "/sys",
		Type:        "bind",
		Source:      "/sys",
		Options:     []string{"rbind", "nosuid", "noexec", "nodev", "ro"},
	}
}

func defaultMounts() []specs.Mount {
	return []specs.Mount{
		{
			Destination: "/proc",
			Type:        "proc",
			Source:      "proc",
			Options:     []string{"nosuid", "noexec", "nodev"},
		},
		{
			Destination: "/dev",
			Type:        "tmpfs",
			Source:      "tmpfs",
			Options:     []string{"nosuid", "strictatime", "mode=755", "size=65536k"},
		},
		{
			// No gid=5: it fails in a user namespace where gid 5 is unmapped.
			Destination: "/dev/pts",
			Type:        "devpts",
			Source:      "devpts",
			Options:     []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"},
		},
		{
			Destination: "/dev/shm",
			Type:        "tmpfs",
			Source:      "shm",
			Options:     []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"},
		},
		{
			Destination: "/dev/mqueue",
			Type:        "mqueue",
			Source:      "mqueue",
			Options:     []string{"nosuid", "noexec", "nodev"},
		},
		sysfsMount(),
	}
}

// Default returns the secure default spec without any option applied and
// without the seccomp profile (New adds it).
func Default() *specs.Spec {
	return &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: "rootfs"},
		Process: &specs.Process{
			Terminal: false,
			User:     specs.User{UID: 0, GID: 0},
			Args:     []string{"sh"},
			Env:      []string{DefaultPath},
			Cwd:      "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  slices.Clone(DefaultCapabilities),
				Effective: slices.Clone(DefaultCapabilities),
				Permitted: slices.Clone(DefaultCapabilities),
			},
			NoNewPrivileges: true,
		},
		Hostname: DefaultHostname,
		Mounts:   defaultMounts(),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.UserNamespace},
				{Type: specs.CgroupNamespace},
			},
			Resources: &specs.LinuxResources{
				// Deny all devices; the runtime adds its default allow list.
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
			MaskedPaths:   slices.Clone(DefaultMaskedPaths),
			ReadonlyPaths: slices.Clone(DefaultReadonlyPaths),
		},
	}
}

// New returns the secure default spec (Default plus Docker's default seccomp
// profile for the running architecture) with opts applied in order.
func New(opts ...Opt) (*specs.Spec, error) {
	s := Default()
	sc, err := DefaultSeccomp(s)
	if err != nil {
		return nil, fmt.Errorf("default seccomp profile: %w", err)
	}
	s.Linux.Seccomp = sc
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func badOption(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadOption, fmt.Sprintf(format, args...))
}

// WithRootfs sets the root filesystem path (absolute, or relative to the
// bundle) and whether it is mounted read-only.
func WithRootfs(p string, readonly bool) Opt {
	return func(s *specs.Spec) error {
		if p == "" {
			return badOption("empty rootfs path")
		}
		s.Root = &specs.Root{Path: p, Readonly: readonly}
		return nil
	}
}

// WithProcess sets the process arguments, environment and working
// directory. env replaces the default environment; when it has no PATH entry
// the default PATH is prepended. An empty cwd means "/".
func WithProcess(args, env []string, cwd string) Opt {
	return func(s *specs.Spec) error {
		if len(args) == 0 || args[0] == "" {
			return badOption("process args must not be empty")
		}
		if cwd == "" {
			cwd = "/"
		}
		if !path.IsAbs(cwd) {
			return badOption("process cwd %q must be absolute", cwd)
		}
		var e []string
		hasPath := false
		for _, kv := range env {
			k, _, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return badOption("environment entry %q is not KEY=VALUE", kv)
			}
			if k == "PATH" {
				hasPath = true
			}
		}
		if !hasPath {
			e = append(e, DefaultPath)
		}
		e = append(e, env...)
		ensureProcess(s)
		s.Process.Args = slices.Clone(args)
		s.Process.Env = e
		s.Process.Cwd = path.Clean(cwd)
		return nil
	}
}

// WithUser sets the uid, gid and supplementary gids of the process (ids as
// seen inside the container's user namespace).
func WithUser(uid, gid uint32, additionalGids []uint32) Opt {
	return func(s *specs.Spec) error {
		ensureProcess(s)
		s.Process.User = specs.User{
			UID:            uid,
			GID:            gid,
			AdditionalGids: slices.Clone(additionalGids),
		}
		return nil
	}
}

// ValidHostname is the one hostname rule (the sandbox's, the CLI's and
// the Engine API's): ^[a-zA-Z0-9][a-zA-Z0-9.-]{0,62}$, RFC 1123's letters
// within the kernel's 64 bytes. A name in /etc/hosts or a search domain
// is a DNS name, a rule of its own (validDNSName).
func ValidHostname(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// WithHostname sets the container's hostname (in its own UTS namespace).
func WithHostname(name string) Opt {
	return func(s *specs.Spec) error {
		if !ValidHostname(name) {
			return badOption("invalid hostname %q: letters, digits, '-' and '.', at most 63, starting with a letter or digit", name)
		}
		s.Hostname = name
		return nil
	}
}

// WithIDMappings sets the user namespace's uid and gid maps. The user
// namespace itself is always part of New's defaults.
func WithIDMappings(uids, gids []specs.LinuxIDMapping) Opt {
	return func(s *specs.Spec) error {
		if len(uids) == 0 || len(gids) == 0 {
			return badOption("uid and gid mappings must both be non-empty")
		}
		for _, m := range slices.Concat(uids, gids) {
			if m.Size == 0 {
				return badOption("id mapping %d:%d:%d has size 0", m.ContainerID, m.HostID, m.Size)
			}
		}
		ensureLinux(s)
		setNamespace(s, specs.UserNamespace, true)
		s.Linux.UIDMappings = slices.Clone(uids)
		s.Linux.GIDMappings = slices.Clone(gids)
		return nil
	}
}

// WithNetwork selects the network mode:
//   - "none" (or ""): a private network namespace with loopback only;
//   - "bridge": a private network namespace, wired up elsewhere;
//   - "host": no network namespace (the host's is shared); /sys is then
//     bind-mounted read-only from the host instead of a fresh sysfs, which
//     cannot be mounted without owning the network namespace.
func WithNetwork(mode string) Opt {
	return func(s *specs.Spec) error {
		var own bool
		switch mode {
		case "", NetworkNone, NetworkBridge:
			own = true
		case NetworkHost:
			own = false
		default:
			return badOption("unknown network mode %q (want none, host or bridge)", mode)
		}
		ensureLinux(s)
		setNamespace(s, specs.NetworkNamespace, own)
		sys := sysfsMount()
		if !own {
			sys = sysBindMount()
		}
		replaced := false
		for i, m := range s.Mounts {
			if path.Clean(m.Destination) == "/sys" && (m.Type == "sysfs" || (m.Type == "bind" && m.Source == "/sys")) {
				s.Mounts[i] = sys
				replaced = true
				break
			}
		}
		if !replaced {
			s.Mounts = append(s.Mounts, sys)
		}
		return nil
	}
}

// WithMounts appends mounts after those already in the spec, in order.
func WithMounts(ms []specs.Mount) Opt {
	return func(s *specs.Spec) error {
		for _, m := range ms {
			if !path.IsAbs(m.Destination) {
				return badOption("mount destination %q must be absolute", m.Destination)
			}
			m.Options = slices.Clone(m.Options)
			m.UIDMappings = slices.Clone(m.UIDMappings)
			m.GIDMappings = slices.Clone(m.GIDMappings)
			s.Mounts = append(s.Mounts, m)
		}
		return nil
	}
}

// WithoutSeccomp removes the seccomp profile. For tests and doctor only.
func WithoutSeccomp() Opt {
	return func(s *specs.Spec) error {
		if s.Linux != nil {
			s.Linux.Seccomp = nil
		}
		return nil
	}
}

func ensureProcess(s *specs.Spec) {
	if s.Process == nil {
		s.Process = &specs.Process{Cwd: "/"}
	}
}

func ensureLinux(s *specs.Spec) {
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
}

// setNamespace adds (present) or removes (!present) a namespace of type t,
// keeping the position of an existing entry.
func setNamespace(s *specs.Spec, t specs.LinuxNamespaceType, present bool) {
	i := slices.IndexFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == t })
	switch {
	case present && i < 0:
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: t})
	case !present && i >= 0:
		s.Linux.Namespaces = slices.Delete(s.Linux.Namespaces, i, i+1)
	}
}

// WithInheritedUserNamespace leaves the user namespace out of the spec:
// the runtime already runs as root of the sandbox's user namespace (slopbox
// sets it up itself, with the subordinate range), and the container shares
// it. Container root is still not host root.
func WithInheritedUserNamespace() Opt {
	return func(s *specs.Spec) error {
		ensureLinux(s)
		setNamespace(s, specs.UserNamespace, false)
		s.Linux.UIDMappings, s.Linux.GIDMappings = nil, nil
		return nil
	}
}
