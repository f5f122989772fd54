// Command report turns one bench results directory (the shared harness's
// summary.jsonl plus slopbox's Go API figures) into BENCHMARKS.md: every
// target of the issues as a ratio against the peers measured in the same
// run, then the full tables. With -svg it also draws the Targets table's
// ratios as a bar chart (chart.go), which BENCHMARKS.md shows.
//
//	go run ./bench/cmd/report -svg bench.svg .work/bench-results/20261122-050000 > BENCHMARKS.md
//
// -chart-from draws the chart again from an existing BENCHMARKS.md (its
// Targets table is the chart's data either way):
//
//	go run ./bench/cmd/report -chart-from BENCHMARKS.md -svg bench.svg
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type row struct {
	Peer        string  `json:"peer"`
	Measurement string  `json:"measurement"`
	Status      string  `json:"status"`
	User        string  `json:"user"`
	Command     string  `json:"command"`
	Median      float64 `json:"median"`
	Min         float64 `json:"min"`
	Max         float64 `json:"max"`
	Runs        int     `json:"runs"`
	// scale
	N                 int     `json:"n"`
	StartTotalMs      float64 `json:"start_total_ms"`
	StartPerContainer float64 `json:"start_per_container_ms"`
	NewProcs          int     `json:"new_procs"`
	NewProcsPssKiB    float64 `json:"new_procs_pss_kib"`
	NewProcsRssKiB    float64 `json:"new_procs_rss_kib"`
}

type apiFigure struct {
	Name     string         `json:"name"`
	Runs     int            `json:"runs"`
	MedianMs float64        `json:"median_ms"`
	MinMs    float64        `json:"min_ms"`
	P90Ms    float64        `json:"p90_ms"`
	Extra    map[string]any `json:"extra"`
}

func main() {
	svg := flag.String("svg", "", "also draw the Targets table's ratios as an SVG bar chart in this file (beside BENCHMARKS.md: the report links it by its base name)")
	from := flag.String("chart-from", "", "draw the chart (-svg) from this BENCHMARKS.md's Targets table instead of reading a results directory")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: report [-svg FILE] RESULTS_DIR > BENCHMARKS.md\n       report -chart-from BENCHMARKS.md -svg FILE")
		flag.PrintDefaults()
	}
	flag.Parse()
	var targets []targetRow
	switch {
	case *from != "" && *svg != "" && flag.NArg() == 0:
		md, err := os.ReadFile(*from)
		if err != nil {
			log.Fatal(err)
		}
		if targets = parseTargets(md); len(targets) == 0 {
			log.Fatalf("%s has no Targets table", *from)
		}
	case *from == "" && flag.NArg() == 1:
		chart := ""
		if *svg != "" {
			chart = filepath.Base(*svg)
		}
		targets = report(os.Stdout, flag.Arg(0), chart)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if *svg != "" {
		var b bytes.Buffer
		drawChart(&b, targets)
		if err := os.WriteFile(*svg, b.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// report writes BENCHMARKS.md for the results in dir to w, with an image
// of chart (a file name beside it) when chart is not empty, and returns
// the rows of its Targets table.
func report(w io.Writer, dir, chart string) []targetRow {
	rows := map[string]row{} // peer/measurement
	readLines(filepath.Join(dir, "summary.jsonl"), func(b []byte) {
		var r row
		if json.Unmarshal(b, &r) == nil {
			rows[r.Peer+"/"+r.Measurement] = r
		}
	})
	api := map[string]map[string]apiFigure{}
	for _, mode := range []string{"rootless", "root"} {
		api[mode] = map[string]apiFigure{}
		readLines(filepath.Join(dir, "api-"+mode+".jsonl"), func(b []byte) {
			var f apiFigure
			if json.Unmarshal(b, &f) == nil {
				api[mode][f.Name] = f
			}
		})
	}
	cpu := map[string]float64{} // cpu.jsonl: name → the machine's CPU ms per run
	readLines(filepath.Join(dir, "cpu.jsonl"), func(b []byte) {
		var f struct {
			Name string  `json:"name"`
			CPU  float64 `json:"cpu_ms_per_run"`
		}
		if json.Unmarshal(b, &f) == nil {
			cpu[f.Name] = f.CPU
		}
	})
	var repull struct {
		Results []struct {
			Median float64 `json:"median"`
		} `json:"results"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "repull.json")); err == nil {
		json.Unmarshal(b, &repull)
	}
	var cli10 struct {
		Results []struct {
			Command string  `json:"command"`
			Median  float64 `json:"median"`
		} `json:"results"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cli10mb.json")); err == nil {
		json.Unmarshal(b, &cli10)
	}
	cli10ms := func(name string) float64 {
		for _, r := range cli10.Results {
			if r.Command == name {
				return r.Median * 1000
			}
		}
		return 0
	}
	ctr := hyperfineMedians(filepath.Join(dir, "ctr.json"))         // runtime → ms
	idmap := hyperfineMedians(filepath.Join(dir, "idmap.json"))     // helpers, single → ms
	builds := hyperfineMedians(filepath.Join(dir, "build.json"))    // bench/build.sh: name → median ms
	netRuns := hyperfineMedians(filepath.Join(dir, "network.json")) // bench/network.sh: name → median ms
	netFigs := peerFigures(filepath.Join(dir, "network.jsonl"))     // peer → figure
	engine := peerFigures(filepath.Join(dir, "engine.jsonl"))       // peer → figure
	// The 1,000-sandbox runs (scripts/bench.sh: api-scale-many-rootless.jsonl,
	// engine-scale-many.jsonl).
	var many apiFigure
	readLines(filepath.Join(dir, "api-scale-many-rootless.jsonl"), func(b []byte) { json.Unmarshal(b, &many) })
	var engineMany map[string]any
	readLines(filepath.Join(dir, "engine-scale-many.jsonl"), func(b []byte) { json.Unmarshal(b, &engineMany) })
	var meta map[string]any
	if b, err := os.ReadFile(filepath.Join(dir, "meta.json")); err == nil {
		json.Unmarshal(b, &meta)
	}

	med := func(peer, m string) float64 {
		r, ok := rows[peer+"/"+m]
		if !ok || r.Status != "ok" {
			return 0
		}
		return r.Median
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# slopbox benchmarks\n\n")
	p("Generated by `make bench` (scripts/bench.sh → ../shared/bench with slopbox's adapters in bench/, then bench/cmd/apibench for the Go API) from `%s`.\n", filepath.Base(dir))
	if meta != nil {
		p("Machine: %v CPUs (%v), kernel %v, cgroups %v, %v; run %v.\n", meta["cpus"], meta["cpu"], meta["kernel"], meta["cgroups"], meta["hyperfine"], meta["date"])
	}
	p("\nAll figures are medians from one run on one machine; compare ratios, not absolute times. ")
	p("Rootless peers run as the bench user; slopbox's rootless figures too.\n\n")

	p("## Targets\n\n")
	if chart != "" {
		p("![slopbox's figure divided by each peer's, one bar per target with a ratio (log scale; green: goal met, red: missed, grey: reported)](%s)\n\n", chart)
	}
	// The table's rows go through a buffer: they are also the chart's data.
	out := w
	var table bytes.Buffer
	w = &table
	p("%s\n| --- | ---: | --- | ---: | --- | :---: |\n", targetsHeader)
	target := func(name string, ours float64, peerName string, peer float64, goal string, ok bool) {
		ratio := "-"
		if peer > 0 && ours > 0 {
			ratio = fmt.Sprintf("%.2f×", ours/peer)
		}
		mark := "✗"
		if ok {
			mark = "✓"
		}
		if ours == 0 {
			mark, ratio = "not measured", "-"
		}
		peerCol := peerName
		if peer > 0 {
			peerCol = fmt.Sprintf("%s %.2f ms", peerName, peer)
		}
		p("| %s | %.2f ms | %s | %s | %s | %s |\n", name, ours, peerCol, ratio, goal, mark)
	}
	pull := med("slopbox", "pull")
	docker, podman, floor := med("docker", "pull"), med("podman-rootless", "pull"), med("tar-floor", "pull")
	target("cold pull + unpack of pyslim, rootless", pull, "docker pull", docker, "≤ 0.5× docker", docker > 0 && pull <= 0.5*docker)
	target("cold pull + unpack of pyslim, rootless", pull, "podman pull (rootless)", podman, "≤ 0.5× podman", podman > 0 && pull <= 0.5*podman)
	target("cold pull + unpack of pyslim, rootless", pull, "tar -xzf floor", floor, "≤ 1.5× floor", floor > 0 && pull <= 1.5*floor)
	if len(repull.Results) > 0 {
		ms := repull.Results[0].Median * 1000
		target("pull of an image already present (CLI)", ms, "", 0, "< 50 ms", ms < 50)
	}
	cr := rows["crun-rootless/scale"].StartPerContainer
	sp := api["rootless"]["spawn_ready_api"].MedianMs
	target("spawn a sandbox ready for exec, rootless (Go API, back to back, pool on)", sp, "crun start of a long-lived container (rootless)", cr, "≤ 10 ms and < crun", sp > 0 && sp <= 10 && (cr == 0 || sp < cr))
	spc := api["rootless"]["spawn_cold_api"].MedianMs
	target("spawn a sandbox ready for exec, rootless (Go API, pool off: every PID 1 started on demand)", spc, "crun start of a long-lived container (rootless)", cr, "≤ 10 ms and < crun", spc > 0 && spc <= 10 && (cr == 0 || spc < cr))
	// CPU time per container, the machine's (scripts/bench.sh, cpu.jsonl;
	// apibench's cpu_ms_per_sandbox): reported, no goal.
	// runc's beside crun's: libcontainer alone, what slopbox builds on.
	cpuRow := func(name string, ours float64) {
		for _, peer := range []string{"crun", "runc"} {
			v := cpu[peer+"-rootless"]
			if ours <= 0 || v <= 0 {
				continue
			}
			p("| %s | %.2f ms | %s run of `true` (rootless), the same measure %.2f ms | %s | reported | - |\n", name, ours, peer, v, ratioOf(ours, v))
		}
	}
	cpuRow("CPU time per `run --rm true` (CLI), rootless, every process on the machine", cpu["slopbox"])
	cpuRow("CPU time per sandbox spawned, `true` run in it and removed, rootless (Go API, pool off), every process on the machine", num(api["rootless"]["spawn_cold_api"].Extra["cpu_ms_per_sandbox"]))
	cpuRow("… the same with the pool on (the sandboxes started ahead of need counted too)", num(api["rootless"]["spawn_ready_api"].Extra["cpu_ms_per_sandbox"]))
	// The CLI's cold path is libcontainer's: its goal is runc's figure
	// (libcontainer and nothing else), crun's is beside it, reported.
	reported := func(name string, ours float64, peerName string, peer float64) {
		if ours > 0 && peer > 0 {
			p("| %s | %.2f ms | %s %.2f ms | %s | reported | - |\n", name, ours, peerName, peer, ratioOf(ours, peer))
		}
	}
	// Rootless, slopbox maps the caller's whole subordinate range, which
	// takes the setuid newuidmap and newgidmap; runc's rootless default
	// maps the caller's own ids alone. Their cost is measured apart
	// (bench/cmd/idmapcost: the same process mapped both ways), and the
	// rootless goal is runc's figure plus it (issue 45).
	helpers := 0.0
	if h, s := idmap["helpers"], idmap["single"]; h > 0 && s > 0 {
		helpers = max(h-s, 0)
		p("| the setuid newuidmap and newgidmap a full subordinate range takes, rootless (a user namespace mapped by them, less one mapped to the caller's ids alone) | %.2f ms | mapped to the caller's ids alone %.2f ms | - | reported | - |\n", helpers, s)
	}
	cliRows := func(who, ours, runc, crun string) {
		extra, goal := 0.0, "≤ runc"
		if who == "rootless" && helpers > 0 {
			extra, goal = helpers, fmt.Sprintf("≤ runc + %.2f ms (the helpers)", helpers)
		}
		rr, runcRun, crunRun := med(ours, "run_true"), med(runc, "run_true"), med(crun, "run_true")
		name := "run `true` in a new sandbox and remove it, " + who + " (CLI `run --rm`)"
		target(name, rr, "runc run ("+who+")", runcRun, goal, runcRun > 0 && rr > 0 && rr <= runcRun+extra)
		reported(name, rr, "crun run ("+who+")", crunRun)
		sp, runcSp, crunSp := rows[ours+"/scale"].StartPerContainer, rows[runc+"/scale"].StartPerContainer, rows[crun+"/scale"].StartPerContainer
		name = "start a long-lived sandbox, " + who + " (CLI `run -d`)"
		target(name, sp, "runc ("+who+")", runcSp, goal, runcSp > 0 && sp > 0 && sp <= runcSp+extra)
		reported(name, sp, "crun ("+who+")", crunSp)
	}
	cliRows("rootless", "slopbox", "runc-rootless", "crun-rootless")
	cliRows("as root", "slopbox-root", "runc", "crun")
	// The CLI's warm pool (pool keep): a run --rm claims a sandbox kept
	// started; its goal is crun's whole run.
	poolRow := func(who, ours, crun string) {
		pr, crunRun := med(ours, "run_true"), med(crun, "run_true")
		target("run `true` in a sandbox claimed from the CLI's warm pool and remove it, "+who+" (`pool keep`, then `run --rm`)", pr, "crun run ("+who+")", crunRun, "≤ crun", crunRun > 0 && pr > 0 && pr <= crunRun)
	}
	poolRow("rootless", "slopbox-pool", "crun-rootless")
	poolRow("as root", "slopbox-pool-root", "crun")
	crunExec, runcExec := med("crun-rootless", "exec_true"), med("runc-rootless", "exec_true")
	ea := api["rootless"]["exec_true_api"].MedianMs
	target("exec `true`, rootless (Go API)", ea, "crun exec (rootless)", crunExec, "≤ crun exec", crunExec > 0 && ea <= crunExec)
	ec := med("slopbox", "exec_true")
	target("exec `true`, rootless (CLI)", ec, "crun exec (rootless)", crunExec, "≤ 2× crun exec", crunExec > 0 && ec <= 2*crunExec)
	target("exec `true`, rootless (CLI)", ec, "crun exec (rootless)", crunExec, "≤ 1.2× crun exec", crunExec > 0 && ec <= 1.2*crunExec)
	target("exec `true`, rootless (CLI)", ec, "runc exec (rootless)", runcExec, "≤ 0.5× runc exec", runcExec > 0 && ec <= 0.5*runcExec)
	crun10 := med("crun-rootless", "exec_10mb_stdout")
	e10 := api["rootless"]["exec_10mb_dd_api"].MedianMs
	target("exec with 10 MB of stdout (busybox dd, 1 MB blocks), rootless (Go API, buffered Result)", e10, "the same dd on the host, local backend", api["rootless"]["host_10mb_dd_floor"].MedianMs, "≤ 15 ms", e10 > 0 && e10 <= 15)
	e10c := cli10ms("slopbox-dd")
	target("exec with 10 MB of stdout (busybox dd, 1 MB blocks), rootless (CLI, straight to the pipe)", e10c, "the same dd \\| wc -c on the host", cli10ms("host-dd"), "≤ 15 ms", e10c > 0 && e10c <= 15)
	e10h := med("slopbox", "exec_10mb_stdout")
	target("exec with 10 MB of stdout (busybox head, the harness's workload), rootless (CLI)", e10h, "crun exec (rootless)", crun10, "≤ 15 ms", e10h > 0 && e10h <= 15)
	if hh := cli10ms("host-head"); hh > 0 {
		p("| … the same busybox head on the host, no container (its own floor) | %.2f ms | - | - | - | - |\n", hh)
	}
	if sc, ok := api["rootless"]["scale_idle_sandboxes"]; ok {
		pss := num(sc.Extra["pss_kib_per_sandbox"])
		total := num(sc.Extra["start_total_ms"])
		p("| %v idle sandboxes, rootless: PSS per sandbox | %.0f KiB | crun: %.0f KiB per container | - | ≤ 256 KiB | %s |\n", sc.Extra["n"], pss, rows["crun-rootless/scale"].NewProcsPssKiB/float64(max(1, rows["crun-rootless/scale"].N)), check(pss <= 256))
		p("| %v idle sandboxes, rootless: all spawned | %.0f ms | crun: %.0f ms for %d | - | ≤ 2000 ms | %s |\n", sc.Extra["n"], total, rows["crun-rootless/scale"].StartTotalMs, rows["crun-rootless/scale"].N, check(total <= 2000))
	}
	if many.Name != "" {
		n := num(many.Extra["n"])
		pss, total := num(many.Extra["pss_kib_per_sandbox"]), num(many.Extra["start_total_ms"])
		alone, crowded := num(many.Extra["exec_true_p99_ms_alone"]), num(many.Extra["exec_true_p99_ms_crowded"])
		p("| %.0f idle sandboxes at once, rootless (Go API): PSS per sandbox | %.0f KiB | - | - | ≤ 100 KiB | %s |\n", n, pss, check(pss > 0 && pss <= 100))
		p("| %.0f idle sandboxes at once, rootless (Go API, %v goroutines): all spawned | %.0f ms | - | - | ≤ 5000 ms | %s |\n", n, many.Extra["par"], total, check(total > 0 && total <= 5000))
		target(fmt.Sprintf("exec `true` into one of %.0f idle sandboxes, rootless (Go API, p99)", n), crowded, "the same with it alone", alone, "≤ 2× alone", alone > 0 && crowded <= 2*alone)
		if l := num(many.Extra["list_median_ms"]); l > 0 {
			p("| list %.0f sandboxes, rootless (Go API `List`) | %.1f ms | - | - | ≤ 200 ms | %s |\n", n, l, check(l <= 200))
		}
		if l := num(many.Extra["cli_ps_median_ms"]); l > 0 {
			p("| `slopbox ps -a` of %.0f sandboxes, rootless (CLI, the whole run) | %.1f ms | - | - | ≤ 200 ms | %s |\n", n, l, check(l <= 200))
		}
	}
	if em := engineMany; em != nil {
		n := num(em["scale_n"])
		// Beyond their own command: what appeared besides each `sleep`, and
		// what the service grew by.
		per := (num(em["scale_new_procs_pss_kib"]) + num(em["service_pss_kib_after"]) - num(em["service_pss_kib_before"])) / max(n, 1)
		total := num(em["scale_start_total_ms"])
		p("| Engine API, %.0f idle containers (docker-py create + start), rootless serve: PSS per container beyond its command | %.0f KiB | - | - | ≤ 256 KiB | %s |\n", n, per, check(per > 0 && per <= 256))
		p("| Engine API, %.0f idle containers, rootless serve: all created and started | %.0f ms | - | - | ≤ 15000 ms | %s |\n", n, total, check(total > 0 && total <= 15000))
	}
	if sr := rows["slopbox/scale"]; sr.N > 0 {
		per := func(r row) float64 { return r.NewProcsPssKiB / float64(max(1, r.N)) }
		for _, peer := range []string{"crun-rootless", "podman-rootless"} {
			if o := rows[peer+"/scale"]; o.N > 0 {
				p("| PSS per `run -d` container (its processes and helpers), rootless (CLI) | %.0f KiB | %s %.0f KiB | %s | reported | - |\n", per(sr), peer, per(o), ratioOf(per(sr), per(o)))
			}
		}
	}
	if sb, dk := engine["slopbox-rootless"], engine["dockerd"]; sb != nil {
		cs, dcs := sb["create_start_ms"], dk["create_start_ms"]
		target("Engine API, docker-py `containers.create` + `start` until running, rootless serve", cs, "dockerd", dcs, "≤ 0.1× dockerd", dcs > 0 && cs > 0 && cs <= 0.1*dcs)
		ex, dex := sb["exec_run_true_ms"], dk["exec_run_true_ms"]
		target("Engine API, docker-py `exec_run(\"true\")`, rootless serve", ex, "dockerd", dex, "≤ 0.25× dockerd", dex > 0 && ex > 0 && ex <= 0.25*dex)
		target("Engine API, docker-py `exec_run(\"true\")`, rootless serve", ex, "crun exec CLI (rootless)", crunExec, "< crun exec", crunExec > 0 && ex > 0 && ex < crunExec)
		mem, dmem := sb["scale_total_pss_kib"], dk["scale_total_pss_kib"]
		mark := check(dmem > 0 && mem > 0 && mem < dmem)
		p("| Engine API, %.0f idle containers: PSS of the service and every process they added (their `sleep` aside) | %.0f KiB | dockerd + containerd + shims %.0f KiB | %s | below dockerd's | %s |\n", sb["scale_n"], mem, dmem, ratioOf(mem, dmem), mark)
		// Issue 10: a published port and bridge spawns.
		if tp := sb["port_throughput_mib_s"]; tp > 0 {
			for _, peer := range []string{"podman-rootless", "dockerd"} {
				o := engine[peer]["port_throughput_mib_s"]
				p("| published port throughput, rootless serve (MiB/s, higher is better) | %.0f MiB/s | %s %.0f MiB/s | %s | ≥ %s | %s |\n", tp, peer, o, ratioOf(tp, o), peer, check(o > 0 && tp >= o))
			}
			for _, peer := range []string{"podman-rootless", "dockerd"} {
				p("| published port connection set-up (connect to first byte), rootless serve | %.3f ms | %s %.3f ms | %s | reported | - |\n", sb["port_connect_ms"], peer, engine[peer]["port_connect_ms"], ratioOf(sb["port_connect_ms"], engine[peer]["port_connect_ms"]))
			}
			br, none := sb["create_start_bridge_ms"], sb["create_start_ms"]
			target("bridge sandbox create + start until running, rootless serve (beside none's)", br, "the same with network none", none, "≤ none + 10 ms", br > 0 && br <= none+10)
		}
	}
	if sr := ctr["slopbox-runc"]; sr > 0 {
		target("containerd `ctr run --rm` of `true`, slopbox-runc as the runc shim's binary (as root)", sr, "the same with crun", ctr["crun"], "≤ crun", ctr["crun"] > 0 && sr <= ctr["crun"])
		target("containerd `ctr run --rm` of `true`, slopbox-runc as the runc shim's binary (as root)", sr, "the same with runc", ctr["runc"], "reported", true)
		if ss := ctr["slopbox-runc --seccomp"]; ss > 0 {
			target("… the same with `ctr run --seccomp`: all three load containerd's default profile", ss, "crun --seccomp", ctr["crun --seccomp"], "reported", true)
			target("… the same with `ctr run --seccomp`: all three load containerd's default profile", ss, "runc --seccomp", ctr["runc --seccomp"], "reported", true)
		}
	}
	// Image builds (issue 25, bench/build.sh).
	if sb := builds["slopbox-build"]; sb > 0 {
		dk, pd := builds["docker-build"], builds["podman-build"]
		target("SlopCodeBench's submission build on a present base (--no-cache), rootless", sb, "dockerd's classic builder", dk, "≤ 0.5× dockerd", dk > 0 && sb <= 0.5*dk)
		target("SlopCodeBench's submission build on a present base (--no-cache), rootless", sb, "podman build (rootless)", pd, "< podman", pd > 0 && sb < pd)
		sc, dkc, pdc := builds["slopbox-build-cached"], builds["docker-build-cached"], builds["podman-build-cached"]
		target("the same build again, all cached, rootless", sc, "dockerd's classic builder", dkc, "≤ 100 ms and ≤ 0.2× dockerd", sc > 0 && sc <= 100 && dkc > 0 && sc <= 0.2*dkc)
		target("the same build again, all cached, rootless", sc, "podman build (rootless)", pdc, "reported", true)
		if r0, r10 := builds["slopbox-run0"], builds["slopbox-run10"]; r0 > 0 && r10 > 0 {
			step := (r10 - r0) / 10
			ex := builds["slopbox-exec-true"]
			target("a RUN step (`RUN true`, --network none, --no-cache), rootless (CLI): per step, 10 steps against none", step, "exec `true` in a running sandbox (CLI)", ex, "reported", true)
		}
	}
	// A RUN step's overhead (bench/cmd/apibench): in each round a build of
	// N `RUN true` steps, the same without them, and N execs of `true` in a
	// running sandbox; medians over the rounds.
	if st, ex, ov := api["rootless"]["build_run_step_api"], api["rootless"]["build_run_step_exec_api"], api["rootless"]["build_run_step_overhead_api"]; ov.Runs > 0 {
		target("a RUN step (`RUN true`, --network none, --no-cache), rootless (Go API): per step, N steps against none, interleaved", st.MedianMs, "exec `true` in a running sandbox, same rounds", ex.MedianMs, "reported", true)
		p("| … its overhead over the same command in a running sandbox | %.2f ms | - | - | ≤ 30 ms | %s |\n", ov.MedianMs, check(ov.MedianMs <= 30))
	}
	// User-defined networks and compose (issue 42, bench/network.sh).
	if nb := netRuns["slopbox-rootless-up"]; nb > 0 {
		for _, step := range []string{"up", "up-nowait", "down"} {
			ours := netRuns["slopbox-rootless-"+step]
			name := map[string]string{
				"up":        "`compose up -d --wait` of a two-service project on its own network, rootless serve (compose's first check comes after 500 ms)",
				"up-nowait": "… `compose up -d` of it (the engine's work without compose's 500 ms ticker)",
				"down":      "`compose down -t 0` of that project, rootless serve",
			}[step]
			dk, pd := netRuns["dockerd-"+step], netRuns["podman-rootless-"+step]
			target(name, ours, "dockerd", dk, "≤ 0.25× dockerd", dk > 0 && ours > 0 && ours <= 0.25*dk)
			target(name, ours, "podman service (rootless)", pd, "< podman", pd > 0 && ours > 0 && ours < pd)
			if step == "up" && ours > composeTick && dk > composeTick {
				// What is the engines' beyond the floor no engine goes
				// under: compose's first check of the containers.
				target("… the same beyond compose's 500 ms wait (each figure less 500 ms)", ours-composeTick, "dockerd", dk-composeTick, "≤ 0.25× dockerd", ours-composeTick <= 0.25*(dk-composeTick))
			}
		}
	}
	if ours := netRuns["slopbox-rootless-up100"]; ours > 0 {
		name := "`compose up -d` of 100 services on the project's network, rootless serve (issue 45)"
		target(name, ours, "dockerd", netRuns["dockerd-up100"], "reported", true)
		target(name, ours, "podman service (rootless)", netRuns["podman-rootless-up100"], "reported", true)
	}
	if sb := netFigs["slopbox-rootless"]; sb != nil {
		dns, hosts := sb["process_dns_ms"], sb["process_hosts_ms"]
		target("a service-name lookup on a user network (a new process resolving it), rootless serve", dns, "localhost from /etc/hosts, the same way, same container", hosts, "≤ 2× /etc/hosts", hosts > 0 && dns > 0 && dns <= 2*hosts)
		for _, peer := range []string{"dockerd", "podman-rootless"} {
			if o := netFigs[peer]["dns_rtt_ms"]; o > 0 {
				target("… the DNS round trip alone (in-process, no cache)", sb["dns_rtt_ms"], peer+"'s DNS server", o, "reported", true)
			}
		}
		nc := sb["network_create_ms"]
		target("`network create` through the Engine API (docker-py), rootless serve", nc, "", 0, "≤ 20 ms", nc > 0 && nc <= 20)
		for _, peer := range []string{"dockerd", "podman-rootless"} {
			if o := netFigs[peer]["network_create_ms"]; o > 0 {
				target("`network create` through the Engine API (docker-py), rootless serve", nc, peer, o, "reported", true)
			}
		}
		if cli := netRuns["slopbox-cli-network-create"]; cli > 0 {
			target("`slopbox network create` (CLI, the whole run), rootless", cli, "", 0, "reported", true)
		}
	}
	le, lf := api["rootless"]["local_exec_true_api"].MedianMs, api["rootless"]["fork_exec_floor"].MedianMs
	target("local backend exec `true` (Go API)", le, "bare fork+exec from Go", lf, "≤ 1.5× floor", lf > 0 && le <= 1.5*lf)

	w = out
	targets := parseTargets(table.Bytes())
	w.Write(table.Bytes())

	p("\n## Go API (bench/cmd/apibench)\n\n| figure | rootless median (ms) | root median (ms) | runs |\n| --- | ---: | ---: | ---: |\n")
	names := map[string]bool{}
	for _, m := range api {
		for n := range m {
			names[n] = true
		}
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		rl, rt := api["rootless"][n], api["root"][n]
		p("| %s | %s | %s | %d |\n", n, msOrDash(rl.MedianMs), msOrDash(rt.MedianMs), max(rl.Runs, rt.Runs))
	}
	for _, mode := range []string{"rootless", "root"} {
		if sc, ok := api[mode]["scale_idle_sandboxes"]; ok {
			b, _ := json.Marshal(sc.Extra)
			p("\nscale_idle_sandboxes (%s): `%s`\n", mode, b)
		}
	}

	if len(engine) > 0 {
		p("\n## Engine API (bench/engine/apibench.py: docker-py, SlopCodeBench's calls)\n\n| service | create + start until running (ms) | … with bridge (ms) | exec_run true (ms) | start %v containers (ms) | service PSS before → after (KiB) | new processes | their PSS (KiB) | published port MiB/s | port connect (ms) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n", engine["dockerd"]["scale_n"])
		var en []string
		for k := range engine {
			en = append(en, k)
		}
		sort.Strings(en)
		for _, k := range en {
			f := engine[k]
			p("| %s | %.2f | %.2f | %.2f | %.0f | %.0f → %.0f | %.0f | %.0f | %.0f | %.3f |\n", k, f["create_start_ms"], f["create_start_bridge_ms"], f["exec_run_true_ms"], f["scale_start_total_ms"], f["service_pss_kib_before"], f["service_pss_kib_after"], f["scale_new_procs"], f["scale_new_procs_pss_kib"], f["port_throughput_mib_s"], f["port_connect_ms"])
		}
	}

	if len(netFigs) > 0 {
		p("\n## Networks and compose (bench/network.sh: docker compose v2, a two-service project on its own network)\n\n| service | `up -d --wait` (ms) | `up -d` (ms) | `down -t 0` (ms) | lookup, new process: service name (ms) | … localhost from /etc/hosts (ms) | DNS round trip (ms) | network create, Engine API (ms) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		var nn []string
		for k := range netFigs {
			nn = append(nn, k)
		}
		sort.Strings(nn)
		for _, k := range nn {
			f := netFigs[k]
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", k, msOrDash(netRuns[k+"-up"]), msOrDash(netRuns[k+"-up-nowait"]), msOrDash(netRuns[k+"-down"]), msOrDash(f["process_dns_ms"]), msOrDash(f["process_hosts_ms"]), msOrDash(f["dns_rtt_ms"]), msOrDash(f["network_create_ms"]))
		}
		p("\nThe lookups run bench/cmd/lookupbench (static, Go's own resolver) bind-mounted into service a: each figure of a new process is a program that starts, resolves the name and exits, as `getent hosts` does; the round trip is one query and its answer from inside a process.\n")
	}

	p("\n## All peers, same run (hyperfine medians, ms)\n\n| peer | user | pull pyslim | run true | exec true | exec 10 MB stdout | scale: start per container | scale: PSS of new processes (KiB) |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	peers := map[string]string{}
	for _, r := range rows {
		peers[r.Peer] = r.User
	}
	var pn []string
	for k := range peers {
		pn = append(pn, k)
	}
	sort.Strings(pn)
	for _, peer := range pn {
		s := rows[peer+"/scale"]
		pss := "-"
		if s.N > 0 {
			pss = fmt.Sprintf("%.0f", s.NewProcsPssKiB)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", peer, peers[peer], msOrDash(med(peer, "pull")), msOrDash(med(peer, "run_true")),
			msOrDash(med(peer, "exec_true")), msOrDash(med(peer, "exec_10mb_stdout")), msOrDash(s.StartPerContainer), pss)
	}
	p("\nCommands timed, per peer, are in `summary.jsonl` of the results directory (field `command`).\n")
	if prof, err := os.ReadFile(filepath.Join(dir, "profile.md")); err == nil {
		p("\n## Where the CPU of a sandbox goes (Go API, pool off, rootless)\n\n")
		p("A whole-machine perf profile (`perf record -a -g`: every process and the kernel's work for it) of `apibench -only cold`, which spawns a sandbox, runs `true` in it and removes it, over and over; bench/cmd/spawnprofile puts each sample in a phase by its process and its stack (removal and the kernel's mount and seccomp work by the stack, whatever the process). Idle time and the profiler are left out.\n\n")
		p("%s", prof)
	}
	p("\n## Notes\n\n")
	p("- `exec 10 MB stdout` in the harness runs busybox `head -c 10000000 /dev/zero`, which copies byte by byte through stdio and writes 4 KiB pieces: on the host, with no container, it takes the time shown in the Targets table, so no runtime can bring it under 15 ms here. The busybox dd rows time the runtime's own path with a producer that is not its own bottleneck, beside the same command on the host.\n")
	p("- The pool (`spawn_ready_api`): a Backend keeps two sandboxes of the kind it last spawned started ahead of need, and Spawn claims one (attaches its mounts, sets its hostname). The loop spawns, execs `true` and removes the sandbox back to back, so the pool refills while the caller works. `spawn_cold_api` is the same loop with the pool off. The CLI never keeps sandboxes ready.\n")
	p("- CPU time per container: the machine's busy time (/proc/stat: user, nice, system, irq, softirq) over a run of commands that each make one, divided by their number, so every process counts (for slopbox: the CLI or the Go program, the spawn server, libcontainer's init, PID 1, the command, the kernel's work for them; for crun: crun, the command and the kernel's), with whatever else the machine does in the background for both. crun's is measured the same way (scripts/bench.sh, `cpu.jsonl`); hyperfine's user and system times count only the processes a command waits for. Starting sandboxes ahead of need (the pool) hides a start from the caller, not its cost: at the measured cost, with %v CPUs, back-to-back runs that each need a new sandbox take at least about this divided by %v, whoever starts the sandboxes.\n", meta["cpus"], meta["cpus"])
	p("- slopbox's seccomp filter lists only the native architecture (32-bit compat syscalls are refused), which is stricter than Docker's. It is compiled once per profile with libcontainer's code and cached; each sandbox's PID 1 loads the compiled program.\n")
	p("- CLI `run -d` starts a spawn server in a new user namespace for each invocation (rootless: an exec waiting in C for newuidmap/newgidmap, then a re-execution; as root one exec, its maps written between fork and exec) before it starts the sandbox; the Go API pays that once per Backend. runc's rootless bundle maps one id and needs neither.\n")
	p("- The Go API figures come from a process that keeps its sandbox backend open; the CLI figures include starting the slopbox binary each time.\n")
	return targets
}

// composeTick is docker compose v2's wait before its first check of the
// containers in `up --wait` (pkg/compose/convergence.go: a 500 ms
// ticker): the floor of every engine's `up --wait`.
const composeTick = 500.0

func ratioOf(a, b float64) string {
	if a > 0 && b > 0 {
		return fmt.Sprintf("%.2f×", a/b)
	}
	return "-"
}

func check(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func msOrDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// hyperfineMedians reads a hyperfine export (or one of the same shape the
// bench scripts join): each result's command (its -n name) → its median
// in ms; empty when the file is missing or unreadable.
func hyperfineMedians(path string) map[string]float64 {
	out := map[string]float64{}
	var runs struct {
		Results []struct {
			Command string  `json:"command"`
			Median  float64 `json:"median"`
		} `json:"results"`
	}
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &runs) == nil {
		for _, r := range runs.Results {
			out[r.Command] = r.Median * 1000
		}
	}
	return out
}

// peerFigures reads lines of JSON objects, each with its "peer": peer →
// its numeric figures (engine.jsonl, network.jsonl).
func peerFigures(path string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	readLines(path, func(b []byte) {
		var f map[string]any
		if json.Unmarshal(b, &f) == nil {
			if peer, ok := f["peer"].(string); ok {
				out[peer] = map[string]float64{}
				for k, v := range f {
					out[peer][k] = num(v)
				}
			}
		}
	})
	return out
}

func readLines(path string, f func([]byte)) {
	file, err := os.Open(path)
	if err != nil {
		return
	}
	defer file.Close()
	s := bufio.NewScanner(file)
	s.Buffer(make([]byte, 1<<20), 1<<24)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); line != "" {
			f([]byte(line))
		}
	}
}
