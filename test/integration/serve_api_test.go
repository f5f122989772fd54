package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// engineDo sends one Engine API request to sock and returns the status and
// body.
func engineDo(t *testing.T, sock, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://slopbox/v1.44"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := engineClient(sock)
	client.Timeout = time.Minute
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// engineText is engineDo of a request without a body, its answer as
// trimmed text.
func engineText(t *testing.T, sock, method, path string) (int, string) {
	t.Helper()
	code, b := engineDo(t, sock, method, path, nil)
	return code, strings.TrimSpace(string(b))
}

// engineJSON is engineDo that wants status want and decodes the body into v.
func engineJSON(t *testing.T, sock, method, path string, body any, want int, v any) {
	t.Helper()
	code, b := engineDo(t, sock, method, path, body)
	if code != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// execStart starts exec id with the start body's Tty, on a raw connection
// (as docker-py does), and returns everything the stream carried.
func execStart(t *testing.T, sock, id string, tty bool) []byte {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body, _ := json.Marshal(map[string]any{"Detach": false, "Tty": tty})
	req, _ := http.NewRequest(http.MethodPost, "http://slopbox/v1.41/exec/"+id+"/start", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("exec start: %d", resp.StatusCode)
	}
	out, _ := io.ReadAll(br)
	return out
}

// TestServeExecStreams: an exec's stream is framed by its start request's
// Tty (docker-py starts a terminal exec with tty=False and reads frames);
// a command that cannot run exits 126 as dockerd's exec, not found
// included, while a command's own 127 stays; top lists only the
// container's processes, not slopbox's init and exec sessions.
// Before: the terminal's raw bytes came unframed (docker-py: "104 is not a
// valid stream"), a missing command gave 127, and top listed 3 processes
// for a container running sleep alone.
func TestServeExecStreams(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "-d", "--name", "ex", e.ref, "sleep", "1000")

	create := func(cmd []string, tty bool) string {
		t.Helper()
		var r struct{ Id string }
		engineJSON(t, sock, http.MethodPost, "/containers/ex/exec", map[string]any{"Cmd": cmd, "Tty": tty, "AttachStdout": true, "AttachStderr": true}, http.StatusCreated, &r)
		return r.Id
	}
	exitCode := func(id string) any {
		t.Helper()
		var r struct{ ExitCode any }
		engineJSON(t, sock, http.MethodGet, "/exec/"+id+"/json", nil, http.StatusOK, &r)
		return r.ExitCode
	}
	// A terminal exec read as frames: one stdout frame of "hi\r\n".
	out := execStart(t, sock, create([]string{"echo", "hi"}, true), false)
	if want := []byte{1, 0, 0, 0, 0, 0, 0, 4, 'h', 'i', '\r', '\n'}; !bytes.Equal(out, want) {
		t.Errorf("terminal exec started with Tty false: %q, want one stdout frame %q", out, want)
	}
	// A plain exec started with Tty: raw.
	if out := execStart(t, sock, create([]string{"echo", "hi"}, false), true); string(out) != "hi\n" {
		t.Errorf("exec started with Tty true: %q, want raw %q", out, "hi\n")
	}
	for _, tty := range []bool{false, true} {
		id := create([]string{"no-such-command"}, tty)
		execStart(t, sock, id, tty)
		if c := exitCode(id); c != float64(126) {
			t.Errorf("exec of a missing command (tty %v): exit %v, want 126", tty, c)
		}
	}
	id := create([]string{"sh", "-c", "exit 127"}, false)
	execStart(t, sock, id, false)
	if c := exitCode(id); c != float64(127) {
		t.Errorf("exec exiting 127 itself: exit %v, want 127", c)
	}

	var top struct{ Processes [][]string }
	engineJSON(t, sock, http.MethodGet, "/containers/ex/top", nil, http.StatusOK, &top)
	if len(top.Processes) != 1 || top.Processes[0][len(top.Processes[0])-1] != "sleep 1000" {
		t.Errorf("top: %q, want the one process sleep 1000", top.Processes)
	}
	must("rm", "-f", "ex")
}

// TestServeLogsUntilAndFollow: logs until= leaves out what came after it
// (docker-py's test_logs_with_until: until=1 gives nothing); a followed
// log of a container that has written nothing answers its headers at once.
// Before: until was ignored, and the headers waited for the first line.
func TestServeLogsUntilAndFollow(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "--name", "said", e.ref, "echo", "hello")
	for _, c := range []struct{ q, want string }{
		{"until=1", ""},
		{"until=" + time.Now().Add(time.Hour).Format(time.RFC3339), "\x01\x00\x00\x00\x00\x00\x00\x06hello\n"},
		{"until=1h", ""},
	} {
		code, b := engineDo(t, sock, http.MethodGet, "/containers/said/logs?stdout=1&"+c.q, nil)
		if code != http.StatusOK || string(b) != c.want {
			t.Errorf("logs?%s: %d %q, want %q", c.q, code, b, c.want)
		}
	}
	if code, b := engineDo(t, sock, http.MethodGet, "/containers/said/logs?stdout=1&until=soon", nil); code != http.StatusBadRequest {
		t.Errorf("logs?until=soon: %d %s, want 400", code, b)
	}

	must("run", "-d", "--name", "quiet", e.ref, "sleep", "1000")
	got := make(chan error, 1)
	go func() {
		client := engineClient(sock)
		client.Timeout = 0
		resp, err := client.Get("http://slopbox/v1.44/containers/quiet/logs?stdout=1&follow=1")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("logs follow: %v", err)
		}
	case <-time.After(fixtures.Patience()):
		t.Errorf("logs follow of a silent container: no response headers after %s", fixtures.Patience())
	}
	must("rm", "-f", "quiet", "said")

	// docker-py's run(remove=True): start, follow the log (its headers
	// come at once now), wait, remove, and only then read what followed.
	must("create", "--name", "brief", e.ref, "echo", "hello world")
	must("start", "brief")
	client := engineClient(sock)
	resp, err := client.Get("http://slopbox/v1.41/containers/brief/logs?stdout=1&follow=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	must("wait", "brief")
	must("rm", "brief")
	if b, _ := io.ReadAll(resp.Body); !bytes.HasSuffix(b, []byte("hello world\n")) {
		t.Errorf("logs followed from the start of a container removed before they were read: %q", b)
	}
}

// TestServeEnvWithoutValue: an Env entry without "=" stays as given in
// Config.Env and is not set in the process, as dockerd (docker-py's
// test_create_with_environment_variable_no_value). Before: it became
// "Foo=" in both.
func TestServeEnvWithoutValue(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	engineJSON(t, sock, http.MethodPost, "/containers/create?name=envs", map[string]any{
		"Image": e.ref, "Cmd": []string{"env"}, "Env": []string{"Foo", "Other=one", "Blank="},
	}, http.StatusCreated, nil)
	var in struct{ Config struct{ Env []string } }
	engineJSON(t, sock, http.MethodGet, "/containers/envs/json", nil, http.StatusOK, &in)
	env := strings.Join(in.Config.Env, "\n") + "\n"
	if !strings.Contains(env, "\nFoo\n") && !strings.HasPrefix(env, "Foo\n") || strings.Contains(env, "Foo=") ||
		!strings.Contains(env, "Other=one\n") || !strings.Contains(env, "Blank=\n") {
		t.Errorf("Config.Env: %q, want Foo as given, Other=one, Blank=", in.Config.Env)
	}
	must("start", "-a", "envs")
	if out := must("logs", "envs"); strings.Contains(out, "Foo") || !strings.Contains(out, "Other=one") {
		t.Errorf("process environment: %q, want Other=one and no Foo", out)
	}
	must("rm", "envs")
}

// TestServeImageNames: images are named as Docker prints them (alpine:
// latest, not index.docker.io/library/alpine:latest) in /images/json, an
// image's inspect, a container's Config.Image (as its create named it)
// and load's "Loaded image:"; the reference filter keeps matching names
// only; /info counts images, not names; a pull of a tag the registry does
// not have answers 404 with dockerd's message. Before: the store's full
// names everywhere, no reference filter, /info counted names, and the
// pull answered 200 with the error inside its stream.
func TestServeImageNames(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("tag", e.ref, "alpine:latest")
	must("tag", e.ref, "library/alpine:3.10")
	must("tag", e.ref, "someone/tool:v1")

	var list []struct {
		Id       string
		RepoTags []string
	}
	engineJSON(t, sock, http.MethodGet, "/images/json", nil, http.StatusOK, &list)
	all := ""
	for _, i := range list {
		all += strings.Join(i.RepoTags, " ") + " "
	}
	for _, want := range []string{"alpine:latest", "alpine:3.10", "someone/tool:v1"} {
		if !strings.Contains(" "+all, " "+want+" ") {
			t.Errorf("/images/json RepoTags %q: no %s", all, want)
		}
	}
	if strings.Contains(all, "docker.io") {
		t.Errorf("/images/json RepoTags %q: Docker Hub's registry shown", all)
	}
	engineJSON(t, sock, http.MethodGet, `/images/json?filters={"reference":["alpine"]}`, nil, http.StatusOK, &list)
	if len(list) != 1 || strings.Join(list[0].RepoTags, " ") != "alpine:3.10 alpine:latest" {
		t.Errorf("/images/json reference=alpine: %+v, want one image tagged alpine:3.10 alpine:latest", list)
	}
	engineJSON(t, sock, http.MethodGet, `/images/json?filters={"reference":["*/tool:v*"]}`, nil, http.StatusOK, &list)
	if len(list) != 1 || strings.Join(list[0].RepoTags, " ") != "someone/tool:v1" {
		t.Errorf("/images/json reference=*/tool:v*: %+v", list)
	}
	var info struct{ Images int }
	engineJSON(t, sock, http.MethodGet, "/info", nil, http.StatusOK, &info)
	if info.Images != 1 {
		t.Errorf("/info Images %d, want 1 (one image, four names)", info.Images)
	}
	var img struct{ RepoTags []string }
	engineJSON(t, sock, http.MethodGet, "/images/alpine/json", nil, http.StatusOK, &img)
	if strings.Contains(strings.Join(img.RepoTags, " "), "docker.io") || len(img.RepoTags) != 4 {
		t.Errorf("image inspect RepoTags %q", img.RepoTags)
	}
	must("create", "--name", "named", "alpine", "true")
	if out := must("inspect", "-f", "{{.Config.Image}}", "named"); out != "alpine\n" {
		t.Errorf("Config.Image %q, want alpine as created", out)
	}
	if out := must("ps", "-a", "--format", "{{.Image}}"); out != "alpine\n" {
		t.Errorf("ps Image %q, want alpine", out)
	}
	must("rm", "named")

	tar := t.TempDir() + "/a.tar"
	must("save", "-o", tar, "alpine:latest")
	must("rmi", "alpine:latest")
	if out := must("load", "-i", tar); out != "Loaded image: alpine:latest\n" {
		t.Errorf("load: %q", out)
	}
	if out, code := e.run("", "load", "-i", tar); code != 0 || !strings.Contains(out, "Loaded image: alpine:latest\n") || strings.Contains(out, "docker.io") {
		t.Errorf("slopbox load: %d %q", code, out)
	}

	missing := strings.TrimSuffix(e.ref, ":latest")
	code, b := engineDo(t, sock, http.MethodPost, "/images/create?fromImage="+missing+"&tag=nosuchtag", nil)
	if code != http.StatusNotFound || !strings.Contains(string(b), "manifest for "+missing+":nosuchtag not found") {
		t.Errorf("pull of a missing tag: %d %s, want 404 manifest for ... not found", code, b)
	}
}

// hijacked sends a POST whose response becomes a raw stream (attach, exec
// start) and returns the connection, past the response's head.
func hijacked(t *testing.T, sock, path string, body any) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://slopbox/v1.41"+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %v %v", path, resp, err)
	}
	return c, br
}

// endsWithin reports whether the stream on br ends (EOF or a reset)
// within d, discarding what it carries.
func endsWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestServeDetachKeys: the detach keys end an attach or a terminal exec
// and leave the container and the command running, as dockerd's: ctrl-p
// ctrl-q by default, detachKeys (attach's query, exec create's body)
// otherwise; other input, a lone ctrl-p included, does not end them; a
// bad sequence is a 400. docker-py's AttachContainerTest::
// test_detach_with_* and ExecTest::test_detach_with_*. Before: the keys
// were ignored and the streams went on until the client gave up.
func TestServeDetachKeys(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "-d", "-i", "-t", "--name", "cat", e.ref, "cat")
	for _, c := range []struct {
		query string
		keys  []byte
	}{
		{"", []byte{0x10, 0x11}},
		{"&detachKeys=ctrl-x", []byte{0x18}},
		{"&detachKeys=ctrl-p,a", []byte{0x10, 'a'}},
	} {
		conn, br := hijacked(t, sock, "/containers/cat/attach?stdin=1&stdout=1&stream=1"+c.query, nil)
		conn.Write([]byte("hello\n\x10x"))
		if endsWithin(conn, br, 500*time.Millisecond) {
			t.Errorf("attach%s: ended before its detach keys", c.query)
		}
		conn.Write(c.keys)
		if !endsWithin(conn, br, fixtures.Patience()) {
			t.Errorf("attach%s: still attached %v after its detach keys", c.query, fixtures.Patience())
		}
	}
	if out := must("inspect", "-f", "{{.State.Running}}", "cat"); out != "true\n" {
		t.Errorf("container after detaching: running %q", out)
	}
	if code, b := engineDo(t, sock, http.MethodPost, "/containers/cat/attach?stdin=1&stream=1&detachKeys=ctrl-", nil); code != http.StatusBadRequest || !strings.Contains(string(b), "detach keys") {
		t.Errorf("attach with bad detach keys: %d %s", code, b)
	}

	for _, keys := range []string{"", "ctrl-p"} {
		var r struct{ Id string }
		engineJSON(t, sock, http.MethodPost, "/containers/cat/exec", map[string]any{"Cmd": []string{"cat"}, "Tty": true,
			"AttachStdin": true, "AttachStdout": true, "detachKeys": keys}, http.StatusCreated, &r)
		conn, br := hijacked(t, sock, "/exec/"+r.Id+"/start", map[string]any{"Tty": true})
		conn.Write([]byte("hi\n"))
		if endsWithin(conn, br, 500*time.Millisecond) {
			t.Errorf("exec with keys %q: ended before its detach keys", keys)
		}
		conn.Write([]byte{0x10, 0x11})
		if !endsWithin(conn, br, fixtures.Patience()) {
			t.Errorf("exec with keys %q: still attached %v after its detach keys", keys, fixtures.Patience())
		}
		var st struct{ Running bool }
		engineJSON(t, sock, http.MethodGet, "/exec/"+r.Id+"/json", nil, http.StatusOK, &st)
		if !st.Running {
			t.Errorf("exec with keys %q: not running after its client detached", keys)
		}
	}
	must("rm", "-f", "cat")
}

// TestServeDiffExportHistory: /containers/{id}/changes (docker diff),
// /containers/{id}/export (docker export) and /images/{name}/history,
// and the CLI's diff; the container's files are read on the host through
// its layers, a running container's too. The race: while the sandbox
// keeps swapping a directory for a symlink to a host directory (which
// exists on the host, not in the sandbox), export and diff never list
// what is in that host directory: every name is opened under its
// parent's descriptor with RESOLVE_NO_SYMLINKS. Before: 404 for all three
// (docker-py's DiffTest and ExportTest).
func TestServeDiffExportHistory(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "--name", "ch", e.ref, "sh", "-c", "touch /test; mkdir -p /a/b; echo x > /a/b/c; rm /bin/ls; ln -s /etc/shadow /a/link; echo y >> /etc/passwd")
	want := "A /a\nA /a/b\nA /a/b/c\nA /a/link\nC /bin\nD /bin/ls\nC /etc\nC /etc/passwd\nA /test\n"
	if out := must("diff", "ch"); out != want {
		t.Errorf("docker diff:\n%s\nwant:\n%s", out, want)
	}
	if out, code := e.run("", "diff", "ch"); code != 0 || out != want {
		t.Errorf("slopbox diff: %d\n%s", code, out)
	}
	tarball := t.TempDir() + "/ch.tar"
	must("export", "-o", tarball, "ch")
	list, err := exec.Command("tar", "tvf", tarball).CombinedOutput()
	if err != nil {
		t.Fatalf("tar tvf of the export: %v\n%s", err, list)
	}
	for _, w := range []string{" a/b/c\n", " a/link -> /etc/shadow\n", " test\n", " bin/sh -> busybox\n", " bin/busybox\n"} {
		if !strings.Contains(string(list), w) {
			t.Errorf("export has no%s", w)
		}
	}
	if strings.Contains(string(list), " bin/ls") {
		t.Errorf("export has the deleted bin/ls")
	}
	if out, _ := exec.Command("tar", "xOf", tarball, "etc/passwd").Output(); !strings.HasSuffix(string(out), "\ny\n") {
		t.Errorf("export's etc/passwd does not end with the line the container added: %q", out)
	}
	var hist []struct {
		Id        string
		CreatedBy string
		Tags      []string
	}
	engineJSON(t, sock, http.MethodGet, "/images/"+e.ref+"/history", nil, http.StatusOK, &hist)
	if len(hist) == 0 || !strings.HasPrefix(hist[0].Id, "sha256:") || len(hist[0].Tags) != 1 {
		t.Errorf("history: %+v", hist)
	}
	if code, _ := engineDo(t, sock, http.MethodGet, "/images/nosuch:image/history", nil); code != http.StatusNotFound {
		t.Errorf("history of a missing image: %d", code)
	}

	// The race: the container's upper layer holds a directory d and a
	// symlink s to a host directory; the names are swapped with
	// renameat2(RENAME_EXCHANGE) meanwhile, as the sandbox could.
	host := searchable(t, t.TempDir())
	if err := os.WriteFile(host+"/host-marker", []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	must("run", "--name", "flip", e.ref, "sh", "-c", "mkdir -p /x/d && touch /x/d/inner && ln -s "+host+" /x/s")
	id := strings.TrimSpace(must("inspect", "-f", "{{.Id}}", "flip"))
	stop := fixtures.FlipNames(t, filepath.Join(e.root, "c", id, "upper", "x"), "d", "s")
	deadline := time.Now().Add(4 * time.Second)
	tries, inner := 0, 0
	for time.Now().Before(deadline) {
		tries++
		code, b := engineDo(t, sock, http.MethodGet, "/containers/flip/export", nil)
		if bytes.Contains(b, []byte("host-marker")) {
			t.Fatalf("export %d followed the sandbox's symlink to the host directory", tries)
		}
		if code == http.StatusOK && bytes.Contains(b, []byte("x/d/inner")) {
			inner++
		}
		_, b = engineDo(t, sock, http.MethodGet, "/containers/flip/changes", nil)
		if bytes.Contains(b, []byte("host-marker")) {
			t.Fatalf("diff %d followed the sandbox's symlink to the host directory", tries)
		}
	}
	stop()
	t.Logf("%d exports and diffs while the sandbox swapped, %d saw the directory", tries, inner)
	must("rm", "-f", "flip", "ch")
}

// TestServeArchiveStopped: GET and HEAD /containers/{id}/archive (docker
// cp out of a container) of a created or stopped container, read on the
// host through its layers: a file, a directory, DIR/., a symlink stored
// as one, symlinks on the way resolved inside the container (a relative
// one and one to an absolute path), 404 for a missing path. The race:
// while the upper layer's directory and a symlink to a host directory
// swap names (renameat2 RENAME_EXCHANGE), no copy ever holds the host
// directory's file. Before: 409 (docker-py's ArchiveTest::
// test_get_file_archive_from_container, test_get_file_stat_from_container).
func TestServeArchiveStopped(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "--name", "st", e.ref, "sh", "-c", "mkdir -p /a/b && echo x > /a/b/c && ln -s /etc/shadow /a/link && ln -s b /a/rel && ln -s /a /abs")
	dst := t.TempDir()
	must("cp", "st:/a/b/c", dst+"/c")
	must("cp", "st:/a", dst+"/a")
	must("cp", "st:/a/.", dst+"/dot")
	must("cp", "st:/a/rel/c", dst+"/relc")
	must("cp", "st:/abs/b/c", dst+"/absc")
	for _, f := range []string{"c", "a/b/c", "dot/b/c", "relc", "absc"} {
		if b, err := os.ReadFile(dst + "/" + f); err != nil || string(b) != "x\n" {
			t.Errorf("cp of a stopped container: %s: %q %v", f, b, err)
		}
	}
	for _, l := range []string{"a/link", "dot/link"} {
		if target, err := os.Readlink(dst + "/" + l); err != nil || target != "/etc/shadow" {
			t.Errorf("cp of a stopped container: %s: not the symlink: %q %v", l, target, err)
		}
	}
	if out, code := dockerCLI(t, debianDocker, sock, "", "cp", "st:/nonexistent", dst+"/n"); code == 0 || !strings.Contains(out, "Could not find the file") && !strings.Contains(out, "No such container:path") {
		t.Errorf("cp of a missing path: %d %q", code, out)
	}
	must("create", "--name", "cr", e.ref, "true")
	must("cp", "cr:/etc/passwd", dst+"/passwd")
	if b, _ := os.ReadFile(dst + "/passwd"); !strings.HasPrefix(string(b), "root:") {
		t.Errorf("cp of a created container: %q", b)
	}
	if code, _ := engineDo(t, sock, http.MethodHead, "/containers/cr/archive?path=/etc/passwd", nil); code != http.StatusOK {
		t.Errorf("HEAD archive of a created container: %d", code)
	}

	host := searchable(t, t.TempDir())
	if err := os.WriteFile(host+"/host-marker", []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	must("run", "--name", "flip", e.ref, "sh", "-c", "mkdir -p /x/d && touch /x/d/inner && ln -s "+host+" /x/s")
	id := strings.TrimSpace(must("inspect", "-f", "{{.Id}}", "flip"))
	stop := fixtures.FlipNames(t, filepath.Join(e.root, "c", id, "upper", "x"), "d", "s")
	deadline := time.Now().Add(4 * time.Second)
	tries, inner := 0, 0
	for time.Now().Before(deadline) {
		for _, p := range []string{"/x", "/x/d", "/x/d/.", "/x/d/inner", "/x/d/host-marker"} {
			tries++
			code, b := engineDo(t, sock, http.MethodGet, "/containers/flip/archive?path="+p, nil)
			if bytes.Contains(b, []byte("host-marker")) && code == http.StatusOK {
				t.Fatalf("archive of %s (try %d) followed the sandbox's symlink to the host directory", p, tries)
			}
			if code == http.StatusOK && bytes.Contains(b, []byte("inner")) {
				inner++
			}
		}
	}
	stop()
	t.Logf("%d copies while the names swapped, %d saw the directory", tries, inner)
	must("rm", "-f", "flip", "st", "cr")
}

// TestServeContainerPruneSpace: /containers/prune reports the bytes the
// removed containers had written (docker-py's PruneTest::
// test_prune_containers). Before: always 0.
func TestServeContainerPruneSpace(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "--name", "wrote", e.ref, "sh", "-c", "echo hello > /data.txt")
	must("run", "-d", "--name", "runs", e.ref, "sleep", "1000")
	var r struct {
		ContainersDeleted []string
		SpaceReclaimed    int64
	}
	engineJSON(t, sock, http.MethodPost, "/containers/prune", nil, http.StatusOK, &r)
	if len(r.ContainersDeleted) != 1 || r.SpaceReclaimed < int64(len("hello\n")) {
		t.Errorf("prune: %+v, want one container and at least 6 bytes", r)
	}
	must("rm", "-f", "runs")
}

// TestServeImport: POST /images/create?fromSrc=- (docker import) makes an
// image of the request body's root filesystem, with changes applied to
// its config, and answers the image's id as the last status; fromSrc may
// be a URL on the loopback, not elsewhere; slopbox import does the same
// from a file. Before: 400 "fromImage is required" (docker-py's
// ImportImageTest).
func TestServeImport(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "--name", "src", e.ref, "sh", "-c", "echo imported > /marker")
	tarball := t.TempDir() + "/fs.tar"
	must("export", "-o", tarball, "src")
	fs, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, `http://slopbox/v1.41/images/create?fromSrc=-&repo=test/imported&tag=v1&changes=USER+foobar&changes=CMD+["echo"]`, bytes.NewReader(fs))
	req.Header.Set("Content-Type", "application/tar")
	resp, err := engineClient(sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var last struct{ Status, Error string }
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(last.Status, "sha256:") {
		t.Fatalf("import: %d %s", resp.StatusCode, body)
	}
	var img struct {
		Id     string
		Config struct {
			Cmd  []string
			User string
		}
	}
	engineJSON(t, sock, http.MethodGet, "/images/test/imported:v1/json", nil, http.StatusOK, &img)
	if img.Id != last.Status || strings.Join(img.Config.Cmd, " ") != "echo" || img.Config.User != "foobar" {
		t.Errorf("imported image: %+v, want id %s, Cmd [echo], User foobar", img, last.Status)
	}
	if out := must("run", "--rm", "-u", "0", "test/imported:v1", "cat", "/marker"); out != "imported\n" {
		t.Errorf("a container of the imported image: %q", out)
	}

	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(fs) })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	code, b := engineDo(t, sock, http.MethodPost, "/images/create?fromSrc=http://"+ln.Addr().String()+"/fs.tar&repo=test/fromurl", nil)
	if code != http.StatusOK || !strings.Contains(string(b), `"status":"sha256:`) {
		t.Errorf("import from a loopback URL: %d %s", code, b)
	}
	must("image", "inspect", "test/fromurl")
	if code, b := engineDo(t, sock, http.MethodPost, "/images/create?fromSrc=http://192.0.2.1/fs.tar", nil); code != http.StatusBadRequest {
		t.Errorf("import from a remote URL: %d %s, want 400", code, b)
	}
	if code, b := engineDo(t, sock, http.MethodPost, "/images/create?fromSrc=-&changes=RUN+true", nil); code != http.StatusBadRequest {
		t.Errorf("import with RUN: %d %s, want 400", code, b)
	}

	if out, code := e.run("", "import", "-c", "ENV A=b", tarball, "cli/imported"); code != 0 || !strings.Contains(out, "sha256:") {
		t.Fatalf("slopbox import: %d %s", code, out)
	}
	if out := must("image", "inspect", "-f", "{{.Config.Env}}", "cli/imported"); out != "[A=b]\n" {
		t.Errorf("slopbox import's Env: %q", out)
	}
	must("rm", "src")
	must("rmi", "test/imported:v1", "test/fromurl", "cli/imported")
}

// readFrames reads the multiplexed stream on br until it ends, within d,
// and returns what its stdout and stderr frames carried, and whether it
// ended (EOF) rather than ran past d.
func readFrames(c net.Conn, br *bufio.Reader, d time.Duration) (stdout, stderr string, ended bool) {
	c.SetReadDeadline(time.Now().Add(d))
	var out, errb strings.Builder
	hdr := make([]byte, 8)
	for {
		if _, err := io.ReadFull(br, hdr); err != nil {
			// A reset ends it too: the server may close without reading
			// what the client sent.
			return out.String(), errb.String(), errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
		}
		n := int(hdr[4])<<24 | int(hdr[5])<<16 | int(hdr[6])<<8 | int(hdr[7])
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return out.String(), errb.String(), false
		}
		if hdr[0] == 2 {
			errb.Write(b)
		} else {
			out.Write(b)
		}
	}
}

// TestServeAttachLogs: attach's logs and stream parameters, as dockerd's.
// logs=1 replays the log (both runs' output, the streams asked for) and
// without stream=1 the attach ends there, on a running or a stopped
// container; with stream=1 the replay is followed by the live output,
// nothing twice and nothing missed between them. docker-py's
// AttachContainerTest::test_attach_no_stream. Before: both were
// ignored, so attach(stream=False, logs=True) of a stopped container
// never returned, and of a running one left out what was already logged.
func TestServeAttachLogs(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "--name", "done", e.ref, "sh", "-c", "echo one; echo two >&2")
	must("start", "-a", "done")
	for _, c := range []struct{ query, stdout, stderr string }{
		{"logs=1&stdout=1&stderr=1", "one\none\n", "two\ntwo\n"},
		{"logs=1&stdout=1", "one\none\n", ""},
		{"logs=1&stream=0&stderr=1", "", "two\ntwo\n"},
		{"stdout=1&stderr=1", "", ""},
		{"logs=1&stream=no&stdout=1", "one\none\n", ""}, // dockerd's booleans
	} {
		conn, br := hijacked(t, sock, "/containers/done/attach?"+c.query, nil)
		stdout, stderr, ended := readFrames(conn, br, fixtures.Patience())
		if !ended || stdout != c.stdout || stderr != c.stderr {
			t.Errorf("attach?%s of a stopped container: stdout %q stderr %q, ended %v; want %q %q, ended", c.query, stdout, stderr, ended, c.stdout, c.stderr)
		}
	}

	// Bad detach keys are refused whatever else is asked, as dockerd's.
	if code, b := engineDo(t, sock, http.MethodPost, "/containers/done/attach?logs=1&stdout=1&detachKeys=ctrl-", nil); code != http.StatusBadRequest {
		t.Errorf("attach?logs=1 with bad detach keys: %d %s, want 400", code, b)
	}

	must("run", "-d", "--name", "live", e.ref, "sh", "-c",
		"echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second")
	waitFor(t, "the first line in live's log", func() bool {
		out, _ := dockerCLI(t, debianDocker, sock, "", "logs", "live")
		return out == "first\n"
	})
	conn, br := hijacked(t, sock, "/containers/live/attach?logs=1&stdout=1", nil)
	if stdout, _, ended := readFrames(conn, br, fixtures.Patience()); !ended || stdout != "first\n" {
		t.Errorf("attach?logs=1 of a running container: %q, ended %v; want \"first\\n\", ended", stdout, ended)
	}
	conn, br = hijacked(t, sock, "/containers/live/attach?logs=1&stream=1&stdout=1", nil)
	must("exec", "live", "touch", "/tmp/go")
	if stdout, _, ended := readFrames(conn, br, fixtures.Patience()); !ended || stdout != "first\nsecond\n" {
		t.Errorf("attach?logs=1&stream=1: %q, ended %v; want \"first\\nsecond\\n\", ended at the command's end", stdout, ended)
	}
}

// TestServeVersionIsDockers (issue 42 point 5): /version and /info answer
// the Docker engine release of the API level served, as semver, so that
// clients' version checks pass (Inspect AI's docker sandbox wants at
// least 24.0.6; it refused slopbox's git hash), with slopbox's own
// version among the components.
func TestServeVersionIsDockers(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	var v struct {
		Version, ApiVersion string
		Components          []struct{ Name, Version string }
	}
	engineJSON(t, sock, http.MethodGet, "/version", nil, http.StatusOK, &v)
	if v.Version != "25.0.0" || v.ApiVersion != "1.44" {
		t.Errorf("/version: Version %q ApiVersion %q, want 25.0.0 and 1.44", v.Version, v.ApiVersion)
	}
	own := false
	for _, c := range v.Components {
		own = own || c.Name == "slopbox" && c.Version != ""
	}
	if !own {
		t.Errorf("/version components %+v: no slopbox version", v.Components)
	}
	must := dockerMust(t, sock)
	if out := strings.TrimSpace(must("version", "--format", "{{.Server.Version}}")); out != "25.0.0" {
		t.Errorf("docker version Server.Version: %q", out)
	}
	if out := strings.TrimSpace(must("info", "--format", "{{.ServerVersion}}")); out != "25.0.0" {
		t.Errorf("docker info ServerVersion: %q", out)
	}
}
