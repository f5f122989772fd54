package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// TestStopGracePeriod: slopbox stop sends the main command SIGTERM and
// kills what is left after -t seconds, as docker stop does. A command
// trapping TERM exits by its trap (exit 0, not killed); one ignoring TERM
// is killed (137) once the grace period has passed, not before.
func TestStopGracePeriod(t *testing.T) {
	e := newEnv(t)
	ready := func(name string) {
		t.Helper()
		fixtures.Eventually(t, name+" says ready", func() (bool, string) {
			return strings.Contains(e.must("logs", name), "ready"), e.evidence(name)
		})
	}
	e.must("run", "-d", "--name", "traps", e.ref, "sh", "-c", "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.1; done")
	ready("traps")
	e.must("stop", "-t", "30", "traps")
	if out := e.must("inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", "traps"); out != "false 0\n" {
		t.Errorf("a command trapping TERM: %q, want it ended by its trap (false 0)", out)
	}
	if out := e.must("logs", "traps"); !strings.Contains(out, "got TERM") {
		t.Errorf("the trap did not run: %q", out)
	}

	e.must("run", "-d", "--name", "ignores", e.ref, "sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done")
	ready("ignores")
	start := time.Now()
	e.must("stop", "-t", "2", "ignores")
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("a command ignoring TERM was killed after %v, before the 2 s grace period", d)
	}
	if out := e.must("inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", "ignores"); out != "false 137\n" {
		t.Errorf("a command ignoring TERM: %q, want it killed (false 137)", out)
	}
}

// TestInspectDockerShape: slopbox inspect of a sandbox is docker's
// container inspect, as the Engine API's.
func TestInspectDockerShape(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "shape", "--entrypoint", "sh", e.ref, "-c", "sleep 1000")
	if out := e.must("inspect", "-f", "{{.State.Running}} {{.Name}} {{json .Config.Entrypoint}} {{json .Config.Cmd}}", "shape"); out != `true /shape ["sh"] ["-c","sleep 1000"]`+"\n" {
		t.Errorf("inspect -f of a running sandbox: %q", out)
	}
	e.must("stop", "-t", "0", "shape")
	if out := e.must("inspect", "-f", "{{.State.Running}} {{.State.Status}}", "shape"); out != "false exited\n" {
		t.Errorf("inspect -f of a stopped sandbox: %q", out)
	}
}

// TestUnknownVerb: a verb a group does not have exits 1 with docker's
// "unknown command", not 0 with the group's help.
func TestUnknownVerb(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{{"container", "nosuchverb"}, {"container", "checkpoint", "x"}, {"image", "nosuchverb"}, {"docker", "container", "nosuchverb"}} {
		if out, code := e.run("", args...); code != 1 || !strings.Contains(out, "unknown command") {
			t.Errorf("%q: exit %d %q, want 1 and docker's unknown command", args, code, out)
		}
	}
}

// TestTmpfsSizeOverflowRefused: a /tmp size that does not fit in 63 bits
// is refused by run (125) and by the Engine API (400), never turned into
// no tmpfs or a wrapped size.
func TestTmpfsSizeOverflowRefused(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	if out, code := e.run("", "run", "--rm", "--tmpfs", "/tmp:size=17592186044416m", e.ref, "true"); code != 125 || !strings.Contains(out, "too large") {
		t.Errorf("run --tmpfs overflowing: exit %d %q", code, out)
	}
	code, body := engineCreate(t, sock, "big", `{"Image":"`+e.ref+`","Cmd":["true"],"HostConfig":{"Tmpfs":{"/tmp":"size=17592186044416m"}}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "too large") {
		t.Errorf("create with Tmpfs overflowing: %d %s", code, body)
	}
	// size=64m is 64 MiB through both.
	code, body = engineCreate(t, sock, "tmp64", `{"Image":"`+e.ref+`","Cmd":["sh","-c","grep ' /tmp ' /proc/mounts"],"HostConfig":{"Tmpfs":{"/tmp":"size=64m"}}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	e.must("start", "tmp64")
	e.must("wait", "tmp64")
	if out := e.must("logs", "tmp64"); !strings.Contains(out, "size=65536k") {
		t.Errorf("Tmpfs size=64m: %q", out)
	}
	if out := e.must("run", "--rm", "--tmpfs", "/tmp:size=64m", e.ref, "sh", "-c", "grep ' /tmp ' /proc/mounts"); !strings.Contains(out, "size=65536k") {
		t.Errorf("--tmpfs size=64m: %q", out)
	}
}

// TestServePortBindingsGiveBridge: PortBindings without a NetworkMode give
// the container bridge networking with the port published, as Docker's
// default network does (slopbox refused it with 400 before).
func TestServePortBindingsGiveBridge(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	code, body := engineCreate(t, sock, "pb", `{"Image":"`+e.ref+`","Cmd":["sh","-c","mkdir -p /w && echo served > /w/index.html && exec httpd -f -p 8000 -h /w"],
		"ExposedPorts":{"8000/tcp":{}},"HostConfig":{"PortBindings":{"8000/tcp":[{"HostPort":""}]}}}`)
	if code != http.StatusCreated {
		t.Fatalf("create with PortBindings and no NetworkMode: %d %s", code, body)
	}
	e.must("start", "pb")
	if out := e.must("inspect", "-f", "{{.HostConfig.NetworkMode}}", "pb"); out != "bridge\n" {
		t.Errorf("NetworkMode: %q", out)
	}
	hostPort := strings.TrimSpace(e.must("inspect", "-f", `{{(index (index .NetworkSettings.Ports "8000/tcp") 0).HostPort}}`, "pb"))
	fixtures.Eventually(t, "the server through the published port "+hostPort, func() (bool, string) {
		resp, err := http.Get("http://" + net.JoinHostPort("127.0.0.1", hostPort) + "/")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b) == "served\n", fmt.Sprintf("%q\n%s", b, e.evidence("pb"))
	})
}

// TestServeCreateWarnings: a limit the host cannot enforce (memory,
// rootless on cgroup v1) is named in the create response's Warnings, as
// the CLI warns of it, instead of being dropped silently.
func TestServeCreateWarnings(t *testing.T) {
	if os.Getuid() == 0 || cgroup2Only() {
		t.Skip("every limit is enforced here: the warning is for rootless on cgroup v1")
	}
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	code, body := engineCreate(t, sock, "warned", `{"Image":"`+e.ref+`","Cmd":["true"],"HostConfig":{"Memory":67108864}}`)
	var resp struct{ Warnings []string }
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &resp) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	if len(resp.Warnings) == 0 || !strings.Contains(strings.Join(resp.Warnings, "\n"), "memory") {
		t.Errorf("Warnings %q do not name the memory limit", resp.Warnings)
	}
}

// engineCreate posts a create body and returns the status and body.
func engineCreate(t *testing.T, sock, name, body string) (int, string) {
	t.Helper()
	resp, err := engineClient(sock).Post(fmt.Sprintf("http://d/v1.41/containers/create?name=%s", name), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLogsWindowParity: logs --tail, --since and --until give the same
// lines through the slopbox CLI and through each docker CLI against serve
// (one reading of them, service.LogWindow): dockerd's rules, a negative
// tail meaning every line and --until a bound the CLI has too.
func TestLogsWindowParity(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("run", "-d", "--name", "lines", e.ref, "sh", "-c", "echo one; sleep 0.3; echo two; sleep 0.3; echo three")
	e.must("wait", "lines")
	stamps := strings.Split(strings.TrimSpace(e.must("logs", "-t", "lines")), "\n")
	if len(stamps) != 3 {
		t.Fatalf("logs -t: %q", stamps)
	}
	at := func(i int) string { // line i's time as the docker CLI sends it
		ts, err := time.Parse(time.RFC3339Nano, strings.Fields(stamps[i])[0])
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d.%09d", ts.Unix(), ts.Nanosecond())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tail", "2"}, "two\nthree\n"},
		{[]string{"--tail", "-1"}, "one\ntwo\nthree\n"},
		{[]string{"--tail", "0"}, ""},
		{[]string{"--since", at(1)}, "two\nthree\n"},
		{[]string{"--until", at(1)}, "one\ntwo\n"},
		{[]string{"--since", at(1), "--until", at(1)}, "two\n"},
		{[]string{"--since", "10m", "--tail", "1"}, "three\n"},
		{[]string{"--until", "10m"}, ""},
	} {
		args := append(append([]string{"logs"}, c.args...), "lines")
		if out := e.must(args...); out != c.want {
			t.Errorf("slopbox %q: %q, want %q", args, out, c.want)
		}
		for name, bin := range dockerClients(t) {
			if out, code := dockerCLI(t, bin, sock, "", args...); code != 0 || out != c.want {
				t.Errorf("%s %q: exit %d %q, want %q", name, args, code, out, c.want)
			}
		}
	}
	if out, code := e.run("", "logs", "--since", "yesterday", "lines"); code != 1 || !strings.Contains(out, "invalid since") {
		t.Errorf("logs --since yesterday: exit %d %q, want 1 and what was wrong", code, out)
	}
}

// TestStopSignal: stop sends the container's stop signal first, as
// Docker's: stop -s (the Engine API's signal) over --stop-signal
// (Config.StopSignal) over the image's STOPSIGNAL over SIGTERM, through
// the slopbox CLI and the docker CLIs against serve alike; inspect shows
// the container's; a signal that is not one is refused at create.
func TestStopSignal(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	// Traps each signal a stop may send, and says which came.
	const trapper = `for s in TERM USR1 USR2 HUP; do trap "echo got $s; exit 0" $s; done; echo ready; while :; do sleep 0.1; done`
	stopped := func(name, want string, stop func()) {
		t.Helper()
		fixtures.Eventually(t, name+" says ready", func() (bool, string) {
			return strings.Contains(e.must("logs", name), "ready"), e.evidence(name)
		})
		stop()
		out := e.must("logs", name)
		if !strings.Contains(out, "got "+want) || strings.Count(out, "got ") != 1 {
			t.Errorf("%s stopped: %q, want only its trap of %s", name, out, want)
		}
		if out := e.must("inspect", "-f", "{{.State.ExitCode}}", name); out != "0\n" {
			t.Errorf("%s: exit %q, want 0 (its trap)", name, out)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+e.ref+"\nSTOPSIGNAL USR2\n"), 0o644)
	e.must("pull", "-q", e.ref)
	if out, code := e.docker("", "build", "-t", "stopsig", dir); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}

	e.must("run", "-d", "--name", "plain", e.ref, "sh", "-c", trapper)
	stopped("plain", "TERM", func() { e.must("stop", "plain") })
	e.must("run", "-d", "--name", "flagged", "--stop-signal", "usr1", e.ref, "sh", "-c", trapper)
	if out := e.must("inspect", "-f", "{{.Config.StopSignal}}", "flagged"); out != "usr1\n" {
		t.Errorf("inspect Config.StopSignal: %q", out)
	}
	stopped("flagged", "USR1", func() { e.must("stop", "flagged") })
	e.must("run", "-d", "--name", "fromimage", "stopsig", "sh", "-c", trapper)
	if out := e.must("inspect", "-f", "{{.Config.StopSignal}}", "fromimage"); out != "USR2\n" {
		t.Errorf("inspect Config.StopSignal of the image's: %q", out)
	}
	stopped("fromimage", "USR2", func() { e.must("stop", "fromimage") })
	e.must("run", "-d", "--name", "overridden", "--stop-signal", "USR1", e.ref, "sh", "-c", trapper)
	stopped("overridden", "HUP", func() { e.must("stop", "-s", "SIGHUP", "overridden") })
	// A signal the monitor does not forward (a systemd image's RTMIN+3)
	// is TERM with the grace period, not a kill at once.
	e.must("run", "-d", "--name", "rtmin", "--stop-signal", "RTMIN+3", e.ref, "sh", "-c", trapper)
	stopped("rtmin", "TERM", func() { e.must("stop", "rtmin") })

	for name, bin := range dockerClients(t) {
		n := "d-" + strings.ReplaceAll(name, ".", "")
		if out, code := dockerCLI(t, bin, sock, "", "run", "-d", "--name", n, "--stop-signal", "USR1", e.ref, "sh", "-c", trapper); code != 0 {
			t.Fatalf("%s run: exit %d %s", name, code, out)
		}
		stopped(n, "USR1", func() {
			if out, code := dockerCLI(t, bin, sock, "", "stop", n); code != 0 {
				t.Errorf("%s stop: exit %d %s", name, code, out)
			}
		})
		if out, code := dockerCLI(t, bin, sock, "", "create", "--stop-signal", "BOGUS", e.ref); code == 0 || !strings.Contains(out, "invalid signal: BOGUS") {
			t.Errorf("%s create --stop-signal BOGUS: exit %d %q, want dockerd's refusal", name, code, out)
		}
	}
	if out, code := dockerCLI(t, "/usr/local/bin/docker", sock, "", "run", "-d", "--name", "d-s", "stopsig", "sh", "-c", trapper); code == 0 {
		stopped("d-s", "HUP", func() { // API 1.42's stop signal, which docker 28 sends
			if out, code := dockerCLI(t, "/usr/local/bin/docker", sock, "", "stop", "-s", "HUP", "d-s"); code != 0 {
				t.Errorf("docker 28 stop -s HUP: exit %d %s", code, out)
			}
		})
	} else if _, err := os.Stat("/usr/local/bin/docker"); err == nil {
		t.Errorf("docker 28 run: exit %d %s", code, out)
	}
	if out, code := e.run("", "run", "--rm", "--stop-signal", "BOGUS", e.ref, "true"); code != 125 || !strings.Contains(out, "invalid signal: BOGUS") {
		t.Errorf("run --stop-signal BOGUS: exit %d %q, want 125 and the refusal", code, out)
	}
}

// TestTopParity: slopbox top and docker top against serve print one table
// (service.Top): the columns of dockerd's ps -ef, the same processes,
// host pids, and the host's name for the user where it has one.
func TestTopParity(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("run", "-d", "--name", "busy", e.ref, "sh", "-c", "sleep 1000 & sleep 1001; echo done")
	rows := func(out string) []string { // each row's UID PID PPID and CMD
		var r []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 8 {
				t.Fatalf("top row %q: want UID PID PPID C STIME TTY TIME CMD", l)
			}
			r = append(r, strings.Join(append(f[:3:3], f[7:]...), " "))
		}
		return r
	}
	// Both children have exec'd sleep (a child just forked still shows
	// its shell's command line, which names both sleeps too).
	fixtures.Eventually(t, "both sleeps run", func() (bool, string) {
		out := e.must("top", "busy")
		var sleeps int
		for _, r := range rows(out) {
			if strings.HasSuffix(r, " sleep 1000") || strings.HasSuffix(r, " sleep 1001") {
				sleeps++
			}
		}
		return sleeps == 2, out
	})
	want := rows(e.must("top", "busy"))
	if want[0] != "UID PID PPID CMD" || len(want) != 4 {
		t.Fatalf("slopbox top: %q, want the title and sh with its two sleeps", want)
	}
	for name, bin := range dockerClients(t) {
		out, code := dockerCLI(t, bin, sock, "", "top", "busy")
		if got := rows(out); code != 0 || !slices.Equal(got, want) {
			t.Errorf("%s top: exit %d %q, want slopbox top's %q", name, code, got, want)
		}
	}
}

// TestImageInspectParity: slopbox image inspect and docker image inspect
// against serve print one object (service.ImageInspectOf) in Docker's
// shape: RepoDigests name the repository each name was pulled from (not
// the words the inspect was asked with: by id it said "sha256@…"), an
// image built here has none, and Config.OnBuild is always there.
func TestImageInspectParity(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+e.ref+"\nLABEL made=here\n"), 0o644)
	if out, code := e.docker("", "build", "-t", "madehere", dir); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}
	decode := func(who, out string) map[string]any {
		t.Helper()
		var v []map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil || len(v) != 1 {
			t.Fatalf("%s: %v\n%s", who, err, out)
		}
		return v[0]
	}
	pulled := decode("slopbox image inspect", e.must("image", "inspect", e.ref))
	id, _ := pulled["Id"].(string)
	repo := e.ref[:strings.LastIndex(e.ref, ":")]
	if rd, _ := pulled["RepoDigests"].([]any); len(rd) != 1 || !strings.HasPrefix(rd[0].(string), repo+"@sha256:") {
		t.Errorf("RepoDigests of a pulled image: %v, want [%s@sha256:…]", pulled["RepoDigests"], repo)
	}
	if cfg, _ := pulled["Config"].(map[string]any); cfg == nil || !hasKey(cfg, "OnBuild") {
		t.Errorf("Config without OnBuild: %v", pulled["Config"])
	}
	// A tag in another repository adds no RepoDigest: that repository
	// never had the image.
	e.must("tag", e.ref, "elsewhere/copy:v9")
	if again := decode("slopbox image inspect", e.must("image", "inspect", "elsewhere/copy:v9")); !reflect.DeepEqual(again["RepoDigests"], pulled["RepoDigests"]) {
		t.Errorf("RepoDigests after a tag elsewhere: %v, want only the pulled repository's %v", again["RepoDigests"], pulled["RepoDigests"])
	}
	for _, ref := range []string{e.ref, id, id[len("sha256:"):][:12], "madehere"} {
		want := decode("slopbox image inspect", e.must("image", "inspect", ref))
		if ref == id {
			if !reflect.DeepEqual(want["RepoDigests"], pulled["RepoDigests"]) {
				t.Errorf("RepoDigests by id: %v, want the name's %v", want["RepoDigests"], pulled["RepoDigests"])
			}
		}
		if ref == "madehere" {
			if rd, _ := want["RepoDigests"].([]any); len(rd) != 0 {
				t.Errorf("RepoDigests of an image built here: %v, want none (dockerd's)", rd)
			}
		}
		for name, bin := range dockerClients(t) {
			out, code := dockerCLI(t, bin, sock, "", "image", "inspect", ref)
			if got := decode(name, out); code != 0 || !reflect.DeepEqual(got, want) {
				t.Errorf("%s image inspect %s: exit %d\n%v\nwant slopbox's\n%v", name, ref, code, got, want)
			}
		}
	}
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// TestChangeParity: docker import and commit --change read one way
// (imagebuild.ApplyChanges, BuildKit's parser as a Dockerfile's) through the
// slopbox CLI and the docker CLI against serve: a quoted ENV value is
// one, a name set twice is set once, VOLUME is taken, and RUN is refused.
func TestChangeParity(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	e.must("run", "-d", "--name", "src", e.ref, "sleep", "1000")
	tarball := filepath.Join(t.TempDir(), "fs.tar")
	e.must("export", "-o", tarball, "src")
	changes := []string{`ENV A="b c"`, `ENV A=d E=$A-x`, `VOLUME /data`, `LABEL "k 1"="v 1"`, `WORKDIR /w`, `CMD ["echo", "hi"]`}
	var args []string
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	const want = `{"A=d","E=b c-x","/data","v 1","/w",["echo","hi"]}`
	show := `{{json .Config.Env}}|{{json .Config.Volumes}}|{{json .Config.Labels}}|{{.Config.WorkingDir}}|{{json .Config.Cmd}}`
	check := func(who, ref string) {
		t.Helper()
		out := strings.TrimSpace(e.must("inspect", "-f", show, ref))
		for _, part := range []string{`"A=d"`, `"E=b c-x"`, `"/data":{}`, `"k 1":"v 1"`, "|/w|", `["echo","hi"]`} {
			if !strings.Contains(out, part) {
				t.Errorf("%s: %s has not %s (want %s)", who, out, part, want)
			}
		}
		if strings.Count(out, `"A=`) != 1 {
			t.Errorf("%s: A set twice is in Env twice: %s", who, out)
		}
	}
	e.must(append(append([]string{"import"}, args...), tarball, "imp:cli")...)
	check("slopbox import", "imp:cli")
	e.must(append(append([]string{"commit"}, args...), "src", "com:cli")...)
	check("slopbox commit", "com:cli")
	for name, bin := range dockerClients(t) {
		tag := strings.ReplaceAll(name, ".", "")
		if out, code := dockerCLI(t, bin, sock, "", append(append([]string{"import"}, args...), tarball, "imp:"+tag)...); code != 0 {
			t.Fatalf("%s import: exit %d %s", name, code, out)
		}
		check(name+" import", "imp:"+tag)
		if out, code := dockerCLI(t, bin, sock, "", append(append([]string{"commit"}, args...), "src", "com:"+tag)...); code != 0 {
			t.Fatalf("%s commit: exit %d %s", name, code, out)
		}
		check(name+" commit", "com:"+tag)
		if out, code := dockerCLI(t, bin, sock, "", "import", "--change", "RUN true", tarball, "nope"); code == 0 || !strings.Contains(out, "RUN cannot be changed") {
			t.Errorf("%s import --change RUN: exit %d %q, want the refusal", name, code, out)
		}
	}
	if out, code := e.run("", "import", "--change", "RUN true", tarball, "nope"); code == 0 || !strings.Contains(out, "RUN cannot be changed") {
		t.Errorf("slopbox import --change RUN: exit %d %q", code, out)
	}
}

// TestServeHostnameRefused: a hostname that is not one is Docker's 400
// through the Engine API, with the rule's words, not a 500.
func TestServeHostnameRefused(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	code, body := engineCreate(t, sock, "badhost", `{"Image":"`+e.ref+`","Cmd":["true"],"Hostname":"a_b"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "invalid hostname") {
		t.Errorf("create with Hostname a_b: %d %s, want 400 and the rule", code, body)
	}
	if out, code := e.run("", "run", "--rm", "--hostname", "a_b", e.ref, "true"); code != 125 || !strings.Contains(out, "invalid hostname") {
		t.Errorf("run --hostname a_b: exit %d %q, want 125 and the rule", code, out)
	}
}

// TestListParity: docker ps, volume ls and container prune with Docker's
// filters (the label filters compose and testcontainers send) answer the
// same through the slopbox CLI and through the docker CLI against serve:
// each is one method of the service (ListContainers, ListVolumes,
// PruneContainers) that both surfaces call (issue 43).
func TestListParity(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	const project, service = "com.docker.compose.project", "com.docker.compose.service"
	for _, c := range [][]string{
		{"create", "--name", "lp-a", "--label", project + "=p1", "--label", service + "=web", e.ref, "sleep", "300"},
		{"run", "-d", "--name", "lp-b", "--label", project + "=p1", "--label", service + "=db", e.ref, "sleep", "300"},
		{"run", "-d", "--name", "lp-c", "--label", project + "=p2", e.ref, "sleep", "300"},
		{"create", "--name", "lp-d", "--label", project + "=p2", e.ref, "true"},
		{"volume", "create", "--label", "k=v", "lp-v1"},
		{"volume", "create", "lp-v2"},
	} {
		e.must(c...)
	}
	t.Cleanup(func() {
		e.run("", "rm", "-f", "lp-a", "lp-b", "lp-c", "lp-d")
		e.run("", "volume", "rm", "-f", "lp-v1", "lp-v2")
	})
	lines := func(out string) []string {
		l := strings.Fields(strings.ReplaceAll(strings.TrimSpace(out), "\n", " "))
		slices.Sort(l)
		return l
	}
	for _, q := range []struct {
		args []string
		want []string
	}{
		{[]string{"ps", "-a", "--filter", "label=" + project + "=p1", "--format", "{{.Names}}:{{.State}}"}, []string{"lp-a:created", "lp-b:running"}},
		{[]string{"ps", "--filter", "label=" + project + "=p1", "--format", "{{.Names}}"}, []string{"lp-b"}},
		{[]string{"ps", "-a", "--filter", "label=" + project + "=p1", "--filter", "label=" + service + "=db", "--format", "{{.Names}}"}, []string{"lp-b"}},
		{[]string{"ps", "--filter", "status=created", "--format", "{{.Names}}"}, []string{"lp-a", "lp-d"}},
		{[]string{"ps", "-a", "--filter", "name=lp-c", "--filter", "name=lp-d", "--format", "{{.Names}}"}, []string{"lp-c", "lp-d"}},
		{[]string{"volume", "ls", "-q", "--filter", "label=k=v"}, []string{"lp-v1"}},
		{[]string{"volume", "ls", "-q", "--filter", "name=lp-v"}, []string{"lp-v1", "lp-v2"}},
	} {
		mine, code := e.run("", q.args...)
		if code != 0 {
			t.Fatalf("slopbox %v: exit %d: %s", q.args, code, mine)
		}
		theirs, code := dockerCLI(t, debianDocker, sock, "", q.args...)
		if code != 0 {
			t.Fatalf("docker %v: exit %d: %s", q.args, code, theirs)
		}
		if !slices.Equal(lines(mine), q.want) || !slices.Equal(lines(theirs), q.want) {
			t.Errorf("%v: slopbox %q, docker %q, want %q", q.args, lines(mine), lines(theirs), q.want)
		}
	}
	// A prune with a label filter removes the stopped containers of that
	// project only, whichever surface asks.
	ids := map[string]string{}
	for _, n := range []string{"lp-a", "lp-c", "lp-d"} {
		ids[n] = strings.TrimSpace(e.must("inspect", "-f", "{{.Id}}", n))
	}
	if out, code := dockerCLI(t, debianDocker, sock, "", "container", "prune", "-f", "--filter", "label="+project+"=p1"); code != 0 || !strings.Contains(out, ids["lp-a"]) {
		t.Errorf("docker container prune of p1: exit %d: %s (want lp-a deleted)", code, out)
	}
	if out, code := e.run("", "prune", "--filter", "label="+project+"=p2"); code != 0 || !strings.Contains(out, ids["lp-d"]) || strings.Contains(out, ids["lp-c"]) {
		t.Errorf("slopbox prune of p2: exit %d: %s (want lp-d deleted, lp-c kept)", code, out)
	}
	if got := lines(e.must("ps", "-a", "--filter", "name=lp-", "--format", "{{.Names}}")); !slices.Equal(got, []string{"lp-b", "lp-c"}) {
		t.Errorf("after the prunes: %q, want lp-b and lp-c", got)
	}
}

// TestRestartOfRmRefused: the restart of a --rm container is refused
// before anything is done, through the CLI and through serve alike (its
// stop would remove it before the start), and the container runs on.
func TestRestartOfRmRefused(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	e.must("pull", "-q", e.ref)
	e.must("run", "-d", "--rm", "--name", "rr", e.ref, "sleep", "300")
	t.Cleanup(func() { e.run("", "rm", "-f", "rr") })
	if out, code := e.run("", "restart", "rr"); code == 0 || !strings.Contains(out, "--rm") {
		t.Errorf("slopbox restart of a --rm container: exit %d: %s", code, out)
	}
	if out, code := dockerCLI(t, debianDocker, sock, "", "restart", "rr"); code == 0 || !strings.Contains(out, "--rm") {
		t.Errorf("docker restart of a --rm container: exit %d: %s", code, out)
	}
	if out := strings.TrimSpace(e.must("inspect", "-f", "{{.State.Status}}", "rr")); out != "running" {
		t.Errorf("after the refused restarts: %s, want running", out)
	}
}
