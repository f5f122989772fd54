package clients

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// dockerClients are the docker CLIs to drive compose through: Debian's
// docker.io 20.10 (scripts/deps.sh installs it) always, and the docker 28
// client where the machine has one (an optional extra: its subtest says so
// when it is not there).
func dockerClients(t *testing.T) map[string]string {
	clients := map[string]string{"debian-20.10": "/usr/bin/docker"}
	if _, err := os.Stat(clients["debian-20.10"]); err != nil {
		t.Fatalf("Debian's docker.io client is not installed (scripts/deps.sh installs it): %v", err)
	}
	clients["docker-28"] = "/usr/local/bin/docker"
	return clients
}

// composePlugin installs the pinned docker compose v2 (built from the Go
// module proxy by scripts/clients.sh) as the clients' CLI plugin.
func composePlugin(t *testing.T) {
	t.Helper()
	// COMPOSE_BIN, else the checkout's build, else a copy beside the
	// slopbox binary (the rootless run's).
	bin := os.Getenv("COMPOSE_BIN")
	for _, p := range []string{"../../.work/bin/docker-compose", "../../bin/docker-compose"} {
		if _, err := os.Stat(p); bin == "" && err == nil {
			bin, _ = filepath.Abs(p)
		}
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatalf("docker compose v2 is not built (scripts/clients.sh builds it; or set COMPOSE_BIN): %v", err)
	}
	dir := filepath.Join(os.Getenv("DOCKER_CONFIG"), "cli-plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "docker-compose"), b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// compose runs `docker compose -p project ARGS` in dir with stdin.
func compose(t *testing.T, docker, dir, project, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(docker, append([]string{"compose", "-p", project}, args...)...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("docker compose %v: %v", args, err)
	}
	return string(out), 0
}

// inspectCompose is Inspect AI's default compose file (its docker
// sandbox's: network_mode none, init, a healthcheck, a short stop grace
// period) with a second service of the same image in another working
// directory, as its multi-service files have: issue 41 case 0, where
// `compose exec service_1 pwd` printed the other service's directory.
const inspectCompose = `services:
  default:
    image: busybox:latest
    command: "tail -f /dev/null"
    init: true
    network_mode: none
    stop_grace_period: 1s
    healthcheck:
      test: ["CMD", "true"]
      interval: 1s
      start_period: 1s
  service_1:
    image: busybox:latest
    command: "tail -f /dev/null"
    working_dir: /usr/local/dir1
    network_mode: none
    stop_grace_period: 1s
`

// TestComposeInspectSequence replays the calls Inspect AI's docker sandbox
// makes (src/inspect_ai/util/_sandbox/docker/), through docker compose
// v2.40.3 and each docker client, unchanged: the version checks, config,
// up --wait, ps --format json, exec with workdir, env, user, stdin and
// exit codes, cp both ways, logs, stop/start/restart, down --volumes.
func TestComposeInspectSequence(t *testing.T) {
	composePlugin(t)
	for name, docker := range dockerClients(t) {
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(docker); err != nil {
				t.Skipf("no %s client on this machine (%s): an optional extra", name, docker)
			}
			inspectSequence(t, docker, "insp-"+strings.ReplaceAll(name, ".", ""))
		})
	}
}

func inspectSequence(t *testing.T, docker, project string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(inspectCompose), 0o644); err != nil {
		t.Fatal(err)
	}
	must := func(stdin string, args ...string) string {
		t.Helper()
		out, code := compose(t, docker, dir, project, stdin, args...)
		if code != 0 {
			t.Fatalf("docker compose %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	t.Cleanup(func() { compose(t, docker, dir, project, "", "down", "--volumes", "--remove-orphans") })

	// Inspect refuses an engine older than 24.0.6 and a compose older
	// than 2.21, reading both as semver.
	out, err := exec.Command(docker, "version", "--format", "{{.Server.Version}}").CombinedOutput()
	if v := strings.TrimSpace(string(out)); err != nil || !atLeast(v, 24, 0, 6) {
		t.Errorf("docker version Server.Version: %q %v, want semver at least 24.0.6", v, err)
	}
	if v := strings.TrimSpace(must("", "version", "--short")); !atLeast(strings.TrimPrefix(v, "v"), 2, 21, 0) {
		t.Errorf("docker compose version: %q, want at least 2.21", v)
	}
	var cfg struct {
		Services map[string]struct {
			Image       string `json:"image"`
			NetworkMode string `json:"network_mode"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(must("", "config", "--format", "json")), &cfg); err != nil || cfg.Services["default"].NetworkMode != "none" {
		t.Fatalf("compose config: %+v %v", cfg, err)
	}
	must("", "up", "--detach", "--wait", "--wait-timeout", "120")

	// ps --format json: one object a line (compose 2.21 and later).
	type psRow struct{ Service, State, Health string }
	var rows []psRow
	sc := bufio.NewScanner(strings.NewReader(must("", "ps", "--format", "json", "--status", "running")))
	for sc.Scan() {
		var r psRow
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			rows = append(rows, r)
		}
	}
	health := map[string]string{}
	for _, r := range rows {
		health[r.Service] = r.State + "/" + r.Health
	}
	if health["default"] != "running/healthy" || !strings.HasPrefix(health["service_1"], "running") {
		t.Errorf("compose ps: %+v, want both running and default healthy", rows)
	}

	// Each service's command lands in its own container (case 0).
	if got := strings.TrimSpace(must("", "exec", "-T", "service_1", "pwd")); got != "/usr/local/dir1" {
		t.Errorf("compose exec service_1 pwd: %q, want /usr/local/dir1", got)
	}
	if got := strings.TrimSpace(must("", "exec", "-T", "default", "pwd")); got != "/" {
		t.Errorf("compose exec default pwd: %q, want /", got)
	}
	got := must("from stdin\n", "exec", "-T", "--workdir", "/tmp", "--env", "INSPECT_VAR=set", "--user", "1000", "default",
		"sh", "-c", "pwd; echo $INSPECT_VAR; id -u; cat")
	if got != "/tmp\nset\n1000\nfrom stdin\n" {
		t.Errorf("compose exec with workdir, env, user and stdin: %q", got)
	}
	if out, code := compose(t, docker, dir, project, "", "exec", "-T", "default", "sh", "-c", "echo partial; exit 7"); code != 7 || !strings.Contains(out, "partial") {
		t.Errorf("compose exec exiting 7: exit %d %q", code, out)
	}
	if _, code := compose(t, docker, dir, project, "", "exec", "-T", "default", "no-such-command"); code != 126 && code != 127 {
		t.Errorf("compose exec of a missing command: exit %d, want 126 or 127 as dockerd", code)
	}

	// cp both ways.
	src := filepath.Join(dir, "in.txt")
	os.WriteFile(src, []byte("written by the harness\n"), 0o644)
	must("", "cp", src, "default:/tmp/in.txt")
	if got := must("", "exec", "-T", "default", "cat", "/tmp/in.txt"); got != "written by the harness\n" {
		t.Errorf("after compose cp in: %q", got)
	}
	must("", "exec", "-T", "default", "sh", "-c", "echo made inside > /tmp/out.txt")
	back := filepath.Join(dir, "out.txt")
	must("", "cp", "default:/tmp/out.txt", back)
	if b, err := os.ReadFile(back); err != nil || string(b) != "made inside\n" {
		t.Errorf("after compose cp out: %q %v", b, err)
	}

	must("", "logs", "--no-color")
	must("", "stop")
	if out := must("", "ps", "--format", "json", "--status", "running"); strings.TrimSpace(out) != "" {
		t.Errorf("running after compose stop: %s", out)
	}
	must("", "start")
	must("", "restart")
	if got := strings.TrimSpace(must("", "exec", "-T", "service_1", "pwd")); got != "/usr/local/dir1" {
		t.Errorf("after restart, compose exec service_1 pwd: %q", got)
	}
	must("", "down", "--volumes", "--remove-orphans")
	if out, _ := exec.Command(slopbox, "--root", root, "ps", "-aq", "--filter", "label=com.docker.compose.project="+project).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("compose down left containers: %s", out)
	}
}

// atLeast reports whether semver v (MAJOR.MINOR.PATCH...) is at least
// major.minor.patch.
func atLeast(v string, major, minor, patch int) bool {
	parts := strings.SplitN(strings.SplitN(v, "-", 2)[0], ".", 3)
	if len(parts) < 2 {
		return false
	}
	want := []int{major, minor, patch}
	for i := range 3 {
		n := 0
		if i < len(parts) {
			var err error
			if n, err = strconv.Atoi(parts[i]); err != nil {
				return false
			}
		}
		if n != want[i] {
			return n > want[i]
		}
	}
	return true
}

// composeV1File has a service that waits for another's healthcheck
// (depends_on: condition: service_healthy, which compose 1.29 reads from
// Config.Healthcheck in inspect) and two services of one image in
// different working directories.
const composeV1File = `version: "2.4"
services:
  db:
    image: busybox:latest
    command: "tail -f /dev/null"
    network_mode: none
    healthcheck:
      test: ["CMD", "true"]
      interval: 1s
  app:
    image: busybox:latest
    command: "tail -f /dev/null"
    network_mode: none
    working_dir: /usr/local
    depends_on:
      db:
        condition: service_healthy
`

// composeV1 writes file as docker-compose.yml in a directory of its own
// and returns a runner of Debian's docker-compose 1.29 on project there
// (a failed command fails the test); the project is brought down, with
// its volumes and orphans, when the test ends.
func composeV1(t *testing.T, project, file string) func(args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("docker-compose")
	if err != nil || !strings.HasPrefix(bin, "/usr/bin/") {
		t.Fatalf("Debian's docker-compose 1.29 is not installed (scripts/deps.sh installs it): %v %s", err, bin)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "docker-compose.yml"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd := exec.Command(bin, "-p", project, "down", "-v", "--remove-orphans")
		cmd.Dir = dir
		cmd.Run()
	})
	return func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"-p", project}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docker-compose %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
}

// TestComposeV1DependsOnHealthy: Debian's docker-compose 1.29 (python,
// through docker-py), unchanged: up waits for db's healthcheck before it
// starts app, exec lands in each service's own container, down -v
// leaves nothing.
func TestComposeV1DependsOnHealthy(t *testing.T) {
	run := composeV1(t, "v1deps", composeV1File)
	run("up", "-d")
	if got := strings.TrimSpace(run("exec", "-T", "app", "pwd")); got != "/usr/local" {
		t.Errorf("docker-compose exec app pwd: %q", got)
	}
	if got := strings.TrimSpace(run("exec", "-T", "db", "pwd")); got != "/" {
		t.Errorf("docker-compose exec db pwd: %q", got)
	}
	if ps := run("ps"); !strings.Contains(ps, "Up (healthy)") {
		t.Errorf("docker-compose ps: db not healthy:\n%s", ps)
	}
	run("down", "-v")
	if out, _ := exec.Command(slopbox, "--root", root, "ps", "-aq", "--filter", "label=com.docker.compose.project=v1deps").Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("docker-compose down left containers: %s", out)
	}
}

// composeV1Networked: two services on compose 1.29's project network
// (P_default, no network_mode), one serving busybox httpd, the other
// reaching it by service name.
const composeV1Networked = `version: "2.4"
services:
  web:
    image: busybox:latest
    command: ["sh", "-c", "mkdir -p /www && echo hello over the v1 network > /www/index.html && exec httpd -f -p 80 -h /www"]
    stop_grace_period: 1s
  client:
    image: busybox:latest
    command: ["sleep", "3600"]
    init: true
    stop_grace_period: 1s
    depends_on: [web]
`

// TestComposeV1Networked: Debian's docker-compose 1.29 (python, through
// docker-py) unchanged on its project network: client reaches web by
// service name and by container name through the network's DNS, and down
// removes the containers and the network.
func TestComposeV1Networked(t *testing.T) {
	run := composeV1(t, "v1net", composeV1Networked)
	run("up", "-d")
	for _, name := range []string{"web", "v1net_web_1"} {
		got := run("exec", "-T", "client", "sh", "-c", retried("timeout 5 wget -q -O - http://"+name+"/index.html"))
		if got != "hello over the v1 network\n" {
			t.Errorf("docker-compose exec client wget http://%s/: %q", name, got)
		}
	}
	run("down", "-v")
	if out, _ := exec.Command(slopbox, "--root", root, "ps", "-aq", "--filter", "label=com.docker.compose.project=v1net").Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("docker-compose down left containers: %s", out)
	}
	if out, _ := exec.Command(slopbox, "--root", root, "network", "ls", "-q", "--filter", "label=com.docker.compose.project=v1net").Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("docker-compose down left networks: %s", out)
	}
}
