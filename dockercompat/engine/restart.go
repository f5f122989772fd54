package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/sandbox"
)

// Restart policies are honoured while serve runs: when the main command
// of a container this server started exits, its watch (events.go) asks
// planRestart, and the container is started again after a delay that
// doubles with each restart (100 ms, as dockerd's, up to a minute). A
// container stopped or killed through the API is not restarted (dockerd's
// "manually stopped"); a stop, kill or removal cancels a pending restart.
// The slopbox CLI has no daemon: a container it runs is restarted by no
// one (see the README).

// extraRuntime is the server's state for restarts and healthchecks.
type extraRuntime struct {
	mu         sync.Mutex
	restarting map[string]*pendingRestart
}

// pendingRestart is a container's restart by its policy, from its main
// command's exit until restartAfter is done.
type pendingRestart struct {
	cancel  chan struct{} // closed to cancel it
	settled chan struct{} // closed when restartAfter returns: a run it started has its watch
	// Under extraRuntime.mu: restartAfter is starting the container (or
	// has); ran, the start succeeded.
	started, ran bool
}

// restartBegun reports whether p, a restart just cancelled (nil: none),
// had begun starting the container: then settleRestart waits for it.
func (s *Server) restartBegun(p *pendingRestart) bool {
	if p == nil {
		return false
	}
	s.extra.mu.Lock()
	defer s.extra.mu.Unlock()
	return p.started // final: p is cancelled, so restartAfter sets it no more
}

// settleRestart is for a stop, kill, removal or start through the API
// that has just cancelled p, container id's restart (nil: none). When that
// restart had begun starting the container, it waits until the restart is
// done, and reports whether it started a run: that run the restart stops
// itself on seeing the cancel, and its watch has the die, which this
// awaits. A restart still waiting out its delay, or whose start failed,
// started nothing: false, and the caller goes on as without one.
func (s *Server) settleRestart(id string, p *pendingRestart) bool {
	if !s.restartBegun(p) {
		return false
	}
	select {
	case <-p.settled:
	case <-time.After(settleWait):
	}
	s.extra.mu.Lock()
	ran := p.ran
	s.extra.mu.Unlock()
	if ran {
		s.watchOf(id).awaitFor(settleWait)
	}
	return ran
}

// settleWait bounds each wait of settleRestart: a restart's start (its
// PID 1 and monitor) and its stop on a loaded machine, within a client's
// patience (docker-py's default timeout is 60 s).
const settleWait = 25 * time.Second

// planRestart decides, as the main command of container i exits with
// code, whether its policy restarts it, and marks it restarting: the
// restart restartAfter is to carry out, or nil.
func (s *Server) planRestart(i sandbox.Info, code int, w *exitWatch) *pendingRestart {
	policy := dockercompat.LoadCreated(i.StateDir).RestartPolicy
	switch policy.Name {
	case "always", "unless-stopped":
	case "on-failure":
		if code == 0 || policy.MaximumRetryCount > 0 && dockercompat.RestartCount(i.StateDir) >= policy.MaximumRetryCount {
			return nil
		}
	default:
		return nil
	}
	s.extra.mu.Lock()
	defer s.extra.mu.Unlock()
	// Under the lock stopByHand takes: a stop either comes first and is
	// seen here, or comes after and cancels what this registers.
	if w.manual.Load() {
		return nil
	}
	if w.restart != nil {
		select {
		case <-w.restart:
			// Stopped while its restart was starting it, before this
			// watch was there to be marked: the stop is final too.
			return nil
		default:
		}
	}
	if s.extra.restarting == nil {
		s.extra.restarting = map[string]*pendingRestart{}
	}
	if p := s.extra.restarting[i.ID]; p != nil && !p.started {
		return nil // a restart waits already (the run was started by another process)
	}
	// A restart whose run exits before that restart is done is followed
	// by a restart of its own.
	p := &pendingRestart{cancel: make(chan struct{}), settled: make(chan struct{})}
	s.extra.restarting[i.ID] = p
	return p
}

// isRestarting reports whether container id waits for its restart.
func (s *Server) isRestarting(id string) bool {
	s.extra.mu.Lock()
	defer s.extra.mu.Unlock()
	_, ok := s.extra.restarting[id]
	return ok
}

// cancelRestart drops container id's pending restart, if any, and
// returns it.
func (s *Server) cancelRestart(id string) *pendingRestart {
	s.extra.mu.Lock()
	defer s.extra.mu.Unlock()
	return s.cancelRestartLocked(id)
}

// cancelRestartLocked is cancelRestart with s.extra.mu held.
func (s *Server) cancelRestartLocked(id string) *pendingRestart {
	p := s.extra.restarting[id]
	if p != nil {
		close(p.cancel)
		delete(s.extra.restarting, id)
	}
	return p
}

// stopByHand marks container id stopped or killed through the API: the
// exit of its current run is not answered by its restart policy, and a
// pending restart is cancelled (reported). The two happen under one lock
// with planRestart's check, so that a stop arriving as the main command
// exits, before its watch has seen that, is never undone by a restart.
func (s *Server) stopByHand(id string) *pendingRestart {
	w := s.watchOf(id)
	s.extra.mu.Lock()
	defer s.extra.mu.Unlock()
	w.stoppedByAPI()
	return s.cancelRestartLocked(id)
}

// restartAfter carries out p, container id's restart: it starts it again
// after its delay, unless p is cancelled meanwhile.
func (s *Server) restartAfter(id, dir string, p *pendingRestart) {
	defer close(p.settled)
	cancel := p.cancel
	n := dockercompat.RestartCount(dir)
	delay := min(100*time.Millisecond<<min(n, 10), time.Minute)
	select {
	case <-cancel:
		return
	case <-time.After(delay):
	}
	// The exit is recorded before the sandbox has stopped: wait for that.
	sb, err := s.b.Open(id)
	for deadline := time.Now().Add(10 * time.Second); err == nil && sb.Running(); sb, err = s.b.Open(id) {
		if time.Now().After(deadline) {
			err = fmt.Errorf("still running 10 s after its exit")
			break
		}
		select {
		case <-cancel:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		s.dropRestart(id, cancel)
		if s.Log != nil {
			s.Log("restart of %s per its policy: %v", id, err)
		}
		return
	}
	s.extra.mu.Lock()
	select {
	case <-cancel:
		s.extra.mu.Unlock()
		return
	default:
		p.started = true
	}
	s.extra.mu.Unlock()
	s.restartStage(id, "starting", cancel)
	base := sb.Info().FinishedAt
	dockercompat.SetRestartCount(dir, n+1)
	as := s.attachedStart(id)
	err = sb.StartAttached(context.Background(), as)
	if as.Stdin != nil {
		as.Stdin.Close()
	}
	if err != nil {
		s.dropRestart(id, cancel)
		if s.Log != nil {
			s.Log("restart of %s per its policy: %v", id, err)
		}
		return
	}
	s.extra.mu.Lock()
	p.ran = true
	s.extra.mu.Unlock()
	s.emitContainer("start", sb.Info(), nil)
	s.restartStage(id, "started", cancel)
	s.watchRun(sb, base, cancel)
	// Restarting until now: a stop, kill or removal meanwhile cancelled
	// it, and found nothing running to stop.
	select {
	case <-cancel:
		s.watchOf(id).stoppedByAPI()
		if cur, err := s.b.Open(id); err == nil && cur.Running() {
			cur.Stop()
		}
	default:
		s.dropRestart(id, cancel)
	}
}

// restartStage runs the test hook, if any, at a stage of a restart.
func (s *Server) restartStage(id, stage string, cancel <-chan struct{}) {
	if hook := s.testHookRestart.Load(); hook != nil {
		(*hook)(id, stage, cancel)
	}
}

// startedByAPI is a start by hand: as dockerd's, it drops a pending
// restart and counts restarts from 0 again. It reports whether that
// restart had begun starting the container: then it is over (its run, if
// it started one, stopped: settleRestart), and the caller reads the
// container again.
func (s *Server) startedByAPI(i sandbox.Info) bool {
	p := s.cancelRestart(i.ID)
	begun := s.restartBegun(p)
	s.settleRestart(i.ID, p)
	if dockercompat.RestartCount(i.StateDir) != 0 {
		dockercompat.SetRestartCount(i.StateDir, 0)
	}
	return begun
}

// dropRestart ends container id's restart whose cancel channel is c.
func (s *Server) dropRestart(id string, c chan struct{}) {
	s.extra.mu.Lock()
	defer s.extra.mu.Unlock()
	if p := s.extra.restarting[id]; p != nil && p.cancel == c {
		delete(s.extra.restarting, id)
	}
}

// restartingConflict is the 409 of a removal without force of a
// restarting container, in the words of dockerd 20.10 (the API 1.41 the
// clients slopbox is tested with speak; docker-py matches "You cannot
// remove ").
func restartingConflict(id string) string {
	return fmt.Sprintf("You cannot remove a restarting container %s. Stop the container before attempting removal or force remove", id)
}
