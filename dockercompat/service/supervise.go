// Supervision follows podman's: conmon runs `podman container cleanup`
// when a container's command ends, and that process applies the restart
// policy. Here the sandbox's monitor execs this program at the end of a
// run and calls the Supervisor this package registers (Exited); a run's
// start (Started) starts the healthcheck's timer, a process of its own
// for the length of the run. serve only reports what they do.
package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/sandbox"
)

func init() { sandbox.Supervise(supervisor{}) }

// stoppedFile marks a container stopped or killed by hand (docker stop,
// kill, rm -f): the exit of its current run is not answered by its
// restart policy. A start by hand removes it.
const stoppedFile = "stopped-by-hand"

// pendingFile marks a restart waiting out its delay: only then may a
// stopper kill the monitor (once the sandbox is wholly stopped, its
// helpers too).
const pendingFile = "restart-pending"

type supervisor struct{}

func (supervisor) Started(sb *sandbox.Sandbox) { startHealth(sb) }

// Exited applies sb's restart policy to the run that ended with code: it
// waits out the delay (100 ms, doubling with each restart up to a
// minute, as dockerd's) and starts sb again, unless it was stopped by
// hand, started, or removed meanwhile. It runs in sb's monitor, which a
// stop by hand kills while it waits.
func (supervisor) Exited(sb *sandbox.Sandbox, code int) {
	dir := sb.Info().StateDir
	n := dockercompat.RestartCount(dir)
	if !restarts(dockercompat.LoadCreated(dir).RestartPolicy, code, n) || stoppedByHand(dir) {
		return
	}
	pending := filepath.Join(dir, pendingFile)
	if f, err := os.OpenFile(pending, os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600); err != nil {
		return
	} else {
		f.Close()
	}
	// In slices: a sandbox removed meanwhile (its state directory gone)
	// or stopped by hand ends the wait. The mark is read after pending is
	// made, and a stopper reads pending after its mark: one sees the
	// other, so a stop never leaves this waiting out its delay.
	for end := time.Now().Add(RestartDelay(n)); ; {
		if _, err := os.Lstat(pending); err != nil {
			return
		}
		if stoppedByHand(dir) {
			os.Remove(pending)
			return
		}
		if !time.Now().Before(end) {
			break
		}
		time.Sleep(min(time.Until(end), 100*time.Millisecond))
	}
	unlock, err := sb.LockSupervision()
	if err != nil {
		return
	}
	defer unlock()
	// The pending mark stays until the start is done: restarting until
	// then (RestartingInfo).
	defer os.Remove(pending)
	cur, err := sb.Reopen()
	if err != nil || cur.Running() || stoppedByHand(dir) {
		return // removed, started by hand, or stopped by hand meanwhile
	}
	if err := dockercompat.SetRestartCount(dir, n+1); err != nil {
		return
	}
	if err := cur.Start(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "slopbox: restart of %s per its policy: %v\n", cur.Name(), err)
	}
}

// RestartDelay is the wait before the restart that follows n restarts.
func RestartDelay(n int) time.Duration {
	return min(100*time.Millisecond<<min(n, 10), time.Minute)
}

// restarts reports whether policy p restarts a container whose run ended
// with code after n restarts.
func restarts(p dockercompat.RestartPolicy, code, n int) bool {
	switch p.Name {
	case "always", "unless-stopped":
		return true
	case "on-failure":
		return code != 0 && (p.MaximumRetryCount <= 0 || n < p.MaximumRetryCount)
	}
	return false
}

func stoppedByHand(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, stoppedFile))
	return err == nil
}

// WillRestart reports whether sb's restart policy answers the exit of its
// run with code (not stopped by hand): serve's watch follows it to the
// next run.
func WillRestart(sb *sandbox.Sandbox, code int) bool { return willRestart(sb.Info().StateDir, code) }

func willRestart(dir string, code int) bool {
	return restarts(dockercompat.LoadCreated(dir).RestartPolicy, code, dockercompat.RestartCount(dir)) && !stoppedByHand(dir)
}

// Restarting reports whether sb waits for its restart policy to start it
// again (inspect's State.Restarting): its run has ended, its policy
// answers that, and its monitor still lives to carry it out.
func Restarting(sb *sandbox.Sandbox) bool { return RestartingInfo(sb.Info()) }

// RestartingInfo is Restarting of the sandbox i describes.
func RestartingInfo(i sandbox.Info) bool {
	if i.Running || !sandbox.MonitorAlive(i.StateDir) {
		return false
	}
	if _, err := os.Lstat(filepath.Join(i.StateDir, pendingFile)); err == nil {
		return true // waiting out its delay, or starting it
	}
	// Ended a moment ago: its monitor decides next.
	return !i.FinishedAt.IsZero() && willRestart(i.StateDir, i.ExitCode)
}

// markStopped marks sb stopped by hand and cancels a restart waiting out
// its delay. It reports whether one was (sb was restarting), and returns
// sb as it is now: a restart that was starting it has done so.
func markStopped(sb *sandbox.Sandbox) (*sandbox.Sandbox, bool, error) {
	unlock, err := sb.LockSupervision()
	if err != nil {
		return sb, false, err
	}
	defer unlock()
	dir := sb.Info().StateDir
	f, err := os.OpenFile(filepath.Join(dir, stoppedFile), os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return sb, false, err
	}
	f.Close()
	return cancelRestart(sb)
}

// cancelRestart ends a restart waiting out its delay (its monitor), under
// the supervision lock.
func cancelRestart(sb *sandbox.Sandbox) (*sandbox.Sandbox, bool, error) {
	cur, err := sb.Reopen()
	if err != nil {
		return sb, false, err
	}
	pending := filepath.Join(cur.Info().StateDir, pendingFile)
	if _, err := os.Lstat(pending); err != nil || cur.Running() {
		return cur, false, nil
	}
	if !cur.MonitorAlive() || cur.InMonitor() {
		os.Remove(pending) // its monitor died waiting
		return cur, false, nil
	}
	if err := cur.KillMonitor(); err != nil {
		return cur, true, err
	}
	os.Remove(pending)
	return cur, true, nil
}

// markStarted is a start by hand: the stopped mark goes, a pending
// restart is cancelled, and restarts count from 0 again (dockerd's). It
// reports whether a restart was pending.
//
// It returns with the supervision lock held (unlock releases it, also on
// an error): the caller starts the sandbox under it, so that a monitor
// ending the last run (Exited) does not start it too.
func markStarted(sb *sandbox.Sandbox) (cur *sandbox.Sandbox, pending bool, unlock func(), err error) {
	unlock, err = sb.LockSupervision()
	if err != nil {
		return sb, false, func() {}, err
	}
	dir := sb.Info().StateDir
	if err := os.Remove(filepath.Join(dir, stoppedFile)); err != nil && !os.IsNotExist(err) {
		return sb, false, unlock, err
	}
	cur, pending, err = cancelRestart(sb)
	if err != nil {
		return cur, pending, unlock, err
	}
	if dockercompat.RestartCount(dir) != 0 {
		err = dockercompat.SetRestartCount(dir, 0)
	}
	return cur, pending, unlock, err
}
