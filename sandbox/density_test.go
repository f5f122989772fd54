package sandbox

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
)

// TestManySandboxesOnOneID: more sandboxes than the kernel lets one uid
// hold keys (kernel.keys.maxkeys, 200 for a non-root uid) run at once on
// one subordinate range. libcontainer made a session keyring per sandbox,
// so spawns failed after about 195 ("unable to join session keyring:
// disk quota exceeded"); with NoNewKeyring they hold none. A stress test:
// scripts/test.sh runs it in its own step.
func TestManySandboxesOnOneID(t *testing.T) {
	b, ref := testBackend(t)
	const n = 210
	var sbs []*Sandbox
	for i := range n {
		sbs = append(sbs, spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, NoWorkspaceMount: true}))
		if t.Failed() {
			t.Fatalf("spawn %d of %d failed", i+1, n)
		}
	}
	for _, sb := range []*Sandbox{sbs[0], sbs[n-1]} {
		if res := run(t, sb, "echo alive"); res.Stdout != "alive\n" {
			t.Errorf("%s: %+v", sb.Name(), res)
		}
	}
}

// TestManySandboxesPSS: idle sandboxes cost at most 100 KiB of PSS each
// at 1,000 (their PID 1 and anything below it, /proc/PID/smaps_rollup, as
// bench/cmd/apibench measures), and an exec into one of them is about as
// fast as with it alone. It starts 100 and bounds what 1,000 would cost:
// each one's private pages plus a thousandth of the pages they share (the
// agent's binary), which is what PSS is when 1,000 share them. An upper
// bound, so that a change that puts more in every sandbox (a Go runtime,
// a helper process per sandbox) fails here. A stress test, beside
// TestManySandboxesOnOneID.
func TestManySandboxesPSS(t *testing.T) {
	b, ref := testBackend(t)
	const n = 100
	const maxKiB = 100 // at 1,000 sandboxes
	spec := backend.SpawnSpec{Image: ref, DisableSetup: true, NoWorkspaceMount: true}
	first := spawnT(t, b, spec)
	readyIDs(t, b, templateOf(first.rec).key()) // the pool's refill done
	alone := execMedian(t, first)
	sbs := []*Sandbox{first}
	for i := 1; i < n; i++ {
		sbs = append(sbs, spawnT(t, b, spec))
		if t.Failed() {
			t.Fatalf("spawn %d of %d failed", i+1, n)
		}
	}
	readyIDs(t, b, templateOf(first.rec).key()) // as apibench: the last claim's and the pool's work settled
	var pss, private int64
	procs := 0
	for _, sb := range sbs {
		pid := sb.Info().Pid
		if pid <= 0 {
			t.Fatalf("%s: no PID 1", sb.Name())
		}
		for _, p := range processTree(pid) {
			m := smapsRollup(t, p)
			pss += m["Pss"]
			private += m["Private_Clean"] + m["Private_Dirty"]
			procs++
		}
	}
	// The shared pages once: their PSS summed over the sharers (the pool's
	// sandbox aside, which holds a share too, so this is a little low).
	shared := pss - private
	at1000 := private/n + shared/1000
	t.Logf("%d idle sandboxes: %d processes, PSS %d KiB each (%d KiB in all: %d private, %d shared); at 1,000: %d KiB each",
		n, procs, pss/n, pss, private, shared, at1000)
	if at1000 > maxKiB {
		t.Errorf("%d KiB PSS per idle sandbox at 1,000 (%d KiB private each, %d KiB shared), more than %d KiB", at1000, private/n, shared, maxKiB)
	}
	// Reported, not asserted: a latency is the machine's load as much as
	// this code's (a run beside two CPU burners took 8 ms against 1 ms
	// alone). make bench measures it (the exec rows among 1,000 idle).
	crowded := execMedian(t, sbs[n/2])
	t.Logf("exec of true, median: %v alone, %v with %d idle", alone, crowded, n)
}

func execMedian(t *testing.T, sb *Sandbox) time.Duration {
	t.Helper()
	var d []time.Duration
	for i := 0; i < 45; i++ {
		start := time.Now()
		res, err := sb.Exec(context.Background(), backend.ExecRequest{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec true: %v %+v", err, res)
		}
		if i >= 5 {
			d = append(d, time.Since(start))
		}
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// processTree returns pid and every process below it.
func processTree(pid int) []int {
	out := []int{pid}
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, c := range strings.Fields(string(children)) {
		if n, err := strconv.Atoi(c); err == nil {
			out = append(out, processTree(n)...)
		}
	}
	return out
}

// smapsRollup returns pid's /proc/PID/smaps_rollup figures in KiB.
func smapsRollup(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatalf("memory of %d: %v", pid, err)
	}
	m := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "kB" {
			m[strings.TrimSuffix(f[0], ":")], _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if _, ok := m["Pss"]; !ok {
		t.Fatalf("memory of %d: no Pss in smaps_rollup", pid)
	}
	return m
}
