// Package integration drives the slopbox binary (bin/slopbox, built by
// `make build`) the way harnesses and users do: one process per command,
// sandboxes created by one process and used by the next.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// env is one isolated slopbox installation: its own --root and a registry
// serving the busybox fixture.
type env struct {
	t    *testing.T
	bin  string
	root string
	ref  string
}

func slopboxBin(t *testing.T) string {
	bin := os.Getenv("SLOPBOX_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin/slopbox")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the CLI tests need the slopbox binary (run `make build`, or set SLOPBOX_BIN): %v", err)
	}
	return bin
}

func newEnv(t *testing.T) *env {
	reg := fixtures.Registry(t, nil)
	e := &env{t: t, bin: slopboxBin(t), root: filepath.Join(searchable(t, t.TempDir()), "root"), ref: reg + "/it/busybox:latest"}
	fixtures.Push(t, e.ref, fixtures.Busybox(t, image.HostPlatform()))
	t.Cleanup(func() {
		out, code := e.run("", "ps", "-a", "-q")
		for _, id := range strings.Fields(out) {
			e.run("", "rm", "-f", id)
		}
		e.run("", "rmi", "-f", e.ref)
		if code != 0 {
			t.Errorf("ps at cleanup failed")
		}
		if left, _ := e.run("", "ps", "-a", "-q"); strings.TrimSpace(left) != "" {
			t.Errorf("sandboxes left behind: %s", left)
		}
	})
	return e
}

// evidence describes sandbox name for a failure report: its inspect, the
// files of its state directory (small ones whole, the log's tail) and the
// host processes that mention it.
func (e *env) evidence(name string) string {
	var b strings.Builder
	out, _ := e.run("", "inspect", name)
	fmt.Fprintf(&b, "inspect %s:\n%s\n", name, out)
	dirs, _ := filepath.Glob(filepath.Join(e.root, "c", "*"))
	for _, dir := range dirs {
		st, err := os.ReadFile(filepath.Join(dir, "state.json"))
		if err != nil || !strings.Contains(string(st), `"`+name+`"`) {
			continue
		}
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			data, err := os.ReadFile(filepath.Join(dir, ent.Name()))
			if err != nil {
				fmt.Fprintf(&b, "%s/%s: %v\n", dir, ent.Name(), err)
				continue
			}
			if len(data) > 2048 {
				data = data[len(data)-2048:]
			}
			fmt.Fprintf(&b, "%s/%s:\n%s\n", dir, ent.Name(), data)
		}
		id := filepath.Base(dir)
		ps, _ := exec.Command("ps", "-eo", "pid,ppid,stat,etime,args").Output()
		for _, line := range strings.Split(string(ps), "\n") {
			if strings.Contains(line, id) || strings.Contains(line, name) {
				fmt.Fprintf(&b, "ps: %s\n", line)
			}
		}
	}
	return b.String()
}

// run runs slopbox with args (stdin from in) and returns stdout+stderr and
// the exit code.
func (e *env) run(in string, args ...string) (string, int) {
	e.t.Helper()
	// No command of these tests takes minutes: one that does has hung, and
	// says so here rather than at the package's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, append([]string{"--root", e.root}, args...)...)
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdin = strings.NewReader(in)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		e.t.Fatalf("slopbox %v hung (killed after 3 minutes): %v\n%s", args, err, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("slopbox %v: %v", args, err)
	}
	return out.String(), code
}

// must runs slopbox and fails the test on a non-zero exit.
func (e *env) must(args ...string) string {
	e.t.Helper()
	out, code := e.run("", args...)
	if code != 0 {
		e.t.Fatalf("slopbox %v: exit %d: %s", args, code, out)
	}
	return out
}

func searchable(t *testing.T, dir string) string {
	for p := dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRunExitCodes(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"sh", "-c", "echo hello; exit 3"}, 3, "hello"},
		{[]string{"true"}, 0, ""},
		{[]string{"no-such-command"}, 127, `exec: "no-such-command": executable file not found in $PATH`},
		{[]string{"/etc/passwd"}, 126, "permission denied"},
		{[]string{"sh", "-c", "kill -9 $$"}, 137, ""},
		{[]string{"sh", "-c", "kill -TERM $$"}, 143, ""},
	}
	for _, c := range cases {
		out, code := e.run("", append([]string{"run", "--rm", e.ref}, c.args...)...)
		if code != c.code || !strings.Contains(out, c.msg) {
			t.Errorf("run %v: exit %d (%q), want %d with %q", c.args, code, out, c.code, c.msg)
		}
	}
	// Failures of slopbox itself are 125, with a clear message.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "--rm", "--bogus-flag", e.ref, "true"}, "unknown flag"},
		{[]string{"run", "--rm", e.ref[:strings.Index(e.ref, "/")] + "/missing/image:v1", "true"}, "image not found"},
		{[]string{"run", "--rm", "-u", "nosuchuser", e.ref, "true"}, "unable to find user nosuchuser: no matching entries in passwd file"},
		{[]string{"run", "--rm", "--network", "carrier-pigeon", e.ref, "true"}, "network carrier-pigeon not found"},
		{[]string{"run", "--rm", "NOT A REFERENCE", "true"}, "invalid image reference"},
		{[]string{"run", "--rm", "--name", "bad/name", e.ref, "true"}, "invalid sandbox name"},
	} {
		out, code := e.run("", c.args...)
		if code != 125 || !strings.Contains(out, c.msg) {
			t.Errorf("%v: exit %d (%q), want 125 with %q", c.args, code, out, c.msg)
		}
	}
	if out, _ := e.run("", "ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("run --rm and failed runs left sandboxes: %s", out)
	}
}

// TestVerbExitCodes: every other verb fails as Docker's CLI does: exit 1
// for its own failures (no such sandbox, a running one to remove), 125 for
// a flag it cannot parse, each with a message that says what to do.
func TestVerbExitCodes(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	e.must("run", "-d", "--name", "live", e.ref, "sleep", "infinity")
	for _, c := range []struct {
		code int
		msg  string
		args []string
	}{
		{1, "Stop the container before attempting removal or force remove", []string{"rm", "live"}},
		{1, "no such sandbox: nosuch", []string{"stop", "nosuch"}},
		{1, "no such sandbox: nosuch", []string{"rm", "nosuch"}},
		{1, "no such sandbox: nosuch", []string{"kill", "nosuch"}},
		{1, "no such sandbox: nosuch", []string{"exec", "nosuch", "true"}},
		{1, "no such sandbox: nosuch", []string{"start", "nosuch"}},
		{1, "no such sandbox: nosuch", []string{"logs", "nosuch"}},
		{1, "no such sandbox: nosuch", []string{"wait", "nosuch"}},
		{1, "no such sandbox: nosuch", []string{"cp", "nosuch:/etc/passwd", "-"}},
		{1, "no such sandbox: nosuch", []string{"rename", "nosuch", "x"}},
		{1, "invalid signal: BOGUS", []string{"kill", "-s", "BOGUS", "live"}},
		{1, "image not found", []string{"rmi", "nosuch:v1"}},
		{1, "image not found", []string{"tag", "nosuch:v1", "x:v1"}},
		{1, "no such file", []string{"load", "-i", "/nonexistent.tar"}},
		{1, "requires at least 1 arg", []string{"rm"}},
		{1, "unknown command", []string{"frobnicate"}},
		{125, "unknown flag: --bogus", []string{"rm", "--bogus", "live"}},
		{125, "unknown flag: --bogus", []string{"ps", "--bogus"}},
		{127, "executable file not found", []string{"exec", "live", "no-such-command"}},
	} {
		e.expectCode(c.code, c.msg, c.args...)
	}
	// -it without a terminal is refused before anything is created.
	e.expectCode(1, "the input device is not a TTY", "run", "-it", "--name", "tty", e.ref, "true")
	if out, code := e.run("", "inspect", "tty"); code == 0 {
		t.Errorf("run -it without a terminal created a sandbox: %s", out)
	}
}

func TestSandboxAcrossProcesses(t *testing.T) {
	e := newEnv(t)
	id := strings.TrimSpace(lastLine(e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")))
	if len(id) != 16 {
		t.Fatalf("run -d printed %q, want an id", id)
	}
	e.must("exec", "box", "sh", "-c", "echo persisted > /tmp/f")
	if out := e.must("exec", "box", "cat", "/tmp/f"); out != "persisted\n" {
		t.Errorf("state across execs from different processes: %q", out)
	}
	if out, _ := e.run("piped input", "exec", "-i", "box", "cat"); out != "piped input" {
		t.Errorf("exec -i: %q", out)
	}
	if out := e.must("exec", "-e", "A=1", "-w", "/tmp", "-u", "65534", "box", "sh", "-c", "echo $A; pwd; id -u"); out != "1\n/tmp\n65534\n" {
		t.Errorf("exec -e -w -u: %q", out)
	}
	start := time.Now()
	out, code := e.run("", "exec", "--timeout", "0.5", "box", "sh", "-c", "sleep 1000 & sleep 1000")
	// Not timed out, it would run 1000 s.
	if code != 137 || time.Since(start) > 30*time.Second {
		t.Errorf("exec --timeout: exit %d after %v: %s", code, time.Since(start), out)
	}
	// The kill is sent when the timeout answers; the kernel ends the
	// background child a moment later.
	fixtures.Eventually(t, "a timed-out command's background child gone", func() (bool, string) {
		ps := e.must("exec", "box", "ps", "-o", "args")
		return !strings.Contains(ps, "sleep 1000"), ps
	})
	var res map[string]any
	out, code = e.run("", "exec", "--json", "box", "sh", "-c", "echo out; echo err >&2; exit 4")
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 4 || res["exit_code"].(float64) != 4 || res["stdout"] != "out\n" || res["stderr"] != "err\n" {
		t.Errorf("exec --json: exit %d %q %v", code, out, err)
	}
	for _, k := range []string{"setup_stdout", "setup_stderr", "elapsed", "timed_out", "truncated", "stdout_bytes", "oom_killed"} {
		if _, ok := res[k]; !ok {
			t.Errorf("exec --json lacks %q", k)
		}
	}
	if ps := e.must("ps"); !strings.Contains(ps, "box") || !strings.Contains(ps, "Up") || !strings.Contains(ps, "IDLE") {
		t.Errorf("ps:\n%s", ps)
	}
	var info []map[string]any
	if err := json.Unmarshal([]byte(e.must("inspect", "box")), &info); err != nil || len(info) != 1 || info[0]["Name"] != "/box" || info[0]["State"].(map[string]any)["Running"] != true {
		t.Errorf("inspect: %v %v", info, err)
	}
	// Names are unique.
	if out, code := e.run("", "run", "-d", "--name", "box", e.ref, "sleep", "1"); code != 125 || !strings.Contains(out, "already in use") {
		t.Errorf("duplicate name: %d %q", code, out)
	}
	// stop keeps the files; start brings the sandbox back.
	e.must("stop", "box")
	if ps := e.must("ps", "-a"); !strings.Contains(ps, "Exited") {
		t.Errorf("ps -a after stop:\n%s", ps)
	}
	if out, code := e.run("", "exec", "box", "true"); code == 0 || !strings.Contains(out, "not running") {
		t.Errorf("exec into a stopped sandbox: %d %q", code, out)
	}
	e.must("start", "box")
	if out := e.must("exec", "box", "cat", "/tmp/f"); out != "persisted\n" {
		t.Errorf("files after stop/start: %q", out)
	}
	if out, code := e.run("", "rm", "box"); code == 0 || !strings.Contains(out, "Stop the container before attempting removal") {
		t.Errorf("rm of a running sandbox: %d %q", code, out)
	}
	e.must("rm", "-f", "box")
	if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("rm -f left %q", out)
	}
	// The name is free again.
	e.must("run", "--rm", "--name", "box", e.ref, "true")
}

func TestCreateStart(t *testing.T) {
	e := newEnv(t)
	e.must("create", "--name", "later", e.ref, "sleep", "infinity")
	if ps := e.must("ps", "-a"); !strings.Contains(ps, "Created") {
		t.Errorf("ps -a after create:\n%s", ps)
	}
	// Created (its PID 1 may already be waiting, from the pool): not
	// running until started, for exec, top, ps and inspect alike.
	if out, code := e.run("", "exec", "later", "true"); code == 0 || !strings.Contains(out, "not running") {
		t.Errorf("exec into a created sandbox: exit %d %q", code, out)
	}
	if _, code := e.run("", "top", "later"); code == 0 {
		t.Error("top of a created sandbox succeeded")
	}
	if ps := e.must("ps", "-q"); strings.TrimSpace(ps) != "" {
		t.Errorf("ps (running only) lists the created sandbox: %q", ps)
	}
	if out := e.must("inspect", "-f", "{{.State.Running}} {{.State.Pid}}", "later"); out != "false 0\n" {
		t.Errorf("inspect of a created sandbox: %q", out)
	}
	e.must("stop", "later") // a no-op, as docker's
	if ps := e.must("ps", "-a"); !strings.Contains(ps, "Created") {
		t.Errorf("ps -a after stop of a created sandbox:\n%s", ps)
	}
	if out := strings.TrimSpace(e.must("wait", "later")); out != "0" {
		t.Errorf("wait on a created sandbox printed %q, want 0", out)
	}
	// A start that fails leaves it created, not running without a command.
	e.must("create", "--name", "bad", e.ref, "no-such-command")
	if _, code := e.run("", "start", "bad"); code == 0 {
		t.Error("start of a sandbox whose command does not exist succeeded")
	}
	if ps := e.must("ps", "-a", "--filter", "name=bad"); !strings.Contains(ps, "Created") {
		t.Errorf("after a failed start:\n%s", ps)
	}
	e.must("rm", "bad")
	e.must("start", "later")
	if ps := e.must("exec", "later", "ps", "-o", "args"); !strings.Contains(ps, "sleep infinity") {
		t.Errorf("start did not run the command:\n%s", ps)
	}
	e.must("kill", "later")
	e.must("rm", "later")
}

func TestKeepAndPrune(t *testing.T) {
	e := newEnv(t)
	out := e.must("run", "--keep", "--name", "kept", e.ref, "sh", "-c", "echo evidence > /tmp/e")
	if !strings.Contains(out, "slopbox exec") || !strings.Contains(out, "slopbox rm -f kept") {
		t.Errorf("--keep does not say how to inspect and remove: %q", out)
	}
	if got := e.must("exec", "kept", "cat", "/tmp/e"); got != "evidence\n" {
		t.Errorf("kept sandbox: %q", got)
	}
	// A sandbox whose init was killed from outside (or whose slopbox was
	// killed) is cleaned up by prune.
	// Its PID 1 from its state file: inspect's State.Pid is 0 once the
	// main command has ended, as Docker's, and kill(0) would SIGKILL this
	// test's own process group (it took make test's root phase with it).
	var info []map[string]any
	json.Unmarshal([]byte(e.must("inspect", "kept")), &info)
	var rec struct {
		Pid int `json:"pid"`
	}
	b, err := os.ReadFile(filepath.Join(e.root, "c", info[0]["Id"].(string), "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil || rec.Pid <= 1 {
		t.Fatalf("the kept sandbox's PID 1 from its state: %d %v", rec.Pid, err)
	}
	syscall.Kill(rec.Pid, syscall.SIGKILL)
	fixtures.Eventually(t, "the killed sandbox out of ps", func() (bool, string) {
		ps := e.must("ps")
		return !strings.Contains(ps, "kept"), ps
	})
	if out := e.must("prune"); !strings.Contains(out, "Deleted") {
		t.Errorf("prune: %q", out)
	}
	if out := e.must("ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("prune left %q", out)
	}
}

func TestWorkspaceAndVolumes(t *testing.T) {
	e := newEnv(t)
	ws := filepath.Join(searchable(t, t.TempDir()), "ws")
	os.MkdirAll(filepath.Join(ws, "data"), 0o755)
	os.WriteFile(filepath.Join(ws, "data", "in.txt"), []byte("input"), 0o644)
	e.must("pull", "-q", e.ref)
	out := e.must("run", "--rm", "--workspace", ws, "-v", "data:/data:ro", e.ref, "sh", "-c", "cat /data/in.txt; pwd; echo result > out.txt; (echo x > /data/no) 2>/dev/null || echo refused")
	if out != "input/workspace\nrefused\n" {
		t.Errorf("workspace and -v: %q", out)
	}
	b, err := os.ReadFile(filepath.Join(ws, "out.txt"))
	if err != nil || string(b) != "result\n" {
		t.Errorf("workspace file on the host: %q %v", b, err)
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(ws, "out.txt"), &st)
	// The workspace's owner, the caller's, host root's as root: the
	// workspace is mounted idmapped, and nothing in it changes owner.
	var wst, in syscall.Stat_t
	syscall.Stat(ws, &wst)
	syscall.Stat(filepath.Join(ws, "data", "in.txt"), &in)
	if caller := uint32(os.Getuid()); st.Uid != caller || wst.Uid != caller || in.Uid != caller || st.Mode&0o6000 != 0 {
		t.Errorf("out.txt owned by %d (mode %#o), the workspace by %d, in.txt by %d; want the caller's %d throughout", st.Uid, st.Mode&0o7777, wst.Uid, in.Uid, caller)
	}
	if out, code := e.run("", "run", "--rm", "--workspace", ws, "-v", ws+":/workspace/inner", e.ref, "true"); code != 125 || !strings.Contains(out, "inside") {
		t.Errorf("a mount inside the workdir: %d %q", code, out)
	}
}

// A symlink an earlier run planted in its workspace is not followed by a
// later run's absolute -v or --mount source (the CLI reproduction),
// nor its --workspace,
// and as root a workspace and -v source below a 0700 directory (mkdtemp,
// pytest's tmp_path) mount.
func TestBindSourcesThroughTheCLI(t *testing.T) {
	e := newEnv(t)
	dir := searchable(t, t.TempDir())
	victim := filepath.Join(dir, "victim")
	os.Mkdir(victim, 0o700)
	os.WriteFile(filepath.Join(victim, "key"), []byte("owner\n"), 0o600)
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	e.must("run", "--rm", "--workspace", ws, e.ref, "sh", "-c", "ln -s "+victim+" /workspace/data")
	for _, args := range [][]string{{"-v", ws + "/data:/data"}, {"-v", ws + "/data:/data:ro"}, {"--mount", "type=bind,src=" + ws + "/data,dst=/data"}} {
		out, code := e.run("", append(append([]string{"run", "--rm", "--workspace", ws}, args...), e.ref, "sh", "-c", "echo sandbox >> /data/key")...)
		if code != 125 || !strings.Contains(out, "symlink") || !strings.Contains(out, victim) {
			t.Errorf("run %v through a planted symlink: exit %d %q, want it refused naming the real path", args, code, out)
		}
	}
	// Nor by a later run's --workspace (attack B2): it is opened as a -v
	// source is, and refused the same way. It used to be resolved with
	// EvalSymlinks: the run read and wrote the victim's directory.
	for _, w := range []string{ws + "/data", ws + "/data/"} {
		out, code := e.run("", "run", "--rm", "--workspace", w, e.ref, "sh", "-c", "cat /workspace/key; echo sandbox >> /workspace/key")
		if code != 125 || !strings.Contains(out, "symlink") || !strings.Contains(out, victim) || strings.Contains(out, "owner") {
			t.Errorf("--workspace %s through a planted symlink: exit %d %q, want it refused naming the real path", w, code, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(victim, "key")); string(b) != "owner\n" {
		t.Errorf("the victim's file changed: %q", b)
	}
	if os.Geteuid() != 0 {
		return
	}
	private, err := os.MkdirTemp(dir, "mkdtemp") // 0700, as Python's
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ws", "w"} {
		os.Mkdir(filepath.Join(private, d), 0o755)
		os.WriteFile(filepath.Join(private, d, "f"), []byte(d+"\n"), 0o644)
	}
	out := e.must("run", "--rm", "--workspace", filepath.Join(private, "ws"), "-v", filepath.Join(private, "w")+":/w:ro", e.ref, "sh", "-c", "cat f /w/f && echo x > /workspace/x && echo ok")
	if out != "ws\nw\nok\n" {
		t.Errorf("workspace and -v below a 0700 directory: %q", out)
	}
}

func TestLocalBackend(t *testing.T) {
	e := newEnv(t)
	ws := t.TempDir()
	out := e.must("run", "--backend", "local", "--workspace", ws, "-e", "K=V", "--", "sh", "-c", "echo $K; pwd; echo err >&2")
	if lines := strings.Fields(out); len(lines) != 3 || !strings.HasPrefix(out, "V\n") && !strings.HasPrefix(out, "err\nV\n") || !strings.Contains(out, ws+"\n") {
		t.Errorf("run --backend local: %q", out)
	}
	out, code := e.run("", "run", "--backend", "local", "--workspace", ws, "--json", "--", "sh", "-c", "echo out; exit 5")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 5 || res["stdout"] != "out\n" || res["exit_code"].(float64) != 5 {
		t.Errorf("run --backend local --json: %d %q %v", code, out, err)
	}
	start := time.Now()
	out, code = e.run("", "run", "--backend", "local", "--timeout", "0.5", "--json", "--", "sh", "-c", "sleep 1000 & sleep 1000")
	json.Unmarshal([]byte(out), &res)
	// The bound tells a timeout from the 1000 s sleep, whatever the load.
	if res["timed_out"] != true || time.Since(start) > fixtures.Patience() {
		t.Errorf("local --timeout: %d %q after %v", code, out, time.Since(start))
	}
	if out, code := e.run("in", "run", "--backend", "local", "-i", "--", "cat"); code != 0 || out != "in" {
		t.Errorf("local -i: %d %q", code, out)
	}
	if out, code := e.run("", "run", "--backend", "nope", "true"); code != 125 || !strings.Contains(out, "known: local, sandbox") {
		t.Errorf("unknown backend: %d %q", code, out)
	}
}

func TestImageCommands(t *testing.T) {
	e := newEnv(t)
	e.must("pull", e.ref)
	if out := e.must("images"); !strings.Contains(out, "it/busybox") {
		t.Errorf("images: %q", out)
	}
	e.must("tag", e.ref, "example.com/copy:v1")
	tarball := filepath.Join(t.TempDir(), "img.tar")
	e.must("save", "-o", tarball, "example.com/copy:v1")
	e.must("rmi", "example.com/copy:v1")
	if out := e.must("load", "-i", tarball); !strings.Contains(out, "Loaded image: example.com/copy:v1") {
		t.Errorf("load: %q", out)
	}
	if out := e.must("run", "--rm", "example.com/copy:v1", "echo", "loaded"); out != "loaded\n" {
		t.Errorf("run a loaded image: %q", out)
	}
	var info []map[string]any
	if err := json.Unmarshal([]byte(e.must("inspect", "example.com/copy:v1")), &info); err != nil || info[0]["Os"] != "linux" {
		t.Errorf("inspect image: %v %v", info, err)
	}
	e.must("rmi", "example.com/copy:v1")
	if out, code := e.run("", "rmi", "example.com/copy:v1"); code == 0 || !strings.Contains(out, "image not found") {
		t.Errorf("rmi of a missing image: %d %q", code, out)
	}
	if out, code := e.run("", "load", "-i", "/nonexistent.tar"); code != 1 || !strings.Contains(out, "no such file") {
		t.Errorf("load of a missing file: %d %q", code, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestPullProgress(t *testing.T) {
	e := newEnv(t)
	// Not a terminal: one line per layer.
	out := e.must("pull", e.ref)
	if !strings.Contains(out, "downloading") || !strings.Contains(out, "downloaded and extracted") {
		t.Errorf("plain progress: %q", out)
	}
	e.must("rmi", e.ref)
	// A terminal (script(1) allocates one): per-layer progress bars.
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("this test needs script(1) from bsdutils: %v", err)
	}
	cmd := exec.Command(script, "-qec", fmt.Sprintf("stty cols 100 rows 30; %s --root %s pull %s", e.bin, e.root, e.ref), "/dev/null")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pull on a terminal: %v: %s", err, b)
	}
	if !strings.Contains(string(b), "MiB") || strings.Contains(string(b), "downloading") {
		t.Errorf("terminal progress has no bars: %q", b)
	}
}

func TestRunTimeoutAndJSON(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	start := time.Now()
	out, code := e.run("", "run", "--rm", "--timeout", "0.5", e.ref, "sh", "-c", "sleep 1000 & sleep 1000")
	if code != 137 || time.Since(start) > fixtures.Patience() { // not the 1000 s sleep
		t.Errorf("run --timeout: exit %d after %v: %q", code, time.Since(start), out)
	}
	out, code = e.run("", "run", "--rm", "--json", e.ref, "sh", "-c", "printf 'a\\377b'; exit 2")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 2 || res["stdout"] != "a\uFFFDb" || res["exit_code"].(float64) != 2 {
		t.Errorf("run --json: %d %q %v", code, out, err)
	}
}

// TestVolumeOwnership: a read-write -v is writable by container root as it
// is under Docker, without any sandbox id being host root. Rootless, the
// caller's own directory maps to container root. As root, a directory of
// another user is mounted idmapped (its owner appears as the sandbox's user
// and keeps what the sandbox writes); a root-owned one stays root's unless
// handed over with :U, or is the docker idiom of a workspace (-w D -v SRC:D,
// rlm_code's argv) which is handed over as --workspace is.
func TestVolumeOwnership(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	base := searchable(t, t.TempDir())
	owned := func(path string) uint32 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	write := "echo hi > /data/f && id -u && stat -c %u /data"
	if os.Geteuid() != 0 {
		dir := filepath.Join(base, "mine")
		os.Mkdir(dir, 0o755)
		if out := e.must("run", "--rm", "-v", dir+":/data", e.ref, "sh", "-c", write); out != "0\n0\n" {
			t.Errorf("rootless -v of the caller's directory: %q", out)
		}
		if got := owned(filepath.Join(dir, "f")); got != uint32(os.Getuid()) {
			t.Errorf("file written through -v owned by %d, want the caller %d", got, os.Getuid())
		}
		return
	}

	// Another user's directory: idmapped to the sandbox's user.
	user := filepath.Join(base, "user")
	os.Mkdir(user, 0o755)
	os.WriteFile(filepath.Join(user, "theirs"), []byte("x"), 0o644)
	os.Chown(user, 4321, 4321)
	os.Chown(filepath.Join(user, "theirs"), 4321, 4321)
	if out := e.must("run", "--rm", "-v", user+":/data", e.ref, "sh", "-c", write+" && echo more >> /data/theirs"); out != "0\n0\n" {
		t.Errorf("-v of uid 4321's directory: %q", out)
	}
	if got := owned(filepath.Join(user, "f")); got != 4321 {
		t.Errorf("a file the sandbox wrote in uid 4321's directory is owned by %d, want 4321", got)
	}
	if owned(user) != 4321 || owned(filepath.Join(user, "theirs")) != 4321 {
		t.Errorf("the directory's own files changed owner")
	}

	// Root's directory: mounted idmapped as any directory whose owner no
	// sandbox id maps to: the sandbox writes there as Docker's would, what
	// it writes is the owner's (never setuid), and nothing changes owner.
	rootDir := filepath.Join(base, "root")
	os.Mkdir(rootDir, 0o755)
	if out := e.must("run", "--rm", "-v", rootDir+":/data", e.ref, "sh", "-c", write); out != "0\n0\n" {
		t.Errorf("-v of a root-owned directory: %q", out)
	}
	if owned(rootDir) != 0 || owned(filepath.Join(rootDir, "f")) != 0 {
		t.Errorf("-v of a root-owned directory: the directory or what the sandbox wrote is not host root's (the owner's)")
	}
	// :U (asked for) hands its root-owned entries to the sandbox's user.
	if out := e.must("run", "--rm", "-v", rootDir+":/data:U", e.ref, "sh", "-c", write); out != "0\n0\n" {
		t.Errorf("-v ...:U: %q", out)
	}
	if owned(rootDir) == 0 || owned(filepath.Join(rootDir, "f")) == 0 {
		t.Errorf(":U left host root owning the directory or what the sandbox wrote")
	}

	// rlm_code's argv as root: a 0700 root-owned temporary directory as
	// the workdir's volume works unchanged, and changes no owner.
	tmp := filepath.Join(base, "rlm")
	os.Mkdir(tmp, 0o700)
	os.WriteFile(filepath.Join(tmp, "x.sh"), []byte("echo ran > out.txt; cat out.txt\n"), 0o600)
	if out, code := e.docker("", "run", "--rm", "--workdir", "/workspace", "--volume", tmp+":/workspace:rw", "--network", "none", e.ref, "sh", "/workspace/x.sh"); code != 0 || out != "ran\n" {
		t.Errorf("rlm_code's argv over a root-owned 0700 directory: %d %q", code, out)
	}
	if owned(tmp) != 0 || owned(filepath.Join(tmp, "x.sh")) != 0 || owned(filepath.Join(tmp, "out.txt")) != 0 {
		t.Errorf("the workdir volume or a file in it changed owner, or the new file is not the directory owner's")
	}
	// The same outside the temporary directories.
	srv, err := os.MkdirTemp("/var/lib", "slopbox-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(srv) })
	os.Chmod(srv, 0o755)
	if out, code := e.docker("", "run", "--rm", "--workdir", "/w", "--volume", srv+":/w:rw", e.ref, "sh", "-c", "echo x > f && stat -c %u f"); code != 0 || out != "0\n" {
		t.Errorf("-w D -v /var/lib/…:D: %d %q", code, out)
	}
	if owned(srv) != 0 {
		t.Errorf("a directory outside the temporary directories changed owner")
	}
	e.expect125(`option "bogus" is not supported`, "run", "--rm", "-v", tmp+":/x:bogus", e.ref, "true")
}

// TestRelativeWorkspaceFromKernelCwd: a relative --workspace (".") is the
// kernel's current directory (/proc/self/cwd), whatever $PWD says: a shell
// that entered it through a symlink has $PWD name the link, which a
// sandbox writing the link's directory could repoint; the directory the
// shell is in cannot change. (Through $PWD the run is refused as going
// through a symlink.)
func TestRelativeWorkspaceFromKernelCwd(t *testing.T) {
	e := newEnv(t)
	dir := searchable(t, t.TempDir())
	real := filepath.Join(dir, "real")
	os.Mkdir(real, 0o755)
	os.WriteFile(filepath.Join(real, "f"), []byte("real\n"), 0o644)
	os.Symlink(real, filepath.Join(dir, "link"))
	cmd := exec.Command(e.bin, "--root", e.root, "run", "--rm", "--workspace", ".", e.ref, "cat", "/workspace/f")
	cmd.Dir = filepath.Join(dir, "link")
	cmd.Env = append(os.Environ(), "PWD="+cmd.Dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != "real\n" {
		t.Errorf("run --workspace . in %s: %v: %q %s", cmd.Dir, err, out, stderr.String())
	}
}
