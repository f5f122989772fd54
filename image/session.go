package image

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/userns"
)

// A helper session: one store helper process in the user namespace that
// serves the store writes of a build one after the other, where each would
// otherwise start a helper of its own (an exec, the namespace, newuidmap
// and newgidmap: 10 to 15 ms, more than committing a small layer takes).
// Requests and replies go over a socketpair, each a 4-byte big-endian
// length and the JSON; a file a request passes (commit-tar's tar) goes
// with it as SCM_RIGHTS. A request made while the session serves another
// (concurrent builds in serve) starts a helper of its own, as before.

// helperSessionName is the re-exec handler of a session's helper.
const helperSessionName = "image-store-session"

func init() { reexec.Register(helperSessionName, helperSessionMain) }

// sessionOps are the operations a session serves: a build's.
var sessionOps = []string{"commit-dir", "commit-tar", "put-cache", "put-cache-marks", "export-paths"}

// maxFrame bounds one request or reply (put-cache-marks of a Dockerfile of
// 100,000 ENV lines is about 7 MB).
const maxFrame = 256 << 20

// sessions is a Store's helper session: started on the first request
// while held, ended when the last holder releases it.
type sessions struct {
	mu    sync.Mutex
	holds int
	cur   *session
}

type session struct {
	mu   sync.Mutex // one request at a time
	conn *net.UnixConn
	pid  int
	dead atomic.Bool
	// exited is closed once the helper has exited and its log is read.
	exited chan struct{}
}

// Hold keeps one helper process serving the store's build writes (CommitDir,
// CommitTar, PutCache, PutCacheMarks, ExportPaths) until release is called,
// instead of one process per write. It is started by the first such write.
// Inside the store's user namespace no helper is needed and Hold does
// nothing. release waits until the helper has exited.
func (s *Store) Hold() (release func()) {
	if userns.Inside() || s.sess == nil {
		return func() {}
	}
	ss := s.sess
	ss.mu.Lock()
	ss.holds++
	ss.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			ss.mu.Lock()
			ss.holds--
			var end *session
			if ss.holds == 0 {
				end, ss.cur = ss.cur, nil
			}
			ss.mu.Unlock()
			if end != nil {
				end.close()
			}
		})
	}
}

// sessionFor returns the held session, started if need be and locked for
// the caller, or nil when there is none or it is busy.
func (s *Store) sessionFor(req *helperRequest) *session {
	ss := s.sess
	if ss == nil || !slices.Contains(sessionOps, req.Op) {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.holds == 0 {
		return nil
	}
	if ss.cur != nil && ss.cur.dead.Load() {
		ss.cur.close()
		ss.cur = nil
	}
	if ss.cur == nil {
		cur, err := s.startSession()
		if err != nil {
			s.logf("image store helper session: %v", err)
			return nil
		}
		ss.cur = cur
	}
	if !ss.cur.mu.TryLock() {
		return nil
	}
	return ss.cur
}

// startSession starts a session's helper. It is started from a goroutine
// that keeps its thread locked for the helper's life: the helper dies with
// the thread that started it (Pdeathsig), and a thread is only ever ended
// when a goroutine that locked it ends.
func (s *Store) startSession() (*session, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "session"), os.NewFile(uintptr(pair[1]), "session")
	defer theirs.Close()
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, err
	}
	conn := fc.(*net.UnixConn)
	logR, logW, err := os.Pipe()
	if err != nil {
		conn.Close()
		return nil, err
	}
	cmd := userns.Command(nil)
	cmd.Env = append(cmd.Env, reexec.Env+"="+helperSessionName)
	cmd.Stdin, cmd.Stderr = theirs, os.Stderr
	cmd.ExtraFiles = []*os.File{logW} // fd 4 in the child (fd 3: userns.Start's sync pipe, or closed)
	se := &session{conn: conn, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the helper
		if err := userns.Start(cmd, s.mapping); err != nil {
			started <- err
			return
		}
		se.pid = cmd.Process.Pid
		started <- nil
		cmd.Wait()
	}()
	err = <-started
	logW.Close()
	if err != nil {
		logR.Close()
		conn.Close()
		return nil, err
	}
	go func() {
		defer close(se.exited)
		defer logR.Close()
		sc := bufio.NewScanner(logR)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				s.logf("%s", line)
			}
		}
		io.Copy(io.Discard, logR)
	}()
	return se, nil
}

// close ends the session: the helper reads EOF and exits.
func (se *session) close() {
	se.mu.Lock()
	defer se.mu.Unlock()
	se.conn.Close()
	<-se.exited
}

// call sends req (with file, if any) and reads the reply. The caller holds
// se.mu. sent reports whether the request reached the helper: if it did
// not, the caller may run it elsewhere. A ctx ended meanwhile stops the
// helper's work (SIGTERM, as a helper of its own gets) and ends the
// session.
func (se *session) call(ctx context.Context, req helperRequest, file *os.File) (resp *helperResponse, sent bool, err error) {
	defer se.mu.Unlock()
	in, err := json.Marshal(req)
	if err != nil {
		return nil, false, err
	}
	var rights []byte
	if file != nil {
		rights = unix.UnixRights(int(file.Fd()))
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(in)))
	msg = append(msg, in...)
	n, _, err := se.conn.WriteMsgUnix(msg, rights, nil)
	if file != nil {
		runtime.KeepAlive(file)
	}
	if err != nil || n == 0 {
		se.dead.Store(true)
		return nil, false, fmt.Errorf("image store helper session: %w", cmpErr(err, io.ErrShortWrite))
	}
	if n < len(msg) {
		if _, err := se.conn.Write(msg[n:]); err != nil {
			se.dead.Store(true)
			return nil, true, fmt.Errorf("image store helper session: %w", err)
		}
	}
	stop := context.AfterFunc(ctx, func() { syscall.Kill(se.pid, syscall.SIGTERM) })
	out, err := readFrame(se.conn)
	if !stop() || err != nil {
		se.dead.Store(true)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, true, ctx.Err()
		}
		return nil, true, fmt.Errorf("image store helper session: %w", err)
	}
	var r helperResponse
	if err := json.Unmarshal(out, &r); err != nil {
		se.dead.Store(true)
		return nil, true, fmt.Errorf("image store helper session: %w", err)
	}
	if r.Error != "" && ctx.Err() != nil {
		return nil, true, ctx.Err()
	}
	return &r, true, nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("a message of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// rightsReader reads a stream socket and keeps the descriptors that come
// with what it reads.
type rightsReader struct {
	conn *net.UnixConn
	fds  []int
}

func (r *rightsReader) Read(p []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := r.conn.ReadMsgUnix(p, oob)
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				if fds, ferr := unix.ParseUnixRights(&m); ferr == nil {
					r.fds = append(r.fds, fds...)
				}
			}
		}
	}
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// helperSessionMain serves requests from the socket on stdin until it is
// closed.
func helperSessionMain() int {
	f := os.NewFile(0, "session")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image store helper session:", err)
		return 1
	}
	conn, ok := fc.(*net.UnixConn)
	if !ok {
		fmt.Fprintln(os.Stderr, "image store helper session: stdin is not a unix socket")
		return 1
	}
	logs := os.NewFile(4, "logs")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cancelOnTerm(cancel)
	rr := &rightsReader{conn: conn}
	var s *Store
	var opened helperRequest
	for {
		in, err := readFrame(rr)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "image store helper session:", err)
			return 1
		}
		var files []*os.File
		for _, fd := range rr.fds {
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
		rr.fds = nil
		var req helperRequest
		resp := helperResponse{}
		if err := json.Unmarshal(in, &req); err != nil {
			resp.Error = "image store helper: bad request: " + err.Error()
		} else if !slices.Contains(sessionOps, req.Op) {
			resp.Error = fmt.Sprintf("image store helper session: operation %q is not served here", req.Op)
		} else if len(files) > 1 || (req.FD != 0) != (len(files) == 1) {
			resp.Error = "image store helper session: the request's file is missing"
		} else {
			if s == nil || req.Root != opened.Root || req.Progress != opened.Progress || req.Stall != opened.Stall || !slices.Equal(req.Insecure, opened.Insecure) {
				s, err = Open(req.Root, WithInsecureRegistries(req.Insecure...), WithProgress(req.Progress), WithStallTimeout(req.Stall),
					WithLogger(func(f string, a ...any) { fmt.Fprintf(logs, f+"\n", a...) }))
				opened = req
			}
			var file *os.File
			if len(files) == 1 {
				file = files[0]
			}
			if err == nil {
				err = serveHelper(ctx, s, req, file, &resp)
			}
			setHelperError(&resp, err)
		}
		for _, f := range files {
			f.Close()
		}
		out, _ := json.Marshal(&resp)
		if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(out))), out...)); err != nil {
			return 1
		}
		if ctx.Err() != nil {
			return 1 // stopped (SIGTERM): the session is over
		}
	}
}
