package backend

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
)

// ErrUnsafe is wrapped when a SpawnSpec weakens the sandbox in a way the
// policy refuses unless SpawnSpec.Unsafe allows it explicitly.
var ErrUnsafe = errdefs.ErrInvalidArgument.WithMessage("refused by the sandbox policy")

// UnsafeCapabilities reach the kernel or other processes: adding one (or
// ALL) needs an explicit "cap-add=NAME" in SpawnSpec.Unsafe.
var UnsafeCapabilities = []string{
	"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO", "SYS_PTRACE", "SYS_BOOT", "SYS_TIME",
	"MAC_ADMIN", "MAC_OVERRIDE", "DAC_READ_SEARCH", "BPF", "PERFMON", "SYSLOG",
	"NET_ADMIN", "SYS_RESOURCE", "LINUX_IMMUTABLE", "AUDIT_CONTROL", "CHECKPOINT_RESTORE",
	"BLOCK_SUSPEND", "WAKE_ALARM",
	// File capabilities written through an idmapped mount owned by host
	// root are host root's (not in the default set either).
	"SETFCAP",
}

// CheckPolicy refuses the weakenings of s that its Unsafe list does not
// allow: an unsafe capability added, the seccomp profile turned off. The
// error names what to allow.
func (s SpawnSpec) CheckPolicy() error {
	for _, c := range s.CapAdd {
		n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(c)), "CAP_")
		if slices.Contains(UnsafeCapabilities, n) && !slices.Contains(s.Unsafe, "cap-add="+n) {
			return fmt.Errorf("%w: --cap-add %s gives the sandbox a capability that reaches the kernel or other processes; allow it explicitly with --allow-unsafe cap-add=%s", ErrUnsafe, n, n)
		}
	}
	if s.SeccompUnconfined && !slices.Contains(s.Unsafe, "seccomp=unconfined") {
		return fmt.Errorf("%w: --security-opt seccomp=unconfined turns off the sandbox's syscall filter; allow it explicitly with --allow-unsafe seccomp=unconfined", ErrUnsafe)
	}
	mounts := append(slices.Clone(s.Mounts), backend2static(s.StaticAssets)...)
	if s.Workspace != "" && !s.NoWorkspaceMount {
		// The workspace is a read-write bind too, handed over as root.
		mounts = append(mounts, Mount{Source: s.Workspace, Target: "--workspace", HandOver: true})
	}
	for _, m := range mounts {
		if err := CheckMountSource(m, s.Unsafe); err != nil {
			return err
		}
	}
	return nil
}

// CheckMountSource refuses a bind source that is, or leads through a
// symlink to, one of UnsafeMountSources (unless unsafe allows it), and a
// hand-over (:U, a workspace) of a host system directory, which would give
// the host's files to a sandbox's user. SpawnSpec.Validate checks a spec's
// sources with it, by name: it follows m.Source's symlinks. A backend
// checks what it opened with CheckOpenedSource.
func CheckMountSource(m Mount, unsafe []string) error {
	paths := []string{m.Source}
	if path.IsAbs(m.Source) {
		if real, err := filepath.EvalSymlinks(m.Source); err == nil && real != path.Clean(m.Source) {
			paths = append(paths, real)
		}
	}
	return checkSourcePaths(m, paths, unsafe)
}

// CheckOpenedSource is CheckMountSource for a source a backend has opened:
// m.Source is the path of the descriptor it opened (as /proc/self/fd has
// it), the inode it mounts. It is checked as it is: nothing is resolved by
// name again, which could lead elsewhere by now.
func CheckOpenedSource(m Mount, unsafe []string) error {
	return checkSourcePaths(m, []string{m.Source}, unsafe)
}

// checkSourcePaths applies CheckMountSource's rules to paths: m.Source,
// then where it leads when that differs (named as the symlink's target).
func checkSourcePaths(m Mount, paths []string, unsafe []string) error {
	for _, src := range paths {
		if p, bad := hostSystemPath(src); bad && !slices.Contains(unsafe, "mount="+p) {
			via := ""
			if src != paths[0] {
				via = " through the symlink " + m.Source
			}
			return fmt.Errorf("%w: mounting the host's %s%s (%s) exposes the host to the sandbox; allow it explicitly with --allow-unsafe mount=%s", ErrUnsafe, p, via, m.FlagName(), p)
		}
		// Only root hands over (rootless, the caller's files are its own).
		if m.HandOver && !m.ReadOnly && os.Geteuid() == 0 {
			if err := CheckHandOver(src); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckHandOver (as root) refuses to hand src, the path of what is about
// to be handed over, to the sandbox's user when it is a host system
// directory or a credentials directory.
func CheckHandOver(src string) error {
	if handOverForbidden(src) {
		return fmt.Errorf("%w: handing %s over to the sandbox's user (:U, or as a workspace) would change the owner of the host's system files or credentials; mount a directory of your own", ErrUnsafe, src)
	}
	return nil
}

// handOverForbidden reports whether src (clean, absolute) is a host
// system directory, or lies in one, whose files must keep their owners, or
// is or lies in a credentials directory (.ssh, .gnupg).
func handOverForbidden(src string) bool {
	if !path.IsAbs(src) {
		return false
	}
	p := path.Clean(src)
	if InCredentialsDir(p) {
		return true // keys: root's (/root/.ssh) or another user's
	}
	for _, d := range []string{"/", "/var", "/home", "/opt", "/srv", "/mnt", "/media", "/tmp", "/var/tmp", "/root"} {
		if p == d {
			return true
		}
	}
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/etc", "/proc",
		"/sys", "/dev", "/run", "/var/lib", "/var/log", "/var/cache", "/var/spool", "/var/mail", "/var/backups", "/var/opt", "/var/local"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// InCredentialsDir reports whether path p is or lies in a credentials
// directory (.ssh, .gnupg).
func InCredentialsDir(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == ".ssh" || c == ".gnupg" {
			return true
		}
	}
	return false
}

func backend2static(assets []StaticAsset) []Mount {
	var out []Mount
	for _, a := range assets {
		out = append(out, Mount{Source: a.Source, Target: "/static/" + a.SavePath})
	}
	return out
}

// UnsafeMountSources are host directories a mount may not expose, nor
// any path inside /proc, /sys and /dev (rlm_code's policy, and podman's
// warnings).
var UnsafeMountSources = []string{"/", "/proc", "/sys", "/dev", "/boot", "/etc"}

// hostSystemPath reports whether an absolute mount source is one of
// UnsafeMountSources (or under /proc, /sys, /dev), and which.
func hostSystemPath(src string) (string, bool) {
	if !path.IsAbs(src) {
		return "", false // relative: beneath the workspace
	}
	p := path.Clean(src)
	if slices.Contains(UnsafeMountSources, p) {
		return p, true
	}
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		if strings.HasPrefix(p, d+"/") {
			return d, true
		}
	}
	return "", false
}

// HostSharing is what a docker command line (or an Engine API HostConfig)
// may ask for that would share the host with a sandbox. Check refuses it,
// naming the policy: nothing can allow it.
type HostSharing struct {
	Privileged                            bool
	Devices                               []string
	DeviceCgroupRules                     []string
	PidMode, IpcMode, UTSMode, UsernsMode string
}

// Check refuses a privileged sandbox, host devices and host namespaces.
func (h HostSharing) Check() error {
	refuse := func(flag, why string) error {
		return fmt.Errorf("%w: %s %s", ErrUnsafe, flag, why)
	}
	switch {
	case h.Privileged:
		return refuse("--privileged", "would turn the sandbox off; slopbox has no privileged mode (for one capability: --cap-add NAME --allow-unsafe cap-add=NAME)")
	case len(h.Devices) > 0:
		return refuse("--device "+h.Devices[0], "would pass a host device in; slopbox passes none")
	case len(h.DeviceCgroupRules) > 0:
		return refuse("--device-cgroup-rule "+h.DeviceCgroupRules[0], "would let the sandbox use a host device; slopbox passes none")
	}
	for _, ns := range []struct{ flag, value string }{{"--pid", h.PidMode}, {"--ipc", h.IpcMode}, {"--uts", h.UTSMode}, {"--userns", h.UsernsMode}} {
		switch ns.value {
		case "", "private":
		case "host":
			return refuse(ns.flag+"=host", "would share the host's namespace with the sandbox; slopbox never does")
		default:
			return InvalidValue("%s %q is not supported (every sandbox has its own)", ns.flag, ns.value)
		}
	}
	return nil
}
