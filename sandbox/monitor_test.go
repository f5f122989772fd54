package sandbox

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
