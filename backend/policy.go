package backend

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// ErrUnsafe is wrapped when a SpawnSpec weakens the sandbox in a way the
// policy refuses unless SpawnSpec.Unsafe allows it explicitly.
var ErrUnsafe = errors.New("refused by the sandbox policy")

// UnsafeCapabilities reach the kernel or other processes: adding one (or
// ALL) needs an explicit "cap-add=NAME" in SpawnSpec.Unsafe.
var UnsafeCapabilities = []string{
	"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO", "SYS_PTRACE", "SYS_BOOT", "SYS_TIME",
	"MAC_ADMIN", "MAC_OVERRIDE", "DAC_READ_SEARCH", "BPF", "PERFMON", "SYSLOG",
	"NET_ADMIN", "SYS_RESOURCE", "LINUX_IMMUTABLE", "AUDIT_CONTROL", "CHECKPOINT_RESTORE",
	"BLOCK_SUSPEND", "WAKE_ALARM",
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
	for _, m := range append(slices.Clone(s.Mounts), backend2static(s.StaticAssets)...) {
		if p, bad := hostSystemPath(m.Source); bad && !slices.Contains(s.Unsafe, "mount="+p) {
			return fmt.Errorf("%w: mounting the host's %s (-v %s:%s) exposes the host to the sandbox; allow it explicitly with --allow-unsafe mount=%s", ErrUnsafe, p, m.Source, m.Target, p)
		}
	}
	return nil
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
