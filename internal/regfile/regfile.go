// Package regfile opens the files slopbox reads whole (a Dockerfile,
// .dockerignore, a COPY source, an image archive, a snapshot) so that
// what a name holds cannot hang the read: the open is non-blocking (a
// FIFO with no writer opens at once rather than waiting for one), the
// descriptor's own fstat must say regular file, and only then is
// O_NONBLOCK cleared. A FIFO, socket or device planted at the name is
// refused with an error saying what it is.
package regfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped when a name holds something other than a
// regular file.
var ErrNotRegular = errdefs.ErrInvalidArgument.WithMessage("not a regular file")

// NotRegularError says what a name held instead of a regular file.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
	// Target is a symlink's target, when Open refused one.
	Target string
}

func (e *NotRegularError) Error() string {
	if e.Mode&fs.ModeSymlink != 0 {
		msg := e.Path + " is a symlink, which is not followed"
		if e.Target != "" {
			msg += fmt.Sprintf(": name its target (%s)", e.Target)
		}
		return msg
	}
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, Kind(e.Mode))
}

func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

// Kind names a file type as an error shows it: "a named pipe (FIFO)", "a
// directory", ...
func Kind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symlink"
	case fs.ModeNamedPipe:
		return "a named pipe (FIFO)"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice | fs.ModeCharDevice:
		return "a character device"
	case fs.ModeDevice:
		return "a block device"
	}
	return "a special file"
}

// Open opens path for reading: O_RDONLY|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC,
// then Check. A symlink as the last component is refused (naming its
// target, for a caller who means it), as slopbox refuses symlinked
// mount sources.
func Open(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	}
	if err == unix.ELOOP {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := filepath.EvalSymlinks(path)
			return nil, &NotRegularError{Path: path, Mode: fs.ModeSymlink, Target: target}
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if err := Check(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// OpenIn is Open beneath root: name is resolved by the root (symlinks
// inside it are followed, none leads out), opened O_NONBLOCK, then Check.
// A caller that lstat'ed name first compares the result with
// os.SameFile.
func OpenIn(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	if err := Check(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Check refuses f unless fstat of its descriptor says regular file, and
// clears O_NONBLOCK (which a regular file ignores, but a reader of the
// descriptor should not inherit).
func Check(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return &NotRegularError{Path: f.Name(), Mode: fi.Mode()}
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		var fl int
		if fl, serr = unix.FcntlInt(fd, unix.F_GETFL, 0); serr == nil && fl&unix.O_NONBLOCK != 0 {
			_, serr = unix.FcntlInt(fd, unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}); err != nil {
		return err
	}
	return serr
}
