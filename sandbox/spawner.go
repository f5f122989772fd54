package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/userns"
)

// spawner is the channel to the spawn server: a helper process that runs as
// root of the sandboxes' user namespace, in a private mount namespace, and
// starts each sandbox's PID 1 on request. One runs per Backend, started on
// the first Spawn and kept while the Backend's process lives, so the user
// namespace set-up (two re-execs and newuidmap/newgidmap rootless) is paid
// once, not per sandbox.
type spawner struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	conn *net.UnixConn
}

// spawn asks the server to start req's PID 1; the listener (and the
// idmapped workspace mount, when set) travel as fds. A server that died is
// restarted once.
func (s *spawner) spawn(ctx context.Context, m userns.Mapping, req *spawnRequest, listener, wsMount *os.File) (int, error) {
	fds := []int{int(listener.Fd())}
	if wsMount != nil {
		fds = append(fds, int(wsMount.Fd()))
	}
	return s.call(ctx, m, req, fds)
}

// remove asks the server to delete a sandbox directory.
func (s *spawner) remove(ctx context.Context, m userns.Mapping, dir string) error {
	_, err := s.call(ctx, m, &spawnRequest{Remove: dir}, nil)
	return err
}

func (s *spawner) call(ctx context.Context, m userns.Mapping, req *spawnRequest, fds []int) (int, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	msg := binary.NativeEndian.AppendUint32(nil, uint32(len(body)))
	msg = append(msg, body...)
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if s.conn == nil {
			if err := s.start(m); err != nil {
				return 0, err
			}
		}
		resp, err := s.roundTrip(ctx, msg, fds)
		if err == nil {
			if resp.Error != "" {
				return 0, errors.New(resp.Error)
			}
			return resp.Pid, nil
		}
		s.stop()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if attempt > 0 || !errors.Is(err, errServerGone) {
			return 0, err
		}
	}
}

var errServerGone = errors.New("spawn server exited")

func (s *spawner) roundTrip(ctx context.Context, msg []byte, fds []int) (*spawnResponse, error) {
	stop := context.AfterFunc(ctx, func() { s.conn.Close() })
	defer stop()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := s.conn.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errServerGone, err)
	}
	if n < len(msg) {
		if _, err := s.conn.Write(msg[n:]); err != nil {
			return nil, fmt.Errorf("%w: %v", errServerGone, err)
		}
	}
	var resp spawnResponse
	b, err := readFrame(s.conn)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errServerGone, err)
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("spawn server: bad reply: %w", err)
	}
	return &resp, nil
}

func (s *spawner) start(m userns.Mapping) error {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "spawner"), os.NewFile(uintptr(pair[1]), "spawn-server")
	defer theirs.Close()
	cmd := userns.Command(nil)
	cmd.Env = append(cmd.Env, reexec.Env+"="+spawnHelper)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{theirs} // fd 4 (fd 3: user namespace sync)
	if err := userns.Start(cmd, m); err != nil {
		ours.Close()
		return err
	}
	go cmd.Wait() // reaps the server whenever it exits
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		cmd.Process.Kill()
		return err
	}
	s.cmd, s.conn = cmd, c.(*net.UnixConn)
	return nil
}

func (s *spawner) stop() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd = nil
	}
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.NativeEndian.Uint32(n[:])
	if size > 64<<20 {
		return nil, fmt.Errorf("frame of %d bytes", size)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}

// spawnServerMain runs in the helper: root of the user namespace, in a
// mount namespace of its own. It serves spawn requests until the host end of
// the socket closes.
func spawnServerMain() int {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintln(os.Stderr, "slopbox spawn server: make mounts private:", err)
		return 1
	}
	f := os.NewFile(4, "spawn-server")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "slopbox spawn server:", err)
		return 1
	}
	conn := c.(*net.UnixConn)
	inits := newReaper()
	for {
		req, files, err := readRequest(conn)
		if err != nil {
			return 0 // the Backend went away
		}
		var resp spawnResponse
		var ws *os.File
		if len(files) > 1 {
			ws = files[1]
		}
		if req.Remove != "" {
			if err := os.RemoveAll(req.Remove); err != nil {
				resp.Error = err.Error()
			}
		} else if len(files) == 0 {
			resp.Error = "spawn request without a listener"
		} else if pid, err := startInit(req, files[0], ws); err != nil {
			resp.Error = err.Error()
		} else {
			resp.Pid = pid
			inits.add(pid)
		}
		for _, f := range files {
			f.Close()
		}
		b, _ := json.Marshal(&resp)
		if _, err := conn.Write(append(binary.NativeEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
			return 0
		}
	}
}

func readRequest(conn *net.UnixConn) (*spawnRequest, []*os.File, error) {
	var n [4]byte
	oob := make([]byte, unix.CmsgSpace(maxSpawnFDs*4))
	got, oobn, _, _, err := conn.ReadMsgUnix(n[:], oob)
	if err != nil {
		return nil, nil, err
	}
	var files []*os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, err
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				files = append(files, os.NewFile(uintptr(fd), "spawn-fd"))
			}
		}
	}
	if got < len(n) {
		if _, err := io.ReadFull(conn, n[got:]); err != nil {
			return nil, files, err
		}
	}
	size := binary.NativeEndian.Uint32(n[:])
	body := make([]byte, size)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, files, err
	}
	var req spawnRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, files, err
	}
	return &req, files, nil
}

// reaper waits for the sandbox inits this server started (they are its
// children), so a killed sandbox leaves no zombie behind while the server
// lives. It waits only for those pids, never for libcontainer's own helpers.
type reaper struct {
	mu   sync.Mutex
	pids map[int]bool
}

func newReaper() *reaper {
	r := &reaper{pids: map[int]bool{}}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		for range ch {
			r.mu.Lock()
			for pid := range r.pids {
				var ws unix.WaitStatus
				if p, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil); p == pid {
					delete(r.pids, pid)
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *reaper) add(pid int) {
	r.mu.Lock()
	r.pids[pid] = true
	r.mu.Unlock()
}

// close stops the server; sandboxes it started keep running.
func (s *spawner) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
}
