package service

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/sandbox"
)

// StopByHand marks sb stopped (or killed) by hand, before the signal: the
// exit of its current run is not answered by its restart policy, and a
// restart waiting out its delay is cancelled. It reports whether one was,
// and returns sb as it is now (a restart that was starting it has).
func StopByHand(sb *sandbox.Sandbox) (*sandbox.Sandbox, bool, error) { return markStopped(sb) }

// StartByHand is what a start by hand does before the start: the stopped
// mark goes, a pending restart is cancelled (reported), and restarts
// count from 0 again, as dockerd's.
// It returns with the supervision lock held: the caller starts the
// sandbox, then calls unlock (also on an error).
func StartByHand(sb *sandbox.Sandbox) (cur *sandbox.Sandbox, pending bool, unlock func(), err error) {
	return markStarted(sb)
}

// Start is docker start of sb: a start by hand, then its main command
// under its monitor, given what an attached client gives it (a).
func Start(ctx context.Context, sb *sandbox.Sandbox, a sandbox.AttachedStart) (*sandbox.Sandbox, error) {
	if sb.Running() {
		return sb, nil // as docker start of a running container: nothing to do
	}
	cur, _, unlock, err := StartByHand(sb)
	defer unlock()
	if err != nil {
		return cur, err
	}
	return cur, cur.StartAttached(ctx, a)
}

// Stop is docker stop of sb: sig to its main command (its stop signal
// when 0), every process killed after grace. A restarting sb has its
// restart cancelled (restarting: true) and stays stopped.
func Stop(ctx context.Context, sb *sandbox.Sandbox, sig syscall.Signal, grace time.Duration) (restarting bool, err error) {
	cur, restarting, err := StopByHand(sb)
	if err != nil || !cur.Running() {
		return restarting, err
	}
	return restarting, cur.StopGrace(ctx, sig, grace)
}

// IsFatal reports whether sig, sent by docker kill, stops sb by hand: a
// SIGKILL or its stop signal does; another (SIGHUP, SIGUSR1, …) leaves
// its restart policy in place, as docker kill's documentation says.
func IsFatal(sb *sandbox.Sandbox, sig syscall.Signal) bool {
	stopSig, _ := dockercompat.StopSignal(sb.Info().StateDir, "")
	return sig == syscall.SIGKILL || sig == stopSig
}

// Kill is docker kill of sb with sig.
func Kill(sb *sandbox.Sandbox, sig syscall.Signal) error {
	if IsFatal(sb, sig) {
		cur, _, err := StopByHand(sb)
		if err != nil {
			return err
		}
		sb = cur
	}
	return sb.Signal(sig)
}

// CheckRemove refuses, as dockerd does, the removal without force of a
// running or restarting container.
func CheckRemove(sb *sandbox.Sandbox, force bool) error {
	switch {
	case force:
		return nil
	case Restarting(sb):
		return ErrRemoveRestarting(sb.ID())
	case sb.Running():
		return errdefs.ErrConflict.WithMessage(dockercompat.ErrRemoveRunning(sb.ID()).Error())
	}
	return nil
}

// Remove is docker rm of sb (-f: force, -v: volumes).
func Remove(sb *sandbox.Sandbox, force, volumes bool) error {
	if err := CheckRemove(sb, force); err != nil {
		return err
	}
	cur, _, err := StopByHand(sb)
	if err != nil {
		return err
	}
	if volumes {
		return cur.RemoveWithVolumes()
	}
	return cur.Remove()
}

// ErrRemoveRestarting is the 409 of a removal without force of a
// restarting container, in the words of dockerd 20.10 (the API 1.41 the
// clients slopbox is tested with speak; docker-py matches "You cannot
// remove ").
func ErrRemoveRestarting(id string) error {
	return errdefs.ErrConflict.WithMessage(fmt.Sprintf("You cannot remove a restarting container %s. Stop the container before attempting removal or force remove", id))
}
