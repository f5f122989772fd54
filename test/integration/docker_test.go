package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dockerRun runs the slopbox binary through a symlink named docker, as a
// harness with `binary: docker` (or docker on its PATH) does.
func (e *env) docker(in string, args ...string) (string, int) {
	e.t.Helper()
	link := filepath.Join(filepath.Dir(e.root), "docker")
	if _, err := os.Lstat(link); err != nil {
		if err := os.Symlink(e.bin, link); err != nil {
			e.t.Fatal(err)
		}
	}
	cmd := exec.Command(link, append([]string{"--root", e.root}, args...)...)
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return string(out), 0
}

// The three harnesses' docker command lines (reference §1.6–1.7, §2.2,
// §3.2), replayed against slopbox invoked as docker, with the outcomes
// their own tests assert. (The images here have sh, not bash or python:
// those words are the only ones changed.)
func TestHarnessArgvAsDocker(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	// As the harnesses make it: below a 0700 temporary directory (as
	// root, root's), mode 0755.
	wd := filepath.Join(t.TempDir(), "wd")
	os.Mkdir(wd, 0o755)

	t.Run("open_atp", func(t *testing.T) {
		if _, code := e.docker("", "image", "inspect", e.ref); code != 0 {
			t.Errorf("image inspect of a present image: exit %d", code)
		}
		if _, code := e.docker("", "image", "inspect", "example.com/missing:v1"); code == 0 {
			t.Error("image inspect of a missing image exits 0")
		}
		out, code := e.docker("", "run", "--rm", "-d", "--name", "open-atp-0123456789ab", "-v", wd+":/workspace/wd",
			"-e", "SESSION=1", e.ref, "sleep", "infinity")
		if code != 0 || len(strings.TrimSpace(out)) != 16 {
			t.Fatalf("run -d: exit %d %q, want the sandbox id", code, out)
		}
		out, code = e.docker("", "exec", "-e", "CMD=2", "open-atp-0123456789ab", "sh", "-lc",
			"timeout 30 sh -lc 'echo $SESSION $CMD > /workspace/wd/f; cat /workspace/wd/f; exit 3'")
		if code != 3 || out != "1 2\n" {
			t.Errorf("exec: exit %d %q", code, out)
		}
		if b, _ := os.ReadFile(filepath.Join(wd, "f")); string(b) != "1 2\n" {
			t.Errorf("the file on the host: %q", b)
		}
		// State persists between execs of one session.
		e.docker("", "exec", "open-atp-0123456789ab", "sh", "-c", "echo kept > /tmp/state")
		if out, _ := e.docker("", "exec", "open-atp-0123456789ab", "cat", "/tmp/state"); out != "kept\n" {
			t.Errorf("state between execs: %q", out)
		}
		if _, code := e.docker("", "kill", "open-atp-0123456789ab"); code != 0 {
			t.Errorf("kill: exit %d", code)
		}
		if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
			t.Errorf("run -d --rm then kill left the sandbox: %q", out)
		}
	})

	t.Run("rlm_code", func(t *testing.T) {
		if out, code := e.docker("", "info", "--format", "{{.ServerVersion}}"); code != 0 || strings.TrimSpace(out) == "" || strings.Contains(out, "{") {
			t.Errorf("info --format: exit %d %q", code, out)
		}
		os.WriteFile(filepath.Join(wd, "x.sh"), []byte("echo \"$A $B\"; pwd; echo out > /workspace/written\n"), 0o644)
		out, code := e.docker("", "run", "--rm", "--workdir", "/workspace", "--volume", wd+":/workspace:rw",
			"--env", "A=1", "--env", "B=2", "--network", "none", "--memory", "512m", "--cpus", "1.0", e.ref, "sh", "/workspace/x.sh")
		if code != 0 || !strings.Contains(out, "1 2\n/workspace\n") {
			t.Errorf("one-shot run: exit %d %q", code, out)
		}
		if _, err := os.Stat(filepath.Join(wd, "written")); err != nil {
			t.Errorf("the run's file on the host: %v", err)
		}
		// rlm_code's policy, the gap closed: the split spelling is refused too.
		if out, code := e.docker("", "run", "--rm", "--cap-add", "SYS_ADMIN", e.ref, "true"); code != 125 || !strings.Contains(out, "--allow-unsafe") {
			t.Errorf("--cap-add SYS_ADMIN: exit %d %q", code, out)
		}
	})

	t.Run("slopcodebench", func(t *testing.T) {
		// DockerExecRuntime: run --rm -v … --user … --network … --workdir … -e … [-i] IMAGE /bin/sh -c CMD
		out, code := e.docker("line one\nline two\n", "run", "--rm", "-v", wd+":/workspace:rw", "--user", "0:0", "--network", "none",
			"--workdir", "/workspace", "-e", "K=V", "-i", e.ref, "/bin/sh", "-c", "echo $K; pwd; cat; exit 5")
		if code != 5 || out != "V\n/workspace\nline one\nline two\n" {
			t.Errorf("exec runtime: exit %d %q", code, out)
		}
		// The streaming runtime's exec into a long-lived container.
		out, code = e.docker("", "run", "-d", "--name", "scb", "-v", wd+":/workspace:rw", e.ref, "sleep", "infinity")
		if code != 0 {
			t.Fatalf("run -d: %d %q", code, out)
		}
		out, code = e.docker("", "exec", "--workdir", "/workspace", "--user", "0:0", "--env", "A=1", "scb", "/bin/sh", "-c", "echo $A; pwd")
		if code != 0 || out != "1\n/workspace\n" {
			t.Errorf("streaming exec: exit %d %q", code, out)
		}
		e.docker("", "rm", "-f", "scb")
	})

	// slopbox docker … is the same parser.
	if out, code := e.run("", "docker", "image", "inspect", e.ref); code != 0 || !strings.Contains(out, "Architecture") {
		t.Errorf("slopbox docker image inspect: exit %d", code)
	}
}

// docker save … | slopbox load: an archive on stdin (no -i, or -i -).
func TestLoadFromStdin(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	archive := filepath.Join(t.TempDir(), "img.tar")
	e.must("save", "-o", archive, e.ref)
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	e.must("rmi", e.ref)
	for _, args := range [][]string{{"load"}, {"load", "-i", "-"}} {
		out, code := e.run(string(b), args...)
		if code != 0 || !strings.Contains(out, "Loaded image: "+e.ref) || strings.Contains(out, "download") {
			t.Errorf("%v with the archive on stdin: exit %d %q", args, code, out)
		}
		e.must("rmi", e.ref)
	}
	if out, code := e.run("not an archive", "load"); code != 1 || !strings.Contains(out, "load stdin: not a docker-save tarball") {
		t.Errorf("load of garbage on stdin: exit %d %q", code, out)
	}
	if out, code := e.run("", "load"); code != 1 || !strings.Contains(out, "stdin is empty") {
		t.Errorf("load of an empty stdin: exit %d %q", code, out)
	}
}
