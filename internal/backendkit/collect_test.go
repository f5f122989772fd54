package backendkit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
)

// TestDrainPastDeadlineKeepsHeldOutput: output already in the pipe when
// the drain's deadline has passed (a pump or the runtime's poller held off
// the CPU for DrainIdle after the command exited) is still collected: a
// read past its deadline fails without reading, which lost the output of
// a finished command under load.
func TestDrainPastDeadlineKeepsHeldOutput(t *testing.T) {
	r, w, err := Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // a background child holding the pipe: no EOF
	if _, err := w.WriteString("3\n"); err != nil {
		t.Fatal(err)
	}
	r.SetReadDeadline(time.Now().Add(-time.Second))
	p := &Proc{}
	p.draining.Store(true)
	c := NewCapture(1<<20, false)
	var wg sync.WaitGroup
	wg.Add(1)
	p.pump(&wg, r, c, backend.EventStdout, nil)
	if got := c.Result(true).Output; got != "3\n" {
		t.Errorf("collected %q, want the %q the pipe held", got, "3\n")
	}
}

// TestCollectAfterExit: a command that exited before collection began
// (its output in the pipe, a background child keeping the pipe open) has
// its output collected, and collection ends within the drain's bounds.
func TestCollectAfterExit(t *testing.T) {
	r, w, err := Pipe()
	if err != nil {
		t.Fatal(err)
	}
	er, ew, err := Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	defer ew.Close()
	w.WriteString("out\n")
	exited := make(chan struct{})
	close(exited)
	start := time.Now()
	res := Collect(context.Background(), &Proc{Stdout: r, Stderr: er, Limit: 1 << 20, Started: start,
		Exited: exited, KillReq: make(chan struct{}), KillTree: func() {}, ExitCode: func() int { return 0 }}, true, nil)
	if res.Stdout != "out\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	if d := time.Since(start); d > DrainMax+time.Second {
		t.Errorf("collection took %v", d)
	}
}
