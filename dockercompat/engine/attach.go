package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/dockercompat/service"
)

// attachment is a client attached to a container's main command (docker
// run without -d attaches, then starts): its stdin, for the start to
// hand to the command, and, with a terminal, the terminal's master, to
// write that stdin to and resize. It lasts as long as the attach.
type attachment struct {
	tty   bool
	stdin *os.File // the read end of what the client sends; nil without stdin

	mu     sync.Mutex
	master *os.File
	size   unix.Winsize // a resize that came before the terminal did
	used   bool
	closed bool
}

// start is what StartAttached gets from the attachment (once).
func (a *attachment) start() service.AttachedStart {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.used || a.closed {
		return service.AttachedStart{}
	}
	a.used = true
	if !a.tty {
		// The caller closes it once started: the command holds the only
		// read end, so that writes to a command that is gone fail.
		in := a.stdin
		a.stdin = nil
		return service.AttachedStart{Stdin: in}
	}
	return service.AttachedStart{Master: func(m *os.File) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.closed {
			m.Close()
			return
		}
		a.master = m
		if a.size.Row > 0 {
			service.SetWinsize(m, a.size.Row, a.size.Col)
		}
		if a.stdin != nil {
			go io.Copy(m, a.stdin)
		}
	}}
}

func (a *attachment) resize(h, w uint16) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.master == nil {
		a.size = unix.Winsize{Row: h, Col: w}
		return nil
	}
	return service.SetWinsize(a.master, h, w)
}

func (a *attachment) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.master != nil {
		a.master.Close()
	}
	if a.stdin != nil {
		a.stdin.Close()
	}
}

// containerAttach is docker run's attach, made before start: the
// connection is hijacked and carries the main command's output (framed
// unless it has a terminal) from its start until it ends, and with
// stdin=1 what the client sends becomes the command's stdin (it ends when
// the client half-closes). The attach ends, too, when the client goes.
// As dockerd's: logs=1 first replays the log, and without stream=1 the
// attach ends there (docker-py's attach(stream=False, logs=True)).
func (s *Server) containerAttach(w http.ResponseWriter, r *request, sb *service.Container) {
	info := sb.Info()
	tty := info.Tty
	// The detach keys (detachKeys, ctrl-p,ctrl-q by default) end an
	// attach with stdin and leave the container running; a bad sequence
	// is refused whatever else is asked, as dockerd's.
	keys, err := parseDetachKeys(r.URL.Query().Get("detachKeys"))
	if err != nil {
		fail(w, err)
		return
	}
	if !boolParam(r, "stdin") {
		keys = nil
	}
	logs, stream := boolParam(r, "logs"), boolParam(r, "stream")
	if !stream {
		var follow *service.OutputFollower
		if logs {
			if follow, err = sb.FollowOutput(); err != nil {
				fail(w, err)
				return
			}
			defer follow.Close()
		}
		conn, _, err := hijack(w, r, tty)
		if err != nil {
			return
		}
		defer conn.Close()
		if follow != nil {
			stdout, stderr := outputStreams(r, conn, tty)
			follow.Replay(stdout, stderr)
		}
		return
	}
	follow, err := sb.FollowOutput()
	if err != nil {
		fail(w, err)
		return
	}
	a := &attachment{tty: tty}
	var stdinW *os.File
	if boolParam(r, "stdin") && info.OpenStdin && !info.Running {
		pr, pw, err := os.Pipe()
		if err != nil {
			follow.Close()
			fail(w, err)
			return
		}
		a.stdin, stdinW = pr, pw
	}
	// Registered before the client sees the response: it sends start as
	// soon as it has read it, and start must find this attachment.
	s.mu.Lock()
	s.attached[sb.ID()] = a
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.attached[sb.ID()] == a {
			delete(s.attached, sb.ID())
		}
		s.mu.Unlock()
		a.close()
	}()
	conn, buf, err := hijack(w, r, tty)
	if err != nil {
		follow.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		return
	}
	defer conn.Close()
	// Not r.Context(): that ends when the client half-closes its side.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var in io.Reader = buf
	if keys != nil {
		in = &detachReader{r: buf, keys: keys}
	}
	if stdinW != nil {
		go watchClient(ctx, conn, in, stdinW, stdinW, cancel)
	} else {
		go watchClient(ctx, conn, in, io.Discard, nil, cancel)
	}
	stdout, stderr := outputStreams(r, conn, tty)
	if logs {
		if err := follow.Replay(stdout, stderr); err != nil {
			follow.Close() // the client has gone
			return
		}
	}
	follow.Copy(ctx, stdout, stderr)
}

// watchClient copies what the client of conn sends (from in) to dst,
// closes closer at its end, and calls gone when the client has gone: its
// side failed, or it closed the connection entirely (not a half-close).
// A command that is still attached is then killed, as a terminal's
// hangup would end it, rather than left running with no one to see it.
func watchClient(ctx context.Context, conn net.Conn, in io.Reader, dst io.Writer, closer io.Closer, gone func()) {
	err := pump(dst, in)
	if closer != nil {
		closer.Close()
	}
	if err != nil {
		gone()
		return
	}
	watchHangup(ctx, conn, gone)
}

// pump copies src to dst until src ends: nil at its end (EOF, a client's
// half-close), its error otherwise. A failing dst (the command no longer
// reads) does not end it.
func pump(dst io.Writer, src io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && dst != io.Discard {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				dst = io.Discard
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// watchHangup calls gone once the peer of conn has closed it entirely
// (POLLHUP on a unix socket; a half-close gives only POLLRDHUP), until
// ctx ends.
func watchHangup(ctx context.Context, conn net.Conn, gone func()) {
	sc, ok := raw(conn).(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hup := false
		raw.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
			if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
				hup = fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
			}
		})
		if hup {
			gone()
			return
		}
	}
}

// containerResize sizes the main command's terminal through the attached
// client's attachment (docker run -it); without one it has no effect.
func (s *Server) containerResize(w http.ResponseWriter, r *request, sb *service.Container) {
	h, _ := strconv.Atoi(r.URL.Query().Get("h"))
	wd, _ := strconv.Atoi(r.URL.Query().Get("w"))
	s.mu.Lock()
	a := s.attached[sb.ID()]
	s.mu.Unlock()
	if a != nil && h > 0 && wd > 0 && h < 1<<16 && wd < 1<<16 {
		if err := a.resize(uint16(h), uint16(wd)); err != nil {
			fail(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// attachedStart is what start hands the main command from a client
// attached before it, if any.
func (s *Server) attachedStart(id string) service.AttachedStart {
	s.mu.Lock()
	a := s.attached[id]
	s.mu.Unlock()
	if a == nil {
		return service.AttachedStart{}
	}
	return a.start()
}

// errDetached ends an attach whose client typed the detach keys.
var errDetached = errors.New("detached")

// defaultDetachKeys are Docker's: ctrl-p ctrl-q.
var defaultDetachKeys = []byte{0x10, 0x11}

// parseDetachKeys reads Docker's detach key sequence: comma-separated
// keys, each a single character or ctrl- and one of a-z @ [ \ ] ^ _.
// Empty gives the default (ctrl-p,ctrl-q).
func parseDetachKeys(v string) ([]byte, error) {
	if v == "" {
		return defaultDetachKeys, nil
	}
	var keys []byte
	for _, k := range strings.Split(v, ",") {
		c, ctrl := strings.CutPrefix(strings.ToLower(k), "ctrl-")
		switch {
		case !ctrl && len(k) == 1:
			keys = append(keys, k[0])
		case ctrl && len(c) == 1 && c[0] >= 'a' && c[0] <= 'z':
			keys = append(keys, c[0]-'a'+1)
		case ctrl && len(c) == 1 && strings.Contains("@[\\]^_", c):
			keys = append(keys, c[0]-'@')
		default:
			return nil, fmt.Errorf("%w: invalid detach keys %q: want keys separated by commas, each a character or ctrl- and one of a-z @ [ \\ ] ^ _ (e.g. ctrl-p,ctrl-q)", errBadRequest, v)
		}
	}
	return keys, nil
}

// detachReader passes what the client sends on, except the detach keys:
// once they have come in sequence, it ends with errDetached. The bytes
// of a sequence that breaks off are passed on, as typed.
type detachReader struct {
	r    io.Reader
	keys []byte
	held int    // how many of keys the input has matched so far
	out  []byte // what is ready to be read
	// detached is set when the keys have come (read by the goroutine
	// that reads, once Read has returned errDetached).
	detached bool
}

func (d *detachReader) Read(p []byte) (int, error) {
	for len(d.out) == 0 {
		if d.detached {
			return 0, errDetached // once what came before the keys is read
		}
		buf := make([]byte, len(p))
		n, err := d.r.Read(buf)
		for _, b := range buf[:n] {
			if b == d.keys[d.held] {
				if d.held++; d.held == len(d.keys) {
					d.detached = true // what follows the keys is dropped
					break
				}
				continue
			}
			d.out = append(d.out, d.keys[:d.held]...)
			d.held = 0
			if b == d.keys[0] {
				d.held = 1
				continue
			}
			d.out = append(d.out, b)
		}
		if d.detached {
			continue
		}
		if err != nil {
			if len(d.out) == 0 {
				return 0, err
			}
			break
		}
	}
	n := copy(p, d.out)
	d.out = d.out[n:]
	return n, nil
}
