package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/local"
)

// runLocal runs a command on the host through the local backend (trusted
// code only): output streams as it is produced, unless --json.
func runLocal(cmd *cobra.Command, sf spawnFlags, ef execFlags, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("run --backend local: no command given (slopbox run --backend local -- CMD ...)")
	}
	ws := sf.workspace
	if ws == "" {
		var err error
		if ws, err = os.Getwd(); err != nil {
			return err
		}
	}
	env, err := parseEnv(sf.env)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	sb, err := local.New().Spawn(ctx, backend.SpawnSpec{Workspace: ws, Env: env, User: sf.user, DisableSetup: true})
	if err != nil {
		return err
	}
	defer sb.Cleanup()
	req := backend.ExecRequest{Argv: args, Timeout: seconds(ef.timeout)}
	if ef.interactive {
		in, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		req.Stdin = [][]byte{in}
	}
	var res *backend.Result
	if ef.asJSON || ef.interactive {
		res, err = sb.Exec(ctx, req)
		if res != nil && !ef.asJSON {
			os.Stdout.WriteString(res.Stdout)
			os.Stderr.WriteString(res.Stderr)
		}
	} else {
		res, err = stream(ctx, sb, req)
	}
	if res == nil {
		return err
	}
	if ef.asJSON {
		printJSON(res)
	}
	if res.TimedOut && !ef.asJSON {
		fmt.Fprintf(os.Stderr, "slopbox: command timed out after %gs and was killed\n", ef.timeout)
	}
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode, silent: true}
	}
	return nil
}

// stream copies a Stream's chunks to stdout/stderr as they arrive.
func stream(ctx context.Context, sb backend.Sandbox, req backend.ExecRequest) (*backend.Result, error) {
	events, err := sb.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	var res *backend.Result
	for ev := range events {
		switch ev.Kind {
		case backend.EventStdout:
			os.Stdout.WriteString(ev.Data)
		case backend.EventStderr:
			os.Stderr.WriteString(ev.Data)
		case backend.EventFinished:
			res = ev.Result
		}
	}
	if res == nil {
		return nil, fmt.Errorf("stream ended without a result: %w", ctx.Err())
	}
	return res, nil
}
