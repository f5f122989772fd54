package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	// The default network (bridge) is refused clearly until it exists.
	bridge := spec("bridge.yaml", "type: docker\nname: b\ndocker: {image: "+e.ref+"}\n")
	if out, code := e.run("", "env", "run", bridge, "--workspace", ws, "--", "true"); code != 125 || !strings.Contains(out, "network: none") {
		t.Errorf("bridge spec: exit %d %q", code, out)
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
