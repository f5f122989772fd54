package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// ociCmd runs slopbox's runc-compatible command line through a
// slopbox-runc symlink, as containerd runs it.
type ociCmd struct {
	t    *testing.T
	bin  string // the slopbox-runc symlink
	root string
}

func newOCI(t *testing.T) *ociCmd {
	dir := searchable(t, t.TempDir())
	link := filepath.Join(dir, "slopbox-runc")
	if err := os.Symlink(slopboxBin(t), link); err != nil {
		t.Fatal(err)
	}
	o := &ociCmd{t: t, bin: link, root: filepath.Join(dir, "state")}
	t.Cleanup(func() {
		// Nothing may be left: every container deleted, the state empty.
		// (containerd's shim adds a directory per namespace.)
		left, _ := filepath.Glob(filepath.Join(o.root, "*", "state.json"))
		deeper, _ := filepath.Glob(filepath.Join(o.root, "*", "*", "state.json"))
		for _, st := range append(left, deeper...) {
			id := filepath.Base(filepath.Dir(st))
			exec.Command(o.bin, "--root", filepath.Dir(filepath.Dir(st)), "delete", "--force", id).Run()
			t.Errorf("container %s left behind", id)
		}
	})
	return o
}

// run runs slopbox-runc --root ROOT args... with stdout and stderr apart.
func (o *ociCmd) run(args ...string) (stdout, stderr string, code int) {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.bin, append([]string{"--root", o.root}, args...)...)
	// Files, not pipes: a created container inherits them and holds them
	// until it ends, and exec.Cmd would wait for a pipe's end.
	dir := o.t.TempDir()
	outf, _ := os.Create(filepath.Join(dir, "stdout"))
	errf, _ := os.Create(filepath.Join(dir, "stderr"))
	defer outf.Close()
	defer errf.Close()
	cmd.Stdout, cmd.Stderr = outf, errf
	err := cmd.Run()
	if ctx.Err() != nil {
		o.t.Fatalf("slopbox-runc %v hung", args)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		o.t.Fatal(err)
	}
	out, _ := os.ReadFile(outf.Name())
	errb, _ := os.ReadFile(errf.Name())
	return string(out), string(errb), code
}

// bundle makes a bundle from the busybox fixture: rootfs/ and the example
// config.json (rootless when not root), running args.
func (o *ociCmd) bundle(args ...string) string {
	t := o.t
	dir := filepath.Join(searchable(t, t.TempDir()), "bundle")
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp", "etc"} {
		os.MkdirAll(filepath.Join(rootfs, d), 0o755)
	}
	os.WriteFile(filepath.Join(rootfs, "bin/busybox"), bin, 0o755)
	for _, a := range []string{"sh", "echo", "sleep", "cat", "id", "ps", "true", "hostname", "tty"} {
		os.Symlink("busybox", filepath.Join(rootfs, "bin", a))
	}
	spec := []string{"spec", "--bundle", dir}
	if os.Getuid() != 0 {
		spec = append(spec, "--rootless")
	}
	if _, stderr, code := o.run(spec...); code != 0 {
		t.Fatalf("spec: %s", stderr)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	p := cfg["process"].(map[string]any)
	p["terminal"] = false
	p["args"] = args
	b, _ = json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	return dir
}

// patchProcess edits the process of a bundle's config.json.
func patchProcess(t *testing.T, bundle string, edit func(p map[string]any)) {
	t.Helper()
	path := filepath.Join(bundle, "config.json")
	var cfg map[string]any
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg["process"].(map[string]any))
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testUpdateEvents: update changes a running container's limits (flags,
// and --resources - as containerd's shim passes them), and events --stats
// reports them in runc's shape. Rootless on cgroup v1 a container has no
// cgroup: both say so instead of pretending.
func testUpdateEvents(t *testing.T, o *ociCmd, id string) {
	t.Helper()
	stats := func() (pidsLimit, memLimit uint64) {
		stdout, stderr, code := o.run("events", "--stats", id)
		if code != 0 {
			t.Fatalf("events --stats: %d %s", code, stderr)
		}
		var ev struct {
			Type, ID string
			Data     struct {
				Pids   struct{ Limit uint64 }
				Memory struct{ Usage struct{ Limit, Usage uint64 } }
				CPU    struct{ Usage struct{ Total uint64 } }
			}
		}
		if err := json.Unmarshal([]byte(stdout), &ev); err != nil || ev.Type != "stats" || ev.ID != id {
			t.Fatalf("events --stats: %v %q", err, stdout)
		}
		if ev.Data.Memory.Usage.Usage == 0 || ev.Data.CPU.Usage.Total == 0 {
			t.Errorf("events --stats has no memory or CPU usage: %s", stdout)
		}
		return ev.Data.Pids.Limit, ev.Data.Memory.Usage.Limit
	}
	if os.Getuid() != 0 && !cgroup2Only() {
		_, stderr, code := o.run("update", "--pids-limit", "7", id)
		if code != 1 || !strings.Contains(stderr, "no cgroup") {
			t.Errorf("rootless update on cgroup v1: %d %q, want the reason", code, stderr)
		}
		return
	}
	if _, stderr, code := o.run("update", "--pids-limit", "7", id); code != 0 {
		t.Fatalf("update --pids-limit: %s", stderr)
	}
	if pids, _ := stats(); pids != 7 {
		t.Errorf("after update --pids-limit 7: the pids limit is %d", pids)
	}
	cmd := exec.Command(o.bin, "--root", o.root, "update", "--resources", "-", id)
	cmd.Stdin = strings.NewReader(`{"memory":{"limit":67108864}}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update --resources -: %v %s", err, out)
	}
	if pids, mem := stats(); pids != 7 || mem != 64<<20 {
		t.Errorf("after update --resources -: pids limit %d (want 7 kept), memory limit %d (want 64 MiB)", pids, mem)
	}
	if _, stderr, code := o.run("update", "--memory", "lots", id); code != 1 || !strings.Contains(stderr, "--memory") {
		t.Errorf("update --memory lots: %d %q", code, stderr)
	}
}

// cgroup2Only reports a unified (cgroup v2 only) host.
func cgroup2Only() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// waitStatus polls id's state until it reads want (fixtures.Eventually)
// and returns it.
func (o *ociCmd) waitStatus(id, want string) string {
	o.t.Helper()
	var st string
	fixtures.Eventually(o.t, id+" "+want, func() (bool, string) {
		st = o.status(id)
		return st == want, "state: " + st
	})
	return st
}

func (o *ociCmd) status(id string) string {
	out, stderr, code := o.run("state", id)
	if code != 0 {
		o.t.Fatalf("state %s: %s", id, stderr)
	}
	var st struct {
		Status string
		Pid    int
		Bundle string
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		o.t.Fatalf("state: %v: %s", err, out)
	}
	return st.Status
}

// TestOCIRuntime: the runc command line's life cycle on a bundle, as root
// and rootless (make test runs it as both): create leaves the process
// waiting, start runs it with create's stdio, state follows it to stopped,
// exec runs a second process, kill takes names and numbers, delete refuses
// a running container unless forced, errors read as runc's.
func TestOCIRuntime(t *testing.T) {
	o := newOCI(t)
	// Without a cgroupsPath a container's cgroup is /ID: ids unique to
	// this run.
	c1, c2 := fmt.Sprintf("c1-%d", os.Getpid()), fmt.Sprintf("c2-%d", os.Getpid())
	dir := o.bundle("sh", "-c", "echo started as $(id -u); exec sleep 1000")
	patchProcess(t, dir, func(p map[string]any) {
		p["env"] = append(p["env"].([]any), "FROM_BUNDLE=yes")
		p["cwd"] = "/tmp"
	})
	out := filepath.Join(dir, "out")
	f, _ := os.Create(out)
	cmd := exec.Command(o.bin, "--root", o.root, "create", "--bundle", dir, "--pid-file", filepath.Join(dir, "pid"), c1)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(out)
		t.Fatalf("create: %v: %s", err, b)
	}
	f.Close()
	pid, _ := os.ReadFile(filepath.Join(dir, "pid"))
	if st := o.status(c1); st != "created" || len(pid) == 0 {
		t.Errorf("after create: %s, pid %q", st, pid)
	}
	if _, stderr, code := o.run("start", c1); code != 0 {
		t.Fatalf("start: %s", stderr)
	}
	if st := o.status(c1); st != "running" {
		t.Errorf("after start: %s", st)
	}
	fixtures.Eventually(t, "the container's output (create's stdout)", func() (bool, string) {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), "started as 0"), fmt.Sprintf("%q", b)
	})
	if stdout, stderr, code := o.run("exec", c1, "sh", "-c", "echo in exec; exit 3"); code != 3 || stdout != "in exec\n" {
		t.Errorf("exec: %d %q %q", code, stdout, stderr)
	}
	// Without --process, exec runs the bundle's process (its env, cwd,
	// user) with the command line's args and overrides, as runc does.
	if stdout, stderr, code := o.run("exec", c1, "sh", "-c", "echo $FROM_BUNDLE $(pwd) $(id -u)"); code != 0 || stdout != "yes /tmp 0\n" {
		t.Errorf("exec with the bundle's process: %d %q %q", code, stdout, stderr)
	}
	if stdout, stderr, code := o.run("exec", "--cwd", "/", "-e", "MORE=1", c1, "sh", "-c", "echo $FROM_BUNDLE $MORE $(pwd)"); code != 0 || stdout != "yes 1 /\n" {
		t.Errorf("exec --cwd --env: %d %q %q", code, stdout, stderr)
	}
	testUpdateEvents(t, o, c1)
	proc := filepath.Join(dir, "process.json")
	os.WriteFile(proc, []byte(`{"args":["sleep","1000"],"cwd":"/","user":{"uid":0,"gid":0},"env":["PATH=/bin"]}`), 0o644)
	if _, stderr, code := o.run("exec", "--process", proc, "--detach", "--pid-file", filepath.Join(dir, "exec.pid"), c1); code != 0 {
		t.Errorf("exec --detach: %s", stderr)
	}
	// Rootless on cgroup v1 ps reads the container's pid namespace, where
	// a process still setting up (not yet exec'd, not dumpable) does not
	// show: the second one shows within a bound.
	fixtures.Eventually(t, "ps shows the two processes", func() (bool, string) {
		stdout, stderr, _ := o.run("ps", "--format", "json", c1)
		return strings.Count(stdout, ",") == 1, fmt.Sprintf("ps: %q %q", stdout, stderr)
	})
	if _, stderr, code := o.run("delete", c1); code == 0 || !strings.Contains(stderr, "not stopped") {
		t.Errorf("delete of a running container: %d %q", code, stderr)
	}
	// Paused, then thawed.
	if os.Getuid() == 0 {
		if _, stderr, code := o.run("pause", c1); code != 0 || o.status(c1) != "paused" {
			t.Errorf("pause: %d %q", code, stderr)
		}
		if _, stderr, code := o.run("resume", c1); code != 0 || o.status(c1) != "running" {
			t.Errorf("resume: %d %q", code, stderr)
		}
	}
	if _, stderr, code := o.run("kill", c1, "KILL"); code != 0 {
		t.Errorf("kill KILL: %s", stderr)
	}
	if st := o.waitStatus(c1, "stopped"); st != "stopped" {
		t.Errorf("after kill: %s", st)
	}
	if _, stderr, code := o.run("delete", c1); code != 0 {
		t.Errorf("delete: %s", stderr)
	}
	if _, stderr, code := o.run("state", c1); code == 0 || !strings.Contains(stderr, "does not exist") {
		t.Errorf("state of a deleted container: %d %q", code, stderr)
	}
	if _, stderr, code := o.run("kill", c1, "15"); code == 0 || !strings.Contains(stderr, "does not exist") {
		t.Errorf("kill of a deleted container: %d %q", code, stderr)
	}

	// A paused container goes with delete --force (root: a freezer).
	if os.Getuid() == 0 {
		c3 := fmt.Sprintf("c3-%d", os.Getpid())
		b3 := o.bundle("sleep", "1000")
		if _, stderr, code := o.run("create", "--bundle", b3, c3); code != 0 {
			t.Fatalf("create c3: %s", stderr)
		}
		o.run("start", c3)
		if _, stderr, code := o.run("pause", c3); code != 0 {
			t.Errorf("pause c3: %s", stderr)
		}
		if _, stderr, code := o.run("delete", "--force", c3); code != 0 {
			t.Errorf("delete --force of a paused container: %s", stderr)
		}
	}

	// A created container is deleted without --force; kill takes a number;
	// the log gets the error as JSON, where containerd's shim reads it.
	o2 := o.bundle("true")
	if _, stderr, code := o.run("create", "--bundle", o2, c2); code != 0 {
		t.Fatalf("create c2: %s", stderr)
	}
	if _, stderr, code := o.run("delete", c2); code != 0 {
		t.Errorf("delete of a created container: %s", stderr)
	}
	logf := filepath.Join(dir, "log.json")
	if _, _, code := o.run("--log", logf, "--log-format", "json", "start", "nosuch"); code != 1 {
		t.Errorf("start of a missing container exits %d, want 1", code)
	}
	b, _ := os.ReadFile(logf)
	var entry struct{ Level, Msg string }
	if err := json.Unmarshal(b, &entry); err != nil || entry.Level != "error" || !strings.Contains(entry.Msg, "does not exist") {
		t.Errorf("log.json: %v %q", err, b)
	}
	if stdout, _, code := o.run("features"); code != 0 || !strings.Contains(stdout, `"ociVersionMax"`) {
		t.Errorf("features: %d %q", code, stdout)
	}
}

// consoleSocket listens on a unix socket as runc's recvtty does: the
// runtime connects and sends the terminal's master by SCM_RIGHTS. The
// returned channel yields that master (or the error), once.
func consoleSocket(t *testing.T) (string, <-chan *os.File) {
	t.Helper()
	// A short path: sun_path holds 108 bytes.
	dir, err := os.MkdirTemp("", "oci-console")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan *os.File, 1)
	go func() {
		defer close(ch)
		conn, err := l.AcceptUnix()
		if err != nil {
			return
		}
		defer conn.Close()
		name := make([]byte, 4096)
		oob := make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := conn.ReadMsgUnix(name, oob)
		if err != nil {
			t.Errorf("console socket: %v", err)
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			t.Errorf("console socket: %d control messages: %v", len(msgs), err)
			return
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			t.Errorf("console socket: %d fds: %v", len(fds), err)
			return
		}
		// Non-blocking, so that reads take a deadline.
		unix.SetNonblock(fds[0], true)
		f := os.NewFile(uintptr(fds[0]), string(name[:n]))
		t.Cleanup(func() { f.Close() })
		ch <- f
	}()
	return sock, ch
}

// recvMaster waits for the master a console socket receives.
func recvMaster(t *testing.T, ch <-chan *os.File) *os.File {
	t.Helper()
	select {
	case f, ok := <-ch:
		if !ok {
			t.Fatal("the console socket received no terminal master")
		}
		return f
	case <-time.After(time.Minute):
		t.Fatal("the console socket received nothing in a minute")
	}
	return nil
}

// readUntil reads a terminal master until what it read matches want or a
// deadline passes, and returns what it read.
func readUntil(t *testing.T, f *os.File, want *regexp.Regexp) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 1024)
	deadline := time.Now().Add(fixtures.Patience())
	f.SetReadDeadline(deadline)
	for !want.Match(got) && time.Now().Before(deadline) {
		n, err := f.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	if !want.Match(got) {
		t.Errorf("the terminal showed %q, want %s", got, want)
	}
	return string(got)
}

// TestOCIRuntimeTerminal: a bundle whose process has a terminal gets it
// through create --console-socket, and exec --tty --console-socket gives
// a second process one, as runc's contract with containerd's shim has it:
// the socket receives the pty master by SCM_RIGHTS, and what is written
// to it reaches the process, whose output comes back.
func TestOCIRuntimeTerminal(t *testing.T) {
	o := newOCI(t)
	id := fmt.Sprintf("tty-%d", os.Getpid())
	dir := o.bundle("sh", "-c", "tty; read x; echo got $x; exec sleep 1000")
	patchProcess(t, dir, func(p map[string]any) { p["terminal"] = true })
	sock, master := consoleSocket(t)
	if _, stderr, code := o.run("create", "--bundle", dir, "--console-socket", sock, id); code != 0 {
		t.Fatalf("create --console-socket: %d %s", code, stderr)
	}
	t.Cleanup(func() { o.run("delete", "--force", id) })
	m := recvMaster(t, master)
	if _, stderr, code := o.run("start", id); code != 0 {
		t.Fatalf("start: %s", stderr)
	}
	readUntil(t, m, regexp.MustCompile(`/dev/pts/\d+\r?\n`))
	if _, err := m.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	t.Logf("the container's terminal: %q", readUntil(t, m, regexp.MustCompile(`got hello`)))

	// A second process with a terminal of its own.
	sock2, master2 := consoleSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex := exec.CommandContext(ctx, o.bin, "--root", o.root, "exec", "--tty", "--console-socket", sock2, id, "sh", "-c", "tty; read x; echo exec got $x; exit 5")
	exOut := filepath.Join(dir, "exec.out")
	f, _ := os.Create(exOut)
	defer f.Close()
	ex.Stdout, ex.Stderr = f, f
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ex.Wait() }()
	m2 := recvMaster(t, master2)
	readUntil(t, m2, regexp.MustCompile(`/dev/pts/\d+\r?\n`))
	if _, err := m2.Write([]byte("there\n")); err != nil {
		t.Fatal(err)
	}
	t.Logf("exec's terminal: %q", readUntil(t, m2, regexp.MustCompile(`exec got there`)))
	err := <-done
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 {
		b, _ := os.ReadFile(exOut)
		t.Errorf("exec --tty: %v, want exit status 5: %s", err, b)
	}

	if _, stderr, code := o.run("delete", "--force", id); code != 0 {
		t.Errorf("delete --force: %s", stderr)
	}
}

// TestOCIRuntimeKillAll: kill --all signals every process of the
// container (containerd's shim uses it for a container sharing a pid
// namespace), not only its init: here both the init and an exec'd process
// trap SIGUSR1 and say so.
func TestOCIRuntimeKillAll(t *testing.T) {
	o := newOCI(t)
	id := fmt.Sprintf("killall-%d", os.Getpid())
	loop := "while :; do sleep 0.2; done"
	dir := o.bundle("sh", "-c", "trap 'echo init got USR1' USR1; echo init ready; "+loop)
	out := filepath.Join(dir, "out")
	f, _ := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	defer f.Close()
	cmd := exec.Command(o.bin, "--root", o.root, "create", "--bundle", dir, id)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(out)
		t.Fatalf("create: %v: %s", err, b)
	}
	t.Cleanup(func() { o.run("delete", "--force", id) })
	if _, stderr, code := o.run("start", id); code != 0 {
		t.Fatalf("start: %s", stderr)
	}
	proc := filepath.Join(dir, "process.json")
	os.WriteFile(proc, []byte(`{"args":["sh","-c","trap 'echo exec got USR1' USR1; echo exec ready; `+loop+`"],"cwd":"/","user":{"uid":0,"gid":0},"env":["PATH=/bin"]}`), 0o644)
	ex := exec.Command(o.bin, "--root", o.root, "exec", "--process", proc, "--detach", id)
	ex.Stdout, ex.Stderr = f, f
	if err := ex.Run(); err != nil {
		b, _ := os.ReadFile(out)
		t.Fatalf("exec --detach: %v: %s", err, b)
	}
	waitFor := func(what ...string) {
		t.Helper()
		fixtures.Eventually(t, fmt.Sprintf("the container's output holds %q", what), func() (bool, string) {
			b, _ := os.ReadFile(out)
			all := true
			for _, w := range what {
				all = all && strings.Contains(string(b), w)
			}
			return all, fmt.Sprintf("%q", b)
		})
	}
	waitFor("init ready", "exec ready")
	if _, stderr, code := o.run("kill", "--all", id, "USR1"); code != 0 {
		t.Fatalf("kill --all USR1: %d %s", code, stderr)
	}
	waitFor("init got USR1", "exec got USR1")

	if _, stderr, code := o.run("kill", "--all", id, "KILL"); code != 0 {
		t.Errorf("kill --all KILL: %d %s", code, stderr)
	}
	if st := o.waitStatus(id, "stopped"); st != "stopped" {
		t.Errorf("after kill --all KILL: %s", st)
	}
	if _, stderr, code := o.run("delete", id); code != 0 {
		t.Errorf("delete: %s", stderr)
	}
}

// TestOCIRuntimeVersionAndSystemd: --version reads as runc's (a
// "NAME version V" first line, then "spec: 1.x"), and --systemd-cgroup on
// a host without systemd is refused, clearly, with runc's exit status 1
// and nothing left behind.
func TestOCIRuntimeVersionAndSystemd(t *testing.T) {
	o := newOCI(t)
	stdout, stderr, code := o.run("--version")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || !regexp.MustCompile(`^slopbox-runc version \S+$`).MatchString(lines[0]) {
		t.Errorf("--version: %d %q %q", code, stdout, stderr)
	}
	spec := false
	for _, l := range lines[1:] {
		spec = spec || regexp.MustCompile(`^spec: 1\.\d+\.\d+`).MatchString(l)
	}
	if !spec {
		t.Errorf("--version has no spec: 1.x line: %q", stdout)
	}

	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Log("this host runs systemd: the refusal is for hosts without it")
		return
	}
	id := fmt.Sprintf("sd-%d", os.Getpid())
	dir := o.bundle("true")
	stdout, stderr, code = o.run("--systemd-cgroup", "create", "--bundle", dir, id)
	if code != 1 || !strings.Contains(stderr, "systemd") {
		t.Errorf("--systemd-cgroup create without systemd: exit %d, %q %q; want exit 1 and the reason", code, stdout, stderr)
	}
	if _, stderr, code := o.run("state", id); code == 0 || !strings.Contains(stderr, "does not exist") {
		t.Errorf("after a refused create: state %d %q", code, stderr)
	}
}

// containerd is Debian's containerd on a private socket, state and
// config, stopped (and its mounts gone) in t.Cleanup.
type containerd struct {
	sock string
	ctr  func(args ...string) (string, int)
}

// startContainerd starts containerd without its CRI plugin, or, with cri,
// with the plugin configured by what cri returns for containerd's
// directory (TOML appended to the config).
func startContainerd(t *testing.T, cri func(dir string) string) *containerd {
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Fatal("containerd (Debian's containerd package, scripts/deps.sh) is needed")
	}
	dir := searchable(t, t.TempDir())
	sock := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if cri == nil {
		cfg = "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n" + cfg
	} else {
		cfg += cri(dir)
	}
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644)
	logf, _ := os.Create(filepath.Join(dir, "containerd.log"))
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(unix.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		// Shims outlive containerd by design, and end a moment after
		// their Shutdown; those of a test that failed half-way are this
		// test's to end.
		if ok, out := fixtures.Wait(func() (bool, string) {
			out, _ := exec.Command("pgrep", "-a", "-f", "containerd-shim.* -address "+sock).Output()
			return len(out) == 0, string(out)
		}); !ok {
			exec.Command("pkill", "-KILL", "-f", "containerd-shim.* -address "+sock).Run()
			t.Errorf("containerd shims left running: %s", out)
		}
		// Snapshot mounts under its root go with it.
		out, _ := exec.Command("findmnt", "-rn", "-o", "TARGET").Output()
		for _, m := range strings.Fields(string(out)) {
			if strings.HasPrefix(m, dir) {
				unix.Unmount(m, unix.MNT_DETACH)
				t.Errorf("containerd left a mount: %s", m)
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Logf("containerd log:\n%s", b)
		}
	})
	c := &containerd{sock: sock}
	c.ctr = func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock}, args...)...)
		b, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("ctr %v hung: %s", args, b)
		}
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("ctr %v: %v", args, err)
		}
		return string(b), code
	}
	fixtures.Eventually(t, "containerd up", func() (bool, string) {
		out, code := c.ctr("version")
		return code == 0, out
	})
	return c
}

// TestContainerdRunc: containerd's runc shim (io.containerd.runc.v2) runs
// slopbox-runc as its runc binary: a container from an image containerd
// pulled from a local registry, its exit code, a second process by task
// exec, pause and resume, kill and delete, with nothing left behind.
func TestContainerdRunc(t *testing.T) {
	o := newOCI(t)
	c := startContainerd(t, nil)
	reg := fixtures.Registry(t, nil)
	ref := reg + "/ctr/busybox:latest"
	fixtures.Push(t, ref, fixtures.Busybox(t, image.HostPlatform()))
	if out, code := c.ctr("images", "pull", "--plain-http", ref); code != 0 {
		t.Fatalf("ctr images pull: %s", out)
	}
	rt := []string{"--runtime", "io.containerd.runc.v2", "--runc-binary", o.bin, "--runc-root", o.root}
	run := append([]string{"run", "--rm"}, rt...)
	if out, code := c.ctr(append(run, ref, fmt.Sprintf("once-%d", os.Getpid()), "sh", "-c", "echo hello from $(id -u); exit 3")...); code != 3 || out != "hello from 0\n" {
		t.Errorf("ctr run --rm: exit %d: %q", code, out)
	}
	if out, code := c.ctr(append(append([]string{"run", "-d"}, rt...), ref, "long", "sleep", "1729")...); code != 0 {
		t.Fatalf("ctr run -d: %s", out)
	}
	if out, code := c.ctr("task", "exec", "--exec-id", "e1", "long", "sh", "-c", "echo second; exit 4"); code != 4 || out != "second\n" {
		t.Errorf("task exec: exit %d: %q", code, out)
	}
	if out, code := c.ctr("task", "pause", "long"); code != 0 {
		t.Errorf("task pause: %s", out)
	} else if ls, _ := c.ctr("task", "ls"); !strings.Contains(ls, "PAUSED") {
		t.Errorf("task ls after pause: %s", ls)
	}
	if out, code := c.ctr("task", "resume", "long"); code != 0 {
		t.Errorf("task resume: %s", out)
	}
	if out, code := c.ctr("task", "kill", "-s", "SIGKILL", "long"); code != 0 {
		t.Errorf("task kill: %s", out)
	}
	fixtures.Eventually(t, "the killed task STOPPED", func() (bool, string) {
		ls, _ := c.ctr("task", "ls")
		return strings.Contains(ls, "STOPPED"), ls
	})
	if out, code := c.ctr("task", "delete", "long"); code != 0 {
		t.Errorf("task delete: %s", out)
	}
	if out, code := c.ctr("container", "delete", "long"); code != 0 {
		t.Errorf("container delete: %s", out)
	}
	if ls, _ := c.ctr("task", "ls", "-q"); strings.TrimSpace(ls) != "" {
		t.Errorf("tasks left: %q", ls)
	}
	// newOCI's cleanup checks that slopbox-runc's state is empty. The
	// command's duration is this test's own: other tests' sleeps, which
	// may run meanwhile, are not its to count.
	if out, _ := exec.Command("pgrep", "-xf", "sleep 1729").Output(); len(out) > 0 {
		t.Errorf("processes left: %s", out)
	}
}
