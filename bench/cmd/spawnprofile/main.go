// Command spawnprofile turns a whole-machine perf profile of sandboxes
// spawned, run and removed (scripts/bench.sh records one around
// `apibench -only cold`) into where their CPU goes, by phase: the caller's
// Go API work, the spawn server, libcontainer's init, the mounts, the
// seccomp load, PID 1, the command, the removal, and the rest.
//
// Usage: perf script -F comm,period,ip,sym | spawnprofile -n SANDBOXES
//
// Each sample is put in the first phase whose rule matches it, the rules
// tried in the order of the phases table below: the removal and the
// kernel's mount and seccomp work are told by the frames of the sample's
// stack, whichever process it is in; the rest by the process's name.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// phase is one row of the profile: a sample is in it when its process
// name matches comm (when set) and one of its frames matches frame (when
// set).
type phase struct {
	name  string
	comm  *regexp.Regexp
	frame *regexp.Regexp
	// apart: not the sandboxes' work (the idle loop, the profiler), left
	// out of the total.
	apart bool
}

var phases = []phase{
	{name: "removal (Remove: stop, unmount, delete the sandbox's directory)",
		frame: regexp.MustCompile(`sandbox\.\(\*Sandbox\)\.(Remove|Cleanup)|sandbox\.\(\*Backend\)\.destroy|libcontainer\.\(\*Container\)\.(Destroy|destroy)|spawnd\..*[Rr]emove|spawnd\..*[Dd]estroy`)},
	{name: "seccomp filter load (kernel and libseccomp)",
		frame: regexp.MustCompile(`seccomp|bpf_prog_|bpf_check|bpf_int_jit`)},
	{name: "mounts (overlay, binds, /proc, /dev, pivot_root: kernel side)",
		frame: regexp.MustCompile(`^(path_mount|do_mount|__x64_sys_mount|__x64_sys_move_mount|__x64_sys_open_tree|__x64_sys_mount_setattr|__x64_sys_fsconfig|__x64_sys_fsmount|__x64_sys_fsopen|__x64_sys_pivot_root|__x64_sys_umount|ovl_fill_super|do_new_mount|do_move_mount)$`)},
	{name: "the command (`true`)", comm: regexp.MustCompile(`^(true|busybox)$`)},
	{name: "exec helper in the sandbox (slopbox-exec)", comm: regexp.MustCompile(`^slopbox-exec$`)},
	{name: "PID 1 (the C agent)", comm: regexp.MustCompile(`^slopbox-init$`)},
	{name: "libcontainer init (runc init: nsexec's three processes, its Go runtime, namespaces, rootfs, capabilities, exec of PID 1)", comm: regexp.MustCompile(`^runc:\[`)},
	// The spawn server runs as "exe" (executed through /proc/self/exe in
	// its user namespace) or under its binary's name; libcontainer's init
	// is "exe" too for the moment before nsexec names it runc:[0:PARENT].
	{name: "spawn server (libcontainer's create and start, id maps, cgroups)", comm: regexp.MustCompile(`^(spawn-|exe$)`)},
	{name: "newuidmap / newgidmap", comm: regexp.MustCompile(`^new[ug]idmap$`)},
	{name: "the caller (Go API: spec, layers, records, requests)", comm: regexp.MustCompile(`^apibench`)},
	{name: "kernel threads (kworker, rcu, ksoftirqd, …)", comm: regexp.MustCompile(`^(kworker|rcu|ksoftirqd|migration|jbd2|kcompactd|kswapd)`)},
	{name: "idle", comm: regexp.MustCompile(`^swapper`), apart: true},
	{name: "perf (the profiler)", comm: regexp.MustCompile(`^perf`), apart: true},
}

// sample is one perf sample: its process name, weight and stack.
type sample struct {
	comm   string
	period int64
	frames []string
}

func main() {
	n := flag.Int("n", 0, "sandboxes spawned, run and removed during the profile")
	flag.Parse()
	if *n <= 0 {
		log.Fatal("spawnprofile: -n SANDBOXES is required")
	}
	totals := make([]int64, len(phases)+1)
	var all int64
	err := readSamples(os.Stdin, func(s sample) {
		i := classify(s)
		totals[i] += s.period
		if i == len(phases) || !phases[i].apart {
			all += s.period
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	if all == 0 {
		log.Fatal("spawnprofile: no samples")
	}
	fmt.Printf("| phase | CPU ms per sandbox | share |\n| --- | ---: | ---: |\n")
	for i, t := range totals {
		if t == 0 || i < len(phases) && phases[i].apart {
			continue
		}
		name := "other processes on the machine"
		if i < len(phases) {
			name = phases[i].name
		}
		fmt.Printf("| %s | %.2f | %.0f%% |\n", name, float64(t)/1e6/float64(*n), 100*float64(t)/float64(all))
	}
	fmt.Printf("| **all** | **%.2f** | 100%% |\n", float64(all)/1e6/float64(*n))
}

// classify returns the index of s's phase, len(phases) for none.
func classify(s sample) int {
	for i, p := range phases {
		if p.comm != nil && !p.comm.MatchString(s.comm) {
			continue
		}
		if p.frame != nil && !anyMatch(p.frame, s.frames) {
			continue
		}
		return i
	}
	return len(phases)
}

func anyMatch(re *regexp.Regexp, frames []string) bool {
	for _, f := range frames {
		if re.MatchString(f) {
			return true
		}
	}
	return false
}

// readSamples parses `perf script -F comm,period,ip,sym`: a header line
// "COMM PERIOD" per sample (the name may hold spaces), its frames indented
// below ("ADDR SYMBOL"), a blank line after.
func readSamples(r io.Reader, each func(sample)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *sample
	flush := func() {
		if cur != nil {
			each(*cur)
			cur = nil
		}
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if cur == nil {
				continue
			}
			f := strings.Fields(line)
			if len(f) >= 2 {
				cur.frames = append(cur.frames, strings.Join(f[1:], " "))
			}
		default:
			flush()
			f := strings.Fields(line)
			if len(f) < 2 {
				return fmt.Errorf("spawnprofile: not a sample header: %q", line)
			}
			p, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if err != nil {
				return fmt.Errorf("spawnprofile: period of %q: %w", line, err)
			}
			cur = &sample{comm: strings.Join(f[:len(f)-1], " "), period: p}
		}
	}
	flush()
	return sc.Err()
}
