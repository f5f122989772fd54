//go:build linux

package oci

import (
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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
	refuseSetidModes(sc)
	return sc, nil
}

// WithSetidModes re-resolves Docker's profile against s without the setid
// refusal: for a build step (a Dockerfile RUN), whose only writable places
// are its root filesystem's upper directory, in the image store, and
// tmpfs mounts. Packages that install setuid files (passwd, sudo) need it.
// The store is reachable only by its owner (mode 0700), and the files
// belong to ids of the store's user namespace, never to host root.
func WithSetidModes() Opt {
	return func(s *specs.Spec) error {
		if s.Linux == nil || s.Linux.Seccomp == nil {
			return nil
		}
		sc, err := seccomp.GetDefaultProfile(s)
		if err != nil {
			return err
		}
		if len(sc.Architectures) > 1 {
			sc.Architectures = sc.Architectures[:1]
		}
		s.Linux.Seccomp = sc
		return nil
	}
}

// setidBits are the mode bits a sandbox may not set: a file it makes in the
// workspace or a read-write mount would keep them on the host, where the
// kernel honours them (no_new_privs only holds inside the sandbox).
const setidBits = 0o6000

// Flags of open(2) that create a file with the given mode. __O_TMPFILE is
// not in x/sys; O_TMPFILE is it plus O_DIRECTORY.
const creatingFlags = 0o100 /* O_CREAT */ | 0o20000000 /* __O_TMPFILE */

// modeArg names, per syscall that sets a file's mode, the index of the mode
// argument and, for the open family, of the flags (-1: the call always
// applies the mode).
var modeArg = map[string]struct{ mode, flags uint }{
	"chmod":     {1, noFlags},
	"fchmod":    {1, noFlags},
	"fchmodat":  {2, noFlags},
	"fchmodat2": {2, noFlags},
	"creat":     {1, noFlags},
	"mknod":     {1, noFlags},
	"mknodat":   {2, noFlags},
	"open":      {2, 1},
	"openat":    {3, 2},
}

const noFlags = ^uint(0)

// refuseSetidModes makes the calls that set a file's mode fail with EPERM
// when the mode has the setuid or setgid bit (SECURITY.md, "setuid files"):
// Docker's profile allows them unconditionally. Each such syscall is taken
// out of the profile's unconditional allow rule and allowed again only when
// (mode & 06000) == 0 or, for open and openat, when the flags create
// nothing. openat2 passes its mode in a struct that seccomp cannot read,
// so it fails with ENOSYS, which every libc and Go treat as "use openat".
// mkdir needs nothing: the kernel ignores setid bits in its mode.
func refuseSetidModes(sc *specs.LinuxSeccomp) {
	enosys := uint(unix.ENOSYS)
	var kept []specs.LinuxSyscall
	var taken []string
	for _, rule := range sc.Syscalls {
		if rule.Action == specs.ActAllow && len(rule.Args) == 0 {
			rule.Names = slices.DeleteFunc(slices.Clone(rule.Names), func(n string) bool {
				_, ok := modeArg[n]
				if ok {
					taken = append(taken, n)
				}
				return ok || n == "openat2"
			})
			if len(rule.Names) == 0 {
				continue
			}
		}
		kept = append(kept, rule)
	}
	slices.Sort(taken)
	for _, name := range taken {
		a := modeArg[name]
		kept = append(kept, specs.LinuxSyscall{Names: []string{name}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: a.mode, Value: setidBits, ValueTwo: 0, Op: specs.OpMaskedEqual}}})
		if a.flags != noFlags {
			kept = append(kept, specs.LinuxSyscall{Names: []string{name}, Action: specs.ActAllow,
				Args: []specs.LinuxSeccompArg{{Index: a.flags, Value: creatingFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}}})
		}
	}
	kept = append(kept, specs.LinuxSyscall{Names: []string{"openat2"}, Action: specs.ActErrno, ErrnoRet: &enosys})
	sc.Syscalls = kept
}
