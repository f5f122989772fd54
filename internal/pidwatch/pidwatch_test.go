package pidwatch

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWatch: the function runs once the process exits, and can reap the
// child through the pidfd it is given; a cancelled watch never runs it.
func TestWatch(t *testing.T) {
	var w Watcher
	start := func() *exec.Cmd {
		t.Helper()
		cmd := exec.Command("sleep", "1000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd
	}
	a, b := start(), start()
	reaped := make(chan bool, 1)
	if _, ok := w.Watch(a.Process.Pid, func(fd int) { reaped <- Reap(fd) }); !ok {
		t.Fatal("no watch of a running child")
	}
	cancelled := make(chan struct{}, 1)
	cancel, ok := w.Watch(b.Process.Pid, func(int) { cancelled <- struct{}{} })
	if !ok {
		t.Fatal("no watch of a running child")
	}
	cancel()
	a.Process.Signal(unix.SIGKILL)
	b.Process.Signal(unix.SIGKILL)
	select {
	case ok := <-reaped:
		if !ok {
			t.Error("Reap through the pidfd did not wait for the exited child")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no call 30 s after the child was killed")
	}
	// Reaped by the call: the pid is not a zombie left for Wait.
	if err := a.Wait(); err == nil {
		t.Error("the killed child was waited for twice")
	}
	b.Wait()
	select {
	case <-cancelled:
		t.Error("a cancelled watch called its function")
	case <-time.After(200 * time.Millisecond):
	}
	if _, ok := w.Watch(b.Process.Pid, func(int) {}); ok {
		t.Error("a watch of a process already gone")
	}
}
