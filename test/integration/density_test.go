package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// TestDetachedPSS: a detached container (`run -d` through the CLI, or
// docker's run -d through serve) costs at most 256 KiB of PSS beyond its
// own command: its PID 1, the exec's supervisor below it, and the monitor
// that keeps its log and exit on the host (no Go runtime per idle
// container). It starts 20 and sums /proc/PID/smaps_rollup's Pss over the
// processes they added (the trees of their PID 1s and of their monitors),
// the commands aside. An upper bound: a change that puts more in every
// container fails here.
func TestDetachedPSS(t *testing.T) {
	const n = 20
	t.Run("cli", func(t *testing.T) {
		e := newEnv(t)
		e.must("pull", e.ref)
		var ids []string
		for i := range n {
			ids = append(ids, strings.TrimSpace(e.must("run", "-d", "--name", fmt.Sprintf("idle%d", i), e.ref, "sleep", "3600")))
		}
		detachedPSS(t, e, ids)
	})
	t.Run("serve", func(t *testing.T) {
		e := newEnv(t)
		sock := e.serve(t)
		docker := func(args ...string) string {
			t.Helper()
			out, code := dockerCLI(t, debianDocker, sock, "", args...)
			if code != 0 {
				t.Fatalf("docker %v: exit %d\n%s", args, code, out)
			}
			return out
		}
		docker("pull", e.ref)
		var ids []string
		for i := range n {
			ids = append(ids, strings.TrimSpace(docker("run", "-d", "--name", fmt.Sprintf("idle%d", i), e.ref, "sleep", "3600")))
		}
		detachedPSS(t, e, ids)
	})
}

// detachedPSS checks what the detached containers ids cost beyond their
// commands (sleep).
func detachedPSS(t *testing.T, e *env, ids []string) {
	const maxKiB = 256
	n := len(ids)
	// Every monitor set up and idle: each says so in monitor.ready (its
	// pid) once it has set itself up to forward signals.
	fixtures.Eventually(t, "every monitor ready", func() (bool, string) {
		for _, id := range ids {
			dirs, _ := filepath.Glob(filepath.Join(e.root, "c", id[:min(16, len(id))]+"*"))
			if len(dirs) != 1 {
				return false, fmt.Sprintf("state directory of %s: %v", id, dirs)
			}
			mon, _ := os.ReadFile(filepath.Join(dirs[0], "monitor.pid"))
			ready, _ := os.ReadFile(filepath.Join(dirs[0], "monitor.ready"))
			if f := strings.Fields(string(mon)); len(f) == 0 || string(ready) != f[0] {
				return false, fmt.Sprintf("%s: monitor.pid %q, monitor.ready %q", id, mon, ready)
			}
		}
		return true, ""
	})
	procs := map[int]bool{}
	for _, id := range ids {
		if len(id) < 16 {
			t.Fatalf("not a container id: %q", id)
		}
		dirs, _ := filepath.Glob(filepath.Join(e.root, "c", id[:16]+"*"))
		if len(dirs) != 1 {
			t.Fatalf("state directory of %s: %v", id, dirs)
		}
		var st struct {
			Pid int `json:"pid"`
		}
		b, err := os.ReadFile(filepath.Join(dirs[0], "state.json"))
		if err != nil || json.Unmarshal(b, &st) != nil || st.Pid <= 0 {
			t.Fatalf("state of %s: %v %s", id, err, b)
		}
		var mon int
		b, err = os.ReadFile(filepath.Join(dirs[0], "monitor.pid"))
		if _, serr := fmt.Sscan(string(b), &mon); err != nil || serr != nil || mon <= 1 {
			t.Fatalf("monitor of %s: %v %q", id, err, b)
		}
		for _, root := range []int{st.Pid, mon} {
			for _, p := range procTree(root) {
				procs[p] = true
			}
		}
	}
	var total int64
	kinds := map[string][2]int64{} // comm: count, PSS
	for p := range procs {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		name := strings.TrimSpace(string(comm))
		if name == "sleep" {
			continue // the command itself
		}
		pss, ok := pssKiB(p)
		if !ok {
			t.Fatalf("process %d (%s) of the containers is gone", p, name)
		}
		total += pss
		k := kinds[name]
		kinds[name] = [2]int64{k[0] + 1, k[1] + pss}
	}
	var names []string
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%d %s: %d KiB", kinds[k][0], k, kinds[k][1]))
	}
	t.Logf("%d detached containers: PSS beyond their commands %d KiB in all, %d KiB each (%s)", n, total, total/int64(n), strings.Join(parts, ", "))
	if len(procs) < 4*n {
		t.Errorf("%d processes found for %d containers: PID 1, supervisor, command and monitor each expected", len(procs), n)
	}
	if total/int64(n) > maxKiB {
		t.Errorf("a detached container adds %d KiB of PSS beyond its command, more than %d KiB", total/int64(n), maxKiB)
	}
}

// procTree returns pid and every process below it.
func procTree(pid int) []int {
	out := []int{pid}
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, c := range strings.Fields(string(children)) {
		if n, err := strconv.Atoi(c); err == nil {
			out = append(out, procTree(n)...)
		}
	}
	return out
}

// pssKiB is pid's proportional set size (smaps_rollup's Pss).
func pssKiB(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "Pss:" {
			v, err := strconv.ParseInt(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// TestMonitorKilled: SIGKILL of a container's monitor (while its command
// runs, and right as the command ends) loses nothing already logged and
// leaves nothing behind: the sandbox still stops, is removed by rm -f or
// prune, and no process, mount or state of it is left.
func TestMonitorKilled(t *testing.T) {
	e := newEnv(t)
	e.must("pull", e.ref)
	monitorOf := func(name string) int {
		t.Helper()
		var dir string
		for id := range e.sandboxDirs() {
			if b, err := os.ReadFile(filepath.Join(e.root, "c", id, "state.json")); err == nil && strings.Contains(string(b), `"`+name+`"`) {
				dir = filepath.Join(e.root, "c", id)
			}
		}
		var pid int
		b, err := os.ReadFile(filepath.Join(dir, "monitor.pid"))
		if _, serr := fmt.Sscan(string(b), &pid); err != nil || serr != nil || pid <= 1 {
			t.Fatalf("monitor of %s: %v %q", name, err, b)
		}
		return pid
	}
	seen := map[string]bool{}
	// While the command runs.
	e.must("run", "-d", "--name", "idle", e.ref, "sh", "-c", "echo before; exec sleep 1000")
	waitFor(t, "the first line in the log", func() bool { out, _ := e.run("", "logs", "idle"); return out == "before\n" })
	syscall.Kill(monitorOf("idle"), syscall.SIGKILL)
	// Right as the command ends: the monitor is recording the exit.
	e.must("run", "-d", "--name", "ending", e.ref, "sh", "-c", "sleep 0.3; echo done")
	pid := monitorOf("ending")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, ok := pssKiB(pid); !ok {
			break
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), "\x00exited\x00") {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Logf("killed the monitor as it recorded the exit")
			break
		}
	}
	// Whatever the kill left: wait answers, rm -f removes.
	if out, code := e.run("", "wait", "ending"); code != 0 || (out != "0\n" && out != "137\n") {
		t.Errorf("wait after the monitor was killed: %d %q", code, out)
	}
	e.must("rm", "-f", "ending")
	for id := range e.sandboxDirs() {
		seen[id] = true
	}
	if out := e.must("logs", "idle"); out != "before\n" {
		t.Errorf("logs after the monitor was killed: %q", out)
	}
	e.must("stop", "idle")
	e.must("rm", "-f", "idle")
	e.must("prune")
	if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("sandboxes left after rm -f and prune: %s", out)
	}
	fixtures.Eventually(t, "nothing left on the host", func() (bool, string) {
		left := e.leftovers(seen)
		return len(left) == 0, strings.Join(left, "\n")
	})
}
