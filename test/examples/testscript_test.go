package examples

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDockerPyPhaseNotRunInAClone runs make test's entry script
// (scripts/test.sh; .ci/run runs make test) as a user's clone has it:
// the checkout's tracked files copied to a directory with no ../shared
// beside it, restricted to the docker-py phase (SLOPBOX_TEST_PHASES, so
// that nothing is built and no other phase runs). Without CI it passes,
// saying the phase was not run and how to run it; with CI=true it fails.
// The run is its own: its logs in a directory it makes and removes, no
// SLOPBOX_TEST_LOGS, SLOPBOX_SHARED or CI of the run around it, and
// with no phase that needs them it builds nothing, copies nothing for
// the test user and sweeps nothing, so inside make test it neither
// recurses nor touches that run's files.
func TestDockerPyPhaseNotRunInAClone(t *testing.T) {
	src, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := exec.Command("git", "-C", src, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v (the test copies the checkout's tracked files)", src, err)
	}
	clone := filepath.Join(t.TempDir(), "slopbox")
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		copyFile(t, filepath.Join(src, f), filepath.Join(clone, f))
	}
	if _, err := os.Stat(filepath.Join(clone, "..", "shared")); err == nil {
		t.Fatal("the clone has a ../shared beside it")
	}
	run := func(ci bool) (string, int) {
		t.Helper()
		var env []string
		for _, kv := range os.Environ() {
			switch k, _, _ := strings.Cut(kv, "="); k {
			case "CI", "SLOPBOX_SHARED", "SLOPBOX_TEST_LOGS", "SLOPBOX_TEST_PHASES", "SLOPBOX_SKIP_VM", "TEST_BUDGET_MIN", "GOTESTSUM":
			default:
				env = append(env, kv)
			}
		}
		env = append(env, "SLOPBOX_TEST_PHASES=docker-py")
		if ci {
			env = append(env, "CI=true")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "scripts/test.sh")
		cmd.Dir, cmd.Env, cmd.WaitDelay = clone, env, 10*time.Second
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("scripts/test.sh: timed out\n%s", out.String())
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return out.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), 0
	}

	out, code := run(false)
	wantAll(t, "without CI", out, code, 0,
		"== NOT RUN: docker-py's suite: there is no ../shared/peers/docker-py-5.0.3",
		"to run it, set SLOPBOX_SHARED to a directory holding peers/docker-py-5.0.3",
		"== LEFT OUT: the phases toolchain root stress race-cli fuzz rootless clients vm (SLOPBOX_TEST_PHASES=docker-py)")
	// The not-run line is in the summary, the run's last lines.
	if i := strings.Index(out, "== summary:"); i < 0 || !strings.Contains(out[i:], "== NOT RUN: docker-py's suite") {
		t.Errorf("without CI: the summary does not list docker-py as not run\n%s", out)
	}
	// Every phase that starts says "== NAME (limit …)": none but docker-py's did.
	for _, unwanted := range []string{"== FAILED", "== toolchain", "== root ", "(limit "} {
		if strings.Contains(out, unwanted) {
			t.Errorf("without CI: %q in the output\n%s", unwanted, out)
		}
	}
	out, code = run(true)
	wantAll(t, "with CI=true", out, code, 1, "== FAILED: docker-py: no docker-py suite at ../shared",
		"== FAILED: under CI every phase runs")
}

// copyFile copies a regular file with its mode, making its directories.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
