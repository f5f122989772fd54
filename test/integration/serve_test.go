package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// serve starts `slopbox serve` on e's state root and returns its socket;
// the server is stopped (SIGTERM, as a user would) when the test ends.
func (e *env) serve(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(searchable(t, t.TempDir()), "slopbox.sock")
	return e.serveAt(t, sock, nil, "serve", "--socket", sock)
}

// serveAt runs slopbox with args (global flags, then serve and its own),
// with env added to the environment, and waits for it to listen on sock;
// it is stopped as serve's is.
func (e *env) serveAt(t *testing.T, sock string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(e.bin, append([]string{"--root", e.root}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var log fixtures.Buffer // read while serve writes it
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve exited with %v after SIGTERM:\n%s", err, log.String())
			}
		case <-time.After(fixtures.Patience()):
			cmd.Process.Kill()
			t.Errorf("serve did not exit on SIGTERM")
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", log.String())
		}
		if _, err := os.Stat(sock); err == nil {
			t.Errorf("serve left its socket behind")
		}
	})
	var fi os.FileInfo
	fixtures.Eventually(t, "serve listening", func() (bool, string) {
		var err error
		fi, err = os.Stat(sock)
		return err == nil, log.String()
	})
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	return sock
}

// dockerCLI runs the docker client bin against sock.
func dockerCLI(t *testing.T, bin, sock, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+sock, "DOCKER_CONFIG="+t.TempDir())
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("docker %v hung:\n%s", args, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// debianDocker is Debian 12's docker CLI (docker.io 20.10), the one the
// tests need: scripts/deps.sh installs it.
const debianDocker = "/usr/bin/docker"

// dockerClients are the docker CLIs the tests drive serve with: Debian
// 12's own (docker.io 20.10, API 1.41), which scripts/deps.sh installs,
// and, where the machine has it, a current one (these machines ship a
// docker 28 client in /usr/local/bin; a fresh Debian does not).
func dockerClients(t *testing.T) map[string]string {
	debian := debianDocker
	if _, err := os.Stat(debian); err != nil {
		t.Fatalf("Debian's docker CLI (package docker.io, which scripts/deps.sh installs) is missing: %v", err)
	}
	clients := map[string]string{"debian-docker.io": debian}
	if _, err := os.Stat("/usr/local/bin/docker"); err == nil {
		clients["docker-28"] = "/usr/local/bin/docker"
	}
	return clients
}

// TestServeDockerCLI: each docker CLI drives slopbox serve, and what it
// makes is the CLI's too (one state root).
func TestServeDockerCLI(t *testing.T) {
	clients := dockerClients(t)
	for _, name := range []string{"debian-docker.io", "docker-28"} {
		t.Run(name, func(t *testing.T) {
			bin, ok := clients[name]
			if !ok {
				t.Skip("optional extra: no docker 28 client in /usr/local/bin on this machine (Debian's client ran)")
			}
			serveDockerCLI(t, bin)
		})
	}
}

func serveDockerCLI(t *testing.T, dockerBin string) {
	e := newEnv(t)
	sock := e.serve(t)
	docker := func(stdin string, args ...string) (string, int) {
		t.Helper()
		return dockerCLI(t, dockerBin, sock, stdin, args...)
	}
	must := func(args ...string) string {
		t.Helper()
		out, code := docker("", args...)
		if code != 0 {
			t.Fatalf("docker %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	if out := must("version", "--format", "{{.Server.APIVersion}} {{.Server.Os}}"); out != "1.44 linux\n" {
		t.Errorf("version: %q", out)
	}
	if out := must("info", "--format", "{{.ServerVersion}}"); strings.TrimSpace(out) == "" {
		t.Errorf("info: %q", out)
	}
	must("pull", e.ref)
	if out := must("images", "--format", "{{.Repository}}:{{.Tag}}"); !strings.Contains(out, "it/busybox:latest") {
		t.Errorf("images: %q", out)
	}
	if out := must("run", "--rm", e.ref, "echo", "hi"); out != "hi\n" {
		t.Errorf("run --rm echo hi: %q", out)
	}
	if out, code := docker("", "run", "--rm", e.ref, "sh", "-c", "echo out; echo err >&2; exit 3"); code != 3 || !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") {
		t.Errorf("run exit 3: %d %q", code, out)
	}
	if out, code := docker("", "run", "--rm", e.ref, "no-such-command"); code != 127 || !strings.Contains(out, "executable file not found") {
		t.Errorf("run of a missing command: %d %q", code, out)
	}
	id := strings.TrimSpace(must("run", "-d", "--name", "s1", e.ref, "sh", "-c", "echo started; exec sleep infinity"))
	if len(id) < 12 {
		t.Fatalf("run -d printed %q", id)
	}
	if out := must("exec", "s1", "sh", "-c", "echo $0; id -u", "exec-out"); out != "exec-out\n0\n" {
		t.Errorf("exec: %q", out)
	}
	if out, code := docker("piped\n", "exec", "-i", "s1", "cat"); code != 0 || out != "piped\n" {
		t.Errorf("exec -i: %d %q", code, out)
	}
	if _, code := docker("", "exec", "s1", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exec exit 7: %d", code)
	}
	if out := must("ps", "--format", "{{.Names}} {{.State}}"); !strings.Contains(out, "s1 running") {
		t.Errorf("ps: %q", out)
	}
	if out := must("inspect", "--format", "{{.State.Status}} {{.Name}}", "s1"); out != "running /s1\n" {
		t.Errorf("inspect: %q", out)
	}
	if out := must("logs", "s1"); out != "started\n" {
		t.Errorf("logs: %q", out)
	}
	// The CLI sees and drives what the server made, and the other way round.
	if out := e.must("exec", "s1", "echo", "from-cli"); out != "from-cli\n" {
		t.Errorf("slopbox exec into a served container: %q", out)
	}
	e.must("run", "-d", "--name", "c1", e.ref, "sleep", "infinity")
	if out := must("exec", "c1", "echo", "from-docker"); out != "from-docker\n" {
		t.Errorf("docker exec into a CLI-made sandbox: %q", out)
	}
	must("rm", "-f", "c1")

	// cp both ways.
	dir := searchable(t, t.TempDir())
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("copied in\n"), 0o644)
	must("cp", filepath.Join(dir, "in.txt"), "s1:/tmp/in.txt")
	if out := must("exec", "s1", "cat", "/tmp/in.txt"); out != "copied in\n" {
		t.Errorf("cp in: %q", out)
	}
	must("exec", "s1", "sh", "-c", "mkdir -p /tmp/d/sub && echo made > /tmp/d/sub/f && chmod 640 /tmp/d/sub/f")
	must("cp", "s1:/tmp/d", filepath.Join(dir, "d"))
	if b, err := os.ReadFile(filepath.Join(dir, "d", "sub", "f")); err != nil || string(b) != "made\n" {
		t.Errorf("cp out: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "d", "sub", "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("cp out kept no mode: %v %v", fi, err)
	}
	if out, code := docker("", "cp", "s1:/no/such", dir); code == 0 || !strings.Contains(out, "Could not find the file /no/such") && !strings.Contains(out, "No such container:path: s1:/no/such") {
		t.Errorf("cp of a missing path: %d %q", code, out)
	}

	// logs -f follows until the container stops; wait gives its code.
	must("run", "-d", "--name", "f1", e.ref, "sh", "-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done; exit 5")
	if out := must("logs", "-f", "f1"); out != "line1\nline2\nline3\n" {
		t.Errorf("logs -f: %q", out)
	}
	if out := must("wait", "f1"); out != "5\n" {
		t.Errorf("wait: %q", out)
	}
	// exec -it through a pseudo-terminal: the terminal's size, job control.
	// A client of API 1.41 (Debian's 20.10) sizes the terminal with a
	// resize request after the start, as it does with dockerd, so the
	// command waits (bounded) for the size rather than racing it.
	const waitSize = `i=0; while [ "$(stty size)" != "33 101" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; `
	cfg := t.TempDir()
	out, code := e.script(t, "DOCKER_HOST=unix://"+sock+" DOCKER_CONFIG="+cfg+" "+dockerBin+" exec -it s1 sh -c '"+waitSize+"tty; stty size; exit 6'")
	if code != 6 || !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "33 101") {
		t.Errorf("exec -it: %d %q", code, out)
	}

	// run -i passes stdin to the main command and ends at its end; run -it
	// gives it a terminal of the client's size.
	if out, code := docker("piped\nlines\n", "run", "-i", "--rm", e.ref, "cat"); code != 0 || out != "piped\nlines\n" {
		t.Errorf("run -i: %d %q", code, out)
	}
	out, code = e.script(t, "DOCKER_HOST=unix://"+sock+" DOCKER_CONFIG="+cfg+" "+dockerBin+" run -it --rm "+e.ref+" sh -c '"+waitSize+"tty; stty size; read l; echo got-$l; exit 4'",
		scriptStep{"the terminal's size printed", func(out string) bool { return strings.Contains(out, "33 101") }, "typed\n"})
	if code != 4 || !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "33 101") || !strings.Contains(out, "got-typed") {
		t.Errorf("run -it: %d %q", code, out)
	}
	// All of a long output (about 6 MiB as the log keeps it, within its
	// bound of 2 x 8 MiB) reaches the attached client, though the
	// container is removed as it ends. Beyond the bound a reader that
	// falls behind is told it missed output (TestLogBoundedWithSlowFollower):
	// the log is bounded whatever its readers do.
	out = must("run", "--rm", e.ref, "sh", "-c", "seq 1 100000; echo END")
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 100001 || lines[99999] != "100000" || lines[100000] != "END" {
		t.Errorf("run with a long output: %d lines, ending %q", len(lines), out[max(0, len(out)-40):])
	}

	// Images: save, load, tag, rmi, a missing one.
	tarball := filepath.Join(dir, "img.tar")
	must("save", "-o", tarball, e.ref)
	if out := must("load", "-i", tarball); !strings.Contains(out, "Loaded image") {
		t.Errorf("load: %q", out)
	}
	must("tag", e.ref, "example.com/copy:v1")
	if out := must("image", "inspect", "--format", "{{.Os}}", "example.com/copy:v1"); out != "linux\n" {
		t.Errorf("image inspect: %q", out)
	}
	if out, code := docker("", "image", "inspect", "example.com/nosuch:v1"); code != 1 || !strings.Contains(out, "No such image") {
		t.Errorf("image inspect of a missing image: %d %q", code, out)
	}

	must("kill", "s1")
	if out, code := docker("", "rm", "s1"); code != 0 {
		t.Errorf("rm of a killed container: %d %q", code, out)
	}
	must("rm", "-f", "f1")
	if out, code := docker("", "rm", "nosuch"); code != 1 || !strings.Contains(out, "No such container: nosuch") {
		t.Errorf("rm of a missing container: %d %q", code, out)
	}
	if out, code := docker("", "run", "--rm", "--privileged", e.ref, "true"); code != 125 || !strings.Contains(out, "privileged") {
		t.Errorf("run --privileged: %d %q", code, out)
	}
	// Bridge networking and a published port, to a server bound to the
	// sandbox's loopback; docker port and ps read them back.
	hp := freePort(t)
	must("run", "-d", "--name", "web", "--network", "bridge", "-p", fmt.Sprintf("%d:8000", hp), e.ref,
		"sh", "-c", "mkdir /w && echo served > /w/i && httpd -f -p 127.0.0.1:8000 -h /w")
	var body string
	waitFor(t, "the published port", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/i", hp))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200
	})
	if body != "served\n" {
		t.Errorf("GET through docker run -p: %q", body)
	}
	if out := must("port", "web"); out != fmt.Sprintf("8000/tcp -> 127.0.0.1:%d\n", hp) {
		t.Errorf("docker port: %q", out)
	}
	if out := must("ps", "--format", "{{.Ports}}"); !strings.Contains(out, fmt.Sprintf("127.0.0.1:%d->8000/tcp", hp)) {
		t.Errorf("docker ps ports: %q", out)
	}
	// Its network by name, as dockerd shows a container's (no address:
	// slirp4netns's is the sandbox's own, see TestBridgeNetwork).
	if out := must("inspect", "-f", "{{.NetworkSettings.IPAddress}}|{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{$v.IPAddress}}{{end}}", "web"); out != "|bridge \n" {
		t.Errorf("docker inspect's network settings: %q", out)
	}
	if out := must("ps", "--filter", "name=web", "--format", "{{.Networks}}"); out != "bridge\n" {
		t.Errorf("docker ps networks: %q", out)
	}
	// The command as dockerd lists it: an argument with a space quoted.
	if out := must("ps", "--filter", "name=web", "--no-trunc", "--format", "{{.Command}}"); out != `"sh -c 'mkdir /w && echo served > /w/i && httpd -f -p 127.0.0.1:8000 -h /w'"`+"\n" {
		t.Errorf("docker ps command: %q", out)
	}
	// pause and unpause.
	must("pause", "web")
	if out := must("ps", "--format", "{{.Status}}"); !strings.Contains(out, "(Paused)") {
		t.Errorf("docker ps of a paused container: %q", out)
	}
	if out, code := docker("", "exec", "web", "true"); code == 0 {
		t.Errorf("docker exec into a paused container: %q", out)
	}
	if out, code := docker("", "unpause", "s-nosuch"); code != 1 {
		t.Errorf("docker unpause of a missing container: %d %q", code, out)
	}
	must("unpause", "web")
	must("exec", "web", "true")
	must("rm", "-f", "web")
	if out := must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("containers left: %q", out)
	}
}

// TestServeProtocol: version negotiation, Docker's errors for what is not
// served (never a hang), and --idle-exit.
func TestServeProtocol(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 10 * time.Second}
	for _, c := range []struct {
		method, path string
		code         int
		msg          string
	}{
		{"GET", "/_ping", 200, "OK"},
		{"GET", "/v1.24/version", 200, `"ApiVersion":"1.44"`},
		{"GET", "/v1.99/version", 400, "is too new. Maximum supported API version is 1.44"},
		{"GET", "/v1.12/version", 400, "is too old. Minimum supported API version is 1.24"},
		{"GET", "/v1.44/swarm", 404, "GET /swarm is not served by slopbox"},
		{"POST", "/v1.44/session", 404, "POST /session is not served by slopbox"},
		{"GET", "/v1.44/containers/nosuch/json", 404, "No such container: nosuch"},
		{"POST", "/v1.44/containers/nosuch/pause", 404, "No such container"},
	} {
		req, _ := http.NewRequest(c.method, "http://slopbox"+c.path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", c.method, c.path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(body), c.msg) || resp.Header.Get("Api-Version") != "1.44" {
			t.Errorf("%s %s: %d %q (Api-Version %q), want %d with %q", c.method, c.path, resp.StatusCode, body, resp.Header.Get("Api-Version"), c.code, c.msg)
		}
		if c.code >= 400 && resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: error Content-Type %q", c.method, c.path, resp.Header.Get("Content-Type"))
		}
	}
	// What the caller got wrong is a 400 naming it; a name may carry
	// Docker's leading slash.
	e.must("pull", "-q", e.ref)
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := client.Post("http://slopbox"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	img := `"Image":"` + e.ref + `","Cmd":["sleep","infinity"]`
	for _, c := range []struct{ path, body, msg string }{
		{"/v1.44/containers/create?name=bad%20name", "{" + img + "}", "invalid sandbox name"},
		{"/v1.44/containers/create", "{" + img + `,"HostConfig":{"PidMode":"container:x"}}`, "is not supported (every sandbox has its own)"},
		{"/v1.44/containers/create", "{" + img + `,"HostConfig":{"Binds":["/tmp:/x:zz"]}}`, "is not supported (ro, rw, U)"},
		{"/v1.44/containers/create", "{" + img + `,"HostConfig":{"Memory":1000}}`, "Minimum memory limit"},
	} {
		if code, body := post(c.path, c.body); code != 400 || !strings.Contains(body, c.msg) {
			t.Errorf("POST %s %s: %d %s, want 400 with %q", c.path, c.body, code, body, c.msg)
		}
	}
	if code, body := post("/v1.44/containers/create?name=/slashed", "{"+img+"}"); code != 201 {
		t.Errorf("create with a leading slash: %d %s", code, body)
	}
	if code, body := post("/v1.44/containers/slashed/start", ""); code != 204 {
		t.Errorf("start: %d %s", code, body)
	}
	// wait on a container removed by force while it runs: 137, as Docker.
	// The 200 header is the handshake: the wait holds from when it comes.
	resp, err := client.Post("http://slopbox/v1.44/containers/slashed/wait?condition=removed", "application/json", nil)
	if err != nil {
		t.Fatalf("POST wait: %v", err)
	}
	waited := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		waited <- string(b)
	}()
	req, _ := http.NewRequest("DELETE", "http://slopbox/v1.44/containers/slashed?force=1", nil)
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 204 {
		t.Errorf("rm -f: %v %v", resp, err)
	}
	if body := <-waited; !strings.Contains(body, `"StatusCode":137`) {
		t.Errorf("wait after rm -f: %s", body)
	}

	// A second server on the same socket is refused; --idle-exit ends one.
	if out, code := e.run("", "serve", "--socket", sock); code == 0 || !strings.Contains(out, "in use by another server") {
		t.Errorf("a second server on a live socket: %d %q", code, out)
	}
	// A client that attaches and goes away does not keep a server busy:
	// the attach ends, and --idle-exit ends the server.
	e.must("pull", "-q", e.ref)
	id := strings.TrimSpace(e.must("create", e.ref, "echo", "never started"))
	idleSock := filepath.Join(searchable(t, t.TempDir()), "attach.sock")
	srv := exec.Command(e.bin, "--root", e.root, "serve", "--socket", idleSock, "--idle-exit", "1s")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() { srv.Process.Kill() })
	var conn net.Conn
	fixtures.Eventually(t, "serve listening on "+idleSock, func() (bool, string) {
		var err error
		conn, err = net.Dial("unix", idleSock)
		return err == nil, fmt.Sprint(err)
	})
	io.WriteString(conn, "POST /v1.44/containers/"+id+"/attach?stream=1&stdout=1&stderr=1 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	head := make([]byte, 64)
	if n, _ := conn.Read(head); !strings.HasPrefix(string(head[:n]), "HTTP/1.1 101") {
		t.Errorf("attach: %q", head[:n])
	}
	conn.Close()
	select {
	case <-exited:
	case <-time.After(fixtures.Patience()):
		t.Errorf("a server whose attached client went away did not idle-exit")
	}
	e.must("rm", id)

	idle := filepath.Join(searchable(t, t.TempDir()), "idle.sock")
	start := time.Now()
	if out, code := e.run("", "serve", "--socket", idle, "--idle-exit", "300ms"); code != 0 || !strings.Contains(out, "--idle-exit") {
		t.Errorf("serve --idle-exit: %d %q", code, out)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("--idle-exit 300ms took %v", time.Since(start))
	}
}

// TestServeDockerPy: the Docker SDK for Python (docker-py, Debian's
// python3-docker) makes SlopCodeBench's calls against slopbox serve.
func TestServeDockerPy(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	ws := searchable(t, t.TempDir())
	script, err := filepath.Abs("testdata/dockerpy_slopcodebench.py")
	if err != nil {
		t.Fatal(err)
	}
	// Debian's Python, where python3-docker is (scripts/deps.sh).
	cmd := exec.Command("/usr/bin/python3", script, e.ref, ws, strconv.Itoa(freePort(t)))
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+sock)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "OK close\n") {
		t.Fatalf("docker-py: %v\n%s", err, out)
	}
	if out, _ := e.run("", "ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("docker-py's calls left containers: %q", out)
	}
}

// TestServeSIGTERMLeavesSandboxes: sandboxes belong to the state root,
// not to the service: one the docker CLI started through serve is still
// running after serve exits on SIGTERM, and the slopbox CLI reaches it.
func TestServeSIGTERMLeavesSandboxes(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	sock := filepath.Join(searchable(t, t.TempDir()), "slopbox.sock")
	srv := exec.Command(e.bin, "--root", e.root, "serve", "--socket", sock)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() { srv.Process.Kill() })
	fixtures.Eventually(t, "serve listening on "+sock, func() (bool, string) {
		_, err := os.Stat(sock)
		return err == nil, fmt.Sprint(err)
	})
	out, code := dockerCLI(t, debianDocker, sock, "", "run", "-d", "--name", "kept", e.ref, "sleep", "1000")
	if code != 0 {
		t.Fatalf("docker run -d through serve: exit %d %q", code, out)
	}
	srv.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve exited with %v after SIGTERM", err)
		}
	case <-time.After(fixtures.Patience()):
		t.Fatal("serve did not exit on SIGTERM")
	}
	if ps := e.must("ps", "--filter", "name=kept", "--format", "{{.Status}}"); !strings.HasPrefix(ps, "Up") {
		t.Errorf("the sandbox after serve's SIGTERM: %q, want Up", ps)
	}
	if out := e.must("exec", "kept", "echo", "still here"); out != "still here\n" {
		t.Errorf("exec after serve's SIGTERM: %q", out)
	}
}
