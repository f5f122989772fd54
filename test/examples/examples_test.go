// Package examples runs each file of examples/ as a user would, against
// images served by the fixtures' registry: the environment specs and the
// rlm_code config through `slopbox env run`, the open_atp session script
// with slopbox as its docker, the docker-py harness against `slopbox
// serve`, and the Go program built as a module of its own (its go.mod
// replaces slopbox with this checkout), which shows that the public API
// is enough to write one; and make test's entry script, scripts/test.sh,
// as a user's clone without ../shared runs it (testscript_test.go).
package examples

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

const tags = "seccomp netgo osusergo slopbox_helper"

type env struct {
	t    *testing.T
	bin  string // bin/slopbox, or $SLOPBOX_BIN
	dir  string // searchable temporary directory
	root string // slopbox's store and state
	reg  string // the fixtures' registry
}

func newEnv(t *testing.T) *env {
	bin := os.Getenv("SLOPBOX_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin/slopbox")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (make build)", bin, err)
	}
	dir := t.TempDir()
	for p := dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, bin: bin, dir: dir, root: filepath.Join(dir, "root"), reg: fixtures.Registry(t, nil)}
	t.Cleanup(func() {
		out, _ := e.run(nil, "", "ps", "-a", "-q")
		for _, id := range strings.Fields(out) {
			e.run(nil, "", "rm", "-f", id)
		}
		out, _ = e.run(nil, "", "images", "-q")
		for _, id := range strings.Fields(out) {
			e.run(nil, "", "rmi", "-f", id)
		}
	})
	return e
}

// busybox and python push the fixtures' images and return their names.
func (e *env) busybox() string {
	ref := e.reg + "/examples/busybox:latest"
	fixtures.Push(e.t, ref, fixtures.Busybox(e.t, image.HostPlatform()))
	return ref
}

// python is the fixtures' Python image with python as well as python3 on
// PATH, as the python images have it.
func (e *env) python() string {
	ref := e.reg + "/examples/python:3.11"
	img, err := mutate.AppendLayers(fixtures.Python(e.t, image.HostPlatform()),
		fixtures.Layer(e.t, fixtures.Entry{Name: "usr/bin/python", Type: tar.TypeSymlink, Linkname: "python3"}))
	if err != nil {
		e.t.Fatal(err)
	}
	fixtures.Push(e.t, ref, img)
	return ref
}

// workspace is a fresh directory below the searchable temporary one.
func (e *env) workspace(name string, files map[string]string) string {
	ws := filepath.Join(e.dir, name)
	if err := os.Mkdir(ws, 0o755); err != nil {
		e.t.Fatal(err)
	}
	for n, body := range files {
		if err := os.WriteFile(filepath.Join(ws, n), []byte(body), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	return ws
}

// exec runs argv with env added, bounded in time, and returns its
// combined output and exit code.
func (e *env) exec(env []string, dir string, argv ...string) (string, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		e.t.Fatalf("%v: timed out\n%s", argv, out.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("%v: %v", argv, err)
	}
	return out.String(), 0
}

// run runs slopbox --root ROOT args.
func (e *env) run(env []string, dir string, args ...string) (string, int) {
	e.t.Helper()
	return e.exec(env, dir, append([]string{e.bin, "--root", e.root}, args...)...)
}

func example(t *testing.T, rel string) string {
	p, err := filepath.Abs(filepath.Join("../../examples", rel))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantAll(t *testing.T, what, out string, code, wantCode int, want ...string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("%s: exit %d, want %d\n%s", what, code, wantCode, out)
		return
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: output lacks %q\n%s", what, w, out)
		}
	}
}

func TestSlopCodeBenchSpecs(t *testing.T) {
	e := newEnv(t)
	py := e.python()
	spec := example(t, "slopcodebench/python-docker.yaml")
	ws := e.workspace("ws", map[string]string{
		"main.py":      "import os\nprint('main in', os.getcwd(), os.environ['PYTHONUNBUFFERED'])\nopen('done', 'w').write('yes')\n",
		"test_main.py": "import unittest\nclass T(unittest.TestCase):\n    def test_ok(self):\n        self.assertTrue(True)\n",
	})
	out, code := e.run(nil, "", "env", "run", spec, "--image", py, "--workspace", ws, "--entry", "main")
	wantAll(t, "agent run", out, code, 0, "main in /workspace 1")
	if b, _ := os.ReadFile(filepath.Join(ws, "done")); string(b) != "yes" {
		t.Errorf("the entry file's write on the host: %q", b)
	}
	out, code = e.run(nil, "", "env", "run", spec, "--image", py, "--workspace", ws, "--eval", "--json", "--", "python3", "-m", "unittest", "-q")
	wantAll(t, "evaluation run", out, code, 0, `"exit_code": 0`, "evaluating", "Python 3", "Ran 1 test")

	local := example(t, "slopcodebench/local.yaml")
	lws := e.workspace("local", map[string]string{"main.sh": "echo \"$GREETING from $(pwd)\"\n"})
	out, code = e.run(nil, "", "env", "run", local, "--workspace", lws, "--entry", "main")
	wantAll(t, "local spec", out, code, 0, "hello from "+lws)
}

func TestRLMCodeConfig(t *testing.T) {
	e := newEnv(t)
	py := e.python()
	// The config names a public image; here the fixture stands for it.
	body, err := os.ReadFile(example(t, "rlm_code/rlm_config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte("image: docker.io/library/python:3.12-slim")) {
		t.Fatal("rlm_config.yaml no longer names docker.io/library/python:3.12-slim: update this test")
	}
	config := filepath.Join(e.dir, "rlm_config.yaml")
	os.WriteFile(config, bytes.ReplaceAll(body, []byte("docker.io/library/python:3.12-slim"), []byte(py)), 0o644)
	ws := e.workspace("wd", map[string]string{"x.py": "import os\nprint('x in', os.getcwd(), os.environ.get('HTTP_PROXY'))\n"})
	// env_allowlist passes what the operator allows (--allow-os-env: the
	// allowlist's names), and is refused otherwise.
	proxy := []string{"HTTP_PROXY=http://proxy.invalid:3128"}
	out, code := e.run(proxy, "", "env", "run", config, "--workspace", ws, "--", "python3", "/workspace/x.py")
	wantAll(t, "rlm_code config, its env_allowlist not allowed", out, code, 125, "env_allowlist names HTTP_PROXY", "--allow-os-env")
	out, code = e.run(proxy, "", "env", "run", config, "--workspace", ws, "--allow-os-env", "--", "python3", "/workspace/x.py")
	wantAll(t, "rlm_code config", out, code, 0, "x in /workspace http://proxy.invalid:3128")
	out, code = e.run(nil, "", "env", "run", config, "--workspace", ws, "--entry", "x.py", "--json")
	wantAll(t, "rlm_code config, --entry --json", out, code, 0, `"exit_code": 0`, "x in /workspace")
}

func TestOpenATPSession(t *testing.T) {
	e := newEnv(t)
	bb := e.busybox()
	// slopbox as the script's docker, on its own state root.
	docker := filepath.Join(e.dir, "docker")
	os.WriteFile(docker, []byte("#!/bin/sh\nexec '"+e.bin+"' --root '"+e.root+"' \"$@\"\n"), 0o755)
	wd := e.workspace("wd", nil)
	out, code := e.exec([]string{"DOCKER=" + docker, "IMAGE=" + bb}, "", example(t, "open_atp/session.sh"), wd)
	wantAll(t, "open_atp session", out, code, 0, "session 1 command 2\n", "kept\n", "exit status 3\n")
	if ps, _ := e.run(nil, "", "ps", "-a", "-q"); strings.TrimSpace(ps) != "" {
		t.Errorf("the session left its container: %q", ps)
	}
}

func TestDockerPyHarness(t *testing.T) {
	if _, err := os.Stat("/usr/lib/python3/dist-packages/docker"); err != nil {
		t.Fatalf("docker-py (Debian's python3-docker, scripts/deps.sh): %v", err)
	}
	e := newEnv(t)
	bb := e.busybox()
	sock := filepath.Join(e.dir, "slopbox.sock")
	srv := exec.Command(e.bin, "--root", e.root, "serve", "--socket", sock)
	var log fixtures.Buffer // read while serve writes it
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			srv.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("serve:\n%s", log.String())
		}
	})
	fixtures.Eventually(t, "serve listening on "+sock, func() (bool, string) {
		_, err := os.Stat(sock)
		return err == nil, log.String()
	})
	ws := e.workspace("ws", nil)
	out, code := e.exec([]string{"DOCKER_HOST=unix://" + sock}, "", "/usr/bin/python3", example(t, "dockerpy/harness.py"), bb, ws)
	wantAll(t, "docker-py harness", out, code, 0, "exec: 0 demo\n", "exit code: 3\n", "copied back: print('hello from a copied file')\n", "logs: started\n", "removed\n")
	if b, _ := os.ReadFile(filepath.Join(ws, "result.txt")); string(b) != "demo\n" {
		t.Errorf("the exec's file on the host: %q", b)
	}
}

// goTool is the go command of the toolchain running the tests.
func goTool(t *testing.T) string {
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH (make test puts the toolchain go.mod names first): %v", err)
	}
	return p
}

// buildModule builds the module in dir, statically, with the tags
// bin/slopbox has.
func (e *env) buildModule(dir, out string) {
	e.t.Helper()
	if o, code := e.exec([]string{"CGO_ENABLED=1", "GOFLAGS=-mod=readonly", "GOWORK=off"}, dir,
		goTool(e.t), "build", "-tags", tags, "-ldflags", "-extldflags -static", "-o", out, "."); code != 0 {
		e.t.Fatalf("go build in %s: exit %d\n%s", dir, code, o)
	}
}

func TestGoAPIExample(t *testing.T) {
	e := newEnv(t)
	bb := e.busybox()
	prog := filepath.Join(e.dir, "goapi")
	e.buildModule(example(t, "goapi"), prog)
	ws := e.workspace("ws", nil)
	out, code := e.exec(nil, "", prog, "--root", e.root, bb, ws)
	wantAll(t, "the Go example", out, code, 0, "setup: preparing\n", "exit code: 3\n", "stdout: hello from /workspace\n",
		"streamed: hello from /workspace\n", "stream finished: exit code 0\n")
	if b, _ := os.ReadFile(filepath.Join(ws, "out.txt")); string(b) != "hello from /workspace\n" {
		t.Errorf("the sandbox's file on the host: %q", b)
	}
}

// A program that forgets sandbox.Init gets an error that says so (it used
// to fail later, with "lchown …: invalid argument" and "spawn server
// exited").
func TestGoAPIWithoutInit(t *testing.T) {
	e := newEnv(t)
	repo, _ := filepath.Abs("../..")
	mod := filepath.Join(e.dir, "noinit")
	os.Mkdir(mod, 0o755)
	gomod, err := os.ReadFile(example(t, "goapi/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	gomod = bytes.Replace(gomod, []byte("=> ../.."), []byte("=> "+repo), 1)
	gosum, _ := os.ReadFile(example(t, "goapi/go.sum"))
	os.WriteFile(filepath.Join(mod, "go.mod"), gomod, 0o644)
	os.WriteFile(filepath.Join(mod, "go.sum"), gosum, 0o644)
	os.WriteFile(filepath.Join(mod, "main.go"), []byte(`package main

import (
	"context"
	"fmt"
	"os"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/sandbox"
)

func main() {
	b, err := sandbox.New(os.Args[1])
	if err == nil {
		_, err = b.Store().Pull(context.Background(), os.Args[2])
	}
	if err == nil {
		_, err = b.Spawn(context.Background(), backend.SpawnSpec{Image: os.Args[2], NoWorkspaceMount: true})
	}
	fmt.Println(err)
}
`), 0o644)
	prog := filepath.Join(e.dir, "noinit.bin")
	e.buildModule(mod, prog)
	out, _ := e.exec(nil, "", prog, e.root, e.busybox())
	if !strings.Contains(out, "call sandbox.Init() first thing in main") {
		t.Errorf("without sandbox.Init: %q, want the error to say to call it", out)
	}
}

// TestGoAPIWithoutTags (issue 44): the Go example built as a user of
// another module would first build it, `go build .` without slopbox's
// tags or static linking, fails at once with the build line to use (it
// failed at the first spawn, with libcontainer's "seccomp: config
// provided but seccomp not supported").
func TestGoAPIWithoutTags(t *testing.T) {
	e := newEnv(t)
	prog := filepath.Join(e.dir, "goapi-plain")
	if o, code := e.exec([]string{"CGO_ENABLED=1", "GOFLAGS=-mod=readonly", "GOWORK=off"}, example(t, "goapi"),
		goTool(t), "build", "-o", prog, "."); code != 0 {
		t.Fatalf("go build: exit %d\n%s", code, o)
	}
	out, code := e.exec(nil, "", prog, "--root", e.root, e.busybox(), e.workspace("ws", nil))
	if code == 0 || !strings.Contains(out, `-tags "seccomp netgo osusergo"`) || !strings.Contains(out, "the seccomp build tag") ||
		!strings.Contains(out, "static linking") || strings.Contains(out, "seccomp not supported") {
		t.Errorf("the example built without tags: exit %d\n%s\nwant a refusal at once naming the build line", code, out)
	}
}
