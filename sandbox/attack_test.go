package sandbox

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/test/fixtures"
)

const setidProbe = "test-setid-probe"

// The probe runs inside a sandbox (the static test binary, mounted
// read-only) and tries every way of giving a file in directory os.Args[1]
// a setuid or setgid bit, printing name=errno for each.
func init() {
	reexec.Register(setidProbe, func() int {
		dir := os.Args[1]
		p := func(n string) string { return filepath.Join(dir, n) }
		report := func(name string, err error) {
			if err == nil {
				fmt.Printf("%s=ok\n", name)
			} else {
				fmt.Printf("%s=%s\n", name, unix.ErrnoName(err.(syscall.Errno)))
			}
		}
		closeFD := func(fd int, err error) error {
			if err == nil {
				unix.Close(fd)
			}
			return err
		}
		report("creat", closeFD(unix.Creat(p("creat"), 0o4755)))
		report("open", closeFD(unix.Open(p("open"), unix.O_CREAT|unix.O_WRONLY, 0o2755)))
		report("openat", closeFD(unix.Openat(unix.AT_FDCWD, p("openat"), unix.O_CREAT|unix.O_WRONLY, 0o6755)))
		report("tmpfile", closeFD(unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY, 0o4755)))
		report("mknod", unix.Mknod(p("mknod"), unix.S_IFREG|0o4755, 0))
		report("openat2", closeFD(unix.Openat2(unix.AT_FDCWD, p("openat2"), &unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY, Mode: 0o4755})))
		plain := p("plain")
		report("plain", closeFD(unix.Open(plain, unix.O_CREAT|unix.O_WRONLY, 0o644)))
		report("chmod-plain", unix.Chmod(plain, 0o755))
		report("chmod", unix.Chmod(plain, 0o4755))
		report("fchmodat", unix.Fchmodat(unix.AT_FDCWD, plain, 0o2755, 0))
		// File capabilities (VFS_CAP_REVISION_2, effective: SETUID,
		// SETGID, DAC_OVERRIDE): through an idmapped mount owned by host
		// root they would be host root's.
		capv2 := make([]byte, 20)
		binary.LittleEndian.PutUint32(capv2[0:], 0x02000000|1)
		binary.LittleEndian.PutUint32(capv2[4:], 1<<7|1<<6|1<<1)
		report("setcap", unix.Setxattr(plain, "security.capability", capv2, 0))
		fd, err := unix.Open(plain, unix.O_RDONLY, 0)
		if err == nil {
			report("fchmod", unix.Fchmod(fd, 0o6755))
			unix.Close(fd)
		}
		return 0
	})
}

// Defect A: a file the sandbox makes in the workspace or a read-write mount
// must never be setuid or setgid on the host, whoever owns it.
func TestNoSetidFilesOnTheHost(t *testing.T) {
	b, ref := testBackend(t)
	exe := probeBinary(t)
	rw := filepath.Join(searchableTempDir(t), "rw")
	if err := os.Mkdir(rw, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(rw, 0o777)
	for _, user := range []string{"", "1000:1000"} {
		t.Run("user="+user, func(t *testing.T) {
			ws := workspaceDir(t)
			sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true, User: user,
				Mounts: []backend.Mount{{Source: exe, Target: "/probe", ReadOnly: true}, {Source: rw, Target: "/rw"}}})
			for _, dir := range []string{"/workspace", "/rw/" + strings.ReplaceAll(user, ":", "-") + "x"} {
				res := run(t, sb, "mkdir -p "+dir+" && cd "+dir+" && cp /bin/busybox bb && chmod 4755 bb; chmod g+s bb; "+
					"cp /bin/busybox bb2 && busybox chmod u+s,g+s bb2; mkdir d && chmod 2775 d; "+
					reexec.Env+"="+setidProbe+" /probe "+dir)
				for _, want := range []string{"creat=EPERM", "open=EPERM", "openat=EPERM", "tmpfile=EPERM", "mknod=EPERM",
					"openat2=ENOSYS", "plain=ok", "chmod-plain=ok", "chmod=EPERM", "fchmodat=EPERM", "fchmod=EPERM", "setcap=EPERM"} {
					if !strings.Contains(res.Stdout, want+"\n") {
						t.Errorf("%s: want %s in the probe's output:\n%s%s", dir, want, res.Stdout, res.Stderr)
					}
				}
			}
			noSetidBelow(t, ws)
		})
	}
	noSetidBelow(t, rw)
}

// noSetidBelow fails t for every setuid or setgid file below root.
func noSetidBelow(t *testing.T, root string) {
	t.Helper()
	n := 0
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		n++
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Mode&0o6000 != 0 {
			t.Errorf("%s is setuid/setgid on the host (mode %#o, owner %d:%d)", p, st.Mode&0o7777, st.Uid, st.Gid)
		}
		if n, err := unix.Lgetxattr(p, "security.capability", nil); err == nil || n > 0 {
			t.Errorf("%s has file capabilities on the host", p)
		}
		return nil
	})
	if n < 4 {
		t.Errorf("%s: the sandbox left only %d entries: the probe did not run", root, n)
	}
}

// Defect A, as root: harnesses keep workspaces in root-owned temporary
// directories (mode 0700). Such a workspace is mounted idmapped: its owner,
// host root, appears as the sandbox's user, an unprivileged host id. The
// sandbox reads and writes it as before; no existing entry changes owner
// (the hand-over that chowned them is gone: the workspace-ownership
// finding), what it creates belongs to the workspace's owner, and nothing
// there is setuid or setgid. A symlink is not followed out of it.
func TestRootOwnedWorkspaceMapsToUnprivilegedID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("root only: scripts/test.sh leaves it out of the rootless pass")
	}
	b, ref := testBackend(t)
	outside := filepath.Join(searchableTempDir(t), "outside")
	if err := os.WriteFile(outside, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"1000:1000", "", "app"} {
		t.Run("user="+user, func(t *testing.T) {
			ws := workspaceDir(t)
			os.Chmod(ws, 0o700)
			os.WriteFile(filepath.Join(ws, "task.py"), []byte("print(1)\n"), 0o644)
			os.Mkdir(filepath.Join(ws, "src"), 0o755)
			os.WriteFile(filepath.Join(ws, "src", "lib.py"), []byte("x = 1\n"), 0o644)
			os.Symlink(outside, filepath.Join(ws, "link"))
			before := owners(t, ws)
			sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true, User: user})
			res := run(t, sb, "echo more >> task.py && echo y >> src/lib.py && mkdir -p out && echo r > out/r.txt && "+
				"cp /bin/busybox out/bb && (chmod 4755 out/bb; true) && cat task.py && id -u")
			if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "print(1)\nmore\n") {
				t.Fatalf("the sandbox cannot work in a root-owned workspace: %+v", res)
			}
			run(t, sb, "echo pwned > link")
			after := owners(t, ws)
			for p, o := range before {
				if after[p] != o {
					t.Errorf("%s changed owner or mode: %s, was %s", p, after[p], o)
				}
			}
			for _, p := range []string{"out", "out/r.txt", "out/bb"} {
				if o := after[p]; o.uid != 0 || o.gid != 0 {
					t.Errorf("%s, created by the sandbox, is %s, want the workspace owner's 0:0", p, o)
				}
			}
			noSetidBelow(t, ws)
			var st unix.Stat_t
			if err := unix.Stat(outside, &st); err != nil || st.Uid != 0 || st.Gid != 0 {
				t.Errorf("a file outside the workspace changed owner: %+v %v", st, err)
			}
			if got, _ := os.ReadFile(outside); string(got) != "host secret\n" {
				t.Errorf("the file outside the workspace changed: %q", got)
			}
		})
	}
}

// owner is an entry's host owner and mode.
type owner struct{ uid, gid, mode uint32 }

func (o owner) String() string { return fmt.Sprintf("%d:%d mode %#o", o.uid, o.gid, o.mode) }

// owners maps each entry below root (relative, "." for root) to its owner
// and mode, symlinks not followed.
func owners(t *testing.T, root string) map[string]owner {
	t.Helper()
	out := map[string]owner{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = owner{st.Uid, st.Gid, st.Mode}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The workspace-ownership finding, as root: `--workspace .` on a git
// checkout changed the owner of every file to the sandbox's host id,
// though the command wrote nothing, and git then refused the checkout
// ("dubious ownership"). No existing entry of a workspace changes owner,
// whoever owns it; a file the sandbox creates belongs to the workspace's
// owner on the host.
func TestWorkspaceOwnersUnchanged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only: rootless, the caller's files are container root's and nothing is chowned")
	}
	b, ref := testBackend(t)
	for _, o := range []struct {
		name     string
		uid, gid int
	}{{"root", 0, 0}, {"user", 4321, 4322}} {
		t.Run(o.name, func(t *testing.T) {
			ws := workspaceDir(t)
			git := func(args ...string) string {
				t.Helper()
				cmd := exec.Command("git", append([]string{"-C", ws}, args...)...)
				cmd.Env = append(os.Environ(), "HOME="+ws, "GIT_CONFIG_NOSYSTEM=1",
					"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("git %v: %v: %s", args, err, out)
				}
				return string(out)
			}
			git("init", "-q")
			os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644)
			git("add", "main.go")
			git("commit", "-qm", "first")
			if err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				return os.Lchown(p, o.uid, o.gid)
			}); err != nil {
				t.Fatal(err)
			}
			before := owners(t, ws)
			for _, user := range []string{"", "1000:1000"} {
				sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true, User: user})
				if res := run(t, sb, "ls -la . .git >/dev/null && cat main.go"); res.ExitCode != 0 || res.Stdout != "package main\n" {
					t.Fatalf("user %q: %+v", user, res)
				}
				if err := sb.Cleanup(); err != nil {
					t.Fatal(err)
				}
				after := owners(t, ws)
				if len(after) != len(before) {
					t.Errorf("user %q: %d entries, were %d", user, len(after), len(before))
				}
				for p, was := range before {
					if after[p] != was {
						t.Errorf("user %q: %s is %s, was %s, though the sandbox wrote nothing", user, p, after[p], was)
					}
				}
			}
			if o.uid == 0 {
				// Without seccomp, what the sandbox writes as host root
				// could be setuid: refused.
				_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
					SeccompUnconfined: true, Unsafe: []string{"seccomp=unconfined"}})
				if err == nil || !strings.Contains(err.Error(), "owned by host root") {
					t.Errorf("a root-owned workspace without seccomp: err = %v, want it refused", err)
				}
				// git refuses a checkout its caller does not own.
				if out := git("status", "--porcelain"); out != "" {
					t.Errorf("git status: %q", out)
				}
			}
			sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true, User: "1000:1000"})
			if res := run(t, sb, "mkdir made && echo x > made/new.txt && echo y >> main.go"); res.ExitCode != 0 {
				t.Fatalf("%+v", res)
			}
			for _, p := range []string{"made", "made/new.txt", "main.go"} {
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(ws, p), &st); err != nil {
					t.Fatal(err)
				}
				if int(st.Uid) != o.uid || int(st.Gid) != o.gid || st.Mode&0o6000 != 0 {
					t.Errorf("%s, written by the sandbox, is %d:%d mode %#o; want the workspace owner's %d:%d, no setuid/setgid",
						p, st.Uid, st.Gid, st.Mode&0o7777, o.uid, o.gid)
				}
			}
		})
	}
}

// probeBinary is a copy of the (static) test binary that the sandboxes'
// user namespace can reach, to mount into a sandbox and run there.
func probeBinary(t *testing.T) string {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(searchableTempDir(t), "probe")
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// Defect B: a sandbox that plants symlinks in its workspace must not make
// the next run that mounts them, by a relative source, expose host files.
func TestPlantedSymlinkInWorkspaceNotFollowed(t *testing.T) {
	b, ref := testBackend(t)
	ws := workspaceDir(t)
	first := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true})
	if res := run(t, first, "ln -s / data && ln -s ../.. up && ln -s /workspace/real abs && mkdir -p real/sub && echo in > real/f && ln -s real inside && ln -s ../../real real/sub/back"); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	for _, src := range []string{"data", "data/etc", "up", "abs", "../x", "real/../../x"} {
		for _, ro := range []bool{true, false} {
			_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
				Mounts: []backend.Mount{{Source: src, Target: "/data", ReadOnly: ro}}})
			if !errors.Is(err, oci.ErrBadMount) || !strings.Contains(err.Error(), "leads out of the workspace") {
				t.Errorf("mount of %q (ro=%v): err = %v, want it refused", src, ro, err)
			}
		}
	}
	if list, _ := b.List(); len(list) != 1 {
		t.Errorf("refused spawns left sandboxes behind: %d", len(list))
	}
	// Symlinks that stay inside the workspace are followed as before.
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
		Mounts: []backend.Mount{{Source: "inside", Target: "/in", ReadOnly: true}, {Source: "real/sub/back", Target: "/back", ReadOnly: true}}})
	if res := run(t, sb, "cat /in/f /back/f"); res.Stdout != "in\nin\n" {
		t.Errorf("mounts through symlinks inside the workspace: %+v", res)
	}
}

// Defect C: a command must not reach the caller's files through its stdio
// (reopening /proc/self/fd/N): the sandbox is handed pipes, never files.
func TestCallerFilesNotHandedToSandbox(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	dir := searchableTempDir(t)
	logPath, inPath := filepath.Join(dir, "harness.log"), filepath.Join(dir, "input")
	os.WriteFile(logPath, []byte("SECRET-TOKEN\n"), 0o644)
	os.WriteFile(inPath, []byte("INPUT\n"), 0o644)
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	in, err := os.Open(inPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer errR.Close()
	code, err := sb.Attach(context.Background(), backend.ExecRequest{Argv: []string{"sh", "-c",
		"readlink /proc/self/fd/0; readlink /proc/self/fd/1; timeout 1 cat /proc/self/fd/1; echo pwned >> /proc/self/fd/0; echo out"}},
		in, log, errW, false)
	errW.Close()
	if err != nil || code != 0 {
		t.Fatalf("attach: %d %v", code, err)
	}
	stderr, _ := io.ReadAll(errR)
	got, _ := os.ReadFile(logPath)
	if !strings.HasPrefix(string(got), "SECRET-TOKEN\npipe:[") || strings.Count(string(got), "SECRET") != 1 ||
		strings.Count(string(got), "pipe:[") != 2 || !strings.HasSuffix(string(got), "\nout\n") {
		t.Errorf("the command's stdin and stdout must be pipes it cannot reopen to read the caller's file; the caller's file holds:\n%s(stderr %q)", got, stderr)
	}
	if got, _ := os.ReadFile(inPath); string(got) != "INPUT\n" {
		t.Errorf("the command changed the caller's stdin file: %q", got)
	}
}

// Item 4: user names resolve through the image's own /etc/passwd, looked
// up as the sandbox sees it: an image whose /etc (or /etc/passwd) is a
// symlink out of its root must not make slopbox read the host's files,
// and whiteouts and opaque directories are honoured.
func TestImageUsersResolveInsideTheImage(t *testing.T) {
	b, _ := testBackend(t)
	if !strings.Contains(mustRead(t, "/etc/passwd"), "\n"+"root:") && !strings.HasPrefix(mustRead(t, "/etc/passwd"), "root:") {
		t.Fatal("the host has no /etc/passwd with root")
	}
	cases := []struct {
		name   string
		layers []fixtures.Entry
		user   string
		want   string // uid:gid, or "" for an unknown user
	}{
		{"etc symlink to the host's /etc", []fixtures.Entry{{Name: "etc", Type: tar.TypeSymlink, Linkname: "/etc"}}, "root", ""},
		{"etc symlink out via ..", []fixtures.Entry{{Name: "etc", Type: tar.TypeSymlink, Linkname: "../../../../../../etc"}}, "root", ""},
		{"passwd symlink to the host's", []fixtures.Entry{{Name: "etc/passwd", Type: tar.TypeSymlink, Linkname: "/etc/passwd"}}, "root", ""},
		{"passwd symlink out via ..", []fixtures.Entry{{Name: "etc/passwd", Type: tar.TypeSymlink, Linkname: "../../../../../../../../etc/passwd"}}, "root", ""},
		{"etc symlink inside the image", []fixtures.Entry{{Name: "real/", Type: tar.TypeDir}, {Name: "real/passwd", Body: "zed:x:77:88::/:/bin/sh\n"}, {Name: "etc", Type: tar.TypeSymlink, Linkname: "/real"}}, "zed", "77:88"},
		{"whiteout of passwd", []fixtures.Entry{{Name: "etc/.wh.passwd"}}, "app", ""},
		{"opaque etc", []fixtures.Entry{{Name: "etc/", Type: tar.TypeDir}, {Name: "etc/.wh..wh..opq"}, {Name: "etc/passwd", Body: "neo:x:5:6::/:/bin/sh\n"}}, "app", ""},
		{"opaque etc keeps its own", []fixtures.Entry{{Name: "etc/", Type: tar.TypeDir}, {Name: "etc/.wh..wh..opq"}, {Name: "etc/passwd", Body: "neo:x:5:6::/:/bin/sh\n"}}, "neo", "5:6"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref := imageWith(t, b, fmt.Sprintf("users%d", i), fixtures.Layer(t, tc.layers...))
			img, err := b.Store().Get(ref)
			if err != nil {
				t.Fatal(err)
			}
			who, err := resolveUser(img.Layers, tc.user)
			got := ""
			if err == nil {
				got = fmt.Sprintf("%d:%d", who.UID, who.GID)
			} else if !errors.Is(err, backend.ErrUnknownUser) {
				t.Fatalf("resolve %s: %v", tc.user, err)
			}
			if got != tc.want {
				t.Errorf("user %s resolved to %q, want %q", tc.user, got, tc.want)
			}
		})
	}
}

func mustRead(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const syscallProbe = "test-syscall-probe"

// The probe tries, from inside a sandbox, what a breakout would: each line
// is name=errno (or name=ok).
func init() {
	reexec.Register(syscallProbe, func() int {
		report := func(name string, err error) {
			if err == nil {
				fmt.Printf("%s=ok\n", name)
				return
			}
			if errno, ok := err.(syscall.Errno); ok {
				fmt.Printf("%s=%s\n", name, unix.ErrnoName(errno))
			} else {
				fmt.Printf("%s=%v\n", name, err)
			}
		}
		hostPid, _ := strconv.Atoi(os.Args[1])
		report("ptrace", unix.PtraceAttach(hostPid))
		report("ptrace-init", unix.PtraceAttach(1))
		report("mount", unix.Mount("tmpfs", "/mnt", "tmpfs", 0, ""))
		report("unshare-user", unix.Unshare(unix.CLONE_NEWUSER))
		report("unshare-mnt", unix.Unshare(unix.CLONE_NEWNS))
		_, err := unix.KeyctlJoinSessionKeyring("probe")
		report("keyctl", err)
		_, err = unix.AddKey("user", "probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		report("add_key", err)
		report("init_module", unix.InitModule([]byte("\x7fELF"), ""))
		report("finit_module", unix.FinitModule(0, "", 0))
		report("mknod-char", unix.Mknod("/tmp/mem", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 1))))
		if f, err := os.OpenFile("/tmp/mem", os.O_RDONLY, 0); err == nil {
			f.Close()
			report("open-mknod", nil)
		}
		report("open-host-disk", func() error {
			f, err := os.Open("/dev/vda")
			if err == nil {
				f.Close()
			}
			return err
		}())
		report("sysrq", os.WriteFile("/proc/sysrq-trigger", []byte("h"), 0))
		report("reboot", unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF))
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		report("bpf", errnoOrNil(e))
		_, _, e = unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0)
		report("perf_event_open", errnoOrNil(e))
		return 0
	})
}

func errnoOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// The attacks of issue 8 that need no limit: each is contained, as root
// and rootless. (Fork bomb, memory and CPU hogs: TestLimits and
// TestResourceHogsContained.)
func TestBreakoutAttemptsContained(t *testing.T) {
	b, ref := testBackend(t)
	exe := probeBinary(t)
	host := exec.Command("sleep", "3600")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	for _, user := range []string{"", "1000:1000"} {
		t.Run("user="+user, func(t *testing.T) {
			sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, User: user,
				Mounts: []backend.Mount{{Source: exe, Target: "/probe", ReadOnly: true}}})
			res := run(t, sb, reexec.Env+"="+syscallProbe+" /probe "+strconv.Itoa(host.Process.Pid))
			t.Logf("probe:\n%s", res.Stdout)
			for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				name, result, _ := strings.Cut(line, "=")
				if result == "ok" {
					t.Errorf("%s succeeded inside the sandbox (user %q)", name, user)
				}
			}
			if !strings.Contains(res.Stdout, "perf_event_open=") {
				t.Fatalf("the probe did not run: %+v", res)
			}
			// Host files behind masked and read-only paths.
			res = run(t, sb, "cat /proc/1/cmdline; echo; ls /sys/firmware | wc -l; cat /proc/keys 2>&1 | wc -c; "+
				"cat /proc/kcore 2>/dev/null | head -c 1 | wc -c; echo x > /proc/sys/kernel/hostname 2>&1; hostname")
			lines := strings.Split(res.Stdout, "\n")
			if !strings.Contains(lines[0], "slopbox-init") && !strings.Contains(lines[0], ".slopbox-init") {
				t.Errorf("/proc/1 is not the sandbox's PID 1: %q", lines[0])
			}
			if len(lines) < 5 || strings.TrimSpace(lines[1]) != "0" || strings.TrimSpace(lines[2]) != "0" || strings.TrimSpace(lines[3]) != "0" {
				t.Errorf("/sys/firmware, /proc/keys or /proc/kcore readable:\n%s", res.Stdout)
			}
			if h, _ := os.Hostname(); strings.Contains(res.Stdout, "\nx\n") || strings.Contains(res.Stdout, h+"\n") && h != "sandbox" {
				t.Errorf("hostname changed or the host's visible: %q", res.Stdout)
			}
		})
	}
	if h, _ := os.ReadFile("/proc/sys/kernel/hostname"); strings.TrimSpace(string(h)) == "x" {
		t.Error("the host's hostname was changed")
	}
}

// Resource hogs under limits: a fork bomb under --pids-limit and a CPU hog
// under --cpus are contained and the sandbox stays usable. (The memory
// hog and OOM report: TestLimits, TestAttachSaysWhyItWasKilled.)
func TestResourceHogsContained(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Limits: backend.Limits{Pids: 64, CPUs: 0.5}})
	if len(sb.Unenforced()) > 0 {
		if os.Geteuid() == 0 {
			t.Fatalf("limits not enforced as root: %v", sb.Unenforced())
		}
		// Rootless without delegated cgroups: no hog may be let loose
		// here, and the result says the limits do not hold.
		if res := run(t, sb, "true"); len(res.Unenforced) == 0 {
			t.Error("unenforced limits not reported")
		}
		return
	}
	t.Run("fork-bomb", func(t *testing.T) {
		res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "(bomb() { bomb | bomb & }; bomb); exec sleep 30", Timeout: 3 * time.Second})
		if err != nil || !res.TimedOut {
			t.Fatalf("%+v %v", res, err)
		}
		// The timed-out command's processes are killed; the kernel
		// releases them as they die, which load can delay.
		fixtures.Eventually(t, "the fork bomb's processes gone after its timeout", func() (bool, string) {
			current, _ := os.ReadFile(filepath.Join(sb.rec.Cgroups["pids"], "pids.current"))
			n, _ := strconv.Atoi(strings.TrimSpace(string(current)))
			return n <= 4, fmt.Sprintf("%d processes left in the sandbox", n)
		})
		if res := run(t, sb, "echo usable"); res.Stdout != "usable\n" {
			t.Errorf("%+v", res)
		}
	})
	t.Run("cpu-hog", func(t *testing.T) {
		usage := func() int64 {
			b, _ := os.ReadFile(filepath.Join(sb.rec.Cgroups["cpuacct"], "cpuacct.usage"))
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n
		}
		before, start := usage(), time.Now()
		run(t, sb, "timeout 3 sh -c 'while :; do :; done' & timeout 3 sh -c 'while :; do :; done'; wait")
		share := float64(usage()-before) / float64(time.Since(start).Nanoseconds())
		// Only the ceiling: a loaded host may starve the loops, never
		// let them past the quota.
		if share > 0.65 {
			t.Errorf("two busy loops under --cpus 0.5 used %.2f CPUs", share)
		}
	})
}

// A size-limited /tmp: filling it fails with ENOSPC inside and nothing
// else fills up; without the limit /tmp is the image's own.
func TestTmpSizeLimit(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Limits: backend.Limits{TmpBytes: 4 << 20}})
	res := run(t, sb, "dd if=/dev/zero of=/tmp/fill bs=1M count=16 2>&1; echo rc=$?; df -k /tmp | tail -1; echo fine > /tmp/after; echo root-ok > /root-ok && cat /root-ok")
	if !strings.Contains(res.Stdout, "No space left on device") || strings.Contains(res.Stdout, "rc=0") || !strings.Contains(res.Stdout, "root-ok") {
		t.Errorf("filling a 4 MiB /tmp:\n%s%s", res.Stdout, res.Stderr)
	}
	if f := strings.Fields(res.Stdout[strings.Index(res.Stdout, "tmpfs"):]); len(f) < 2 || f[1] != "4096" {
		t.Errorf("/tmp is not a 4 MiB tmpfs: %q", res.Stdout)
	}
	plain := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	if res := run(t, plain, "grep -c ' /tmp ' /proc/self/mountinfo"); strings.TrimSpace(res.Stdout) != "0" {
		t.Errorf("/tmp is a mount without the limit: %q", res.Stdout)
	}
	_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, Limits: backend.Limits{TmpBytes: -1}})
	if !errors.Is(err, backend.ErrInvalidLimit) {
		t.Errorf("negative /tmp size: %v", err)
	}
}

// --read-only: the root filesystem cannot be written, the workspace and
// read-write mounts can, mountpoints missing from the image are still
// made, and inspect says so.
func TestReadOnlyRootfs(t *testing.T) {
	b, ref := testBackend(t)
	rw := filepath.Join(searchableTempDir(t), "rw")
	os.Mkdir(rw, 0o777)
	os.Chmod(rw, 0o777)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, ReadOnlyRootfs: true,
		Limits: backend.Limits{TmpBytes: 1 << 20},
		Mounts: []backend.Mount{{Source: rw, Target: "/not/in/image/rw"}}})
	res := run(t, sb, "touch /etc/x 2>&1; echo ws > /workspace/f && echo rw > /not/in/image/rw/f && echo tmp > /tmp/f && cat /workspace/f /not/in/image/rw/f /tmp/f")
	if !strings.Contains(res.Stdout, "Read-only file system") || !strings.HasSuffix(res.Stdout, "ws\nrw\ntmp\n") {
		t.Errorf("read-only root: %+v", res)
	}
	if !sb.Info().ReadonlyRootfs {
		t.Error("inspect does not say the root filesystem is read-only")
	}
	if res := run(t, sb, "touch /etc/y 2>&1"); !strings.Contains(res.Stdout, "Read-only") {
		t.Errorf("the root became writable: %q", res.Stdout)
	}
}

// A size-limited root filesystem: filling it fails with ENOSPC inside,
// the host's disk is untouched, and the sandbox keeps working.
func TestRootfsSizeLimit(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Limits: backend.Limits{RootfsBytes: 8 << 20}})
	res := run(t, sb, "dd if=/dev/zero of=/fill bs=1M count=32 2>&1; echo rc=$?; rm /fill; echo small > /etc/small && cat /etc/small /etc/passwd | head -2")
	if !strings.Contains(res.Stdout, "No space left on device") || strings.Contains(res.Stdout, "rc=0") || !strings.Contains(res.Stdout, "small\nroot:") {
		t.Errorf("filling an 8 MiB root filesystem:\n%s%s", res.Stdout, res.Stderr)
	}
	var used int64
	filepath.WalkDir(sb.dir, func(p string, d fs.DirEntry, err error) error {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			used += fi.Size()
		}
		return nil
	})
	if used > 1<<20 {
		t.Errorf("the sandbox's writes reached the host's disk: %d bytes under %s", used, sb.dir)
	}
}

// Weakenings are explicit: an unsafe capability or an unconfined seccomp
// profile is refused unless allowed, and what was granted shows in
// inspect and takes effect.
func TestWeakeningIsExplicit(t *testing.T) {
	b, ref := testBackend(t)
	for _, spec := range []backend.SpawnSpec{
		{CapAdd: []string{"SYS_ADMIN"}},
		{CapAdd: []string{"all"}},
		{CapAdd: []string{"CAP_SYS_PTRACE"}, Unsafe: []string{"cap-add=SYS_ADMIN"}},
		{SeccompUnconfined: true},
	} {
		spec.Image, spec.NoWorkspaceMount = ref, true
		if _, err := b.Spawn(context.Background(), spec); !errors.Is(err, backend.ErrUnsafe) || !strings.Contains(err.Error(), "--allow-unsafe") {
			t.Errorf("%+v: %v, want it refused naming --allow-unsafe", spec.CapAdd, err)
		}
	}
	if _, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, CapAdd: []string{"NO_SUCH_CAP"}}); err == nil || !strings.Contains(err.Error(), "unknown capability") {
		t.Errorf("unknown capability: %v", err)
	}
	if list, _ := b.List(); len(list) != 0 {
		t.Errorf("refused spawns left sandboxes: %d", len(list))
	}
	// Allowed: SYS_ADMIN lets container root mount a tmpfs (in its own
	// namespaces), dropping CHOWN takes chown away; inspect says so.
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, CapAdd: []string{"sys_admin"}, CapDrop: []string{"CHOWN"},
		Unsafe: []string{"cap-add=SYS_ADMIN"}})
	res := run(t, sb, "mkdir -p /m && mount -t tmpfs t /m && echo mounted; touch /f && chown 5 /f 2>&1; grep CapEff /proc/self/status")
	if !strings.Contains(res.Stdout, "mounted") || !strings.Contains(res.Stdout, "Operation not permitted") {
		t.Errorf("cap-add SYS_ADMIN, cap-drop CHOWN: %+v", res)
	}
	if i := sb.Info(); !slices.Equal(i.CapAdd, []string{"sys_admin"}) || !slices.Equal(i.CapDrop, []string{"CHOWN"}) || i.SeccompProfile != "default" {
		t.Errorf("inspect: add %v drop %v seccomp %q", i.CapAdd, i.CapDrop, i.SeccompProfile)
	}
	// The setid rule holds with any capability set.
	if res := run(t, sb, "touch /workspace/s && chmod 4755 /workspace/s; echo rc=$?"); !strings.Contains(res.Stdout, "rc=1") {
		t.Errorf("chmod u+s with SYS_ADMIN: %+v", res)
	}
	open := spawnT(t, b, backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, DisableSetup: true, SeccompUnconfined: true, Unsafe: []string{"seccomp=unconfined"}})
	if res := run(t, open, "grep Seccomp: /proc/self/status"); !strings.Contains(res.Stdout, "Seccomp:\t0") {
		t.Errorf("unconfined: %q", res.Stdout)
	}
	if open.Info().SeccompProfile != "unconfined" {
		t.Error("inspect does not show the unconfined profile")
	}
}

// Mount sources, case 1: an earlier sandbox plants a symlink in its
// workspace to a directory of the caller's (rootless: its ~/.ssh) or, as
// root, of another user. A later run that names the planted link by an
// absolute path must not mount what it points to: absolute sources are
// opened with no symlink followed, whichever way they are given.
func TestPlantedSymlinkAbsoluteSourceNotFollowed(t *testing.T) {
	b, ref := testBackend(t)
	victim := filepath.Join(searchableTempDir(t), "victim")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(victim, "authorized_keys"), []byte("ssh-ed25519 AAAA owner\n"), 0o600)
	if os.Geteuid() == 0 {
		// Another user's 0700 directory.
		filepath.WalkDir(victim, func(p string, _ fs.DirEntry, _ error) error { return os.Lchown(p, 4242, 4242) })
	}
	ws := workspaceDir(t)
	first := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true})
	if res := run(t, first, "ln -s "+victim+" data && ln -s "+filepath.Dir(victim)+" up && mkdir real"); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	for _, src := range []string{filepath.Join(ws, "data"), filepath.Join(ws, "up", "victim")} {
		for _, m := range []backend.Mount{{Source: src, Target: "/data"}, {Source: src, Target: "/data", ReadOnly: true}, {Source: src, Target: "/data", HandOver: true}} {
			sb, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true, Mounts: []backend.Mount{m}})
			if err == nil {
				res, _ := sb.(*Sandbox).Exec(context.Background(), backend.ExecRequest{Shell: "echo ssh-ed25519 AAAA sandbox >> /data/authorized_keys; ls -ln /data"})
				sb.Cleanup()
				t.Errorf("mount %+v followed the planted symlink: %+v", m, res)
				continue
			}
			if !strings.Contains(err.Error(), "symlink") || !strings.Contains(err.Error(), victim) {
				t.Errorf("mount %+v: err = %v, want a refusal naming the symlink and the real path", m, err)
			}
		}
		_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
			StaticAssets: []backend.StaticAsset{{Source: src, SavePath: "keys"}}})
		if err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("static asset %s: err = %v, want it refused", src, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(victim, "authorized_keys")); string(got) != "ssh-ed25519 AAAA owner\n" {
		t.Errorf("the victim's file changed: %q", got)
	}
	var st unix.Stat_t
	if err := unix.Stat(victim, &st); err != nil || (os.Geteuid() == 0 && st.Uid != 4242) {
		t.Errorf("the victim directory changed owner: %+v %v", st, err)
	}
	// A real path, even inside the workspace, mounts as before.
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
		Mounts: []backend.Mount{{Source: filepath.Join(ws, "real"), Target: "/real"}}})
	if res := run(t, sb, "echo ok > /real/f && cat /real/f"); res.Stdout != "ok\n" {
		t.Errorf("a real absolute source: %+v", res)
	}
	if os.Geteuid() != 0 {
		return
	}
	// As root, :U of a credentials directory is refused, however named.
	ssh := filepath.Join(searchableTempDir(t), "home", ".ssh")
	os.MkdirAll(ssh, 0o700)
	os.WriteFile(filepath.Join(ssh, "authorized_keys"), []byte("root's\n"), 0o600)
	for _, src := range []string{ssh, ssh + "/"} {
		_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
			Mounts: []backend.Mount{{Source: src, Target: "/ssh", HandOver: true}}})
		if !errors.Is(err, backend.ErrUnsafe) {
			t.Errorf(":U of %s: err = %v, want it refused", src, err)
		}
	}
	if err := unix.Stat(filepath.Join(ssh, "authorized_keys"), &st); err != nil || st.Uid != 0 {
		t.Errorf(".ssh was handed over: %+v %v", st, err)
	}
}

// Mount sources, case 2 (root): a process left running by an earlier
// sandbox exchanges a relative source's name with a symlink to another
// user's directory (renameat2 RENAME_EXCHANGE) while the next run mounts
// it read-write, idmapped. The source is opened once, and checked, handed
// over and cloned through that fd: the swap must never win.
func TestRelativeMountSwapRace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("root only: scripts/test.sh leaves it out of the rootless pass")
	}
	b, ref := testBackend(t)
	victim := filepath.Join(searchableTempDir(t), "victim")
	os.Mkdir(victim, 0o700)
	os.WriteFile(filepath.Join(victim, "secret"), []byte("victim\n"), 0o600)
	filepath.WalkDir(victim, func(p string, _ fs.DirEntry, _ error) error { return os.Lchown(p, 4343, 4343) })
	ws := workspaceDir(t)
	data := filepath.Join(ws, "data")
	os.Mkdir(data, 0o755)
	os.WriteFile(filepath.Join(data, "mine"), []byte("mine\n"), 0o644)
	filepath.WalkDir(data, func(p string, _ fs.DirEntry, _ error) error { return os.Lchown(p, 4242, 4242) }) // idmapped
	if err := os.Symlink(victim, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	wsfd, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wsfd)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Mostly the directory (so the check passes), now and then the
		// symlink (so the mount would follow it).
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(wsfd, "data", wsfd, "link", unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
			unix.Renameat2(wsfd, "data", wsfd, "link", unix.RENAME_EXCHANGE)
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		}
	}()
	// 15 s of tries, and on a host so loaded that none mounted in them,
	// more (up to the tests' patience), so that "none mounted" is a finding.
	start := time.Now()
	wins, tries, mounted := 0, 0, 0
	for ; mounted < 40 && (time.Since(start) < 15*time.Second || mounted == 0 && time.Since(start) < fixtures.Patience()); tries++ {
		sb, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
			Mounts: []backend.Mount{{Source: "data", Target: "/data"}}})
		if err != nil {
			continue // refused: the swap was seen
		}
		mounted++
		res, err := sb.(*Sandbox).Exec(context.Background(), backend.ExecRequest{Shell: "cat /data/secret /data/mine 2>/dev/null; true", Timeout: 10 * time.Second})
		if err == nil && strings.Contains(res.Stdout, "victim") {
			wins++
		}
		if err := sb.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	close(stop)
	<-done
	t.Logf("%d tries, %d mounted, %d wins", tries, mounted, wins)
	if wins > 0 {
		t.Errorf("the swap won %d of %d runs: another user's directory was mounted read-write", wins, tries)
	}
	if mounted == 0 {
		t.Errorf("no run mounted the source at all in %d tries", tries)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(victim, "secret"), &st); err != nil || st.Uid != 4343 {
		t.Errorf("the victim's file changed owner: %+v %v", st, err)
	}
}

// Mount sources, drop-in cause (root): harnesses keep workspaces and
// sources in 0700 temporary directories (mkdtemp, pytest's tmp_path) that
// container root cannot traverse. Whatever the caller can open mounts:
// the host opens and clones it.
func TestRootSourcesBelowPrivateDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("root only: scripts/test.sh leaves it out of the rootless pass")
	}
	b, ref := testBackend(t)
	private, err := os.MkdirTemp(searchableTempDir(t), "mkdtemp")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(private, "ws")
	src := filepath.Join(private, "src")
	other := filepath.Join(private, "other") // another user's: idmapped
	for _, d := range []string{ws, src, other} {
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "f"), []byte(filepath.Base(d)+"\n"), 0o644)
	}
	os.WriteFile(filepath.Join(private, "file"), []byte("file\n"), 0o644)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "g"), []byte("sub\n"), 0o644)
	filepath.WalkDir(other, func(p string, _ fs.DirEntry, _ error) error { return os.Lchown(p, 4242, 4242) })
	for _, user := range []string{"", "1000:1000"} {
		sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true, User: user, Mounts: []backend.Mount{
			{Source: src, Target: "/src", ReadOnly: true}, {Source: "sub", Target: "/sub"}, {Source: other, Target: "/other"},
			{Source: filepath.Join(private, "file"), Target: "/etc/file", ReadOnly: true}}})
		res := run(t, sb, "cat /workspace/f /src/f /other/f /etc/file && echo w > /workspace/w && echo o > /other/o && cat /sub/g && echo ok")
		if res.ExitCode != 0 || res.Stdout != "ws\nsrc\nother\nfile\nsub\nok\n" {
			t.Errorf("user %q: mounts below a 0700 directory: %+v", user, res)
		}
	}
}

const connectProbe = "test-connect-probe"

// The probe connects to each unix socket named in os.Args[1:] and prints
// PATH=ok or PATH=ERRNO.
func init() {
	reexec.Register(connectProbe, func() int {
		for _, p := range os.Args[1:] {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				err = unix.Connect(fd, &unix.SockaddrUnix{Name: p})
				unix.Close(fd)
			}
			if err == nil {
				fmt.Printf("%s=ok\n", p)
			} else {
				fmt.Printf("%s=%s\n", p, unix.ErrnoName(err.(syscall.Errno)))
			}
		}
		return 0
	})
}

// Issue 41 case 2, as root: a bind source someone other than the caller
// asked for (KeepOwners: an rlm_code config's extra_args) keeps its host
// owners. Idmapped as the caller's own -v is, a root-owned directory made
// host root's files container root's, read-only mounts included: its 0600
// files were readable and its 0600 unix sockets (tmux's /tmp/tmux-0/default,
// ssh-agent's) took connections, which meant commands as host root. Kept,
// host root's entries (and another user's) are nobody's to the sandbox:
// the file and the socket refuse with EACCES, whatever the sandbox's user,
// and what any local user may read stays readable.
func TestKeptOwnersHideRootFilesAndSockets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("root only: scripts/test.sh leaves it out of the rootless pass")
	}
	b, ref := testBackend(t)
	exe := probeBinary(t)
	dir := filepath.Join(searchableTempDir(t), "tmux-0")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "key"), []byte("host root's secret\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "pub"), []byte("public\n"), 0o644)
	theirs := filepath.Join(dir, "theirs")
	os.WriteFile(theirs, []byte("uid 4242's secret\n"), 0o600)
	os.Chown(theirs, 4242, 4242)
	sock := filepath.Join(dir, "default")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	before := owners(t, dir)
	for _, user := range []string{"", "1000:1000"} {
		for _, ro := range []bool{true, false} {
			sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, User: user, Mounts: []backend.Mount{
				{Source: exe, Target: "/probe", ReadOnly: true}, {Source: dir, Target: "/t", ReadOnly: ro, KeepOwners: true}}})
			res := run(t, sb, "cat /t/pub; cat /t/key; cat /t/theirs; stat -c '%n %u:%g' /t /t/key /t/default; "+
				"echo x > /t/new; "+reexec.Env+"="+connectProbe+" /probe /t/default")
			for _, want := range []string{"public\n", "/t 65534:65534\n", "/t/key 65534:65534\n", "/t/default 65534:65534\n", "/t/default=EACCES\n"} {
				if !strings.Contains(res.Stdout, want) {
					t.Errorf("user %q, read-only %v: want %q in\n%s%s", user, ro, want, res.Stdout, res.Stderr)
				}
			}
			if strings.Contains(res.Stdout, "secret") || !strings.Contains(res.Stderr, "'/t/key': Permission denied") || !strings.Contains(res.Stderr, "'/t/theirs': Permission denied") {
				t.Errorf("user %q, read-only %v: the sandbox read a 0600 file of host root's or another user's:\n%s%s", user, ro, res.Stdout, res.Stderr)
			}
		}
	}
	if n := len(accepted); n != 0 {
		t.Errorf("host root's 0600 socket took %d connections from sandboxes", n)
	}
	if _, err := os.Lstat(filepath.Join(dir, "new")); err == nil {
		t.Error("a sandbox wrote into host root's directory")
	}
	after := owners(t, dir)
	for p, o := range before {
		if after[p] != o {
			t.Errorf("%s changed owner or mode: %s, was %s", p, after[p], o)
		}
	}
}

const inotifyProbe = "test-inotify-probe"

// The probe makes inotify instances until the kernel refuses one, prints
// how many it got, and holds them for os.Args[1] seconds.
func init() {
	reexec.Register(inotifyProbe, func() int {
		n := 0
		for ; n < 100000; n++ {
			if _, err := unix.InotifyInit1(0); err != nil {
				fmt.Printf("got=%d err=%s\n", n, unix.ErrnoName(err.(syscall.Errno)))
				break
			}
		}
		secs, _ := strconv.Atoi(os.Args[1])
		time.Sleep(time.Duration(secs) * time.Second)
		return 0
	})
}

// Case 9, as root: the kernel charges the per-user counts of a user
// namespace's processes (inotify instances, user namespaces) to the
// namespace's owner. The sandboxes' namespace was host root's, so one
// sandbox holding 128 inotify instances made inotify_init fail in every
// other sandbox and for host root itself. It is now owned by the host id
// container root maps to.
func TestSandboxInotifyNotChargedToHostRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only: rootless, the namespace is the caller's own")
	}
	b, ref := testBackend(t)
	exe := probeBinary(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true,
		Mounts: []backend.Mount{{Source: exe, Target: "/probe", ReadOnly: true}}})
	res := run(t, sb, "("+reexec.Env+"="+inotifyProbe+" /probe 3 > /tmp/n 2>&1 &); "+
		"for i in $(seq 250); do grep -q got= /tmp/n && break; sleep 0.1; done; cat /tmp/n")
	if !strings.Contains(res.Stdout, "err=EMFILE") {
		t.Fatalf("the probe did not exhaust its inotify instances: %+v", res)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("host root's inotify_init fails while a sandbox holds its instances (%s): %v", strings.TrimSpace(res.Stdout), err)
	}
	unix.Close(fd)
	pid := sb.rec.Pid
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	t.Logf("sandbox PID 1 %d: %s", pid, strings.Join(strings.Fields(string(status[strings.Index(string(status), "Uid:"):]))[:5], " "))
}

// Attack B2: a sandbox plants symlinks in its workspace's parent (here its
// workspace holds the next jobs' workspaces); a run whose --workspace names
// one must not mount what it points to (another project, another user's
// directory): the workspace is opened as a mount source is, no symlink
// followed, and refused naming the link. It used to be resolved with
// EvalSymlinks and the real path mounted: the run wrote into the target.
func TestPlantedSymlinkWorkspaceNotFollowed(t *testing.T) {
	b, ref := testBackend(t)
	victim := filepath.Join(searchableTempDir(t), "victim")
	os.Mkdir(victim, 0o755)
	os.WriteFile(filepath.Join(victim, "secret"), []byte("SECRET\n"), 0o644)
	jobs := workspaceDir(t)
	first := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: jobs, DisableSetup: true})
	if res := run(t, first, "ln -s "+victim+" job3 && mkdir real && ln -s real job4"); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	for _, ws := range []string{filepath.Join(jobs, "job3"), filepath.Join(jobs, "job4"), filepath.Join(jobs, "job3") + "/"} {
		sb, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true})
		if err == nil {
			res, _ := sb.(*Sandbox).Exec(context.Background(), backend.ExecRequest{Shell: "cat /workspace/secret; echo pwned > /workspace/conf"})
			sb.Cleanup()
			t.Errorf("--workspace %s followed the planted symlink: %+v", ws, res)
			continue
		}
		if !strings.Contains(err.Error(), "symlink") {
			t.Errorf("--workspace %s: err = %v, want a refusal naming the symlink", ws, err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "conf")); err == nil {
		t.Error("the run wrote into the symlink's target")
	}
	// The real path still works.
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: filepath.Join(jobs, "real"), DisableSetup: true})
	if res := run(t, sb, "echo ok > /workspace/f && cat /workspace/f"); res.Stdout != "ok\n" {
		t.Errorf("a real workspace: %+v", res)
	}
}

// Review 3: the inode a bind source resolved to when the sandbox was made
// is the one its start mounts: a source whose name now holds another
// directory (renamed in by whoever writes its parent, a sandbox
// included) is refused, not mounted. As root the source used to be
// reopened by name at start.
func TestReplacedSourceRefusedAtStart(t *testing.T) {
	b, ref := testBackend(t)
	ws := workspaceDir(t)
	data := filepath.Join(ws, "data")
	os.Mkdir(data, 0o755)
	os.WriteFile(filepath.Join(data, "f"), []byte("first\n"), 0o644)
	other := filepath.Join(ws, "other")
	os.Mkdir(other, 0o755)
	os.WriteFile(filepath.Join(other, "f"), []byte("other\n"), 0o644)
	for _, src := range []string{data, "data"} {
		sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
			Mounts: []backend.Mount{{Source: src, Target: "/data"}}})
		if res := run(t, sb, "cat /data/f"); res.Stdout != "first\n" {
			t.Fatalf("%+v", res)
		}
		if err := sb.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := unix.Renameat2(unix.AT_FDCWD, data, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE); err != nil {
			t.Fatal(err)
		}
		err := sb.Start(context.Background())
		if err == nil {
			res := run(t, sb, "cat /data/f")
			t.Errorf("source %s: start mounted the directory renamed in since create: %+v", src, res)
		} else if !strings.Contains(err.Error(), "not the directory or file it was") {
			t.Errorf("source %s: start: %v, want a refusal", src, err)
		}
		// Put back: the original starts again.
		unix.Renameat2(unix.AT_FDCWD, data, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE)
		if err := sb.Start(context.Background()); err != nil {
			t.Fatalf("start with the original source: %v", err)
		}
		if res := run(t, sb, "cat /data/f"); res.Stdout != "first\n" {
			t.Errorf("%+v", res)
		}
	}
}

// Review 5: as root every bind source is passed to the spawn server as a
// descriptor; up to the kernel's SCM_MAX_FD (253) in one start work, as
// Docker allows that many binds; past it is a clear error. It used to
// stop at 64.
func TestManyBindMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("rootless the spawn server opens the sources itself")
	}
	b, ref := testBackend(t)
	dir := searchableTempDir(t)
	var ms []backend.Mount
	for i := range 254 {
		src := filepath.Join(dir, fmt.Sprintf("d%d", i))
		os.Mkdir(src, 0o755)
		os.WriteFile(filepath.Join(src, "n"), []byte(strconv.Itoa(i)), 0o644)
		ms = append(ms, backend.Mount{Source: src, Target: fmt.Sprintf("/m/%d", i), ReadOnly: true})
	}
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Mounts: ms[:100]})
	if res := run(t, sb, "cat /m/0/n /m/99/n"); res.Stdout != "099" {
		t.Errorf("100 binds: %+v", res)
	}
	_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: workspaceDir(t), DisableSetup: true, Mounts: ms})
	if err == nil || !strings.Contains(err.Error(), "more than 253 bind mounts") {
		t.Errorf("254 binds: err = %v, want a clear refusal", err)
	}
}

// failingWriter takes the first n bytes, then fails.
type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errors.New("host side failed")
	}
	w.n -= len(p)
	return len(p), nil
}

// Attack B6: a copy out whose host side fails mid-stream (a directory
// where a file lands) returns that error. The copy used to stop reading
// the helper's output and wait for it forever, the helper blocked
// writing.
func TestCopyOutHostFailureReturns(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	if res := run(t, sb, "mkdir /tmp/big && head -c 4000000 /dev/zero > /tmp/big/f"); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	done := make(chan error, 1)
	go func() { done <- sb.CopyOut(context.Background(), "/tmp/big", &failingWriter{n: 100000}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "host side failed") {
			t.Errorf("CopyOut: %v, want the writer's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("CopyOut hung after its writer failed")
	}
}

// Case 9, sandbox against sandbox (as root): every root-run sandbox had
// the same host ids and the same namespace owner, so one holding its 128
// inotify instances made inotify_init fail in every other. Each has a
// slice of ids of its own now, its namespace owned by the slice's first
// id: A exhausting its instances leaves B's untouched, and the two map
// disjoint host ids.
func TestSandboxInotifyNotSharedBetweenSandboxes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only: rootless, all sandboxes are the user's own")
	}
	b, ref := testBackend(t)
	exe := probeBinary(t)
	spec := backend.SpawnSpec{Image: ref, DisableSetup: true, NoWorkspaceMount: true,
		Mounts: []backend.Mount{{Source: exe, Target: "/probe", ReadOnly: true}}}
	a, c := spawnT(t, b, spec), spawnT(t, b, spec)
	res := run(t, a, "("+reexec.Env+"="+inotifyProbe+" /probe 10 > /tmp/n 2>&1 &); "+
		"for i in $(seq 250); do grep -q got= /tmp/n && break; sleep 0.1; done; cat /tmp/n")
	if !strings.Contains(res.Stdout, "err=EMFILE") {
		t.Fatalf("the probe did not exhaust its inotify instances: %+v", res)
	}
	resB := run(t, c, reexec.Env+"="+inotifyProbe+" /probe 0")
	if strings.Contains(resB.Stdout, "got=0 ") {
		t.Fatalf("sandbox B gets no inotify instance while A holds its (A: %s; B: %s)", strings.TrimSpace(res.Stdout), strings.TrimSpace(resB.Stdout))
	}
	mapA, mapB := hostRange(t, a.rec.Pid), hostRange(t, c.rec.Pid)
	if mapA[0] < mapB[0]+mapB[1] && mapB[0] < mapA[0]+mapA[1] {
		t.Fatalf("the two sandboxes' host uid ranges overlap: %v and %v", mapA, mapB)
	}
	t.Logf("A: %s, host uids %d+%d; B: %s, host uids %d+%d", strings.TrimSpace(res.Stdout), mapA[0], mapA[1], strings.TrimSpace(resB.Stdout), mapB[0], mapB[1])
}

// hostRange reads the host uid range process pid's uid_map gives
// container uid 0: first id and size.
func hostRange(t *testing.T, pid int) [2]uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 3 || f[0] != "0" {
		t.Fatalf("uid_map of %d: %q", pid, b)
	}
	first, _ := strconv.ParseUint(f[1], 10, 64)
	size, _ := strconv.ParseUint(f[2], 10, 64)
	return [2]uint64{first, size}
}
