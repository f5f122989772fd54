package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/backendkit"
	"github.com/slopbox/slopbox/test/fixtures"
)

func spawn(t *testing.T, spec backend.SpawnSpec) *Sandbox {
	t.Helper()
	if spec.Workspace == "" {
		spec.Workspace = t.TempDir()
	}
	sb, err := New().Spawn(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Cleanup() })
	return sb.(*Sandbox)
}

func run(t *testing.T, sb *Sandbox, req backend.ExecRequest) *backend.Result {
	t.Helper()
	res, err := sb.Exec(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// sleeperEnv marks the environment of a check's own "sleep n", so that
// killSleepers ends only those. A match on the command line alone also
// killed whatever else ran "sleep n" on the host at the time: the suites
// run in parallel, and a sandbox's processes are host processes too
// (test/integration's TestConcurrentProcessesOnOneRoot runs "sleep 1000"
// in 50 sandboxes at once, and n is drawn from 1000-9999).
func sleeperEnv(n int) map[string]string {
	return map[string]string{"SLOPBOX_LOCAL_TEST_SLEEPER": fmt.Sprintf("%d-%d", os.Getpid(), n)}
}

// killSleepers kills host processes running "sleep n" with sleeperEnv(n)
// in their environment (the checks' own).
func killSleepers(n int) (killed int) {
	for _, pid := range sleepers(n) {
		syscall.Kill(pid, syscall.SIGKILL)
		killed++
	}
	return killed
}

// sleepers returns the pids of the living `sleep n` processes marked with
// sleeperEnv(n).
func sleepers(n int) (pids []int) {
	needle := []byte("sleep\x00" + strconv.Itoa(n) + "\x00")
	var mark []byte
	for k, v := range sleeperEnv(n) {
		mark = []byte("\x00" + k + "=" + v + "\x00")
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err != nil || !bytes.Equal(b, needle) {
			continue
		}
		if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(append([]byte{0}, env...), mark) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestRegistered(t *testing.T) {
	b, err := backend.Open("local")
	if err != nil || b.Name() != "local" {
		t.Fatalf("Open(local) = %v, %v", b, err)
	}
	_, err = backend.Open("nope")
	if err == nil || !strings.Contains(err.Error(), `unknown backend "nope" (known: `) || !strings.Contains(err.Error(), "local") {
		t.Fatalf("unknown backend: %v", err)
	}
}

func TestSpawnWorkspaceErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := New().Spawn(context.Background(), backend.SpawnSpec{Workspace: missing})
	if err == nil || !strings.Contains(err.Error(), missing+" does not exist") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing workspace: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := New().Spawn(context.Background(), backend.SpawnSpec{Workspace: file}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file as workspace: %v", err)
	}
	if _, err := New().Spawn(context.Background(), backend.SpawnSpec{}); err == nil || !strings.Contains(err.Error(), "workspace is required") {
		t.Errorf("no workspace: %v", err)
	}
}

// The entry script lives in the private directory: a user's own
// HANDLE_ENTRY.sh in the workspace is neither run nor overwritten.
func TestEntryScriptStaysOutOfWorkspace(t *testing.T) {
	ws := t.TempDir()
	mine := filepath.Join(ws, backend.EntryScriptName)
	os.WriteFile(mine, []byte("my own file\n"), 0o644)
	sb := spawn(t, backend.SpawnSpec{Workspace: ws, Setup: backend.Setup{Commands: []string{"echo setup"}}})
	res := run(t, sb, backend.ExecRequest{Shell: "ls -a"})
	if res.SetupStdout != "setup\n\n\n" {
		t.Errorf("setup did not run: %+v", res)
	}
	if b, _ := os.ReadFile(mine); string(b) != "my own file\n" {
		t.Errorf("workspace file overwritten: %q", b)
	}
	entries, _ := os.ReadDir(ws)
	if len(entries) != 1 {
		t.Errorf("workspace gained files: %v", entries)
	}
	script, err := os.ReadFile(filepath.Join(sb.PrivateDir(), backend.EntryScriptName))
	if err != nil || !bytes.Equal(script, backend.EntryScript([]string{"echo setup"}, "ls -a")) {
		t.Errorf("entry script %q (%v)", script, err)
	}
}

func TestCleanupRemovesPrivateDirOnly(t *testing.T) {
	ws := t.TempDir()
	sb := spawn(t, backend.SpawnSpec{Workspace: ws})
	run(t, sb, backend.ExecRequest{Shell: "echo x > f"})
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sb.PrivateDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("private dir left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "f")); err != nil {
		t.Errorf("workspace damaged: %v", err)
	}

	kept := spawn(t, backend.SpawnSpec{Workspace: ws, Keep: true})
	run(t, kept, backend.ExecRequest{Shell: "true"})
	kept.Cleanup()
	if _, err := os.Stat(kept.PrivateDir()); err != nil {
		t.Errorf("Keep: private dir removed: %v", err)
	}
	os.RemoveAll(kept.PrivateDir())
}

// A background child that keeps stdout open must not hold Exec beyond a
// short grace; Cleanup then kills it with its process group.
func TestBackgroundChildDoesNotHoldExec(t *testing.T) {
	n := 1000 + rand.IntN(9000)
	t.Cleanup(func() { killSleepers(n) })
	sb := spawn(t, backend.SpawnSpec{DisableSetup: true, Env: sleeperEnv(n)})
	start := time.Now()
	res := run(t, sb, backend.ExecRequest{Shell: fmt.Sprintf("sleep %d & echo started", n)})
	// Held, it would take the child's n seconds (1000 or more); the bound
	// leaves the command's start time to load.
	if d := time.Since(start); d > backendkit.DrainMax+10*time.Second || res.Stdout != "started\n" || res.ExitCode != 0 {
		t.Fatalf("took %v: %+v", d, res)
	}
	if running, _ := sb.Poll(); running {
		t.Error("poll says running after the main process exited")
	}
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	// The kill is sent; the sleep dies when the kernel gets to it. One
	// that was missed sleeps for n >= 1000 s.
	fixtures.Eventually(t, "the background sleep killed by cleanup", func() (bool, string) {
		left := sleepers(n)
		return len(left) == 0, fmt.Sprintf("cleanup left background sleep(s) %v", left)
	})
}

// A process that leaves the group (setsid) escapes the kill, but the wait
// for its pipes is still bounded.
func TestEscapedProcessWaitIsBounded(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid(1) (util-linux)")
	}
	n := 1000 + rand.IntN(9000)
	t.Cleanup(func() { killSleepers(n) })
	sb := spawn(t, backend.SpawnSpec{DisableSetup: true, Env: sleeperEnv(n)})
	start := time.Now()
	res := run(t, sb, backend.ExecRequest{Shell: fmt.Sprintf("setsid sleep %d & sleep %d", n, n), Timeout: 500 * time.Millisecond})
	if d := time.Since(start); !res.TimedOut || d > 500*time.Millisecond+backendkit.DrainMax+10*time.Second {
		t.Fatalf("took %v: %+v", d, res)
	}
}

func TestSwitchUser(t *testing.T) {
	sb := spawn(t, backend.SpawnSpec{DisableSetup: true})
	self := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	if res := run(t, sb, backend.ExecRequest{Shell: "id -u", User: self}); strings.TrimSpace(res.Stdout) != strconv.Itoa(os.Getuid()) {
		t.Errorf("as ourselves: %+v", res)
	}
	_, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "id -u", User: "65534:65534"})
	if os.Geteuid() == 0 {
		if err != nil {
			t.Errorf("root switching to 65534: %v", err)
		}
		return
	}
	if !errors.Is(err, ErrSwitchUser) || !strings.Contains(err.Error(), `"65534:65534"`) {
		t.Errorf("non-root switching: %v", err)
	}
	if _, err := New().Spawn(context.Background(), backend.SpawnSpec{Workspace: t.TempDir(), User: "65534"}); !errors.Is(err, ErrSwitchUser) {
		t.Errorf("non-root spawn as 65534: %v", err)
	}
}

func TestLimits(t *testing.T) {
	_, err := New().Spawn(context.Background(), backend.SpawnSpec{Workspace: t.TempDir(), Limits: backend.Limits{MemoryBytes: 1 << 30, Strict: true}})
	if err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("strict limits: %v", err)
	}
	sb := spawn(t, backend.SpawnSpec{Limits: backend.Limits{MemoryBytes: 1 << 30, Pids: 10}})
	if res := run(t, sb, backend.ExecRequest{Shell: "true"}); strings.Join(res.Unenforced, ",") != "memory,pids" {
		t.Errorf("unenforced: %q", res.Unenforced)
	}
}

func TestContextCancel(t *testing.T) {
	sb := spawn(t, backend.SpawnSpec{DisableSetup: true})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "sleep 30"})
	if !errors.Is(err, context.DeadlineExceeded) || res == nil || res.ExitCode != 137 || time.Since(start) > 3*time.Second {
		t.Fatalf("exec: %+v %v after %v", res, err, time.Since(start))
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	ch, err := sb.Stream(ctx2, backend.ExecRequest{Shell: "echo hi; sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	cancel2()
	timeout := time.After(fixtures.Patience())
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-timeout:
			t.Fatal("stream not closed after cancel")
		}
	}
	fixtures.Eventually(t, "the command ended after cancel", func() (bool, string) {
		running, _ := sb.Poll()
		return !running, "still running after cancel"
	})
}

func TestRequestErrors(t *testing.T) {
	sb := spawn(t, backend.SpawnSpec{})
	if _, err := sb.Exec(context.Background(), backend.ExecRequest{}); err == nil {
		t.Error("empty command accepted")
	}
	if _, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "pwd", Cwd: "missing"}); err == nil || !strings.Contains(err.Error(), "cwd") {
		t.Errorf("missing cwd: %v", err)
	}
	res := run(t, sb, backend.ExecRequest{Argv: []string{"slopbox-not-a-command"}, NoSetup: true})
	if res.ExitCode != 127 || !strings.Contains(res.Stderr, "slopbox-not-a-command: command not found") {
		t.Errorf("missing argv command: %+v", res)
	}
}

// Argv is looked up in the command's PATH, not slopbox's.
func TestArgvUsesCommandPath(t *testing.T) {
	ws := t.TempDir()
	os.Mkdir(filepath.Join(ws, "bin"), 0o755)
	os.WriteFile(filepath.Join(ws, "bin", "mytool"), []byte("#!/bin/sh\necho mytool \"$@\"\n"), 0o755)
	sb := spawn(t, backend.SpawnSpec{Workspace: ws, DisableSetup: true})
	res := run(t, sb, backend.ExecRequest{Argv: []string{"mytool", "x"}, Env: map[string]string{"PATH": filepath.Join(ws, "bin") + ":/bin:/usr/bin"}})
	if res.Stdout != "mytool x\n" {
		t.Errorf("%+v", res)
	}
	if res := run(t, sb, backend.ExecRequest{Argv: []string{"mytool"}}); res.ExitCode != 127 {
		t.Errorf("found without PATH: %+v", res)
	}
}

func TestBothPipesFull(t *testing.T) {
	sb := spawn(t, backend.SpawnSpec{DisableSetup: true})
	res := run(t, sb, backend.ExecRequest{Shell: "i=0; while [ $i -lt 200 ]; do head -c 4096 /dev/zero; head -c 4096 /dev/zero >&2; i=$((i+1)); done", Timeout: 30 * time.Second})
	if res.TimedOut || res.StdoutBytes != 200*4096 || res.StderrBytes != 200*4096 {
		t.Errorf("%d %d %v", res.StdoutBytes, res.StderrBytes, res.TimedOut)
	}
}

// BenchmarkExecTrue measures one Exec of /bin/true through the API (setup
// disabled, so it compares with BenchmarkForkExecFloor).
func BenchmarkExecTrue(b *testing.B) {
	sbx, err := New().Spawn(context.Background(), backend.SpawnSpec{Workspace: b.TempDir(), DisableSetup: true})
	if err != nil {
		b.Fatal(err)
	}
	defer sbx.Cleanup()
	req := backend.ExecRequest{Argv: []string{"/bin/true"}}
	for b.Loop() {
		res, err := sbx.Exec(context.Background(), req)
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkExecTrueEntryScript is the same through the entry script (one
// extra /bin/sh).
func BenchmarkExecTrueEntryScript(b *testing.B) {
	sbx, err := New().Spawn(context.Background(), backend.SpawnSpec{Workspace: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer sbx.Cleanup()
	req := backend.ExecRequest{Argv: []string{"/bin/true"}}
	for b.Loop() {
		if res, err := sbx.Exec(context.Background(), req); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkForkExecFloor is the floor: a bare os/exec run of /bin/true.
func BenchmarkForkExecFloor(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
