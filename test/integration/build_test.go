package integration

import (
	"encoding/json"
	"io"
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

// buildContext writes a build context over base: a file COPY takes and a
// RUN that writes another; the image's CMD prints both.
func buildContext(t *testing.T, base string) string {
	dir := searchable(t, t.TempDir())
	files := map[string]string{
		"Dockerfile": "FROM " + base + "\nCOPY hello.txt /hello.txt\nRUN echo built-by-run > /built\nCMD cat /hello.txt /built\n",
		"hello.txt":  "hello-from-context\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestServeBuild: docker build through slopbox serve with each docker CLI
// (the classic builder: /_ping says Builder-Version 1, so docker 28 uses
// POST /build with DOCKER_BUILDKIT unset as with =0), then docker run of
// the image shows what the build put there. A failing RUN fails docker
// build with docker's message. docker build also works with slopbox
// invoked as docker (no server).
func TestServeBuild(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	dir := buildContext(t, e.ref)

	req, _ := http.NewRequest(http.MethodHead, "http://slopbox/_ping", nil)
	resp, err := engineClient(sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := resp.Header.Get("Builder-Version"); v != "1" {
		t.Errorf("HEAD /_ping: Builder-Version %q, want 1", v)
	}

	failing := searchable(t, t.TempDir())
	os.WriteFile(filepath.Join(failing, "Dockerfile"), []byte("FROM "+e.ref+"\nRUN exit 3\n"), 0o644)
	for name, bin := range dockerClients(t) {
		for _, buildkit := range []string{"unset", "0"} {
			t.Run(name+"/DOCKER_BUILDKIT="+buildkit, func(t *testing.T) {
				if buildkit == "unset" {
					t.Setenv("DOCKER_BUILDKIT", "")
					os.Unsetenv("DOCKER_BUILDKIT")
				} else {
					t.Setenv("DOCKER_BUILDKIT", buildkit)
				}
				cmd := exec.Command(bin, "build", "-t", "x", ".")
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+sock, "DOCKER_CONFIG="+t.TempDir())
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("docker build: %v\n%s", err, out)
				}
				for _, want := range []string{"Step 1/4 : FROM ", "Step 3/4 : RUN echo built-by-run > /built", "Successfully built ", "Successfully tagged x:latest"} {
					if !strings.Contains(string(out), want) {
						t.Errorf("docker build output lacks %q:\n%s", want, out)
					}
				}
				if out, code := dockerCLI(t, bin, sock, "", "run", "--rm", "x"); code != 0 || out != "hello-from-context\nbuilt-by-run\n" {
					t.Errorf("docker run --rm x: exit %d: %q", code, out)
				}
				out2, code := dockerCLI(t, bin, sock, "", "build", "-t", "broken", failing)
				if code == 0 || !strings.Contains(out2, "The command '/bin/sh -c exit 3' returned a non-zero code: 3") {
					t.Errorf("failing build: exit %d:\n%s", code, out2)
				}
			})
		}
	}
	if out, code := dockerCLI(t, debianDocker, sock, "", "image", "inspect", "broken"); code == 0 {
		t.Errorf("a failed build tagged its image: %s", out)
	}

	// slopbox invoked as docker: the same build, no server.
	if out, code := e.docker("", "build", "-t", "argv-built", dir); code != 0 || !strings.Contains(out, "Successfully tagged argv-built") {
		t.Fatalf("docker build (argv): exit %d:\n%s", code, out)
	}
	if out, code := e.docker("", "run", "--rm", "argv-built"); code != 0 || out != "hello-from-context\nbuilt-by-run\n" {
		t.Errorf("docker run --rm argv-built: exit %d: %q", code, out)
	}
	for _, n := range []string{"x", "argv-built"} {
		e.run("", "rmi", "-f", n)
	}
	e.run("", "image", "prune", "-a", "-f")
}

// TestServeBuildDockerPy: SlopCodeBench's build through docker-py
// (images.build with a tar fileobj, custom_context, tag, rm), the image
// run as 1000:1000 with its copied files 1000's, and the second build all
// cache hits (testdata/dockerpy_build.py).
func TestServeBuildDockerPy(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	script, err := filepath.Abs("testdata/dockerpy_build.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", script, e.ref, "scb-sub")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+sock)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "OK cache\n") {
		t.Fatalf("docker-py: %v\n%s", err, out)
	}
	e.run("", "rmi", "-f", "scb-sub")
	e.run("", "image", "prune", "-a", "-f")
}

// TestCommit: a sandbox's changes (a new file, a removed one) become an
// image with slopbox commit (argv mode and --change CMD) and with docker
// commit through serve; running the image shows them and runs the CMD.
func TestCommit(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	e.must("run", "-d", "--name", "tocommit", e.ref, "sleep", "1000")
	e.must("exec", "tocommit", "sh", "-c", "echo committed > /data.txt && rm /bin/ls")
	if out, code := e.docker("", "commit", "--change", `CMD ["cat", "/data.txt"]`, "tocommit", "committed"); code != 0 || !strings.HasPrefix(out, "sha256:") {
		t.Fatalf("commit: exit %d: %s", code, out)
	}
	if out := e.must("run", "--rm", "committed"); out != "committed\n" {
		t.Errorf("run of the committed image (CMD from --change): %q", out)
	}
	if out := e.must("run", "--rm", "committed", "sh", "-c", "test -e /bin/ls || echo ls-gone"); out != "ls-gone\n" {
		t.Errorf("a file removed in the sandbox is in the image: %q", out)
	}
	if out := e.must("inspect", "-f", "{{.State.Paused}}", "tocommit"); strings.TrimSpace(out) != "false" {
		t.Errorf("the sandbox stayed paused after commit: %q", out)
	}
	if out, code := e.docker("", "commit", "--change", "RUN true", "tocommit", "nope"); code == 0 || !strings.Contains(out, "RUN cannot be changed by commit") {
		t.Errorf("commit --change RUN: exit %d: %s", code, out)
	}

	// Through serve, with Debian's docker CLI.
	if out, code := dockerCLI(t, debianDocker, sock, "", "commit", "-c", "CMD cat /data.txt", "-c", "ENV K=V", "tocommit", "committed2:v1"); code != 0 {
		t.Fatalf("docker commit: exit %d: %s", code, out)
	}
	if out, code := dockerCLI(t, debianDocker, sock, "", "run", "--rm", "committed2:v1"); code != 0 || out != "committed\n" {
		t.Errorf("docker run committed2:v1: exit %d: %q", code, out)
	}
	if out, code := dockerCLI(t, debianDocker, sock, "", "run", "--rm", "committed2:v1", "sh", "-c", "echo $K"); code != 0 || out != "V\n" {
		t.Errorf("ENV from --change: exit %d: %q", code, out)
	}
	e.must("rm", "-f", "tocommit")
	for _, n := range []string{"committed", "committed2:v1"} {
		e.run("", "rmi", "-f", n)
	}
}

// TestCommitUnderStorageOptSaysWhy: a sandbox started with --storage-opt
// size= keeps its writable layer on a tmpfs only it sees; commit said
// only "image store helper failed: exit status 1" (the helper's empty
// layer hid its error). It now names the flag and what to do.
func TestCommitUnderStorageOptSaysWhy(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	e.must("run", "-d", "--name", "sized", "--storage-opt", "size=10m", e.ref, "sleep", "1000")
	out, code := e.run("", "commit", "sized", "sized-img")
	if code == 0 || strings.Contains(out, "exit status") || !strings.Contains(out, "started with --storage-opt size=10MiB") || !strings.Contains(out, "start it without --storage-opt size to commit it") {
		t.Errorf("commit of a sandbox with --storage-opt size: exit %d: %s", code, out)
	}
	if _, code := e.run("", "image", "inspect", "sized-img"); code == 0 {
		t.Error("the refused commit made an image")
	}
	e.must("rm", "-f", "sized")
}

// imageDigest is the manifest digest slopbox image inspect shows (its
// Descriptor, as dockerd's containerd image store shows it).
func (e *env) imageDigest(ref string) string {
	e.t.Helper()
	var info []struct{ Descriptor struct{ Digest string } }
	if err := json.Unmarshal([]byte(e.must("image", "inspect", ref)), &info); err != nil || len(info) != 1 {
		e.t.Fatalf("image inspect %s: %v", ref, err)
	}
	d := info[0].Descriptor.Digest
	if !strings.HasPrefix(d, "sha256:") {
		e.t.Fatalf("image inspect %s: digest %q", ref, d)
	}
	return d
}

// TestPush: an image built here goes to the (in-process, loopback, plain
// HTTP) registry with slopbox push, slopbox push NAME REF and docker push
// through serve; a second, empty store pulls each with the same digest.
func TestPush(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	reg := strings.SplitN(e.ref, "/", 2)[0]
	built := reg + "/it/built:v1"
	e.must("build", "-q", "-t", built, buildContext(t, e.ref))
	want := e.imageDigest(built)

	if out := e.must("push", built); !strings.Contains(out, "digest: "+want) {
		t.Errorf("push: %s", out)
	}
	e.must("push", built, reg+"/it/renamed:v2")
	e.must("tag", built, reg+"/it/viaserve:v3")
	if out, code := dockerCLI(t, debianDocker, sock, "", "push", reg+"/it/viaserve:v3"); code != 0 || !strings.Contains(out, "digest: "+want) {
		t.Errorf("docker push through serve: exit %d: %s", code, out)
	}

	// The API's JSON progress: a Pushed line per layer, then aux.
	resp, err := engineClient(sock).Post("http://slopbox/v1.41/images/"+reg+"/it/viaserve/push?tag=v3", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The last line's aux is the docker CLI's PushResult (Tag, Digest).
	var aux struct{ Tag, Digest string }
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var last struct{ Aux json.RawMessage }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err == nil && last.Aux != nil {
		json.Unmarshal(last.Aux, &aux)
	}
	if resp.StatusCode != http.StatusOK || strings.Count(string(body), `"status":"Pushed"`) != 3 || aux.Digest != want || aux.Tag != "v3" {
		t.Errorf("POST /images/…/push: %d, aux %+v, want digest %s and tag v3\n%s", resp.StatusCode, aux, want, body)
	}

	e2 := &env{t: t, bin: e.bin, root: filepath.Join(searchable(t, t.TempDir()), "root2"), ref: e.ref}
	for _, ref := range []string{built, reg + "/it/renamed:v2", reg + "/it/viaserve:v3"} {
		e2.must("pull", "-q", ref)
		if got := e2.imageDigest(ref); got != want {
			t.Errorf("%s pulled into an empty store: digest %s, pushed %s", ref, got, want)
		}
		if ref != built {
			e2.must("rmi", ref)
		}
	}
	if out := e2.must("run", "--rm", reg+"/it/built:v1"); out != "hello-from-context\nbuilt-by-run\n" {
		t.Errorf("run of the pulled image: %q", out)
	}
	e2.run("", "rmi", "-f", built)
	for _, n := range []string{built, reg + "/it/viaserve:v3"} {
		e.run("", "rmi", "-f", n)
	}
}

// TestBuildKilledMidStep: slopbox build SIGKILLed while a RUN step runs
// (a sleep) tags nothing and leaves the store consistent: once prune and
// image prune have run, no sandbox is listed, no process, mount or cgroup
// of the step is left, the store's staging directory is empty, and a
// rebuild works.
func TestBuildKilledMidStep(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := buildContext(t, e.ref)
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM "+e.ref+"\nCOPY hello.txt /hello.txt\nRUN echo step-started && sleep 1000\nRUN echo built-by-run > /built\nCMD cat /hello.txt /built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.bin, "--root", e.root, "build", "-t", "killed", dir)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	go func() {
		var seen strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			seen.Write(buf[:n])
			if strings.Contains(seen.String(), "step-started\n") {
				started <- seen.String()
				io.Copy(io.Discard, pr)
				return
			}
			if err != nil {
				started <- seen.String()
				return
			}
		}
	}()
	var out string
	select {
	case out = <-started:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
	}
	ids := e.sandboxDirs()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	pw.Close()
	if !strings.Contains(out, "step-started") {
		t.Fatalf("the RUN step did not start:\n%s", out)
	}
	if len(ids) == 0 {
		t.Fatalf("no sandbox directory while the step ran:\n%s", out)
	}
	if out, code := e.run("", "image", "inspect", "killed"); code == 0 {
		t.Errorf("a killed build tagged its image: %s", out)
	}
	if out := e.must("images", "-q"); len(strings.Fields(out)) != 1 {
		t.Errorf("images after the killed build: %q, want the base alone", out)
	}
	e.must("prune")
	e.must("image", "prune", "-f")
	if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("prune left sandboxes: %q", out)
	}
	fixtures.Eventually(t, "nothing left on the host after the killed build and prune", func() (bool, string) {
		left := e.leftovers(ids)
		return len(left) == 0, strings.Join(left, "\n")
	})
	for _, d := range []string{"c", "tmp"} {
		ents, _ := os.ReadDir(filepath.Join(e.root, d))
		for _, ent := range ents {
			if !strings.HasPrefix(ent.Name(), ".") {
				t.Errorf("left after prune: %s/%s", d, ent.Name())
			}
		}
	}

	if err := os.WriteFile(df, []byte("FROM "+e.ref+"\nCOPY hello.txt /hello.txt\nRUN echo step-started\nRUN echo built-by-run > /built\nCMD cat /hello.txt /built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = e.must("build", "-t", "killed", dir)
	if !strings.Contains(out, "Successfully tagged killed") {
		t.Errorf("the rebuild:\n%s", out)
	}
	if got := e.must("run", "--rm", "killed"); got != "hello-from-context\nbuilt-by-run\n" {
		t.Errorf("run of the rebuilt image: %q", got)
	}
	e.must("rmi", "killed")
	e.must("image", "prune", "-f")
}
