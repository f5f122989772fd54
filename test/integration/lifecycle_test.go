package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// monitors lists the monitor processes serving sandboxes under root.
func monitors(root string) []string { return procsOf("slopbox-monitor", root) }

// procsOf lists the processes named argv0 whose first argument is the
// store root.
func procsOf(argv0, root string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.HasPrefix(b, []byte(argv0+"\x00"+root+"\x00")) {
			out = append(out, e.Name())
		}
	}
	return out
}

// waitFor polls cond with fixtures.Eventually's patience (busy CI hosts).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	fixtures.Eventually(t, what, func() (bool, string) { return cond(), "" })
}

// TestDetachedMainCommand: run -d keeps the command's output as the
// sandbox's log, the sandbox stops when the command exits (docker's
// container semantics), wait and ps report its exit code, and the
// monitor that does this goes with the sandbox.
func TestDetachedMainCommand(t *testing.T) {
	e := newEnv(t)
	t.Cleanup(func() {
		waitFor(t, "monitors to exit", func() bool { return len(monitors(e.root)) == 0 })
	})
	e.must("pull", e.ref)
	// The command runs at least 0.9 s (three sleeps) from before run -d
	// returns: a bound load cannot break.
	start := time.Now()
	id := strings.TrimSpace(e.must("run", "-d", "--name", "job", e.ref, "sh", "-c",
		"for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.3; done; exit 3"))
	if !regexp.MustCompile(`^[0-9a-f]{16,64}$`).MatchString(id) {
		t.Fatalf("run -d printed %q, want the sandbox id", id)
	}
	// logs -f follows the live sandbox and ends when it stops.
	follow := e.must("logs", "-f", "job")
	for _, want := range []string{"out1\n", "out3\n", "err1\n", "err3\n"} {
		if !strings.Contains(follow, want) {
			t.Errorf("logs -f lacks %q:\n%s", want, follow)
		}
	}
	if time.Since(start) < 900*time.Millisecond {
		t.Errorf("logs -f returned after %v, before the command finished", time.Since(start))
	}
	if out := strings.TrimSpace(e.must("wait", "job")); out != "3" {
		t.Errorf("wait printed %q, want 3", out)
	}
	if ps := e.must("ps", "-a"); !strings.Contains(ps, "Exited (3)") {
		t.Errorf("ps -a does not show the exit code:\n%s", ps)
	}
	if ps := e.must("ps"); strings.Contains(ps, "job") {
		t.Errorf("the sandbox still runs after its command exited:\n%s", ps)
	}
	var info []map[string]any
	if err := json.Unmarshal([]byte(e.must("inspect", "job")), &info); err != nil || len(info) != 1 || info[0]["State"].(map[string]any)["ExitCode"] != 3.0 {
		t.Errorf("inspect: %v %v", info, err)
	}
	// stdout and stderr stay apart; --tail and --timestamps.
	cmd := exec.Command(e.bin, "--root", e.root, "logs", "--tail", "1", "--timestamps", "job")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	ts := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z `)
	if o, er := stdout.String(), stderr.String(); o+er == "" || !ts.MatchString(o+er) || strings.Count(o+er, "\n") != 1 || strings.Contains(o, "err") || strings.Contains(er, "out") {
		t.Errorf("logs --tail 1 -t: stdout %q stderr %q", o, er)
	}
	// start runs the command again; the log keeps both runs.
	e.must("start", "job")
	e.must("wait", "job")
	if logs, _ := e.run("", "logs", "job"); strings.Count(logs, "out1") != 2 {
		t.Errorf("logs after a restart:\n%s", logs)
	}
	e.must("rename", "job", "job2")
	if _, code := e.run("", "logs", "job"); code != 1 {
		t.Errorf("logs of the old name exits %d, want 1", code)
	}
	e.must("rm", "job2")

	// -d --rm: removed once the command exits.
	e.must("run", "-d", "--rm", "--name", "gone", e.ref, "true")
	waitFor(t, "run -d --rm to remove the sandbox", func() bool {
		ps, _ := e.run("", "ps", "-a")
		return !strings.Contains(ps, "gone")
	})

	// -di: stdin held open, so a shell waits rather than exiting; top,
	// stats and the container group see it.
	e.must("run", "-di", "--name", "shell", e.ref, "sh")
	time.Sleep(300 * time.Millisecond)
	if ps := e.must("container", "ls"); !strings.Contains(ps, "shell") {
		t.Errorf("run -di sh exited at once:\n%s", ps)
	}
	if top := e.must("top", "shell"); !regexp.MustCompile(`(?m) sh$`).MatchString(top) {
		t.Errorf("top does not show the shell:\n%s", top)
	}
	if st := e.must("stats", "--no-stream", "shell"); !strings.Contains(st, "shell") || !strings.Contains(st, "MEM USAGE") {
		t.Errorf("stats:\n%s", st)
	}
	e.must("stop", "shell")
	// stop sends TERM, then KILL after the grace period (Docker's): the
	// shell ends by one or the other.
	if out := strings.TrimSpace(e.must("wait", "shell")); out != "143" && out != "137" {
		t.Errorf("wait after stop printed %q, want 143 (TERM) or 137 (KILL)", out)
	}
	e.must("rm", "shell")

	// kill -s: the signal reaches the main command, which handles it.
	e.must("run", "-d", "--name", "trap", e.ref, "sh", "-c", `trap "echo got-term; exit 7" TERM; echo trapping; while :; do sleep 0.1; done`)
	// The handshake: the trap is set once the command says so (a TERM
	// before that ends the shell with 143).
	fixtures.Eventually(t, "the trap set", func() (bool, string) {
		out, _ := e.run("", "logs", "trap")
		return strings.Contains(out, "trapping"), e.evidence("trap")
	})
	e.must("kill", "-s", "TERM", "trap")
	if out := strings.TrimSpace(e.must("wait", "trap")); out != "7" {
		t.Errorf("wait after kill -s TERM printed %q, want the trap's 7", out)
	}
	if out := e.must("logs", "trap"); !strings.Contains(out, "got-term") {
		t.Errorf("logs after kill -s TERM: %q", out)
	}
	if out, code := e.run("", "kill", "-s", "HUP", "trap"); code != 1 || !strings.Contains(out, "no main command is running") {
		t.Errorf("kill -s of a stopped sandbox: %d %q", code, out)
	}
	e.must("rm", "trap")
	if _, code := e.run("", "wait", "nosuch"); code != 1 {
		t.Errorf("wait of an unknown sandbox exits %d, want 1", code)
	}
}

// scriptStep is input typed into script(1)'s terminal once ready says
// the session is there for it (a prompt, a line the command printed, a
// process started): a handshake, not a pause.
type scriptStep struct {
	what  string
	ready func(out string) bool
	input string
}

// script runs a shell command line under script(1), which gives it a
// pseudo-terminal of rows×cols, feeding it steps of input.
func (e *env) script(t *testing.T, line string, steps ...scriptStep) (string, int) {
	t.Helper()
	cmd := exec.Command("script", "-qec", "stty rows 33 cols 101; "+line, "/dev/null")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out fixtures.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() }) // a step that never became ready
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for _, s := range steps {
		fixtures.Eventually(t, line+": "+s.what, func() (bool, string) {
			o := out.String()
			return s.ready(o), "output:\n" + o
		})
		in.Write([]byte(s.input))
	}
	select {
	case err = <-done:
	case <-time.After(fixtures.Patience()):
		cmd.Process.Kill()
		t.Fatalf("%s did not finish; output:\n%s", line, out.String())
	}
	in.Close()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return out.String(), code
}

// TestTerminal: run -it and exec -it give the command a terminal of the
// sandbox's own, sized as the caller's, with job control: Ctrl-C
// interrupts the foreground job, not the shell.
func TestTerminal(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Fatal("script(1) (bsdutils) is needed")
	}
	e := newEnv(t)
	sb := e.bin + " --root " + e.root
	out, code := e.script(t, sb+" run --rm -it "+e.ref+" sh -c 'tty; stty size; echo TERM=$TERM; exit 4'")
	if code != 4 || !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "33 101") || !strings.Contains(out, "TERM=xterm") {
		t.Errorf("run -it: exit %d, output:\n%s", code, out)
	}
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	prompts := func(n int) func(string) bool {
		return func(out string) bool { return strings.Count(out, "# ") >= n }
	}
	out, code = e.script(t, sb+" exec -it box sh",
		scriptStep{"the shell's prompt", prompts(1), "sleep 30\n"},
		scriptStep{"sleep 30 running", func(string) bool {
			ps, _ := e.run("", "exec", "box", "ps", "-o", "args")
			return strings.Contains(ps, "sleep 30")
		}, "\x03"},
		scriptStep{"the prompt after Ctrl-C", prompts(2), "echo after-$?\n"},
		scriptStep{"the prompt after the echo", prompts(3), "exit 7\n"})
	if code != 7 || !strings.Contains(out, "after-130") {
		t.Errorf("exec -it with Ctrl-C: exit %d, output:\n%s", code, out)
	}
	// -it without a terminal is refused, as docker does.
	if out, code := e.run("", "exec", "-it", "box", "true"); code != 1 || !strings.Contains(out, "not a TTY") {
		t.Errorf("exec -it without a terminal: exit %d: %s", code, out)
	}
	// -t alone, output to a pipe: the command still gets a terminal.
	if out, code := e.run("", "exec", "-t", "box", "sh", "-c", "tty"); code != 0 || !strings.Contains(out, "/dev/pts/") {
		t.Errorf("exec -t: exit %d: %s", code, out)
	}
	e.must("rm", "-f", "box")
}

// TestCopy: cp both ways keeps modes and symlinks, copies dir/. contents
// and streams with -, and a symlink planted on either side never makes it
// write outside the destination.
func TestCopy(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	host := t.TempDir()
	src := filepath.Join(host, "tree")
	os.MkdirAll(filepath.Join(src, "sub"), 0o750)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "data"), []byte("data"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(src, "link"))

	e.must("cp", src, "box:/tmp/")
	if out := e.must("exec", "box", "sh", "-c", "/tmp/tree/run.sh; stat -c '%a %U' /tmp/tree/sub /tmp/tree/sub/data; readlink /tmp/tree/link"); out != "ran\n750 root\n600 root\n/etc/passwd\n" {
		t.Errorf("copied in:\n%s", out)
	}
	e.must("exec", "box", "sh", "-c", "echo made-inside > /tmp/tree/new; chmod 640 /tmp/tree/new")
	back := filepath.Join(host, "back")
	e.must("cp", "box:/tmp/tree", back)
	if fi, err := os.Stat(filepath.Join(back, "new")); err != nil || fi.Mode().Perm() != 0o640 || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
		t.Errorf("copied out: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(back, "link")); err != nil || l != "/etc/passwd" {
		t.Errorf("symlink copied out as %q, %v", l, err)
	}
	// dir/. and a tar stream on stdout.
	e.must("cp", "box:/tmp/tree/.", filepath.Join(host, "contents"))
	if _, err := os.Stat(filepath.Join(host, "contents", "run.sh")); err != nil {
		t.Error(err)
	}
	if out := e.must("cp", "box:/tmp/tree/sub/data", "-"); !strings.Contains(out, "data") || !strings.HasPrefix(out, "data") {
		t.Errorf("cp to - gave %q", out)
	}

	// The sandbox plants a symlink where the copy lands on the host: it is
	// replaced, not followed.
	victim := filepath.Join(host, "victim")
	os.Mkdir(victim, 0o755)
	dest := filepath.Join(host, "dest")
	os.Mkdir(dest, 0o755)
	os.Symlink(victim, filepath.Join(dest, "tree"))
	e.must("cp", "box:/tmp/tree", dest)
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("cp wrote through a symlink in the destination: %v", ents)
	}
	// A symlink in the sandbox as the destination is refused, not followed.
	e.must("exec", "box", "sh", "-c", "ln -s /etc /tmp/esc")
	if out, code := e.run("", "cp", filepath.Join(src, "run.sh"), "box:/tmp/esc/"); code != 1 || !strings.Contains(out, "symbolic link") {
		t.Errorf("cp into a symlink: exit %d: %s", code, out)
	}
	if _, code := e.run("", "exec", "box", "test", "-e", "/etc/run.sh"); code == 0 {
		t.Error("cp followed the sandbox's symlink")
	}
	// A setuid file does not stay setuid on either side.
	os.WriteFile(filepath.Join(host, "suid"), []byte("x"), 0o755)
	os.Chmod(filepath.Join(host, "suid"), 0o4755)
	e.must("cp", filepath.Join(host, "suid"), "box:/tmp/suid")
	if out := e.must("exec", "box", "stat", "-c", "%a", "/tmp/suid"); out != "755\n" {
		t.Errorf("setuid copied in: %s", out)
	}
	for _, bad := range [][]string{{"cp", "box:/nonexistent", host}, {"cp", "/nonexistent", "box:/tmp"}, {"cp", "a", "b"}, {"cp", "nosuch:/x", host}} {
		if out, code := e.run("", bad...); code != 1 {
			t.Errorf("%v: exit %d, want 1: %s", bad, code, out)
		}
	}
	e.must("rm", "-f", "box")
}

// TestRunFlags: the docker run flags users reach for, and ps's filters
// and templates.
func TestRunFlags(t *testing.T) {
	e := newEnv(t)
	e.must("pull", e.ref)
	if out := e.must("run", "--rm", "--entrypoint", "echo", e.ref, "via", "entrypoint"); out != "via entrypoint\n" {
		t.Errorf("--entrypoint: %q", out)
	}
	if out := e.must("run", "--rm", "-h", "myhost", e.ref, "hostname"); out != "myhost\n" {
		t.Errorf("--hostname: %q", out)
	}
	envFile := filepath.Join(t.TempDir(), "env")
	os.WriteFile(envFile, []byte("# comment\n\nFOO=from-file\nBAR=file\n"), 0o644)
	if out := e.must("run", "--rm", "--env-file", envFile, "-e", "BAR=flag", e.ref, "sh", "-c", "echo $FOO $BAR"); out != "from-file flag\n" {
		t.Errorf("--env-file: %q", out)
	}
	dir := searchable(t, t.TempDir())
	os.WriteFile(filepath.Join(dir, "f"), []byte("mounted\n"), 0o644)
	if out := e.must("run", "--rm", "--mount", "type=bind,source="+dir+",target=/m,readonly", e.ref, "sh", "-c", "cat /m/f; touch /m/g 2>/dev/null || echo read-only"); out != "mounted\nread-only\n" {
		t.Errorf("--mount bind: %q", out)
	}
	if out := e.must("run", "--rm", "--mount", "type=tmpfs,target=/tmp,tmpfs-size=8m", e.ref, "sh", "-c", "df -k /tmp | tail -1"); !strings.Contains(out, "8192") {
		t.Errorf("--mount tmpfs: %q", out)
	}
	for _, bad := range [][]string{
		{"--mount", "type=bind,src=/,dst=/h"}, {"--mount=type=bind,source=/etc,target=/e"}, {"--mount", "type=volume,src=v,dst=/v"},
		{"--platform", "linux/s390x"}, {"-h", "bad_host!"}, {"--env-file", "/nonexistent"},
	} {
		if out, code := e.run("", append(append([]string{"run", "--rm"}, bad...), e.ref, "true")...); code != 125 {
			t.Errorf("run %v: exit %d, want 125: %s", bad, code, out)
		}
	}
	e.must("run", "--rm", "--init", "--platform", "linux/"+runtimeArch(), e.ref, "true")
	e.must("run", "-d", "--name", "one", "--label", "team=a", e.ref, "sleep", "infinity")
	e.must("run", "-d", "--name", "two", "--label", "team=b", e.ref, "sleep", "infinity")
	if out := e.must("ps", "--filter", "label=team=a", "--format", "{{.Names}} {{.State}} {{.Labels}}"); out != "one running team=a\n" {
		t.Errorf("ps --filter label --format: %q", out)
	}
	if out := e.must("ps", "--format", `table {{.Names}}\t{{.State}}`, "-f", "name=tw"); !strings.HasPrefix(out, "NAMES") || !strings.Contains(out, "two") || strings.Contains(out, "one") {
		t.Errorf("ps --format table: %q", out)
	}
	e.must("stop", "two")
	if out := e.must("ps", "-q", "--filter", "status=exited"); !strings.HasPrefix(strings.TrimSpace(e.must("inspect", "two")), "[") || strings.Count(out, "\n") != 1 {
		t.Errorf("ps --filter status=exited: %q", out)
	}
	if _, code := e.run("", "ps", "--filter", "colour=red"); code == 0 {
		t.Error("an unknown filter was accepted")
	}
	// As docker create --rm: started, it goes with its command.
	rmID := strings.TrimSpace(e.must("create", "--rm", e.ref, "true"))
	e.must("start", rmID)
	waitFor(t, "a create --rm sandbox gone with its command", func() bool {
		_, code := e.run("", "inspect", rmID)
		return code != 0
	})
	// As docker ps: -q prints the short id, --no-trunc the whole one.
	short, whole := strings.TrimSpace(e.must("ps", "-q", "-f", "name=one")), strings.TrimSpace(e.must("ps", "-q", "--no-trunc", "-f", "name=one"))
	if len(short) != 12 || len(whole) != 16 || !strings.HasPrefix(whole, short) {
		t.Errorf("ps -q: %q, ps -q --no-trunc: %q", short, whole)
	}
	e.must("rm", "-f", "one", "two")
	e.must("container", "prune")
	e.must("image", "prune")
	e.must("system", "prune")
}

func runtimeArch() string { return runtime.GOARCH }

// The log of a detached command is bounded (two files of 8 MiB), keeps
// the end of a long output whole, and a client that follows it (logs -f)
// misses nothing however long the output.
func TestLogBound(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	contiguous := func(what, out string) int {
		t.Helper()
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) < 2 || lines[len(lines)-1] != "END" {
			t.Fatalf("%s: %d lines, ending %q", what, len(lines), out[max(0, len(out)-40):])
		}
		first, err := strconv.Atoi(lines[0])
		if err != nil {
			t.Fatalf("%s: first line %q", what, lines[0])
		}
		for i, l := range lines[:len(lines)-1] {
			if l != strconv.Itoa(first+i) {
				t.Fatalf("%s: line %d is %q, want %d (a gap)", what, i, l, first+i)
			}
		}
		return len(lines) - 1
	}
	e.must("run", "-d", "--name", "big", e.ref, "sh", "-c", "seq 1 400000; echo END")
	e.must("wait", "big")
	if n := contiguous("logs", e.must("logs", "big")); n >= 400000 || n < 100000 {
		t.Errorf("logs kept %d of 400000 lines; want the bounded end", n)
	}
	e.must("run", "-d", "--name", "followed", e.ref, "sh", "-c", "sleep 0.5; seq 1 400000; echo END")
	if n := contiguous("logs -f", e.must("logs", "-f", "followed")); n != 400000 {
		t.Errorf("logs -f got %d of 400000 lines", n)
	}
}

// pause stops every process of a sandbox (its output stops growing), exec
// waits for unpause, ps says Paused; unpause continues them; stop and rm
// work on a paused sandbox.
func TestPauseUnpause(t *testing.T) {
	e := newEnv(t)
	ws := t.TempDir()
	e.must("run", "-d", "--name", "tick", "--workspace", ws, e.ref, "sh", "-c", "while :; do echo x >> /tmp/t; echo x >> /workspace/t; sleep 0.02; done")
	// Read on the host, so that it can be read while the sandbox is paused.
	hostLines := func() int {
		b, _ := os.ReadFile(filepath.Join(ws, "t"))
		return bytes.Count(b, []byte("\n"))
	}
	lines := func() int {
		t.Helper()
		// 0 before the loop's first write (a loaded host may not have
		// run it yet).
		out, code := e.run("", "exec", "tick", "sh", "-c", "if [ -f /tmp/t ]; then wc -l < /tmp/t; else echo 0; fi")
		if code != 0 {
			t.Fatalf("exec wc: %d %q", code, out)
		}
		n, _ := strconv.Atoi(strings.Fields(out)[0])
		return n
	}
	waitFor(t, "the loop to write", func() bool { return lines() > 3 })
	e.must("pause", "tick")
	if ps := e.must("ps"); !strings.Contains(ps, "(Paused)") {
		t.Errorf("ps of a paused sandbox:\n%s", ps)
	}
	if out, code := e.run("", "exec", "tick", "true"); code == 0 || !strings.Contains(out, "paused") {
		t.Errorf("exec into a paused sandbox: exit %d %q", code, out)
	}
	if out, code := e.run("", "pause", "tick"); code != 1 || !strings.Contains(out, "is paused") {
		t.Errorf("pause twice: exit %d %q", code, out)
	}
	e.must("unpause", "tick")
	before := lines()
	e.must("pause", "tick")
	e.must("unpause", "tick")
	n1 := lines()
	// pause returns once every process is frozen: counted then, and again
	// half a second later, the file has grown by no more than the line
	// being written when the freeze came.
	e.must("pause", "tick")
	p1 := hostLines()
	time.Sleep(500 * time.Millisecond)
	p2 := hostLines()
	e.must("unpause", "tick")
	n2 := lines()
	if p2-p1 > 1 {
		t.Errorf("the loop ran while paused: %d lines then %d", p1, p2)
	}
	waitFor(t, "the loop to go on after unpause", func() bool { return lines() > n2+3 })
	if n1 < before {
		t.Errorf("lines went back: %d, %d", before, n1)
	}
	if out, code := e.run("", "unpause", "tick"); code != 1 || !strings.Contains(out, "not paused") {
		t.Errorf("unpause of a running sandbox: exit %d %q", code, out)
	}
	e.must("pause", "tick")
	e.must("stop", "-t", "1", "tick")
	if ps := e.must("ps", "-a"); strings.Contains(ps, "Paused") || !strings.Contains(ps, "Exited") {
		t.Errorf("ps after stop of a paused sandbox:\n%s", ps)
	}
	e.must("start", "tick")
	if _, code := e.run("", "exec", "tick", "true"); code != 0 {
		t.Error("exec after restarting a sandbox stopped while paused")
	}
	e.must("rm", "-f", "tick")
}
