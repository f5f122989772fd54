package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
)

// Pause and Unpause (docker pause): every process of the sandbox but PID 1
// is stopped with SIGSTOP, which cannot be caught or ignored, round after
// round until none is left running (a process that forked meanwhile gets
// its child stopped in the next round). It needs no freezer cgroup, so it
// works rootless on cgroup v1 as on v2: the caller owns the sandbox's user
// namespace and so may signal every process in it. PID 1 (slopbox's own
// init) keeps running, so stop and rm work on a paused sandbox; exec is
// refused until Unpause.

// ErrPaused, ErrNotPaused: docker's 409s for pause and unpause.
var (
	ErrPaused    = errdefs.ErrFailedPrecondition.WithMessage("is paused")
	ErrNotPaused = errdefs.ErrFailedPrecondition.WithMessage("is not paused")
)

// Pause stops every process of the running sandbox but PID 1.
func (s *Sandbox) Pause() error {
	if !s.rec.running() {
		return fmt.Errorf("sandbox %s is not running", cmpName(s.rec))
	}
	if s.rec.Paused {
		return fmt.Errorf("sandbox %s %w", cmpName(s.rec), ErrPaused)
	}
	for round := 0; ; round++ {
		procs, err := s.Processes()
		if err != nil {
			return err
		}
		pending := 0
		for _, p := range procs {
			if p.PID == s.rec.Pid || stoppedProc(p.PID) {
				continue
			}
			switch err := syscall.Kill(p.PID, syscall.SIGSTOP); err {
			case nil:
				pending++
			case syscall.ESRCH:
			default:
				s.signalAll(syscall.SIGCONT)
				return fmt.Errorf("pause %s: stop process %d: %w; nothing was left paused", cmpName(s.rec), p.PID, err)
			}
		}
		if pending == 0 {
			break
		}
		if round == 200 {
			s.signalAll(syscall.SIGCONT)
			return fmt.Errorf("pause %s: its processes kept changing; nothing was left paused", cmpName(s.rec))
		}
		time.Sleep(time.Millisecond)
	}
	s.rec.Paused = true
	return s.b.state.write(s.rec)
}

// Unpause continues the processes Pause stopped.
func (s *Sandbox) Unpause() error {
	if !s.rec.running() || !s.rec.Paused {
		return fmt.Errorf("sandbox %s %w", cmpName(s.rec), ErrNotPaused)
	}
	s.signalAll(syscall.SIGCONT)
	s.rec.Paused = false
	return s.b.state.write(s.rec)
}

// Paused reports whether the sandbox is paused.
func (s *Sandbox) Paused() bool { return s.rec.Paused && s.rec.running() }

func (s *Sandbox) signalAll(sig syscall.Signal) {
	procs, _ := s.Processes()
	for _, p := range procs {
		if p.PID != s.rec.Pid {
			syscall.Kill(p.PID, sig)
		}
	}
}

// stoppedProc reports whether process pid is stopped (state T).
func stoppedProc(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't' || b[i+2] == 'Z' || b[i+2] == 'X')
}
