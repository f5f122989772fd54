// Command apibench times slopbox through its Go API (no CLI process in the
// loop): spawning a sandbox ready for exec, exec of `true`, exec of 10 MB of
// stdout, 100 idle sandboxes (start time and PSS of their processes), a
// Dockerfile RUN step against an exec, and the local backend against a
// bare fork+exec. It prints one JSON object per
// measurement; scripts/bench.sh puts them beside the peers' figures.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/imagebuild"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/local"
	"github.com/slopbox/slopbox/sandbox"
)

func init() { reexec.Init() }

type figure struct {
	Name     string  `json:"name"`
	Runs     int     `json:"runs"`
	MedianMs float64 `json:"median_ms"`
	MinMs    float64 `json:"min_ms"`
	P90Ms    float64 `json:"p90_ms"`
	Extra    any     `json:"extra,omitempty"`
}

func stats(name string, d []time.Duration, extra any) figure {
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	return figure{Name: name, Runs: len(d), MedianMs: ms(d[len(d)/2]), MinMs: ms(d[0]), P90Ms: ms(d[len(d)*9/10]), Extra: extra}
}

// busyMs is the CPU time all CPUs have spent outside idle and iowait
// since boot, from /proc/stat, in milliseconds.
func busyMs() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		log.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var ticks float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 7 { // idle, iowait, steal; guest time is in user already
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			log.Fatal(err)
		}
		ticks += n
	}
	return ticks * 1000 / 100 // USER_HZ is 100 on Linux
}

func emit(f figure) { json.NewEncoder(os.Stdout).Encode(f) }

func main() {
	root := flag.String("root", image.DefaultRoot(), "store root")
	ref := flag.String("image", "", "image (pulled if missing)")
	runs := flag.Int("n", 50, "repetitions")
	scale := flag.Int("scale", 100, "idle sandboxes for the density figure")
	par := flag.Int("par", 1, "spawn the idle sandboxes from this many goroutines at once")
	hold := flag.Duration("hold", 0, "keep the idle sandboxes up this long before removing them (to look at them from outside)")
	only := flag.String("only", "spawn,exec,exec10mb,scale,local,build", "measurements")
	buildSteps := flag.Int("build-steps", 10, "RUN steps of the build figure's Dockerfile")
	buildRuns := flag.Int("build-runs", 15, "repetitions of the build figure")
	cli := flag.String("cli", "slopbox-bench", "the slopbox binary (make bench installs slopbox-bench): the scale figure also times its `ps -a` over the same store; skipped when it is not found")
	flag.Parse()
	if *cli != "" {
		if p, err := exec.LookPath(*cli); err == nil {
			*cli = p
		} else {
			*cli = ""
		}
	}
	has := func(m string) bool { return slices.Contains(strings.Split(*only, ","), m) }
	ctx := context.Background()

	if has("local") {
		ws, _ := os.MkdirTemp("", "apibench-local-")
		defer os.RemoveAll(ws)
		sb, err := local.New().Spawn(ctx, backend.SpawnSpec{Workspace: ws, DisableSetup: true})
		if err != nil {
			log.Fatal(err)
		}
		var api, floor []time.Duration
		for i := 0; i < *runs*4; i++ {
			t := time.Now()
			if err := exec.Command("/bin/true").Run(); err != nil {
				log.Fatal(err)
			}
			floor = append(floor, time.Since(t))
			t = time.Now()
			if res, err := sb.Exec(ctx, backend.ExecRequest{Argv: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
				log.Fatal(err, res)
			}
			api = append(api, time.Since(t))
		}
		sb.Cleanup()
		emit(stats("local_exec_true_api", api, nil))
		emit(stats("fork_exec_floor", floor, nil))
	}
	if *ref == "" {
		return
	}
	b, err := sandbox.New(*root)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := b.Store().Get(*ref); err != nil { // pulled when missing
		if _, err := b.Store().Pull(ctx, *ref); err != nil {
			log.Fatal(err)
		}
	}
	spec := backend.SpawnSpec{Image: *ref, NoWorkspaceMount: true, DisableSetup: true}
	defer b.Close()
	spawnLoop := func(name string) {
		var d []time.Duration
		var busy0 float64
		for i := 0; i < *runs+3; i++ {
			if i == 3 {
				busy0 = busyMs()
			}
			t := time.Now()
			sb, err := b.Spawn(ctx, spec)
			if err != nil {
				log.Fatal(err)
			}
			el := time.Since(t)
			if res, err := sb.Exec(ctx, backend.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				log.Fatalf("fresh sandbox not ready: %v %+v", err, res)
			}
			if i >= 3 {
				d = append(d, el)
			}
			sb.Cleanup()
		}
		// The machine's CPU time (/proc/stat: every process, background
		// load included) per sandbox spawned, run and removed; with the
		// pool on, the refill still running after the last one is missed.
		emit(stats(name, d, map[string]any{"cpu_ms_per_sandbox": (busyMs() - busy0) / float64(*runs)}))
	}
	if has("spawn") {
		// Back to back, as a harness running one task after another does:
		// each Spawn claims the sandbox started ahead of it, and starts the
		// next one in the background.
		spawnLoop("spawn_ready_api")
		// Without the pool: every spawn starts its sandbox's PID 1.
		b.KeepReady(false)
		spawnLoop("spawn_cold_api")
		b.KeepReady(true)
	} else if has("cold") {
		// The pool-off loop alone: scripts/bench.sh profiles it.
		b.KeepReady(false)
		spawnLoop("spawn_cold_api")
		b.KeepReady(true)
	}
	if has("exec") || has("exec10mb") {
		sb, err := b.Spawn(ctx, spec)
		if err != nil {
			log.Fatal(err)
		}
		if has("exec") {
			var d []time.Duration
			for i := 0; i < *runs*4+5; i++ {
				t := time.Now()
				res, err := sb.Exec(ctx, backend.ExecRequest{Argv: []string{"true"}})
				if err != nil || res.ExitCode != 0 {
					log.Fatal(err, res)
				}
				if i >= 5 {
					d = append(d, time.Since(t))
				}
			}
			emit(stats("exec_true_api", d, nil))
		}
		if has("exec10mb") {
			// 10 MB of stdout collected into the Result, through the sandbox
			// and, as the floor, through the local backend (the same busybox
			// binary on the host): busybox head, which copies byte by byte
			// and is what the bench harness runs, and busybox dd with 1 MB
			// blocks, which is not bound by its own loop.
			ws, _ := os.MkdirTemp("", "apibench-10mb-")
			defer os.RemoveAll(ws)
			loc, err := local.New().Spawn(ctx, backend.SpawnSpec{Workspace: ws, DisableSetup: true})
			if err != nil {
				log.Fatal(err)
			}
			for _, w := range []struct{ name, cmd string }{
				{"head", "busybox head -c 10000000 /dev/zero"},
				{"dd", "busybox dd if=/dev/zero bs=1000000 count=10 2>/dev/null"},
			} {
				for _, target := range []struct {
					name string
					sb   backend.Sandbox
					argv []string
				}{
					{"exec_10mb_" + w.name + "_api", sb, []string{"/bin/busybox", "sh", "-c", w.cmd}},
					{"host_10mb_" + w.name + "_floor", loc, []string{"/bin/busybox", "sh", "-c", w.cmd}},
				} {
					var d []time.Duration
					for i := 0; i < *runs+2; i++ {
						t := time.Now()
						res, err := target.sb.Exec(ctx, backend.ExecRequest{Argv: target.argv})
						if err != nil || res.StdoutBytes != 10_000_000 {
							log.Fatal(target.name, err, res.StdoutBytes, res.Stderr)
						}
						if i >= 2 {
							d = append(d, time.Since(t))
						}
					}
					emit(stats(target.name, d, nil))
				}
			}
			loc.Cleanup()
		}
		sb.Cleanup()
	}
	if has("build") {
		buildFigure(ctx, b, *ref, *buildSteps, *buildRuns)
	}
	if has("scale") {
		// The exec of `true` into one sandbox with it alone, then the same
		// with all *scale idle beside it: the idle ones must not slow it.
		execP99 := func(sb backend.Sandbox) (p50, p99 time.Duration) {
			var d []time.Duration
			for i := 0; i < 205; i++ {
				t := time.Now()
				if res, err := sb.Exec(ctx, backend.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
					log.Fatal(err, res)
				}
				if i >= 5 {
					d = append(d, time.Since(t))
				}
			}
			slices.Sort(d)
			return d[len(d)/2], d[len(d)*99/100]
		}
		var sbs []backend.Sandbox
		removeAll := func() {
			for _, sb := range sbs {
				sb.Cleanup()
			}
		}
		first, err := b.Spawn(ctx, spec)
		if err != nil {
			log.Fatal(err)
		}
		time.Sleep(time.Second) // the pool's refill done
		alone50, alone := execP99(first)
		sbs = append(sbs, first)
		each := make([]time.Duration, *scale-1)
		made := make([]backend.Sandbox, *scale-1)
		errs := make([]error, *scale-1)
		var next atomic.Int64
		var wg sync.WaitGroup
		t := time.Now()
		for range max(*par, 1) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < len(made); i = int(next.Add(1)) - 1 {
					t0 := time.Now()
					made[i], errs[i] = b.Spawn(ctx, spec)
					each[i] = time.Since(t0)
					if errs[i] != nil {
						next.Store(int64(len(made))) // stop the others
					}
				}
			}()
		}
		wg.Wait()
		for i, sb := range made {
			if sb != nil {
				sbs = append(sbs, sb)
			}
			if errs[i] != nil && err == nil {
				err = fmt.Errorf("spawn %d of %d: %w", i+2, *scale, errs[i])
			}
		}
		if err != nil {
			// Nothing of the batch is left behind.
			removeAll()
			log.Fatal(err)
		}
		total := time.Since(t)
		time.Sleep(time.Second)
		crowded50, crowded := execP99(sbs[len(sbs)/2])
		var pss, rss int64
		var procs int
		for _, sb := range sbs {
			pid := sb.(*sandbox.Sandbox).Info().Pid
			for _, p := range descendants(pid) {
				ps, rs := smaps(p)
				pss += ps
				rss += rs
				procs++
			}
		}
		// Listing them all: the Go API's List, and `slopbox ps -a` (the
		// CLI's whole run) over the same store, medians of 5.
		var lists, pss5 []time.Duration
		for range 5 {
			t := time.Now()
			if l, err := b.List(); err != nil || len(l) < *scale {
				log.Fatalf("list: %d sandboxes, %v", len(l), err)
			}
			lists = append(lists, time.Since(t))
			if *cli != "" {
				t = time.Now()
				if out, err := exec.Command(*cli, "--root", *root, "ps", "-a").Output(); err != nil || bytes.Count(out, []byte("\n")) < *scale {
					log.Fatalf("ps -a: %v (%d lines)", err, bytes.Count(out, []byte("\n")))
				}
				pss5 = append(pss5, time.Since(t))
			}
		}
		time.Sleep(*hold)
		t = time.Now()
		removeAll()
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		med := func(d []time.Duration) float64 {
			d = slices.Clone(d)
			slices.Sort(d)
			return ms(d[len(d)/2])
		}
		medOrZero := func(d []time.Duration) float64 {
			if len(d) == 0 {
				return 0
			}
			return med(d)
		}
		k := min(100, len(each))
		emit(figure{Name: "scale_idle_sandboxes", Runs: *scale, MedianMs: float64(total.Microseconds()) / 1000 / float64(*scale), Extra: map[string]any{
			"n": *scale, "par": *par, "start_total_ms": total.Milliseconds(), "remove_total_ms": time.Since(t).Milliseconds(),
			"processes": procs, "pss_kib_total": pss, "pss_kib_per_sandbox": pss / int64(*scale), "rss_kib_total": rss,
			"spawn_first100_median_ms": med(each[:k]), "spawn_last100_median_ms": med(each[len(each)-k:]),
			"exec_true_p99_ms_alone": ms(alone), "exec_true_p99_ms_crowded": ms(crowded),
			"exec_true_median_ms_alone": ms(alone50), "exec_true_median_ms_crowded": ms(crowded50),
			"list_median_ms": med(lists), "cli_ps_median_ms": medOrZero(pss5),
		}})
	}
}

// buildFigure measures a Dockerfile RUN step's overhead (issue 25: at
// most 30 ms) over the same command in a running sandbox: each round
// builds FROM ref with n `RUN true` steps and the same Dockerfile with
// none (--no-cache, --network none, as the CLI builds: no sandboxes kept
// ready), then execs `true` n times in a running sandbox. A step costs
// (build with n - build with none) / n, its overhead is that minus one
// exec; the figures are medians over the rounds, each round's taken
// together, so that a load on the machine weighs on both sides alike.
func buildFigure(ctx context.Context, b *sandbox.Backend, ref string, n, runs int) {
	b.KeepReady(false)
	defer b.KeepReady(true)
	dir, err := os.MkdirTemp("", "apibench-build-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	dockerfile := func(steps int) []byte {
		var s strings.Builder
		fmt.Fprintf(&s, "FROM %s\nLABEL bench=run%d\n", ref, steps)
		for i := range steps {
			fmt.Fprintf(&s, "RUN true %d\n", i)
		}
		return []byte(s.String())
	}
	timeBuild := func(steps int) time.Duration {
		t := time.Now()
		if _, err := imagebuild.New(b).Build(ctx, imagebuild.Options{ContextDir: dir, DockerfileContent: dockerfile(steps), NoCache: true, Network: backend.NetworkNone}); err != nil {
			log.Fatalf("build with %d RUN steps: %v", steps, err)
		}
		return time.Since(t)
	}
	sb, err := b.Spawn(ctx, backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, DisableSetup: true})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Cleanup()
	var step, execs, over []time.Duration
	for i := -1; i < runs; i++ { // a warm-up round first
		b0, bn := timeBuild(0), timeBuild(n)
		t := time.Now()
		for range n {
			if res, err := sb.Exec(ctx, backend.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				log.Fatal(err, res)
			}
		}
		e := time.Since(t) / time.Duration(n)
		if i >= 0 {
			st := (bn - b0) / time.Duration(n)
			step, execs, over = append(step, st), append(execs, e), append(over, st-e)
		}
	}
	extra := map[string]any{"steps": n}
	emit(stats("build_run_step_api", step, extra))
	emit(stats("build_run_step_exec_api", execs, extra))
	emit(stats("build_run_step_overhead_api", over, extra))
}

// descendants returns pid and every process below it.
func descendants(pid int) []int {
	out := []int{pid}
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, c := range strings.Fields(string(children)) {
		n, _ := strconv.Atoi(c)
		out = append(out, descendants(n)...)
	}
	return out
}

// smaps returns the Pss and Rss of pid in KiB.
func smaps(pid int) (pss, rss int64) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Pss:":
			pss = n
		case "Rss:":
			rss = n
		}
	}
	return pss, rss
}
