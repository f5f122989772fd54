package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/backendkit"
)

// StartError is a command that could not be started in the sandbox: not
// found (Code 127) or not executable (126), as docker and shells report it.
type StartError struct {
	Code int
	Msg  string
}

func (e *StartError) Error() string { return e.Msg }

// Terminal is a command running on a pseudo-terminal of the sandbox's own
// (docker run/exec -t). The terminal lives in the sandbox's devpts
// instance; the caller holds only its master: what the command writes is
// read from Master, what is written to Master is the command's input
// (line discipline and job control are the sandbox's terminal's).
type Terminal struct {
	Master *os.File
	conn   *agentConn
	s      *Sandbox

	once sync.Once
	done chan struct{}
	typ  uint32
	val  int32
	err  error
}

// AttachTerminal starts req on a new terminal of rows×cols (0: unsized).
// A command that cannot be started gives a *StartError.
func (s *Sandbox) AttachTerminal(ctx context.Context, req backend.ExecRequest, rows, cols uint16) (*Terminal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req.NoSetup = true
	req.Env = s.termEnv(req.Env)
	cmd, _, err := s.command(req)
	if err != nil {
		return nil, err
	}
	cmd.tty, cmd.rows, cmd.cols = true, rows, cols
	conn, err := s.dial()
	if err != nil {
		return nil, err
	}
	master, err := s.startTerminal(conn, cmd)
	if err != nil {
		conn.close()
		return nil, err
	}
	t := &Terminal{Master: master, conn: conn, s: s, done: make(chan struct{})}
	go func() {
		t.typ, t.val, t.err = conn.reply(0)
		close(t.done)
	}()
	return t, nil
}

// startTerminal sends cmd (a tty request) on conn and returns the
// terminal's master.
func (s *Sandbox) startTerminal(conn *agentConn, cmd *execRequest) (*os.File, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	touch(filepath.Join(s.dir, socketFile))
	_, master, execErr, err := conn.startTTY(cmd, devnull, devnull, devnull)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	if execErr != nil {
		var ee *execError
		if errors.As(execErr, &ee) && !ee.cwd {
			return nil, &StartError{Code: ee.code, Msg: ee.msg}
		}
		return nil, fmt.Errorf("exec: %w", execErr)
	}
	return master, nil
}

// termEnv adds TERM=xterm, as docker does for a terminal, unless the
// sandbox or the request sets TERM.
func (s *Sandbox) termEnv(env map[string]string) map[string]string {
	if _, ok := env["TERM"]; ok {
		return env
	}
	if _, ok := s.rec.Env["TERM"]; ok {
		return env
	}
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	out["TERM"] = "xterm"
	return out
}

// Resize sets the terminal's size; the command gets SIGWINCH.
func (t *Terminal) Resize(rows, cols uint16) error {
	return SetWinsize(t.Master, rows, cols)
}

// TerminalDrain bounds how long what is left in a terminal is read once its
// command has exited (DrainOutput).
const TerminalDrain = 2 * time.Second

// DrainOutput is for once the command has exited: what it wrote last is
// still in the terminal, and a reader of Master gets it, then EIO once the
// command's side is closed; but a background process holding the terminal
// may keep writing, so reads end after TerminalDrain. The bound is
// generous: on a loaded host a reader may not run for a while, and a read
// whose deadline has passed reads nothing.
func (t *Terminal) DrainOutput() {
	t.Master.SetReadDeadline(time.Now().Add(TerminalDrain))
}

// Done is closed when the command has exited.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// Wait returns the command's exit code once it exits; a cancelled ctx or
// timeout (0: none) kills the command's whole tree first.
func (t *Terminal) Wait(ctx context.Context, timeout time.Duration) (code int, timedOut bool, err error) {
	var tc <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		tc = tm.C
	}
	select {
	case <-t.done:
	case <-tc:
		timedOut = true
	case <-ctx.Done():
	}
	select {
	case <-t.done:
	default:
		t.conn.kill(syscall.SIGKILL)
		select {
		case <-t.done:
		case <-time.After(backendkit.ReapMax):
			return -1, timedOut, errors.New("exec: the command did not exit after SIGKILL")
		}
	}
	touch(filepath.Join(t.s.dir, socketFile))
	p := &proc{lost: t.err != nil || t.typ != replyExited, status: syscall.WaitStatus(t.val)}
	return p.exitCode(), timedOut, nil
}

// Close releases the terminal (and kills the command if it still runs).
func (t *Terminal) Close() {
	t.once.Do(func() {
		t.conn.close()
		t.Master.Close()
	})
}

// SetWinsize sets the size of terminal master f through its raw fd, not
// Fd(): Fd puts the file (and every duplicate of its description) in
// blocking mode, after which read deadlines no longer end a read.
func SetWinsize(f *os.File, rows, cols uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}
