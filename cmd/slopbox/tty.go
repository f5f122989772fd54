package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/sandbox"
)

// errNotATTY is docker's refusal of -it when stdin is not a terminal.
var errNotATTY = errors.New("the input device is not a TTY; drop -t (or run under a terminal, e.g. script -qc '…' /dev/null)")

// runTerminal runs req in sb on a terminal of the sandbox's own (-t): this
// terminal in raw mode passes every key through (Ctrl-C, Ctrl-Z reach the
// command as signals from the sandbox's terminal), window size changes
// follow, and the output is copied until the command exits.
// terminalAttacher is what runTerminal needs: a sandbox, or the service's
// container of one.
type terminalAttacher interface {
	AttachTerminal(ctx contextT, req backend.ExecRequest, rows, cols uint16) (*sandbox.Terminal, error)
}

func runTerminal(sb terminalAttacher, req backend.ExecRequest, ef execFlags) (int, error) {
	ctx, cancel := signalContext()
	defer cancel()
	in := int(os.Stdin.Fd())
	if ef.interactive && !term.IsTerminal(in) {
		return 0, &exitError{code: 1, err: errNotATTY}
	}
	sizeFd := int(os.Stdout.Fd())
	if !term.IsTerminal(sizeFd) {
		sizeFd = in
	}
	size := func() (uint16, uint16) {
		w, h, err := term.GetSize(sizeFd)
		if err != nil || w <= 0 || h <= 0 {
			return 24, 80
		}
		return uint16(h), uint16(w)
	}
	rows, cols := size()
	t, err := sb.AttachTerminal(ctx, req, rows, cols)
	var se *sandbox.StartError
	if errors.As(err, &se) {
		fmt.Fprintln(os.Stderr, se.Msg)
		return se.Code, nil
	}
	if err != nil {
		return 0, err
	}
	defer t.Close()
	if ef.interactive {
		old, err := term.MakeRaw(in)
		if err != nil {
			return 0, fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		// Raw mode passes Ctrl-C and Ctrl-Z as bytes: the sandbox's
		// terminal makes them signals for the command.
		defer term.Restore(in, old)
		go io.Copy(t.Master, os.Stdin)
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	copied := make(chan struct{})
	go func() {
		io.Copy(os.Stdout, t.Master) // ends with EIO once the command's side is closed
		close(copied)
	}()
	go func() {
		for {
			select {
			case <-winch:
				t.Resize(size())
			case <-t.Done():
				return
			}
		}
	}()
	code, timedOut, err := t.Wait(ctx, seconds(ef.timeout))
	// What the command wrote last is still in the terminal: read it, but
	// not what a background process keeps writing.
	t.DrainOutput()
	<-copied
	if timedOut {
		fmt.Fprintf(os.Stderr, "\r\nslopbox: the command timed out after %v and was killed\r\n", seconds(ef.timeout))
	}
	return code, err
}
