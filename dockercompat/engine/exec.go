package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// An exec's record is kept while its container is there, for inspect
// (GET /exec/{id}/json) and its start, but not for ever: as moby's
// execCommandGC forgets an exec that has ended within 5 to 10 minutes, a
// record not running is forgotten execExpiry after its end, or after its
// creation if it was never started; and a container has at most
// maxIdleExecs records not running. A create past that bound makes room
// by forgetting the oldest ended exec, and is refused (409) when all are
// created and not started: a client creating execs it never starts
// cannot grow serve's memory without bound.
const (
	execExpiry   = 5 * time.Minute
	maxIdleExecs = 256
)

// execInstance is one exec: created, then started once.
type execInstance struct {
	ID, Container                       string
	Cmd, Env                            []string
	User, WorkingDir                    string
	DetachKeys                          []byte
	Tty, AttachStdin, AttachOut, AttErr bool

	mu       sync.Mutex
	created  time.Time
	ended    time.Time // zero until it has ended
	started  bool
	running  bool
	exitCode int
	pid      int
	term     *service.Terminal
	// size is a resize that came before the terminal was made (a client
	// of API < 1.42 sends one right after the start): applied to it.
	size [2]uint16
}

func (s *Server) execCreate(w http.ResponseWriter, r *request, sb *service.Container) {
	var body struct {
		AttachStdin, AttachStdout, AttachStderr, Tty, Privileged bool
		Cmd                                                      strSlice
		Env                                                      []string
		User, WorkingDir, DetachKeys                             string
	}
	if !decodeBody(w, r, &body) {
		return
	}
	keys, err := parseDetachKeys(body.DetachKeys)
	if err != nil {
		fail(w, err)
		return
	}
	if len(body.Cmd) == 0 {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("No exec command specified"))
		return
	}
	if body.Privileged {
		fail(w, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%v: a privileged exec would turn the sandbox off; slopbox has no privileged mode", backend.ErrUnsafe)))
		return
	}
	if !sb.Running() {
		fail(w, errdefs.ErrConflict.WithMessage(fmt.Sprintf("container %s is not running", sb.ID())))
		return
	}
	if sb.Paused() {
		fail(w, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is paused, unpause the container before exec", sb.ID())))
		return
	}
	s.dropExecs()
	var b [16]byte
	rand.Read(b[:])
	e := &execInstance{ID: hex.EncodeToString(b[:]), Container: sb.ID(), Cmd: body.Cmd, Env: body.Env, User: body.User,
		WorkingDir: body.WorkingDir, DetachKeys: keys, Tty: body.Tty, AttachStdin: body.AttachStdin, AttachOut: body.AttachStdout, AttErr: body.AttachStderr,
		created: s.execClock()}
	s.mu.Lock()
	if !s.roomForExec(e.Container) {
		s.mu.Unlock()
		fail(w, errdefs.ErrConflict.WithMessage(fmt.Sprintf("container %s has %d exec instances created and not started, the most serve keeps for a container: start them, or create more once they expire (%v after their creation)", sb.ID(), maxIdleExecs, execExpiry)))
		return
	}
	s.execs[e.ID] = e
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]string{"Id": e.ID})
}

// roomForExec reports whether container c may have one more exec record,
// forgetting its oldest ended exec if that makes room. s.mu is held.
func (s *Server) roomForExec(c string) bool {
	idle := 0
	var oldest *execInstance
	for _, e := range s.execs {
		if e.Container != c {
			continue
		}
		e.mu.Lock()
		if !e.running {
			idle++
			if e.started && (oldest == nil || e.ended.Before(oldest.ended)) {
				oldest = e
			}
		}
		e.mu.Unlock()
	}
	switch {
	case idle < maxIdleExecs:
		return true
	case oldest != nil:
		delete(s.execs, oldest.ID)
		return true
	}
	return false
}

// expired reports whether exec e's record is due to be forgotten at now.
func (e *execInstance) expired(now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.running:
		return false
	case !e.started:
		return now.Sub(e.created) >= execExpiry
	}
	return now.Sub(e.ended) >= execExpiry
}

// execOf is h for the exec instance {id}, or Docker's 404 when there is
// none (never made, expired, or its container is gone).
func (s *Server) execOf(h func(http.ResponseWriter, *request, *execInstance)) func(http.ResponseWriter, *request) {
	return func(w http.ResponseWriter, r *request) {
		id := r.PathValue("id")
		s.mu.Lock()
		e := s.execs[id]
		if e != nil && e.expired(s.execClock()) {
			delete(s.execs, id)
			e = nil
		}
		s.mu.Unlock()
		if e != nil && s.dropIfGone(e) {
			e = nil
		}
		if e == nil {
			fail(w, errdefs.ErrNotFound.WithMessage("No such exec instance: "+id))
			return
		}
		h(w, r, e)
	}
}

// execInspect is GET /exec/{id}/json.
func (s *Server) execInspect(w http.ResponseWriter, _ *request, e *execInstance) {
	e.mu.Lock()
	defer e.mu.Unlock()
	privileged := false
	writeJSON(w, http.StatusOK, container.ExecInspectResponse{
		ID: e.ID, ContainerID: e.Container, Running: e.running, ExitCode: exitCodeOrNull(e),
		Pid: e.pid, OpenStdin: e.AttachStdin, OpenStdout: e.AttachOut, OpenStderr: e.AttErr,
		ProcessConfig: &container.ExecProcessConfig{Tty: e.Tty, Entrypoint: e.Cmd[0], Arguments: e.Cmd[1:], Privileged: &privileged, User: e.User},
	})
}

// execResize is POST /exec/{id}/resize?h=&w=.
func (s *Server) execResize(w http.ResponseWriter, r *request, e *execInstance) {
	h, _ := strconv.Atoi(r.URL.Query().Get("h"))
	wd, _ := strconv.Atoi(r.URL.Query().Get("w"))
	if h <= 0 || wd <= 0 || h >= 1<<16 || wd >= 1<<16 {
		fail(w, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("resize: h=%d w=%d: want sizes from 1 to 65535", h, wd)))
		return
	}
	e.mu.Lock()
	t := e.term
	if t == nil {
		e.size = [2]uint16{uint16(h), uint16(wd)}
	}
	e.mu.Unlock()
	if t != nil {
		t.Resize(uint16(h), uint16(wd))
	}
	w.WriteHeader(http.StatusOK)
}

// dropExecs forgets the exec records that have expired, and those of
// containers that are gone (removed here or by another slopbox process),
// but for execs still running, which go when they end: as Docker, a
// record lives no longer than its container, so that serve's memory does
// not grow with every exec.
func (s *Server) dropExecs() {
	s.mu.Lock()
	now := s.execClock()
	byContainer := map[string][]*execInstance{}
	for id, e := range s.execs {
		if e.expired(now) {
			delete(s.execs, id)
			continue
		}
		byContainer[e.Container] = append(byContainer[e.Container], e)
	}
	s.mu.Unlock()
	for c, es := range byContainer {
		if _, err := s.b.Open(c); !errors.Is(err, service.ErrNotFound) {
			continue
		}
		for _, e := range es {
			s.dropIfGone(e)
		}
	}
}

// dropIfGone forgets exec e, unless it runs, if its container is gone, and
// reports whether it did.
func (s *Server) dropIfGone(e *execInstance) bool {
	e.mu.Lock()
	running := e.running
	e.mu.Unlock()
	if running {
		return false
	}
	if _, err := s.b.Open(e.Container); !errors.Is(err, service.ErrNotFound) {
		return false
	}
	s.mu.Lock()
	delete(s.execs, e.ID)
	s.mu.Unlock()
	return true
}

// exitCodeOrNull: Docker reports null until the exec has ended.
func exitCodeOrNull(e *execInstance) *int {
	if !e.started || e.running {
		return nil
	}
	code := e.exitCode
	return &code
}

func (e *execInstance) request() (backend.ExecRequest, error) {
	req := backend.ExecRequest{Argv: e.Cmd, User: e.User, Cwd: e.WorkingDir}
	env, err := backend.ParseEnv("Env", e.Env, nil)
	req.Env = env
	return req, err
}

// execStart runs the exec with the hijacked connection as its stdio:
// multiplexed frames without a terminal, the raw terminal with one. The
// connection closes when the command ends; GET /exec/{id}/json then has
// its exit code.
func (s *Server) execStart(w http.ResponseWriter, r *request, e *execInstance) {
	var body struct {
		Detach, Tty bool
		ConsoleSize []uint16
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("invalid JSON in the request body: "+err.Error()))
			return
		}
	}
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		fail(w, errdefs.ErrConflict.WithMessage("exec "+e.ID+" has already been started"))
		return
	}
	e.started, e.running = true, true
	e.mu.Unlock()
	finish := func(code int) {
		now := s.execClock()
		e.mu.Lock()
		e.running, e.exitCode, e.term, e.ended = false, code, nil, now
		e.mu.Unlock()
		s.dropIfGone(e)
	}
	sb, err := s.b.Open(e.Container)
	if err != nil {
		finish(126)
		fail(w, errdefs.ErrNotFound.WithMessage("No such container: "+e.Container))
		return
	}
	req, err := e.request()
	if err != nil {
		finish(126)
		fail(w, err)
		return
	}
	if body.Detach {
		s.execDetached(w, sb, req, finish)
		return
	}
	// The stream's framing is the start request's Tty, as dockerd's: raw
	// with it, multiplexed frames without it, whichever the command has.
	conn, in, err := hijack(w, r, body.Tty)
	if err != nil {
		finish(126)
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if e.Tty {
		s.execTerminal(ctx, cancel, conn, in, e, sb, req, body.Tty, body.ConsoleSize, finish)
		return
	}
	s.execPipes(ctx, cancel, conn, in, e, sb, req, body.Tty, finish)
}

// execPipes is an exec without a terminal: its stdin, stdout and stderr
// are pipes to the hijacked connection conn (in what the client sends),
// raw or in multiplexed frames as the start request's Tty says.
func (s *Server) execPipes(ctx context.Context, cancel context.CancelFunc, conn net.Conn, in io.Reader, e *execInstance, sb *service.Container, req backend.ExecRequest, rawStream bool, finish func(int)) {
	stdin, err := os.OpenFile(os.DevNull, os.O_RDONLY, 0)
	if err != nil {
		finish(126)
		return
	}
	if e.AttachStdin {
		stdin.Close()
		pr, pw, err := os.Pipe()
		if err != nil {
			finish(126)
			return
		}
		stdin = pr
		// The client half-closes at its stdin's end.
		go watchClient(ctx, conn, in, pw, pw, cancel)
	} else {
		go watchClient(ctx, conn, in, io.Discard, nil, cancel)
	}
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		finish(126)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		finish(126)
		return
	}
	var stdout, stderr io.Writer = conn, conn
	if !rawStream {
		stdout, stderr = frames(conn)
	}
	if !e.AttachOut {
		stdout = io.Discard
	}
	if !e.AttErr {
		stderr = io.Discard
	}
	var wg sync.WaitGroup
	for _, c := range []struct {
		r *os.File
		w io.Writer
	}{{outR, stdout}, {errR, stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			io.Copy(c.w, c.r)
			c.r.Close()
		}()
	}
	code, err := sb.AttachStrict(ctx, req, stdin, outW, errW, false)
	var se *service.StartError
	if errors.As(err, &se) {
		// As dockerd's exec: 126 for a command that cannot run, not
		// found included (a shell's 127 is the CLI's).
		errW.Write([]byte(se.Msg + "\n"))
	}
	outW.Close()
	errW.Close()
	wg.Wait()
	if err != nil {
		if se == nil {
			stderr.Write([]byte(err.Error() + "\n"))
		}
		code = 126
	}
	finish(code)
}

// execDetached is a detached exec's start (docker exec -d): the command
// runs with /dev/null as its stdio, and its end is not followed.
func (s *Server) execDetached(w http.ResponseWriter, sb *service.Container, req backend.ExecRequest, finish func(int)) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		finish(126)
		fail(w, err)
		return
	}
	defer devnull.Close()
	if _, err := sb.Attach(context.Background(), req, devnull, devnull, devnull, true); err != nil {
		finish(126)
		fail(w, err)
		return
	}
	finish(0) // detached: its end is not followed
	w.WriteHeader(http.StatusOK)
}

// execTerminal is an exec with a terminal, its master over the hijacked
// connection conn (in what the client sends): raw, or multiplexed frames
// when the start request had no Tty; the detach keys leave it running.
func (s *Server) execTerminal(ctx context.Context, cancel context.CancelFunc, conn net.Conn, in io.Reader, e *execInstance, sb *service.Container, req backend.ExecRequest, rawStream bool, size []uint16, finish func(int)) {
	rows, cols := uint16(0), uint16(0)
	if len(size) == 2 {
		rows, cols = size[0], size[1]
	}
	t, err := sb.AttachTerminal(ctx, req, rows, cols)
	if err != nil {
		var se *service.StartError
		if errors.As(err, &se) {
			// dockerd's exec: 126 for a command that cannot run,
			// not found included.
			io.WriteString(conn, se.Msg+"\r\n")
			finish(126)
			return
		}
		io.WriteString(conn, err.Error()+"\r\n")
		finish(126)
		return
	}
	kept := false // detached: the command goes on, and its terminal
	defer func() {
		if !kept {
			t.Close()
		}
	}()
	e.mu.Lock()
	e.term = t
	if e.size[0] > 0 {
		t.Resize(e.size[0], e.size[1])
	}
	e.mu.Unlock()
	var dst io.Writer = io.Discard
	var src io.Reader = in
	gone := cancel
	detached := make(chan struct{})
	if e.AttachStdin {
		// The detach keys end the stream and leave the command
		// running, as dockerd's.
		dst = t.Master
		dr := &detachReader{r: in, keys: e.DetachKeys}
		src, gone = dr, func() {
			if dr.detached {
				close(detached)
				return
			}
			cancel()
		}
	}
	go watchClient(ctx, conn, src, dst, nil, gone)
	var out io.Writer = conn
	if !rawStream {
		out, _ = frames(conn)
	}
	copied := make(chan struct{})
	go func() {
		io.Copy(out, t.Master)
		io.Copy(io.Discard, t.Master) // detached: what it writes goes nowhere
		close(copied)
	}()
	select {
	case <-t.Done():
	case <-ctx.Done():
	case <-detached:
		kept = true
		go func() {
			code, _, _ := t.Wait(context.Background(), 0)
			t.Close()
			finish(code)
		}()
		return
	}
	code, _, _ := t.Wait(ctx, 0)
	// What the command wrote last is still in the terminal: it goes
	// to the client before the stream ends (the Done channel, closed
	// by then, ended this wait at once, and a loaded host lost all of
	// a quick command's output). A client that stops reading does not
	// hold the exec beyond the bound.
	t.DrainOutput()
	select {
	case <-copied:
	case <-time.After(2 * service.TerminalDrain):
	}
	finish(code)
}
