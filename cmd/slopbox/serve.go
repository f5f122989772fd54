package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/slopbox/slopbox/dockercompat/service"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/dockercompat/engine"
	"github.com/slopbox/slopbox/internal/atomicfile"
)

func serveCmd() *cobra.Command {
	var socket string
	var idle time.Duration
	var debug bool
	c := &cobra.Command{
		Use:   "serve [--socket PATH] [--idle-exit DURATION]",
		Short: "Serve the Docker Engine API on a unix socket (DOCKER_HOST=unix://PATH for docker-py and the docker CLI)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Socket activation (slopbox.socket, systemd-socket-activate):
			// the socket is systemd's, passed as fd 3, and stays when we exit.
			ln, err := activatedListener()
			if err != nil {
				return err
			}
			if ln != nil {
				socket = ln.Addr().String()
			} else {
				if socket == "" {
					socket = defaultSocket()
				}
				// First, while nothing else runs: listenUnix sets the umask.
				var lock *os.File
				ln, lock, err = listenUnix(socket)
				if err != nil {
					return err
				}
				defer lock.Close()
			}
			defer ln.Close() // which removes the socket if it is ours (not an activated one)
			b, err := openBackend()
			if err != nil {
				return err
			}
			defer b.Close()
			b.KeepReady(true) // a warm pool per image, as the Go API keeps
			srv := engine.New(service.New(b), version)
			if debug {
				srv.Log = func(f string, a ...any) {
					fmt.Fprintf(os.Stderr, "%s slopbox serve: "+f+"\n", append([]any{time.Now().Format("15:04:05.000000")}, a...)...)
				}
			}
			if pol, err := loadPolicy(); err != nil {
				return err
			} else {
				srv.Policy = pol
			}
			hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute}
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
			done := make(chan error, 1)
			go func() { done <- hs.Serve(ln) }()
			fmt.Fprintf(os.Stderr, "slopbox: serving the Docker Engine API on %s (export DOCKER_HOST=unix://%s)\n", socket, socket)
			var tick <-chan time.Time
			if idle > 0 {
				t := time.NewTicker(min(idle/4, time.Second))
				defer t.Stop()
				tick = t.C
			}
			for {
				select {
				case err := <-done:
					if errors.Is(err, http.ErrServerClosed) {
						return nil
					}
					return err
				case <-sigs:
					// Sandboxes belong to the state root, not to the service:
					// they stay as they are.
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					hs.Shutdown(ctx)
					cancel()
					return nil
				case <-tick:
					if srv.Idle() >= idle {
						fmt.Fprintf(os.Stderr, "slopbox: no request for %v: exiting (--idle-exit)\n", idle)
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						hs.Shutdown(ctx)
						cancel()
						return nil
					}
				}
			}
		},
	}
	c.Flags().StringVar(&socket, "socket", "", "unix socket to listen on (default $XDG_RUNTIME_DIR/slopbox.sock, else slopbox.sock in the state root; a socket systemd passes (LISTEN_FDS, slopbox.socket) wins)")
	c.Flags().BoolVar(&debug, "debug", false, "log every request to stderr")
	c.Flags().DurationVar(&idle, "idle-exit", 0, "exit after this long without a request (0: never)")
	return c
}

// activatedListener returns the unix socket systemd passed by socket
// activation (LISTEN_PID is ours, LISTEN_FDS=1, fd 3), or nil when none
// was passed.
func activatedListener() (net.Listener, error) {
	if os.Getenv("LISTEN_FDS") == "" {
		return nil, nil
	}
	lns, err := activation.Listeners() // also unsets LISTEN_*: helpers must not see them
	if err != nil {
		return nil, fmt.Errorf("serve: socket activation: %w", err)
	}
	switch {
	case len(lns) == 0:
		return nil, nil // LISTEN_PID names another process
	case len(lns) != 1 || lns[0] == nil:
		for _, l := range lns {
			if l != nil {
				l.Close()
			}
		}
		return nil, fmt.Errorf("serve: socket activation passed %d file descriptors: want one listening stream socket (ListenStream= in the .socket unit)", len(lns))
	case lns[0].Addr().Network() != "unix":
		lns[0].Close()
		return nil, fmt.Errorf("serve: socket activation passed a %s socket (%s): want a unix socket (ListenStream=/path)", lns[0].Addr().Network(), lns[0].Addr())
	}
	return lns[0], nil
}

// defaultSocket is the per-user socket path.
func defaultSocket() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "slopbox.sock")
	}
	return filepath.Join(globals.root, "slopbox.sock")
}

// listenUnix listens on path with mode 0600, replacing a stale socket but
// never one a live server answers on. A server holds path.lock for its
// life, so two starting at once cannot both take the path. Nothing is
// followed through a symlink: in a directory others (a sandbox's
// workspace) can write, one planted there would have this process (root,
// often) create or chmod a file elsewhere. The directory is made one
// component at a time and opened with no symlink in it
// (atomicfile.MkdirAll, OpenDir); the lock, the socket's bind, rename and
// removal are all done beneath that descriptor (the bind through
// /proc/self/fd/N/NAME), never by the path again.
func listenUnix(path string) (_ net.Listener, lock *os.File, err error) {
	if max := len(unix.RawSockaddrUnix{}.Path) - 1; len(path) > max {
		return nil, nil, fmt.Errorf("serve: the socket path %s is %d bytes, over the %d a unix socket's may have (and a Docker client could not reach it): give --socket a shorter path (the default is $XDG_RUNTIME_DIR/slopbox.sock, else ROOT/slopbox.sock)", path, len(path), max)
	}
	dirPath, name := filepath.Split(filepath.Clean(path))
	if dirPath == "" {
		dirPath = "."
	}
	if err := atomicfile.MkdirAll(dirPath, 0o700); err != nil {
		return nil, nil, fmt.Errorf("serve --socket: %w", err)
	}
	dir, err := atomicfile.OpenDir(dirPath, unix.O_PATH)
	if err != nil {
		return nil, nil, fmt.Errorf("serve --socket: %w", err)
	}
	defer func() {
		if err != nil {
			dir.Close()
		}
	}()
	dfd := int(dir.Fd())
	lockPath := path + ".lock"
	fd, err := unix.Openat(dfd, name+".lock", unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, fmt.Errorf("serve: %s is a symlink: refused (it is never followed); remove it, or give --socket in a directory only you can write", lockPath)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("serve: %s: %w", lockPath, err)
	}
	lock = os.NewFile(uintptr(fd), lockPath)
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, fmt.Errorf("serve: %s: %w", lockPath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) || st.Nlink != 1 {
		return nil, nil, fmt.Errorf("serve: %s is not a regular file of this user's (or it has other links): refused; remove it, or give --socket in a directory only you can write", lockPath)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, nil, fmt.Errorf("serve: %s is in use by another server; stop it or give --socket", path)
	}
	// The names beneath the directory's descriptor, short enough for
	// sun_path whatever the directory's depth.
	at := func(n string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", dfd, n) }
	if len(at(name)) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, nil, fmt.Errorf("serve: the socket's name %s is %d bytes: too long to bind beneath its directory; give --socket a shorter name", name, len(name))
	}
	if c, err := net.DialTimeout("unix", at(name), 200*time.Millisecond); err == nil {
		c.Close()
		return nil, nil, fmt.Errorf("serve: %s is in use by another server; stop it or give --socket", path)
	}
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, nil, fmt.Errorf("serve: %s exists and is not a socket (a symlink is never followed): remove it, or give --socket", path)
		}
		unix.Unlinkat(dfd, name, 0) // unlinks the name, whatever it is now
	}
	// bind(2) creates the socket with this mode, and never through a
	// symlink (a name planted since makes it fail): no chmod by path
	// follows, which a name swapped in meanwhile would redirect. It binds
	// a name of its own first and renames it into place once it listens:
	// a client that waits for the socket to appear never finds one that
	// refuses it (bound, not yet listening; seen under load).
	tmp := fmt.Sprintf("%s.%d.new", name, os.Getpid())
	if len(at(tmp)) >= len(unix.RawSockaddrUnix{}.Path) {
		tmp = name // too long a name for a socket: as it is
	}
	if tmp != name {
		unix.Unlinkat(dfd, tmp, 0) // a crashed server's (the lock is ours now)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", at(tmp))
	syscall.Umask(old)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: %s: %w", path, err)
	}
	// Go would unlink the bound name, /proc/self/fd/N/..., at Close: by
	// then N may be another file. The listener removes its own socket.
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	l := &dirListener{UnixListener: ul, dir: dir, name: name, path: path}
	if err := unix.Fstatat(dfd, tmp, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		ul.Close()
		unix.Unlinkat(dfd, tmp, 0)
		return nil, nil, fmt.Errorf("serve: %s: %w", path, err)
	}
	l.dev, l.ino = st.Dev, st.Ino
	if tmp != name {
		if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
			ul.Close()
			unix.Unlinkat(dfd, tmp, 0)
			return nil, nil, fmt.Errorf("serve: %s: %w", path, err)
		}
	}
	return l, lock, nil
}

// dirListener is the socket bound beneath the directory dir (by
// descriptor) as name: its address is path, and closing it removes the
// socket, found beneath the same descriptor and only if it is still the
// one bound (dev, ino).
type dirListener struct {
	*net.UnixListener
	dir      *os.File
	name     string
	path     string
	dev, ino uint64
	remove   sync.Once
}

func (l *dirListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *dirListener) Close() error {
	err := l.UnixListener.Close()
	l.remove.Do(func() {
		var st unix.Stat_t
		if unix.Fstatat(int(l.dir.Fd()), l.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Dev == l.dev && st.Ino == l.ino {
			unix.Unlinkat(int(l.dir.Fd()), l.name, 0)
		}
		l.dir.Close()
	})
	return err
}
