package integration

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// healthHelpers lists the healthcheck helpers running for the store at
// root.
func healthHelpers(root string) []string { return procsOf("slopbox-service-health", root) }

// cliState is what the CLI's inspect says of a container's state.
type cliState struct {
	Status              string
	Running, Restarting bool
	ExitCode            int
	Health              *struct{ Status string }
}

func (e *env) state(name string) (cliState, int) {
	e.t.Helper()
	var in []struct {
		State        cliState
		RestartCount int
	}
	out := e.must("inspect", name)
	if err := json.Unmarshal([]byte(out), &in); err != nil || len(in) != 1 {
		e.t.Fatalf("inspect %s: %v\n%s", name, err, out)
	}
	return in[0].State, in[0].RestartCount
}

// TestSupervisionWithoutServe: a container the CLI runs has its restart
// policy and healthcheck carried out with no serve and no daemon, as
// Docker's daemon carries them out (issue 43 point 2): on-failure:N
// restarts N times and then stays exited; always restarts until a stop
// by hand, which no restart undoes; a restarting container is refused rm
// without -f, and rm -f ends the restart; a healthcheck runs every
// interval and its status is in inspect; nothing is left running after.
func TestSupervisionWithoutServe(t *testing.T) {
	e := newEnv(t)
	t.Cleanup(func() {
		waitFor(t, "monitors to exit", func() bool { return len(monitors(e.root)) == 0 })
		waitFor(t, "healthcheck helpers to exit", func() bool { return len(healthHelpers(e.root)) == 0 })
	})
	e.must("pull", e.ref)

	t.Run("on-failure", func(t *testing.T) {
		e.must("run", "-d", "--name", "fail", "--restart", "on-failure:2", e.ref, "sh", "-c", "echo run; exit 3")
		waitFor(t, "two restarts, then exited", func() bool {
			st, n := e.state("fail")
			return st.Status == "exited" && n == 2 && len(monitors(e.root)) == 0
		})
		if st, _ := e.state("fail"); st.ExitCode != 3 {
			t.Errorf("exit code %d, want 3", st.ExitCode)
		}
		if logs := e.must("logs", "fail"); strings.Count(logs, "run\n") != 3 {
			t.Errorf("logs of three runs:\n%s", logs)
		}
		e.must("rm", "fail")
	})

	t.Run("always-then-stop", func(t *testing.T) {
		// Once /ctl/hold exists (a host directory), a run sleeps rather
		// than exiting: the start by hand below runs until killed.
		ctl := t.TempDir()
		os.Chmod(ctl, 0o777)
		e.must("run", "-d", "--name", "always", "--restart", "always", "-v", ctl+":/ctl", e.ref, "sh", "-c", "if [ -e /ctl/hold ]; then exec sleep 300; fi; sleep 0.2")
		waitFor(t, "two restarts", func() bool { _, n := e.state("always"); return n >= 2 })
		e.must("stop", "-t", "0", "always")
		waitFor(t, "no monitor left", func() bool { return len(monitors(e.root)) == 0 })
		st, n := e.state("always")
		if st.Status != "exited" || st.Running || st.Restarting {
			t.Errorf("after stop: %+v, want exited", st)
		}
		// A start by hand counts restarts from 0, and a kill ends it for
		// good too.
		if err := os.WriteFile(filepath.Join(ctl, "hold"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		e.must("start", "always")
		if _, n2 := e.state("always"); n2 != 0 {
			t.Errorf("restart count after a start by hand: %d (was %d), want 0", n2, n)
		}
		e.must("kill", "always")
		waitFor(t, "no monitor left after kill", func() bool { return len(monitors(e.root)) == 0 })
		if st, _ := e.state("always"); st.Status != "exited" {
			t.Errorf("after kill: %+v, want exited", st)
		}
		e.must("rm", "always")
	})

	t.Run("rm-restarting", func(t *testing.T) {
		// The first run waits for /go, the count is set to 9 meanwhile:
		// its restart waits 51.2 s, long enough to be seen.
		id := strings.TrimSpace(e.must("run", "-d", "--name", "slow", "--restart", "always", e.ref, "sh", "-c",
			"if [ -e /ran ]; then exec sleep 1000; fi; touch /ran; while [ ! -e /go ]; do sleep 0.05; done; exit 1"))
		dir := filepath.Join(e.root, "c", id)
		if err := os.WriteFile(filepath.Join(dir, "engine-restarts.json"), []byte(`{"RestartCount":9}`), 0o600); err != nil {
			t.Fatal(err)
		}
		e.must("exec", "slow", "touch", "/go")
		waitFor(t, "restarting", func() bool { st, _ := e.state("slow"); return st.Restarting && st.Status == "restarting" })
		if ps := e.must("ps", "-a"); !strings.Contains(ps, "Restarting (1)") {
			t.Errorf("ps -a of a restarting container:\n%s", ps)
		}
		out, code := e.run("", "rm", "slow")
		if code == 0 || !strings.Contains(out, "You cannot remove a restarting container") {
			t.Errorf("rm of a restarting container: exit %d: %s", code, out)
		}
		e.must("rm", "-f", "slow")
		waitFor(t, "no monitor left after rm -f", func() bool { return len(monitors(e.root)) == 0 })
	})

	t.Run("healthcheck", func(t *testing.T) {
		e.must("run", "-d", "--name", "hc", "--health-cmd", "test -e /ok", "--health-interval", "1s", "--health-retries", "1", e.ref, "sleep", "1000")
		health := func() string {
			st, _ := e.state("hc")
			if st.Health == nil {
				return ""
			}
			return st.Health.Status
		}
		if h := health(); h != "starting" && h != "unhealthy" {
			t.Errorf("health right after run -d: %q, want starting", h)
		}
		waitFor(t, "unhealthy", func() bool { return health() == "unhealthy" })
		e.must("exec", "hc", "touch", "/ok")
		waitFor(t, "healthy", func() bool { return health() == "healthy" })
		if n := len(healthHelpers(e.root)); n != 1 {
			t.Errorf("%d healthcheck helpers run, want 1", n)
		}
		e.must("stop", "-t", "0", "hc")
		waitFor(t, "the healthcheck helper to end with the run", func() bool { return len(healthHelpers(e.root)) == 0 })
		out, code := e.run("", "run", "-d", "--no-healthcheck", "--health-cmd", "true", e.ref, "true")
		if code == 0 || !strings.Contains(out, "--no-healthcheck conflicts") {
			t.Errorf("--no-healthcheck with --health-cmd: exit %d: %s", code, out)
		}
		out, code = e.run("", "run", "-d", "--rm", "--restart", "always", e.ref, "true")
		if code == 0 || !strings.Contains(out, "cannot specify both --restart and --rm") {
			t.Errorf("--rm with --restart always: exit %d: %s", code, out)
		}
		out, code = e.run("", "run", "-d", "--restart", "sometimes", e.ref, "true")
		if code == 0 || !strings.Contains(fmt.Sprint(out), "sometimes") {
			t.Errorf("--restart sometimes: exit %d: %s", code, out)
		}
	})
}

// TestLifecycleParity: the same lifecycle scenarios, run through the
// slopbox CLI (no serve) and through the docker CLI against serve, end in
// the same state: one service (dockercompat/service) under both, so they
// agree by construction (issue 43). Each scenario gives its commands
// with NAME for the container and its expected end, read by the same
// inspect template on each surface.
func TestLifecycleParity(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	t.Cleanup(func() {
		waitFor(t, "monitors to exit", func() bool { return len(monitors(e.root)) == 0 })
		waitFor(t, "healthcheck helpers to exit", func() bool { return len(healthHelpers(e.root)) == 0 })
	})
	e.must("pull", "-q", e.ref)
	const tmpl = "{{.State.Status}} {{.RestartCount}} {{.State.ExitCode}}"
	for _, sc := range []struct {
		name  string
		steps [][]string // NAME: the container; the last step's output is ignored
		until string     // inspect (tmpl) waited for
		then  string     // and after a second, still (empty: until's)
	}{
		{"on-failure", [][]string{{"run", "-d", "--name", "NAME", "--restart", "on-failure:2", "IMG", "sh", "-c", "exit 3"}}, "exited 2 3", ""},
		{"no-policy", [][]string{{"run", "-d", "--name", "NAME", "IMG", "sh", "-c", "exit 4"}}, "exited 0 4", ""},
		{"stop-is-final", [][]string{{"run", "-d", "--name", "NAME", "--restart", "always", "IMG", "sleep", "300"}, {"stop", "-t", "0", "NAME"}}, "exited 0 137", ""},
		{"kill-is-final", [][]string{{"run", "-d", "--name", "NAME", "--restart", "unless-stopped", "IMG", "sleep", "300"}, {"kill", "NAME"}}, "exited 0 137", ""},
		// A signal that is not fatal leaves the policy in place: the
		// command's exit on it is restarted (a run's exit code is 0, as
		// Docker's, while it runs).
		{"hup-restarts", [][]string{{"run", "-d", "--name", "NAME", "--restart", "on-failure:1", "IMG", "sh", "-c", "trap 'exit 5' HUP; while :; do sleep 0.1; done"}, {"kill", "-s", "HUP", "NAME"}}, "running 1 0", ""},
		{"on-failure-count", [][]string{{"run", "-d", "--name", "NAME", "--restart", "on-failure:1", "IMG", "sh", "-c", "sleep 0.3; exit 1"}}, "exited 1 1", ""},
		// restart by hand: stopped (TERM, then the kill after -t), then
		// started, its restarts counted from 0; one not running is only
		// started.
		{"restart", [][]string{{"run", "-d", "--name", "NAME", "IMG", "sleep", "300"}, {"restart", "-t", "0", "NAME"}}, "running 0 0", ""},
		{"restart-exited", [][]string{{"run", "-d", "--name", "NAME", "IMG", "sh", "-c", "[ -e /again ] && exec sleep 300; touch /again; exit 6"}, {"wait", "NAME"}, {"restart", "NAME"}}, "running 0 0", ""},
	} {
		for _, surface := range []string{"slopbox", "docker"} {
			t.Run(sc.name+"/"+surface, func(t *testing.T) {
				name := sc.name + "-" + surface
				do := func(args ...string) (string, int) {
					a := make([]string, len(args))
					for i, s := range args {
						a[i] = strings.NewReplacer("NAME", name, "IMG", e.ref).Replace(s)
					}
					if surface == "docker" {
						return dockerCLI(t, debianDocker, sock, "", a...)
					}
					return e.run("", a...)
				}
				t.Cleanup(func() { do("rm", "-f", "NAME") })
				for _, step := range sc.steps {
					if out, code := do(step...); code != 0 {
						t.Fatalf("%v: exit %d: %s", step, code, out)
					}
				}
				var got string
				ok := false
				for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(50 * time.Millisecond) {
					out, _ := do("inspect", "-f", tmpl, "NAME")
					if got = strings.TrimSpace(out); got == sc.until {
						ok = true
						break
					}
				}
				if !ok {
					t.Fatalf("inspect: %q, want %q", got, sc.until)
				}
				time.Sleep(time.Second)
				out, _ := do("inspect", "-f", tmpl, "NAME")
				if want := cmp.Or(sc.then, sc.until); strings.TrimSpace(out) != want {
					t.Errorf("a second later: %q, want %q", strings.TrimSpace(out), want)
				}
			})
		}
	}
}
