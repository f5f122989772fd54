package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// TestNamedVolumes: a named volume keeps what a sandbox wrote for the
// next one (the CLI's -v NAME:/path and --mount type=volume, docker's
// volume verbs, in the docker-argv mode too); a volume a sandbox uses is
// not removed; the docker CLI through serve sees the same volumes.
func TestNamedVolumes(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	// Anonymous volumes (-v /path): gone with run --rm, and with rm -v.
	e.must("run", "--rm", "-v", "/anon", e.ref, "sh", "-c", "echo x > /anon/f")
	if out := e.must("volume", "ls", "-q"); out != "" {
		t.Errorf("run --rm left its anonymous volume: %q", out)
	}
	e.must("create", "--name", "anon1", "-v", "/anon", e.ref, "true")
	if out := e.must("volume", "ls", "-q"); len(strings.TrimSpace(out)) != 64 {
		t.Errorf("create -v /anon: volumes %q, want one anonymous", out)
	}
	e.must("rm", "-v", "anon1")
	if out := e.must("volume", "ls", "-q"); out != "" {
		t.Errorf("rm -v left the anonymous volume: %q", out)
	}
	if out := e.must("volume", "create", "--label", "k=v", "data1"); out != "data1\n" {
		t.Errorf("volume create: %q", out)
	}
	t.Cleanup(func() { e.run("", "volume", "rm", "-f", "data1", "data2") })
	// Written by container root (the directory is the sandbox root's, as
	// Docker's), then read by the next sandbox.
	e.must("run", "--rm", "-v", "data1:/data", e.ref, "sh", "-c", "echo kept > /data/f && mkdir /data/d")
	if out := e.must("run", "--rm", "--mount", "type=volume,source=data1,target=/v,readonly", e.ref, "sh", "-c", "cat /v/f; touch /v/no 2>/dev/null || echo ro"); out != "kept\nro\n" {
		t.Errorf("second sandbox over the volume: %q", out)
	}
	// -v with a name that does not exist makes the volume, as Docker's.
	e.must("run", "--rm", "-v", "data2:/data", e.ref, "true")
	if out, code := e.docker("", "volume", "ls", "-q"); code != 0 || out != "data1\ndata2\n" {
		t.Errorf("docker volume ls -q: %d %q", code, out)
	}
	if out := e.must("volume", "ls", "--filter", "label=k=v", "-q"); out != "data1\n" {
		t.Errorf("volume ls --filter label=k=v: %q", out)
	}
	if out := e.must("volume", "inspect", "data1"); !strings.Contains(out, `"Driver": "local"`) || !strings.Contains(out, `"k": "v"`) {
		t.Errorf("volume inspect: %s", out)
	}
	// In use by a sandbox, even one not running: refused, with -f too.
	e.must("create", "--name", "holder", "-v", "data1:/data", e.ref, "true")
	for _, args := range [][]string{{"volume", "rm", "data1"}, {"volume", "rm", "-f", "data1"}} {
		if out, code := e.run("", args...); code == 0 || !strings.Contains(out, "volume is in use") {
			t.Errorf("%v of a volume in use: %d %q", args, code, out)
		}
	}
	if out := e.must("volume", "prune", "-a"); !strings.Contains(out, "data2") || strings.Contains(out, "data1") {
		t.Errorf("volume prune -a: %q", out)
	}
	e.must("rm", "holder")
	e.must("volume", "rm", "data1")
	if out, code := e.run("", "volume", "inspect", "data1"); code != 1 || !strings.Contains(out, "no such volume") {
		t.Errorf("inspect of a removed volume: %d %q", code, out)
	}
	if out, code := e.run("", "volume", "create", "bad/name"); code == 0 || !strings.Contains(out, "invalid characters") {
		t.Errorf("volume create bad/name: %d %q", code, out)
	}

	// The docker CLI through serve: the same volumes, and a 409 for one
	// in use.
	sock := e.serve(t)
	docker := func(args ...string) (string, int) { return dockerCLI(t, debianDocker, sock, "", args...) }
	if out, code := docker("volume", "create", "web"); code != 0 || out != "web\n" {
		t.Fatalf("docker volume create: %d %q", code, out)
	}
	t.Cleanup(func() { e.run("", "volume", "rm", "-f", "web") })
	if out, code := docker("run", "--rm", "-v", "web:/w", e.ref, "sh", "-c", "echo hi > /w/x"); code != 0 {
		t.Fatalf("docker run -v web:/w: %d %q", code, out)
	}
	// docker run --rm (AutoRemove) takes its anonymous volume along.
	if out, code := docker("run", "--rm", "-v", "/anon", e.ref, "touch", "/anon/f"); code != 0 {
		t.Fatalf("docker run --rm -v /anon: %d %q", code, out)
	}
	fixtures.Eventually(t, "docker run --rm -v /anon: its volume removed", func() (bool, string) {
		out, _ := docker("volume", "ls", "-q")
		return out == "web\n", fmt.Sprintf("volumes left %q", out)
	})
	if out := e.must("run", "--rm", "-v", "web:/w", e.ref, "cat", "/w/x"); out != "hi\n" {
		t.Errorf("the CLI reads what docker's run wrote: %q", out)
	}
	if out, code := docker("create", "--name", "user1", "-v", "web:/w", e.ref, "true"); code != 0 {
		t.Fatalf("docker create: %d %q", code, out)
	}
	if out, code := docker("inspect", "-f", "{{range .Mounts}}{{.Type}} {{.Name}} {{.Destination}}{{end}}", "user1"); code != 0 || out != "volume web /w\n" {
		t.Errorf("inspect Mounts: %d %q", code, out)
	}
	if out, code := docker("volume", "rm", "web"); code == 0 || !strings.Contains(out, "volume is in use") {
		t.Errorf("docker volume rm of a volume in use: %d %q", code, out)
	}
	docker("rm", "user1")
	if out, code := docker("volume", "rm", "web"); code != 0 {
		t.Errorf("docker volume rm: %d %q", code, out)
	}
}

// TestServeRestartUpdateHealth: through the docker CLI and serve, a
// restart policy restarts the main command while serve runs (RestartCount
// counts; on-failure:N stops after N; a stop is not undone), update
// changes the limits of a running container (its cgroup too, as root) and
// its policy, a healthcheck turns the health to healthy or unhealthy with
// health_status events, LogConfig is checked and echoed, and GroupAdd
// reaches the main command and execs.
func TestServeRestartUpdateHealth(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	docker := func(args ...string) string {
		t.Helper()
		out, code := dockerCLI(t, debianDocker, sock, "", args...)
		if code != 0 {
			t.Fatalf("docker %v: exit %d: %s", args, code, out)
		}
		return strings.TrimSpace(out)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		fixtures.Eventually(t, what, func() (bool, string) { return cond(), "" })
	}
	e.must("pull", "-q", e.ref)

	// on-failure:2 — two restarts, then it stays exited.
	docker("run", "-d", "--name", "fail2", "--restart", "on-failure:2", e.ref, "sh", "-c", "exit 3")
	until("on-failure:2 restarted twice and exited", func() bool {
		return docker("inspect", "-f", "{{.RestartCount}} {{.State.Status}} {{.State.ExitCode}}", "fail2") == "2 exited 3"
	})
	time.Sleep(time.Second)
	if out := docker("inspect", "-f", "{{.RestartCount}} {{.HostConfig.RestartPolicy.Name}}:{{.HostConfig.RestartPolicy.MaximumRetryCount}}", "fail2"); out != "2 on-failure:2" {
		t.Errorf("on-failure:2 after its retries: %q", out)
	}
	// A start by hand counts from 0 again: on-failure:2 restarts it twice
	// more, so three runs start (counted from the events: sampling the
	// count races the restarts, 100 and 200 ms apart).
	restartEvents := followEvents(t, sock)
	docker("start", "fail2")
	until("fail2 restarted twice again", func() bool {
		return docker("inspect", "-f", "{{.RestartCount}} {{.State.Status}}", "fail2") == "2 exited"
	})
	starts := func() int {
		n := 0
		for _, line := range strings.Split(restartEvents.String(), "\n") {
			var m struct {
				Action string
				Actor  struct{ Attributes map[string]string }
			}
			if json.Unmarshal([]byte(line), &m) == nil && m.Action == "start" && m.Actor.Attributes["name"] == "fail2" {
				n++
			}
		}
		return n
	}
	// The stream may deliver the last start a moment after inspect shows
	// the run it began has ended.
	fixtures.Eventually(t, "fail2's three starts in the events", func() (bool, string) {
		return starts() >= 3, "events:\n" + restartEvents.String()
	})
	if n := starts(); n != 3 {
		t.Errorf("fail2 started %d times after a start by hand, want 3 (it and two restarts): events:\n%s", n, restartEvents)
	}
	// always — a command that ends is started again; a stop is final.
	docker("run", "-d", "--name", "always", "--restart", "always", e.ref, "sh", "-c", "sleep 0.3")
	until("always restarted", func() bool {
		n, _ := strconv.Atoi(docker("inspect", "-f", "{{.RestartCount}}", "always"))
		return n >= 2
	})
	docker("stop", "-t", "1", "always")
	n := docker("inspect", "-f", "{{.RestartCount}}", "always")
	time.Sleep(2 * time.Second)
	if out := docker("inspect", "-f", "{{.RestartCount}} {{.State.Running}}", "always"); out != n+" false" {
		t.Errorf("always after stop: %q, want %q", out, n+" false")
	}
	// Refused policies: 400s with dockerd's words.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--restart", "always", "--rm"}, "onflicting options"}, // the client's check, or the server's
		{[]string{"--restart", "sometimes"}, "invalid restart policy"},
		{[]string{"--log-driver", "syslog"}, "logger: no log driver named 'syslog' is registered"},
		{[]string{"--log-opt", "nosuch=1"}, "unknown log opt 'nosuch' for json-file log driver"},
	} {
		args := append(append([]string{"create"}, c.args...), e.ref, "true")
		if out, code := dockerCLI(t, debianDocker, sock, "", args...); code == 0 || !strings.Contains(out, c.msg) {
			t.Errorf("docker %v: %d %q, want an error with %q", args, code, out, c.msg)
		}
	}
	docker("create", "--name", "logs", "--log-driver", "local", "--log-opt", "max-size=1m", e.ref, "true")
	if out := docker("inspect", "-f", "{{.HostConfig.LogConfig.Type}} {{index .HostConfig.LogConfig.Config \"max-size\"}}", "logs"); out != "local 1m" {
		t.Errorf("LogConfig: %q", out)
	}

	// update: limits of a running container, and its policy.
	docker("run", "-d", "--name", "upd", "--memory", "64m", e.ref, "sleep", "300")
	docker("update", "--memory", "96m", "--memory-swap", "96m", "--cpus", "0.5", "--pids-limit", "50", "--restart", "unless-stopped", "upd")
	if out := docker("inspect", "-f", "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} {{.HostConfig.PidsLimit}} {{.HostConfig.RestartPolicy.Name}}", "upd"); out != "100663296 500000000 50 unless-stopped" {
		t.Errorf("inspect after update: %q", out)
	}
	if os.Geteuid() == 0 {
		// The cgroup has the new limit: memory.max (v2) or the v1 file.
		id := docker("inspect", "-f", "{{.Id}}", "upd")
		var st struct{ Cgroups map[string]string }
		b, _ := os.ReadFile(filepath.Join(e.root, "c", id, "state.json"))
		json.Unmarshal(b, &st)
		file := filepath.Join(st.Cgroups[""], "memory.max") // v2
		if p, ok := st.Cgroups["memory"]; ok {
			file = filepath.Join(p, "memory.limit_in_bytes")
		}
		if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != "100663296" {
			t.Errorf("the cgroup's memory limit after update (%s): %q %v", file, b, err)
		}
	}
	e.must("update", "--memory", "128m", "upd")
	if out := docker("inspect", "-f", "{{.HostConfig.Memory}}", "upd"); out != "134217728" {
		t.Errorf("inspect after slopbox update: %q", out)
	}
	if out, code := e.run("", "update", "--restart", "bogus", "upd"); code == 0 || !strings.Contains(out, "invalid restart policy") {
		t.Errorf("slopbox update --restart bogus: %d %q", code, out)
	}

	// Healthchecks: healthy, and unhealthy after its retries.
	events := followEvents(t, sock)
	docker("run", "-d", "--name", "good", "--health-cmd", "true", "--health-interval", "1s", "--health-retries", "1", e.ref, "sleep", "300")
	docker("run", "-d", "--name", "bad", "--health-cmd", "exit 1", "--health-interval", "1s", "--health-retries", "2", e.ref, "sleep", "300")
	until("good is healthy", func() bool { return docker("inspect", "-f", "{{.State.Health.Status}}", "good") == "healthy" })
	until("bad is unhealthy", func() bool {
		return docker("inspect", "-f", "{{.State.Health.Status}} {{.State.Health.FailingStreak}}", "bad") == "unhealthy 2"
	})
	if out := docker("inspect", "-f", "{{json .Config.Healthcheck.Test}}", "good"); out != `["CMD-SHELL","true"]` {
		t.Errorf("Config.Healthcheck.Test: %q", out)
	}
	for name, status := range map[string]string{"good": "healthy", "bad": "unhealthy"} {
		found := false
		for _, l := range strings.Split(events.String(), "\n") {
			found = found || strings.Contains(l, `"status":"health_status: `+status+`"`) && strings.Contains(l, `"name":"`+name+`"`)
		}
		if !found {
			t.Errorf("no health_status: %s event of %s in:\n%s", status, name, events.String())
		}
	}

	// The health is starting from the start on: an inspect right after
	// the start (docker-py's wait_on_health_status) has State.Health.
	client := engineClient(sock)
	api := func(method, path, body string) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, "http://slopbox/v1.41"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b
	}
	missed := 0
	for range 20 {
		var created struct{ Id string }
		json.Unmarshal(api("POST", "/containers/create", `{"Image":"`+e.ref+`","Cmd":["sleep","300"],
			"Healthcheck":{"Test":["CMD-SHELL","true"],"Interval":3600000000000}}`), &created)
		api("POST", "/containers/"+created.Id+"/start", "")
		var got struct {
			State struct{ Health *struct{ Status string } }
		}
		json.Unmarshal(api("GET", "/containers/"+created.Id+"/json", ""), &got)
		if got.State.Health == nil || got.State.Health.Status != "starting" {
			missed++
		}
		api("DELETE", "/containers/"+created.Id+"?force=1", "")
	}
	if missed > 0 {
		t.Errorf("%d of 20 inspects right after the start had no State.Health starting", missed)
	}

	// GroupAdd: the main command's groups and an exec's.
	docker("run", "-d", "--name", "groups", "--group-add", "1234", "--group-add", "app", e.ref, "sh", "-c", "id -G > /tmp/groups; exec sleep 300")
	if out := docker("exec", "groups", "id", "-G"); !strings.Contains(out, "1234") || !strings.Contains(out, "1000") {
		t.Errorf("exec id -G with --group-add 1234 and app: %q", out)
	}
	if out := docker("exec", "groups", "cat", "/tmp/groups"); !strings.Contains(out, "1234") || !strings.Contains(out, "1000") {
		t.Errorf("main command's groups: %q", out)
	}
	if out := e.must("run", "--rm", "--group-add", "4321", e.ref, "id", "-G"); !strings.Contains(out, "4321") {
		t.Errorf("slopbox run --group-add 4321: %q", out)
	}
}

// eventLog collects the lines of a /events stream.
type eventLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// followEvents follows serve's /events until the test ends.
func followEvents(t *testing.T, sock string) *eventLog {
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://slopbox/v1.41/events", nil)
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l := &eventLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return l
}
