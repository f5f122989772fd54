package backendkit

import (
	"github.com/slopbox/slopbox/backend"
	"sync"
	"time"
)

// Command is a started command as a Slot sees it.
type Command interface {
	comparable
	// Kill asks for the command's whole process tree to be killed.
	Kill()
	// Done is closed once the command's main process is gone.
	Done() <-chan struct{}
}

// Slot is the bookkeeping every backend's Sandbox shares: the one command
// that may run at a time, the last exit code, and whether the sandbox has
// been cleaned up. Its methods are safe for concurrent use.
type Slot[C Command] struct {
	mu      sync.Mutex
	closed  bool
	running C
	last    *int
}

// Start runs start, unless the sandbox is closed (backend.ErrClosed) or a command
// runs (backend.ErrBusy), and records the command it returns as running.
func (s *Slot[C]) Start(start func() (C, error)) (C, error) {
	var zero C
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return zero, backend.ErrClosed
	}
	if s.running != zero {
		return zero, backend.ErrBusy
	}
	c, err := start()
	if err != nil {
		return zero, err
	}
	s.running = c
	return c, nil
}

// Finish records c's exit code and frees the slot. then, when set, runs
// under the slot's lock with whether the sandbox was closed meanwhile, so a
// backend can settle what the command left behind atomically with Close.
func (s *Slot[C]) Finish(c C, exitCode int, then func(closed bool)) {
	var zero C
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = &exitCode
	if s.running == c {
		s.running = zero
	}
	if then != nil {
		then(s.closed)
	}
}

// Poll reports whether a command runs, else the last exit code (nil before
// the first command).
func (s *Slot[C]) Poll() (bool, *int) {
	var zero C
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return s.running != zero, nil
	}
	code := *s.last
	return s.running != zero, &code
}

// Kill kills the running command, if any, and waits (at most ReapMax) until
// its main process is gone.
func (s *Slot[C]) Kill() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return backend.ErrClosed
	}
	c := s.running
	s.mu.Unlock()
	killAndWait(c)
	return nil
}

// Close marks the sandbox closed and kills the running command, waiting
// (bounded) for it. It returns false when the sandbox was already closed.
func (s *Slot[C]) Close() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	c := s.running
	s.mu.Unlock()
	killAndWait(c)
	return true
}

func killAndWait[C Command](c C) {
	var zero C
	if c == zero {
		return
	}
	c.Kill()
	select {
	case <-c.Done():
	case <-time.After(ReapMax):
	}
}
