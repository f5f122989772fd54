package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
	if err := refuseLocal(cmd, sf); err != nil {
		return err
	}
	ws := sf.workspace
	if ws == "" {
		var err error
		if ws, err = workspaceAbs("."); err != nil {
			return err
		}
	}
	env, err := parseEnv(sf.env)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	sb, err := local.New().Spawn(ctx, backend.SpawnSpec{Workspace: ws, Env: env, User: sf.user,
		DisableSetup: len(sf.setup) == 0, Setup: backend.Setup{Commands: sf.setup}})
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
	if ef.asJSON || ef.interactive || len(sf.setup) > 0 {
		// Setup output is reported apart, as run does in a sandbox.
		res, err = sb.Exec(ctx, req)
		if res != nil && !ef.asJSON {
			for _, s := range []string{res.SetupStdout, res.SetupStderr} {
				if strings.TrimSpace(s) != "" {
					fmt.Fprintf(os.Stderr, "--- setup ---\n%s\n--- end of setup ---\n", strings.TrimRight(s, "\n"))
				}
			}
			os.Stdout.WriteString(strings.TrimLeft(res.Stdout, "\n"))
			os.Stderr.WriteString(strings.TrimLeft(res.Stderr, "\n"))
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

// refuseLocal names the flags the local backend cannot honour: it runs
// the command on the host, with no isolation to limit, mount into or take
// the network from. --setup is honoured (the entry script runs it).
func refuseLocal(cmd *cobra.Command, sf spawnFlags) error {
	why := map[string]string{
		"memory":     "it cannot limit memory on the host",
		"cpus":       "it cannot limit CPUs on the host",
		"pids-limit": "it cannot limit processes on the host",
		"volume":     "commands see the host's files at their own paths; there is nothing to mount into",
	}
	for _, name := range []string{"memory", "cpus", "pids-limit", "volume"} {
		if cmd.Flags().Changed(name) {
			flag := "--" + name
			if name == "volume" {
				flag = "-v/--volume"
			}
			return fmt.Errorf("run --backend local: %s is not supported: the local backend runs the command on the host, and %s (use the sandbox backend)", flag, why[name])
		}
	}
	if (cmd.Flags().Changed("network") || cmd.Flags().Changed("net")) && sf.network() != backend.NetworkHost {
		return fmt.Errorf("run --backend local: --network %s is not supported: the local backend runs the command on the host, with the host's network (only --network host is accepted; use the sandbox backend)", sf.network())
	}
	return nil
}

// workspaceAbs makes a workspace path absolute against the kernel's path
// of the current directory (/proc/self/cwd), not $PWD as filepath.Abs
// may: $PWD can name it through a symlink, which a sandbox writing the
// directory it lies in could point elsewhere afterwards.
func workspaceAbs(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	cwd, err := os.Readlink("/proc/self/cwd")
	if err != nil {
		return "", err
	}
	return filepath.Join(cwd, p), nil
}
