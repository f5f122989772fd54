package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
)

// A sandbox's main command is supervised by whoever runs this binary, not
// by a daemon: podman's conmon runs `podman container cleanup` as its
// exit command, and this package's monitor execs this program once the
// command has ended (monitorMain). What a program wants done then (a
// restart policy, a healthcheck while it runs) it registers as its
// Supervisor; the sandbox package only calls it: it holds no policy of
// its own.

// Supervisor is told of every run of a main command started under a
// monitor, whichever process started it (the CLI, serve, a restart).
type Supervisor interface {
	// Started is called in the process that started sb's main command,
	// once it runs. It must return at once: what it does for the length
	// of the run, it does in a process of its own.
	Started(sb *Sandbox)
	// Exited is called in the monitor's own process, once sb's main
	// command has ended with code, its exit is recorded and the sandbox
	// is stopped (never for an AutoRemove sandbox, which is gone by
	// then). It may start sb again. While it runs, sb's monitor is alive
	// (MonitorAlive): a stopper kills it (KillMonitor), under
	// LockSupervision.
	Exited(sb *Sandbox, code int)
}

var supervisor Supervisor

// Supervise registers s, in an init function of the program (before
// reexec.Init, which runs the monitor's end).
func Supervise(s Supervisor) { supervisor = s }

// supervisionLock is the file LockSupervision locks.
const supervisionLock = "supervise.lock"

// LockSupervision takes the sandbox's supervision lock, which a
// supervisor's restart holds while it starts the sandbox and a stop by
// hand takes to mark it stopped: one comes wholly before the other. It
// blocks until the lock is free; the function returned releases it.
func (s *Sandbox) LockSupervision() (func(), error) { return lockSupervision(s.dir, s.rec.Name) }

// lockSupervision is LockSupervision of the sandbox name in dir.
func lockSupervision(dir, name string) (func(), error) {
	fd, err := unix.Open(filepath.Join(dir, supervisionLock), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the supervision of %s: %w", name, err)
	}
	// Bounded: a restart holds it for a start (seconds on a loaded
	// host), never longer; a lock held past the bound is refused rather
	// than waited on for ever.
	for deadline, nap := time.Now().Add(supervisionWait), time.Millisecond; ; nap = min(2*nap, 50*time.Millisecond) {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EWOULDBLOCK && err != unix.EINTR || time.Now().After(deadline) {
			break
		}
		time.Sleep(nap)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock the supervision of %s: %w", name, err)
	}
	var once sync.Once
	return func() { once.Do(func() { unix.Close(fd) }) }, nil
}

// supervisionWait bounds a wait for the supervision lock.
const supervisionWait = 30 * time.Second

// MonitorAlive reports whether the monitor of sb's last run still runs:
// while the command does, and while a Supervisor's Exited does.
func (s *Sandbox) MonitorAlive() bool { return MonitorAlive(s.dir) }

// MonitorAlive is Sandbox.MonitorAlive of the sandbox whose state
// directory is dir (Info.StateDir).
func MonitorAlive(dir string) bool {
	_, alive := monitorPid(dir)
	return alive
}

// InMonitor reports whether this process is sb's monitor (a Supervisor's
// Exited).
func (s *Sandbox) InMonitor() bool {
	pid, alive := monitorPid(s.dir)
	return alive && pid == os.Getpid()
}

// KillMonitor kills sb's monitor, unless it is this process, and waits
// until it is gone: a Supervisor's Exited cut short (a restart waiting
// out its delay).
func (s *Sandbox) KillMonitor() error { return killMonitor(s.dir) }

// Reopen reads sb's record again: it is nil with ErrNotFound once the
// sandbox has been removed.
func (s *Sandbox) Reopen() (*Sandbox, error) { return s.b.Open(s.rec.ID) }

// Backend is the backend sb belongs to.
func (s *Sandbox) Backend() *Backend { return s.b }

// superviseStarted tells the supervisor of a run just started.
func (s *Sandbox) superviseStarted() {
	if supervisor != nil {
		supervisor.Started(s)
	}
}

// superviseExited tells the supervisor of a run that ended.
func (s *Sandbox) superviseExited(code int) {
	if supervisor != nil {
		supervisor.Exited(s, code)
	}
}

// helperPrefix names the pid files of a supervisor's helpers
// (SpawnHelper): "helper-NAME.pid".
const helperPrefix = "helper-"

// SpawnHelper starts handler (a reexec handler of this program) with
// args, for the length of sb's current run: in a session of its own,
// stdio on /dev/null, recorded so that the sandbox's stop and removal
// kill it (a healthcheck's timer). It does not wait for it.
func (s *Sandbox) SpawnHelper(handler string, args ...string) error {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = "slopbox-" + handler
	cmd.Env = append(os.Environ(), reexec.Env+"="+handler)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, devnull
	cmd.Dir = "/" // keeps no caller's directory busy
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s of %s: %w", handler, s.rec.Name, err)
	}
	pid := cmd.Process.Pid
	if start, _, ok := procStart(pid); ok {
		writePidFile(filepath.Join(s.dir, helperPrefix+handler+".pid"), pid, start)
	}
	reapWhenDone(cmd.Process)
	return nil
}

// killSupervisorHelpers kills the helpers SpawnHelper started for the
// sandbox in dir, and waits until they are gone.
func killSupervisorHelpers(dir string) error {
	names, _ := filepath.Glob(filepath.Join(dir, helperPrefix+"*.pid"))
	var errs []error
	for _, n := range names {
		if err := killRecorded(dir, filepath.Base(n), "a supervisor's helper"); err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(n)
	}
	return errors.Join(errs...)
}
