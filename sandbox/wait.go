package sandbox

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/slopbox/slopbox/backend"
)

// Wait conditions, as docker wait and POST /containers/{id}/wait take
// them.
const (
	WaitNotRunning = "not-running" // "" too: the default
	WaitNextExit   = "next-exit"
	WaitRemoved    = "removed"
)

// ExitGrace is how long a sandbox seen stopped with no exit recorded is
// given for its monitor to record one before it counts as killed (137).
const ExitGrace = 2 * time.Second

// WaitCondition is docker wait, for the CLI and the Engine API alike: it
// returns the exit code of the main command of sandbox id once cond holds.
// not-running (or ""): the sandbox is not running (a sandbox not running
// when asked answers at once with its last exit, 0 for one created);
// next-exit: its command's next exit; removed: it is gone (its exit is
// kept when it went with its command, AutoRemove). A sandbox stopped with
// no exit recorded after ExitGrace counts as killed (137).
func (b *Backend) WaitCondition(ctx context.Context, id, cond string) (int, error) {
	switch cond {
	case "", WaitNotRunning, WaitNextExit, WaitRemoved:
	default:
		return 0, backend.InvalidValue("invalid condition: %q", cond)
	}
	sb, err := b.Open(id)
	if err != nil {
		return 0, err
	}
	id = sb.ID()
	first := sb.Info()
	base := first.FinishedAt
	if first.Running && first.FinishedAt.After(first.LastExec) {
		// Its command has ended, and the exit (this run's: start clears
		// the last one) is recorded, but the sandbox is not stopped yet.
		base = time.Time{}
	}
	code := -1
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var stopped time.Time // when it was first seen stopped with no new exit
	// Started, with a command, but no exit recorded yet: killed a moment
	// ago (its monitor records the exit just after), or stopped under its
	// monitor. Its last code is not the stale one in its state.
	pending := cond != WaitNextExit && !first.Running && first.Pid != 0 && len(first.Command) > 0 && first.FinishedAt.IsZero()
	ran := first.Running || pending // seen running since the request
	for {
		cur, err := b.Open(id)
		if err != nil {
			// Removed: its exit is kept when it went with its command.
			if c, _, ok := b.RemovedExit(id); ok {
				code = c
			}
			return max(code, 0), nil
		}
		info := cur.Info()
		switch {
		case info.Running:
			stopped, ran = time.Time{}, true
		case info.FinishedAt.After(base):
			// It ran and its exit is recorded.
			code = info.ExitCode
		case cond != WaitNextExit && !first.Running && !pending && code < 0:
			// not-running (and removed, until it goes) of a sandbox not
			// running when asked: its last exit, 0 for one created.
			code = info.ExitCode
		case !ran:
		case stopped.IsZero():
			stopped = time.Now()
		case code < 0 && time.Since(stopped) > ExitGrace && len(info.Command) > 0:
			// Stopped under its monitor, which recorded no exit: killed.
			code = backend.ExitSignalBase + int(syscall.SIGKILL)
			base = time.Now() // counted once
		}
		if code >= 0 && cond != WaitRemoved {
			return code, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for %s: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}
