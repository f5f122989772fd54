package backendkit

import (
	"context"
	"fmt"

	"github.com/slopbox/slopbox/backend"
)

// Runner is how a backend starts, waits for and records one command; its
// Exec and Stream are every backend's backend.Sandbox.Exec and Stream.
type Runner[P any] struct {
	// What prefixes a cancelled context's error ("exec", "local: exec").
	What string
	// Start starts req (it claims the Slot).
	Start func(ctx context.Context, req backend.ExecRequest) (P, error)
	// Wait collects the command's output until it exits: buffered, or
	// streamed through emit.
	Wait func(ctx context.Context, p P, buffered bool, emit func(backend.EventKind, string)) *backend.Result
	// Finish records the result (it frees the Slot).
	Finish func(p P, res *backend.Result)
}

// Exec runs one command to completion. When ctx ends first the command is
// killed and the partial Result comes back with ctx's error.
func (r Runner[P]) Exec(ctx context.Context, req backend.ExecRequest) (*backend.Result, error) {
	p, err := r.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	res := r.Wait(ctx, p, true, nil)
	r.Finish(p, res)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("%s: %w", r.What, err)
	}
	return res, nil
}

// Stream runs one command and sends output chunks as they are read, then
// one finished event. Stdin is refused (backend.ErrStdinInStream). The
// caller must drain the channel or cancel ctx; cancelling kills the
// command.
func (r Runner[P]) Stream(ctx context.Context, req backend.ExecRequest) (<-chan backend.Event, error) {
	if req.Stdin != nil {
		return nil, backend.ErrStdinInStream
	}
	p, err := r.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	return StreamEvents(ctx, func(emit func(backend.EventKind, string)) *backend.Result {
		res := r.Wait(ctx, p, false, emit)
		r.Finish(p, res)
		return res
	}), nil
}
