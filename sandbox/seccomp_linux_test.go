//go:build seccomp

package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/oci"
)

const seccompProbe = "sandbox-test-seccomp-probe"

func init() { reexec.Register(seccompProbe, seccompProbeMain) }

// seccompProbeMain loads the program on stdin the way PID 1 does and
// reports what three syscalls return under it.
func seccompProbeMain() int {
	// The filter is loaded on this thread only (as PID 1, a C program
	// with one thread, does): the syscalls below must run on it too, not
	// on another thread of the Go runtime (the CI flake where unshare
	// returned EINVAL, allowed, instead of EPERM).
	runtime.LockOSThread()
	p, err := os.ReadFile("/dev/stdin")
	if err != nil || !validProgram(p) {
		fmt.Println("bad program", err)
		return 1
	}
	insns := p[4:]
	prog := unix.SockFprog{Len: uint16(len(insns) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&insns[0]))}
	unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(binary.NativeEndian.Uint32(p)), uintptr(unsafe.Pointer(&prog))); e != 0 {
		fmt.Println("load:", e)
		return 1
	}
	_, _, e1 := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
	_, _, e2 := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
	_, _, e3 := unix.RawSyscall(1000, 0, 0, 0) // newer than any syscall the profile names
	fmt.Printf("getpid=%d unshare=%d new=%d\n", e1, e2, e3)
	return 0
}

// TestSeccompProgram: the program compiled once on the host is Docker's
// profile with libcontainer's -ENOSYS stub, and the cache returns it again.
func TestSeccompProgram(t *testing.T) {
	spec, err := oci.New()
	if err != nil {
		t.Fatal(err)
	}
	c := seccompCache{dir: t.TempDir()}
	p, err := c.get(spec.Linux.Seccomp)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), reexec.Env+"="+seccompProbe)
	cmd.Stdin = strings.NewReader(string(p))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	want := fmt.Sprintf("getpid=0 unshare=%d new=%d\n", unix.EPERM, unix.ENOSYS)
	if string(out) != want {
		t.Errorf("under the compiled filter: %q, want %q", out, want)
	}
	// A second cache, as the next process would open it, reads the file.
	c2 := seccompCache{dir: c.dir}
	p2, err := c2.get(spec.Linux.Seccomp)
	if err != nil || string(p2) != string(p) {
		t.Errorf("cached program differs (%v)", err)
	}
	if _, err := os.Stat(c.dir); err != nil {
		t.Fatal(err)
	}
}

// Item 6: a cached program whose bytes were altered is compiled again,
// not loaded; and the cache key changes with the runc and slopbox build.
func TestSeccompCacheIsChecked(t *testing.T) {
	spec, err := oci.New()
	if err != nil {
		t.Fatal(err)
	}
	c := seccompCache{dir: t.TempDir()}
	p, err := c.get(spec.Linux.Seccomp)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(c.dir, "seccomp-*.bpf"))
	if len(files) != 1 {
		t.Fatalf("cache files: %v", files)
	}
	// An old filter of the same length, as a stale cache would hold: an
	// allow-everything program (the length check alone let it through).
	b, _ := os.ReadFile(files[0])
	forged := append([]byte(nil), b...)
	for i := sha256.Size + 4; i+8 <= len(forged); i += 8 {
		copy(forged[i:], []byte{0x06, 0, 0, 0, 0, 0, 0xff, 0x7f}) // BPF_RET SECCOMP_RET_ALLOW
	}
	os.WriteFile(files[0], forged, 0o644)
	c2 := seccompCache{dir: c.dir}
	p2, err := c2.get(spec.Linux.Seccomp)
	if err != nil || !bytes.Equal(p2, p) {
		t.Errorf("an altered cache file was loaded (%v)", err)
	}
	// A stale program cannot even be found: another runc, slopbox or Go
	// gives another key.
	v := buildVersions()
	if !strings.Contains(v, "runc-linkname@"+linknameRuncVersion) || !strings.Contains(v, runtime.Version()) {
		t.Errorf("the cache key does not name runc's and Go's versions: %q", v)
	}
	key, err := seccompKey(spec.Linux.Seccomp, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{
		strings.Replace(v, "runc-linkname@"+linknameRuncVersion, "runc-linkname@v1.5.3", 1),
		strings.Replace(v, runtime.Version(), "go1.0", 1),
		v + " vcs.revision=0123abc",
	} {
		if k, _ := seccompKey(spec.Linux.Seccomp, other); k == key {
			t.Errorf("versions %q and %q give the same cache key %s", v, other, key)
		}
	}
}

// TestLinknameRuncVersion: the go:linkname declarations in seccomp_linux.go
// reach runc internals the compiler does not check. An upgrade of runc in
// go.mod fails here until they are checked against it (see
// linknameRuncVersion).
func TestLinknameRuncVersion(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatalf("go.mod (the test runs in sandbox/): %v", err)
	}
	for _, line := range strings.Split(string(mod), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "github.com/opencontainers/runc" {
			if f[1] != linknameRuncVersion {
				t.Fatalf("go.mod has runc %s, the go:linkname declarations were checked against %s: check getAction, setFlag, matchCall, enosysPatchFilter and filterFlags in the new runc, then update linknameRuncVersion", f[1], linknameRuncVersion)
			}
			return
		}
	}
	t.Fatal("runc is not in go.mod")
}
