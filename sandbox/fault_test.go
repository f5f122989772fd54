package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/test/fixtures"
)

// fifoPasswdImage is busybox with /etc/passwd replaced by a FIFO.
func fifoPasswdImage(t *testing.T, b *Backend) string {
	return imageWith(t, b, "fifo", fixtures.Layer(t, fixtures.Entry{Name: "etc/passwd", Type: tar.TypeFifo, Mode: 0o644}))
}

// heldFile is a file below a state root, recorded so that a process
// holding it is still found once it is deleted, or when the holder's
// link reads a path of another mount namespace (/lc/ID/exec.fifo).
type heldFile struct {
	name string
	fi   os.FileInfo
}

// filesUnder records every file (not directory) below dir.
func filesUnder(dir string) []heldFile {
	var out []heldFile
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := os.Lstat(p); err == nil {
				out = append(out, heldFile{d.Name(), fi})
			}
		}
		return nil
	})
	return out
}

// processesUnder lists the processes (other than this one) that hold a
// file below dir, by the link of its fd or by its identity with one of
// known (an inode reused since counts only under the same name).
func processesUnder(dir string, known ...heldFile) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			fdPath := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
			l, err := os.Readlink(fdPath)
			if err != nil {
				continue
			}
			held := strings.HasPrefix(l, dir+"/")
			if fi, err := os.Stat(fdPath); err == nil && !held {
				for _, k := range known {
					if os.SameFile(fi, k.fi) && filepath.Base(strings.TrimSuffix(l, " (deleted)")) == k.name {
						held = true
						break
					}
				}
			}
			if held {
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				out = append(out, fmt.Sprintf("%d %q holds %s", pid, cmd, l))
				break
			}
		}
	}
	return out
}

// seenProc is a process found by a test, known by its pid and start time
// (so that a pid reused since is not it).
type seenProc struct {
	pid   int
	start uint64
	desc  string
}

// alive reports whether p still runs (a zombie runs nothing).
func (p seenProc) alive() bool {
	start, zombie, ok := procStart(p.pid)
	return ok && !zombie && start == p.start
}

// procsOf records the processes (zombies aside) that hold a file below
// dir (processesUnder, with known) or, with slices, run as a host uid of
// one of b's id slices (as root, a sandbox's processes and its spawn
// server run as its slice).
func procsOf(b *Backend, dir string, known []heldFile, slices []int) []seenProc {
	var out []seenProc
	add := func(pid int, desc string) {
		if start, zombie, ok := procStart(pid); ok && !zombie {
			out = append(out, seenProc{pid, start, desc})
		}
	}
	for _, desc := range processesUnder(dir, known...) {
		var pid int
		fmt.Sscan(desc, &pid)
		add(pid, desc)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		for _, line := range strings.Split(string(status), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "Uid:" {
				continue
			}
			uid, _ := strconv.ParseUint(f[1], 10, 64)
			for _, k := range slices {
				if lo := uint64(b.slices.mapping(k).UIDs[0].HostID); uid >= lo && uid < lo+SliceSize {
					cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
					add(pid, fmt.Sprintf("%d %q runs as uid %d of slice %d", pid, cmd, uid, k))
				}
			}
		}
	}
	return out
}

// Defect D: an image whose /etc/passwd is a FIFO used to hang the spawn
// forever (libcontainer read it to find HOME) and leave an init behind.
func TestFifoPasswdImageSpawns(t *testing.T) {
	b, _ := testBackend(t)
	ref := fifoPasswdImage(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := b.Spawn(ctx, backend.SpawnSpec{Image: ref, Workspace: workspaceDir(t), DisableSetup: true})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	defer sb.Cleanup()
	// id blocks on the FIFO, so the timeout always ends it; it is long
	// enough for the echoes before it on a loaded machine.
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo hi; test -p /etc/passwd && echo p; id", Timeout: 8 * time.Second})
	if err != nil || !strings.HasPrefix(res.Stdout, "hi\np\n") || !res.TimedOut {
		t.Errorf("exec: %+v %v (id reads the FIFO and is killed on time)", res, err)
	}
	if res := run(t, sb.(*Sandbox), "echo still usable"); res.Stdout != "still usable\n" {
		t.Errorf("%+v", res)
	}
}

// Defect D: a spawn has a deadline. When libcontainer's init blocks (here:
// HOME left unset, so it reads the FIFO), the server kills it, the spawn
// fails with a clear error and nothing is left.
func TestSpawnDeadlineKillsStuckInit(t *testing.T) {
	b, _ := testBackend(t)
	ref := fifoPasswdImage(t, b)
	b.initEnv = []string{"_SLOPBOX_AGENT=1"}
	b.startDeadline = time.Second
	b.KeepReady(false)
	start := time.Now()
	_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: workspaceDir(t), DisableSetup: true, Name: "stuck"})
	if err == nil || !strings.Contains(err.Error(), "did not start within 1s") {
		t.Fatalf("spawn: %v, want the deadline's error", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the failed spawn took %v", d)
	}
	if left := processesUnder(b.state.dir); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
	if list, _ := b.List(); len(list) != 0 {
		t.Errorf("left recorded: %+v", list)
	}
}

const killedSpawnHelper = "test-killed-spawn"

func init() {
	reexec.Register(killedSpawnHelper, func() int {
		b, err := New(os.Getenv("SB_ROOT"))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		b.initEnv = []string{"_SLOPBOX_AGENT=1"} // the init blocks on the FIFO
		b.KeepReady(false)
		_, err = b.Spawn(context.Background(), backend.SpawnSpec{Image: os.Getenv("SB_IMAGE"), NoWorkspaceMount: true, Name: "victim"})
		fmt.Println(err)
		return 1
	})
}

// Defect D: a slopbox process SIGKILLed mid-spawn used to leave a
// libcontainer init that neither `ps -a` nor `prune` could see, and a
// dangling name. Prune now finds and kills it.
func TestPruneAfterSpawnKilledMidway(t *testing.T) {
	b, _ := testBackend(t)
	ref := fifoPasswdImage(t, b)
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), reexec.Env+"="+killedSpawnHelper, "SB_ROOT="+b.root, "SB_IMAGE="+ref)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// The handshake: a process of the helper's sandbox blocks opening the
	// FIFO (the kernel's wait for a writer), not a guess at how long that
	// takes.
	fixtures.Eventually(t, "the helper's sandbox init blocked on the FIFO", func() (bool, string) {
		procs := processesUnder(b.state.dir)
		for _, p := range procs {
			var pid int
			fmt.Sscan(p, &pid)
			if w, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); string(w) == "wait_for_partner" || string(w) == "fifo_open" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("processes under the state: %v", procs)
	})
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if left := processesUnder(b.state.dir); len(left) == 0 {
		t.Fatal("nothing survived the kill: the init had not blocked yet, so this run tests nothing")
	}
	var slices []int
	if b.slices != nil {
		if slices = heldSlices(t, b); len(slices) != 1 {
			t.Errorf("the killed spawn holds slices %v, want one", slices)
		}
	}
	// What the killed spawn left running, recorded before prune deletes
	// its files: its init holds libcontainer's exec.fifo, by a link that
	// reads a path of another mount namespace (until run 49, such an init
	// outlived every prune, running as the slice prune had freed).
	victims := procsOf(b, b.state.dir, filesUnder(b.state.dir), slices)
	if _, err := b.Prune(false); err != nil {
		t.Errorf("prune: %v", err)
	}
	if b.slices != nil && len(heldSlices(t, b)) > 0 {
		t.Errorf("the killed spawn's id slice is still held after prune: %v", heldSlices(t, b))
	}
	// Rootless, the killed process's own spawn server (the user's, which
	// prune does not kill) may still be ending the request it was serving
	// (its init, killed by prune, no longer answers): it holds the entry's
	// files until it exits, within moments (run 34: seen once, holding the
	// entry's exec.fifo). Anything else, and anything as root (where
	// prune kills and waits for the server), must be gone already.
	server := func(p string) bool {
		return os.Geteuid() != 0 && strings.Contains(p, "/bin/spawn-") && !strings.Contains(p, `\x00init\x00`)
	}
	for _, p := range victims {
		if p.alive() && !server(p.desc) {
			t.Errorf("left running after prune: %v", p.desc)
		}
	}
	fixtures.Eventually(t, "the killed spawn's server done with the entry", func() (bool, string) {
		left := processesUnder(b.state.dir)
		return len(left) == 0, fmt.Sprintf("left running: %v", left)
	})
	if _, err := os.Lstat(filepath.Join(b.state.dir, namesDir, "victim")); err == nil {
		t.Error("the name of the killed spawn is left dangling")
	}
	ents, _ := os.ReadDir(filepath.Join(b.state.dir, poolDir))
	if len(ents) > 0 {
		t.Errorf("left in %s: %v", poolDir, ents)
	}
}

// Defect E: a sandbox whose state file is truncated is listed as broken;
// every other sandbox keeps working; rm -f and prune kill its processes
// before deleting anything.
func TestTruncatedStateIsBroken(t *testing.T) {
	b, ref := testBackend(t)
	ok := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Name: "ok"})
	var victims []*Sandbox
	for _, name := range []string{"victim1", "victim2"} {
		sb, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: workspaceDir(t), DisableSetup: true, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		v := sb.(*Sandbox)
		run(t, v, "sleep 3600 & true")
		if err := os.Truncate(filepath.Join(v.dir, stateFile), 7); err != nil {
			t.Fatal(err)
		}
		victims = append(victims, v)
	}
	list, err := b.List()
	if err != nil {
		t.Fatal(err)
	}
	broken := map[string]string{}
	for _, i := range list {
		if i.Broken != "" {
			broken[i.Name] = i.Broken
		}
	}
	if len(list) != 3 || len(broken) != 2 || broken["victim1"] == "" {
		t.Errorf("list: %+v", list)
	}
	if res := run(t, ok, "echo fine"); res.Stdout != "fine\n" {
		t.Errorf("another sandbox stopped working: %+v", res)
	}
	v1, err := b.Open("victim1")
	if err != nil {
		t.Fatalf("open a broken sandbox: %v", err)
	}
	if _, err := v1.Exec(context.Background(), backend.ExecRequest{Shell: "true"}); err == nil || !strings.Contains(err.Error(), "rm -f victim1") {
		t.Errorf("exec in a broken sandbox: %v", err)
	}
	// rm -f
	if err := v1.Remove(); err != nil {
		t.Errorf("rm -f: %v", err)
	}
	if victims[0].rec.alive() {
		t.Error("rm -f of a broken sandbox left its init running")
	}
	// prune
	if _, err := b.Prune(false); err != nil {
		t.Errorf("prune: %v", err)
	}
	if victims[1].rec.alive() {
		t.Error("prune of a broken sandbox left its init running")
	}
	for _, v := range victims {
		if _, err := os.Stat(v.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: directory left: %v", v.rec.Name, err)
		}
	}
	if list, _ := b.List(); len(list) != 1 || list[0].Name != "ok" {
		t.Errorf("after prune: %+v", list)
	}
}

// Item 2: one caller's cancelled Spawn ends only that call; every other
// Spawn on the same Backend goes on, and the cancelled ones leave nothing.
func TestCancelledSpawnEndsOnlyItself(t *testing.T) {
	b, ref := testBackend(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%4)*time.Millisecond+200*time.Microsecond)
				if sb, err := b.Spawn(ctx, backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, DisableSetup: true}); err == nil {
					sb.Cleanup()
				}
				cancel()
				if g == 0 {
					sb, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, NoWorkspaceMount: true, DisableSetup: true})
					if err == nil {
						_, err = sb.Exec(context.Background(), backend.ExecRequest{Shell: "true"})
						sb.Cleanup()
					}
					if err != nil {
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d spawns failed beside cancelled ones, first: %v", len(failures), failures[0])
	}
	b.Close()
	// Late replies are handled in the background: prune until they are.
	fixtures.Eventually(t, "nothing left after Close and prune", func() (bool, string) {
		b.Prune(true)
		list, _ := b.List()
		left := processesUnder(b.state.dir)
		return len(list) == 0 && len(left) == 0, fmt.Sprintf("left: %+v; left running: %v", list, left)
	})
}

// Item 3: a sandbox never serves a command before its limits hold (an exec
// from another process in that window ran outside the cgroup).
func TestLimitsHoldBeforeClaim(t *testing.T) {
	b, ref := testBackend(t)
	var inCgroup string
	b.claimedHook = func(rec *record) {
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", rec.Pid))
		inCgroup = string(cg)
	}
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Limits: backend.Limits{Pids: 100}})
	if len(sb.rec.Unenforced) > 0 {
		if os.Geteuid() == 0 {
			t.Fatalf("limits not enforced as root: %v", sb.rec.Unenforced)
		}
		// Rootless without delegated cgroups there is no cgroup to be
		// outside of; the limit is reported as unenforced instead.
		return
	}
	if !strings.Contains(inCgroup, cgroupParent+"/"+sb.ID()) {
		t.Errorf("when the sandbox began to serve, PID 1 was in\n%s\nnot in its cgroup %s/%s", inCgroup, cgroupParent, sb.ID())
	}
}

// Defect F: a timeout, Kill and a cancelled caller reach every process
// the command started, also those that called setsid (session and process
// group tracking missed them), and one that kills its supervisor.
func TestKillReachesProcessesThatLeftTheSession(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	left := func(t *testing.T, marks ...string) {
		t.Helper()
		// Eventually, not promptly: a process the kill missed sleeps for
		// 7000 s, far beyond the helper's patience.
		fixtures.Eventually(t, "the command's processes gone", func() (bool, string) {
			res := run(t, sb, "ps -o args")
			var alive []string
			for _, m := range marks {
				if strings.Contains(res.Stdout, "sleep "+m) {
					alive = append(alive, m)
				}
			}
			return len(alive) == 0, fmt.Sprintf("still running: sleep %v\n%s", alive, res.Stdout)
		})
	}
	escape := "busybox setsid sleep 7001 & busybox setsid sh -c 'sleep 7002 & sleep 7003' & (busybox setsid sleep 7004 &); "
	t.Run("timeout", func(t *testing.T) {
		res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: escape + "sleep 60", Timeout: time.Second})
		if err != nil || !res.TimedOut {
			t.Fatalf("%+v %v", res, err)
		}
		left(t, "7001", "7002", "7003", "7004")
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		sb.Exec(ctx, backend.ExecRequest{Shell: escape + "sleep 60"})
		left(t, "7001", "7002", "7003", "7004")
	})
	t.Run("supervisor-killed", func(t *testing.T) {
		// Container root may kill the exec's supervisor (its parent): its
		// tree is killed with it, never left to run unseen.
		start := time.Now()
		res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: escape + "kill -9 $PPID; sleep 60", Timeout: 30 * time.Second})
		if err != nil || res.TimedOut || time.Since(start) > 10*time.Second {
			t.Fatalf("%+v %v", res, err)
		}
		left(t, "7001", "7002", "7003", "7004")
	})
	t.Run("background-survives-normal-exit", func(t *testing.T) {
		// A server started in one exec serves the next: only a kill ends it.
		if res := run(t, sb, "busybox setsid sleep 7005 >/dev/null 2>&1 & sleep 7006 >/dev/null 2>&1 &"); res.ExitCode != 0 {
			t.Fatalf("%+v", res)
		}
		// Both may still be between fork and exec (ps shows "[exe]"):
		// polled until they show.
		fixtures.Eventually(t, "background processes of a finished exec alive", func() (bool, string) {
			res := run(t, sb, "ps -o args")
			return strings.Contains(res.Stdout, "sleep 7005") && strings.Contains(res.Stdout, "sleep 7006"), "killed?\n" + res.Stdout
		})
	})
}

// A command that slopbox (timeout) or the kernel (OOM) killed says which
// on the caller's stderr, rather than exiting 137 in silence.
func TestAttachSaysWhyItWasKilled(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Limits: backend.Limits{MemoryBytes: 48 << 20}})
	attach := func(shell string, timeout time.Duration) (int, string) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		code, err := sb.Attach(context.Background(), backend.ExecRequest{Argv: []string{"sh", "-c", shell}, Timeout: timeout}, nil, w, w, false)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(r)
		return code, string(out)
	}
	if code, out := attach("sleep 30", 500*time.Millisecond); code != 137 || !strings.Contains(out, "timed out after 500ms and was killed") {
		t.Errorf("timeout: exit %d, stderr %q", code, out)
	}
	if len(sb.Unenforced()) > 0 {
		if os.Geteuid() == 0 {
			t.Fatalf("limits not enforced as root: %v", sb.Unenforced())
		}
		return // rootless without delegated cgroups: no OOM kill to report
	}
	if code, out := attach("head -c 200000000 /dev/zero | tail > /dev/null", 0); code == 0 || !strings.Contains(out, "OOM killer") {
		t.Errorf("oom: exit %d, stderr %q", code, out)
	}
	if n := sb.Info().OOMKills; n == 0 {
		t.Error("inspect does not count the OOM kill")
	}
}

// A command whose supervisor cannot fork it (the pids limit, or a host out
// of pids or memory) is an exec failure that says why, as docker's "cannot
// start": it never ran. PID 1 used to report it started and then killed
// (exit 137, and a run -d sandbox stopped by its monitor a moment later).
func TestCommandThatCannotBeForkedFailsToStart(t *testing.T) {
	b, ref := testBackend(t)
	// PID 1 and the exec's supervisor: no pid left for the command.
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Limits: backend.Limits{Pids: 2}})
	// Root only (scripts/test.sh's ROOT_ONLY): rootless on these cgroup v1
	// hosts a pids limit has no cgroup to go in.
	if len(sb.Unenforced()) > 0 {
		t.Fatalf("the pids limit is not enforced (%v): this test needs a pids cgroup", sb.Unenforced())
	}
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 126 || !strings.Contains(res.Stderr, "resource temporarily unavailable") {
		t.Errorf("exit %d, stderr %q; want 126 and the fork's error", res.ExitCode, res.Stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = sb.RunDetached(ctx, backend.ExecRequest{Argv: []string{"sleep", "1000"}}, DetachOptions{})
	var se *StartError
	if !errors.As(err, &se) || se.Code != 126 {
		t.Errorf("run -d: %v; want a StartError with code 126", err)
	}
}

// TestRemovalOutlastsALateWriter: removing a sandbox whose directory a
// process its record does not name still fills (as root, the sandbox's
// own spawn server finishing the claim of a `run` killed half-way; root
// and rootless, a monitor its starter did not live to record: prune failed
// with "directory not empty" in run 33) kills that process, found by its
// mark or its command line, and removes the directory, rather than
// failing and leaving it. Without the retry the removal fails with
// ENOTEMPTY (rootless, through the spawn server's reply, whose errno now
// reaches errors.Is).
func TestRemovalOutlastsALateWriter(t *testing.T) {
	b, err := New(filepath.Join(searchableTempDir(t), "root"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for _, c := range []struct {
		name, sub string
		rootOnly  bool // rootless, no sandbox has a server of its own
		writer    func(dir, id string) *exec.Cmd
	}{
		{"the sandbox's spawn server", "upper", true, func(dir, id string) *exec.Cmd {
			w := exec.Command("sh", "-c", `i=0; while :; do i=$((i+1)); : > "$1/upper/f$i" || exit 0; done`, "sh", dir)
			w.Env = append(os.Environ(), spawnServerMarker+id)
			return w
		}},
		{"an unrecorded monitor", "", false, func(dir, id string) *exec.Cmd {
			// A monitor's command line (slopbox-monitor ROOT ID): bash
			// runs $BASH_ENV, the loop, before its "script" (ROOT).
			script := filepath.Join(t.TempDir(), "writer.sh")
			if err := os.WriteFile(script, []byte(`i=0; while :; do i=$((i+1)); : > "$W/f$i" || exit 0; done`), 0o600); err != nil {
				t.Fatal(err)
			}
			bash, err := exec.LookPath("bash")
			if err != nil {
				t.Fatalf("bash (Debian's essential package) plays the monitor: %v", err)
			}
			// Its root spelled with a trailing slash: the same directory.
			w := &exec.Cmd{Path: bash, Args: []string{"slopbox-monitor", b.root + "/", id}}
			w.Env = append(os.Environ(), "BASH_ENV="+script, "W="+dir)
			return w
		}},
	} {
		if c.rootOnly && os.Geteuid() != 0 {
			t.Logf("%s: root only (rootless, the user's one spawn server is not killed)", c.name)
			continue
		}
		gone := exec.Command("true")
		if err := gone.Run(); err != nil {
			t.Fatal(err)
		}
		rec := &record{ID: newID(), Pid: gone.Process.Pid, PidStart: 1, Created: time.Now()}
		dir := b.state.sandboxDir(rec.ID)
		if err := os.MkdirAll(filepath.Join(dir, "upper"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := b.state.write(rec); err != nil {
			t.Fatal(err)
		}
		w := c.writer(dir, rec.ID)
		w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- w.Wait() }()
		t.Cleanup(func() {
			w.Process.Kill()
			<-waited
		})
		fixtures.Eventually(t, c.name+"'s first files", func() (bool, string) {
			ents, _ := os.ReadDir(filepath.Join(dir, c.sub))
			return len(ents) > 100, fmt.Sprintf("%d files", len(ents))
		})
		if err := b.destroy(rec); err != nil {
			t.Errorf("destroy beside %s: %v", c.name, err)
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("beside %s, the sandbox directory is still there: %v", c.name, err)
		}
		os.RemoveAll(dir)
	}
}

// TestProcessesLeaveOutEndedSessions: an exec's session (PID 1's fork,
// named slopbox-exec) that has ended but that PID 1 has not reaped yet is
// slopbox's, not the container's: docker top does not list it. PID 1 is
// stopped while the exec's command runs, so that it cannot reap the
// session once the command ends: the session stays a zombie with no exe
// to compare. Run 35's TestServeExecStreams listed one as
// "[slopbox-exec]" beside sleep.
func TestProcessesLeaveOutEndedSessions(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref})
	pid1 := sb.rec.Pid
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), backend.ExecRequest{Argv: []string{"sleep", "2"}})
		done <- err
	}()
	var session int
	fixtures.Eventually(t, "the exec's session", func() (bool, string) {
		session = childNamed(pid1, sessionComm)
		return session > 0, "none yet"
	})
	if err := syscall.Kill(pid1, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid1, syscall.SIGCONT) })
	fixtures.Eventually(t, "the session ended and left unreaped", func() (bool, string) {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", session))
		i := bytes.LastIndexByte(st, ')')
		return i > 0 && i+2 < len(st) && st[i+2] == 'Z', string(st)
	})
	procs, err := sb.Processes()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PID == session || strings.Contains(p.Command, sessionComm) {
			t.Errorf("top lists slopbox's ended session: %+v (all: %+v)", p, procs)
		}
	}
	syscall.Kill(pid1, syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(fixtures.Patience()):
		t.Error("the exec did not end once PID 1 went on")
	}
}

// childNamed returns a child of pid whose name (comm) is name (any, for
// ""), or 0.
func childNamed(pid int, name string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		i, j := bytes.IndexByte(st, '('), bytes.LastIndexByte(st, ')')
		if i < 0 || j < i || name != "" && string(st[i+1:j]) != name {
			continue
		}
		if f := strings.Fields(string(st[j+1:])); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			return c
		}
	}
	return 0
}
