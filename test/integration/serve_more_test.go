package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// eventually polls cond for up to a generous deadline (busy CI hosts).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// dockerEvents runs `docker events` against sock for the rest of the test
// and returns what it has printed so far, one event a line: STATUS NAME
// EXITCODE. It returns once the stream is known to be live (an event of
// a probe container was seen).
func dockerEvents(t *testing.T, sock, ref string) func() []string {
	t.Helper()
	bin, err := exec.LookPath("docker")
	if err != nil {
		t.Fatalf("the docker CLI is not installed: %v", err)
	}
	cmd := exec.Command(bin, "events", "--filter", "type=container", "--format",
		`{{.Status}} {{.Actor.Attributes.name}} {{index .Actor.Attributes "exitCode"}}`)
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+sock, "DOCKER_CONFIG="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
	})
	get := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
	// The stream has no replay: create probes until one is reported.
	for i := 0; ; i++ {
		probe := fmt.Sprintf("ev-probe-%d", i)
		if out, code := dockerCLI(t, sock, "", "create", "--name", probe, ref, "true"); code != 0 {
			t.Fatalf("docker create: %d %s", code, out)
		}
		seen := func() bool { return has(get(), "create "+probe+" ") }
		for deadline := time.Now().Add(5 * time.Second); !seen() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		}
		dockerCLI(t, sock, "", "rm", probe)
		if seen() {
			return get
		}
		if i == 5 {
			t.Fatalf("docker events reported none of the probes' creation: %q", get())
		}
	}
}

// has reports whether a line of lines starts with prefix.
func has(lines []string, prefix string) bool {
	return count(lines, prefix) > 0
}

func count(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// TestServeEvents: docker events reports a container's start and die
// however its command ends: on its own (run --rm, run -d), by docker kill,
// by docker stop, by rm -f; each die once, with its exit code.
func TestServeEvents(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	events := dockerEvents(t, sock, e.ref)
	must := func(args ...string) string {
		t.Helper()
		out, code := dockerCLI(t, sock, "", args...)
		if code != 0 {
			t.Fatalf("docker %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	want := func(prefixes ...string) {
		t.Helper()
		eventually(t, fmt.Sprintf("events %q", prefixes), func() bool {
			got := events()
			for _, p := range prefixes {
				if !has(got, p) {
					return false
				}
			}
			return true
		})
	}
	must("run", "--rm", "--name", "ev-rm", e.ref, "true")
	want("start ev-rm ", "die ev-rm 0", "destroy ev-rm ")
	if out, code := dockerCLI(t, sock, "", "run", "--name", "ev-exit", e.ref, "sh", "-c", "exit 3"); code != 3 {
		t.Fatalf("docker run exit 3: %d %s", code, out)
	}
	want("start ev-exit ", "die ev-exit 3")
	must("run", "-d", "--name", "ev-bg", e.ref, "sh", "-c", "sleep 0.3; exit 4")
	want("start ev-bg ", "die ev-bg 4")
	must("run", "-d", "--name", "ev-kill", e.ref, "sleep", "1000")
	must("kill", "ev-kill")
	want("start ev-kill ", "kill ev-kill ", "die ev-kill 137")
	must("run", "-d", "--name", "ev-stop", e.ref, "sleep", "1000")
	must("stop", "-t", "0", "ev-stop")
	want("start ev-stop ", "die ev-stop ", "stop ev-stop ")
	must("run", "-d", "--name", "ev-rmf", e.ref, "sleep", "1000")
	must("rm", "-f", "ev-rmf")
	want("start ev-rmf ", "die ev-rmf 137", "destroy ev-rmf ")

	got := events()
	for _, name := range []string{"ev-rm", "ev-exit", "ev-bg", "ev-kill", "ev-stop", "ev-rmf"} {
		if n := count(got, "die "+name+" "); n != 1 {
			t.Errorf("%s: %d die events, want 1", name, n)
		}
		if n := count(got, "start "+name+" "); n != 1 {
			t.Errorf("%s: %d start events, want 1", name, n)
		}
	}
	// Docker's order: die before stop and before destroy.
	order := func(a, b string) {
		ia, ib := -1, -1
		for i, l := range got {
			if strings.HasPrefix(l, a) && ia < 0 {
				ia = i
			}
			if strings.HasPrefix(l, b) && ib < 0 {
				ib = i
			}
		}
		if ia < 0 || ib < 0 || ia > ib {
			t.Errorf("events out of order, want %q before %q: %q", a, b, got)
		}
	}
	order("die ev-stop ", "stop ev-stop ")
	order("die ev-rmf ", "destroy ev-rmf ")
	order("start ev-rm ", "die ev-rm ")
	order("die ev-rm ", "destroy ev-rm ")
	must("rm", "ev-exit", "ev-bg", "ev-kill", "ev-stop")
}
