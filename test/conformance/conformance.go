// Package conformance is the behavioural test suite every slopbox backend
// must pass. A backend's test calls Run with a Factory; the suite uses only
// the backend interface and the POSIX tools busybox also provides (sh and its
// builtins echo, printf, kill, pwd, test; cat, head, id, sleep, ls, wc,
// mkdir, rm), so the same checks hold in a minimal image and on the host.
//
// A backend may skip only isolation checks it cannot provide, each with its
// reason (Factory.Skips); every other check runs everywhere.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
)

// Factory describes the backend under test.
type Factory struct {
	Name string
	// New returns a backend and a SpawnSpec template (Image etc. filled in)
	// over a fresh, empty host workspace directory in spec.Workspace.
	New func(t *testing.T) (backend.Backend, backend.SpawnSpec)
	// WorkspacePath maps the host workspace to the path commands see (local:
	// the same directory; sandbox: spec.Workdir). Nil means Sandbox.Workdir().
	// This is the one explicit difference between backends.
	WorkspacePath func(spec backend.SpawnSpec) string
	// Skips names isolation checks this backend cannot provide, each with
	// its reason. Run fails on a name that is not an isolation check.
	Skips map[string]string
	// UsersAvailable is a second user the backend can switch commands to
	// ("65534:65534"); empty when it cannot switch, and then the user checks
	// assert a clear error instead.
	UsersAvailable string
}

// IsolationChecks are the only checks a Factory may skip.
var IsolationChecks = []string{"user-switch", "permission-denied"}

// Run runs every check against f as subtests of t.
func Run(t *testing.T, f Factory) {
	for name := range f.Skips {
		if !slices.Contains(IsolationChecks, name) {
			t.Fatalf("factory %s skips %q, which is not an isolation check (skippable: %v)", f.Name, name, IsolationChecks)
		}
		if f.Skips[name] == "" {
			t.Fatalf("factory %s skips %q without a reason", f.Name, name)
		}
	}
	s := &suite{f: f}
	checks := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"exit-codes", s.exitCodes},
		{"elapsed", s.elapsed},
		{"stdout-stderr", s.stdoutStderr},
		{"interleaving", s.interleaving},
		{"stdin-bytes", s.stdinBytes},
		{"stdin-chunks", s.stdinChunks},
		{"stdin-in-stream", s.stdinInStream},
		{"env-precedence", s.envPrecedence},
		{"cwd", s.cwd},
		{"user-switch", s.userSwitch},
		{"unknown-user", s.unknownUser},
		{"timeout-kills-background", s.timeoutKillsBackground},
		{"timeout-silent", s.timeoutSilent},
		{"timeout-stream", s.timeoutStream},
		{"streaming-incremental", s.streamingIncremental},
		{"two-streams", s.twoStreams},
		{"state-persists", s.statePersists},
		{"many-lines", s.manyLines},
		{"large-output", s.largeOutput},
		{"output-cap", s.outputCap},
		{"invalid-utf8", s.invalidUTF8},
		{"setup-contract", s.setupContract},
		{"setup-eval-only", s.setupEvalOnly},
		{"setup-disabled", s.setupDisabled},
		{"setup-streaming", s.setupStreaming},
		{"poll", s.poll},
		{"kill-running", s.killRunning},
		{"busy", s.busy},
		{"cleanup-twice", s.cleanupTwice},
		{"use-after-cleanup", s.useAfterCleanup},
		{"workspace-files", s.workspaceFiles},
		{"permission-denied", s.permissionDenied},
		{"is-a-directory", s.isADirectory},
		{"close", s.close},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := f.Skips[c.name]; ok {
				t.Skipf("%s cannot provide this: %s", f.Name, reason)
			}
			c.fn(t)
		})
	}
}

type suite struct{ f Factory }

// modes runs fn with setup disabled (the command runs directly) and enabled
// (through the entry script with no setup commands); prefix is what the
// entry script puts before the command's stdout.
type mode struct {
	name   string
	setup  bool
	prefix string
}

var modes = []mode{{"direct", false, ""}, {"entry-script", true, "\n\n"}}

func (s *suite) forModes(t *testing.T, fn func(t *testing.T, m mode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { fn(t, m) })
	}
}

// spawn creates a sandbox from the factory's template with setup disabled
// unless edit turns it on; it is cleaned up with the test.
func (s *suite) spawn(t *testing.T, edit func(*backend.SpawnSpec)) (backend.Sandbox, backend.SpawnSpec) {
	t.Helper()
	b, spec := s.f.New(t)
	spec.DisableSetup = true
	if edit != nil {
		edit(&spec)
	}
	sb, err := b.Spawn(context.Background(), spec)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return sb, spec
}

func (s *suite) spawnMode(t *testing.T, m mode, edit func(*backend.SpawnSpec)) (backend.Sandbox, backend.SpawnSpec) {
	return s.spawn(t, func(spec *backend.SpawnSpec) {
		spec.DisableSetup = !m.setup
		if edit != nil {
			edit(spec)
		}
	})
}

func (s *suite) workdir(sb backend.Sandbox, spec backend.SpawnSpec) string {
	if s.f.WorkspacePath != nil {
		return s.f.WorkspacePath(spec)
	}
	return sb.Workdir()
}

func execOK(t *testing.T, sb backend.Sandbox, req backend.ExecRequest) *backend.Result {
	t.Helper()
	res, err := sb.Exec(context.Background(), req)
	if err != nil {
		t.Fatalf("exec %q %q: %v", req.Argv, req.Shell, err)
	}
	if res == nil {
		t.Fatalf("exec %q %q: nil result", req.Argv, req.Shell)
	}
	return res
}

func sh(t *testing.T, sb backend.Sandbox, script string) *backend.Result {
	t.Helper()
	return execOK(t, sb, backend.ExecRequest{Shell: script})
}

// collect drains a stream and returns its chunk events and the result.
type timedEvent struct {
	backend.Event
	at time.Time
}

func collect(t *testing.T, ch <-chan backend.Event, limit time.Duration) ([]timedEvent, *backend.Result) {
	t.Helper()
	return collectWith(t, ch, limit, nil)
}

// collectWith is collect that also hands each output event to onOutput as
// it arrives (nil: none).
func collectWith(t *testing.T, ch <-chan backend.Event, limit time.Duration, onOutput func(backend.Event)) ([]timedEvent, *backend.Result) {
	t.Helper()
	var evs []timedEvent
	var res *backend.Result
	deadline := time.After(limit)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				if res == nil {
					t.Fatal("stream closed without a finished event")
				}
				return evs, res
			}
			if res != nil {
				t.Fatalf("event %+v after the finished event", ev)
			}
			switch ev.Kind {
			case backend.EventFinished:
				if ev.Result == nil {
					t.Fatal("finished event without a result")
				}
				res = ev.Result
			case backend.EventStdout, backend.EventStderr:
				if ev.Data == "" {
					t.Errorf("empty %s event", ev.Kind)
				}
				evs = append(evs, timedEvent{ev, time.Now()})
				if onOutput != nil {
					onOutput(ev)
				}
			default:
				t.Fatalf("unknown event kind %q", ev.Kind)
			}
		case <-deadline:
			t.Fatalf("stream did not finish within %v", limit)
		}
	}
}

func joined(evs []timedEvent, kind backend.EventKind) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Kind == kind {
			b.WriteString(ev.Data)
		}
	}
	return b.String()
}

func streamOK(t *testing.T, sb backend.Sandbox, req backend.ExecRequest, limit time.Duration) ([]timedEvent, *backend.Result) {
	t.Helper()
	ch, err := sb.Stream(context.Background(), req)
	if err != nil {
		t.Fatalf("stream %q: %v", req.Shell, err)
	}
	return collect(t, ch, limit)
}

func writeHost(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) exitCodes(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, spec := s.spawnMode(t, m, nil)
		writeHost(t, filepath.Join(spec.Workspace, "noexec.sh"), []byte("echo should-not-run\n"), 0o644)
		cases := []struct {
			name string
			req  backend.ExecRequest
			want int
		}{
			{"zero", backend.ExecRequest{Shell: "true"}, 0},
			{"42", backend.ExecRequest{Shell: "exit 42"}, 42},
			{"42-argv", backend.ExecRequest{Argv: []string{"sh", "-c", "exit 42"}}, 42},
			{"missing-command", backend.ExecRequest{Shell: "slopbox-no-such-command-x"}, 127},
			{"missing-command-argv", backend.ExecRequest{Argv: []string{"slopbox-no-such-command-x"}}, 127},
			{"not-executable", backend.ExecRequest{Shell: "./noexec.sh"}, 126},
			{"not-executable-argv", backend.ExecRequest{Argv: []string{"./noexec.sh"}}, 126},
			{"self-kill-9", backend.ExecRequest{Shell: "kill -9 $$"}, 128 + 9},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				res := execOK(t, sb, c.req)
				if res.ExitCode != c.want {
					t.Errorf("exit code %d, want %d (stdout %q, stderr %q)", res.ExitCode, c.want, res.Stdout, res.Stderr)
				}
				if res.TimedOut {
					t.Error("timed_out set")
				}
				if strings.Contains(res.Stdout, "should-not-run") {
					t.Error("the non-executable file ran")
				}
				if c.want >= 126 && c.want <= 127 && res.Stderr == "" {
					t.Error("no reason on stderr")
				}
				if running, code := sb.Poll(); running || code == nil || *code != c.want {
					t.Errorf("poll after exit %d: running=%v code=%v", c.want, running, code)
				}
			})
		}
	})
}

func (s *suite) elapsed(t *testing.T) {
	sb, _ := s.spawn(t, nil)
	res := sh(t, sb, "sleep 0.2")
	if res.Elapsed < 200*time.Millisecond || res.ElapsedSecs < 0.2 || res.ElapsedSecs > 5 {
		t.Errorf("elapsed %v / %v s for sleep 0.2", res.Elapsed, res.ElapsedSecs)
	}
}

func (s *suite) stdoutStderr(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, _ := s.spawnMode(t, m, nil)
		res := sh(t, sb, "echo out1; echo err1 >&2; echo out2; echo err2 >&2")
		if res.Stdout != m.prefix+"out1\nout2\n" || res.Stderr != m.prefix+"err1\nerr2\n" {
			t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		res = execOK(t, sb, backend.ExecRequest{Argv: []string{"echo", "a  b", "$HOME", "it's"}})
		if res.Stdout != m.prefix+"a  b $HOME it's\n" {
			t.Errorf("argv quoting: stdout %q", res.Stdout)
		}
	})
}

// interleaving: stdout and stderr events come in the order written. Each
// line is written only once the test has received the one before (a
// handshake through waitFile), so the order checked is the streams', not
// the scheduler's.
func (s *suite) interleaving(t *testing.T) {
	sb, spec := s.spawn(t, nil)
	ch, err := sb.Stream(context.Background(), backend.ExecRequest{
		Shell: waitFile + "echo o1; w go1; echo e1 >&2; w go2; echo o2; w go3; echo e2 >&2",
	})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	evs, res := collectWith(t, ch, 2*time.Minute, handshakes(t, spec.Workspace, "o1\n", "e1\n", "o2\n"))
	var order []string
	for _, ev := range evs {
		order = append(order, string(ev.Kind)+":"+strings.TrimSpace(ev.Data))
	}
	want := []string{"stdout:o1", "stderr:e1", "stdout:o2", "stderr:e2"}
	if !slices.Equal(order, want) {
		t.Errorf("event order %q, want %q", order, want)
	}
	if res.Stdout != "o1\no2\n" || res.Stderr != "e1\ne2\n" || res.ExitCode != 0 {
		t.Errorf("result %+v", res)
	}
}

func (s *suite) stdinBytes(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, _ := s.spawnMode(t, m, nil)
		big := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB, more than a pipe buffer
		res := execOK(t, sb, backend.ExecRequest{Shell: "cat", Stdin: [][]byte{big}})
		if res.Stdout != m.prefix+string(big) {
			t.Errorf("cat of 256 KiB stdin gave %d bytes", len(res.Stdout))
		}
		res = execOK(t, sb, backend.ExecRequest{Shell: "wc -c", Stdin: [][]byte{[]byte("héllo\n")}})
		if strings.TrimSpace(res.Stdout) != "7" {
			t.Errorf("wc -c: %q", res.Stdout)
		}
		// Stdin the command never reads must not block it.
		res = execOK(t, sb, backend.ExecRequest{Shell: "echo ignored", Stdin: [][]byte{big}, Timeout: hangBound})
		if res.TimedOut || res.Stdout != m.prefix+"ignored\n" {
			t.Errorf("unread stdin: %+v", res)
		}
	})
}

func (s *suite) stdinChunks(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, _ := s.spawnMode(t, m, nil)
		res := execOK(t, sb, backend.ExecRequest{Shell: "cat", Stdin: [][]byte{[]byte("a"), []byte("b"), []byte("c")}})
		if res.Stdout != m.prefix+"abc" {
			t.Errorf("chunks: %q", res.Stdout)
		}
		res = execOK(t, sb, backend.ExecRequest{Shell: "cat", Stdin: [][]byte{[]byte("line1\n"), []byte("line2\n"), []byte("line3\n")}})
		if res.Stdout != m.prefix+"line1\nline2\nline3\n" {
			t.Errorf("lines: %q", res.Stdout)
		}
		res = execOK(t, sb, backend.ExecRequest{Shell: "cat", Stdin: [][]byte{}, Timeout: hangBound})
		if res.TimedOut || res.Stdout != m.prefix {
			t.Errorf("empty stdin list must give EOF at once: %+v", res)
		}
	})
}

func (s *suite) stdinInStream(t *testing.T) {
	sb, _ := s.spawn(t, nil)
	_, err := sb.Stream(context.Background(), backend.ExecRequest{Shell: "cat", Stdin: [][]byte{[]byte("x")}})
	if !errors.Is(err, backend.ErrStdinInStream) {
		t.Fatalf("stream with stdin: %v, want ErrStdinInStream", err)
	}
	if running, _ := sb.Poll(); running {
		t.Fatal("a rejected stream left a command running")
	}
}

func (s *suite) envPrecedence(t *testing.T) {
	sb, _ := s.spawn(t, func(spec *backend.SpawnSpec) {
		spec.SpecEnv = map[string]string{"A": "spec", "B": "spec", "C": "spec"}
		spec.Env = map[string]string{"B": "spawn", "C": "spawn"}
	})
	const show = `echo "$A $B $C"`
	res := execOK(t, sb, backend.ExecRequest{Shell: show, Env: map[string]string{"C": "exec"}})
	if res.Stdout != "spec spawn exec\n" {
		t.Errorf("exec env: %q", res.Stdout)
	}
	res = sh(t, sb, show)
	if res.Stdout != "spec spawn spawn\n" {
		t.Errorf("exec env must not persist: %q", res.Stdout)
	}
	evs, res := streamOK(t, sb, backend.ExecRequest{Shell: show, Env: map[string]string{"C": "exec"}}, hangBound)
	if got := joined(evs, backend.EventStdout); got != "spec spawn exec\n" || res.Stdout != got {
		t.Errorf("stream env: events %q result %q", got, res.Stdout)
	}
	res = sh(t, sb, `echo "$PATH"`)
	if strings.TrimSpace(res.Stdout) == "" {
		t.Error("PATH is empty")
	}
}

func (s *suite) cwd(t *testing.T) {
	sb, spec := s.spawn(t, nil)
	wd := s.workdir(sb, spec)
	if err := os.Mkdir(filepath.Join(spec.Workspace, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ cwd, want string }{
		{"", wd},
		{"sub", path.Join(wd, "sub")},
		{path.Join(wd, "sub"), path.Join(wd, "sub")},
	}
	for _, c := range cases {
		res := execOK(t, sb, backend.ExecRequest{Shell: "pwd", Cwd: c.cwd})
		if strings.TrimSpace(res.Stdout) != c.want {
			t.Errorf("cwd %q: pwd %q, want %q", c.cwd, res.Stdout, c.want)
		}
	}
	evs, _ := streamOK(t, sb, backend.ExecRequest{Shell: "pwd", Cwd: "sub"}, hangBound)
	if got := strings.TrimSpace(joined(evs, backend.EventStdout)); got != path.Join(wd, "sub") {
		t.Errorf("stream cwd: %q", got)
	}
}

// openWorkspace replaces the template's workspace with one every user can
// enter, for the checks that run commands as a second user.
func openWorkspace(t *testing.T, spec *backend.SpawnSpec) {
	t.Helper()
	dir, err := os.MkdirTemp("", "slopbox-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	spec.Workspace = dir
}

func (s *suite) userSwitch(t *testing.T) {
	other := s.f.UsersAvailable
	if other == "" {
		// The backend cannot switch: asking must fail clearly, not run as us.
		sb, _ := s.spawn(t, nil)
		res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "id -u", User: "65534:65534"})
		if err == nil {
			t.Fatalf("switching to 65534:65534 gave no error (result %+v)", res)
		}
		if !strings.Contains(err.Error(), "65534") {
			t.Errorf("error does not name the user: %v", err)
		}
		return
	}
	uid, gid, _ := strings.Cut(other, ":")
	sb, _ := s.spawn(t, func(spec *backend.SpawnSpec) { openWorkspace(t, spec) })
	res := execOK(t, sb, backend.ExecRequest{Shell: "id -u; id -g", User: other})
	if want := uid + "\n" + gid + "\n"; gid != "" && res.Stdout != want || strings.Split(res.Stdout, "\n")[0] != uid {
		t.Errorf("as %s: %q (stderr %q)", other, res.Stdout, res.Stderr)
	}
	// Through the entry script, and as the spawn-time user.
	sb2, _ := s.spawn(t, func(spec *backend.SpawnSpec) {
		openWorkspace(t, spec)
		spec.User = other
		spec.DisableSetup = false
	})
	res = execOK(t, sb2, backend.ExecRequest{Shell: "id -u"})
	if res.Stdout != "\n\n"+uid+"\n" {
		t.Errorf("spawn user %s: %q (stderr %q)", other, res.Stdout, res.Stderr)
	}
}

func (s *suite) unknownUser(t *testing.T) {
	const name = "slopbox-no-such-user"
	want := "unable to find user " + name + ": no matching entries in passwd file"
	sb, _ := s.spawn(t, nil)
	_, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "id -u", User: name})
	if !errors.Is(err, backend.ErrUnknownUser) || !strings.Contains(err.Error(), want) {
		t.Errorf("exec as %s: %v; want %q wrapping ErrUnknownUser", name, err, want)
	}
	if res := sh(t, sb, "echo still-usable"); res.Stdout != "still-usable\n" {
		t.Errorf("sandbox unusable after the error: %+v", res)
	}
	// As the spawn user it may fail at Spawn or at the first command.
	b, spec := s.f.New(t)
	spec.User = name
	sb2, err := b.Spawn(context.Background(), spec)
	if err == nil {
		t.Cleanup(func() { sb2.Cleanup() })
		_, err = sb2.Exec(context.Background(), backend.ExecRequest{Shell: "id -u"})
	}
	if !errors.Is(err, backend.ErrUnknownUser) || !strings.Contains(err.Error(), want) {
		t.Errorf("spawn as %s: %v; want %q", name, err, want)
	}
}

// sleepMarker returns a sleep duration unique to this run, so the check
// recognises its own processes among everything else on the machine.
func sleepMarker() int { return 1000 + rand.IntN(9000) }

// sleepersLeft lists processes running "sleep <n>", seen from inside the
// sandbox (a /proc scan through Exec) and, when the command runs on this
// machine, from the host's /proc.
func sleepersLeft(t *testing.T, sb backend.Sandbox, n int) []string {
	t.Helper()
	needle := "sleep\x00" + strconv.Itoa(n) + "\x00"
	var found []string
	res := execOK(t, sb, backend.ExecRequest{Shell: "cat /proc/[0-9]*/cmdline 2>/dev/null; true", NoSetup: true})
	if c := strings.Count(res.Stdout, needle); c > 0 {
		found = append(found, fmt.Sprintf("%d inside the sandbox", c))
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Equal(b, []byte(needle)) {
			found = append(found, "host pid "+e.Name())
		}
	}
	return found
}

func waitNoSleepers(t *testing.T, sb backend.Sandbox, n int) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(hangBound); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if left = sleepersLeft(t, sb, n); len(left) == 0 {
			return
		}
	}
	t.Errorf("sleep %d survived: %v", n, left)
	// Do not leak what a broken backend left behind on this host.
	for _, p := range left {
		if pid, err := strconv.Atoi(strings.TrimPrefix(p, "host pid ")); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (s *suite) timeoutKillsBackground(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, _ := s.spawnMode(t, m, nil)
		n := sleepMarker()
		start := time.Now()
		res := execOK(t, sb, backend.ExecRequest{
			Shell:   fmt.Sprintf("echo before; sleep %d & sleep %d", n, n),
			Timeout: time.Second,
		})
		wall := time.Since(start)
		if !res.TimedOut || wall > hangBound || res.ElapsedSecs > hangBound.Seconds() {
			t.Errorf("timed_out=%v after %v (elapsed %.2f)", res.TimedOut, wall, res.ElapsedSecs)
		}
		if res.ExitCode == 0 {
			t.Errorf("exit code 0 after a timeout")
		}
		if res.Stdout != m.prefix+"before\n" {
			t.Errorf("output captured before the timeout lost: %q", res.Stdout)
		}
		waitNoSleepers(t, sb, n)
		if res := sh(t, sb, "echo usable"); res.Stdout != m.prefix+"usable\n" {
			t.Errorf("sandbox unusable after a timeout: %+v", res)
		}
	})
}

func (s *suite) timeoutSilent(t *testing.T) {
	sb, _ := s.spawn(t, nil)
	start := time.Now()
	res := execOK(t, sb, backend.ExecRequest{Shell: "sleep 30", Timeout: time.Second})
	if wall := time.Since(start); !res.TimedOut || wall > hangBound || wall < 900*time.Millisecond {
		t.Errorf("timed_out=%v after %v", res.TimedOut, wall)
	}
	res = execOK(t, sb, backend.ExecRequest{Shell: "echo quick", Timeout: hangBound})
	if res.TimedOut || res.Stdout != "quick\n" {
		t.Errorf("a command within its timeout: %+v", res)
	}
}

func (s *suite) timeoutStream(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, _ := s.spawnMode(t, m, nil)
		n := sleepMarker()
		start := time.Now()
		evs, res := streamOK(t, sb, backend.ExecRequest{
			Shell:   fmt.Sprintf("echo hi; sleep %d & sleep %d", n, n),
			Timeout: time.Second,
		}, hangBound)
		if wall := time.Since(start); !res.TimedOut || wall > hangBound {
			t.Errorf("timed_out=%v after %v", res.TimedOut, wall)
		}
		if got := joined(evs, backend.EventStdout); got != m.prefix+"hi\n" || res.Stdout != got {
			t.Errorf("events %q result %q", got, res.Stdout)
		}
		waitNoSleepers(t, sb, n)
	})
}

// waitFile is a shell function for handshakes: `w NAME` returns once the
// workspace file NAME exists (the test creates it when it has seen what
// came before), or says "NAME never came" after 600 sleeps of 0.05 s.
const waitFile = `w() { i=0; while [ ! -e "$1" ]; do if [ $i -ge 600 ]; then echo "$1 never came"; return; fi; sleep 0.05; i=$((i+1)); done; }
`

// handshakes is collectWith's onOutput for a command that, after the
// output marks[i], waits for workspace file go<i+1> (`w go1`, waitFile):
// it creates that file once marks[i] has come, in the output so far
// (however it is cut into events), and marks[i-1] before it.
func handshakes(t *testing.T, workspace string, marks ...string) func(backend.Event) {
	var got strings.Builder
	next := 0
	return func(ev backend.Event) {
		got.WriteString(ev.Data)
		for ; next < len(marks) && strings.Contains(got.String(), marks[next]); next++ {
			writeHost(t, filepath.Join(workspace, fmt.Sprintf("go%d", next+1)), nil, 0o644)
		}
	}
}

// hangBound is how long an operation that should end at once (a timeout's
// kill, Kill, Cleanup) may take before the test calls it a hang: far above
// what load adds, far below the sleeps it ends (1000 s or more).
const hangBound = 30 * time.Second

// streamingIncremental: a stream delivers output while the command runs,
// shown by a handshake that no timing can fake (or break under load): the
// command prints tick1 and waits for a file that the test creates only
// once it has received tick1 (and so on for tick2). Were output held back
// until the command ended, each wait would run out and say so.
func (s *suite) streamingIncremental(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, spec := s.spawnMode(t, m, nil)
		ch, err := sb.Stream(context.Background(), backend.ExecRequest{
			Shell: waitFile + "echo tick1; w go1; echo tick2; w go2; echo tick3",
		})
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		evs, res := collectWith(t, ch, 2*time.Minute, handshakes(t, spec.Workspace, "tick1\n", "tick2\n"))
		var ticks []timedEvent
		for _, ev := range evs {
			if ev.Kind == backend.EventStdout && strings.Contains(ev.Data, "tick") {
				ticks = append(ticks, ev)
			}
		}
		if got := joined(evs, backend.EventStdout); got != res.Stdout || res.Stdout != m.prefix+"tick1\ntick2\ntick3\n" {
			t.Errorf("events %q, result %q (a wait that ran out: the output before it was not streamed)", got, res.Stdout)
		}
		if len(ticks) != 3 {
			t.Errorf("want 3 stdout events with a tick, got %d: %+v", len(ticks), evs)
		}
		for i, ev := range ticks {
			if strings.TrimSpace(ev.Data) != fmt.Sprintf("tick%d", i+1) {
				t.Errorf("event %d = %q", i, ev.Data)
			}
		}
		if res.ExitCode != 0 {
			t.Errorf("exit %d", res.ExitCode)
		}
	})
}

func (s *suite) twoStreams(t *testing.T) {
	sb, _ := s.spawn(t, nil)
	for _, word := range []string{"first", "second"} {
		evs, res := streamOK(t, sb, backend.ExecRequest{Shell: "echo " + word}, hangBound)
		if res.ExitCode != 0 || res.Stdout != word+"\n" || joined(evs, backend.EventStdout) != word+"\n" {
			t.Errorf("stream %s: %+v", word, res)
		}
	}
}

func (s *suite) statePersists(t *testing.T) {
	sb, _ := s.spawn(t, nil)
	tmp := fmt.Sprintf("/tmp/slopbox-conformance-%d", rand.Int64())
	t.Cleanup(func() { sb.Exec(context.Background(), backend.ExecRequest{Shell: "rm -f " + tmp}) })
	sh(t, sb, "echo in-workspace > state.txt; echo in-tmp > "+tmp)
	res := sh(t, sb, "cat state.txt "+tmp)
	if res.Stdout != "in-workspace\nin-tmp\n" {
		t.Errorf("state lost between execs: %q %q", res.Stdout, res.Stderr)
	}
	evs, _ := streamOK(t, sb, backend.ExecRequest{Shell: "cat state.txt " + tmp}, hangBound)
	if got := joined(evs, backend.EventStdout); got != "in-workspace\nin-tmp\n" {
		t.Errorf("state lost for a stream: %q", got)
	}
}

func (s *suite) manyLines(t *testing.T) {
	sb, _ := s.spawn(t, nil)
	script := `i=1; while [ $i -le 1000 ]; do echo line$i; i=$((i+1)); done`
	res := sh(t, sb, script)
	lines := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
	if len(lines) != 1000 || lines[0] != "line1" || lines[999] != "line1000" {
		t.Errorf("got %d lines", len(lines))
	}
	evs, res := streamOK(t, sb, backend.ExecRequest{Shell: script}, 20*time.Second)
	if got := joined(evs, backend.EventStdout); got != res.Stdout || strings.Count(got, "\n") != 1000 {
		t.Errorf("stream: %d lines, result %d", strings.Count(got, "\n"), strings.Count(res.Stdout, "\n"))
	}
}

func (s *suite) largeOutput(t *testing.T) {
	const size = 10 << 20
	sb, _ := s.spawn(t, nil)
	res := execOK(t, sb, backend.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/zero; head -c %d /dev/zero >&2", size, size), Timeout: time.Minute})
	if len(res.Stdout) != size || res.StdoutBytes != size || len(res.Stderr) != size || res.Truncated || res.TimedOut {
		t.Errorf("stdout %d (%d) stderr %d truncated %v timed out %v", len(res.Stdout), res.StdoutBytes, len(res.Stderr), res.Truncated, res.TimedOut)
	}
	evs, res := streamOK(t, sb, backend.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/zero", size)}, time.Minute)
	if n := len(joined(evs, backend.EventStdout)); n != size || len(res.Stdout) != size {
		t.Errorf("stream: %d bytes in events, %d in the result", n, len(res.Stdout))
	}
}

func (s *suite) outputCap(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, _ := s.spawnMode(t, m, nil)
		res := execOK(t, sb, backend.ExecRequest{Shell: "head -c 100000 /dev/zero; echo small >&2", OutputLimit: 1000})
		want := int64(len(m.prefix) + 100000)
		if !res.Truncated || res.StdoutBytes != want || len(res.Stdout) != 1000 {
			t.Errorf("truncated %v stdout_bytes %d (want %d) kept %d", res.Truncated, res.StdoutBytes, want, len(res.Stdout))
		}
		if res.Stderr != m.prefix+"small\n" || res.StderrBytes != int64(len(res.Stderr)) {
			t.Errorf("stderr %q (%d bytes)", res.Stderr, res.StderrBytes)
		}
		res = execOK(t, sb, backend.ExecRequest{Shell: "echo fits", OutputLimit: 1000})
		if res.Truncated || res.Stdout != m.prefix+"fits\n" {
			t.Errorf("under the cap: %+v", res)
		}
	})
}

func (s *suite) invalidUTF8(t *testing.T) {
	sb, _ := s.spawn(t, nil)
	res := sh(t, sb, `printf '\377abc'`)
	if res.Stdout != "\uFFFDabc" {
		t.Errorf("stdout %q", res.Stdout)
	}
	// A multi-byte character written in two pieces is decoded whole.
	res = sh(t, sb, `printf '\342\202'; sleep 0.2; printf '\254\n'`)
	if res.Stdout != "€\n" {
		t.Errorf("split character: %q", res.Stdout)
	}
	evs, _ := streamOK(t, sb, backend.ExecRequest{Shell: `printf '\342\202'; sleep 0.2; printf '\254\n'`}, hangBound)
	if got := joined(evs, backend.EventStdout); got != "€\n" {
		t.Errorf("split character streamed as %q", got)
	}
}

func (s *suite) setupContract(t *testing.T) {
	sb, _ := s.spawn(t, func(spec *backend.SpawnSpec) {
		spec.DisableSetup = false
		spec.Setup.Commands = []string{"echo setup-out"}
	})
	res := sh(t, sb, "echo cmd-out")
	if res.SetupStdout != "setup-out\n\n\n" || res.Stdout != "\n\ncmd-out\n" {
		t.Errorf("setup_stdout %q stdout %q", res.SetupStdout, res.Stdout)
	}
	if res.SetupStderr != "\n\n" || res.Stderr != "\n\n" {
		t.Errorf("setup_stderr %q stderr %q", res.SetupStderr, res.Stderr)
	}
	// A failing setup command does not stop the command; the exit code is the command's.
	sb2, _ := s.spawn(t, func(spec *backend.SpawnSpec) {
		spec.DisableSetup = false
		spec.Setup.Commands = []string{"slopbox-no-such-setup-command", "echo after-failure"}
	})
	res = sh(t, sb2, "echo cmd-out; exit 3")
	if res.ExitCode != 3 || res.Stdout != "\n\ncmd-out\n" || !strings.Contains(res.SetupStdout, "after-failure") || res.SetupStderr == "\n\n" {
		t.Errorf("failing setup: %+v", res)
	}
	// Buffered results split at the last marker.
	res = sh(t, sb, "echo early; echo "+backend.SplitMarker+"; echo late")
	if res.Stdout != "\nlate\n" || !strings.Contains(res.SetupStdout, "early") {
		t.Errorf("marker in command output: stdout %q setup %q", res.Stdout, res.SetupStdout)
	}
}

func (s *suite) setupEvalOnly(t *testing.T) {
	for _, c := range []struct {
		ctx  backend.Context
		want string
	}{
		{backend.ContextEvaluation, "common\neval-only\nspawn-cmd\n\n\n"},
		{backend.ContextAgent, "common\nspawn-cmd\n\n\n"},
	} {
		sb, _ := s.spawn(t, func(spec *backend.SpawnSpec) {
			spec.DisableSetup = false
			spec.Context = c.ctx
			spec.Setup = backend.Setup{
				Commands:     []string{"echo common"},
				EvalCommands: []string{"echo eval-only"},
				Command:      "echo spawn-cmd",
			}
		})
		res := sh(t, sb, "echo cmd-out")
		if res.SetupStdout != c.want || res.Stdout != "\n\ncmd-out\n" {
			t.Errorf("%s: setup_stdout %q stdout %q, want setup %q", c.ctx, res.SetupStdout, res.Stdout, c.want)
		}
	}
}

func (s *suite) setupDisabled(t *testing.T) {
	setup := backend.Setup{Commands: []string{"echo setup-out"}}
	sb, _ := s.spawn(t, func(spec *backend.SpawnSpec) {
		spec.DisableSetup = true
		spec.Setup = setup
	})
	res := sh(t, sb, "echo cmd-out")
	if res.Stdout != "cmd-out\n" || res.Stderr != "" || res.SetupStdout != "" || res.SetupStderr != "" {
		t.Errorf("disable_setup: %+v", res)
	}
	sb2, _ := s.spawn(t, func(spec *backend.SpawnSpec) {
		spec.DisableSetup = false
		spec.Setup = setup
	})
	res = execOK(t, sb2, backend.ExecRequest{Shell: "echo cmd-out", NoSetup: true})
	if res.Stdout != "cmd-out\n" || res.Stderr != "" || res.SetupStdout != "" {
		t.Errorf("NoSetup: %+v", res)
	}
	evs, res := streamOK(t, sb, backend.ExecRequest{Shell: "echo cmd-out"}, hangBound)
	if got := joined(evs, backend.EventStdout); got != "cmd-out\n" || strings.Contains(res.Stdout+res.Stderr, backend.SplitMarker) {
		t.Errorf("disable_setup stream: %q %+v", got, res)
	}
}

func (s *suite) setupStreaming(t *testing.T) {
	sb, _ := s.spawn(t, func(spec *backend.SpawnSpec) {
		spec.DisableSetup = false
		spec.Setup.Commands = []string{"echo setup-out", "echo setup-err >&2"}
	})
	evs, res := streamOK(t, sb, backend.ExecRequest{Shell: "echo cmd-out; echo cmd-err >&2"}, hangBound)
	for _, ev := range evs {
		if strings.Contains(ev.Data, "setup-") || strings.Contains(ev.Data, backend.SplitMarker) {
			t.Errorf("setup output streamed: %+v", ev.Event)
		}
	}
	if got := joined(evs, backend.EventStdout); got != "\n\ncmd-out\n" || res.Stdout != got {
		t.Errorf("stdout events %q result %q", got, res.Stdout)
	}
	if got := joined(evs, backend.EventStderr); got != "\n\ncmd-err\n" || res.Stderr != got {
		t.Errorf("stderr events %q result %q", got, res.Stderr)
	}
	if res.SetupStdout != "setup-out\n\n\n" || res.SetupStderr != "setup-err\n\n\n" {
		t.Errorf("setup_stdout %q setup_stderr %q", res.SetupStdout, res.SetupStderr)
	}
	// Streaming splits at the first marker.
	evs, res = streamOK(t, sb, backend.ExecRequest{Shell: "echo " + backend.SplitMarker + "; echo late"}, hangBound)
	if got := joined(evs, backend.EventStdout); got != "\n\n"+backend.SplitMarker+"\nlate\n" || res.Stdout != got {
		t.Errorf("marker in streamed output: events %q result %q", got, res.Stdout)
	}
}

func (s *suite) poll(t *testing.T) {
	sb, spec := s.spawn(t, nil)
	if running, code := sb.Poll(); running || code != nil {
		t.Errorf("fresh sandbox: running=%v code=%v", running, code)
	}
	sh(t, sb, "exit 5")
	if running, code := sb.Poll(); running || code == nil || *code != 5 {
		t.Errorf("after exit 5: running=%v code=%v", running, code)
	}
	// The command runs until the test lets it end (a file it waits for),
	// however slow the machine.
	ch, err := sb.Stream(context.Background(), backend.ExecRequest{Shell: waitFile + "w done"})
	if err != nil {
		t.Fatal(err)
	}
	if running, _ := sb.Poll(); !running {
		t.Error("poll during a command: not running")
	}
	writeHost(t, filepath.Join(spec.Workspace, "done"), nil, 0o644)
	collect(t, ch, 2*time.Minute)
	if running, code := sb.Poll(); running || code == nil || *code != 0 {
		t.Errorf("after the stream: running=%v code=%v", running, code)
	}
}

func (s *suite) killRunning(t *testing.T) {
	s.forModes(t, func(t *testing.T, m mode) {
		sb, _ := s.spawnMode(t, m, nil)
		if err := sb.Kill(); err != nil {
			t.Errorf("kill with nothing running: %v", err)
		}
		n := sleepMarker()
		type out struct {
			res *backend.Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: fmt.Sprintf("sleep %d & sleep %d", n, n)})
			done <- out{res, err}
		}()
		for deadline := time.Now().Add(hangBound); ; time.Sleep(20 * time.Millisecond) {
			if running, _ := sb.Poll(); running {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("command never started")
			}
		}
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		if err := sb.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		select {
		case o := <-done:
			if o.err != nil {
				t.Fatalf("killed exec: %v", o.err)
			}
			if o.res.ExitCode != 128+9 || o.res.TimedOut {
				t.Errorf("killed exec: exit %d timed_out %v", o.res.ExitCode, o.res.TimedOut)
			}
		case <-time.After(hangBound):
			t.Fatalf("exec did not return within %v of Kill", hangBound)
		}
		if d := time.Since(start); d > hangBound {
			t.Errorf("kill took %v", d)
		}
		waitNoSleepers(t, sb, n)
		if res := sh(t, sb, "echo usable"); res.Stdout != m.prefix+"usable\n" {
			t.Errorf("after kill: %+v", res)
		}
	})
}

func (s *suite) busy(t *testing.T) {
	sb, spec := s.spawn(t, nil)
	// The command runs until the test lets it end (a file it waits for).
	ch, err := sb.Stream(context.Background(), backend.ExecRequest{Shell: waitFile + "w done"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "true"}); !errors.Is(err, backend.ErrBusy) {
		t.Errorf("second command while one runs: %v, want ErrBusy", err)
	}
	writeHost(t, filepath.Join(spec.Workspace, "done"), nil, 0o644)
	collect(t, ch, 2*time.Minute)
	if res := sh(t, sb, "echo free"); res.Stdout != "free\n" {
		t.Errorf("after the stream: %+v", res)
	}
}

func (s *suite) cleanupTwice(t *testing.T) {
	b, spec := s.f.New(t)
	spec.DisableSetup = true
	sb, err := b.Spawn(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, sb, "echo keep > kept.txt")
	if err := sb.Cleanup(); err != nil {
		t.Fatalf("first cleanup: %v", err)
	}
	if err := sb.Cleanup(); err != nil {
		t.Fatalf("second cleanup: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(spec.Workspace, "kept.txt")); err != nil || string(b) != "keep\n" {
		t.Errorf("cleanup touched the workspace: %q %v", b, err)
	}
	// A sandbox that never ran anything cleans up too.
	b2, spec2 := s.f.New(t)
	sb2, err := b2.Spawn(context.Background(), spec2)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb2.Cleanup(); err != nil {
		t.Errorf("cleanup of an unused sandbox: %v", err)
	}
}

func (s *suite) useAfterCleanup(t *testing.T) {
	b, spec := s.f.New(t)
	sb, err := b.Spawn(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanup while a command runs stops it.
	ch, err := sb.Stream(context.Background(), backend.ExecRequest{Shell: "sleep 1000", NoSetup: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	collect(t, ch, 2*hangBound)
	if d := time.Since(start); d > hangBound {
		t.Errorf("cleanup with a running command took %v", d)
	}
	if _, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "true"}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("exec after cleanup: %v", err)
	}
	if _, err := sb.Stream(context.Background(), backend.ExecRequest{Shell: "true"}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("stream after cleanup: %v", err)
	}
	if err := sb.Kill(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("kill after cleanup: %v", err)
	}
	if running, _ := sb.Poll(); running {
		t.Error("poll after cleanup: running")
	}
}

func (s *suite) workspaceFiles(t *testing.T) {
	sb, spec := s.spawn(t, nil)
	ws := spec.Workspace
	sh(t, sb, `echo text > out.txt; printf '\000\001\377\376' > out.bin; head -c 5242880 /dev/zero > big.bin; mkdir -p d/e && echo nested > d/e/f.txt`)
	checks := map[string]string{
		"out.txt":   "text\n",
		"out.bin":   "\x00\x01\xff\xfe",
		"d/e/f.txt": "nested\n",
	}
	for name, want := range checks {
		got, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil || string(got) != want {
			t.Errorf("host sees %s = %q (%v), want %q", name, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(ws, "big.bin")); err != nil || fi.Size() != 5<<20 {
		t.Errorf("big.bin: %v %v", fi, err)
	}
	// Files written by the sandbox belong to the workspace's owner on the host.
	wsInfo, err := os.Stat(ws)
	if err != nil {
		t.Fatal(err)
	}
	owner := wsInfo.Sys().(*syscall.Stat_t).Uid
	if fi, err := os.Stat(filepath.Join(ws, "out.txt")); err == nil {
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != owner {
			t.Errorf("out.txt is owned by uid %d on the host, the workspace by %d", uid, owner)
		}
	}
	// Host-written files are visible to commands.
	writeHost(t, filepath.Join(ws, "host.txt"), []byte("from host\n"), 0o644)
	writeHost(t, filepath.Join(ws, "host.bin"), bytes.Repeat([]byte{0, 1, 2, 3}, 1<<18), 0o644)
	res := sh(t, sb, "cat host.txt; wc -c < host.bin; ls")
	if !strings.HasPrefix(res.Stdout, "from host\n") || !strings.Contains(res.Stdout, "1048576") || !strings.Contains(res.Stdout, "out.bin") {
		t.Errorf("command sees: %q", res.Stdout)
	}
}

func (s *suite) permissionDenied(t *testing.T) {
	run := func(t *testing.T, user string, edit func(*backend.SpawnSpec)) {
		sb, spec := s.spawn(t, edit)
		ro := filepath.Join(spec.Workspace, "ro")
		if err := os.Mkdir(ro, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
		uid := strings.TrimSpace(execOK(t, sb, backend.ExecRequest{Shell: "id -u", User: user}).Stdout)
		res := execOK(t, sb, backend.ExecRequest{Shell: "echo x > ro/f", User: user})
		_, statErr := os.Stat(filepath.Join(ro, "f"))
		switch {
		case res.ExitCode == 0 && uid == "0":
			// Root (the host's, or a user namespace's over files it owns)
			// bypasses file modes: the write succeeds and the file is there.
			if statErr != nil {
				t.Errorf("write as root succeeded but the host sees no file: %v", statErr)
			}
			t.Logf("uid 0 bypasses the mode of a 0555 directory, as it should")
		case res.ExitCode == 0:
			t.Errorf("uid %s wrote into a 0555 directory", uid)
		default:
			if !strings.Contains(strings.ToLower(res.Stderr), "permission denied") {
				t.Errorf("stderr does not say why: %q", res.Stderr)
			}
			if statErr == nil {
				t.Error("failed write left a file")
			}
		}
	}
	t.Run("default-user", func(t *testing.T) { run(t, "", nil) })
	if s.f.UsersAvailable != "" {
		t.Run("second-user", func(t *testing.T) {
			run(t, s.f.UsersAvailable, func(spec *backend.SpawnSpec) { openWorkspace(t, spec) })
		})
	}
}

func (s *suite) isADirectory(t *testing.T) {
	sb, spec := s.spawn(t, nil)
	if err := os.Mkdir(filepath.Join(spec.Workspace, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := sh(t, sb, "cat adir")
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Is a directory") {
		t.Errorf("cat of a directory: exit %d stderr %q", res.ExitCode, res.Stderr)
	}
}

// close: Close releases what the backend holds for spawning; sandboxes
// spawned before keep working, and a Spawn after Close works too.
func (s *suite) close(t *testing.T) {
	b, spec := s.f.New(t)
	spec.DisableSetup = true
	first, err := b.Spawn(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Cleanup()
	b.Close()
	if res := execOK(t, first, backend.ExecRequest{Shell: "echo before"}); res.Stdout != "before\n" {
		t.Errorf("a sandbox spawned before Close: %+v", res)
	}
	second, err := b.Spawn(context.Background(), spec)
	if err != nil {
		t.Fatalf("spawn after Close: %v", err)
	}
	defer second.Cleanup()
	if res := execOK(t, second, backend.ExecRequest{Shell: "echo after"}); res.Stdout != "after\n" {
		t.Errorf("a sandbox spawned after Close: %+v", res)
	}
	b.Close()
}
