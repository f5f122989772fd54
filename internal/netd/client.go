package netd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/userns"
)

// Client is a connection to the user's network helper. While it is open
// the helper keeps running (and, rootless, keeps the user namespace the
// spawn servers of networked sandboxes join).
type Client struct {
	mu  sync.Mutex
	c   *net.UnixConn
	Pid int // the helper's
}

// Classed errors of the helper.
var (
	ErrConflict    = errdefs.ErrConflict.WithMessage("conflict")
	ErrUnavailable = errdefs.ErrUnavailable.WithMessage("network helper unavailable")
)

// Connect connects to the helper of store dir, starting it when none runs
// (rootless, in a new user namespace with mapping m).
func Connect(dir string, m userns.Mapping) (*Client, error) {
	if c, err := dial(dir); err == nil {
		return c, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(filepath.Join(dir, ".netd.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return nil, err
	}
	if c, err := dial(dir); err == nil {
		return c, nil
	}
	if err := start(dir, m); err != nil {
		return nil, fmt.Errorf("%w: %v (its log: %s)", ErrUnavailable, err, filepath.Join(dir, logName))
	}
	return dial(dir)
}

// Running connects to the helper only if one runs.
func Running(dir string) (*Client, bool) {
	c, err := dial(dir)
	return c, err == nil
}

func dial(dir string) (*Client, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, sockName), Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	cl := &Client{c: c}
	var resp response
	if _, err := cl.call(request{Op: "ping"}, &resp); err != nil {
		c.Close()
		return nil, err
	}
	cl.Pid = resp.Pid
	return cl, nil
}

func start(dir string, m userns.Mapping) error {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	logf, err := os.OpenFile(filepath.Join(dir, logName), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		readyW.Close()
		return err
	}
	defer logf.Close()
	rootless := os.Geteuid() != 0
	var cmd *exec.Cmd
	if rootless {
		cmd = userns.Command([]string{dir})
		cmd.ExtraFiles = []*os.File{readyW} // fd 4 (fd 3: userns.Start's)
	} else {
		cmd = exec.Command("/proc/self/exe", dir)
		cmd.Args[0] = os.Args[0]
		cmd.Env = os.Environ()
		cmd.ExtraFiles = []*os.File{nil, readyW}
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.Dir = "/"
	cmd.Env = append(cmd.Env, reexec.Env+"="+Handler, Marker+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Setsid = true
	started := make(chan error, 1)
	go func() {
		// Forked from a thread kept until it exits: rootless it dies with
		// that thread until its set-up is done (package userns).
		runtime.LockOSThread()
		var err error
		if rootless {
			err = userns.Start(cmd, m)
		} else {
			err = cmd.Start()
		}
		started <- err
		if err == nil {
			cmd.Wait()
		}
		runtime.UnlockOSThread()
	}()
	err = <-started
	readyW.Close()
	if err != nil {
		return err
	}
	got := make(chan bool, 1)
	go func() {
		var b [1]byte
		n, _ := readyR.Read(b[:])
		got <- n == 1
	}()
	select {
	case ok := <-got:
		if !ok {
			msg, _ := os.ReadFile(filepath.Join(dir, logName))
			return fmt.Errorf("the network helper exited: %s", lastLine(string(msg)))
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		return errors.New("the network helper did not start within 10s")
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

func (c *Client) call(req request, resp *response) ([]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	c.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.c.Write(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	buf := make([]byte, 1<<16)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, m := range msgs {
				if f, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if req.Op != "userns" {
		// Only that reply carries a descriptor: any other is closed.
		for _, fd := range fds {
			unix.Close(fd)
		}
		fds = nil
	}
	if err := json.Unmarshal(buf[:n], resp); err != nil {
		return fds, err
	}
	if resp.Error != "" {
		var class error
		switch resp.Class {
		case "invalid":
			class = ErrInvalid
		case "notfound":
			class = ErrNotFound
		case "conflict":
			class = ErrConflict
		}
		if class != nil {
			return fds, &classedError{resp.Class, fmt.Errorf("%w", wrapped{resp.Error, class})}
		}
		return fds, errors.New(resp.Error)
	}
	return fds, nil
}

type wrapped struct {
	msg   string
	class error
}

func (w wrapped) Error() string { return w.msg }
func (w wrapped) Unwrap() error { return w.class }

// UserNS is the helper's user namespace (rootless: the one the spawn
// servers of networked sandboxes join).
func (c *Client) UserNS() (*os.File, error) {
	var resp response
	fds, err := c.call(request{Op: "userns"}, &resp)
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("the network helper sent no user namespace")
	}
	return os.NewFile(uintptr(fds[0]), "netd-userns"), nil
}

// AttachOptions are one container's attachment.
type AttachOptions struct {
	Network   Config
	Container string
	Pid       int
	PidStart  uint64
	Names     []string
	Aliases   []string
	IPv4      string
}

// Attach gives the running container (its PID 1) an interface on the
// network.
func (c *Client) Attach(o AttachOptions) (Endpoint, error) {
	var resp response
	// What the helper needs of the network: not its labels or options,
	// which may be large (a message is at most 64 KiB).
	o.Network.Labels, o.Network.Options = nil, nil
	_, err := c.call(request{Op: "attach", Network: o.Network, Container: o.Container, Pid: o.Pid, PidStart: o.PidStart,
		Names: o.Names, Aliases: o.Aliases, IPv4: o.IPv4}, &resp)
	if err != nil {
		return Endpoint{}, err
	}
	if resp.Endpoint == nil {
		return Endpoint{}, errors.New("the network helper sent no endpoint")
	}
	return *resp.Endpoint, nil
}

// Detach removes the container from network networkID ("": from all).
func (c *Client) Detach(networkID, container string) error {
	var resp response
	_, err := c.call(request{Op: "detach", NetworkID: networkID, Container: container}, &resp)
	return err
}

// Alive reports whether the helper still answers.
func (c *Client) Alive() bool {
	var resp response
	_, err := c.call(request{Op: "ping"}, &resp)
	return err == nil && resp.Pid == c.Pid
}

// Close ends the connection.
func (c *Client) Close() error { return c.c.Close() }
