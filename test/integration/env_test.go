package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// slopbox env run: a SlopCodeBench spec runs as the harness would run it
// (setup per context, entry file, assets, env, exit code, --json), a local
// spec runs on the host, and keep_container_after_clean keeps the sandbox.
func TestEnvRun(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := t.TempDir() // 0700, as mkdtemp and tmp_path make it
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
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }) // if the wait fails
	var got string
	fixtures.Eventually(t, "the server behind env run --port", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/f", hp))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = string(b)
		return got == "through-env\n", fmt.Sprintf("%q", got)
	})
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
	dir := t.TempDir() // 0700, as mkdtemp and tmp_path make it
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
	// The operator passes the allowlisted variable (env run -e NAME).
	cmd := exec.Command(e.bin, "--root", e.root, "env", "run", good, "--workspace", ws, "-e", "HTTP_PROXY", "--", "sh", "/workspace/x.sh")
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
	dir := t.TempDir() // 0700, as mkdtemp and tmp_path make it
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
	// Its command running, not only its record written: a spawn killed
	// half-way leaves a sandbox that is not kept yet, which prune removes.
	waitFor(t, "the kept sandbox running its command", func() bool {
		id := strings.TrimSpace(e.must("ps", "-q"))
		if id == "" {
			return false
		}
		_, code := e.run("", "exec", id, "sh", "-c", "ps | grep -q '[s]leep 120'")
		return code == 0
	})
	kc.Process.Signal(syscall.SIGKILL)
	kc.Wait()
	e.must("prune")
	if out := e.must("ps", "-q"); strings.TrimSpace(out) == "" {
		t.Error("prune removed a kept (keep_container_after_clean) sandbox whose env run was killed")
	}
}

// noSandboxLeft fails t when e's root holds a sandbox or its state.
func (e *env) noSandboxLeft(t *testing.T, what string) {
	t.Helper()
	if out, _ := e.run("", "ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("%s left sandboxes: %q", what, out)
	}
	ents, _ := os.ReadDir(filepath.Join(e.root, "c"))
	for _, d := range ents {
		if !strings.HasPrefix(d.Name(), ".") { // the store's own locks and indexes
			t.Errorf("%s left sandbox state: %s", what, d.Name())
		}
	}
}

// An rlm_code config cannot authorise its own weakenings: --allow-unsafe
// (and the other operator-only options) in extra_args is refused by name,
// whatever the spelling, before anything starts; its allowed_mount_roots
// narrow the operator's policy, never widen it. The operator allows with
// env run --allow-unsafe or the policy file's allow_unsafe.
func TestRLMConfigCannotAllowItsOwnWeakenings(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := t.TempDir() // 0700, as mkdtemp and tmp_path make it
	ws, open := filepath.Join(dir, "wd"), filepath.Join(dir, "open")
	os.Mkdir(ws, 0o755)
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777) // whichever uid the sandbox's root maps to may write here
	marker := filepath.Join(open, "pwned")
	config := func(name, docker string, extra ...string) string {
		p := filepath.Join(dir, name)
		body := "sandbox:\n  runtime: docker\n" + strings.Join(extra, "") + "  docker: {image: " + e.ref + docker + "}\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The attacks: CAP_SYS_ADMIN with seccomp off, and the host's /
	// mounted read-write under allowed_mount_roots [/].
	capsys := `, extra_args: ["--allow-unsafe", "cap-add=SYS_ADMIN", "--cap-add", "SYS_ADMIN", "--allow-unsafe", "seccomp=unconfined", "--security-opt", "seccomp=unconfined"]`
	for _, c := range []struct {
		docker, roots, name string
	}{
		{capsys, "", "--allow-unsafe"},
		{`, extra_args: ["--allow-unsafe", "mount=/", "-v", "/:/host"]`, "  allowed_mount_roots: [/]\n", "--allow-unsafe"},
		{`, extra_args: ["--allow-unsafe=mount=/", "--volume=/:/host"]`, "  allowed_mount_roots: [/]\n", "--allow-unsafe"},
		{`, network_enabled: true, extra_args: ["--allow-host-loopback"]`, "", "--allow-host-loopback"},
		{`, extra_args: ["--backend", "local"]`, "", "--backend"},
		// Spellings the config's own parsing trims (an attacker's review).
		{`, extra_args: ["--allow-unsafe ", "cap-add=SYS_ADMIN", "--cap-add", "SYS_ADMIN"]`, "", "--allow-unsafe"},
		{`, extra_args: [" --allow-unsafe", "mount=/", "-v", "/:/host"]`, "  allowed_mount_roots: [/]\n", "--allow-unsafe"},
		// A host file read into the sandbox, outside the mount roots.
		{`, extra_args: ["--env-file", "/etc/shadow"]`, "", "--env-file"},
	} {
		bad := config("bad.yaml", c.docker, c.roots)
		out, code := e.run("", "env", "run", bad, "--workspace", ws, "--", "sh", "-c", "grep CapEff /proc/self/status; touch /host"+marker)
		if code != 125 || !strings.Contains(out, "extra_args gives "+c.name) || !strings.Contains(out, "only the operator can") {
			t.Errorf("extra_args %s: exit %d %q, want 125 refusing %s as the operator's", c.docker, code, out, c.name)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("extra_args %s wrote on the host", c.docker)
		}
	}
	e.noSandboxLeft(t, "refused configs")

	// The operator allows: on env run's command line, or in the policy file.
	hasSysAdmin := func(out string) bool {
		_, hex, _ := strings.Cut(out, "CapEff:")
		v, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		return err == nil && v&(1<<21) != 0
	}
	allowed := config("allowed.yaml", `, extra_args: ["--cap-add", "SYS_ADMIN"]`)
	cat := []string{"--", "grep", "CapEff", "/proc/self/status"}
	if out, code := e.run("", append([]string{"env", "run", allowed, "--workspace", ws}, cat...)...); code != 125 || !strings.Contains(out, "--allow-unsafe cap-add=SYS_ADMIN") {
		t.Errorf("--cap-add SYS_ADMIN allowed by nobody: exit %d %q", code, out)
	}
	if out, code := e.run("", append([]string{"env", "run", allowed, "--workspace", ws, "--allow-unsafe", "cap-add=SYS_ADMIN"}, cat...)...); code != 0 || !hasSysAdmin(out) {
		t.Errorf("env run --allow-unsafe cap-add=SYS_ADMIN: exit %d %q", code, out)
	}
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("allow_unsafe: [cap-add=SYS_ADMIN]\n"), 0o644)
	if out, code := e.run("", append([]string{"--policy", policy, "env", "run", allowed, "--workspace", ws}, cat...)...); code != 0 || !hasSysAdmin(out) {
		t.Errorf("allow_unsafe: [cap-add=SYS_ADMIN] in the policy file: exit %d %q", code, out)
	}

	// A config's roots narrow the operator's: [/] under the operator's [wd]
	// is wd; one outside the operator's allows nothing.
	os.WriteFile(policy, []byte("allowed_mount_roots: [wd]\n"), 0o644)
	other := filepath.Join(dir, "other")
	os.Mkdir(other, 0o755)
	wide := config("wide.yaml", `, extra_args: ["-v", "`+other+`:/o"]`, "  allowed_mount_roots: [/]\n")
	if out, code := e.run("", "--policy", policy, "env", "run", wide, "--workspace", ws, "--", "true"); code != 125 || !strings.Contains(out, "outside the allowed mount roots") {
		t.Errorf("allowed_mount_roots [/] widening the policy's: exit %d %q", code, out)
	}
	inside := config("inside.yaml", `, extra_args: ["-v", "`+ws+`:/o:ro"]`, "  allowed_mount_roots: [/]\n")
	if out, code := e.run("", "--policy", policy, "env", "run", inside, "--workspace", ws, "--", "true"); code != 0 {
		t.Errorf("allowed_mount_roots [/], mounts inside the policy's: exit %d %q", code, out)
	}
	narrow := config("narrow.yaml", "", "  allowed_mount_roots: [wd/sub]\n")
	if out, code := e.run("", "--policy", policy, "env", "run", narrow, "--workspace", ws, "--", "true"); code != 125 || !strings.Contains(out, "outside the allowed mount roots") {
		t.Errorf("a config narrowing the policy's roots, its workdir outside them: exit %d %q", code, out)
	}
	elsewhere := config("elsewhere.yaml", "", "  allowed_mount_roots: [other]\n")
	if out, code := e.run("", "--policy", policy, "env", "run", elsewhere, "--workspace", other, "--", "true"); code != 125 || !strings.Contains(out, "allowed_mount_roots") || !strings.Contains(out, "only narrow") {
		t.Errorf("a config's roots all outside the policy's: exit %d %q", code, out)
	}
	e.noSandboxLeft(t, "the runs")
}

// Issue 41 case 2: an rlm_code config's mount roots were rlm_code's
// defaults, /tmp as a whole among them, so a config's own extra_args
// mounted /tmp/tmux-0 or ssh-agent's directory with nobody allowing it. A
// config mounts from its own directory and the workspace only; anything
// else is the operator's to allow (a policy file's allowed_mount_roots),
// and its own allowed_mount_roots never widen that. Nor may a config name
// the workspace (--workspace: mounted as the sandbox's own) or hand a
// source over (:U). Root and rootless.
func TestRLMConfigMountsOnlyItsOwn(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := searchable(t, t.TempDir())
	cfgDir, ws, other := filepath.Join(dir, "cfg"), filepath.Join(dir, "wd"), filepath.Join(dir, "tmux-0")
	for _, d := range []string{cfgDir, ws, other} {
		os.Mkdir(d, 0o755)
	}
	os.WriteFile(filepath.Join(other, "pub"), []byte("public\n"), 0o644)
	config := func(name, extra string, roots ...string) string {
		p := filepath.Join(cfgDir, name)
		body := "sandbox:\n  runtime: docker\n" + strings.Join(roots, "") + "  docker: {image: " + e.ref + ", extra_args: [" + extra + "]}\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mount := `"-v", "` + other + `:/t:ro"`
	for _, roots := range []string{"", "  allowed_mount_roots: [/]\n", "  allowed_mount_roots: [\".\", /tmp]\n"} {
		out, code := e.run("", "env", "run", config("c.yaml", mount, roots), "--workspace", ws, "--", "cat", "/t/pub")
		if code != 125 || !strings.Contains(out, "outside the allowed mount roots") || !strings.Contains(out, "allowed_mount_roots in a policy file") || strings.Contains(out, "public") {
			t.Errorf("a config's -v %s:/t:ro with no policy file, %q: exit %d %q, want 125 naming the operator's allowed_mount_roots", other, roots, code, out)
		}
	}
	// Its own directory and the workspace it may mount from.
	own := config("own.yaml", `"-v", "`+cfgDir+`:/cfg:ro", "-v", "`+ws+`:/again:ro"`)
	if out, code := e.run("", "env", "run", own, "--workspace", ws, "--", "sh", "-c", "ls /cfg/own.yaml /again"); code != 0 {
		t.Errorf("a config mounting its own directory and the workspace: exit %d %q", code, out)
	}
	// The operator allows.
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("allowed_mount_roots: ["+dir+"]\n"), 0o644)
	allowed := config("allowed.yaml", mount, "  allowed_mount_roots: [\".\", /tmp]\n")
	if out, code := e.run("", "--policy", policy, "env", "run", allowed, "--workspace", ws, "--", "cat", "/t/pub"); code != 0 || !strings.HasSuffix(out, "\npublic\n") && out != "public\n" {
		t.Errorf("a config's -v allowed by the policy file's allowed_mount_roots: exit %d %q", code, out)
	}
	// Within the operator's roots still, no workspace of its choosing
	// and no hand-over.
	for _, c := range []struct{ extra, name, how string }{
		{`"--workspace", "` + other + `"`, "--workspace", "env run --workspace DIR"},
		{`"--workspace=` + other + `"`, "--workspace", "env run --workspace DIR"},
		{`"-v", "` + other + `:/t:U"`, "--volume " + other + ":/t:U", "nobody"},
	} {
		out, code := e.run("", "--policy", policy, "env", "run", config("bad.yaml", c.extra), "--workspace", ws, "--", "true")
		if code != 125 || !strings.Contains(out, "extra_args gives "+c.name) || !strings.Contains(out, "only the operator can ("+c.how) {
			t.Errorf("extra_args %s: exit %d %q, want 125 refusing %s as the operator's", c.extra, code, out, c.name)
		}
	}
	e.noSandboxLeft(t, "the runs")
}

// Issue 41 case 2, as root: a bind an rlm_code config asks for keeps its
// host owners, even where the operator allows it. Mounted idmapped as the
// caller's own -v is, a root-owned directory made host root's 0600 files
// readable by container root and its 0600 unix sockets connectable, read-
// only mounts included (/tmp/tmux-0/default: commands as host root). Kept,
// they are nobody's: the file and the socket refuse with EACCES. The
// workspace the operator gives is the sandbox's own, as before.
func TestRLMConfigBindKeepsOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("root only: scripts/test.sh leaves it out of the rootless pass (rootless, no bind is idmapped)")
	}
	e := newEnv(t)
	py := e.pythonRef(t)
	dir := searchable(t, t.TempDir())
	ws, secret := filepath.Join(dir, "wd"), filepath.Join(dir, "tmux-0")
	os.Mkdir(ws, 0o700)
	os.Mkdir(secret, 0o755)
	os.WriteFile(filepath.Join(secret, "key"), []byte("host root's secret\n"), 0o600)
	os.WriteFile(filepath.Join(secret, "pub"), []byte("public\n"), 0o644)
	sock := filepath.Join(secret, "default")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	os.Chmod(sock, 0o600)
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("allowed_mount_roots: ["+dir+"]\n"), 0o644)
	script := `import os, socket
for p in ("/t/pub", "/t/key"):
    try:
        print(p, open(p).read().strip())
    except OSError as e:
        print(p, "errno", e.errno)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/t/default")
    print("connect ok")
except OSError as e:
    print("connect errno", e.errno)
print("owner", os.stat("/t").st_uid, os.stat("/t/key").st_uid)
open("/workspace/out", "w").write("x")
print("workspace", os.stat("/workspace").st_uid)
`
	for _, ro := range []string{":ro", ""} {
		cfg := filepath.Join(dir, "rlm.yaml")
		os.WriteFile(cfg, []byte("sandbox:\n  docker: {image: "+py+", extra_args: [\"-v\", \""+secret+":/t"+ro+"\"]}\n"), 0o644)
		out, code := e.run("", "--policy", policy, "env", "run", cfg, "--workspace", ws, "--", "python3", "-c", script)
		want := "/t/pub public\n/t/key errno 13\nconnect errno 13\nowner 65534 65534\nworkspace 0\n"
		if code != 0 || out != want {
			t.Errorf("a config's -v %s%s under the operator's allowance: exit %d\n%s\nwant\n%s", secret, ro, code, out, want)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(ws, "out"), &st); err != nil || st.Uid != 0 {
			t.Errorf("the file the sandbox wrote in the root-owned workspace: %+v %v, want host root's (the workspace owner's)", st, err)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("host root's 0600 socket took %d connections from a config's sandbox", n)
	}
	e.noSandboxLeft(t, "the runs")
}

// Issue 41 case 3: an rlm_code config's extra_args imported the harness's
// environment, its API keys included: -e NAME (no =) takes NAME's value
// from slopbox's environment, and --link copies another sandbox's. Both
// are refused by name in every spelling, before anything starts, as
// --env-file is; the operator passes a variable with env run -e NAME.
// Root and rootless.
func TestRLMConfigCannotImportHostEnv(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := t.TempDir()
	ws := filepath.Join(dir, "wd")
	os.Mkdir(ws, 0o755)
	const key = "sk-harness-not-for-the-sandbox"
	run := func(args ...string) (string, int) {
		cmd := exec.Command(e.bin, append([]string{"--root", e.root}, args...)...)
		cmd.Env = append(os.Environ(), "SLOPBOX_TEST_API_KEY="+key)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	config := func(extra string) string {
		p := filepath.Join(dir, "rlm.yaml")
		if err := os.WriteFile(p, []byte("sandbox:\n  docker: {image: "+e.ref+", extra_args: ["+extra+"]}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	e.must("run", "-d", "--name", "victim", "-e", "TOKEN=sk-victim-not-for-the-sandbox", e.ref, "sleep", "300")
	for _, c := range []struct{ extra, name, how string }{
		{`"-e", "SLOPBOX_TEST_API_KEY"`, "--env SLOPBOX_TEST_API_KEY", "env run -e SLOPBOX_TEST_API_KEY"},
		{`"--env", "SLOPBOX_TEST_API_KEY"`, "--env SLOPBOX_TEST_API_KEY", "env run -e SLOPBOX_TEST_API_KEY"},
		{`"--env=SLOPBOX_TEST_API_KEY"`, "--env SLOPBOX_TEST_API_KEY", "env run -e SLOPBOX_TEST_API_KEY"},
		{`"-eSLOPBOX_TEST_API_KEY"`, "--env SLOPBOX_TEST_API_KEY", "env run -e SLOPBOX_TEST_API_KEY"},
		{`"-e", "OK=1", "-e", " SLOPBOX_TEST_API_KEY"`, "--env SLOPBOX_TEST_API_KEY", "env run -e SLOPBOX_TEST_API_KEY"},
		{`"--link", "victim:v"`, "--link", "nobody: pass the variables with env run -e"},
		{`"--link=victim"`, "--link", "nobody: pass the variables with env run -e"},
	} {
		out, code := run("env", "run", config(c.extra), "--workspace", ws, "--", "env")
		if code != 125 || !strings.Contains(out, "extra_args gives "+c.name) || !strings.Contains(out, "only the operator can ("+c.how) {
			t.Errorf("extra_args %s: exit %d %q, want 125 refusing %s as the operator's (%s)", c.extra, code, out, c.name, c.how)
		}
		if strings.Contains(out, "not-for-the-sandbox") {
			t.Errorf("extra_args %s: the sandbox saw a secret:\n%s", c.extra, out)
		}
	}
	// A value the config writes itself is its own; the operator passes
	// the harness's variable.
	if out, code := run("env", "run", config(`"-e", "GREETING=hi"`), "--workspace", ws, "-e", "SLOPBOX_TEST_API_KEY", "--", "sh", "-c", "echo $GREETING $SLOPBOX_TEST_API_KEY"); code != 0 || !strings.HasSuffix(out, "\nhi "+key+"\n") && out != "hi "+key+"\n" {
		t.Errorf("-e GREETING=hi in the config and env run -e SLOPBOX_TEST_API_KEY: exit %d %q", code, out)
	}
	e.must("rm", "-f", "victim")
	e.noSandboxLeft(t, "the runs")
}

// Issue 41, review of cases 2 and 3: what a config still reached.
//  1. --network ending extra_args took the image as its value (the host's
//     network): the parsed network is checked, and extra_args must leave
//     the image and the command where they are.
//  2. The config's directory as a mount root gave a config in /tmp all of
//     /tmp, one in $HOME all of $HOME (.ssh): it is a root only when it is
//     a project's own, and keys are never mounted from a config.
//  3. env_allowlist passed the harness's variables: only those the
//     operator allows (-e NAME, --allow-os-env, allow_os_env).
//  4. -d, --timeout, --keep, --name, --rm=false took the run's lifetime
//     from the operator.
//  5. Named volumes, --volumes-from and a bind beside an anonymous volume
//     reached other sandboxes' data: the operator allows (allow_volumes).
//
// Each refused before anything starts, exit 125, naming what the config
// wrote and how the operator allows it. Root and rootless.
func TestRLMConfigReview(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := searchable(t, t.TempDir())
	cfgDir, ws := filepath.Join(dir, "cfg"), filepath.Join(dir, "wd")
	for _, d := range []string{cfgDir, ws} {
		os.Mkdir(d, 0o755)
	}
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o755)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("PRIVATE KEY\n"), 0o644)
	const token = "sk-harness-token-not-for-the-sandbox"
	run := func(env []string, args ...string) (string, int) {
		t.Helper()
		// The runs below have the operator's --timeout 2 at most: one
		// still running after a minute has escaped it (case 4).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, e.bin, append([]string{"--root", e.root}, args...)...)
		cmd.WaitDelay = 10 * time.Second
		cmd.Env = append(os.Environ(), append([]string{"SECRET_TOKEN=" + token}, env...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ctx.Err() != nil {
			t.Errorf("slopbox %q outlived the operator's timeout: %s", args, out)
			return string(out), -1
		}
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	config := func(where, extra string, more ...string) string {
		p := filepath.Join(where, "rlm.yaml")
		body := "sandbox:\n  runtime: docker\n" + strings.Join(more, "") + "  docker: {image: " + e.ref + ", extra_args: [" + extra + "]}\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	refused := func(what, out string, code int, want ...string) {
		t.Helper()
		if code != 125 {
			t.Errorf("%s: exit %d %q, want 125", what, code, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: %q does not say %q", what, out, w)
			}
		}
		for _, leak := range []string{"eth0", "lo\n", "PRIVATE KEY", token, "secret data"} {
			if strings.Contains(out, leak) {
				t.Errorf("%s: the sandbox ran and printed %q:\n%s", what, leak, out)
			}
		}
	}
	net := []string{"--", "sh", "-c", "ls /sys/class/net"}

	// 1. The network, as parsed, and the image in its place.
	for _, c := range []struct{ extra, want string }{
		{`"--network"`, "take the place of the image"},
		{`"--init", "--net"`, "take the place of the image"},
		{`"--user"`, "take the place of the image"},
		{`"` + e.ref + `"`, "take the place of the image"},
		{`"--network", "host"`, "--network host"},
		{`"--network=host"`, "--network host"},
		{`"--net", " host"`, "--network host"},
		{`"--net=host"`, "--network host"},
	} {
		out, code := run(nil, append([]string{"env", "run", config(cfgDir, c.extra), "--workspace", ws}, net...)...)
		refused("extra_args "+c.extra, out, code, c.want)
	}

	// 2. A config in a sticky, world-writable directory (as /tmp) mounts
	// the workspace only; one in $HOME neither $HOME nor its keys.
	shared := filepath.Join(dir, "shared")
	os.Mkdir(shared, 0o755)
	os.Chmod(shared, 0o1777)
	os.WriteFile(filepath.Join(shared, "other-users-file"), []byte("secret data\n"), 0o644)
	out, code := run(nil, "env", "run", config(shared, `"-v", "`+filepath.Join(shared, "other-users-file")+`:/s:ro"`), "--workspace", ws, "--", "cat", "/s")
	refused("a config in a sticky directory mounting a file beside it", out, code, "outside the allowed mount roots")
	if out, code := run(nil, "env", "run", config(shared, ""), "--workspace", ws, "--", "true"); code != 0 {
		t.Errorf("a config in a sticky directory, mounting the workspace only: exit %d %q", code, out)
	}
	homeEnv := []string{"HOME=" + home}
	sshMount := `"--mount", "type=bind,src=` + filepath.Join(home, ".ssh") + `,dst=/s,readonly"`
	out, code = run(homeEnv, "env", "run", config(home, sshMount), "--workspace", ws, "--", "cat", "/s/id_ed25519")
	refused("a config in $HOME mounting $HOME/.ssh", out, code, "credentials directory")
	// Keys are not the operator's roots to give a config either.
	proj := filepath.Join(home, "proj")
	os.Mkdir(proj, 0o755)
	os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(proj, "keys"))
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("allowed_mount_roots: ["+dir+"]\n"), 0o644)
	for _, extra := range []string{sshMount, `"-v", "` + filepath.Join(proj, "keys") + `:/s:ro"`} {
		out, code := run(homeEnv, "--policy", policy, "env", "run", config(proj, extra, "  allowed_mount_roots: [/]\n"), "--workspace", ws, "--", "cat", "/s/id_ed25519")
		refused("extra_args "+extra+" under the operator's roots", out, code, "credentials directory")
	}

	// 3. env_allowlist: the operator's to give.
	allow := config(cfgDir, "", "  env_allowlist: [SECRET_TOKEN]\n")
	echo := []string{"--", "sh", "-c", "echo token=$SECRET_TOKEN"}
	out, code = run(nil, append([]string{"env", "run", allow, "--workspace", ws}, echo...)...)
	refused("env_allowlist [SECRET_TOKEN]", out, code, "env_allowlist names SECRET_TOKEN", "env run -e SECRET_TOKEN", "--allow-os-env", "allow_os_env: true")
	for _, how := range [][]string{{"-e", "SECRET_TOKEN"}, {"--allow-os-env"}} {
		args := append(append([]string{"env", "run", allow, "--workspace", ws}, how...), echo...)
		if out, code := run(nil, args...); code != 0 || !strings.Contains(out, "token="+token) {
			t.Errorf("env_allowlist [SECRET_TOKEN] with env run %q: exit %d %q", how, code, out)
		}
	}
	os.WriteFile(policy, []byte("allowed_mount_roots: ["+dir+"]\nallow_os_env: true\n"), 0o644)
	if out, code := run(nil, append([]string{"--policy", policy, "env", "run", allow, "--workspace", ws}, echo...)...); code != 0 || !strings.Contains(out, "token="+token) {
		t.Errorf("env_allowlist [SECRET_TOKEN] under allow_os_env: true: exit %d %q", code, out)
	}
	// Unset, nothing is passed and nothing refused (rlm_code's own).
	unset := config(cfgDir, "", "  env_allowlist: [SLOPBOX_TEST_UNSET]\n")
	if out, code := run(nil, "env", "run", unset, "--workspace", ws, "--", "true"); code != 0 {
		t.Errorf("env_allowlist of an unset name: exit %d %q", code, out)
	}

	// 4. The run's lifetime is the operator's.
	t.Cleanup(func() { e.run("", "rm", "-f", "lingering") })
	for _, c := range []struct{ extra, name string }{
		{`"-d", "--name", "lingering"`, "--detach"},
		{`"--detach=true"`, "--detach"},
		{`"--timeout", "0"`, "--timeout"},
		{`"--timeout=0"`, "--timeout"},
		{`"--keep"`, "--keep"},
		{`"--name", "lingering"`, "--name"},
		{`"--rm=false"`, "--rm=false"},
	} {
		out, code := run(nil, "env", "run", config(cfgDir, c.extra), "--workspace", ws, "--timeout", "2", "--", "sleep", "600")
		refused("extra_args "+c.extra, out, code, "extra_args gives "+c.name, "only the operator can")
	}
	e.noSandboxLeft(t, "the refused runs")

	// 5. Other sandboxes' data.
	e.must("run", "--rm", "-v", "secretvol:/x", e.ref, "sh", "-c", "echo secret data > /x/f")
	e.must("run", "-d", "--name", "victim", "-v", "secretvol:/x", e.ref, "sleep", "300")
	t.Cleanup(func() { e.run("", "rm", "-f", "victim"); e.run("", "volume", "rm", "-f", "secretvol") })
	cat := []string{"--", "sh", "-c", "cat /x/f; echo pwned > /x/f"}
	for _, c := range []struct{ extra, name string }{
		{`"-v", "secretvol:/x"`, "--volume secretvol:/x"},
		{`"--volume=secretvol:/x:ro"`, "--volume secretvol:/x:ro"},
		{`"--mount", "type=volume,src=secretvol,dst=/x"`, "--mount type=volume,src=secretvol,dst=/x"},
		{`"--volumes-from", "victim"`, "--volumes-from victim"},
		{`"--volumes-from=victim:ro"`, "--volumes-from victim:ro"},
	} {
		out, code := run(nil, append([]string{"env", "run", config(cfgDir, c.extra), "--workspace", ws}, cat...)...)
		refused("extra_args "+c.extra, out, code, "extra_args gives "+c.name, "allow_volumes: true", "--allow-volumes")
	}
	// An anonymous volume is the sandbox's own, and no way beside it.
	if out, code := run(nil, "env", "run", config(cfgDir, `"-v", "/anon"`), "--workspace", ws, "--", "sh", "-c", "echo mine > /anon/f"); code != 0 {
		t.Errorf("an anonymous volume: exit %d %q", code, out)
	}
	data := filepath.Join(e.root, "volumes", "secretvol", "_data")
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("the volume's data directory: %v", err)
	}
	os.WriteFile(policy, []byte("allowed_mount_roots: ["+ws+"]\n"), 0o644)
	beside := config(cfgDir, `"-v", "/anon", "-v", "`+data+`:/x"`)
	out, code = run(nil, append([]string{"--policy", policy, "env", "run", beside, "--workspace", ws}, cat...)...)
	refused("a bind of another volume's directory beside an anonymous volume", out, code, "outside the allowed mount roots")
	// The operator allows.
	os.WriteFile(policy, []byte("allowed_mount_roots: ["+ws+"]\nallow_volumes: true\n"), 0o644)
	if out, code := run(nil, "--policy", policy, "env", "run", config(cfgDir, `"-v", "secretvol:/x:ro"`), "--workspace", ws, "--", "cat", "/x/f"); code != 0 || !strings.Contains(out, "secret data") {
		t.Errorf("-v secretvol:/x:ro under allow_volumes: true: exit %d %q", code, out)
	}
	if out, code := run(nil, "env", "run", config(cfgDir, `"--volumes-from", "victim:ro"`), "--workspace", ws, "--allow-volumes", "--", "cat", "/x/f"); code != 0 || !strings.Contains(out, "secret data") {
		t.Errorf("--volumes-from victim:ro with env run --allow-volumes: exit %d %q", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "f")); string(b) != "secret data\n" {
		t.Errorf("the victim's volume: %q", b)
	}
	e.must("rm", "-f", "victim")
	e.noSandboxLeft(t, "the runs")
}

// Under a policy file an environment spec cannot turn its isolation off:
// type: local, network: host and include_os_env are refused, naming the
// policy key (and env run flag) that allows each, before anything runs;
// allowed by the key or the flag; with no policy file, as upstream.
func TestEnvSpecUnderPolicy(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	dir := t.TempDir() // 0700, as mkdtemp and tmp_path make it
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	policy := write("policy.yaml", "allowed_mount_roots: [ws]\n")
	run := func(extraEnv []string, args ...string) (string, int) {
		cmd := exec.Command(e.bin, append([]string{"--root", e.root}, args...)...)
		cmd.Env = append(os.Environ(), extraEnv...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	refused := func(what, out string, code int, key, flag string) {
		t.Helper()
		if code != 125 || !strings.Contains(out, key+": true") || !strings.Contains(out, flag) || !strings.Contains(out, policy) {
			t.Errorf("%s under a policy file: exit %d %q, want 125 naming %s and %s", what, code, out, key, flag)
		}
	}

	// type: local ran its setup on the host.
	marker := filepath.Join(dir, "setup-ran")
	local := write("local.yaml", "type: local\nname: l\nsetup: {commands: [\"touch "+marker+"\"]}\n")
	out, code := run(nil, "--policy", policy, "env", "run", local, "--workspace", ws, "--", "true")
	refused("type: local", out, code, "allow_local", "--allow-local")
	if _, err := os.Stat(marker); err == nil {
		t.Error("a refused local spec ran its setup on the host")
	}
	if out, code := run(nil, "--policy", policy, "env", "run", local, "--workspace", ws, "--allow-local", "--", "true"); code != 0 {
		t.Errorf("type: local with --allow-local: exit %d %q", code, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("type: local with --allow-local: its setup did not run: %v", err)
	}

	// network: host reached a host service bound to 127.0.0.1 only.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host-only-service\n") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	host := write("host.yaml", "type: docker\nname: h\ndocker: {image: "+e.ref+", network: host}\n")
	get := []string{"--", "wget", "-qO-", "http://" + ln.Addr().String() + "/"}
	out, code = run(nil, append([]string{"--policy", policy, "env", "run", host, "--workspace", ws}, get...)...)
	refused("network: host", out, code, "allow_host_network", "--allow-host-network")
	if strings.Contains(out, "host-only-service") {
		t.Error("a refused network: host spec reached the host's loopback service")
	}
	if out, code := run(nil, append([]string{"--policy", policy, "env", "run", host, "--workspace", ws, "--allow-host-network"}, get...)...); code != 0 || !strings.Contains(out, "host-only-service") {
		t.Errorf("network: host with --allow-host-network: exit %d %q", code, out)
	}

	// include_os_env handed the harness's API key to the sandbox; the policy
	// file comes from $SLOPBOX_POLICY here.
	secret := []string{"SLOPBOX_TEST_API_KEY=sk-not-for-the-sandbox"}
	osenv := write("osenv.yaml", "type: docker\nname: o\ndocker: {image: "+e.ref+", network: none}\nenvironment: {include_os_env: true}\n")
	echo := []string{"--", "sh", "-c", "echo key=$SLOPBOX_TEST_API_KEY"}
	out, code = run(append(secret, "SLOPBOX_POLICY="+policy), append([]string{"env", "run", osenv, "--workspace", ws}, echo...)...)
	refused("include_os_env", out, code, "allow_os_env", "--allow-os-env")
	if strings.Contains(out, "sk-not-for-the-sandbox") {
		t.Error("a refused include_os_env spec saw the host's secret")
	}
	write("allowing.yaml", "allowed_mount_roots: [ws]\nallow_os_env: true\n")
	if out, code := run(secret, append([]string{"--policy", filepath.Join(dir, "allowing.yaml"), "env", "run", osenv, "--workspace", ws}, echo...)...); code != 0 || !strings.Contains(out, "key=sk-not-for-the-sandbox") {
		t.Errorf("include_os_env with allow_os_env: true: exit %d %q", code, out)
	}
	// With no policy file, as upstream (the documented choice).
	if out, code := run(secret, append([]string{"env", "run", osenv, "--workspace", ws}, echo...)...); code != 0 || !strings.Contains(out, "key=sk-not-for-the-sandbox") {
		t.Errorf("include_os_env with no policy file: exit %d %q", code, out)
	}
	e.noSandboxLeft(t, "the runs")
}
