package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// spawner is the channel to a spawn server (package spawnd): a helper
// process that runs as root of the sandboxes' user namespace, in a private
// mount namespace, and starts each sandbox's PID 1 on request. One runs per
// Backend, started on the first Spawn (or by Prewarm) and kept while the Backend's process
// lives, so the user namespace set-up (two re-execs and newuidmap/newgidmap
// rootless) is paid once, not per sandbox. Requests are served
// concurrently: a sandbox prepared ahead of need does not hold up a spawn.
type spawner struct {
	program string // the server's binary; "" for this one
	// mapping, when set, is the server's own (a root-run sandbox's slice,
	// index slice), whatever the caller passes.
	mapping *userns.Mapping
	slice   int
	// marker (a root-run sandbox's server) is in the server's
	// environment, spawnServerMarker and the sandbox's id, so that the
	// server of a caller killed mid-spawn is found and stopped before
	// its slice is freed (killStragglers).
	marker string
	// join (rootless, a sandbox on a user network): the network
	// helper's user namespace, which the server joins (netdPid is that
	// helper's pid). closeWait closes it (under mu); joined says, for
	// ever, that the spawner was made with one.
	join    *os.File
	joined  bool
	netdPid int

	mu  sync.Mutex
	srv *serverConn // nil until started, and after the server died
	// dropped are servers stopped since (their connection failed), and
	// closed is set by close: a closed spawner starts no server again,
	// and closeWait waits for every one it started.
	dropped []*serverConn
	closed  bool
	// clones (a root-run sandbox's server) are the idmapped clones of its
	// directory and of the layers' directory clonesFor, made ahead
	// (reserve); the prestart takes them.
	clones    []*os.File
	clonesFor string
}

// keepClones keeps the idmapped clones made ahead for the layers'
// directory layersRoot.
func (s *spawner) keepClones(clones []*os.File, layersRoot string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clones, s.clonesFor = clones, layersRoot
}

// takeClones returns the clones made ahead when they are of layersRoot,
// else nil (and closes them).
func (s *spawner) takeClones(layersRoot string) []*os.File {
	s.mu.Lock()
	clones, ok := s.clones, s.clonesFor == layersRoot
	s.clones = nil
	s.mu.Unlock()
	if ok {
		return clones
	}
	closeAll(clones)
	return nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// serverConn is one running server.
type serverConn struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the server has exited and been reaped
	conn   *net.UnixConn
	wmu    sync.Mutex // one request at a time on conn

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]chan *spawnd.Response
	dead    bool
}

var errServerGone = errors.New("spawn server exited")

// call sends req (with fds attached) and waits for the reply. A server that
// died is restarted, and req sent again when retry is set. Cancelling ctx
// ends only this call: the server goes on serving everyone else, and its
// late reply is dropped.
func (s *spawner) call(ctx context.Context, m userns.Mapping, req *spawnd.Request, fds []int, retry bool) (*spawnd.Response, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sc, err := s.server(m)
		if err != nil {
			return nil, err
		}
		resp, err := sc.call(ctx, req, fds)
		if err == nil {
			if resp.Error != "" {
				return resp, &serverError{msg: resp.Error, errno: resp.Errno}
			}
			return resp, nil
		}
		if ctx.Err() != nil && !errors.Is(err, errServerGone) {
			return nil, ctx.Err()
		}
		s.drop(sc)
		if attempt > 0 || !retry || !errors.Is(err, errServerGone) {
			return nil, err
		}
	}
}

// server returns the running server, starting one if needed.
func (s *spawner) server(m userns.Mapping) (*serverConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mapping != nil {
		m = *s.mapping
	}
	if s.closed {
		return nil, errServerGone
	}
	if s.srv == nil {
		sc, err := startServer(s.program, m, s.marker, s.join)
		if err != nil {
			return nil, err
		}
		s.srv = sc
	}
	return s.srv, nil
}

// drop forgets sc and stops it.
func (s *spawner) drop(sc *serverConn) {
	s.mu.Lock()
	if s.srv == sc {
		s.srv = nil
	}
	s.dropped = append(s.dropped, sc)
	s.mu.Unlock()
	sc.stop()
}

// close stops the server; sandboxes it started and claimed keep running.
func (s *spawner) close() { s.closeWait(0) }

// closeWait is close, then waits up to wait for every server it started
// to have exited; it reports whether they have. A slice's server runs as
// the slice's ids: they are free for another sandbox only once it has
// gone.
func (s *spawner) closeWait(wait time.Duration) bool {
	s.mu.Lock()
	sc, clones := s.srv, s.clones // clones made ahead and not taken
	s.srv, s.clones, s.closed = nil, nil, true
	all := s.dropped
	s.dropped = nil
	join := s.join // the network helper's user namespace: no server starts from it again
	s.join = nil
	s.mu.Unlock()
	closeAll(clones)
	if join != nil {
		join.Close()
	}
	if sc != nil {
		sc.stop()
		all = append(all, sc)
	}
	deadline := time.After(wait)
	for _, sc := range all {
		if wait <= 0 {
			return false
		}
		select {
		case <-sc.exited:
		case <-deadline:
			return false
		}
	}
	return true
}

func startServer(program string, m userns.Mapping, marker string, join *os.File) (*serverConn, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "spawner"), os.NewFile(uintptr(pair[1]), "spawn-server")
	defer theirs.Close()
	cmd := userns.Command(nil)
	if program != "" {
		cmd = userns.CommandPath(program, nil)
	}
	if join != nil {
		cmd = userns.CommandJoin(cmp.Or(program, "/proc/self/exe"), nil, join)
	}
	cmd.Env = append(cmd.Env, reexec.Env+"="+spawnd.Handler)
	if marker != "" {
		cmd.Env = append(cmd.Env, marker)
	}
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{theirs} // fd 4 (spawnd.ConnFD; fd 3: userns.Start's sync pipe, or closed)
	if join != nil {
		cmd.ExtraFiles = []*os.File{join, theirs} // fd 3: the namespace to join
	}
	// Until its user namespace set-up is done (stage 2 clears the signal:
	// package userns), the server dies with the thread that forks it
	// (Pdeathsig), and Go ends a thread when a goroutine locked to it
	// returns (a build session's does): it is forked from a thread of its
	// own, which waits for it and is kept until it has exited.
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		var err error
		if join != nil {
			err = cmd.Start()
		} else {
			err = userns.Start(cmd, m)
		}
		started <- err
		if err == nil {
			cmd.Wait() // reaps the server whenever it exits
			close(exited)
		}
		runtime.UnlockOSThread()
	}()
	if err := <-started; err != nil {
		ours.Close()
		return nil, err
	}
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		cmd.Process.Kill()
		return nil, err
	}
	sc := &serverConn{cmd: cmd, exited: exited, conn: c.(*net.UnixConn), pending: map[uint64]chan *spawnd.Response{}}
	go sc.read()
	return sc, nil
}

// read delivers replies to their callers until the connection fails; then
// every caller still waiting gets errServerGone.
func (sc *serverConn) read() {
	for {
		b, err := spawnd.ReadFrame(sc.conn)
		var resp spawnd.Response
		if err == nil {
			err = json.Unmarshal(b, &resp)
		}
		if err != nil {
			sc.mu.Lock()
			sc.dead = true
			for seq, ch := range sc.pending {
				close(ch)
				delete(sc.pending, seq)
			}
			sc.mu.Unlock()
			sc.stop()
			return
		}
		sc.mu.Lock()
		ch := sc.pending[resp.Seq]
		delete(sc.pending, resp.Seq)
		sc.mu.Unlock()
		if ch != nil {
			ch <- &resp
		}
	}
}

func (sc *serverConn) call(ctx context.Context, req *spawnd.Request, fds []int) (*spawnd.Response, error) {
	ch := make(chan *spawnd.Response, 1)
	sc.mu.Lock()
	if sc.dead {
		sc.mu.Unlock()
		return nil, errServerGone
	}
	sc.seq++
	r := *req
	r.Seq = sc.seq
	sc.pending[r.Seq] = ch
	sc.mu.Unlock()
	body, err := json.Marshal(&r)
	if err != nil {
		return nil, err
	}
	msg := spawnd.Frame(body)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	sc.wmu.Lock()
	n, _, err := sc.conn.WriteMsgUnix(msg, oob, nil)
	if err == nil && n < len(msg) {
		_, err = sc.conn.Write(msg[n:])
	}
	sc.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errServerGone, err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, errServerGone
		}
		return resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (sc *serverConn) stop() {
	sc.conn.Close()
	sc.cmd.Process.Kill()
}

// serverError is an error the spawn server replied with: its message, and
// its errno when it had one.
type serverError struct {
	msg   string
	errno syscall.Errno
}

func (e *serverError) Error() string { return e.msg }

// Unwrap gives the errno, if any, to errors.Is.
func (e *serverError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}
