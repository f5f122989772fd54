package engine

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/events"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/dockercompat/filters"
	"github.com/slopbox/slopbox/image"
)

// hijack takes over the connection for attach and exec start: with the
// Upgrade header (the docker CLI demands it) it answers 101 UPGRADED as
// moby does, else 200 with the stream's content type (docker-py accepts
// both). The stream is raw with a terminal, multiplexed otherwise.
func hijack(w http.ResponseWriter, r *request, tty bool) (net.Conn, *bufio.Reader, error) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		fail(w, errdefs.ErrInternal.WithMessage("the connection cannot be hijacked"))
		return nil, nil, errors.New("not hijackable")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The request body's deadline (limitBody) is not the stream's.
	conn.SetDeadline(time.Time{})
	ct := "application/vnd.docker.raw-stream"
	if !tty && r.atLeast("1.42") {
		ct = "application/vnd.docker.multiplexed-stream"
	}
	if r.Header.Get("Upgrade") != "" {
		io.WriteString(conn, "HTTP/1.1 101 UPGRADED\r\nContent-Type: "+ct+"\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	} else {
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: "+ct+"\r\n\r\n")
	}
	return &gatedConn{Conn: conn}, rw.Reader, nil
}

// gatedConn holds the stream's first bytes until the client has read the
// response head. docker-py reads the stream from the raw socket, under
// http.client's buffered reader: bytes that arrived with the head were
// swallowed by that buffer, so a command quicker than the client (an
// exec_run of echo) lost its output. On a unix socket the bytes the peer
// has not read yet are SIOCOUTQ; the first Write waits, up to
// headReadWait, for it to drop to zero.
type gatedConn struct {
	net.Conn
	once sync.Once
}

const headReadWait = 2 * time.Second

func (c *gatedConn) Write(p []byte) (int, error) {
	c.once.Do(func() { waitUnread(c.Conn, headReadWait) })
	return c.Conn.Write(p)
}

// raw is the connection under a gatedConn. gatedConn itself is no
// syscall.Conn, so that io.Copy from a file goes through Write (os.File's
// WriteTo would otherwise sendfile straight to the socket).
func raw(conn net.Conn) net.Conn {
	if g, ok := conn.(*gatedConn); ok {
		return g.Conn
	}
	return conn
}

// waitUnread waits until the peer of a unix socket has read everything
// written to it, or max has passed; other connections do not wait.
func waitUnread(conn net.Conn, max time.Duration) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return
	}
	deadline := time.Now().Add(max)
	for delay := 20 * time.Microsecond; ; delay = min(2*delay, 5*time.Millisecond) {
		unread := 0
		if raw.Control(func(fd uintptr) {
			unread, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		}) != nil || err != nil || unread == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(delay)
	}
}

// frameWriter writes Docker's multiplexed stream frames: one byte for the
// stream (1 stdout, 2 stderr), three zero bytes, the payload's length as a
// big-endian uint32, then the payload. Writers of one stream share mu.
type frameWriter struct {
	w      io.Writer
	stream byte
	mu     *sync.Mutex
}

// frames returns the stdout and stderr frame writers of one connection.
func frames(w io.Writer) (stdout, stderr io.Writer) {
	mu := &sync.Mutex{}
	return &frameWriter{w: w, stream: 1, mu: mu}, &frameWriter{w: w, stream: 2, mu: mu}
}

func (f *frameWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var h [8]byte
	h[0] = f.stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(p)))
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.w.Write(h[:]); err != nil {
		return 0, err
	}
	return f.w.Write(p)
}

// flushWriter flushes after each write, so followed logs arrive as written.
type flushWriter struct {
	w  io.Writer
	f  http.Flusher
	mu sync.Mutex
}

func (f *flushWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.w.Write(p)
	if f.f != nil {
		f.f.Flush()
	}
	return n, err
}

// eventHub fans container and image events out to /events subscribers.
type eventHub struct {
	mu   sync.Mutex
	subs map[chan *eventMessage]struct{}
}

func newEventHub() *eventHub { return &eventHub{subs: map[chan *eventMessage]struct{}{}} }

// listening reports whether anyone reads the events now: an event no
// one would read is not built.
func (h *eventHub) listening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}

func (h *eventHub) emit(typ, action, id string, attrs map[string]string) {
	now := time.Now()
	ev := &eventMessage{Message: events.Message{Type: events.Type(typ), Action: events.Action(action),
		Actor: events.Actor{ID: id, Attributes: attrs}, Scope: "local", Time: now.Unix(), TimeNano: now.UnixNano()},
		Status: action, ID: id}
	if typ == "container" {
		ev.From = attrs["image"] // the legacy field, as status and id
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs {
		select {
		case c <- ev:
		default: // a slow reader misses events rather than stalling the server
		}
	}
}

// eventsStream is GET /events: events of this server as they happen, one
// JSON object per line, until the client goes.
func (s *Server) eventsStream(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	match, err := eventFilter(f)
	if err != nil {
		fail(w, err)
		return
	}
	c := make(chan *eventMessage, 64)
	s.events.mu.Lock()
	s.events.subs[c] = struct{}{}
	s.events.mu.Unlock()
	defer func() {
		s.events.mu.Lock()
		delete(s.events.subs, c)
		s.events.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-c:
			if !match(ev) {
				continue
			}
			enc.Encode(ev)
			if fl != nil {
				fl.Flush()
			}
		}
	}
}

// eventFilter reads docker events' filters into a match, by Docker's
// rules: each key's values OR, keys AND, every label must hold among the
// actor's attributes; container, image, volume and network name their
// object by id or name.
func eventFilter(f filters.Args) (func(ev *eventMessage) bool, error) {
	if err := f.Validate("config", "container", "daemon", "event", "image", "label", "network", "node", "plugin", "scope", "secret", "service", "type", "volume"); err != nil {
		return nil, err
	}
	// Objects slopbox has no events of match nothing.
	for _, k := range []string{"config", "daemon", "node", "plugin", "secret", "service"} {
		if f.Has(k) {
			return func(*eventMessage) bool { return false }, nil
		}
	}
	return func(ev *eventMessage) bool {
		typ, action := string(ev.Type), string(ev.Action)
		id, attrs := ev.Actor.ID, ev.Actor.Attributes
		// this object, when the event is of its type: by id or name
		object := func(key, ofType string) bool {
			if !f.Has(key) {
				return true
			}
			return typ == ofType && (f.Exact(key, id) || f.Exact(key, attrs["name"]) ||
				f.Any(key, func(v string) bool { return len(v) >= 3 && strings.HasPrefix(id, v) }))
		}
		imageOK := f.Any("image", func(v string) bool {
			return v == attrs["image"] || typ == "image" && (v == id || v == attrs["name"]) ||
				image.DockerName(v) == image.DockerName(attrs["image"])
		})
		return f.Exact("type", typ) && f.Exact("scope", "local") && imageOK &&
			f.Any("event", func(v string) bool { base, _, _ := strings.Cut(action, ":"); return v == action || v == base }) &&
			object("container", "container") && object("volume", "volume") && object("network", "network") &&
			f.Labels("label", attrs)
	}, nil
}

// lazyWriter sends the 200 and its content type with the first write, so
// that a failure before anything was written can still be an error status.
type lazyWriter struct {
	w           http.ResponseWriter
	contentType string
	started     bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", l.contentType)
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}
