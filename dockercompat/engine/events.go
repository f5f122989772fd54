package engine

import (
	"maps"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// exitWatch follows the main command of a container this server started,
// to report its die event however it ends (on its own, by kill, by stop,
// by rm -f, or with its AutoRemove removal), and the runs its restart
// policy starts after it: the container's monitor restarts it
// (dockercompat/service), and the watch reports each run's start and die.
type exitWatch struct {
	done chan struct{} // closed once the watch is over
	wake chan struct{} // a poll now rather than at the next tick
	// sync takes the replies of finish: closed once the watch has
	// reported the run it follows as ended (or is over).
	sync chan chan struct{}
	// removedByAPI: DELETE /containers/{id} removes it (and emits destroy).
	removedByAPI atomic.Bool
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
const exitGrace = service.ExitGrace

// watchExit starts the watch of sb, whose main command was started after
// base (its FinishedAt before the start).
func (s *Server) watchExit(sb *service.Container, base time.Time) {
	last := sb.Info() // as it was at its last poll: a removed one's name and image
	id := last.ID
	w := &exitWatch{done: make(chan struct{}), wake: make(chan struct{}, 1), sync: make(chan chan struct{})}
	s.mu.Lock()
	s.watches[id] = w
	s.mu.Unlock()
	go func() {
		var replies []chan struct{}
		defer func() {
			s.mu.Lock()
			if s.watches[id] == w {
				delete(s.watches, id)
			}
			s.mu.Unlock()
			close(w.done)
			for _, r := range replies {
				close(r)
			}
		}()
		for {
			code, gone := s.watchRun(w, &last, base)
			if gone {
				return
			}
			// Its run has ended: the die is out. A finish waiting for it
			// is answered.
			for _, r := range replies {
				close(r)
			}
			replies = nil
			next, ok := s.followRestart(w, &last, code, &replies)
			if !ok {
				return
			}
			base = next
		}
	}()
}

// watchRun follows the run of the container last that was started after
// base until its die is reported (the code it ended with), or the
// container is gone (true: its die and destroy are reported too).
func (s *Server) watchRun(w *exitWatch, last *service.Info, base time.Time) (int, bool) {
	id, autoRemove := last.ID, last.AutoRemove
	if service.HasHealthcheck(last.StateDir) {
		runDone := make(chan struct{}) // this run's: a restart's run has its own
		defer close(runDone)
		go s.reportHealth(*last, runDone)
	}
	died, code := false, 0
	die := func(c int) {
		s.emitContainer("die", *last, map[string]string{"exitCode": strconv.Itoa(c)})
		died, code = true, c
	}
	cancelWake, woken := s.wakeAtExit(w, *last)
	defer cancelWake()
	p := newRunPoller(woken)
	defer p.tick.Stop()
	var since time.Time // when the sandbox was first seen stopped, or died
	// Woken, it was just read running: the first poll waits.
	for skip := woken; ; w.next(p.tick, nil) {
		if skip {
			skip = false
			continue
		}
		p.polled()
		cur, err := s.b.Open(id)
		if err != nil {
			if !died {
				c := backend.ExitSignalBase + int(syscall.SIGKILL) // removed by force while it ran
				if rc, _, ok := s.b.RemovedExit(id); ok {
					c = rc
				}
				die(c)
			}
			if autoRemove && !w.removedByAPI.Load() {
				s.emitContainer("destroy", *last, nil)
			}
			return code, true
		}
		info := cur.Info()
		if info.Broken == "" {
			// A record read as it is being removed (rm -f) is broken:
			// what the events say of the container stays its last whole
			// reading (image, labels).
			*last = info
		}
		switch {
		case died:
			// An AutoRemove container goes once its command has ended;
			// its destroy is reported when it has.
			if time.Since(since) > time.Minute {
				return code, true
			}
		case info.FinishedAt.After(base):
			die(info.ExitCode)
			if !autoRemove {
				return code, false
			}
			since = time.Now()
			p.fast()
		case info.Running:
		case since.IsZero():
			since = time.Now()
			p.fast()
		case time.Since(since) > exitGrace:
			// Stopped with no exit recorded: the monitor records it
			// first, unless the sandbox was stopped under it (its main
			// command killed).
			die(backend.ExitSignalBase + int(syscall.SIGKILL))
			return code, false
		}
	}
}

// wakeAtExit has w woken when PID 1 of the run last is gone, so that an
// exit is known at once rather than at the next poll, and idle containers
// cost little polling. woken is false when it cannot be: the pidfd is
// PID 1's only if the container still runs now (its recorded pid and
// start time), else the pid may have been reused and the polls alone tell.
func (s *Server) wakeAtExit(w *exitWatch, last service.Info) (cancel func(), woken bool) {
	cancel, woken = service.WatchExit(last.Pid, func(int) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	})
	if woken {
		if cur, err := s.b.Open(last.ID); err != nil || !cur.Running() {
			cancel()
			woken = false
		}
	}
	return cancel, woken
}

// runPoller paces a run's polls: fast at its start, then slower (doubled
// every so many polls up to a longest interval); woken at the exit, its
// polls are only a fallback and start slower.
type runPoller struct {
	tick           *time.Ticker
	every          int // polls per interval
	most, interval time.Duration
	polls          int
}

func newRunPoller(woken bool) *runPoller {
	p := &runPoller{tick: time.NewTicker(exitPoll), every: 20, most: exitPollMax, interval: exitPoll}
	if woken {
		p.every, p.most, p.interval = 5, exitPollWoken, exitPollWoken/12
		p.tick.Reset(p.interval)
	}
	return p
}

// polled counts a poll, and slows the polls down every so many.
func (p *runPoller) polled() {
	if p.polls++; p.polls%p.every == 0 && p.interval < p.most {
		p.interval = min(2*p.interval, p.most)
		p.tick.Reset(p.interval)
	}
}

// fast polls at the start's pace again: what follows an exit (a removal,
// or the exit record) comes soon.
func (p *runPoller) fast() {
	p.every, p.most, p.interval, p.polls = 20, exitPollMax, exitPoll, 0
	p.tick.Reset(p.interval)
}

// followRestart follows the container last, whose run ended with code,
// while its restart policy starts it again: it reports the next run's
// start and returns that run's base (true), or returns false once no
// restart comes (stopped by hand, the policy's end, removed). Finishes
// asked for meanwhile are answered at each poll (replies).
func (s *Server) followRestart(w *exitWatch, last *service.Info, code int, replies *[]chan struct{}) (time.Time, bool) {
	sb, err := s.b.Open(last.ID)
	if err != nil || !sb.WillRestart(code) {
		return time.Time{}, false
	}
	tick := time.NewTicker(exitPoll)
	defer tick.Stop()
	pid, base := last.Pid, sb.Info().FinishedAt
	for ; ; w.next(tick, replies) {
		cur, err := s.b.Open(last.ID)
		if err != nil {
			return time.Time{}, false
		}
		info := cur.Info()
		if info.Broken == "" {
			*last = info
		}
		switch {
		case info.Running && info.Pid != pid, info.FinishedAt.After(base):
			// Started again (and maybe ended already: its die follows).
			s.emitContainer("start", info, nil)
			return base, true
		case !info.Running && !cur.MonitorAlive():
			// Its monitor, which carries out the restart, is gone with
			// no new run: stopped by hand meanwhile, or the policy's
			// end. (Not Restarting: while the monitor starts the next
			// run, its exit record is gone before the run is seen.)
			return time.Time{}, false
		}
		for _, r := range *replies {
			close(r)
		}
		*replies = nil
	}
}

// reportHealth reports the health_status event of each change of the
// healthcheck of container i (its monitor's helper runs it) until done.
func (s *Server) reportHealth(i service.Info, done <-chan struct{}) {
	t := time.NewTicker(service.HealthFloor / 4)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		s.healthSeen(i, service.HealthStatus(i.StateDir))
	}
}

// healthSeen is a health status of container i read just now (by its
// watch, or an inspect): a change from the last reported is reported,
// once, before the reader goes on.
func (s *Server) healthSeen(i service.Info, status string) {
	if status == "" {
		return
	}
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if s.health == nil {
		s.health = map[string]string{}
	}
	prev := s.health[i.ID]
	s.health[i.ID] = status
	if prev != status && status != "starting" {
		s.emitContainer("health_status: "+status, i, nil)
	}
}

// next waits for the watch's next poll: the tick, a wake, or a finish
// (its reply kept in replies; without replies, a finish waits).
func (w *exitWatch) next(tick *time.Ticker, replies *[]chan struct{}) {
	var sync chan chan struct{}
	if replies != nil {
		sync = w.sync
	}
	select {
	case <-tick.C:
	case <-w.wake:
	case r := <-sync:
		*replies = append(*replies, r)
	}
}

// finish has w poll at once and waits, boundedly, until it has reported
// the end of the run it follows: for a container no longer running,
// before it is started again or removed, so that each run has exactly one
// die, with its own exit code (a watch polling slowly would otherwise
// miss the exit a start clears). A nil w has nothing to finish and
// reports false.
func (w *exitWatch) finish() bool {
	if w == nil {
		return false
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	reply := make(chan struct{})
	timeout := time.After(10 * time.Second)
	select {
	case w.sync <- reply:
	case <-w.done:
		return true
	case <-timeout:
		return true
	}
	select {
	case <-reply:
	case <-w.done:
	case <-timeout:
	}
	return true
}

// watchOf is the watch of container id, or nil.
func (s *Server) watchOf(id string) *exitWatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches[id]
}

// emitContainer reports a container event with the attributes Docker
// gives: the container's name (read now: a die after a rename has the new
// one), its image and its labels, and extra. A container removed already
// has them as last had.
func (s *Server) emitContainer(action string, last service.Info, extra map[string]string) {
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
