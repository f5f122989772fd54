package backendkit

import (
	"context"
	"errors"
	"github.com/slopbox/slopbox/backend"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// DrainIdle is how long the pipes may stay silent after the main
	// process exited before collection stops (a background child may hold
	// them open forever).
	DrainIdle = 100 * time.Millisecond
	// DrainMax bounds the whole drain after the main process exited.
	DrainMax = 2 * time.Second
	// ReapMax bounds the wait for the main process after SIGKILL.
	ReapMax  = 10 * time.Second
	readSize = 256 << 10
	// pipeSize is what Pipe asks the kernel for: fewer wake-ups for
	// commands that write in small pieces.
	pipeSize = 1 << 20
)

// Proc is a started command as Collect sees it. Both backends fill one in;
// Collect owns the pipes from then on.
type Proc struct {
	Stdout, Stderr *os.File // read ends
	StdinW         *os.File // write end; nil without stdin
	Stdin          [][]byte
	Setup          bool // split output at the entry script's marker
	Limit          int64
	Timeout        time.Duration
	Started        time.Time
	// Exited is closed once the main process is gone and ExitCode is valid.
	Exited <-chan struct{}
	// KillReq is closed by Kill (from any goroutine).
	KillReq <-chan struct{}
	// KillTree sends SIGKILL to every process of the command.
	KillTree func()
	// ExitCode returns the shell-style exit code after Exited.
	ExitCode   func() int
	Unenforced []string

	draining  atomic.Bool
	drainOver atomic.Bool
}

// Collect pumps output until the command is over (exit, timeout, kill or
// ctx) and returns its result. emit, when set, receives chunks to stream;
// buffered selects the last-marker split (Exec) over the first (Stream).
// Waiting is always bounded: after the main process is gone the pipes are
// drained for at most DrainMax.
func Collect(ctx context.Context, p *Proc, buffered bool, emit func(backend.EventKind, string)) *backend.Result {
	outCap := NewCapture(p.Limit, p.Setup)
	errCap := NewCapture(p.Limit, p.Setup)
	outCap.Quiet, errCap.Quiet = emit == nil, emit == nil
	var pumps sync.WaitGroup
	pumps.Add(2)
	go p.pump(&pumps, p.Stdout, outCap, backend.EventStdout, emit)
	go p.pump(&pumps, p.Stderr, errCap, backend.EventStderr, emit)
	if p.StdinW != nil {
		go writeStdin(p.StdinW, p.Stdin)
	}

	var timeout <-chan time.Time
	if p.Timeout > 0 {
		t := time.NewTimer(p.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	timedOut, reaped := false, true
	select {
	case <-p.Exited:
	case <-timeout:
		timedOut = true
	case <-p.KillReq:
	case <-ctx.Done():
	}
	select {
	case <-p.Exited:
	default:
		p.KillTree()
		select {
		case <-p.Exited:
		case <-time.After(ReapMax):
			reaped = false
		}
	}
	elapsed := time.Since(p.Started)
	if p.StdinW != nil {
		p.StdinW.Close() // unblocks a writer stuck on a full pipe
	}

	// Drain what is left: stop after DrainIdle without data, or DrainMax.
	p.draining.Store(true)
	idle := time.Now().Add(DrainIdle)
	p.Stdout.SetReadDeadline(idle)
	p.Stderr.SetReadDeadline(idle)
	pumped := make(chan struct{})
	go func() { pumps.Wait(); close(pumped) }()
	select {
	case <-pumped:
	case <-time.After(DrainMax):
		p.drainOver.Store(true)
		p.Stdout.SetReadDeadline(time.Unix(1, 0))
		p.Stderr.SetReadDeadline(time.Unix(1, 0))
		<-pumped
	}
	p.Stdout.Close()
	p.Stderr.Close()

	if emit != nil {
		if s := outCap.Flush(); s != "" {
			emit(backend.EventStdout, s)
		}
		if s := errCap.Flush(); s != "" {
			emit(backend.EventStderr, s)
		}
	}
	out, errs := outCap.Result(buffered), errCap.Result(buffered)
	code := -1
	if reaped {
		code = p.ExitCode()
	}
	return &backend.Result{
		ExitCode:    code,
		Stdout:      out.Output,
		Stderr:      errs.Output,
		SetupStdout: out.Setup,
		SetupStderr: errs.Setup,
		Elapsed:     elapsed,
		ElapsedSecs: elapsed.Seconds(),
		TimedOut:    timedOut,
		Truncated:   out.Truncated || errs.Truncated,
		StdoutBytes: out.Size,
		StderrBytes: errs.Size,
		Unenforced:  p.Unenforced,
	}
}

func (p *Proc) pump(wg *sync.WaitGroup, f *os.File, c *Capture, kind backend.EventKind, emit func(backend.EventKind, string)) {
	defer wg.Done()
	bp := readPool.Get().(*[]byte)
	defer readPool.Put(bp)
	buf := *bp
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if text := c.Write(buf[:n]); text != "" && emit != nil {
				emit(kind, text)
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				drainHeld(f, c, kind, emit, buf)
			}
			return
		}
		if p.draining.Load() && !p.drainOver.Load() {
			f.SetReadDeadline(time.Now().Add(DrainIdle))
			if p.drainOver.Load() {
				// Collect ended the drain between the check and the
				// set, whose deadline would have undone its own.
				f.SetReadDeadline(time.Unix(1, 0))
			}
		}
	}
}

// drainHeld reads what pipe f holds now, without waiting, once the drain's
// deadline has passed. A read past its deadline fails without reading,
// and the runtime may learn that the pipe is readable only after the
// deadline's timer has fired: so under load (a goroutine or the poller
// held off the CPU for DrainIdle), output written before the command
// exited was lost, an exec of `echo 3; cat` ending with empty stdout. At
// most pipeSize bytes: what a pipe can hold, not a writer that keeps
// writing.
func drainHeld(f *os.File, c *Capture, kind backend.EventKind, emit func(backend.EventKind, string), buf []byte) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		for left := pipeSize; left > 0; {
			n, err := unix.Read(int(fd), buf[:min(len(buf), left)])
			if n <= 0 || err != nil {
				return // empty (EAGAIN: the fd is non-blocking), or at its end
			}
			left -= n
			if text := c.Write(buf[:n]); text != "" && emit != nil {
				emit(kind, text)
			}
		}
	})
}

// readPool keeps the pumps' read buffers warm across commands.
var readPool = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}

func writeStdin(w *os.File, chunks [][]byte) {
	defer w.Close()
	for _, c := range chunks {
		if len(c) == 0 {
			continue
		}
		if _, err := w.Write(c); err != nil {
			return // the command stopped reading; not an error of ours
		}
	}
}

// FailedResult is the result of a command that could not start (not found,
// not executable): the message goes to stderr, as a shell would print it.
func FailedResult(code int, msg string, unenforced []string) *backend.Result {
	return &backend.Result{ExitCode: code, Stderr: msg + "\n", StderrBytes: int64(len(msg) + 1), Unenforced: unenforced}
}

// Pipe returns a pipe whose buffer is enlarged (best effort) so a command
// writing a lot rarely waits for the reader.
func Pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, pipeSize)
	return r, w, nil
}

// StreamEvents runs collect in a goroutine and turns the chunks it emits and
// the result it returns into a Stream's events: chunks as they come, then
// exactly one backend.EventFinished, then the channel closes. A cancelled ctx stops
// delivery (collect sees the same ctx and kills the command).
func StreamEvents(ctx context.Context, collect func(emit func(backend.EventKind, string)) *backend.Result) <-chan backend.Event {
	ch := make(chan backend.Event, 16)
	send := func(ev backend.Event) {
		select {
		case ch <- ev:
		case <-ctx.Done():
		}
	}
	go func() {
		defer close(ch)
		res := collect(func(kind backend.EventKind, text string) { send(backend.Event{Kind: kind, Data: text}) })
		send(backend.Event{Kind: backend.EventFinished, Result: res})
	}()
	return ch
}
