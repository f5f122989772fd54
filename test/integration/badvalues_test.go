package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// expect125 runs slopbox and wants exit 125 with msg in its output.
func (e *env) expect125(msg string, args ...string) {
	e.t.Helper()
	e.expectCode(125, msg, args...)
}

func (e *env) expectCode(want int, msg string, args ...string) {
	e.t.Helper()
	out, code := e.run("", args...)
	if code != want || !strings.Contains(out, msg) {
		e.t.Errorf("%v: exit %d (%q), want %d with %q", args, code, out, want, msg)
	}
}

// TestBadValuesRefused: bad --memory, --cpus and --timeout values and
// users outside the sandbox's id range fail with a clear message and exit
// 125 before anything is pulled or created.
func TestBadValuesRefused(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		flags []string
		msg   string
	}{
		{[]string{"--memory", "99999999999999999999g"}, `invalid --memory "99999999999999999999g": too large`},
		{[]string{"--memory", "1e30"}, `invalid --memory "1e30": too large`},
		{[]string{"--memory", "1"}, "Minimum memory limit allowed is 6MB"},
		{[]string{"-m", "5m"}, "Minimum memory limit allowed is 6MB"},
		{[]string{"--cpus", "-1"}, "Range of CPUs is from 0.01 to"},
		{[]string{"--cpus", "1000"}, "Range of CPUs is from 0.01 to"},
		{[]string{"--cpus", "0.001"}, "Range of CPUs is from 0.01 to"},
		{[]string{"--cpus", "NaN"}, "invalid CPU limit NaN"},
		{[]string{"--timeout", "-1"}, "invalid --timeout -1"},
		{[]string{"--timeout", "NaN"}, "invalid --timeout NaN"},
	} {
		e.expect125(c.msg, append(append([]string{"run", "--rm"}, c.flags...), e.ref, "true")...)
		if c.flags[0] != "--timeout" {
			e.expect125(c.msg, append(append([]string{"create"}, c.flags...), e.ref, "true")...)
		}
	}
	// Refused before the image was pulled, so nothing was created at all.
	if out := e.must("images"); strings.Contains(out, "busybox") {
		t.Errorf("a run with a bad value pulled the image:\n%s", out)
	}
	if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("runs with bad values created sandboxes: %s", out)
	}

	// The smallest accepted values work.
	if out, code := e.run("", "run", "--rm", "--memory", "6m", "--cpus", "0.01", "--timeout", "0", e.ref, "echo", "ok"); code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("run --memory 6m --cpus 0.01: exit %d: %s", code, out)
	}

	// Users outside the mapped ids 0..65535 (or fewer).
	e.expect125("user 70000 is outside the sandbox's id range 0-", "run", "--rm", "-u", "70000", e.ref, "true")
	e.expect125("group 70000 is outside the sandbox's id range 0-", "run", "--rm", "-u", "0:70000", e.ref, "true")
	img := fixtures.Busybox(t, image.HostPlatform())
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.User = "65536"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	userRef := strings.Replace(e.ref, "/it/busybox", "/it/user65536", 1)
	fixtures.Push(t, userRef, img)
	t.Cleanup(func() { e.run("", "rmi", "-f", userRef) })
	e.expect125("user 65536 is outside the sandbox's id range 0-", "run", "--rm", userRef, "true")
	if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("runs with unmapped users created sandboxes: %s", out)
	}

	// exec into a running sandbox: refused before anything starts, exit 1
	// as docker exec's own failures (125 for a flag it cannot parse).
	id := strings.TrimSpace(lastLine(e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")))
	e.expectCode(1, "user 70000 is outside the sandbox's id range 0-", "exec", "-u", "70000:0", "box", "true")
	e.expectCode(1, "invalid --timeout -1", "exec", "--timeout", "-1", "box", "true")
	e.expectCode(1, "invalid --timeout NaN", "exec", "--timeout", "NaN", "box", "true")
	e.expect125("invalid argument \"soon\"", "exec", "--timeout", "soon", "box", "true")
	if out := strings.Fields(e.must("ps", "-a", "-q")); len(out) != 1 || !strings.HasPrefix(id, out[0]) {
		t.Errorf("ps -a after refused execs: %q, want only %s", out, id)
	}
	if out := e.must("exec", "box", "ps", "-o", "args"); strings.Contains(out, "true") {
		t.Errorf("a refused exec ran:\n%s", out)
	}
	e.must("rm", "-f", "box")
}

// TestLocalBackendFlags: --backend local refuses what it cannot honour on
// the host (limits, -v, --network none) and runs --setup.
func TestLocalBackendFlags(t *testing.T) {
	e := &env{t: t, bin: slopboxBin(t), root: filepath.Join(t.TempDir(), "root")}
	ws := t.TempDir()
	for _, c := range []struct {
		flags []string
		msg   string
	}{
		{[]string{"--memory", "512m"}, "--memory is not supported: the local backend runs the command on the host"},
		{[]string{"--cpus", "1"}, "--cpus is not supported"},
		{[]string{"--pids-limit", "10"}, "--pids-limit is not supported"},
		{[]string{"-v", "data:/data"}, "-v/--volume is not supported"},
		{[]string{"--network", "none"}, "--network none is not supported"},
		{[]string{"--timeout", "-1"}, "invalid --timeout -1"},
	} {
		args := append(append([]string{"run", "--backend", "local", "--workspace", ws}, c.flags...), "--", "touch", "ran")
		e.expect125(c.msg, args...)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Errorf("a refused local run ran its command")
	}
	out, code := e.run("", "run", "--backend", "local", "--workspace", ws, "--network", "host",
		"--setup", "echo prepared > marker; echo setting up", "--", "cat", "marker")
	if code != 0 || !strings.Contains(out, "prepared") || !strings.Contains(out, "--- setup ---\nsetting up\n--- end of setup ---") {
		t.Errorf("run --backend local --setup: exit %d: %q", code, out)
	}
}
