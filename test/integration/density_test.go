package integration

import (
	"bytes"
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

// TestDetachedPSS: a `run -d` container costs at most 256 KiB of PSS
// beyond its own command: its PID 1, the exec's supervisor below it, and
// whatever keeps its log and exit on the host (no Go runtime per idle
// container). It starts 20 and sums /proc/PID/smaps_rollup's Pss over
// every process they added (the trees of their PID 1s, and every host
// process that names the state root), the commands aside. An upper bound:
// a change that puts more in every container fails here.
func TestDetachedPSS(t *testing.T) {
	const n = 20
	const maxKiB = 256
	e := newEnv(t)
	e.must("pull", e.ref)
	var ids []string
	for i := range n {
		ids = append(ids, strings.TrimSpace(e.must("run", "-d", "--name", fmt.Sprintf("idle%d", i), e.ref, "sleep", "3600")))
	}
	time.Sleep(time.Second) // every monitor set up and idle
	procs := map[int]string{}
	for _, id := range ids {
		dirs, _ := filepath.Glob(filepath.Join(e.root, "c", id+"*"))
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
		for _, p := range procTree(st.Pid) {
			procs[p] = id
		}
	}
	// Host processes serving them (a monitor), and anything below those.
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if bytes.Contains(cmdline, []byte(e.root)) {
			for _, p := range procTree(pid) {
				procs[p] = "host"
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
			continue // gone meanwhile
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
	t.Logf("%d run -d containers: PSS beyond their commands %d KiB in all, %d KiB each (%s)", n, total, total/n, strings.Join(parts, ", "))
	if total/n > maxKiB {
		t.Errorf("a run -d container adds %d KiB of PSS beyond its command, more than %d KiB", total/n, maxKiB)
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
