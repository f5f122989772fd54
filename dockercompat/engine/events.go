package engine

import (
	"maps"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/pidwatch"
	"github.com/slopbox/slopbox/sandbox"
)

// exitWatch follows the main command of a container this server started,
// to report its die event however it ends: on its own, by kill, by stop,
// by rm -f, or with its AutoRemove removal.
type exitWatch struct {
	done chan struct{} // closed once die is emitted
	wake chan struct{} // a poll now rather than at the next tick
	// removedByAPI: DELETE /containers/{id} removes it (and emits destroy).
	removedByAPI atomic.Bool
	// manual: stopped or killed through the API, which its restart
	// policy does not undo.
	manual atomic.Bool
	// restart, for a run its restart policy started, is that restart's
	// cancel channel: closed by a stop that came before this watch did.
	restart chan struct{}
}

// stoppedByAPI marks w's container stopped by hand; a nil w has none.
func (w *exitWatch) stoppedByAPI() {
	if w != nil {
		w.manual.Store(true)
	}
}

// A watch reads the sandbox's state, where the monitor records the exit,
// every exitPoll at first, then less often the longer the command runs (up
// to exitPollMax), so that a hundred idle containers cost the service
// little: a short command's die comes within exitPoll, a long one's within
// exitPollMax.
//
// A watch that also waits on PID 1's pidfd (pidwatch) is woken at the exit,
// whose recording stops PID 1, and at any stop or removal, which kill
// it; its polls are a fallback (a monitor killed between recording the
// exit and stopping the sandbox), every exitPollWoken/12 at first and
// slowing to exitPollWoken, so that a thousand idle containers cost the
// service about 17 state reads a second, not hundreds, and a thousand
// created back to back do not pay for each other's watches.
const (
	exitPoll      = 100 * time.Millisecond
	exitPollMax   = time.Second
	exitPollWoken = time.Minute
)

// exitGrace is the sandbox package's: the wait and the watch agree.
const exitGrace = sandbox.ExitGrace

// watchExit starts the watch of sb, whose main command was started after
// base (its FinishedAt before the start).
func (s *Server) watchExit(sb *sandbox.Sandbox, base time.Time) {
	s.watchRun(sb, base, nil)
}

// watchRun is watchExit of a run started by the restart whose cancel
// channel is restart (nil: started through the API).
func (s *Server) watchRun(sb *sandbox.Sandbox, base time.Time, restart chan struct{}) {
	last := sb.Info() // as it was at its last poll: a removed one's name and image
	id, autoRemove := last.ID, last.AutoRemove
	w := &exitWatch{done: make(chan struct{}), wake: make(chan struct{}, 1), restart: restart}
	s.mu.Lock()
	s.watches[id] = w
	s.mu.Unlock()
	health := s.startHealth(last)
	go func() {
		died := false
		die := func(code int) {
			s.emitContainer("die", last, map[string]string{"exitCode": strconv.Itoa(code)})
			died = true
			restart := s.planRestart(last, code, w) // restarting before anyone sees the die
			s.mu.Lock()
			if s.watches[id] == w {
				delete(s.watches, id)
			}
			s.mu.Unlock()
			close(w.done)
			if restart != nil {
				go s.restartAfter(id, last.StateDir, restart)
			}
		}
		if health != nil {
			go health(w.done)
		}
		tick := time.NewTicker(exitPoll)
		defer tick.Stop()
		// Woken when PID 1 is gone: an exit is known at once rather than
		// at the next poll, and idle containers cost little polling.
		cancelWake, woken := pidwatch.Watch(last.Pid, func(int) {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		})
		defer cancelWake()
		if woken {
			// The pidfd is PID 1's only if the sandbox still runs now
			// (its recorded pid and start time): else the pid may have
			// been reused, and the polls alone tell.
			if cur, err := s.b.Open(id); err != nil || !cur.Running() {
				cancelWake()
				woken = false
			}
		}
		every, most := 20, exitPollMax // polls per interval, the longest
		interval, polls := exitPoll, 0
		if woken {
			every, most, interval = 5, exitPollWoken, exitPollWoken/12
			tick.Reset(interval)
		}
		// fast polls at the start's pace again: what follows an exit (a
		// removal, or the exit record) comes soon.
		fast := func() {
			every, most, interval, polls = 20, exitPollMax, exitPoll, 0
			tick.Reset(interval)
		}
		var since time.Time // when the sandbox was first seen stopped, or died
		// Woken, it was just read running: the first poll waits.
		for skip := woken; ; w.next(tick) {
			if skip {
				skip = false
				continue
			}
			if polls++; polls%every == 0 && interval < most {
				interval = min(2*interval, most)
				tick.Reset(interval)
			}
			cur, err := s.b.Open(id)
			if err != nil {
				if !died {
					code := backend.ExitSignalBase + int(syscall.SIGKILL) // removed by force while it ran
					if c, _, ok := s.b.RemovedExit(id); ok {
						code = c
					}
					die(code)
				}
				if autoRemove && !w.removedByAPI.Load() {
					s.emitContainer("destroy", last, nil)
				}
				return
			}
			info := cur.Info()
			if info.Broken == "" {
				// A record read as it is being removed (rm -f) is broken:
				// what the events say of the container stays its last
				// whole reading (image, labels).
				last = info
			}
			switch {
			case died:
				// An AutoRemove container goes once its command has
				// ended; its destroy is reported when it has.
				if time.Since(since) > time.Minute {
					return
				}
			case info.FinishedAt.After(base):
				die(info.ExitCode)
				if !autoRemove {
					return
				}
				since = time.Now()
				fast()
			case info.Running:
			case since.IsZero():
				since = time.Now()
				fast()
			case time.Since(since) > exitGrace:
				// Stopped with no exit recorded: the monitor records it
				// first, unless the sandbox was stopped under it (its main
				// command killed).
				die(backend.ExitSignalBase + int(syscall.SIGKILL))
				return
			}
		}
	}()
}

// next waits for the watch's next poll: the tick, or a wake.
func (w *exitWatch) next(tick *time.Ticker) {
	select {
	case <-tick.C:
	case <-w.wake:
	}
}

// finish has w poll at once and waits, boundedly, for its die: for a
// container no longer running, before it is started again or removed, so
// that each run has exactly one die, with its own exit code (a watch
// polling slowly would otherwise miss the exit a start clears). A nil w
// has nothing to finish and reports false.
func (w *exitWatch) finish() bool {
	if w == nil {
		return false
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return w.await()
}

// watchOf is the watch of container id, or nil.
func (s *Server) watchOf(id string) *exitWatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches[id]
}

// await waits, boundedly, for w's die event; a nil w has none to wait for
// and reports false.
func (w *exitWatch) await() bool { return w.awaitFor(10 * time.Second) }

// awaitFor is await waiting at most d.
func (w *exitWatch) awaitFor(d time.Duration) bool {
	if w == nil {
		return false
	}
	select {
	case <-w.done:
	case <-time.After(d):
	}
	return true
}

// emitContainer reports a container event with the attributes Docker
// gives: the container's name (read now: a die after a rename has the new
// one), its image and its labels, and extra. A container removed already
// has them as last had.
func (s *Server) emitContainer(action string, last sandbox.Info, extra map[string]string) {
	if !s.events.listening() {
		return // no /events reader: nothing to read the container again for
	}
	i := last
	if cur, err := s.b.Open(last.ID); err == nil {
		// Read again: a rename since shows. Not a broken record (one
		// being removed), which has lost the image and labels.
		if ci := cur.Info(); ci.Broken == "" {
			i = ci
		}
	}
	attrs := maps.Clone(i.Labels)
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs["name"], attrs["image"] = i.Name, i.Image
	maps.Copy(attrs, extra)
	s.events.emit("container", action, last.ID, attrs)
}
