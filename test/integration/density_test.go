package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
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
	time.Sleep(time.Second) // every monitor set up and idle
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
