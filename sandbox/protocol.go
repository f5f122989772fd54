package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Wire constants shared with agent.c; TestProtocolMatchesAgent reads
// agent.c and fails when the two differ.
const (
	agentMagic    = 0x534c4f50
	opExec        = 1
	opKill        = 2
	opDial        = 3
	protoTCP      = 6
	protoUDP      = 17
	flagDetach    = 1
	flagTTY       = 2
	flagMakeCwd   = 4
	replyStarted  = 1
	replyFailed   = 2
	replyExited   = 3
	cwdFailedFlag = 1 << 16
)

// execRequest is one command for PID 1.
type execRequest struct {
	argv   []string
	env    []string
	cwd    string
	uid    uint32
	gid    uint32
	groups []uint32
	detach bool
	// tty runs the command on a new pseudo-terminal of the sandbox's
	// own; rows and cols size it.
	tty        bool
	rows, cols uint16
	// makeCwd creates a missing cwd first, as the sandbox's root: the
	// sandbox's own working directory (docker run -w), which Docker
	// creates; an exec's -w is not.
	makeCwd bool
	// cgroupProcs, when set, is the exec's own cgroup's cgroup.procs,
	// opened for writing: the command joins it before it execs.
	cgroupProcs *os.File
}

func (r *execRequest) encode() []byte {
	var b bytes.Buffer
	var flags uint32
	if r.detach {
		flags |= flagDetach
	}
	if r.tty {
		flags |= flagTTY
	}
	if r.makeCwd {
		flags |= flagMakeCwd
	}
	winsize := uint32(r.rows)<<16 | uint32(r.cols)
	hdr := []uint32{agentMagic, opExec, flags, r.uid, r.gid, uint32(len(r.groups)), uint32(len(r.argv)), uint32(len(r.env)), uint32(len(r.cwd)), winsize}
	b.Write(make([]byte, 4)) // length, filled in below
	binary.Write(&b, binary.NativeEndian, hdr)
	binary.Write(&b, binary.NativeEndian, r.groups)
	b.WriteString(r.cwd)
	for _, s := range r.argv {
		b.WriteString(s)
		b.WriteByte(0)
	}
	for _, s := range r.env {
		b.WriteString(s)
		b.WriteByte(0)
	}
	out := b.Bytes()
	binary.NativeEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// agentConn is one exec's connection to a sandbox's PID 1.
type agentConn struct {
	c *net.UnixConn
}

// errAgentGone is wrapped when PID 1 cannot be reached: the sandbox stopped.
var errAgentGone = errors.New("sandbox is not running")

func dialAgent(sock string) (*agentConn, error) {
	var c *net.UnixConn
	err := viaShortPath(sock, func(addr string) (err error) {
		c, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", errAgentGone, err)
	}
	return &agentConn{c: c}, nil
}

// viaShortPath calls f with an address for the socket at path that fits
// sun_path (108 bytes with its NUL): path itself, or, when path is longer
// (a deep --root), the socket's name under an O_PATH descriptor of its
// directory, /proc/self/fd/N/NAME, as runc and podman reach theirs. Both
// ends of PID 1's socket go through it, so a state root of any depth works.
func viaShortPath(path string, f func(addr string) error) error {
	if len(path) < len(unix.RawSockaddrUnix{}.Path) {
		return f(path)
	}
	d, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(d)
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", d, filepath.Base(path)))
}

// start sends req with the three stdio files and waits for PID 1's answer:
// the pid of the started command, or the errno of a failed exec.
func (a *agentConn) start(req *execRequest, stdin, stdout, stderr *os.File) (pid int, execErr error, err error) {
	pid, _, execErr, err = a.startTTY(req, stdin, stdout, stderr)
	return pid, execErr, err
}

// startTTY is start that also returns the terminal's master when req.tty.
func (a *agentConn) startTTY(req *execRequest, stdin, stdout, stderr *os.File) (pid int, master *os.File, execErr error, err error) {
	msg := req.encode()
	fds := []int{int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd())}
	if req.cgroupProcs != nil {
		fds = append(fds, int(req.cgroupProcs.Fd()))
	}
	rights := syscall.UnixRights(fds...)
	n, _, err := a.c.WriteMsgUnix(msg, rights, nil)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("send exec request: %w", err)
	}
	if n < len(msg) {
		if _, err := a.c.Write(msg[n:]); err != nil {
			return 0, nil, nil, fmt.Errorf("send exec request: %w", err)
		}
	}
	typ, val, master, err := a.replyFile(30 * time.Second)
	if err != nil {
		return 0, nil, nil, err
	}
	switch {
	case typ == replyStarted && req.tty && master == nil:
		return 0, nil, nil, errors.New("the sandbox init sent no terminal")
	case typ == replyStarted:
		return int(val), master, nil, nil
	case master != nil:
		master.Close()
	}
	if typ == replyFailed {
		return 0, nil, execFailure(req, val), nil
	}
	return 0, nil, nil, fmt.Errorf("unexpected reply %d from the sandbox init", typ)
}

// replyFile reads one reply and the file passed with it, if any.
func (a *agentConn) replyFile(timeout time.Duration) (uint32, int32, *os.File, error) {
	var buf [8]byte
	oob := make([]byte, syscall.CmsgSpace(4))
	a.c.SetReadDeadline(time.Now().Add(timeout))
	defer a.c.SetReadDeadline(time.Time{})
	n, oobn, _, _, err := a.c.ReadMsgUnix(buf[:], oob)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("%w: %v", errAgentGone, err)
	}
	var f *os.File
	if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			fds, _ := syscall.ParseUnixRights(&m)
			for _, fd := range fds {
				syscall.CloseOnExec(fd)
				if f == nil {
					syscall.SetNonblock(fd, true)
					f = os.NewFile(uintptr(fd), "/dev/ptmx")
				} else {
					syscall.Close(fd)
				}
			}
		}
	}
	if n < len(buf) {
		if _, err := io.ReadFull(a.c, buf[n:]); err != nil {
			if f != nil {
				f.Close()
			}
			return 0, 0, nil, fmt.Errorf("%w: %v", errAgentGone, err)
		}
	}
	return binary.NativeEndian.Uint32(buf[:4]), int32(binary.NativeEndian.Uint32(buf[4:])), f, nil
}

// reply reads one reply; timeout bounds the wait (0: none).
func (a *agentConn) reply(timeout time.Duration) (uint32, int32, error) {
	var buf [8]byte
	if timeout > 0 {
		a.c.SetReadDeadline(time.Now().Add(timeout))
		defer a.c.SetReadDeadline(time.Time{})
	}
	if _, err := io.ReadFull(a.c, buf[:]); err != nil {
		return 0, 0, fmt.Errorf("%w: %v", errAgentGone, err)
	}
	return binary.NativeEndian.Uint32(buf[:4]), int32(binary.NativeEndian.Uint32(buf[4:])), nil
}

// kill asks PID 1 to send sig to the command's whole session.
func (a *agentConn) kill(sig syscall.Signal) error {
	msg := make([]byte, 16)
	binary.NativeEndian.PutUint32(msg[0:], 12)
	binary.NativeEndian.PutUint32(msg[4:], agentMagic)
	binary.NativeEndian.PutUint32(msg[8:], opKill)
	binary.NativeEndian.PutUint32(msg[12:], uint32(sig))
	_, err := a.c.Write(msg)
	return err
}

func (a *agentConn) close() { a.c.Close() }

// execError is a command that could not be started inside the sandbox.
type execError struct {
	code int // 126 or 127, as docker and shells use
	msg  string
	cwd  bool
}

func (e *execError) Error() string { return e.msg }

func execFailure(req *execRequest, v int32) *execError {
	errno := syscall.Errno(v &^ cwdFailedFlag)
	if v&cwdFailedFlag != 0 {
		return &execError{code: 126, cwd: true, msg: fmt.Sprintf("chdir to %q failed: %v", req.cwd, errno)}
	}
	switch errno {
	case syscall.ENOENT:
		return &execError{code: 127, msg: fmt.Sprintf("exec: %q: executable file not found in $PATH", req.argv[0])}
	case syscall.EACCES, syscall.ENOEXEC, syscall.EISDIR, syscall.EPERM:
		return &execError{code: 126, msg: fmt.Sprintf("exec: %q: %v", req.argv[0], errno)}
	}
	return &execError{code: 126, msg: fmt.Sprintf("exec %q: %v", req.argv[0], errno)}
}
