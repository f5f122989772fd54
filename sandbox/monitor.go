package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/internal/pidwatch"
	"github.com/slopbox/slopbox/internal/reexec"

	"golang.org/x/sys/unix"
)

// A sandbox's main command (docker run -d, start) runs under a monitor: a
// small static C program (internal/spawnd/monitor.c), in its own session,
// that outlives the slopbox process that started it (podman's conmon plays
// this part), with no Go runtime while the command runs. It
//   - keeps the command's output as the sandbox's log, bounded;
//   - holds the command's stdin open with -i, so a shell waits for input
//     rather than exiting at once (docker run -di);
//   - forwards the signals sent to it to the command (Signal);
//   - answers a reader of the log once what the command has written so
//     far is in it (syncLog), before it reads;
//   - once the command has ended, execs this program (monitorMain), which
//     records its exit status (exitFile) and then stops the sandbox, as a
//     docker container stops when its main process exits (and removes it
//     when it was made with AutoRemove).
// It exits when the command has, or when the sandbox is gone.

const (
	monitorHelper = "sandbox-monitor"
	exitFile      = "exit.json"
	monitorFile   = "monitor.pid" // "pid start-time" of the monitor
	// monitorReady holds the monitor's pid once it forwards signals:
	// until it has blocked them, a signal would end it.
	monitorReady = "monitor.ready"
	// monitorSocket is where the monitor answers syncLog.
	monitorSocket = "monitor.sock"
)

func init() {
	reexec.Register(monitorHelper, func() int { return monitorMain(os.Args[1:]) })
}

// DetachOptions say how a detached main command is attached.
type DetachOptions struct {
	// TTY runs it on a terminal of the sandbox's own (docker run -dt).
	TTY bool `json:"tty,omitempty"`
	// OpenStdin keeps its stdin open, unwritten (docker run -di).
	OpenStdin bool `json:"open_stdin,omitempty"`
	// Rows and Cols size the terminal at start (0: 24×80).
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// pauseBeforeCommandHook, set in the environment of a slopbox process,
// has it stop for good between recording a sandbox and starting its main
// command: for the test that kills it there.
const pauseBeforeCommandHook = "SLOPBOX_TEST_PAUSE_BEFORE_COMMAND"

// exitRecord is what exitFile holds.
type exitRecord struct {
	ExitCode   int       `json:"exit_code"`
	FinishedAt time.Time `json:"finished_at"`
}

// RunDetached starts req as the sandbox's main command under a monitor
// and returns once it runs. A command that cannot be started gives a
// *StartError.
func (s *Sandbox) RunDetached(ctx context.Context, req backend.ExecRequest, o DetachOptions) error {
	return s.runDetached(ctx, req, o, AttachedStart{})
}

// AttachedStart is what a client attached before start (docker run through
// the Engine API) gives the main command.
type AttachedStart struct {
	// Stdin, without a terminal, is the command's stdin, in place of the
	// open, unwritten one of OpenStdin. The caller keeps its own copy.
	Stdin *os.File
	// Master, with a terminal, is given a duplicate of its master once the
	// command runs, to write the client's input to and resize it. It is
	// the callee's to close.
	Master func(*os.File)
}

// runDetached is RunDetached; a is what a client attached before start
// gives the command.
func (s *Sandbox) runDetached(ctx context.Context, req backend.ExecRequest, o DetachOptions, a AttachedStart) error {
	started := false
	if err := ctx.Err(); err != nil {
		return err
	}
	cmd, err := s.detachedCommand(req, o)
	if err != nil {
		return err
	}
	if err := s.markStarting(o); err != nil {
		return err
	}
	bins, err := s.b.binaries()
	if err != nil {
		return err
	}
	mon, err := s.b.openMonitor(bins.monitor)
	if err != nil {
		return err
	}
	defer mon.Close()
	os.Remove(filepath.Join(s.dir, exitFile))
	conn, err := s.dial()
	if err != nil {
		return err
	}
	defer conn.close()
	// files[0] is the connection; then stdout, stderr (or the terminal's
	// master) and, with OpenStdin, the stdin the monitor holds.
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	cf, err := conn.c.File()
	if err != nil {
		return err
	}
	files = append(files, cf)
	var release func()
	if o.TTY {
		release, err = s.attachTerminal(conn, cmd, a, &files, &started)
	} else {
		release, err = s.attachPipes(conn, cmd, o, a, &files)
	}
	defer release()
	if err != nil {
		return err
	}
	// The monitor execs this program once the command has ended, to
	// record its exit and stop the sandbox: an fd of it, which stays valid
	// whatever becomes of its path (an upgrade, a test binary removed).
	self, err := os.OpenFile("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	files = append([]*os.File{self}, files...)
	if err := s.startMonitor(mon, conn, o, files); err != nil {
		return err
	}
	started = true
	s.superviseStarted()
	return nil
}

// detachedCommand is what PID 1 runs for req as the sandbox's detached
// main command: never wrapped by the entry script, and with o.TTY on a
// terminal of o's size (24×80 unless both are given).
func (s *Sandbox) detachedCommand(req backend.ExecRequest, o DetachOptions) (*execRequest, error) {
	req.NoSetup = true
	if o.TTY {
		req.Env = s.termEnv(req.Env)
	}
	cmd, _, err := s.command(req)
	if err != nil {
		return nil, err
	}
	cmd.detach = true
	if o.TTY {
		cmd.tty, cmd.rows, cmd.cols = true, 24, 80
		if o.Rows > 0 && o.Cols > 0 {
			cmd.rows, cmd.cols = o.Rows, o.Cols
		}
	}
	return cmd, nil
}

// markStarting records o, and the sandbox as this process's to start:
// until the monitor runs, if this process is killed, ps, wait and prune
// see it stopped (abandoned). A test hook stops this process here.
func (s *Sandbox) markStarting(o DetachOptions) error {
	if me := self(); s.rec.Detach != o || s.rec.Starting == nil || *s.rec.Starting != *me {
		s.rec.Detach, s.rec.Starting = o, me
		if err := s.b.state.write(s.rec); err != nil {
			return err
		}
	}
	if os.Getenv(pauseBeforeCommandHook) != "" {
		// Tests only (the environment of the host's slopbox process, out
		// of any sandbox's reach): the window a kill must be safe in.
		fmt.Fprintln(os.Stderr, "slopbox: test hook: paused before the main command starts")
		select {}
	}
	return nil
}

// attachTerminal starts cmd through conn on a terminal of the sandbox's
// own, whose master it appends to *files for the monitor. With a.Master,
// that is given a duplicate of the master once *started (the monitor
// runs). release, which the caller defers whatever the error, hands the
// duplicate over then, or else closes it.
func (s *Sandbox) attachTerminal(conn *agentConn, cmd *execRequest, a AttachedStart, files *[]*os.File, started *bool) (release func(), err error) {
	release = func() {}
	master, err := s.startTerminal(conn, cmd)
	if err != nil {
		return release, err
	}
	*files = append(*files, master)
	if a.Master == nil {
		return release, nil
	}
	fd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return release, err
	}
	dup := os.NewFile(uintptr(fd), "ptmx")
	return func() {
		defer func() {
			if dup != nil {
				dup.Close()
			}
		}()
		if *started {
			a.Master(dup)
			dup = nil
		}
	}, nil
}

// attachPipes starts cmd through conn with pipes for its stdout and
// stderr, whose read ends it appends to *files for the monitor, and as
// its stdin a.Stdin, else with o.OpenStdin a pipe whose write end the
// monitor holds (appended too), else /dev/null. release, which the caller
// defers whatever the error, closes this process's copies of what the
// command was given, last first. A command that cannot be started gives
// a *StartError.
func (s *Sandbox) attachPipes(conn *agentConn, cmd *execRequest, o DetachOptions, a AttachedStart, files *[]*os.File) (release func(), err error) {
	var given []*os.File
	release = func() {
		for _, f := range given {
			defer f.Close()
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return release, err
	}
	*files = append(*files, outR)
	given = append(given, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		return release, err
	}
	*files = append(*files, errR)
	given = append(given, errW)
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return release, err
	}
	given = append(given, stdin)
	if a.Stdin != nil {
		stdin = a.Stdin
	} else if o.OpenStdin {
		r, w, err := os.Pipe()
		if err != nil {
			return release, err
		}
		given = append(given, r)
		*files = append(*files, w)
		stdin = r
	}
	_, execErr, err := conn.start(cmd, stdin, outW, errW)
	if err != nil {
		return release, fmt.Errorf("exec: %w", err)
	}
	if execErr != nil {
		var ee *execError
		if errors.As(execErr, &ee) && !ee.cwd {
			return release, &StartError{Code: ee.code, Msg: ee.msg}
		}
		return release, fmt.Errorf("exec: %w", execErr)
	}
	return release, nil
}

// startMonitor starts the sandbox's monitor, from mon, in a session of its
// own, with files, and returns once it runs (monitorStarted). Its mode
// says which fds it is given (monitor.c): it closes any other it
// inherits. If it cannot start, the command is killed through conn.
func (s *Sandbox) startMonitor(mon *os.File, conn *agentConn, o DetachOptions, files []*os.File) error {
	mode := "pipes"
	switch {
	case o.TTY:
		mode = "tty"
	case len(files) == 5:
		mode = "pipes+stdin"
	}
	m := exec.Command(monitorExec(mon), s.b.root, s.rec.ID, mode)
	m.Args[0] = "slopbox-monitor"
	m.Env = append(os.Environ(), reexec.Env+"="+monitorHelper, "_SLOPBOX_MONITOR=1")
	m.ExtraFiles = files
	m.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := m.Start(); err != nil {
		// The connection closes with runDetached: PID 1 then leaves the
		// command running (detached) with no one to keep its output.
		conn.kill(syscall.SIGKILL)
		return fmt.Errorf("start the sandbox's monitor: %w (%s)", err, fdEvidence(mon))
	}
	s.monitorStarted(m.Process)
	return nil
}

// monitorStarted records monitor m, just started, and returns once it
// runs.
func (s *Sandbox) monitorStarted(m *os.Process) {
	pid := m.Pid
	if start, _, ok := procStart(pid); ok {
		writePidFile(filepath.Join(s.dir, monitorFile), pid, start)
	}
	reapWhenDone(m) // a long-lived caller (serve) reaps it
	// The command runs, and writes into the pipes, before its monitor:
	// start returns once the monitor reads them and answers syncLog, so
	// that a reader of the log right after (docker start, then logs)
	// finds what the command has written.
	s.awaitMonitorReady(pid)
	touch(filepath.Join(s.dir, socketFile))
}

// reapWhenDone reaps child p (a monitor, a port forwarder) once it
// exits: through its pidfd, so that a long-lived caller (serve) with a
// thousand detached containers keeps no thread blocked in a wait for
// each; else by a goroutine's wait.
func reapWhenDone(p *os.Process) {
	pid := p.Pid
	if _, ok := pidwatch.Watch(pid, func(fd int) {
		if !pidwatch.Reap(fd) {
			go unix.Wait4(pid, nil, 0, nil)
		}
	}); ok {
		p.Release()
		return
	}
	go p.Wait()
}

// monitorMain is the end of a monitor process (internal/spawnd/monitor.c),
// which execs this program, under its own pid, once the command has ended
// and its output is in the log: args are the state root, the sandbox id,
// "exited", the command's wait status and "ok", or "lost" when PID 1 went
// away before it reported one. The signals the monitor forwarded stay
// blocked here (the Go runtime keeps a blocked signal blocked), so a late
// kill -s cannot end it half-way.
func monitorMain(args []string) int {
	if len(args) != 5 || args[2] != "exited" {
		fmt.Fprintln(os.Stderr, "slopbox-monitor: internal use only")
		return 2
	}
	// The Go runtime unblocks TERM, HUP, INT, QUIT and ABRT, which the
	// monitor kept blocked, and dies of them: ignored here, a kill -s or
	// stop signal meant for the ended command cannot end this process
	// half-way (its Stop, or a restart's start).
	signal.Ignore(forwardedSignals...)
	root, id := args[0], args[1]
	val, err := strconv.ParseInt(args[3], 10, 32)
	if err != nil {
		return 2
	}
	dir := filepath.Join(root, "c", id)
	p := &proc{lost: args[4] != "ok", status: syscall.WaitStatus(val)}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		return 0 // removed meanwhile
	}
	// The monitor recorded the exit before it exec'd this (monitor.c's
	// write_exit; the start before it removed any earlier record); here
	// only when it could not.
	record, err := os.ReadFile(filepath.Join(dir, exitFile))
	if _, ok := readExit(dir); err != nil || !ok {
		var b bytes.Buffer
		json.NewEncoder(&b).Encode(exitRecord{ExitCode: p.exitCode(), FinishedAt: time.Now().UTC()})
		record = slices.Clone(b.Bytes())
		if atomicfile.WriteVolatile(filepath.Join(dir, exitFile), &b, 0o600) != nil {
			return 0
		}
	}
	if p.lost {
		return 0 // the sandbox went away (stop, rm): its stopper handles the rest
	}
	bk, err := New(root)
	if err != nil {
		return 1
	}
	defer bk.Close()
	if sb, err := bk.Open(id); err == nil && sb.Running() {
		if sb.rec.AutoRemove {
			// Removed with the sandbox: keep how it ended for a waiter
			// (docker run --rm waits for condition=removed).
			bk.keepExit(id, record)
			// An attached client still reading the log (docker run --rm)
			// gets the rest of it before the files go, within a bound.
			waitLogReaders(filepath.Join(dir, logFile))
		}
		if sb.rec.AutoRemove {
			sb.Stop()
			return 0
		}
		// Under the supervision lock: a start by hand holds it over its
		// start, so this stop never kills the helpers of the next run.
		unlock, err := sb.LockSupervision()
		if err == nil {
			if cur, err := bk.Open(id); err == nil && cur.Running() && cur.rec.Pid == sb.rec.Pid {
				cur.Stop()
			}
			unlock()
		} else {
			sb.Stop()
		}
		if sb, err := bk.Open(id); err == nil && !sb.Running() {
			sb.superviseExited(p.exitCode())
		}
	}
	return 0
}

// awaitExitRecord returns once the exit of the main command, which the
// kill of PID 1 has just ended, is recorded: its monitor records it (137)
// when it sees PID 1 gone, and docker stop returns with the exit code in
// inspect. A monitor that has not done so within a bound is killed and
// the record written here. Called by the monitor itself (its own Stop once
// the command ended), it returns at once.
func (s *Sandbox) awaitExitRecord() {
	pid, alive := monitorPid(s.dir)
	if pid == os.Getpid() {
		return
	}
	// The monitor writes it within a millisecond of PID 1's end: polled
	// from 200 µs, backing off to 2 ms.
	nap := 200 * time.Microsecond
	for deadline := time.Now().Add(5 * time.Second); alive && time.Now().Before(deadline); _, alive = monitorPid(s.dir) {
		if _, ok := readExit(s.dir); ok {
			return
		}
		time.Sleep(nap)
		nap = min(2*nap, 2*time.Millisecond)
	}
	if alive {
		killMonitor(s.dir)
	}
	if _, ok := readExit(s.dir); ok || !alive && pid == 0 {
		return // recorded, or no main command ran under a monitor
	}
	s.writeExit(backend.ExitSignalBase + int(syscall.SIGKILL))
}

// writeExit records code as the main command's exit, now.
func (s *Sandbox) writeExit(code int) {
	b, err := json.Marshal(exitRecord{ExitCode: code, FinishedAt: time.Now().UTC()})
	if err == nil {
		atomicfile.WriteVolatile(filepath.Join(s.dir, exitFile), bytes.NewReader(append(b, '\n')), 0o600)
	}
}

// waitLogReaders waits, up to readerGrace, until no reader holds the log
// at path or the one before it (see openLog).
func waitLogReaders(path string) {
	deadline := time.Now().Add(readerGrace)
	for _, p := range []string{path + ".1", path} {
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		for unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		f.Close()
	}
}

// exitsDir keeps the exit records of sandboxes removed when their command
// ended (AutoRemove), for keepExitFor.
const exitsDir = "exits"

// keepExitFor is how long a removed sandbox's exit record is kept.
const keepExitFor = 10 * time.Minute

// keepExit records the exit of sandbox id, which is about to be removed,
// and drops records older than keepExitFor.
func (b *Backend) keepExit(id string, record []byte) {
	dir := filepath.Join(b.root, exitsDir)
	if os.MkdirAll(dir, 0o700) != nil {
		return
	}
	// Old records go, swept at most once a minute: not a stat of every
	// kept record at each removal (a thousand containers removed).
	if exitSweepDue(dir) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.Name() == ".swept" {
				continue
			}
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > keepExitFor {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	atomicfile.WriteVolatile(filepath.Join(dir, id+".json"), bytes.NewReader(record), 0o600)
}

// exitSweepDue reports whether the kept exit records in dir are due a
// sweep (a minute since the last), and if so marks it done: the last
// sweep is the mtime of a stamp file, which every process that removes
// sandboxes (serve, the CLI, each monitor) shares.
func exitSweepDue(dir string) bool {
	stamp := filepath.Join(dir, ".swept")
	now := time.Now()
	if fi, err := os.Stat(stamp); err == nil && now.Sub(fi.ModTime()) < time.Minute {
		return false
	}
	// Two sweeping at once only remove the same old records twice.
	if f, err := os.OpenFile(stamp, os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600); err == nil {
		f.Close()
		os.Chtimes(stamp, now, now)
	}
	return true
}

// KeepRemovedExit records, for RemovedExit, that the main command of a
// sandbox about to be removed ends with code (docker rm -f of a running
// container: 137, its SIGKILL, for a waiter).
func (s *Sandbox) KeepRemovedExit(code int) {
	b, err := json.Marshal(exitRecord{ExitCode: code, FinishedAt: time.Now().UTC()})
	if err == nil {
		s.b.keepExit(s.rec.ID, append(b, '\n'))
	}
}

// RemovedExit returns the exit code and end of the main command of the
// sandbox with full id, removed when it ended (AutoRemove), if that was
// less than keepExitFor ago.
func (b *Backend) RemovedExit(id string) (int, time.Time, bool) {
	var e exitRecord
	data, err := os.ReadFile(filepath.Join(b.root, exitsDir, filepath.Base(id)+".json"))
	if err != nil || json.Unmarshal(data, &e) != nil {
		return 0, time.Time{}, false
	}
	return e.ExitCode, e.FinishedAt, true
}

// forwardedSignals are the signals Signal delivers through the monitor.
// SIGKILL stops the sandbox instead; SIGSTOP cannot be caught; SIGURG and
// SIGCHLD are the Go runtime's and the monitor's own.
var forwardedSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGCONT, syscall.SIGWINCH, syscall.SIGABRT}

// ErrNoMainCommand: the sandbox has no running main command to signal.
var ErrNoMainCommand = errdefs.ErrFailedPrecondition.WithMessage("no main command is running")

// Signal sends sig to the processes of the sandbox's main command (docker
// kill -s), through its monitor. SIGKILL stops the sandbox (Stop).
func (s *Sandbox) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return s.Stop()
	}
	if !slices.Contains(forwardedSignals, os.Signal(sig)) {
		return fmt.Errorf("signal %d (%v) cannot be delivered to a sandbox's command; use one of HUP INT QUIT TERM USR1 USR2 ALRM CONT WINCH ABRT, or KILL", int(sig), sig)
	}
	pid, ok := monitorPid(s.dir)
	if !ok || !s.Running() {
		return fmt.Errorf("sandbox %s: %w (it was created without one, or its command has exited); kill without -s stops it", s.rec.Name, ErrNoMainCommand)
	}
	// The monitor forwards sig once it has set itself up (start waits for
	// that, but another process may be starting it now): until then the
	// signal would end it instead.
	if !s.awaitMonitorReady(pid) {
		return fmt.Errorf("sandbox %s: its monitor (pid %d) is not ready for signals", s.rec.Name, pid)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	if s.rec.Paused {
		// As Docker's stop: the signal is delivered, then the sandbox
		// is unpaused so its command can act on it.
		return s.Unpause()
	}
	return nil
}

// awaitMonitorReady waits until the monitor pid has set itself up
// (monitor.ready): it forwards signals and answers syncLog. It is waited
// for as long as it lives, within a bound that only a stuck monitor
// reaches (a loaded host can delay its set-up by seconds), checking more
// slowly as time goes on. It reports whether the monitor is ready.
func (s *Sandbox) awaitMonitorReady(pid int) bool {
	ready := func() bool {
		b, err := os.ReadFile(filepath.Join(s.dir, monitorReady))
		return err == nil && string(b) == strconv.Itoa(pid)
	}
	wait := time.Millisecond
	for deadline := time.Now().Add(60 * time.Second); !ready(); time.Sleep(wait) {
		if p, alive := monitorPid(s.dir); !alive || p != pid || time.Now().After(deadline) {
			return false
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
	return true
}

// syncWait bounds how long syncLog waits for the monitor's answer: only a
// monitor stopped (SIGSTOP) or stuck reaches it; one rotating the log
// answers within readerGrace.
const syncWait = readerGrace + 3*time.Second

// syncLog returns once the command's output so far is in the log of the
// sandbox in dir: the monitor (monitor.c) reads the command's pipes as
// the command writes, but a moment later, and a reader right after the
// command wrote (docker start, then logs) would find the log without it.
// The monitor closes a connection to its socket once it has logged what
// was in the pipes when it was made. With no monitor running (the
// command has exited, and its output is all in the log), or a socket not
// the monitor's (a peer that is not the monitor pid: something else put
// there), it returns at once. It reports whether the monitor answered.
func syncLog(dir string) bool {
	pid, alive := monitorPid(dir)
	if !alive {
		return false
	}
	var c *net.UnixConn
	err := viaShortPath(filepath.Join(dir, monitorSocket), func(addr string) (err error) {
		c, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
		return err
	})
	if err != nil {
		return false
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || int(cred.Pid) != pid {
		return false
	}
	c.SetReadDeadline(time.Now().Add(syncWait))
	_, err = io.Copy(io.Discard, c) // until the monitor closes it
	return err == nil
}

// monitorPid is the pid of the monitor of the sandbox in dir, if it runs.
func monitorPid(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, monitorFile))
	if err != nil {
		return 0, false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(b), &pid, &start); err != nil || pid <= 1 {
		return 0, false
	}
	st, zombie, ok := procStart(pid)
	return pid, ok && !zombie && st == start
}

// killMonitor kills the monitor of the sandbox in dir, if one runs (and is
// not this process), and waits, bounded, until it is gone.
func killMonitor(dir string) error { return killRecorded(dir, monitorFile, "the monitor") }

// writePidFile records a helper's pid and start time ("PID START\n") in
// path, whole: an rm that reads it meanwhile (to kill what the sandbox
// still runs) gets the old record or the new, never an empty file.
func writePidFile(path string, pid int, start uint64) error {
	return atomicfile.WriteVolatile(path, strings.NewReader(fmt.Sprintf("%d %d\n", pid, start)), 0o600)
}

// signalRecorded SIGKILLs the process recorded ("pid start-time") in
// dir/file, if it still runs, and does not wait for it; false when there
// is no such record.
func signalRecorded(dir, file string) bool {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(b), &pid, &start); err != nil || pid <= 1 || pid == os.Getpid() {
		return false
	}
	// Through a pidfd opened before the process is checked: never a
	// process that took the pid since.
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		defer unix.Close(fd)
		if st, _, ok := procStart(pid); ok && st == start {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		return true
	}
	if st, _, ok := procStart(pid); ok && st == start {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return true
}

// killRecorded kills the process recorded ("pid start-time") in dir/file,
// if it still runs, and waits until it has gone.
func killRecorded(dir, file, what string) error {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(b), &pid, &start); err != nil || pid <= 1 || pid == os.Getpid() {
		return nil
	}
	// Through a pidfd, opened before the process is checked, when there
	// is one: its wait ends once every thread has exited and so the
	// process's files are closed (a forwarder's listening sockets, the
	// host ports). The leader shows as a zombie in /proc as soon as its
	// own thread is done, while the others may still hold them.
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		defer unix.Close(fd)
		if st, _, ok := procStart(pid); !ok || st != start {
			return nil
		}
		// To a leader that is a zombie too: its other threads get it.
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill %s (pid %d) of %s: %w", what, pid, filepath.Base(dir), err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return fmt.Errorf("%s (pid %d) of %s did not exit after SIGKILL", what, pid, filepath.Base(dir))
			}
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
			switch {
			case n > 0:
				return nil
			case err != nil && !errors.Is(err, unix.EINTR):
				return fmt.Errorf("wait for %s (pid %d) of %s: %w", what, pid, filepath.Base(dir), err)
			}
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		st, zombie, ok := procStart(pid)
		if !ok || zombie || st != start {
			return nil
		}
		syscall.Kill(pid, syscall.SIGKILL)
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) of %s did not exit after SIGKILL", what, pid, filepath.Base(dir))
		}
	}
}

// readExit returns the recorded exit of the main command, if any.
func readExit(dir string) (exitRecord, bool) {
	var e exitRecord
	b, err := os.ReadFile(filepath.Join(dir, exitFile))
	if err != nil || json.Unmarshal(b, &e) != nil {
		return e, false
	}
	return e, true
}

// Wait blocks until the sandbox stops and returns its main command's exit
// code (docker wait): 137 when it was killed, 0 for a sandbox with no main
// command that was stopped.
func (s *Sandbox) Wait(ctx context.Context) (int, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if e, ok := readExit(s.dir); ok {
			// As docker wait: back once the sandbox has stopped, which its
			// monitor does right after it records the exit (a remove
			// that follows must not find it running), or once no monitor
			// is left to stop it.
			if _, mon := monitorPid(s.dir); !s.rec.running() || !mon {
				return e.ExitCode, nil
			}
		} else if !s.rec.running() {
			if e, ok := readExit(s.dir); ok {
				return e.ExitCode, nil
			}
			if len(s.rec.Command) == 0 || s.rec.Pid == 0 || s.rec.Reserved {
				return 0, nil
			}
			return backend.ExitSignalBase + int(syscall.SIGKILL), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// exitInfo fills Info's exit fields.
func exitInfo(dir string, i *Info) {
	if e, ok := readExit(dir); ok {
		i.ExitCode, i.FinishedAt = e.ExitCode, e.FinishedAt
	}
}

// The log: JSON lines ({"log","stream","time"}, docker's json-file
// format), written by the monitor (internal/spawnd/monitor.c, whose
// MAX_LOG is maxLog), which keeps at most maxLog bytes in it and the one
// before it (logFile.1), whatever its readers do: a reader that falls more
// than that behind is told it missed output (logTail).
const (
	logFile = "container.log"
	maxLog  = 8 << 20
	// readerGrace is how long a rotation waits for the readers of the log
	// before the one before it (monitor.c's READER_GRACE_MS), and a
	// removal with the command (AutoRemove) for a reader of the log.
	readerGrace = 2 * time.Second
)

type logLine struct {
	Log    string    `json:"log"`
	Stream string    `json:"stream"`
	Time   time.Time `json:"time"`
}

// LogOptions select what Logs prints.
type LogOptions struct {
	Follow     bool
	Tail       int // lines from the end; <0: all
	Timestamps bool
	Since      time.Time
	Until      time.Time // zero: no end; with Follow, it stops once Until has passed
}

// Logs writes the sandbox's log (the main command's output): stdout lines
// to stdout, stderr lines to stderr. With Follow it goes on until the
// sandbox stops, ctx ends or a write fails.
func (s *Sandbox) Logs(ctx context.Context, o LogOptions, stdout, stderr io.Writer) error {
	emit := logEmitter(o, stdout, stderr)
	syncLog(s.dir)
	path := filepath.Join(s.dir, logFile)
	// The current file is opened first, so that nothing written while the
	// one before is read is missed.
	tail := &logTail{path: path, missed: missedNotice(stderr)}
	if o.Follow {
		// Created if the command has written nothing yet: the open log
		// stays readable when the sandbox is removed before its first
		// line was read (docker-py's run(remove=True) follows, waits,
		// removes, then reads).
		if f, err := openLogFile(path, os.O_CREATE); err == nil {
			f.Close()
		}
	}
	tail.f, _ = openLog(path)
	defer tail.close()
	if o.Tail >= 0 {
		// A line the running command has not ended yet is not one yet,
		// as in Docker's log, which keeps it until its newline.
		if err := tail.last(o.Tail, o.Follow || o.Tail > 0 && !s.rec.running(), emit); err != nil {
			return err
		}
	} else {
		if f, err := openLog(path + ".1"); err == nil {
			before := &logTail{f: f}
			err := before.drain(emit)
			before.close()
			if err != nil {
				return err
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := tail.poll(emit); err != nil {
			return err
		}
	}
	if !o.Follow {
		return nil
	}
	return s.followLog(ctx, o, tail, emit)
}

// logEmitter writes one log line of o's window (Since, Until) to stdout
// or stderr, by its stream, after its timestamp with o.Timestamps.
func logEmitter(o LogOptions, stdout, stderr io.Writer) func(logLine) error {
	return func(l logLine) error {
		if !o.Since.IsZero() && l.Time.Before(o.Since) || !o.Until.IsZero() && l.Time.After(o.Until) {
			return nil
		}
		w := stdout
		if l.Stream == "stderr" {
			w = stderr
		}
		if o.Timestamps {
			if _, err := io.WriteString(w, l.Time.Format(time.RFC3339Nano)+" "); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, l.Log)
		return err
	}
}

// followLog is Logs' Follow: it polls tail until the sandbox stops (and
// its monitor has written the last lines), o.Until has passed, ctx ends
// or a write fails.
func (s *Sandbox) followLog(ctx context.Context, o LogOptions, tail *logTail, emit func(logLine) error) error {
	var deadline time.Time
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		stopped := !s.rec.running()
		if err := tail.poll(emit); err != nil {
			return err
		}
		if !o.Until.IsZero() && time.Now().After(o.Until) {
			return nil
		}
		if stopped {
			// The monitor may still be writing the last lines: give it
			// until it records the exit, or a moment.
			if _, ok := readExit(s.dir); ok || s.rec.Pid == 0 || len(s.rec.Command) == 0 {
				return tail.poll(emit)
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(2 * time.Second)
			} else if time.Now().After(deadline) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// logTail reads a log as it grows, across rotations: when its path names
// a new file, the rest of the old one is read first, then the new one from
// its start. A reader more than the log's bound behind finds the old one
// emptied (logWriter.rotate) and is told so through missed.
type logTail struct {
	path    string
	f       *os.File // nil until the log exists
	off     int64    // how far f has been read
	buf     []byte
	pending []byte
	missed  func() error
}

// openLog opens a log file to read, with a shared lock that a rotation
// waits for (logWriter.rotate) while it is open.
func openLog(path string) (*os.File, error) {
	f, err := openLogFile(path, 0)
	if err == nil {
		unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	}
	return f, err
}

// openLogFile opens the log file at path to read (flag: os.O_CREATE or
// 0), a regular file, not through a symlink: the state directory is
// written by root of the store's user namespace too (see monitor.c), and
// this may run as host root, which must not create or read a file
// elsewhere, or wait on a fifo, for it.
func openLogFile(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|flag|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a log file", path)
	}
	return f, nil
}

// missedNotice tells a follower, on w, that the log dropped output it had
// not read yet.
func missedNotice(w io.Writer) func() error {
	return func() error {
		_, err := fmt.Fprintf(w, "slopbox: output dropped here: this reader fell more than the log keeps (2 x %d MiB) behind the command\n", maxLog>>20)
		return err
	}
}

// poll calls emit with each whole line written since the last poll, and
// returns emit's first error.
func (t *logTail) poll(emit func(logLine) error) error {
	for {
		if err := t.drain(emit); err != nil {
			return err
		}
		fi, err := os.Stat(t.path)
		if err != nil {
			return nil // removed, or between a rotation's rename and create
		}
		if t.f != nil {
			if cur, err := t.f.Stat(); err == nil && os.SameFile(fi, cur) {
				return nil
			}
		}
		nf, err := openLog(t.path)
		if err != nil {
			return nil
		}
		if t.f != nil {
			if err := t.drain(emit); err != nil {
				nf.Close()
				return err
			}
			if cur, err := t.f.Stat(); err == nil && cur.Size() < t.off && t.missed != nil {
				if err := t.missed(); err != nil {
					nf.Close()
					return err
				}
			}
			t.f.Close()
		}
		t.f, t.pending, t.off = nf, nil, 0
	}
}

func (t *logTail) drain(emit func(logLine) error) error {
	if t.f == nil {
		return nil
	}
	if t.buf == nil {
		t.buf = make([]byte, 64<<10)
	}
	for {
		n, _ := t.f.Read(t.buf)
		if n == 0 {
			return nil
		}
		t.off += int64(n)
		t.pending = append(t.pending, t.buf[:n]...)
		if err := t.emitPending(emit); err != nil {
			return err
		}
	}
}

// emitPending calls emit with each whole record in t.pending and keeps
// the part after the last newline.
func (t *logTail) emitPending(emit func(logLine) error) error {
	for {
		i := bytes.IndexByte(t.pending, '\n')
		if i < 0 {
			return nil
		}
		var l logLine
		line := t.pending[:i]
		t.pending = t.pending[i+1:]
		if json.Unmarshal(line, &l) == nil {
			if err := emit(l); err != nil {
				return err
			}
		}
	}
}

// last emits the last n lines of the log, from the one before too when the
// current one has fewer, reading both from their ends; poll then goes on
// from where the current one ended.
//
// A line is what Docker's json-file log makes one record of: the output
// of one stream up to a newline, or 16 KiB of it (lineMax). The monitor
// logs a line that a read cut short as several records of its stream, so
// the records are grouped back into lines per stream, and n lines may
// take more records, read from further back until each chosen line's
// start is known. What a stream has written since its last line is not a
// line yet: it is emitted, after the lines, only with partial (a
// follower, which gets the rest from poll, or a command that has ended),
// and never counted.
func (t *logTail) last(n int, partial bool, emit func(logLine) error) error {
	var end int64
	if t.f != nil {
		var err error
		if end, err = t.f.Seek(0, io.SeekEnd); err != nil {
			return err
		}
	}
	n = max(0, min(n, 1<<24))
	if n == 0 && !partial {
		_, _, err := t.lastRecords(end, 0) // nothing to emit: the end is where poll goes on
		return err
	}
	for k := n + 8; ; k *= 2 {
		recs, more, err := t.lastRecords(end, k)
		if err != nil {
			return err
		}
		var records []logLine
		for _, b := range recs {
			var l logLine
			if json.Unmarshal(b, &l) == nil {
				records = append(records, l)
			}
		}
		sel, open, sure := lastLogLines(records, n, more)
		if sure || !more {
			for _, line := range sel {
				for _, l := range line {
					if err := emit(l); err != nil {
						return err
					}
				}
			}
			if partial {
				for _, l := range open {
					if err := emit(l); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
}

// lineMax is the most of a stream's output one line of the log holds, as
// Docker's json-file log (and the monitor's LINE_MAX_BYTES, less the
// start of a character it keeps for the next record: a line ends within
// utf8.UTFMax-1 bytes of it).
const lineMax = 16 << 10

// lastLogLines groups records, oldest first, into lines per stream and
// returns the last n lines (in the order they were ended), the records of
// the lines not ended yet (in the order written), and whether all of
// these are known whole: with more (older records not read), a line that
// begins at its stream's first record here may have begun before.
func lastLogLines(records []logLine, n int, more bool) (lines [][]logLine, open []logLine, sure bool) {
	type line struct {
		recs  []logLine
		size  int
		first bool // begins at its stream's first record here
	}
	cur := map[string]*line{}
	var ended []*line
	for _, r := range records {
		c := cur[r.Stream]
		if c == nil {
			c = &line{first: more}
			cur[r.Stream] = c
		}
		c.recs = append(c.recs, r)
		c.size += len(r.Log)
		// 16 KiB end a line only where its start is known: where a line
		// cut at 16 KiB began depends on what came before.
		if strings.HasSuffix(r.Log, "\n") || !c.first && c.size >= lineMax-(utf8.UTFMax-1) {
			ended = append(ended, c)
			cur[r.Stream] = &line{}
		}
	}
	if len(ended) > n {
		ended = ended[len(ended)-n:]
	}
	sure = true
	for _, l := range ended {
		lines = append(lines, l.recs)
		sure = sure && !l.first
	}
	// Each stream's open line is its last records here, as many as it
	// holds: picked from the end, then put back in order.
	left := map[string]int{}
	for s, c := range cur {
		left[s] = len(c.recs)
		sure = sure && (len(c.recs) == 0 || !c.first)
	}
	for i := len(records) - 1; i >= 0; i-- {
		if s := records[i].Stream; left[s] > 0 {
			left[s]--
			open = append(open, records[i])
		}
	}
	slices.Reverse(open)
	return lines, open, sure
}

// lastRecords returns the last k records (JSON lines) of the log, the
// current file's first end bytes and, when it holds fewer, the one before
// it; t is left to poll on from the end of the current file's last whole
// record. more reports whether older records may exist.
func (t *logTail) lastRecords(end int64, k int) (recs [][]byte, more bool, err error) {
	if t.f != nil {
		var whole int64
		recs, whole, err = lastLines(t.f, end, k)
		if err != nil {
			return nil, false, err
		}
		// A line being written is read whole by poll.
		if _, err := t.f.Seek(whole, io.SeekStart); err != nil {
			return nil, false, err
		}
		t.off = whole
	}
	if len(recs) >= k {
		return recs, true, nil
	}
	f, err := openLog(t.path + ".1")
	if err != nil {
		return recs, false, nil
	}
	defer f.Close()
	fi, err := f.Stat()
	var cur os.FileInfo
	if t.f != nil {
		cur, _ = t.f.Stat()
	}
	// Unless it is the one already read (rotated since).
	if err == nil && (cur == nil || !os.SameFile(fi, cur)) {
		if older, _, err := lastLines(f, fi.Size(), k-len(recs)); err == nil {
			return append(older, recs...), len(older) >= k-len(recs), nil
		}
	}
	return recs, false, nil
}

// lastLines returns the last n whole lines of f's first end bytes, read
// backwards a chunk at a time, and the offset after the last of them.
func lastLines(f *os.File, end int64, n int) ([][]byte, int64, error) {
	var buf []byte
	pos, count := end, 0
	for pos > 0 && count <= n {
		k := min(pos, 64<<10)
		pos -= k
		chunk := make([]byte, k)
		if _, err := f.ReadAt(chunk, pos); err != nil {
			return nil, 0, err
		}
		count += bytes.Count(chunk, []byte{'\n'})
		buf = append(chunk, buf...)
	}
	i := bytes.LastIndexByte(buf, '\n')
	whole := pos + int64(i+1)
	if n == 0 || i < 0 {
		return nil, whole, nil
	}
	lines := bytes.Split(buf[:i], []byte{'\n'})
	if pos > 0 {
		lines = lines[1:] // begun before pos
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, whole, nil
}

func (t *logTail) close() {
	if t.f != nil {
		t.f.Close()
	}
}

// OutputFollower follows the main command's output from the moment it was
// made (docker attach): see FollowOutput.
type OutputFollower struct {
	s    *Sandbox
	tail *logTail
	base time.Time // the end of the run before, if any
}

// FollowOutput starts following the sandbox's log from its current end,
// before the next run starts (docker run attaches before it starts). The
// open log stays readable when an AutoRemove sandbox goes with its command.
func (s *Sandbox) FollowOutput() (*OutputFollower, error) {
	syncLog(s.dir) // what Replay writes is all the command has written
	path := filepath.Join(s.dir, logFile)
	f, err := openLogFile(path, os.O_CREATE)
	if err != nil {
		return nil, err
	}
	unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, err
	}
	// From the end of the last whole record: one the monitor is writing
	// (in pieces, up to 16 KiB) is Copy's, read whole, not half Replay's.
	_, end, err = lastLines(f, end, 0)
	if err == nil {
		_, err = f.Seek(end, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	var base time.Time
	if e, ok := readExit(s.dir); ok {
		base = e.FinishedAt
	}
	return &OutputFollower{s: s, tail: &logTail{path: path, f: f, off: end}, base: base}, nil
}

// Replay writes the log as it stood when following began, the output of
// earlier runs included (docker attach's logs=1): what Copy goes on from,
// so that nothing is written twice or left out between them. Its error is
// a failed write (the client has gone); a part of the log it cannot read
// is said on stderr, and the rest is still written.
func (o *OutputFollower) Replay(stdout, stderr io.Writer) error {
	var werr error
	emit := streamWriter(stdout, stderr)
	write := func(l logLine) error {
		werr = emit(l)
		return werr
	}
	unread := func(err error) error {
		if werr != nil {
			return werr
		}
		_, err = fmt.Fprintf(stderr, "slopbox: part of the log could not be read: %v\n", err)
		return err
	}
	if f, err := openLog(o.tail.path + ".1"); err == nil {
		// A rotation since FollowOutput made the followed file the one
		// before: its part up to the follower's start is read below.
		if cur, serr := o.tail.f.Stat(); serr != nil || !sameFile(f, cur) {
			err = emitRecords(f, write)
		}
		f.Close()
		if err != nil {
			if err := unread(err); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		if err := unread(err); err != nil {
			return err
		}
	}
	if err := emitRecords(io.NewSectionReader(o.tail.f, 0, o.tail.off), write); err != nil {
		return unread(err)
	}
	return nil
}

// sameFile says whether f is the file fi describes.
func sameFile(f *os.File, fi os.FileInfo) bool {
	st, err := f.Stat()
	return err == nil && os.SameFile(st, fi)
}

// emitRecords calls emit with each whole log record r holds, in order.
func emitRecords(r io.Reader, emit func(logLine) error) error {
	t := &logTail{}
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			t.pending = append(t.pending, buf[:n]...)
			if err := t.emitPending(emit); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// streamWriter is an emit that writes each record's output to stdout or
// stderr, as its stream says.
func streamWriter(stdout, stderr io.Writer) func(logLine) error {
	return func(l logLine) error {
		w := stdout
		if l.Stream == "stderr" {
			w = stderr
		}
		_, err := io.WriteString(w, l.Log)
		return err
	}
}

// Copy writes the output to stdout and stderr as it comes, until the run
// that follows FollowOutput has ended (or the sandbox is gone) and all of
// it is written, a write fails, or ctx ends.
func (o *OutputFollower) Copy(ctx context.Context, stdout, stderr io.Writer) error {
	defer o.Close()
	o.tail.missed = missedNotice(stderr)
	emit := streamWriter(stdout, stderr)
	for {
		if err := o.tail.poll(emit); err != nil {
			return err
		}
		ended := false
		if e, ok := readExit(o.s.dir); ok && e.FinishedAt.After(o.base) {
			ended = true
		} else if _, err := os.Stat(filepath.Join(o.s.dir, stateFile)); err != nil {
			ended = true // removed
		}
		if ended {
			return o.tail.poll(emit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Close stops following without copying.
func (o *OutputFollower) Close() {
	o.tail.close()
}

// fdEvidence says what f's descriptor is now, as this process sees it, for
// an error that exec'ing it failed (seen once under load: "permission
// denied" exec'ing the monitor's /proc/self/fd path).
func fdEvidence(f *os.File) string {
	fd := f.Fd()
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return fmt.Sprintf("fd %d: %v", fd, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(fd), &st); err != nil {
		return fmt.Sprintf("fd %d is %s: %v", fd, link, err)
	}
	return fmt.Sprintf("fd %d is %s, mode %o, owner %d; opened as %s", fd, link, st.Mode, st.Uid, f.Name())
}
