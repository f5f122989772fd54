package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/test/fixtures"
)

func run(t *testing.T, sb *Sandbox, shell string) *backend.Result {
	t.Helper()
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: shell, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", shell, err)
	}
	return res
}

func TestHostProcessesInvisible(t *testing.T) {
	b, ref := testBackend(t)
	host := exec.Command("sleep", "4321")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	res := run(t, sb, "ps -o pid,args")
	if strings.Contains(res.Stdout, "4321") {
		t.Errorf("a host process is visible:\n%s", res.Stdout)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) < 2 || len(lines) > 4 || !strings.Contains(lines[1], "1 ") {
		t.Errorf("expected only the init and the command in a new pid namespace (exit %d):\n%s\nstderr:\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestNetworkNoneHasOnlyLoopback(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	res := run(t, sb, "ls /sys/class/net; cat /sys/class/net/lo/operstate; ip -o link 2>&1 | cut -d: -f2")
	if got := strings.Fields(res.Stdout); len(got) < 1 || got[0] != "lo" || strings.Contains(res.Stdout, "eth") {
		t.Errorf("interfaces with --network none:\n%s%s", res.Stdout, res.Stderr)
	}
	// Loopback works: a listener inside is reachable inside.
	// The client connects once the listener is in /proc/net/tcp6 (or tcp:
	// port 0x1F90, state 0A, listening), not after a guess at how long
	// that takes.
	res = run(t, sb, "nc -l -p 8080 -e echo pong & i=0; until cat /proc/net/tcp* | grep -qE ':1F90 0+:0000 0A' || [ $i -ge 400 ]; do sleep 0.05; i=$((i+1)); done; echo ping | nc 127.0.0.1 8080")
	if !strings.Contains(res.Stdout, "pong") {
		t.Errorf("loopback inside the sandbox: %q %q", res.Stdout, res.Stderr)
	}
}

func TestNetworkHostSeesHostInterfaces(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil || len(ifs) < 2 {
		t.Fatalf("this test needs a host with an interface besides lo: %v %v", ifs, err)
	}
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Network: backend.NetworkHost})
	res := run(t, sb, "ls /sys/class/net")
	for _, i := range ifs {
		if !strings.Contains(res.Stdout, i.Name) {
			t.Errorf("host interface %s missing with --network host: %q", i.Name, res.Stdout)
		}
	}
}

func TestWritesOutsideMountsStayInside(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	res := run(t, sb, "echo changed > /etc/passwd && echo new > /etc/slopbox-new && rm /bin/ls && echo ok")
	if res.ExitCode != 0 {
		t.Fatalf("container root could not change its own root filesystem: %+v", res)
	}
	for _, l := range sb.rec.Layers {
		if _, err := os.Stat(filepath.Join(l, "etc", "slopbox-new")); err == nil {
			t.Errorf("a write inside reached the image layer %s", l)
		}
	}
	if b, err := os.ReadFile(imageFile(sb.rec.Layers, "/etc/passwd")); err != nil || strings.Contains(string(b), "changed") {
		t.Errorf("image /etc/passwd was changed: %q %v", b, err)
	}
	// The next sandbox starts from the pristine image.
	sb2 := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	res = run(t, sb2, "cat /etc/slopbox-new; ls /bin/ls && grep -c root /etc/passwd")
	if strings.Contains(res.Stdout, "new") || !strings.Contains(res.Stdout, "/bin/ls") {
		t.Errorf("a new sandbox saw another's changes: %q %q", res.Stdout, res.Stderr)
	}
}

func TestReadOnlyMountIsReadOnly(t *testing.T) {
	b, ref := testBackend(t)
	data := filepath.Join(searchableTempDir(t), "data")
	os.Mkdir(data, 0o777)
	os.WriteFile(filepath.Join(data, "f"), []byte("orig"), 0o666)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true,
		Mounts: []backend.Mount{{Source: data, Target: "/data", ReadOnly: true}}})
	res := run(t, sb, "cat /data/f; echo x > /data/f; echo y > /data/g")
	if !strings.Contains(res.Stderr, "Read-only file system") {
		t.Errorf("writes into a read-only mount: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "f")); string(b) != "orig" {
		t.Errorf("host file changed through a read-only mount: %q", b)
	}
}

func TestContainerRootCannotWriteHostRootFile(t *testing.T) {
	b, ref := testBackend(t)
	target := "/etc/hostname" // rootless: a root-owned host file the user cannot write either
	if os.Geteuid() == 0 {
		dir := searchableTempDir(t)
		target = filepath.Join(dir, "root-owned")
		if err := os.WriteFile(target, []byte("host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true,
		Mounts: []backend.Mount{{Source: target, Target: "/data/victim"}}})
	res := run(t, sb, "id -u; echo pwned >> /data/victim")
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Permission denied") {
		t.Errorf("container root wrote a root-owned host file: %+v", res)
	}
	if after, _ := os.ReadFile(target); string(after) != string(before) {
		t.Fatalf("host file %s changed to %q", target, after)
	}
}

func TestMountRules(t *testing.T) {
	b, ref := testBackend(t)
	ws := workspaceDir(t)
	_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws,
		Mounts: []backend.Mount{{Source: ws, Target: "/workspace/sub"}}})
	if !errors.Is(err, oci.ErrMountInWorkdir) {
		t.Fatalf("mount inside the workdir: %v, want ErrMountInWorkdir", err)
	}
	assets := filepath.Join(searchableTempDir(t), "assets")
	os.MkdirAll(filepath.Join(assets, "d"), 0o755)
	os.WriteFile(filepath.Join(assets, "d", "a.txt"), []byte("asset"), 0o644)
	os.MkdirAll(filepath.Join(ws, "rel"), 0o755)
	os.WriteFile(filepath.Join(ws, "rel", "r.txt"), []byte("relative"), 0o644)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true,
		Mounts:       []backend.Mount{{Source: "rel", Target: "/workspace2", ReadOnly: true}},
		StaticAssets: []backend.StaticAsset{{Source: assets, SavePath: "data"}}})
	res := run(t, sb, "cat /workspace2/r.txt; echo; cat /static/data/d/a.txt; echo; touch /static/data/x")
	if !strings.HasPrefix(res.Stdout, "relative\nasset\n") || !strings.Contains(res.Stderr, "Read-only") {
		t.Errorf("relative and static mounts: %q %q", res.Stdout, res.Stderr)
	}
	// Bind sources may be restricted to allowed roots.
	_, err = b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, AllowedMountRoots: []string{ws},
		Mounts: []backend.Mount{{Source: assets, Target: "/assets"}}})
	if !errors.Is(err, oci.ErrMountNotAllowed) {
		t.Errorf("mount outside the allowed roots: %v", err)
	}
	if list, _ := b.List(); len(list) != 1 {
		t.Errorf("refused spawns left sandboxes behind: %d", len(list))
	}
}

func TestWorkspaceFilesBelongToWorkspaceOwner(t *testing.T) {
	b, ref := testBackend(t)
	// Container root, the evaluation default (1000:1000) and an arbitrary user.
	for _, user := range []string{"", "1000:1000", "app", "4000:4000"} {
		t.Run("user="+user, func(t *testing.T) {
			ws := workspaceDir(t)
			owner := uint32(os.Geteuid())
			if os.Geteuid() == 0 {
				owner = 4242
				if err := os.Chown(ws, 4242, 4242); err != nil {
					t.Fatal(err)
				}
			}
			sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true, User: user})
			res := run(t, sb, "mkdir -p out/deep && echo result > out/deep/r.txt && id -u && stat -c %u:%g /etc/passwd /home/app")
			if res.ExitCode != 0 {
				t.Fatalf("%+v", res)
			}
			// The image keeps its ownership whatever the sandbox user is.
			if want := "0:0\n1000:1000\n"; !strings.HasSuffix(res.Stdout, want) {
				t.Errorf("image ownership seen inside: %q, want suffix %q", res.Stdout, want)
			}
			for _, p := range []string{"out", "out/deep", "out/deep/r.txt"} {
				var st syscall.Stat_t
				if err := syscall.Stat(filepath.Join(ws, p), &st); err != nil {
					t.Fatal(err)
				}
				if st.Uid != owner {
					t.Errorf("%s is owned by host uid %d, want the workspace owner %d", p, st.Uid, owner)
				}
			}
		})
	}
}

func TestSecurityDefaults(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	res := run(t, sb, "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status; cat /proc/kcore 2>&1 | head -c 100; cat /proc/self/uid_map")
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapBnd:\t00000000280425fb"} { // Docker's set less CAP_SETFCAP
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("missing %q in:\n%s", want, res.Stdout)
		}
	}
	// Container root is not host root: uid 0 maps to an unprivileged host id.
	f := strings.Fields(res.Stdout[strings.LastIndex(res.Stdout, "Seccomp"):])
	for i := 0; i+2 < len(f); i++ {
		if f[i] == "0" && f[i+1] == "0" {
			t.Errorf("container root maps to host root: %v", f)
		}
	}
	// The filter is really Docker's profile, not just any filter: creating a
	// user namespace needs no capability, only the profile forbids it.
	if res := run(t, sb, "unshare -U true 2>&1; echo rc=$?"); !strings.Contains(res.Stdout, "Operation not permitted") {
		t.Errorf("unshare -U in the sandbox: %q, want it refused by seccomp", res.Stdout)
	}
	res, _ = sb.Exec(context.Background(), backend.ExecRequest{Shell: "grep CapEff /proc/self/status", User: "65534:65534"})
	if !strings.Contains(res.Stdout, "0000000000000000") {
		t.Errorf("a non-root command kept capabilities: %q", res.Stdout)
	}
}

func TestZombiesAreReaped(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	for range 5 {
		run(t, sb, "sleep 0.05 & sleep 0.05 & exit 0")
	}
	// Once every sleep has exited, none is left a zombie: a zombie that
	// is never reaped fails here, however slow the host.
	fixtures.Eventually(t, "the exited sleeps reaped", func() (bool, string) {
		res := run(t, sb, "ps -o stat,pid,args")
		for _, l := range strings.Split(res.Stdout, "\n") {
			if strings.HasPrefix(l, "Z") || strings.Contains(l, "sleep 0.05") {
				return false, "zombies (Z) or sleeps still running in the sandbox:\n" + res.Stdout
			}
		}
		return true, ""
	})
}

func TestCallerKilledMidExecKillsCommand(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	// Another process execs a long command, then dies by SIGKILL.
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), reexec.Env+"="+testExecHelper, "SB_ROOT="+b.root, "SB_NAME="+sb.Name())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "the other process's command started", func() (bool, string) {
		ps := run(t, sb, "ps -o args").Stdout
		return strings.Contains(ps, "sleep 7777"), ps
	})
	cmd.Process.Kill()
	cmd.Wait()
	// Eventually, not promptly: a command its caller's death missed
	// sleeps for 7777 s.
	fixtures.Eventually(t, "the command gone with its killed caller", func() (bool, string) {
		ps := run(t, sb, "ps -o args").Stdout
		return !strings.Contains(ps, "sleep 7777"), "the command outlived its killed caller:\n" + ps
	})
}

const testExecHelper = "test-exec-sleep"

func init() {
	reexec.Register(testExecHelper, func() int {
		b, err := New(os.Getenv("SB_ROOT"))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		sb, err := b.Open(os.Getenv("SB_NAME"))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		sb.Exec(context.Background(), backend.ExecRequest{Shell: "sleep 7777 & sleep 7777", NoSetup: true})
		return 0
	})
}

func TestCleanupLeavesNothing(t *testing.T) {
	b, ref := testBackend(t)
	spec := backend.SpawnSpec{Image: ref, Workspace: workspaceDir(t), DisableSetup: true}
	if os.Geteuid() == 0 {
		spec.Limits = backend.Limits{MemoryBytes: 64 << 20, Pids: 100}
	}
	sb, err := b.Spawn(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*Sandbox)
	run(t, s, "sleep 1000 & echo started")
	pid, dir, cgs := s.rec.Pid, s.dir, s.rec.Cgroups
	if os.Geteuid() == 0 && len(cgs) == 0 {
		t.Error("no cgroup as root with limits")
	}
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Cleanup(); err != nil {
		t.Errorf("second cleanup: %v", err)
	}
	if _, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "true"}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("exec after cleanup: %v, want ErrClosed", err)
	}
	// Killed at Cleanup; reaped by whoever inherited it (not our child).
	fixtures.Eventually(t, "the sandbox init gone", func() (bool, string) {
		_, _, ok := procStart(pid)
		return !ok, fmt.Sprintf("sandbox init %d still exists", pid)
	})
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir %s left behind: %v", dir, err)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), dir) {
		t.Errorf("a mount of %s is left on the host", dir)
	}
	for _, p := range cgs {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("cgroup %s left behind", p)
		}
		// The parent is shared with every other root-run sandbox on the
		// host: it must go only when this one was its last child. Another
		// sandbox may be between its own child's removal and the parent's,
		// or between making the parent and its child.
		fixtures.Eventually(t, "no empty cgroup parent "+filepath.Dir(p), func() (bool, string) {
			ents, err := os.ReadDir(filepath.Dir(p))
			return err != nil || hasSubdir(ents), fmt.Sprintf("%d entries, no child cgroup", len(ents))
		})
	}
}

// hasSubdir says whether a cgroup directory has a child cgroup.
func hasSubdir(ents []os.DirEntry) bool {
	for _, e := range ents {
		if e.IsDir() {
			return true
		}
	}
	return false
}

func TestKeepLeavesSandboxForInspection(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Keep: true})
	run(t, sb, "echo kept > /tmp/evidence")
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	again, err := b.Open(sb.Name())
	if err != nil {
		t.Fatal(err)
	}
	if res := run(t, again, "cat /tmp/evidence"); res.Stdout != "kept\n" {
		t.Errorf("kept sandbox lost its state: %+v", res)
	}
	if err := again.Remove(); err != nil {
		t.Fatal(err)
	}
}

func TestPruneRemovesDeadSandboxes(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	// As if the sandbox's init was killed from outside.
	syscall.Kill(sb.rec.Pid, syscall.SIGKILL)
	fixtures.Eventually(t, "the killed sandbox not running", func() (bool, string) { return !sb.Running(), "running" })
	_, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "true"})
	if err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("exec into a dead sandbox: %v", err)
	}
	ids, err := b.Prune(false)
	if err != nil || len(ids) != 1 || ids[0] != sb.ID() {
		t.Errorf("prune = %v, %v", ids, err)
	}
}

func TestLimits(t *testing.T) {
	b, ref := testBackend(t)
	limits := backend.Limits{MemoryBytes: 48 << 20, Pids: 40, CPUs: 0.5}
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Limits: limits})
	if os.Geteuid() != 0 && len(sb.Unenforced()) > 0 {
		// Rootless on a host without delegated cgroups: reported, and
		// refused when strict.
		res := run(t, sb, "true")
		if strings.Join(res.Unenforced, ",") != "memory,cpus,pids" {
			t.Errorf("unenforced = %v", res.Unenforced)
		}
		limits.Strict = true
		_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, Limits: limits})
		if err == nil || !strings.Contains(err.Error(), "cannot enforce") {
			t.Errorf("strict limits: %v", err)
		}
		return
	}
	if len(sb.Unenforced()) > 0 {
		t.Fatalf("limits not enforced as root: %v", sb.Unenforced())
	}
	res := run(t, sb, "for i in $(seq 60); do sleep 5 & done 2>&1 | head -3; wait")
	if !strings.Contains(res.Stdout+res.Stderr, "can't fork") && !strings.Contains(res.Stdout+res.Stderr, "Resource temporarily unavailable") {
		t.Errorf("pids limit of 40 not enforced: %+v", res)
	}
	run(t, sb, "pkill sleep; true")
	res = run(t, sb, "head -c 200000000 /dev/zero | tail > /dev/null")
	if !res.OOMKilled || res.ExitCode == 0 {
		t.Errorf("200 MB in a 48 MB sandbox: exit %d, oom_killed %v", res.ExitCode, res.OOMKilled)
	}
	quota, _ := os.ReadFile(filepath.Join(sb.rec.Cgroups["cpu"], "cpu.cfs_quota_us"))
	if q, _ := strconv.Atoi(strings.TrimSpace(string(quota))); q != 50000 {
		t.Errorf("cpu quota = %q, want 50000", quota)
	}
}

// TestStoppedSandboxLeavesNoZombie: the spawn server, whose children the
// sandboxes' PID 1s are while it lives (rootless: the Backend's one
// server), waits for each as it exits, through its pidfd, so a stopped
// sandbox leaves no zombie behind while others run.
func TestStoppedSandboxLeavesNoZombie(t *testing.T) {
	b, ref := testBackend(t)
	b.KeepReady(false)
	keep := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	pid, start := sb.rec.Pid, sb.rec.PidStart
	if err := sb.Stop(); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "the stopped sandbox's PID 1 waited for", func() (bool, string) {
		st, zombie, ok := procStart(pid)
		return !ok || st != start, fmt.Sprintf("PID 1 %d still there (zombie %v)", pid, zombie)
	})
	if !keep.Running() {
		t.Error("the other sandbox stopped too")
	}
}
