package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/test/fixtures"

	"golang.org/x/sys/unix"
)

// TestMonitorProcess runs the monitor this binary uses (the embedded C
// build, or this binary's constructor without it) against a stand-in for
// PID 1 and the command's pipes: the log holds what the command wrote, as
// the Go readers read it (quotes, control bytes, invalid UTF-8 as U+FFFD
// as encoding/json has it, a long line in pieces of at most 16 KiB, each
// stream tagged); a signal sent to the monitor comes to PID 1 as a kill
// frame; PID 1's exit report ends it, and the exit it records is the
// command's.
func TestMonitorProcess(t *testing.T) {
	root := filepath.Join(searchableTempDir(t), "root")
	b, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bins, err := b.binaries()
	if err != nil {
		t.Fatal(err)
	}
	const id = "0123456789abcdef"
	dir := filepath.Join(root, "c", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A state file: the sandbox is not removed, so its exit is recorded.
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte(`{"id":"`+id+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	agent := os.NewFile(uintptr(fds[0]), "agent")
	defer agent.Close()
	monEnd := os.NewFile(uintptr(fds[1]), "monitor-end")
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.OpenFile("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := exec.Command(bins.monitor, root, id, "pipes")
	m.Args[0] = "slopbox-monitor"
	m.Env = append(os.Environ(), reexec.Env+"="+monitorHelper, "_SLOPBOX_MONITOR=1")
	m.ExtraFiles = []*os.File{self, monEnd, outR, errR}
	m.Stderr = os.Stderr
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.ExtraFiles {
		f.Close()
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = m.Wait(); close(done) }()
	t.Cleanup(func() {
		m.Process.Kill()
		<-done
	})

	long := strings.Repeat("x", 40000)
	outW.WriteString("hello\n")
	outW.WriteString("q\"b\\c\x01\t\x7f\n")
	outW.WriteString("bad \xff\xfe é €\n")
	outW.WriteString(long)
	errW.WriteString("to stderr\n")

	// kill -s: the signal goes to PID 1 as a kill frame.
	fixtures.Eventually(t, "the monitor says it is ready for signals", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(dir, monitorReady))
		return err == nil && string(b) == strconv.Itoa(m.Process.Pid), fmt.Sprintf("%s: %q %v", monitorReady, b, err)
	})
	if err := m.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	agent.SetReadDeadline(time.Now().Add(10 * time.Second))
	frame := make([]byte, 16)
	if _, err := agent.Read(frame); err != nil {
		t.Fatalf("no kill frame from the monitor: %v", err)
	}
	if want := killFrame(t, syscall.SIGUSR1); string(frame) != string(want) {
		t.Errorf("the monitor sent % x for SIGUSR1, want % x", frame, want)
	}

	outW.Close()
	errW.Close()
	reply := make([]byte, 8)
	binary.NativeEndian.PutUint32(reply, replyExited)
	binary.NativeEndian.PutUint32(reply[4:], 3<<8) // exit 3
	if _, err := agent.Write(reply); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		if waitErr != nil {
			t.Fatalf("monitor: %v", waitErr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the monitor did not end after the command's exit")
	}
	e, ok := readExit(dir)
	if !ok || e.ExitCode != 3 || time.Since(e.FinishedAt) > time.Minute {
		t.Errorf("exit record %+v %v, want exit 3 just now", e, ok)
	}

	var stdout, stderr strings.Builder
	tail := &logTail{path: filepath.Join(dir, logFile)}
	tail.f, err = openLog(tail.path)
	if err != nil {
		t.Fatal(err)
	}
	defer tail.close()
	var pieces []logLine
	if err := tail.poll(func(l logLine) error {
		pieces = append(pieces, l)
		if l.Stream == "stderr" {
			stderr.WriteString(l.Log)
		} else if l.Stream == "stdout" {
			stdout.WriteString(l.Log)
		} else {
			t.Errorf("line of stream %q", l.Stream)
		}
		if time.Since(l.Time) > time.Minute {
			t.Errorf("line %q has time %v", l.Log, l.Time)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := stdout.String(), "hello\nq\"b\\c\x01\t\x7f\nbad \ufffd\ufffd é €\n"+long; got != want {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Errorf("stdout in the log (%d bytes, want %d) differs at byte %d: %q, want %q",
			len(got), len(want), i, got[i:min(len(got), i+40)], want[i:min(len(want), i+40)])
	}
	if stderr.String() != "to stderr\n" {
		t.Errorf("stderr in the log: %q", stderr.String())
	}
	for _, l := range pieces {
		if len(l.Log) > 16<<10 {
			t.Errorf("a log line of %d bytes, more than 16 KiB", len(l.Log))
		}
	}
	if len(pieces) < 7 {
		t.Errorf("%d log lines, want the 40000-byte line in 3 pieces at least: %q", len(pieces), pieces)
	}
}

// testMonitor returns the monitor this binary uses (as TestMonitorProcess)
// and a state root for it.
func testMonitor(t *testing.T) (bin, root string) {
	root = filepath.Join(searchableTempDir(t), "root")
	b, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bins, err := b.binaries()
	if err != nil {
		t.Fatal(err)
	}
	return bins.monitor, root
}

// TestMonitorFDs: the monitor holds the fds it is given (the command's
// stdin with pipes+stdin) while the command runs, and closes at once any
// other it inherits: one that slopbox's own caller left without
// FD_CLOEXEC (a shell's, make's jobserver pipe) would otherwise stay open
// as long as the command runs, and whoever waits for its end would wait
// for the command.
func TestMonitorFDs(t *testing.T) {
	bin, root := testMonitor(t)
	heldR, heldW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer heldR.Close()
	leakR, leakW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer leakR.Close()
	r := startMonitor(t, bin, root, "", "pipes+stdin", heldW, leakW)
	heldW.Close()
	leakW.Close()
	r.waitReady()
	buf := make([]byte, 1)
	leakR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := leakR.Read(buf); err != io.EOF {
		t.Errorf("an inherited fd the monitor was not given: read %v, want EOF (closed by the monitor)", err)
	}
	heldR.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := heldR.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the stdin it holds: read %v, want it held open", err)
	}
	r.exit(0)
	heldR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := heldR.Read(buf); err != io.EOF {
		t.Errorf("the stdin it held, once it has ended: read %v, want EOF", err)
	}
}

// TestMonitorPlantedFiles: what root of the store's user namespace (which
// may write the state directory) left there under the names the monitor
// writes is not written through: a hard link to another file is replaced,
// not truncated or appended to, and a fifo does not block the monitor.
func TestMonitorPlantedFiles(t *testing.T) {
	bin, root := testMonitor(t)
	dir := filepath.Join(root, "c", monitorTestID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(victim, filepath.Join(dir, monitorReady)); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, logFile), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startMonitor(t, bin, root, "", "pipes")
	r.waitReady()
	r.out.WriteString("hello\n")
	r.exit(0)
	if pieces := logPieces(t, dir, maxLog); len(pieces) != 1 || pieces[0].Log != "hello\n" {
		t.Errorf("the log: %+v, want hello", pieces)
	}

	// A rotation: the one before, a hard link, is replaced, not emptied.
	small, _ := buildMonitor(t, t.TempDir(), "monitor-small", fmt.Sprintf("-DMAX_LOG=%d", smallLog))
	if small == "" {
		t.Log("no C compiler: the rotation is not tried")
	} else {
		root = filepath.Join(t.TempDir(), "root")
		dir = filepath.Join(root, "c", monitorTestID)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(victim, filepath.Join(dir, logFile+".1")); err != nil {
			t.Fatal(err)
		}
		r := startMonitor(t, small, root, "/bin/true", "pipes")
		line := strings.Repeat("x", 99) + "\n"
		for range 2 * smallLog / len(line) {
			r.out.WriteString(line)
		}
		r.exit(0)
		logPieces(t, dir, smallLog)
		if fi, err := os.Stat(filepath.Join(dir, logFile+".1")); err != nil || os.SameFile(fi, mustStat(t, victim)) {
			t.Errorf("the log was not rotated (%v)", err)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("the file linked into the state directory holds %q (%v), want it untouched", b, err)
	}
}

func mustStat(t *testing.T, path string) os.FileInfo {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// TestMonitorLogWriteFails: a write of the log that fails part-way (here
// over RLIMIT_FSIZE, as on a full disk) neither ends the monitor (SIGXFSZ)
// nor spoils the lines after it: the partial line is ended, and readers
// skip it.
func TestMonitorLogWriteFails(t *testing.T) {
	bin, root := testMonitor(t)
	r := startMonitor(t, bin, root, "", "pipes")
	r.waitReady()
	pid := r.cmd.Process.Pid
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 4096, Max: unix.RLIM_INFINITY}, nil); err != nil {
		t.Fatal(err)
	}
	r.out.WriteString(strings.Repeat("x", 10000) + "\n")
	path := filepath.Join(r.dir, logFile)
	fixtures.Eventually(t, "the log at the file size limit", func() (bool, string) {
		fi, err := os.Stat(path)
		if err != nil {
			return false, err.Error()
		}
		return fi.Size() == 4096, fmt.Sprintf("size %d", fi.Size()) // its stderr is read once it has exited
	})
	// Its write has failed once it waits in poll again (state S): the
	// limit is lifted only then, however long load keeps it from its
	// retry.
	fixtures.Eventually(t, "the monitor back in its poll", func() (bool, string) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false, err.Error()
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		return len(f) > 0 && f[0] == "S", "stat: " + string(b)
	})
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}, nil); err != nil {
		t.Fatal(err)
	}
	r.out.WriteString("after\n")
	r.exit(0)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) != 3 || lines[2] != "" || len(lines[0]) != 4097 {
		t.Fatalf("the log: %d lines, the first of %d bytes, want the cut one ended, then one: %q", len(lines)-1, len(lines[0]), b[max(0, len(b)-200):])
	}
	var l logLine
	if err := json.Unmarshal([]byte(lines[1]), &l); err != nil || l.Log != "after\n" {
		t.Errorf("the line after the failed one: %q (%v)", lines[1], err)
	}
}

// TestMonitorEnds: a reply from PID 1 that stops half-way does not stop
// the monitor (it counts as PID 1 lost), and output held back for the
// rest of a character is logged when the drain ends with the pipes still
// open (a background process holds them).
func TestMonitorEnds(t *testing.T) {
	bin, root := testMonitor(t)
	r := startMonitor(t, bin, root, "", "pipes")
	r.waitReady()
	r.out.WriteString("held \xe2\x82")
	reply := make([]byte, 8)
	binary.NativeEndian.PutUint32(reply, replyExited)
	if _, err := r.agent.Write(reply[:4]); err != nil {
		t.Fatal(err)
	}
	r.wait()
	var got strings.Builder
	for _, l := range logPieces(t, r.dir, maxLog) {
		got.WriteString(l.Log)
	}
	if got.String() != "held \ufffd\ufffd" {
		t.Errorf("the log holds %q, want the output cut short by the drain's end", got.String())
	}
	if e, ok := readExit(r.dir); !ok || e.ExitCode != backend.ExitSignalBase+int(syscall.SIGKILL) {
		t.Errorf("exit record %+v %v, want PID 1 lost (SIGKILL)", e, ok)
	}
}

// TestMonitorRecordsTheExit: the monitor itself records how the command
// ended, before it runs the slopbox program (a docker stop waiting for the
// record does not wait for a Go runtime to start), over whatever had the
// name (a planted symlink is replaced, not followed); when PID 1 went away
// first (stop, kill, rm) it runs no program at all. Here the program is
// /bin/false: had it run, the monitor would end with status 1.
func TestMonitorRecordsTheExit(t *testing.T) {
	bin, root := testMonitor(t)
	for _, tc := range []struct {
		name    string
		reply   []byte // PID 1's report; short: PID 1 lost
		code    int
		program bool
	}{
		{"exited", binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, replyExited), 7<<8), 7, true},
		{"lost", binary.NativeEndian.AppendUint32(nil, replyExited), backend.ExitSignalBase + int(syscall.SIGKILL), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startMonitor(t, bin, filepath.Join(root, tc.name), "/bin/false", "pipes")
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte("untouched"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, filepath.Join(r.dir, exitFile)); err != nil {
				t.Fatal(err)
			}
			r.waitReady()
			r.out.Close()
			r.err.Close()
			if _, err := r.agent.Write(tc.reply); err != nil {
				t.Fatal(err)
			}
			if len(tc.reply) < 8 {
				r.agent.Close()
			}
			select {
			case <-r.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the monitor did not end; its stderr:\n%s", r.stderr.String())
			}
			var ee *exec.ExitError
			switch ran := errors.As(r.waitErr, &ee) && ee.ExitCode() == 1; {
			case ran != tc.program:
				t.Errorf("the monitor ended with %v (the program run: %v, want %v); its stderr:\n%s", r.waitErr, ran, tc.program, r.stderr.String())
			case !ran && r.waitErr != nil:
				t.Errorf("the monitor: %v; its stderr:\n%s", r.waitErr, r.stderr.String())
			}
			if fi, err := os.Lstat(filepath.Join(r.dir, exitFile)); err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("%s is %v (%v), want the monitor's own file", exitFile, fi, err)
			}
			if e, ok := readExit(r.dir); !ok || e.ExitCode != tc.code || time.Since(e.FinishedAt) > time.Minute || e.FinishedAt.Location() != time.UTC {
				t.Errorf("exit record %+v %v, want exit %d just now, in UTC", e, ok, tc.code)
			}
			if b, _ := os.ReadFile(victim); string(b) != "untouched" {
				t.Errorf("the file a planted %s pointed to holds %q", exitFile, b)
			}
			if ents, _ := os.ReadDir(r.dir); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".tmp-") }) {
				t.Errorf("a temporary file is left in the state directory: %v", ents)
			}
		})
	}
}

// TestMonitorProgramChecked: the monitor program run is the one checked
// (openMonitor): as root it runs as host root, from a store whose root
// directory belongs to root of its user namespace, which could put
// another directory in place of bin/. A program of another user's, one
// others may write, a symlink, or (with the embedded build) other bytes
// are refused.
func TestMonitorProgramChecked(t *testing.T) {
	root := filepath.Join(searchableTempDir(t), "root")
	b, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bins, err := b.binaries()
	if err != nil {
		t.Fatal(err)
	}
	f, err := b.openMonitor(bins.monitor)
	if err != nil {
		t.Fatalf("the installed monitor: %v", err)
	}
	if fi, err := os.Stat(monitorExec(f)); err != nil || !os.SameFile(fi, mustStat(t, bins.monitor)) {
		t.Errorf("%s is not the monitor (%v)", monitorExec(f), err)
	}
	f.Close()
	content, err := os.ReadFile(bins.monitor)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := map[string]func(string) error{
		"writable by others": func(p string) error {
			if err := os.WriteFile(p, content, 0o755); err != nil {
				return err
			}
			return os.Chmod(p, 0o777)
		},
		"a symlink": func(p string) error { return os.Symlink(bins.monitor, p) },
	}
	if os.Geteuid() == 0 {
		bad["another user's"] = func(p string) error {
			if err := os.WriteFile(p, content, 0o755); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		}
	}
	if len(monitorBinary) > 0 {
		bad["another program"] = func(p string) error { return os.WriteFile(p, []byte("#!/bin/sh\nid\n"), 0o755) }
	}
	for name, plant := range bad {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := plant(p); err != nil {
			t.Fatal(err)
		}
		if f, err := b.openMonitor(p); err == nil {
			f.Close()
			t.Errorf("a monitor %s was accepted", name)
		}
	}
}

// TestLogReadersPlantedFiles: the log's readers (logs, attach), which may
// run as host root, neither create nor read a file through a symlink in
// the state directory, nor wait on a fifo there.
func TestLogReadersPlantedFiles(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "created")
	s := &Sandbox{dir: dir}
	path := filepath.Join(dir, logFile)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if o, err := s.FollowOutput(); err == nil {
		o.Close()
		t.Error("FollowOutput opened the log through a symlink")
	}
	if _, err := os.Lstat(target); err == nil {
		t.Error("FollowOutput created the symlink's target")
	}
	if f, err := openLog(path); err == nil {
		f.Close()
		t.Error("openLog read the log through a symlink")
	}
	os.Remove(path)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		o, err := s.FollowOutput()
		if err == nil {
			o.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("FollowOutput took a fifo for the log")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("FollowOutput waits on a fifo")
	}
}

// TestLogTailCountsLines: logs --tail N counts lines, as Docker's
// json-file log has them, not the monitor's records: a line a read cut
// short is logged as several records of its stream, maybe with the other
// stream's between them, and a stream's output since its last newline is
// no line yet (shown to a follower and once the command has ended, never
// counted); 16 KiB without a newline make a line, as in Docker's log. CI
// under load caught --tail 3 ending in half a line.
func TestLogTailCountsLines(t *testing.T) {
	type rec struct{ stream, log string }
	tail := func(recs []rec, n int, partial bool) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "container.log")
		var b bytes.Buffer
		for _, r := range recs {
			json.NewEncoder(&b).Encode(logLine{Log: r.log, Stream: r.stream, Time: time.Now()})
		}
		if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		lt := &logTail{path: path}
		lt.f, _ = openLog(path)
		defer lt.close()
		var out strings.Builder
		err := lt.last(n, partial, func(l logLine) error {
			out.WriteString(l.Stream[3:] + ":" + l.Log + "|")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	out := func(l string) rec { return rec{"stdout", l} }
	errs := func(l string) rec { return rec{"stderr", l} }
	cut := []rec{out("one\n"), out("tw"), out("o\n"), out("thr"), out("e"), out("e\n"), out("fo"), out("ur\n"), out("fi")}
	mixed := []rec{out("zero\n"), out("ab"), errs("x\n"), out("c\n"), out("d")}
	var many []rec // a line of 20,000 fragments, then another begun
	for range 20000 {
		many = append(many, out("."))
	}
	many = append(many, out("\n"), out("e"))
	wide := []rec{out("x\n")}
	for range 3 {
		wide = append(wide, out(strings.Repeat("あ", 5461)))
	}
	wide = append(wide, out("\n"))
	for _, c := range []struct {
		name    string
		recs    []rec
		n       int
		partial bool
		want    string
	}{
		{"running", cut, 3, false, "out:tw|out:o\n|out:thr|out:e|out:e\n|out:fo|out:ur\n|"},
		{"ended or followed", cut, 3, true, "out:tw|out:o\n|out:thr|out:e|out:e\n|out:fo|out:ur\n|out:fi|"},
		{"one", cut, 1, false, "out:fo|out:ur\n|"},
		{"more than there are", cut, 9, false, "out:one\n|out:tw|out:o\n|out:thr|out:e|out:e\n|out:fo|out:ur\n|"},
		{"none", cut, 0, false, ""},
		{"none, followed", cut, 0, true, "out:fi|"},
		{"streams between", mixed, 1, false, "out:ab|out:c\n|"},
		{"streams between, two", mixed, 2, false, "err:x\n|out:ab|out:c\n|"},
		{"streams between, open", mixed, 0, true, "out:d|"},
		// 16 KiB less 3 (the monitor keeps a cut character for the next
		// record) make the first line; the rest and the newline the second.
		{"16 KiB make a line", many, 1, false, strings.Repeat("out:.|", 20000-(16384-3)) + "out:\n|"},
		// The monitor's full records of 3-byte characters are 16,383
		// bytes: each is a line.
		{"16 KiB of 3-byte characters", wide, 2, false, "out:" + strings.Repeat("あ", 5461) + "|out:\n|"},
	} {
		if got := tail(c.recs, c.n, c.partial); got != c.want {
			short := func(s string) string {
				if len(s) > 200 {
					return fmt.Sprintf("%s…%s (%d bytes)", s[:100], s[len(s)-100:], len(s))
				}
				return s
			}
			t.Errorf("%s: --tail %d: %q, want %q", c.name, c.n, short(got), short(c.want))
		}
	}
}

// TestMonitorReapedWhenDone: the process that started a detached command
// (serve, for every container) reaps its monitor once the command has
// ended and the monitor has recorded it: through the monitor's pidfd, with
// no thread blocked in a wait per monitor, and no zombie left.
func TestMonitorReapedWhenDone(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	if err := sb.RunDetached(context.Background(), backend.ExecRequest{Argv: []string{"true"}}, DetachOptions{}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(sb.dir, monitorFile))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(raw), &pid, &start); err != nil {
		t.Fatalf("monitor record %q: %v", raw, err)
	}
	fixtures.Eventually(t, "the monitor reaped once the command ended", func() (bool, string) {
		st, zombie, ok := procStart(pid)
		return !ok || st != start, fmt.Sprintf("monitor %d still there (zombie %v)", pid, zombie)
	})
	if _, ok := readExit(sb.dir); !ok {
		t.Error("no exit record")
	}
}

// TestReplayThenFollow: an attach with logs=1 replays the rotated log and
// the current one up to where following begins, then follows from there:
// each record once, in order, the streams apart. A record half written
// when following begins is the follower's, whole; a rotation after
// FollowOutput does not replay the followed file twice.
func TestReplayThenFollow(t *testing.T) {
	rec := func(stream, s string) string {
		b, _ := json.Marshal(logLine{Log: s, Stream: stream, Time: time.Now()})
		return string(b) + "\n"
	}
	appendTo := func(path, s string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, rotateAfter := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, logFile)
		if err := os.WriteFile(path+".1", []byte(rec("stdout", "a\n")+rec("stderr", "b\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		half := rec("stdout", "e\n")
		if err := os.WriteFile(path, []byte(rec("stdout", "c\n")+half[:10]), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Sandbox{dir: dir}
		o, err := s.FollowOutput()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(o.Close)
		// The rest of the record being written, and one written after
		// following began: the follower's, not Replay's.
		appendTo(path, half[10:]+rec("stdout", "d\n"))
		if rotateAfter {
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var stdout, stderr strings.Builder
		if err := o.Replay(&stdout, &stderr); err != nil {
			t.Fatal(err)
		}
		wantOut, wantErr := "a\nc\n", "b\n"
		if rotateAfter {
			wantOut, wantErr = "c\n", "" // the rotation dropped a and b, as it would for any reader then
		}
		if stdout.String() != wantOut || stderr.String() != wantErr {
			t.Errorf("rotated after following began %v: replayed stdout %q stderr %q, want %q %q", rotateAfter, stdout.String(), stderr.String(), wantOut, wantErr)
		}
		var followed, followedErr strings.Builder
		if err := o.tail.poll(streamWriter(&followed, &followedErr)); err != nil {
			t.Fatal(err)
		}
		if followed.String() != "e\nd\n" || followedErr.String() != "" {
			t.Errorf("rotated after following began %v: followed %q %q, want \"e\\nd\\n\"", rotateAfter, followed.String(), followedErr.String())
		}
	}
}

// TestSyncLogHasWhatWasWritten: once syncLog returns, the log holds all
// that the command had written before it was called, a partial line too,
// although the monitor reads the pipes a moment after the command writes:
// 2000 rounds of a write then a read of the log at once, none missing a
// byte.
func TestSyncLogHasWhatWasWritten(t *testing.T) {
	bin, root := testMonitor(t)
	r := startMonitor(t, bin, root, "", "pipes")
	r.waitReady()
	pid := r.cmd.Process.Pid
	start, _, ok := procStart(pid)
	if !ok {
		t.Fatal("no start time for the monitor")
	}
	if err := writePidFile(filepath.Join(r.dir, monitorFile), pid, start); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(r.dir, logFile), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	missing := 0
	for i := range 2000 {
		want := map[string]string{"stdout": fmt.Sprintf("out %d\n", i), "stderr": fmt.Sprintf("err %d\n", i)}
		if i%3 == 0 {
			want["stdout"] = fmt.Sprintf("partial %d", i) // no newline: the monitor logs what it has
		}
		r.out.WriteString(want["stdout"])
		r.err.WriteString(want["stderr"])
		if !syncLog(r.dir) {
			t.Fatalf("round %d: the monitor did not answer syncLog", i)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, fi.Size()-off)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		off = fi.Size()
		got := map[string]string{}
		for line := range bytes.Lines(b) {
			var l logLine
			if err := json.Unmarshal(line, &l); err != nil {
				t.Fatalf("round %d: log record %q: %v", i, line, err)
			}
			got[l.Stream] += l.Log
		}
		if got["stdout"] != want["stdout"] || got["stderr"] != want["stderr"] {
			if missing++; missing <= 5 {
				t.Errorf("round %d: the log after syncLog has %q, want %q", i, got, want)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of 2000 rounds found the log without what was written before syncLog", missing)
	}
	// A socket put in its place, by whoever may write the state directory,
	// is not waited for: its peer is not the monitor.
	sock := filepath.Join(r.dir, monitorSocket)
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	impostor, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer impostor.Close()
	go func() {
		for {
			c, err := impostor.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open: an answer never comes
		}
	}()
	if syncLog(r.dir) {
		t.Error("syncLog took a socket that is not the monitor's for its answer")
	}
	r.exit(0)
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s once the monitor has ended: %v, want it removed", monitorSocket, err)
	}
}

// TestStartThenLogs: what the main command has written is in its log
// when read at once, through Logs and through FollowOutput's Replay
// (docker logs, attach with logs=1), from the command's first line right
// after Start: 10 sandboxes started, 200 rounds each. In each round the
// command writes a line to stdout and one to stderr, then says so
// through a fifo in the workspace, and the log is read as soon as it has.
func TestStartThenLogs(t *testing.T) {
	b, ref := testBackend(t)
	ws := workspaceDir(t)
	// The handshake is by files, not FIFOs: the test makes go.N, the
	// command writes its lines and then ack.N (renamed into place, so it
	// is whole when seen), and the test reads the log at once. (A FIFO
	// handshake hung twice in hundreds of runs, the command and the test
	// each waiting on an open.)
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	script := `i=0; while :; do while [ ! -e /workspace/go.$i ]; do sleep 0.005; done; echo "out $i"; echo "err $i" >&2; echo $i > /workspace/.ack; mv /workspace/.ack /workspace/ack.$i; i=$((i+1)); done`
	const starts, rounds = 10, 200
	missing := 0
	for n := range starts {
		for _, pat := range []string{"go.*", "ack.*"} {
			old, _ := filepath.Glob(filepath.Join(ws, pat))
			for _, f := range old {
				os.Remove(f)
			}
		}
		sb, err := b.Create(context.Background(), backend.SpawnSpec{Image: ref, DisableSetup: true, Workspace: ws}, []string{"sh", "-c", script})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Cleanup() })
		if err := sb.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := range rounds {
			if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("go.%d", i)), nil, 0o666); err != nil {
				t.Fatal(err)
			}
			var ack []byte
			var err error
			for deadline := time.Now().Add(fixtures.Patience()); ; time.Sleep(time.Millisecond) {
				if ack, err = os.ReadFile(filepath.Join(ws, fmt.Sprintf("ack.%d", i))); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				log, _ := os.ReadFile(filepath.Join(sb.dir, logFile))
				info := sb.Info()
				t.Fatalf("start %d round %d: the command did not answer (running %v, pid %d, exit %d); its log:\n%s", n, i, info.Running, info.Pid, info.ExitCode, log)
			}
			if strings.TrimSpace(string(ack)) != strconv.Itoa(i) {
				t.Fatalf("start %d round %d: the command acknowledged %q", n, i, ack)
			}
			var stdout, stderr strings.Builder
			if i%2 == 0 {
				err = sb.Logs(context.Background(), LogOptions{Tail: 2}, &stdout, &stderr)
			} else {
				var o *OutputFollower
				if o, err = sb.FollowOutput(); err == nil {
					err = o.Replay(&stdout, &stderr)
					o.Close()
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			wantOut, wantErr := fmt.Sprintf("out %d\n", i), fmt.Sprintf("err %d\n", i)
			if !strings.HasSuffix(stdout.String(), wantOut) || !strings.HasSuffix(stderr.String(), wantErr) {
				if missing++; missing <= 5 {
					t.Errorf("start %d round %d: the log read at once ends with %q and %q, want %q and %q", n, i, lastLine(stdout.String()), lastLine(stderr.String()), wantOut, wantErr)
				}
			}
		}
		if err := sb.Cleanup(); err != nil {
			t.Fatal(err)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d rounds read the log without what the command had written", missing, starts*rounds)
	}
}

func lastLine(s string) string {
	s = strings.TrimSuffix(s, "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}
