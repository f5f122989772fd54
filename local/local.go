package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/backendkit"
)

// Name is the registry name of this backend.
const Name = "local"

// ErrSwitchUser is wrapped when a command asks for another user and slopbox
// is not running as root.
var ErrSwitchUser = errdefs.ErrPermissionDenied.WithMessage("switching users needs root")

func init() {
	backend.Register(Name, func() (backend.Backend, error) { return New(), nil })
}

// Backend runs sandboxes on the host.
type Backend struct{}

// New returns the local backend.
func New() *Backend { return &Backend{} }

// Name returns "local".
func (*Backend) Name() string { return Name }

// Close does nothing: the local backend holds nothing between spawns.
func (*Backend) Close() {}

// Spawn checks the spec and returns a sandbox over spec.Workspace. Nothing
// runs yet: setup runs with every command, through the entry script.
func (*Backend) Spawn(ctx context.Context, spec backend.SpawnSpec) (backend.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.Workspace == "" {
		return nil, errors.New("local: spawn: workspace is required")
	}
	ws, err := filepath.Abs(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("local: spawn: workspace %s: %w", spec.Workspace, err)
	}
	fi, err := os.Stat(ws)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("local: spawn: workspace %s does not exist: %w", ws, err)
		}
		return nil, fmt.Errorf("local: spawn: workspace: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("local: spawn: workspace %s is not a directory", ws)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("local: spawn: %w", err)
	}
	unenforced := unenforcedLimits(spec.Limits)
	if spec.Limits.Strict && len(unenforced) > 0 {
		return nil, fmt.Errorf("local: spawn: the local backend cannot enforce limits: %s", strings.Join(unenforced, ", "))
	}
	cred, err := resolveUser(spec.User)
	if err != nil {
		return nil, fmt.Errorf("local: spawn: %w", err)
	}
	priv, err := os.MkdirTemp("", "slopbox-local-")
	if err != nil {
		return nil, fmt.Errorf("local: spawn: private dir: %w", err)
	}
	spec.SpecEnv = maps.Clone(spec.SpecEnv)
	spec.Env = maps.Clone(spec.Env)
	spec.Setup.Commands = slices.Clone(spec.Setup.Commands)
	spec.Setup.EvalCommands = slices.Clone(spec.Setup.EvalCommands)
	return &Sandbox{
		id:         "local-" + randomHex(6),
		workspace:  ws,
		spec:       spec,
		cred:       cred,
		privDir:    priv,
		unenforced: unenforced,
		groups:     map[int]struct{}{},
	}, nil
}

func unenforcedLimits(l backend.Limits) []string {
	var u []string
	if l.MemoryBytes > 0 {
		u = append(u, "memory")
	}
	if l.CPUs > 0 {
		u = append(u, "cpus")
	}
	if l.Pids > 0 {
		u = append(u, "pids")
	}
	return u
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Sandbox is one local sandbox. Its methods are safe for concurrent use.
type Sandbox struct {
	id         string
	workspace  string
	spec       backend.SpawnSpec
	cred       *syscall.Credential // nil: run as the calling user
	privDir    string              // holds the entry script; never the workspace
	unenforced []string

	slot backendkit.Slot[*proc]
	mu   sync.Mutex
	// groups are process groups of finished commands that still had members
	// (background children); Cleanup kills them.
	groups map[int]struct{}
}

var _ backend.Sandbox = (*Sandbox)(nil)

// ID returns a random id.
func (s *Sandbox) ID() string { return s.id }

// Workdir returns the workspace's absolute host path, which is where
// commands see it.
func (s *Sandbox) Workdir() string { return s.workspace }

// PrivateDir is the per-sandbox directory that holds the entry script.
func (s *Sandbox) PrivateDir() string { return s.privDir }

// Exec runs one command to completion. A command that cannot be found or
// executed gives a Result with exit code 127 or 126, not an error. When ctx
// is cancelled the command is killed and the partial Result is returned
// together with the context's error.
func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (*backend.Result, error) {
	return s.runner().Exec(ctx, req)
}

// Stream runs one command and sends its output as it is read. The caller
// must drain the channel or cancel ctx; cancelling kills the command.
func (s *Sandbox) Stream(ctx context.Context, req backend.ExecRequest) (<-chan backend.Event, error) {
	return s.runner().Stream(ctx, req)
}

func (s *Sandbox) runner() backendkit.Runner[*proc] {
	return backendkit.Runner[*proc]{What: "local: exec", Start: s.start, Finish: s.finish,
		Wait: func(ctx context.Context, p *proc, buffered bool, emit func(backend.EventKind, string)) *backend.Result {
			return p.wait(ctx, buffered, emit)
		}}
}

// Poll reports whether a command runs, else the last exit code (nil before
// the first command).
func (s *Sandbox) Poll() (bool, *int) { return s.slot.Poll() }

// Kill sends SIGKILL to the running command's process group and waits
// (bounded) until its main process is gone.
func (s *Sandbox) Kill() error { return s.slot.Kill() }

// Cleanup kills the running command and every process group a command left
// behind, and removes the private directory (kept with SpawnSpec.Keep). It
// never touches the workspace. It is idempotent.
func (s *Sandbox) Cleanup() error {
	// Close waits for the process, not for the result: a Stream consumer
	// that stopped reading must not hold Cleanup.
	if !s.slot.Close() {
		return nil
	}
	s.mu.Lock()
	groups := slices.Collect(maps.Keys(s.groups))
	clear(s.groups)
	s.mu.Unlock()
	for _, pgid := range groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	if s.spec.Keep {
		return nil
	}
	if err := os.RemoveAll(s.privDir); err != nil {
		return fmt.Errorf("local: cleanup: %w", err)
	}
	return nil
}

// proc is one running command.
type proc struct {
	cmd       *exec.Cmd
	setup     bool
	limit     int64
	timeout   time.Duration
	stdin     [][]byte
	stdinW    *os.File
	outR      *os.File
	errR      *os.File
	started   time.Time
	pgid      int
	waitErr   error
	exited    chan struct{} // main process reaped
	killCh    chan struct{}
	killOnce  sync.Once
	failed    *backend.Result
	unenforce []string
}

// Kill and Done make proc a backendkit.Command.
func (p *proc) Kill()                 { p.kill() }
func (p *proc) Done() <-chan struct{} { return p.exited }

func (p *proc) kill() {
	p.killOnce.Do(func() { close(p.killCh) })
}

// start prepares and starts a command; it fails with ErrClosed or ErrBusy
// without side effects.
func (s *Sandbox) start(ctx context.Context, req backend.ExecRequest) (*proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.slot.Start(func() (*proc, error) { return s.startLocked(req) })
}

// startLocked starts req's command, with the slot held. A command that
// cannot be found or executed gives a proc that has exited with the
// failed result, as a shell would give.
func (s *Sandbox) startLocked(req backend.ExecRequest) (*proc, error) {
	cred, dir, err := s.execContext(req)
	if err != nil {
		return nil, err
	}
	env := backend.MergeEnv(s.spec.IncludeOSEnv, s.spec.SpecEnv, s.spec.Env, req.Env)
	setup := !s.spec.DisableSetup && !req.NoSetup
	argv, err := s.execArgv(req, setup, cred)
	if err != nil {
		return nil, err
	}

	p := &proc{
		setup:     setup,
		limit:     req.OutputLimit,
		timeout:   req.Timeout,
		stdin:     req.Stdin,
		exited:    make(chan struct{}),
		killCh:    make(chan struct{}),
		unenforce: s.unenforced,
	}
	path, code, err := lookPath(argv[0], env, dir)
	if err != nil {
		// Not found or not executable: a result, as a shell would give.
		p.failed = failedResult(code, err)
		close(p.exited)
		return p, nil
	}

	pipes, err := p.openPipes(req)
	if err != nil {
		return nil, fmt.Errorf("local: exec: %w", err)
	}
	p.cmd = &exec.Cmd{
		Path:   path,
		Args:   argv,
		Env:    env,
		Dir:    dir,
		Stdout: pipes.outW,
		Stderr: pipes.errW,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: cred,
		},
	}
	if pipes.stdinR != nil {
		p.cmd.Stdin = pipes.stdinR
	}
	p.outR, p.errR = pipes.outR, pipes.errR

	if err := p.startPinned(); err != nil {
		pipes.closeAll()
		if code := backend.ExitCodeFor(err); code == backend.ExitNotFound || code == backend.ExitNotExecutable {
			p.failed = failedResult(code, err)
			close(p.exited)
			return p, nil
		}
		return nil, fmt.Errorf("local: exec: start %s: %w", argv[0], err)
	}
	pipes.outW.Close()
	pipes.errW.Close()
	if pipes.stdinR != nil {
		pipes.stdinR.Close()
	}
	p.pgid = p.cmd.Process.Pid
	return p, nil
}

// execContext checks req and resolves who its command runs as (req's
// user, else the sandbox's: nil for the calling user) and where: the
// workspace, or req's Cwd (relative to it), which must be a directory.
func (s *Sandbox) execContext(req backend.ExecRequest) (*syscall.Credential, string, error) {
	if len(req.Argv) == 0 && req.Shell == "" {
		return nil, "", errors.New("local: exec: empty command (set Argv or Shell)")
	}
	if err := req.Validate(); err != nil {
		return nil, "", fmt.Errorf("local: exec: %w", err)
	}
	cred := s.cred
	if req.User != "" {
		c, err := resolveUser(req.User)
		if err != nil {
			return nil, "", fmt.Errorf("local: exec: %w", err)
		}
		cred = c
	}
	dir := s.workspace
	if req.Cwd != "" {
		dir = req.Cwd
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(s.workspace, dir)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, "", fmt.Errorf("local: exec: cwd: %w", err)
		}
		if !fi.IsDir() {
			return nil, "", fmt.Errorf("local: exec: cwd %s is not a directory", dir)
		}
	}
	return cred, dir, nil
}

// execArgv is the argv req's command runs as: with setup, the entry
// script (written for cred) running it; else its Argv, or its Shell
// command under sh -c.
func (s *Sandbox) execArgv(req backend.ExecRequest, setup bool, cred *syscall.Credential) ([]string, error) {
	switch {
	case setup:
		command := req.Shell
		if len(req.Argv) > 0 {
			command = backend.ShellQuote(req.Argv)
		}
		script, err := s.writeScript(backend.SetupCommands(s.spec.Setup, s.spec.Context), command, cred)
		if err != nil {
			return nil, err
		}
		return []string{"/bin/sh", script}, nil
	case len(req.Argv) > 0:
		return req.Argv, nil
	default:
		return []string{"/bin/sh", "-c", req.Shell}, nil
	}
}

// execPipes are a command's stdio pipes; all holds every end opened.
type execPipes struct {
	all        []*os.File
	outR, outW *os.File
	errR, errW *os.File
	stdinR     *os.File // nil without a stdin; its write end is p.stdinW
}

func (e *execPipes) closeAll() {
	for _, f := range e.all {
		f.Close()
	}
}

// openPipes opens the pipes of req's command: its stdout and stderr, and
// its stdin when req has one. On failure it closes what it opened.
func (p *proc) openPipes(req backend.ExecRequest) (*execPipes, error) {
	e := &execPipes{}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = backendkit.Pipe()
		if err == nil {
			e.all = append(e.all, r, w)
		}
		return r, w, err
	}
	var err error
	if e.outR, e.outW, err = pipe(); err != nil {
		return nil, err
	}
	if e.errR, e.errW, err = pipe(); err != nil {
		e.closeAll()
		return nil, err
	}
	if req.Stdin != nil {
		if e.stdinR, p.stdinW, err = pipe(); err != nil {
			e.closeAll()
			return nil, err
		}
	}
	return e, nil
}

// startPinned starts p.cmd and returns its error: from a goroutine locked
// to its OS thread until the child is reaped, which then closes p.exited.
//
// Pdeathsig fires when the OS thread that forked the child exits, not
// the process: locked, the runtime cannot retire the thread under it.
func (p *proc) startPinned() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		p.started = time.Now()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return <-started
}

func failedResult(code int, err error) *backend.Result {
	return backendkit.FailedResult(code, err.Error(), nil)
}

// writeScript writes the entry script into the private directory, which is
// handed to the user the command runs as.
func (s *Sandbox) writeScript(setup []string, command string, cred *syscall.Credential) (string, error) {
	path := filepath.Join(s.privDir, backend.EntryScriptName)
	if err := os.WriteFile(path, backend.EntryScript(setup, command), 0o755); err != nil {
		return "", fmt.Errorf("local: write entry script: %w", err)
	}
	if err := os.Chmod(path, 0o755); err != nil {
		return "", fmt.Errorf("local: write entry script: %w", err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if cred != nil {
		uid, gid = int(cred.Uid), int(cred.Gid)
	}
	for _, p := range []string{s.privDir, path} {
		if err := os.Lchown(p, uid, gid); err != nil && cred != nil {
			return "", fmt.Errorf("local: hand entry script to uid %d: %w", uid, err)
		}
	}
	return path, nil
}

// lookPath finds argv[0] the way execvp would with the command's own PATH
// (not slopbox's), relative to the command's working directory. It returns
// the exit code a shell gives when that fails.
func lookPath(file string, env []string, dir string) (string, int, error) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if strings.Contains(file, "/") {
		p := abs(file)
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return "", backend.ExitNotFound, fmt.Errorf("%s: %w", file, err)
		case fi.IsDir():
			return "", backend.ExitNotExecutable, fmt.Errorf("%s: is a directory", file)
		}
		return p, 0, nil
	}
	pathEnv, _ := backend.LookupEnv(env, "PATH")
	denied := ""
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := abs(filepath.Join(d, file))
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		if fi.Mode()&0o111 != 0 {
			return p, 0, nil
		}
		if denied == "" {
			denied = p
		}
	}
	if denied != "" {
		return "", backend.ExitNotExecutable, fmt.Errorf("%s: permission denied", denied)
	}
	return "", backend.ExitNotFound, fmt.Errorf("%s: command not found", file)
}

// wait collects the command's output and result (backendkit.Collect).
func (p *proc) wait(ctx context.Context, buffered bool, emit func(backend.EventKind, string)) *backend.Result {
	if p.failed != nil {
		if emit != nil && p.failed.Stderr != "" {
			emit(backend.EventStderr, p.failed.Stderr)
		}
		res := *p.failed
		res.Unenforced = p.unenforce
		return &res
	}
	return backendkit.Collect(ctx, &backendkit.Proc{
		Stdout: p.outR, Stderr: p.errR, StdinW: p.stdinW, Stdin: p.stdin,
		Setup: p.setup, Limit: p.limit, Timeout: p.timeout, Started: p.started,
		Exited: p.exited, KillReq: p.killCh,
		KillTree:   func() { _ = syscall.Kill(-p.pgid, syscall.SIGKILL) },
		ExitCode:   func() int { return backend.ExitCodeFor(p.waitErr) },
		Unenforced: p.unenforce,
	}, buffered, emit)
}

// finish records the result and releases the sandbox for the next command.
func (s *Sandbox) finish(p *proc, res *backend.Result) {
	s.slot.Finish(p, res.ExitCode, func(closed bool) {
		if p.pgid <= 0 || !groupAlive(p.pgid) {
			return
		}
		if closed {
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			return
		}
		s.mu.Lock()
		s.groups[p.pgid] = struct{}{}
		s.mu.Unlock()
	})
}

// groupAlive reports whether a process group still has members (zombies
// waiting for their parent count as gone).
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid pgrp ...
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// resolveUser turns "uid[:gid]" or "name[:group]" into credentials, looking
// names up in the host's passwd and group files. It returns nil when the
// user is the calling one, and ErrSwitchUser when another user is asked for
// and slopbox is not root.
func resolveUser(spec string) (*syscall.Credential, error) {
	if spec == "" {
		return nil, nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	var uid, gid uint64
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		uid = n
		// Docker: a numeric uid takes its passwd entry's group, else 0.
		if u, err := user.LookupId(name); err == nil {
			gid, _ = strconv.ParseUint(u.Gid, 10, 32)
		}
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			var unknown user.UnknownUserError
			if errors.As(err, &unknown) {
				return nil, fmt.Errorf("unable to find user %s: %w", name, backend.ErrUnknownUser)
			}
			return nil, fmt.Errorf("look up user %s: %w", name, err)
		}
		uid, _ = strconv.ParseUint(u.Uid, 10, 32)
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
	}
	if hasGroup {
		if n, err := strconv.ParseUint(group, 10, 32); err == nil {
			gid = n
		} else {
			g, err := user.LookupGroup(group)
			if err != nil {
				return nil, fmt.Errorf("unable to find group %s: no matching entries in group file", group)
			}
			gid, _ = strconv.ParseUint(g.Gid, 10, 32)
		}
	}
	if int(uid) == os.Geteuid() && (int(gid) == os.Getegid() || !hasGroup && os.Geteuid() != 0) {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("cannot run as user %q (uid %d, gid %d) on the local backend: %w, and slopbox runs as uid %d",
			spec, uid, gid, ErrSwitchUser, os.Geteuid())
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}
