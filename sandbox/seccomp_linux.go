//go:build seccomp

package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer/configs"
	_ "github.com/opencontainers/runc/libcontainer/seccomp" // links the functions named below
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// builtWithSeccomp: libcontainer can load seccomp profiles (buildcheck.go).
const builtWithSeccomp = true

// libcontainer compiles the seccomp profile with libseccomp inside every
// container's init, which costs about 2 ms per sandbox on a 2-core machine
// (the kernel load itself is about 0.1 ms). slopbox compiles it once, with
// libcontainer's own code so the program is the one runc would load
// (including its -ENOSYS stub for syscalls newer than the profile), caches
// it, and has the sandbox's PID 1 load it before it serves any command.
//
// These are libcontainer's unexported helpers, whose signatures the
// compiler does not check. They are kept (libseccomp-golang's own BPF
// export would not give runc's -ENOSYS stub) behind two tests:
// TestLinknameRuncVersion fails on any runc upgrade until the signatures
// below have been checked against it and linknameRuncVersion updated, and
// TestSeccompProgram checks the compiled program's behaviour.

// linknameRuncVersion is the runc release the declarations below were
// checked against.
const linknameRuncVersion = "v1.5.2"

//go:linkname lcGetAction github.com/opencontainers/runc/libcontainer/seccomp.getAction
func lcGetAction(act configs.Action, errnoRet *uint) (libseccomp.ScmpAction, error)

//go:linkname lcSetFlag github.com/opencontainers/runc/libcontainer/seccomp.setFlag
func lcSetFlag(filter *libseccomp.ScmpFilter, flag specs.LinuxSeccompFlag) error

//go:linkname lcMatchCall github.com/opencontainers/runc/libcontainer/seccomp.matchCall
func lcMatchCall(filter *libseccomp.ScmpFilter, call *configs.Syscall, defAct libseccomp.ScmpAction) error

//go:linkname lcEnosysPatchFilter github.com/opencontainers/runc/libcontainer/seccomp/patchbpf.enosysPatchFilter
func lcEnosysPatchFilter(config *configs.Seccomp, filter *libseccomp.ScmpFilter) ([]unix.SockFilter, error)

//go:linkname lcFilterFlags github.com/opencontainers/runc/libcontainer/seccomp/patchbpf.filterFlags
func lcFilterFlags(config *configs.Seccomp, filter *libseccomp.ScmpFilter) (flags uint, noNewPrivs bool, err error)

// seccompProgram is a compiled filter in the form PID 1 reads it: the
// seccomp(2) flags, then the classic BPF instructions.
type seccompProgram []byte

// compileSeccomp compiles profile exactly as libcontainer's InitSeccomp does,
// without loading it.
func compileSeccomp(profile *specs.LinuxSeccomp) (seccompProgram, error) {
	config, err := specconv.SetupSeccomp(profile)
	if err != nil {
		return nil, err
	}
	defAct, err := lcGetAction(config.DefaultAction, config.DefaultErrnoRet)
	if err != nil {
		return nil, fmt.Errorf("seccomp: default action: %w", err)
	}
	if defAct == libseccomp.ActNotify {
		return nil, errors.New("seccomp: SCMP_ACT_NOTIFY is not supported")
	}
	for _, call := range config.Syscalls {
		if call == nil || call.Action == configs.Notify {
			return nil, errors.New("seccomp: SCMP_ACT_NOTIFY is not supported")
		}
	}
	filter, err := libseccomp.NewFilter(defAct)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	defer filter.Release()
	for _, arch := range config.Architectures {
		a, err := libseccomp.GetArchFromString(arch)
		if err != nil {
			return nil, fmt.Errorf("seccomp: architecture %s: %w", arch, err)
		}
		if err := filter.AddArch(a); err != nil {
			return nil, fmt.Errorf("seccomp: architecture %s: %w", arch, err)
		}
	}
	for _, flag := range config.Flags {
		if err := lcSetFlag(filter, flag); err != nil {
			return nil, err
		}
	}
	if len(config.Syscalls) > 32 {
		_ = filter.SetOptimize(2) // as libcontainer: best effort
	}
	if err := filter.SetNoNewPrivsBit(false); err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	for _, call := range config.Syscalls {
		if err := lcMatchCall(filter, call, defAct); err != nil {
			return nil, err
		}
	}
	insns, err := lcEnosysPatchFilter(config, filter)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	flags, _, err := lcFilterFlags(config, filter)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if len(insns) == 0 || len(insns) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program of %d instructions", len(insns))
	}
	prog := binary.NativeEndian.AppendUint32(nil, uint32(flags))
	prog = append(prog, unsafe.Slice((*byte)(unsafe.Pointer(&insns[0])), len(insns)*int(unsafe.Sizeof(insns[0])))...)
	return prog, nil
}

// seccompCache keeps compiled programs in memory and under dir, keyed by the
// profile, this binary's libseccomp, runc and slopbox versions and the
// running kernel (libseccomp probes the kernel for the actions it may
// use), and checked against their hash when read.
type seccompCache struct {
	dir string
	mu  sync.Mutex
	mem map[string]seccompProgram
}

func (c *seccompCache) get(profile *specs.LinuxSeccomp) (seccompProgram, error) {
	if profile == nil {
		return nil, nil
	}
	key, err := seccompKey(profile, buildVersions())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.mem[key]; ok {
		return p, nil
	}
	path := filepath.Join(c.dir, "seccomp-"+key+".bpf")
	p, ok := readCachedProgram(path)
	if !ok {
		if p, err = compileSeccomp(profile); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(p)
		// A cache: failing to keep it is harmless.
		if os.MkdirAll(c.dir, 0o700) == nil {
			writeFileAtomic(path, bytes.NewReader(append(sum[:], p...)), 0o600)
		}
	}
	if c.mem == nil {
		c.mem = map[string]seccompProgram{}
	}
	c.mem[key] = p
	return p, nil
}

// readCachedProgram reads a cached program (its sha256, then the
// program) and returns it only when the content matches its hash: a
// truncated or altered file is compiled again, not loaded.
func readCachedProgram(path string) (seccompProgram, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < sha256.Size {
		return nil, false
	}
	p := b[sha256.Size:]
	if sum := sha256.Sum256(p); !bytes.Equal(sum[:], b[:sha256.Size]) || !validProgram(p) {
		return nil, false
	}
	return p, true
}

func validProgram(p []byte) bool {
	n := len(p) - 4
	return n > 0 && n%8 == 0 && n/8 <= unix.BPF_MAXINSNS
}

// seccompKey names a compiled program by what it depends on: the profile,
// the kernel, libseccomp, and versions (buildVersions: Go, slopbox, runc).
func seccompKey(profile *specs.LinuxSeccomp, versions string) (string, error) {
	j, err := json.Marshal(profile)
	if err != nil {
		return "", err
	}
	var uts unix.Utsname
	unix.Uname(&uts)
	maj, min, mic := libseccomp.GetLibraryVersion()
	api, _ := libseccomp.GetAPI()
	h := sha256.New()
	fmt.Fprintf(h, "slopbox-seccomp-2 %s %s %d.%d.%d api%d %s\n", unix.ByteSliceToString(uts.Release[:]), unix.ByteSliceToString(uts.Machine[:]), maj, min, mic, api, versions)
	h.Write(j)
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// buildVersions names what compiled the program: runc's module version,
// this binary's module version and VCS revision, and the Go toolchain,
// so that an upgrade of any of them compiles the profile again.
var buildVersions = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	// Test binaries carry no dependency list: runc's version is also the
	// one TestLinknameRuncVersion keeps equal to go.mod's.
	v := []string{bi.GoVersion, bi.Main.Path + "@" + bi.Main.Version, "runc-linkname@" + linknameRuncVersion}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
			v = append(v, s.Key+"="+s.Value)
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/opencontainers/runc" || d.Path == "github.com/seccomp/libseccomp-golang" {
			v = append(v, d.Path+"@"+d.Version)
		}
	}
	return strings.Join(v, " ")
})
