package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// slopbox env run: a SlopCodeBench spec runs as the harness would run it
// (setup per context, entry file, assets, env, exit code, --json), a local
// spec runs on the host, and keep_container_after_clean keeps the sandbox.
func TestEnvRun(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := searchable(t, t.TempDir())
	ws, assets := filepath.Join(dir, "ws"), filepath.Join(dir, "assets")
	os.Mkdir(ws, 0o755)
	os.Mkdir(assets, 0o755)
	os.WriteFile(filepath.Join(ws, "main.sh"), []byte("echo \"main as $(id -u)\"; cat {{static:data}}/x 2>&1; echo $GREETING; exit 4\n"), 0o644)
	os.WriteFile(filepath.Join(assets, "x"), []byte("asset\n"), 0o644)
	spec := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	docker := spec("docker.yaml", `type: docker
name: bb
docker: {image: `+e.ref+`, network: none, user: "0:0"}
environment: {env: {GREETING: hello}}
setup: {commands: ["echo common"], eval_commands: ["echo eval-only"]}
commands: {entry_file: "{entry_file}.sh", command: sh}
`)
	// The entry file runs through the spec's command; its exit code is ours.
	out, code := e.run("", "env", "run", docker, "--workspace", ws, "--entry", "main")
	if code != 4 || !strings.Contains(out, "main as 0\n") || !strings.Contains(out, "hello\n") || strings.Contains(out, "common") {
		t.Errorf("env run --entry: exit %d\n%s", code, out)
	}
	// --json, evaluation context: every Result field, setup output apart.
	out, code = e.run("", "env", "run", docker, "--workspace", ws, "--eval", "--json", "--", "sh", "-c", "echo cmd")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("env run --json: exit %d %v\n%s", code, err, out)
	}
	if !strings.Contains(res["setup_stdout"].(string), "common\neval-only") || !strings.Contains(res["stdout"].(string), "cmd") {
		t.Errorf("--json result: %v", res)
	}
	for _, k := range []string{"exit_code", "stdout", "stderr", "setup_stdout", "setup_stderr", "elapsed", "timed_out", "truncated", "oom_killed"} {
		if _, ok := res[k]; !ok {
			t.Errorf("--json lacks %s", k)
		}
	}
	// A placeholder needs its asset.
	os.WriteFile(filepath.Join(ws, "p.sh"), []byte("true\n"), 0o644)
	if out, code := e.run("", "env", "run", docker, "--workspace", ws, "--", "cat", "{{static:nope}}/x"); code != 125 || !strings.Contains(out, "unknown static asset placeholder: nope") {
		t.Errorf("unknown placeholder: exit %d %q", code, out)
	}
	out, code = e.run("", "env", "run", docker, "--workspace", ws, "--asset", "data="+assets, "--", "cat", "{{static:data}}/x")
	if code != 0 || !strings.Contains(out, "asset") {
		t.Errorf("asset placeholder: exit %d %q", code, out)
	}
	// keep_container_after_clean: the sandbox stays, and slopbox says how
	// to reach and remove it.
	kept := spec("kept.yaml", `type: docker
name: kept
docker: {image: `+e.ref+`, network: none, keep_container_after_clean: true}
`)
	out, code = e.run("", "env", "run", kept, "--workspace", ws, "--", "true")
	if code != 0 || !strings.Contains(out, "kept sandbox") || !strings.Contains(out, "rm -f") {
		t.Errorf("keep_container_after_clean: exit %d %q", code, out)
	}
	if ps := e.must("ps", "-a", "-q"); strings.TrimSpace(ps) == "" {
		t.Error("the kept sandbox is gone")
	}
	// The default network (SlopCodeBench's): bridge, with its own interface.
	bridge := spec("bridge.yaml", "type: docker\nname: b\ndocker: {image: "+e.ref+"}\n")
	if out, code := e.run("", "env", "run", bridge, "--workspace", ws, "--", "sh", "-c", "ip -4 addr show tap0 | grep -o 'inet [0-9.]*'"); code != 0 || !strings.Contains(out, "inet 10.0.2.100") {
		t.Errorf("bridge spec: exit %d %q", code, out)
	}
	// --port HOST:CONTAINER ({host: container}, as SlopCodeBench's exec
	// runtime): the host reaches a server bound to the sandbox's loopback
	// while the command runs.
	hp := freePort(t)
	cmd := exec.Command(e.bin, "--root", e.root, "env", "run", bridge, "--workspace", ws, "--port", fmt.Sprintf("%d:8000", hp), "--",
		"sh", "-c", "mkdir /w && echo through-env > /w/f && httpd -p 127.0.0.1:8000 -h /w && sleep 30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var got string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && got != "through-env\n"; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/f", hp)); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got = string(b)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if got != "through-env\n" {
		t.Errorf("env run --port %d:8000: GET gave %q", hp, got)
	}
	// Bad specs are refused with the reason.
	bad := spec("bad.yaml", "type: docker\nname: b\ndocker: {image: x, docker_binary: d}\n")
	if out, code := e.run("", "env", "run", bad, "--workspace", ws, "--", "true"); code != 125 || !strings.Contains(out, `unknown key "docker.docker_binary"`) {
		t.Errorf("bad spec: exit %d %q", code, out)
	}
	// A local spec runs on the host, in the workspace.
	loc := spec("local.yaml", "type: local\nname: l\nsetup: {commands: [\"echo s\"]}\n")
	out, code = e.run("", "env", "run", loc, "--workspace", ws, "--", "sh", "-c", "pwd")
	if code != 0 || !strings.Contains(out, ws) {
		t.Errorf("local spec: exit %d %q", code, out)
	}
}

// TestRLMSandboxConfig: an rlm_code config's sandbox: block runs as rlm_code's
// docker runtime would (its argv through slopbox's one parser and policy),
// and its allowed_mount_roots, or a policy file's, bound every bind source.
func TestRLMSandboxConfig(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := searchable(t, t.TempDir())
	ws := filepath.Join(dir, "wd")
	os.Mkdir(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "x.sh"), []byte("echo \"$PYTHONUNBUFFERED $HOME $HTTP_PROXY\"; pwd; echo done > result\n"), 0o644)
	config := func(name, docker string, extra ...string) string {
		p := filepath.Join(dir, name)
		body := "project: demo\nsandbox:\n  runtime: docker\n  default_timeout_seconds: 15\n  env_allowlist: [HTTP_PROXY]\n" + strings.Join(extra, "") +
			"  docker: {image: " + e.ref + ", memory_limit_mb: 256, cpus: 1" + docker + "}\n"
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	good := config("rlm_config.yaml", `, extra_args: ["--init", "--pids-limit", "64"]`)
	cmd := exec.Command(e.bin, "--root", e.root, "env", "run", good, "--workspace", ws, "--", "sh", "/workspace/x.sh")
	cmd.Env = append(os.Environ(), "HTTP_PROXY=http://proxy:3128")
	out, err := cmd.Output() // rootless, stderr warns of limits it cannot enforce here
	if err != nil || string(out) != "1 /tmp http://proxy:3128\n/workspace\n" {
		t.Errorf("env run with an rlm_code config: %v %q", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "result")); string(b) != "done\n" {
		t.Errorf("the run's file on the host: %q", b)
	}
	// default_timeout_seconds is the timeout; --timeout overrides it.
	if out, code := e.run("", "env", "run", good, "--workspace", ws, "--timeout", "0.5", "--json", "--", "sleep", "30"); code == 0 || !strings.Contains(out, `"timed_out": true`) {
		t.Errorf("--timeout over the config's: %d %q", code, out)
	}

	// extra_args meet the same policy as any command line, in every spelling.
	for _, c := range []struct{ extra, msg string }{
		{`"--privileged"`, "--privileged"},
		{`"--network", "host"`, "--network host"},
		{`"--pid=host"`, "--pid"},
		{`"-v", "/etc:/h"`, "/etc"},
		{`"--cap-add", "SYS_ADMIN"`, "--allow-unsafe"},
	} {
		bad := config("bad.yaml", ", extra_args: ["+c.extra+"]")
		if out, code := e.run("", "env", "run", bad, "--workspace", ws, "--", "true"); code != 125 || !strings.Contains(out, c.msg) {
			t.Errorf("extra_args %s: exit %d %q, want 125 naming %q", c.extra, code, out, c.msg)
		}
	}
	// network_enabled: Docker's default network, bridge.
	if out, code := e.run("", "env", "run", config("net.yaml", ", network_enabled: true"), "--workspace", ws, "--", "sh", "-c", "ip -4 addr show tap0 | grep -o 'inet [0-9.]*'"); code != 0 || !strings.Contains(out, "inet 10.0.2.100") {
		t.Errorf("network_enabled: true: exit %d %q", code, out)
	}
	// The workdir must lie under an allowed root.
	narrow := config("narrow.yaml", "", "  allowed_mount_roots: [\"./elsewhere\"]\n")
	if out, code := e.run("", "env", "run", narrow, "--workspace", ws, "--", "true"); code != 125 || !strings.Contains(out, "outside the allowed mount roots") {
		t.Errorf("a workdir outside allowed_mount_roots: exit %d %q", code, out)
	}

	// A policy file bounds docker-style runs too.
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("allowed_mount_roots: [wd]\n"), 0o644)
	if out := e.must("--policy", policy, "run", "--rm", "-v", ws+":/data:ro", e.ref, "cat", "/data/result"); out != "done\n" {
		t.Errorf("a mount inside the policy's roots: %q", out)
	}
	other := filepath.Join(dir, "other")
	os.Mkdir(other, 0o755)
	if out, code := e.run("", "--policy", policy, "run", "--rm", "-v", other+":/data", e.ref, "true"); code != 125 || !strings.Contains(out, "outside the allowed mount roots") {
		t.Errorf("a mount outside the policy's roots: exit %d %q", code, out)
	}
	cmd = exec.Command(e.bin, "--root", e.root, "run", "--rm", "-v", other+":/data", e.ref, "true")
	cmd.Env = append(os.Environ(), "SLOPBOX_POLICY="+policy)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "outside the allowed mount roots") {
		t.Errorf("$SLOPBOX_POLICY not applied: %v %q", err, out)
	}
	os.WriteFile(policy, []byte("allowed_roots: [wd]\n"), 0o644)
	if out, code := e.run("", "--policy", policy, "run", "--rm", e.ref, "true"); code != 125 || !strings.Contains(out, `unknown key "allowed_roots"`) {
		t.Errorf("a bad policy file: exit %d %q", code, out)
	}
	if out, _ := e.run("", "ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("refused runs left sandboxes: %q", out)
	}
}

// An env run SIGKILLed while its bridge sandbox serves through --port (a
// harness killed by its own timeout): the sandbox still runs, but prune
// alone removes it with its slirp4netns, forwarder and host port, since
// the env run process that owned it is gone. A kept sandbox
// (keep_container_after_clean) is not owned and stays.
func TestEnvRunSIGKILLThenPrune(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := searchable(t, t.TempDir())
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bridge := write("bridge.yaml", "type: docker\nname: b\ndocker: {image: "+e.ref+"}\n")
	kept := write("kept.yaml", "type: docker\nname: k\ndocker: {image: "+e.ref+", network: none, keep_container_after_clean: true}\n")
	serve := func(spec, body string, port int) *exec.Cmd {
		cmd := exec.Command(e.bin, "--root", e.root, "env", "run", spec, "--workspace", ws, "--port", fmt.Sprintf("%d:8000", port), "--",
			"sh", "-c", "mkdir /w && echo "+body+" > /w/f && httpd -p 127.0.0.1:8000 -h /w && sleep 120")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	hp := freePort(t)
	cmd := serve(bridge, "served", hp)
	waitFor(t, "the server behind env run --port", func() bool {
		b, err := httpBody(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/f", hp))
		return err == nil && b == "served\n"
	})
	e.killOwnerThenPrune(t, cmd, hp, "env run")
	// keep_container_after_clean: SIGKILLed or not, the sandbox is kept.
	kc := exec.Command(e.bin, "--root", e.root, "env", "run", kept, "--workspace", ws, "--", "sleep", "120")
	if err := kc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kc.Process.Kill(); kc.Wait() })
	waitFor(t, "the kept sandbox", func() bool { return strings.TrimSpace(e.must("ps", "-q")) != "" })
	kc.Process.Signal(syscall.SIGKILL)
	kc.Wait()
	e.must("prune")
	if out := e.must("ps", "-q"); strings.TrimSpace(out) == "" {
		t.Error("prune removed a kept (keep_container_after_clean) sandbox whose env run was killed")
	}
}
