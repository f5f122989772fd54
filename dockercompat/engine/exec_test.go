package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/slopbox/slopbox/dockercompat/service"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/sandbox"
	"github.com/slopbox/slopbox/test/fixtures"
)

// TestMain lets the (static) test binary act as slopbox's helpers and as
// the sandboxes' init.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// testServer serves a fresh backend holding the busybox fixture on a unix
// socket, and returns the server, a client of it and the image's name.
func testServer(t *testing.T) (*Server, *http.Client, string) {
	t.Helper()
	reg := fixtures.Registry(t, nil)
	ref := reg + "/test/busybox:latest"
	fixtures.Push(t, ref, fixtures.Busybox(t, image.HostPlatform()))
	dir := t.TempDir()
	for p := dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	b, err := sandbox.New(filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store().Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := New(service.New(b), "test")
	hs := &http.Server{Handler: s}
	go hs.Serve(ln)
	t.Cleanup(func() {
		hs.Close()
		b.Prune(true)
		b.Close()
	})
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	return s, c, ref
}

func call(t *testing.T, c *http.Client, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://slopbox/v1.41"+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (s *Server) execCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.execs)
}

// The server keeps an exec's record only as long as its container: 200
// execs (some run, with and without a terminal; fewer than maxIdleExecs)
// leave no record once their container is removed through the API, nor
// once another process removed it (slopbox rm) and the next exec comes
// (the old code kept all of them).
func TestExecRecordsGoWithTheirContainer(t *testing.T) {
	s, c, ref := testServer(t)
	mk := func(name string, n int) {
		t.Helper()
		if code, out := call(t, c, "POST", "/containers/create?name="+name, map[string]any{"Image": ref, "Cmd": []string{"sleep", "1000"}}); code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, out)
		}
		if code, out := call(t, c, "POST", "/containers/"+name+"/start", nil); code != http.StatusNoContent {
			t.Fatalf("start: %d %s", code, out)
		}
		for i := range n {
			tty := i%8 == 0
			code, out := call(t, c, "POST", "/containers/"+name+"/exec", map[string]any{"Cmd": []string{"true"}, "Tty": tty, "AttachStdout": true})
			if code != http.StatusCreated {
				t.Fatalf("exec create: %d %s", code, out)
			}
			var r struct{ Id string }
			json.Unmarshal(out, &r)
			if i%4 == 0 {
				if code, out := call(t, c, "POST", "/exec/"+r.Id+"/start", map[string]any{"Tty": tty}); code != http.StatusOK {
					t.Fatalf("exec start: %d %s", code, out)
				}
			}
		}
	}
	mk("one", 200)
	if n := s.execCount(); n != 200 {
		t.Fatalf("%d exec records, want 200 while the container lives", n)
	}
	if code, out := call(t, c, "DELETE", "/containers/one?force=1", nil); code != http.StatusNoContent {
		t.Fatalf("rm: %d %s", code, out)
	}
	if n := s.execCount(); n != 0 {
		t.Errorf("%d exec records left after their container was removed", n)
	}
	mk("two", 100)
	sb, err := s.b.Open("two")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Remove(); err != nil { // as slopbox rm -f does
		t.Fatal(err)
	}
	mk("three", 1)
	if n := s.execCount(); n != 1 {
		t.Errorf("%d exec records, want only the one of the container left", n)
	}
}

// TestExecRecordsBounded: a container has at most maxIdleExecs exec
// records not running. One more create is refused (409, naming the bound)
// while all are created and not started; an exec that has ended makes
// room, its record forgotten first. Records expire execExpiry after their
// creation (never started) or their end, as moby's execCommandGC forgets
// them: on the server's clock, moved here, not waited for.
func TestExecRecordsBounded(t *testing.T) {
	s, c, ref := testServer(t)
	var mu sync.Mutex
	now := time.Now()
	s.execClock = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	if code, out := call(t, c, "POST", "/containers/create?name=idle", map[string]any{"Image": ref, "Cmd": []string{"sleep", "1000"}}); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, out)
	}
	if code, out := call(t, c, "POST", "/containers/idle/start", nil); code != http.StatusNoContent {
		t.Fatalf("start: %d %s", code, out)
	}
	create := func() (int, string, string) {
		t.Helper()
		code, out := call(t, c, "POST", "/containers/idle/exec", map[string]any{"Cmd": []string{"true"}, "AttachStdout": true})
		var r struct{ Id, Message string }
		json.Unmarshal(out, &r)
		return code, r.Id, r.Message
	}
	var ids []string
	for i := range maxIdleExecs {
		code, id, msg := create()
		if code != http.StatusCreated {
			t.Fatalf("exec create %d: %d %s", i, code, msg)
		}
		ids = append(ids, id)
	}
	code, _, msg := create()
	if code != http.StatusConflict || !strings.Contains(msg, fmt.Sprintf("%d exec instances created and not started", maxIdleExecs)) {
		t.Fatalf("exec create past the bound: %d %q, want 409 naming the bound", code, msg)
	}
	if n := s.execCount(); n != maxIdleExecs {
		t.Fatalf("%d exec records, want %d", n, maxIdleExecs)
	}
	// One started and ended makes room: its record goes for the new one.
	if code, out := call(t, c, "POST", "/exec/"+ids[0]+"/start", map[string]any{}); code != http.StatusOK {
		t.Fatalf("exec start: %d %s", code, out)
	}
	if code, _, msg := create(); code != http.StatusCreated {
		t.Fatalf("exec create once one ended: %d %s", code, msg)
	}
	if code, _ := call(t, c, "GET", "/exec/"+ids[0]+"/json", nil); code != http.StatusNotFound {
		t.Errorf("the ended exec whose record made room: inspect %d, want 404", code)
	}
	if n := s.execCount(); n != maxIdleExecs {
		t.Fatalf("%d exec records, want %d", n, maxIdleExecs)
	}
	// Not expired a second before their time; gone at it.
	advance(execExpiry - time.Second)
	if code, _, _ := create(); code != http.StatusConflict {
		t.Fatalf("exec create before the records expire: %d, want 409", code)
	}
	if code, _ := call(t, c, "GET", "/exec/"+ids[1]+"/json", nil); code != http.StatusOK {
		t.Fatalf("an exec not expired yet: inspect %d, want 200", code)
	}
	advance(time.Second)
	if code, _ := call(t, c, "GET", "/exec/"+ids[1]+"/json", nil); code != http.StatusNotFound {
		t.Errorf("an exec created %v ago and never started: inspect %d, want 404", execExpiry, code)
	}
	if code, _, msg := create(); code != http.StatusCreated {
		t.Fatalf("exec create once the others expired: %d %s", code, msg)
	}
	if n := s.execCount(); n != 1 {
		t.Errorf("%d exec records once the others expired, want 1", n)
	}
}
