package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/local"
	"github.com/slopbox/slopbox/sandbox"
)

// execFlags are shared by run and exec.
type execFlags struct {
	interactive, asJSON, tty bool
	timeout                  float64
}

func (f *execFlags) register(c *cobra.Command) {
	c.Flags().BoolVarP(&f.interactive, "interactive", "i", false, "pass stdin to the command")
	c.Flags().BoolVarP(&f.tty, "tty", "t", false, "run the command on a terminal of the sandbox's own (with -i: this terminal in raw mode, its size followed)")
	c.Flags().Float64Var(&f.timeout, "timeout", 0, "kill the command (and everything it started) after SECONDS")
	c.Flags().BoolVar(&f.asJSON, "json", false, "print one JSON result (exit_code, stdout, stderr, setup_*, elapsed, timed_out, truncated, …) instead of streaming output")
}

// runFlags are run's flags: the spawn and exec flags it shares, and its
// own.
type runFlags struct {
	sf          spawnFlags
	ef          execFlags
	rm, detach  bool
	backendName string
	// keeper is the pool keeper a run asks first (pool.go), nil when none
	// runs.
	keeper *sandbox.Keeper
}

func runCmd() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run [flags] IMAGE [COMMAND [ARG...]]\n  slopbox run --backend local [--workspace DIR] [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a new sandbox (or on the host with --backend local)",
		Args:  cobra.ArbitraryArgs,
		RunE:  f.run,
	}
	c.Flags().SetInterspersed(false)
	f.sf.register(c.Flags())
	f.ef.register(c)
	c.Flags().BoolVar(&f.rm, "rm", false, "remove the sandbox when the command exits")
	c.Flags().BoolVarP(&f.detach, "detach", "d", false, "start the command in the background and print the sandbox id")
	c.Flags().StringVar(&f.backendName, "backend", "sandbox", "sandbox (containers) or local (on the host, trusted code only)")
	return c
}

// run is run's RunE: the local backend's run, or a sandbox spawned and
// its command started (-d) or run to its end.
func (f *runFlags) run(cmd *cobra.Command, args []string) error {
	ctx, cancel := signalContext()
	defer cancel()
	if err := checkFlags(&f.sf, &f.ef); err != nil {
		return err
	}
	if f.backendName == local.Name {
		return runLocal(cmd, f.sf, f.ef, args)
	}
	if f.backendName != "sandbox" {
		_, err := backend.Open(f.backendName)
		return err
	}
	if err := f.check(args); err != nil {
		return err
	}
	b, err := openBackend()
	if err != nil {
		return err
	}
	if f.keeper = keeperFor(b); f.keeper == nil {
		b.Prewarm() // the spawn helper starts while the image and flags are read
	}
	defer b.Close() // as root, a reservation no spawn took (a bad image, flag, …)
	sb, command, err := f.spawn(ctx, cmd, b, args)
	if err != nil {
		return err
	}
	if f.detach {
		return f.startDetached(ctx, sb, command)
	}
	return f.runForeground(ctx, cmd, sb, command)
}

// check refuses, before anything is created (as docker), a run with no
// image, -d with --json, and -it without a terminal.
func (f *runFlags) check(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("run: no image given")
	}
	if f.detach && f.ef.asJSON {
		return fmt.Errorf("run: -d cannot be combined with --json")
	}
	// As docker: refused before anything is created.
	if !f.detach && f.ef.tty && f.ef.interactive && !term.IsTerminal(int(os.Stdin.Fd())) {
		return &exitError{code: 1, err: errNotATTY}
	}
	return nil
}

// spawn gets the image, reads the flags into a spec and spawns the
// sandbox, its create options saved; it returns the sandbox and the
// command to run in it. It warns of the limits the host cannot enforce.
func (f *runFlags) spawn(ctx contextT, cmd *cobra.Command, b *sandbox.Backend, args []string) (*sandbox.Sandbox, []string, error) {
	img, err := ensureImage(ctx, b, args[0])
	if err != nil {
		return nil, nil, err
	}
	spec, opts, err := f.sf.spec(cmd.Flags(), args[0], args[1:])
	if err != nil {
		return nil, nil, err
	}
	command, err := runCommand(opts, img, args[0], f.rm)
	if err != nil {
		return nil, nil, err
	}
	// -d --rm: removed when stopped or killed, as docker does.
	spec.AutoRemove = f.detach && f.rm
	// --rm: never started again, so its writable layer needs no
	// syncs to the disk.
	spec.Disposable = f.rm
	// Without -d, owned by this process until it is done with it:
	// prune removes it if this process is killed first.
	spawn := b.SpawnForeground
	if f.detach {
		spawn = b.SpawnCommand
	}
	sb := claimFromPool(b, f.keeper, spec, command, f.detach)
	if sb == nil {
		if sb, err = spawn(ctx, spec, command); err != nil {
			return nil, nil, err
		}
	}
	if err := opts.SaveCreated(sb.Info().StateDir, img.Config.Config); err != nil {
		sb.Remove()
		return nil, nil, err
	}
	for _, l := range sb.Unenforced() {
		fmt.Fprintf(os.Stderr, "warning: the %s limit cannot be enforced on this host (see `slopbox doctor`)\n", l)
	}
	return sb, command, nil
}

// startDetached starts command in sb in the background (-d) and prints
// sb's id; a sandbox whose command cannot start is removed.
func (f *runFlags) startDetached(ctx contextT, sb *sandbox.Sandbox, command []string) error {
	err := sb.RunDetached(ctx, backend.ExecRequest{Argv: command}, sandbox.DetachOptions{TTY: f.ef.tty, OpenStdin: f.ef.interactive})
	if err != nil {
		sb.Remove()
		var se *sandbox.StartError
		if errors.As(err, &se) {
			return &exitError{code: se.Code, err: err}
		}
		return err
	}
	fmt.Println(sb.ID())
	return nil
}

// runForeground runs command in sb to its end, then keeps (--keep),
// removes (--rm) or stops sb; the command's exit code is run's.
func (f *runFlags) runForeground(ctx contextT, cmd *cobra.Command, sb *sandbox.Sandbox, command []string) error {
	req := backend.ExecRequest{Argv: command, Timeout: seconds(f.ef.timeout)}
	var code int
	var err error
	if len(f.sf.setup) > 0 && !f.ef.asJSON {
		code, err = runWithSetup(ctx, sb, req, f.ef)
	} else {
		code, err = runIn(cmd, sb, req, f.ef)
	}
	switch {
	case f.sf.keep:
		fmt.Fprintf(os.Stderr, "kept sandbox %s: `slopbox exec -it %s sh` to look inside, `slopbox rm -f %s` to remove it\n", sb.Name(), sb.Name(), sb.Name())
	case f.rm:
		if rerr := sb.RemoveWithVolumes(); rerr != nil && err == nil {
			err = rerr
		}
	default:
		if serr := sb.Stop(); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code: code, silent: true}
	}
	return nil
}

// attacher is what run and exec need from a sandbox.
type attacher interface {
	Attach(ctx contextT, req backend.ExecRequest, stdin, stdout, stderr *os.File, detach bool) (int, error)
	Exec(ctx contextT, req backend.ExecRequest) (*backend.Result, error)
}

// runIn runs req in sb: attached to this process's stdio, on a terminal
// with -t, or buffered into one JSON result with --json.
func runIn(cmd *cobra.Command, sb attacher, req backend.ExecRequest, ef execFlags) (int, error) {
	if s, ok := sb.(terminalAttacher); ok && ef.tty && !ef.asJSON {
		return runTerminal(s, req, ef)
	}
	ctx, cancel := signalContext()
	defer cancel()
	if ef.asJSON {
		if ef.interactive {
			in, err := io.ReadAll(os.Stdin)
			if err != nil {
				return 0, err
			}
			req.Stdin = [][]byte{in}
		}
		res, err := sb.Exec(ctx, req)
		if res != nil {
			printJSON(res)
			return res.ExitCode, nil
		}
		return 0, err
	}
	stdin := os.Stdin
	if !ef.interactive {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return 0, err
		}
		defer devnull.Close()
		stdin = devnull
	}
	return sb.Attach(ctx, req, stdin, os.Stdout, os.Stderr, false)
}

func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// runWithSetup runs req through the entry script and prints the setup
// output (to stderr, marked) apart from the command's.
func runWithSetup(ctx contextT, sb attacher, req backend.ExecRequest, ef execFlags) (int, error) {
	if ef.interactive {
		in, err := io.ReadAll(os.Stdin)
		if err != nil {
			return 0, err
		}
		req.Stdin = [][]byte{in}
	}
	res, err := sb.Exec(ctx, req)
	if res == nil {
		return 0, err
	}
	for _, s := range []string{res.SetupStdout, res.SetupStderr} {
		if strings.TrimSpace(s) != "" {
			fmt.Fprintf(os.Stderr, "--- setup ---\n%s\n--- end of setup ---\n", strings.TrimRight(s, "\n"))
		}
	}
	os.Stdout.WriteString(strings.TrimLeft(res.Stdout, "\n"))
	os.Stderr.WriteString(strings.TrimLeft(res.Stderr, "\n"))
	return res.ExitCode, err
}

// runCommand is the command run runs: the options' over the image's. It
// refuses, as Docker does, none at all, and --rm with a restart policy.
func runCommand(opts dockercompat.CreateOptions, img *image.Image, ref string, rm bool) ([]string, error) {
	if err := dockercompat.CheckRestartPolicy(opts.RestartPolicy, rm); err != nil {
		return nil, err
	}
	command := opts.Command(img.Config.Config.Entrypoint, img.Config.Config.Cmd)
	if len(command) == 0 {
		return nil, fmt.Errorf("run: image %s has no default command; give one", ref)
	}
	return command, nil
}
