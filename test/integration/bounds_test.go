package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// logBytes is what sandbox dir's log takes on disk: the log, the one
// before it, and the deleted ones process pid still holds open.
func logBytes(t *testing.T, dir string, pid int) int64 {
	var n int64
	for _, f := range []string{"container.log", "container.log.1"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil {
			n += fi.Size()
		}
	}
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, fd := range fds {
		p := "/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()
		if target, err := os.Readlink(p); err == nil && strings.Contains(target, "container.log") && strings.HasSuffix(target, "(deleted)") {
			if fi, err := os.Stat(p); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// A follower that does not read (logs -f into a full pipe) does not hold
// the log's rotation back: while the command writes as fast as it can, the
// log, with what the follower holds open, stays within 2 × 8 MiB (the old
// code put rotation off while a client followed: 1 GB in 15 s). A
// rotation waits a moment for the follower, then goes on: the follower,
// once it reads again, is told it missed output. logs --tail reads the
// end (the old code parsed all of it, and hung on the 250 MB).
func TestLogBoundedWithSlowFollower(t *testing.T) {
	e := newEnv(t)
	e.must("pull", e.ref)
	e.must("run", "-d", "--name", "chatty", e.ref, "yes", strings.Repeat("0123456789", 10))
	var dir string
	for id := range e.sandboxDirs() {
		dir = filepath.Join(e.root, "c", id)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	follower := exec.Command(e.bin, "--root", e.root, "logs", "-f", "chatty")
	var stderr fixtures.Buffer
	follower.Stdout, follower.Stderr = pw, &stderr
	if err := follower.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	defer follower.Process.Kill()
	const bound = 2*8<<20 + 1<<20
	// Sampled for 6 s, and on until the log has rotated at least once
	// (a loaded machine writes the first 8 MiB slower), within Patience.
	var most int64
	rotated := func() bool { _, err := os.Stat(filepath.Join(dir, "container.log.1")); return err == nil }
	for start := time.Now(); time.Since(start) < 6*time.Second || !rotated() && time.Since(start) < fixtures.Patience(); time.Sleep(100 * time.Millisecond) {
		most = max(most, logBytes(t, dir, follower.Process.Pid))
	}
	if most > bound {
		t.Errorf("the log took %d bytes with a slow follower attached, want at most %d", most, bound)
	}
	if _, err := os.Stat(filepath.Join(dir, "container.log.1")); err != nil {
		t.Errorf("the log was never rotated: the command wrote too little to test anything (%v)", err)
	}
	out := e.must("logs", "--tail", "3", "chatty")
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 3 || lines[2] != strings.Repeat("0123456789", 10) {
		t.Errorf("logs --tail 3: %q", out)
	}
	// Read again: the follower says it missed output, and ends with the
	// command.
	go io.Copy(io.Discard, pr)
	fixtures.Eventually(t, "the follower, reading again, told it missed output", func() (bool, string) {
		return strings.Contains(stderr.String(), "output dropped here"), "its stderr: " + stderr.String()
	})
	e.must("rm", "-f", "chatty")
	done := make(chan struct{})
	go func() { follower.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(fixtures.Patience()):
		t.Fatal("logs -f did not end after the sandbox was removed")
	}
	if !strings.Contains(stderr.String(), "output dropped here") {
		t.Errorf("the follower was not told it missed output; its stderr: %q", stderr.String())
	}
}

// /etc/hosts, /etc/resolv.conf and /etc/hostname are files on the host's
// disk: under --read-only, and under --storage-opt size=, the sandbox
// cannot grow them (the old code took 300 MB each past
// --read-only --storage-opt size=16m). It still reads them.
func TestEtcFilesBoundedUnderReadOnlyAndSize(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	for _, flags := range [][]string{{"--read-only"}, {"--storage-opt", "size=16m"}, {"--read-only", "--storage-opt", "size=16m"}} {
		name := "etc" + strconv.Itoa(len(flags))
		e.must(append(append([]string{"run", "-d", "--name", name}, flags...), e.ref, "sleep", "1000")...)
		out, _ := e.run("", "exec", name, "sh", "-c",
			"for f in hosts resolv.conf hostname; do dd if=/dev/zero of=/etc/$f bs=1M count=24 2>/dev/null; done; grep -c localhost /etc/hosts; hostname")
		if !strings.HasPrefix(out, "1\n") && !strings.HasPrefix(out, "2\n") {
			t.Errorf("%v: /etc/hosts no longer readable after the writes: %q", flags, out)
		}
		var dir string
		for id := range e.sandboxDirs() {
			if st, _ := os.ReadFile(filepath.Join(e.root, "c", id, "state.json")); strings.Contains(string(st), `"`+name+`"`) {
				dir = filepath.Join(e.root, "c", id)
			}
		}
		for _, f := range []string{"hosts", "resolv.conf", "hostname"} {
			fi, err := os.Stat(filepath.Join(dir, "etc", f))
			if err != nil {
				t.Fatalf("%v: %v", flags, err)
			}
			if fi.Size() > 64<<10 {
				t.Errorf("%v: the sandbox wrote %d bytes to /etc/%s on the host's disk, past its bound", flags, fi.Size(), f)
			}
		}
		e.must("rm", "-f", name)
	}
}

// serve on a socket path longer than a unix socket's may be (the default
// under a deep --root without XDG_RUNTIME_DIR) refuses at once, naming the
// path and the way out, rather than failing in bind with EINVAL.
func TestServeRefusesTooLongSocketPath(t *testing.T) {
	e := newEnv(t)
	sock := filepath.Join(searchable(t, t.TempDir()), strings.Repeat("s", 110), "slopbox.sock")
	ctx, cancel := context.WithTimeout(context.Background(), fixtures.Patience()/2)
	defer cancel()
	out, err := exec.CommandContext(ctx, e.bin, "--root", e.root, "serve", "--socket", sock).CombinedOutput()
	if ctx.Err() != nil || err == nil || !strings.Contains(string(out), "give --socket a shorter path") {
		t.Errorf("serve --socket <%d bytes>: %v, want a refusal naming --socket:\n%s", len(sock), err, out)
	}
	if _, err := os.Stat(filepath.Dir(sock)); err == nil {
		t.Errorf("serve created %s before refusing", filepath.Dir(sock))
	}
}

// serve --socket in a directory others can write: a .lock or socket name
// planted there as a symlink is refused, and nothing is created where it
// points (the old code created the lock's target, as root anywhere).
func TestServeRefusesPlantedSymlinks(t *testing.T) {
	e := newEnv(t)
	dir := searchable(t, t.TempDir())
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	serve := func(what string) {
		t.Helper()
		// A serve that refuses ends at once; one that started serves on:
		// the bound tells them apart, with room for a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), fixtures.Patience()/2)
		defer cancel()
		out, err := exec.CommandContext(ctx, e.bin, "--root", e.root, "serve", "--socket", sock).CombinedOutput()
		if ctx.Err() != nil {
			t.Errorf("%s: serve started instead of refusing:\n%s", what, out)
		} else if err == nil || !strings.Contains(string(out), "symlink") {
			t.Errorf("%s: serve: %v, want a refusal naming the symlink:\n%s", what, err, out)
		}
		if ents, _ := os.ReadDir(elsewhere); len(ents) > 0 {
			t.Errorf("%s: serve created %s where the symlink points", what, ents[0].Name())
		}
	}
	if err := os.Symlink(filepath.Join(elsewhere, "lock"), sock+".lock"); err != nil {
		t.Fatal(err)
	}
	serve("a .lock symlink")
	os.Remove(sock + ".lock")
	os.Remove(sock)
	if err := os.Symlink(filepath.Join(elsewhere, "sock"), sock); err != nil {
		t.Fatal(err)
	}
	serve("a socket symlink")
	os.Remove(sock)
}

// serve --socket DIR/sub/sock where sub is a symlink a sandbox planted
// (issue 41, case 9): refused naming --socket and the symlink; nothing is
// made where it points (the old code made the lock and the socket
// there, and the missing directories of DIR/sub/new/sock).
func TestServeRefusesSymlinkedSocketDirectory(t *testing.T) {
	e := newEnv(t)
	ws := filepath.Join(searchable(t, t.TempDir()), "ws")
	os.Mkdir(ws, 0o755)
	_, dir, untouched := victims(t)
	e.must("run", "-d", "--name", "box", "--workspace", ws, e.ref, "sleep", "infinity")
	e.must("exec", "box", "ln", "-s", dir, "/workspace/sub")
	for _, sock := range []string{ws + "/sub/s.sock", ws + "/sub/new/s.sock"} {
		ctx, cancel := context.WithTimeout(context.Background(), fixtures.Patience()/2)
		out, err := exec.CommandContext(ctx, e.bin, "--root", e.root, "serve", "--socket", sock).CombinedOutput()
		if ctx.Err() != nil {
			t.Errorf("serve --socket %s: serve started instead of refusing:\n%s", sock, out)
		} else if err == nil || !strings.Contains(string(out), "symlink") || !strings.Contains(string(out), "--socket") {
			t.Errorf("serve --socket %s: %v, want a refusal naming --socket and the symlink:\n%s", sock, err, out)
		}
		cancel()
		untouched("serve --socket " + sock)
		if got := names(ws); !slices.Equal(got, []string{"sub"}) {
			t.Errorf("serve --socket %s: the workspace holds %v", sock, got)
		}
	}
	// A real directory, made as needed, serves.
	sock := filepath.Join(ws, "real", "new", "s.sock")
	e.serveAt(t, sock, nil, "serve", "--socket", sock)
	c := engineClient(sock)
	resp, err := c.Get("http://docker/_ping")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("_ping on %s: %d", sock, resp.StatusCode)
	}
}

// run -d killed after it recorded the sandbox and before the main command
// started (a test hook stops it there): the sandbox is reported exited,
// wait returns, prune removes it (the old code left it Up, kept by prune,
// and wait hung). So is a start killed there.
func TestRunDetachedKilledBeforeCommand(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	killInWindow := func(args ...string) {
		t.Helper()
		cmd := exec.Command(e.bin, append([]string{"--root", e.root}, args...)...)
		cmd.Env = append(os.Environ(), "SLOPBOX_TEST_PAUSE_BEFORE_COMMAND=1")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		got := make(chan string, 1)
		go func() {
			b := make([]byte, 4096)
			var all []byte
			for {
				n, err := stderr.Read(b)
				all = append(all, b[:n]...)
				if bytes.Contains(all, []byte("test hook: paused")) || err != nil {
					got <- string(all)
					io.Copy(io.Discard, stderr)
					return
				}
			}
		}()
		select {
		case out := <-got:
			if !strings.Contains(out, "test hook: paused") {
				t.Fatalf("%v did not reach the window: %s", args, out)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%v did not reach the window", args)
		}
	}
	check := func(what string) {
		t.Helper()
		if out := e.must("ps", "-a", "--format", "{{.Names}} {{.State}}"); !strings.Contains(out, "victim exited") && !strings.Contains(out, "victim created") {
			t.Errorf("%s: ps -a after the kill: %q, want victim created or exited", what, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), fixtures.Patience())
		defer cancel()
		if out, err := exec.CommandContext(ctx, e.bin, "--root", e.root, "wait", "victim").CombinedOutput(); ctx.Err() != nil {
			t.Errorf("%s: wait hung", what)
		} else if err != nil {
			t.Errorf("%s: wait: %v %s", what, err, out)
		}
		e.must("prune")
		if out, code := e.run("", "inspect", "victim"); code == 0 {
			t.Errorf("%s: prune kept it:\n%s", what, out)
		}
	}
	killInWindow("run", "-d", "--name", "victim", e.ref, "sleep", "1000")
	check("run -d")
	e.must("create", "--name", "victim", e.ref, "sleep", "1000")
	killInWindow("start", "victim")
	check("start")
	// Without the kill, a detached command is up, and stays up once its
	// starter is gone.
	e.must("run", "-d", "--name", "fine", e.ref, "sleep", "1000")
	e.must("prune")
	if out := e.must("ps", "--format", "{{.Names}} {{.State}}"); !strings.Contains(out, "fine running") {
		t.Errorf("ps: %q, want fine running", out)
	}
}

// engineJSON sends a request with a JSON body (nil: none) to serve and
// returns the status and the body.
func engineCall(t *testing.T, c *http.Client, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://slopbox/v1.41"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// serve keeps no exec record past its container: 300 execs made through
// it (attached, as docker exec runs them), their container is removed,
// and every exec id answers 404 (the old code kept every record, answering
// for a container that was gone, and grew 21 MB to 298 MB).
func TestServeDropsExecRecords(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	sock := e.serve(t)
	c := engineClient(sock)
	code, out := engineCall(t, c, "POST", "/containers/create?name=execs", map[string]any{"Image": e.ref, "Cmd": []string{"sleep", "1000"}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, out)
	}
	if code, out := engineCall(t, c, "POST", "/containers/execs/start", nil); code != http.StatusNoContent {
		t.Fatalf("start: %d %s", code, out)
	}
	var ids []string
	for i := range 300 { // 225 never started: below the 256 serve keeps per container (TestExecRecordsBounded)
		code, out := engineCall(t, c, "POST", "/containers/execs/exec", map[string]any{"Cmd": []string{"true"}, "Tty": i%8 == 0, "AttachStdout": true, "AttachStderr": true})
		if code != http.StatusCreated {
			t.Fatalf("exec create %d: %d %s", i, code, out)
		}
		var r struct{ Id string }
		json.Unmarshal(out, &r)
		ids = append(ids, r.Id)
		if i%4 == 0 { // and a quarter of them run
			if code, out := engineCall(t, c, "POST", "/exec/"+r.Id+"/start", map[string]any{"Detach": false, "Tty": i%8 == 0}); code != http.StatusOK {
				t.Fatalf("exec start %d: %d %s", i, code, out)
			}
		}
	}
	if code, out := engineCall(t, c, "DELETE", "/containers/execs?force=1", nil); code != http.StatusNoContent {
		t.Fatalf("rm: %d %s", code, out)
	}
	for _, id := range ids {
		if code, out := engineCall(t, c, "GET", "/exec/"+id+"/json", nil); code != http.StatusNotFound {
			t.Fatalf("exec %s of a removed container: %d %s, want 404", id, code, out)
		}
	}
}

// serve bounds request bodies: a JSON body over 1 MiB is refused, and one
// that trickles in (slow loris) is cut off within seconds rather than
// holding its connection forever (the old code read both without limit).
// A long stream (events) outlives that deadline.
func TestServeBoundsRequestBodies(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	sock := e.serve(t)
	c := engineClient(sock)
	events, err := c.Get("http://slopbox/v1.41/events")
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()
	code, out := engineCall(t, c, "POST", "/containers/create?name=big", map[string]any{"Image": e.ref, "Labels": map[string]string{"a": strings.Repeat("x", 2<<20)}})
	if code != http.StatusBadRequest || !strings.Contains(string(out), "larger than") {
		t.Errorf("a 2 MiB create body: %d %s, want 400 saying it is too large", code, out)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1.41/containers/create HTTP/1.1\r\nHost: slopbox\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cut := make(chan time.Duration, 1)
	go func() {
		io.Copy(io.Discard, conn) // ends when serve closes it
		cut <- time.Since(start)
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case d := <-cut:
			t.Logf("the slow body was cut off after %v", d)
			goto stream
		case <-tick.C:
			if time.Since(start) > 25*time.Second {
				t.Fatal("a body sent a byte a second was still being read after 25 s")
			}
			conn.Write([]byte(" "))
		}
	}
stream:
	// The events stream, older than the deadline, still gets events.
	if code, out := engineCall(t, c, "POST", "/containers/create?name=small", map[string]any{"Image": e.ref}); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, out)
	}
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		n, _ := events.Body.Read(b)
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		if !strings.Contains(s, `"Type":"container"`) {
			t.Errorf("events after the deadline: %q", s)
		}
	case <-time.After(fixtures.Patience()):
		t.Error("the events stream got nothing after the body deadline passed")
	}
}

// snapshot diff streams and hashes files: a 3 GB sparse file (free for a
// sandbox to make) and a 4 MiB text file changed on its last line are
// compared with the diff's memory bounded (the old code held whole files:
// 6.8 GB for the sparse one). The large text file is reported modified,
// its lines not counted; a small one still gets its line counts.
func TestSnapshotDiffMemoryBounded(t *testing.T) {
	bin := slopboxBin(t)
	dir := t.TempDir()
	for _, side := range []string{"a", "b"} {
		os.MkdirAll(filepath.Join(dir, side), 0o755)
		text := strings.Repeat("a line of text\n", 4<<20/15)
		small := "one\ntwo\n"
		if side == "b" {
			text += "one more\n"
			small = "one\nthree\nfour\n"
		}
		os.WriteFile(filepath.Join(dir, side, "big.txt"), []byte(text), 0o644)
		os.WriteFile(filepath.Join(dir, side, "small.txt"), []byte(small), 0o644)
	}
	f, err := os.Create(filepath.Join(dir, "b", "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command(bin, "snapshot", "diff", "--json", filepath.Join(dir, "a"), filepath.Join(dir, "b"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("snapshot diff: %v\n%s", err, out)
	}
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // kB
	t.Logf("snapshot diff: max RSS %d kB", rss)
	if rss > 200<<10 {
		t.Errorf("snapshot diff of a 3 GB sparse file took %d kB, want at most 200 MiB", rss)
	}
	var res struct {
		Changes []struct {
			Path           string `json:"path"`
			Change         string `json:"change"`
			Binary         bool   `json:"binary"`
			LinesAdded     int    `json:"lines_added"`
			LinesRemoved   int    `json:"lines_removed"`
			LinesUncounted bool   `json:"lines_uncounted"`
			NewSize        *int64 `json:"new_size"`
		} `json:"changes"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]string{}
	for _, c := range res.Changes {
		got[c.Path] = fmt.Sprintf("%s binary=%v +%d -%d uncounted=%v", c.Change, c.Binary, c.LinesAdded, c.LinesRemoved, c.LinesUncounted)
	}
	want := map[string]string{
		"sparse":    "created binary=true +0 -0 uncounted=false",
		"big.txt":   "modified binary=false +0 -0 uncounted=true",
		"small.txt": "modified binary=false +2 -1 uncounted=false",
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %q, want %q", p, got[p], w)
		}
	}
}
