//go:build vmsuite

// Package vm is the suite that runs inside the cgroup v2 VM (`make
// vm-test`, scripts/vm-test.sh), as root and as the unprivileged `vagrant`
// user logged in over ssh: what these cgroup v1 hosts cannot show. Rootless
// limits go through the user's delegated subtree (a transient scope of its
// systemd manager), a timed-out exec is killed by cgroup.kill, an exec
// from another login session reaches a sandbox, doctor reports delegation,
// and nothing is left in /sys/fs/cgroup.
//
// It is built on the host (go test -c -tags vmsuite) and needs, beside
// the test binary, the slopbox binary (SLOPBOX_BIN) and Debian's
// busybox-static in the guest (for the image the registry serves).
package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

const cgroupRoot = "/sys/fs/cgroup"

type env struct {
	t    *testing.T
	bin  string
	root string
	ref  string
}

func newEnv(t *testing.T) *env {
	e := newBareEnv(t)
	t.Cleanup(func() {
		out, _ := e.run("ps", "-a", "-q")
		for _, id := range strings.Fields(out) {
			e.run("rm", "-f", id)
		}
	})
	e.must("pull", "-q", e.ref)
	return e
}

// newBareEnv is an env whose store has not pulled the image.
func newBareEnv(t *testing.T) *env {
	var fs unix.Statfs_t
	if unix.Statfs(cgroupRoot, &fs) != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Fatal("the VM suite runs on a cgroup v2 host (make vm-test); this one is not")
	}
	bin := os.Getenv("SLOPBOX_BIN")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("SLOPBOX_BIN must name the slopbox binary: %v", err)
	}
	reg := fixtures.Registry(t, nil)
	e := &env{t: t, bin: bin, root: filepath.Join(tempDir(t), "root"), ref: reg + "/vm/busybox:latest"}
	fixtures.Push(t, e.ref, fixtures.Busybox(t, image.HostPlatform()))
	return e
}

// tempDir is a test directory other users can traverse (a rootless
// store's user namespace must reach it).
func tempDir(t *testing.T) string {
	dir := t.TempDir()
	for p := dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	return dir
}

// run runs slopbox with args as this process's user.
func (e *env) run(args ...string) (string, int) {
	return e.runAs(nil, args...)
}

// runAs runs slopbox behind prefix (e.g. su -l USER -c), with a 3-minute
// bound: a command of this suite that takes longer has hung. A hung
// command leaves its evidence: the guest's processes, and, run without a
// prefix, its goroutines' stacks (Go prints them on SIGQUIT, then exits;
// it is killed 10 s later if it has not).
func (e *env) runAs(prefix []string, args ...string) (string, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	argv := append([]string{e.bin, "--root", e.root}, args...)
	var cmd *exec.Cmd
	if prefix == nil {
		cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	} else {
		cmd = exec.CommandContext(ctx, prefix[0], append(prefix[1:], shellQuote(argv))...)
	}
	cmd.Cancel = func() error {
		ps, _ := exec.Command("ps", "-eo", "pid,ppid,user,stat,wchan:32,etimes,args", "--forest").CombinedOutput()
		e.t.Logf("slopbox %v still running after 3 min; the guest's processes:\n%s", args, ps)
		return cmd.Process.Signal(unix.SIGQUIT)
	}
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		e.t.Fatalf("slopbox %v hung: %v\n%s", args, err, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("slopbox %v: %v", args, err)
	}
	return out.String(), code
}

func (e *env) must(args ...string) string {
	e.t.Helper()
	out, code := e.run(args...)
	if code != 0 {
		e.t.Fatalf("slopbox %v: exit %d: %s", args, code, out)
	}
	return out
}

func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// sandboxCgroup finds the cgroup of the sandbox with this id (its own, not
// an exec's): slopbox/ID under the caller's cgroup, or slopbox-ID-N.scope
// in the user's systemd manager.
func sandboxCgroup(t *testing.T, id string) string {
	t.Helper()
	found := cgroupsNamed(id)
	for _, d := range found {
		b := filepath.Base(d)
		if b == id || strings.HasPrefix(b, "slopbox-"+id+"-") && strings.HasSuffix(b, ".scope") {
			return d
		}
	}
	t.Fatalf("no cgroup for sandbox %s (found %v)", id, found)
	return ""
}

// cgroupsNamed lists the cgroups whose name contains s.
func cgroupsNamed(s string) []string {
	var found []string
	filepath.WalkDir(cgroupRoot, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.Contains(d.Name(), s) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// cgroupLeft fails the test if a cgroup named with s (a sandbox's id) is
// still there after fixtures.Eventually's patience (systemd removes an
// emptied scope asynchronously).
func cgroupLeft(t *testing.T, id string) {
	t.Helper()
	fixtures.Eventually(t, "no cgroup left behind for "+id, func() (bool, string) {
		left := cgroupsNamed(id)
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// keyed reads one key of a flat-keyed cgroup file (cpu.stat, pids.events).
func keyed(t *testing.T, path, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("%s has no %s: %s", path, key, b)
	return 0
}

// TestDoctorCgroups: doctor says limits hold for the caller (root, or a
// user whose systemd manager has the controllers delegated), and for a
// user without a systemd session it says what is missing.
func TestDoctorCgroups(t *testing.T) {
	e := &env{t: t, bin: os.Getenv("SLOPBOX_BIN"), root: filepath.Join(tempDir(t), "root")}
	check := func(out string) map[string]string {
		var checks []struct{ Name, Status, Detail string }
		if err := json.Unmarshal([]byte(out), &checks); err != nil {
			t.Fatalf("doctor --json: %v: %s", err, out)
		}
		for _, c := range checks {
			if c.Name == "cgroups" {
				return map[string]string{"status": c.Status, "detail": c.Detail}
			}
		}
		t.Fatalf("doctor has no cgroups check: %s", out)
		return nil
	}
	out, _ := e.run("doctor", "--json")
	if c := check(out); c["status"] != "pass" || !strings.Contains(c["detail"], "v2") {
		t.Errorf("doctor as uid %d: cgroups %v", os.Getuid(), c)
	}
	if os.Getuid() != 0 {
		return
	}
	// nodelegate (Vagrantfile provisioning) has no linger and no session:
	// no user manager, no bus, no delegated subtree.
	tmp := filepath.Join(os.TempDir(), fmt.Sprintf("slopbox-nodelegate-%d", time.Now().UnixNano()))
	t.Cleanup(func() { os.RemoveAll(tmp) })
	cmd := exec.Command("runuser", "-u", "nodelegate", "--", e.bin, "--root", tmp, "doctor", "--json")
	b, _ := cmd.Output()
	c := check(string(b))
	if c["status"] != "warn" || !strings.Contains(c["detail"], "not delegated") || !strings.Contains(c["detail"], "no systemd user manager") {
		t.Errorf("doctor as nodelegate: cgroups %v", c)
	}
}

// TestMemoryLimitOOM: a memory hog is OOM-killed inside its limit, the
// result says so, and its cgroup (the user's delegated subtree when
// rootless) holds the limit and goes with the sandbox.
func TestMemoryLimitOOM(t *testing.T) {
	e := newEnv(t)
	id := strings.TrimSpace(e.must("run", "-d", "--memory", "32m", "--strict-limits", e.ref, "sleep", "infinity"))
	cg := sandboxCgroup(t, id)
	if os.Getuid() != 0 && !strings.Contains(cg, fmt.Sprintf("user@%d.service", os.Getuid())) {
		t.Errorf("rootless sandbox cgroup %s is not in the user's delegated subtree", cg)
	}
	if got := readInt(t, filepath.Join(cg, "memory.max")); got != 32<<20 {
		t.Errorf("memory.max %d, want %d", got, 32<<20)
	}
	out, code := e.run("exec", id, "sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived ${#x}")
	if code != 137 || strings.Contains(out, "survived") || !strings.Contains(out, "OOM killer") {
		t.Errorf("memory hog: exit %d: %q (want 137 and the OOM killer named)", code, out)
	}
	if n := keyed(t, filepath.Join(cg, "memory.events"), "oom_kill"); n < 1 {
		t.Errorf("memory.events oom_kill %d", n)
	}
	// The sandbox lives on; its other commands run.
	if out := e.must("exec", id, "echo", "alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("after the OOM kill: %q", out)
	}
	e.must("rm", "-f", id)
	cgroupLeft(t, id)
}

// TestPidsLimitAndCgroupKill: a fork bomb stops at the pids limit, and the
// exec's timeout kills every process it made through cgroup.kill (a tree
// walk races with a fork bomb; the kernel's kill does not), leaving PID 1.
func TestPidsLimitAndCgroupKill(t *testing.T) {
	e := newEnv(t)
	id := strings.TrimSpace(e.must("run", "-d", "--pids-limit", "40", "--strict-limits", e.ref, "sleep", "infinity"))
	cg := sandboxCgroup(t, id)
	if got := readInt(t, filepath.Join(cg, "pids.max")); got != 40 {
		t.Errorf("pids.max %d", got)
	}
	// PID 1, and the main command with its supervisor.
	base := readInt(t, filepath.Join(cg, "pids.current"))
	// A timed command runs in a cgroup of its own, under the sandbox's.
	// Its timeout is not what is looked at here: a long one keeps the
	// cgroup there until it has been seen (a load that slowed this test's
	// polling could outlast a short one), then its cgroup is killed.
	done := make(chan struct{})
	go func() {
		defer close(done)
		exec.Command(e.bin, "--root", e.root, "exec", "--timeout", "600", id, "sleep", "1000").Run()
	}()
	var sub []string
	var procs []byte
	fixtures.Eventually(t, "the timed exec's cgroup holding its command", func() (bool, string) {
		if sub, _ = filepath.Glob(filepath.Join(cg, "exec-*")); len(sub) == 1 {
			procs, _ = os.ReadFile(filepath.Join(sub[0], "cgroup.procs"))
		}
		return len(procs) > 0, fmt.Sprintf("%v holding %q", sub, procs)
	})
	if len(sub) != 1 || len(strings.Fields(string(procs))) != 1 {
		t.Errorf("a timed exec's cgroup: %v holding %q, want one holding the command", sub, procs)
	}
	// Seen holding a process, sub is that one cgroup.
	if err := os.WriteFile(filepath.Join(sub[0], "cgroup.kill"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	<-done
	start := time.Now()
	out, code := e.run("exec", "--timeout", "3", id, "sh", "-c", "sleep 1000 & b() { b | b & }; b; wait")
	if code != 137 || !strings.Contains(out, "timed out") {
		t.Errorf("fork bomb: exit %d after %v: %q", code, time.Since(start), out)
	}
	if n := keyed(t, filepath.Join(cg, "pids.events"), "max"); n < 1 {
		t.Errorf("pids.events max %d: the bomb never reached the limit", n)
	}
	// Only what ran before is left, and the exec's own cgroup is gone.
	fixtures.Eventually(t, "pids.current back to what ran before", func() (bool, string) {
		n := readInt(t, filepath.Join(cg, "pids.current"))
		return n <= base, fmt.Sprintf("pids.current %d, want %d", n, base)
	})
	if n := readInt(t, filepath.Join(cg, "pids.current")); n != base {
		b, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		var ps []string
		for _, pid := range strings.Fields(string(b)) {
			cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			ps = append(ps, pid+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
		t.Errorf("pids.current %d after the timeout, want %d as before: %v", n, base, ps)
	}
	if sub, _ := filepath.Glob(filepath.Join(cg, "exec-*")); len(sub) != 0 {
		t.Errorf("exec cgroups left: %v", sub)
	}
	// Daemons that leave the command's session and process tree (setsid,
	// double fork) go too.
	out, code = e.run("exec", "--timeout", "1", id, "sh", "-c", "setsid sh -c 'sleep 1001 & sleep 1002' & (sleep 1003 &) ; sleep 1000")
	if code != 137 {
		t.Errorf("daemons: exit %d: %q", code, out)
	}
	if ps := e.must("exec", id, "ps", "-o", "args"); strings.Contains(ps, "sleep 100") {
		t.Errorf("processes of the timed-out exec survived:\n%s", ps)
	}
	e.must("rm", "-f", id)
	cgroupLeft(t, id)
}

// TestCPUQuota: a busy loop under --cpus 0.5 gets about half a CPU.
func TestCPUQuota(t *testing.T) {
	e := newEnv(t)
	id := strings.TrimSpace(e.must("run", "-d", "--cpus", "0.5", "--strict-limits", e.ref, "sleep", "infinity"))
	cg := sandboxCgroup(t, id)
	if b, _ := os.ReadFile(filepath.Join(cg, "cpu.max")); !strings.HasPrefix(string(b), "50000 100000") {
		t.Errorf("cpu.max %q", b)
	}
	stat := filepath.Join(cg, "cpu.stat")
	usage0, periods0, throttled0 := keyed(t, stat, "usage_usec"), keyed(t, stat, "nr_periods"), keyed(t, stat, "nr_throttled")
	e.run("exec", "--timeout", "4", id, "sh", "-c", "while :; do :; done")
	// The share of the enforcement periods the loop ran in (100 ms each):
	// wall time would count the exec's start, seconds under emulation.
	used := time.Duration(keyed(t, stat, "usage_usec")-usage0) * time.Microsecond
	periods := keyed(t, stat, "nr_periods") - periods0
	throttled := keyed(t, stat, "nr_throttled") - throttled0
	share := used.Seconds() / (float64(periods) * 0.1)
	t.Logf("--cpus 0.5: %v of CPU over %d periods, %d throttled (%.2f)", used, periods, throttled, share)
	if periods < 10 || share > 0.56 || share < 0.3 {
		t.Errorf("CPU share %.2f under --cpus 0.5 (%v over %d periods)", share, used, periods)
	}
	if throttled < periods/2 {
		t.Errorf("throttled in %d of %d periods", throttled, periods)
	}
	e.must("rm", "-f", id)
	cgroupLeft(t, id)
}

// TestExecFromAnotherSession: a sandbox with limits created in one login
// session of the vagrant user is reached by exec from another (the
// "cgroup.procs: permission denied" class of bug, crun #1195, podman
// #14851: the second session's cgroup shares no writable ancestor with
// the sandbox's). Root opens each session with su -l from a transient
// service (systemd-run), as logind opens none for a process already in one.
func TestExecFromAnotherSession(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("root opens the two login sessions (su -l): run this in make vm-test's root pass")
	}
	e := newBareEnv(t)
	// The state root belongs to vagrant.
	e.root = filepath.Join(os.TempDir(), fmt.Sprintf("slopbox-sessions-%d", time.Now().UnixNano()))
	su := []string{"systemd-run", "--quiet", "--pipe", "--wait", "su", "-l", "vagrant", "-c"}
	t.Cleanup(func() {
		e.runAs(su, "rm", "-f", "sessions")
		e.runAs(su, "rmi", "-f", e.ref)
		os.RemoveAll(e.root)
	})
	if out, code := e.runAs(su, "pull", "-q", e.ref); code != 0 {
		t.Fatalf("pull as vagrant: %d %s", code, out)
	}
	session := func() string {
		out, err := exec.Command(su[0], append(su[1:], "cat /proc/self/cgroup")...).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	a, b := session(), session()
	if a == b || !strings.Contains(a, "session-") {
		t.Fatalf("su -l does not open a new login session here: %q and %q", a, b)
	}
	out, code := e.runAs(su, "run", "-d", "--name", "sessions", "--memory", "64m", "--pids-limit", "50", "--strict-limits", e.ref, "sleep", "infinity")
	if code != 0 {
		t.Fatalf("run -d in one session: %d %s", code, out)
	}
	cg := sandboxCgroup(t, strings.TrimSpace(out))
	out, code = e.runAs(su, "exec", "sessions", "sh", "-c", "echo from another session")
	if code != 0 || strings.TrimSpace(out) != "from another session" {
		t.Errorf("exec from another session: exit %d: %q", code, out)
	}
	// A timed exec from a third session: its command is in its own cgroup
	// under the sandbox's, made by that session's slopbox. Its timeout
	// ends it (exit 137) and is the window in which its cgroup is looked
	// for: 10 s, wide enough for a loaded host's polling.
	done := make(chan string, 1)
	go func() {
		b, _ := exec.Command(su[0], append(su[1:], shellQuote([]string{e.bin, "--root", e.root, "exec", "--timeout", "10", "sessions", "sleep", "100"})+"; echo exit=$?")...).CombinedOutput()
		done <- string(b)
	}()
	var procs []byte
	fixtures.Eventually(t, "the timed exec's cgroup holding its command", func() (bool, string) {
		sub, _ := filepath.Glob(filepath.Join(cg, "exec-*"))
		if len(sub) == 1 {
			procs, _ = os.ReadFile(filepath.Join(sub[0], "cgroup.procs"))
		}
		return len(procs) > 0, fmt.Sprintf("%v holding %q", sub, procs)
	})
	if len(strings.Fields(string(procs))) != 1 {
		t.Errorf("the timed exec's cgroup holds %q, want its command", procs)
	}
	if got := <-done; !strings.Contains(got, "exit=137") {
		t.Errorf("timed exec from another session: %q", got)
	}
	for _, verb := range []string{"stop", "start"} {
		if out, code := e.runAs(su, verb, "sessions"); code != 0 {
			t.Errorf("%s from another session: %d %q", verb, code, out)
		}
	}
	out, code = e.runAs(su, "stats", "--no-stream", "sessions")
	if code != 0 {
		t.Errorf("stats from another session: %d %q", code, out)
	}
}

// TestCLISmoke: the CLI's life cycle under limits, leaving no cgroup.
func TestCLISmoke(t *testing.T) {
	e := newEnv(t)
	out := e.must("run", "--rm", "--memory", "64m", "--cpus", "1", "--pids-limit", "64", "--strict-limits", e.ref, "sh", "-c", "echo hello")
	if strings.TrimSpace(out) != "hello" {
		t.Errorf("run --rm: %q", out)
	}
	id := strings.TrimSpace(e.must("run", "-d", "--name", "smoke", "--memory", "64m", "--strict-limits", e.ref, "sleep", "infinity"))
	e.must("exec", "smoke", "touch", "/tmp/x")
	if out := e.must("stats", "--no-stream", "smoke"); !strings.Contains(out, "smoke") && !strings.Contains(out, id[:12]) {
		t.Errorf("stats: %q", out)
	}
	e.must("stop", "smoke")
	e.must("start", "smoke")
	e.must("exec", "smoke", "true")
	e.must("rm", "-f", "smoke")
	cgroupLeft(t, id)
	e.must("run", "-d", "--name", "pruned", "--memory", "64m", e.ref, "sleep", "infinity")
	e.must("rm", "-f", "pruned")
	// A parent "slopbox" group goes with its last sandbox, a scope when
	// it empties, and no unit is left, failed or not.
	cgroupLeft(t, "slopbox")
	if os.Getuid() != 0 {
		out, err := exec.Command("systemctl", "--user", "list-units", "--all", "--no-legend", "slopbox-*").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("systemd units left: %v %q", err, out)
		}
	}
}
