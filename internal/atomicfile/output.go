package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The files slopbox writes at paths its caller names (export -o, save -o,
// snapshot -o and archive_save_dir, build --iidfile, serve --socket) may
// lie in a directory a sandbox can write: its workspace, a bind mount. A
// symlink it planted there, at the name or at a directory on the way,
// would have slopbox (root, often) write wherever it points. So nothing
// here resolves such a path by name: its directory is opened with openat2
// RESOLVE_NO_SYMLINKS (a symlink anywhere in it is refused), and the file
// is created beneath that descriptor with O_NOFOLLOW|O_EXCL and renamed
// into place beneath it (SECURITY.md, round three).

// SymlinkError is an output path refused because it goes through a
// symlink. It wraps ELOOP.
type SymlinkError struct {
	Path  string // the path refused (the directory, or the file itself)
	Final bool   // Path is the symlink itself, not a directory on the way
}

func (e *SymlinkError) Error() string {
	if e.Final {
		target, err := os.Readlink(e.Path)
		if err != nil {
			target = "?"
		}
		return fmt.Sprintf("%s is a symlink (to %s): slopbox writes nothing on the host through a symlink, which a sandbox may have planted; remove it or give another path", e.Path, target)
	}
	real, err := filepath.EvalSymlinks(e.Path)
	if err != nil {
		real = "?"
	}
	return fmt.Sprintf("%s goes through a symlink (it leads to %s): slopbox writes nothing on the host through a symlink, which a sandbox may have planted; give the real path if that is what you mean", e.Path, real)
}

func (e *SymlinkError) Unwrap() error { return unix.ELOOP }

// NotDirError is MkdirAll's refusal of a component that exists and is not
// a directory (Path, the path up to it).
type NotDirError struct{ Path string }

func (e *NotDirError) Error() string { return e.Path + " is not a directory" }
func (e *NotDirError) Unwrap() error { return unix.ENOTDIR }

// retries bounds the retries of an openat2 that a concurrent rename
// interrupted (EAGAIN, which openat2(2) says to retry).
const retries = 1024

func openat2(dirfd int, name string, how *unix.OpenHow) (int, error) {
	fd, err := unix.Openat2(dirfd, name, how)
	for i := 0; i < retries && errors.Is(err, unix.EAGAIN); i++ {
		fd, err = unix.Openat2(dirfd, name, how)
	}
	return fd, err
}

// OpenDir opens the directory dir with no symlink followed in any
// component of it (openat2 RESOLVE_NO_SYMLINKS), with flags (unix.O_PATH
// for the *at calls beneath it, unix.O_RDONLY to read it) and
// O_DIRECTORY|O_CLOEXEC. A relative dir starts at the working directory,
// as the kernel has it. A symlink on the way is a *SymlinkError.
func OpenDir(dir string, flags int) (*os.File, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_DIRECTORY | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := openat2(unix.AT_FDCWD, dir, how)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, &SymlinkError{Path: dir}
	case errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("%s is not a directory", dir)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// MkdirAll makes the directory dir and whatever is missing of its parents
// (mode perm, less the umask), as os.MkdirAll does, but one component at
// a time: each opened beneath its parent's descriptor with no symlink
// followed, each missing one made with mkdirat on that descriptor. At a
// symlink nothing more is made and the error is a *SymlinkError naming
// the path up to it. An existing dir is left as it is.
func MkdirAll(dir string, perm os.FileMode) error {
	start := "."
	if filepath.IsAbs(dir) {
		start = "/"
	}
	d, err := unix.Open(start, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: start, Err: err}
	}
	defer func() { unix.Close(d) }()
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	done := start
	for _, name := range strings.Split(filepath.Clean(dir), "/") {
		if name == "" || name == "." {
			continue
		}
		done = filepath.Join(done, name)
		next, err := openat2(d, name, how)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(d, name, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
				return &fs.PathError{Op: "mkdir", Path: done, Err: err}
			}
			next, err = openat2(d, name, how)
		}
		switch {
		case errors.Is(err, unix.ELOOP):
			return &SymlinkError{Path: done}
		case errors.Is(err, unix.ENOTDIR):
			return &NotDirError{Path: done}
		case err != nil:
			return &fs.PathError{Op: "open", Path: done, Err: err}
		}
		unix.Close(d)
		d = next
	}
	return nil
}

// Output is a file being written for a path the caller named on the host.
// Writes go to a temporary file made beneath the path's directory
// (opened as OpenDir opens it) with O_CREAT|O_EXCL|O_NOFOLLOW; Commit
// renames it to the path's name beneath that same descriptor, replacing
// an existing regular file whole (its other hard links keep the old
// bytes). Close without Commit removes it: a failed output leaves nothing.
type Output struct {
	*os.File // the temporary file
	dir      *os.File
	tmp      string // the temporary file's name in dir
	name     string // the output's name in dir
	path     string
	prev     os.FileInfo
	closed   bool
}

// CreateOutput starts the output file path, mode perm (less the umask).
// It is refused when path goes through a symlink (*SymlinkError), is a
// symlink itself (a *SymlinkError with Final: the name is replaced only by
// a regular file, never followed), or names anything but a regular file
// (a directory, a FIFO, a device: as the docker CLI refuses them).
func CreateOutput(path string, perm os.FileMode) (*Output, error) {
	if strings.HasSuffix(path, "/") {
		return nil, fmt.Errorf("%s names a directory: give a file name", path)
	}
	parent, name := filepath.Split(filepath.Clean(path))
	if name == "." || name == ".." || name == "/" || name == "" {
		return nil, fmt.Errorf("%s names a directory: give a file name", path)
	}
	parent = filepath.Clean(parent) // "." when path has no directory
	dir, err := OpenDir(parent, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	o := &Output{dir: dir, name: name, path: path}
	if err := o.checkExisting(); err != nil {
		dir.Close()
		return nil, err
	}
	// Short enough for NAME_MAX whatever the name's length.
	prefix := "." + name[:min(len(name), 200)] + ".tmp-"
	for range 100 {
		tmp := prefix + strconv.FormatUint(rand.Uint64(), 36)
		fd, err := unix.Openat(int(dir.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			dir.Close()
			return nil, &fs.PathError{Op: "create", Path: filepath.Join(parent, tmp), Err: err}
		}
		o.tmp = tmp
		o.File = os.NewFile(uintptr(fd), filepath.Join(parent, tmp))
		return o, nil
	}
	dir.Close()
	return nil, fmt.Errorf("create a temporary file beside %s: too many exist", path)
}

// checkExisting looks at what path's name holds now, without following
// it: nothing, or a regular file (to be replaced), else a refusal.
func (o *Output) checkExisting() error {
	fd, err := unix.Openat(int(o.dir.Fd()), o.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: o.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), o.path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return &SymlinkError{Path: o.path, Final: true}
	case fi.IsDir():
		return fmt.Errorf("%s is a directory: give a file name", o.path)
	case !fi.Mode().IsRegular():
		kind := "a device"
		switch {
		case fi.Mode()&fs.ModeNamedPipe != 0:
			kind = "a FIFO"
		case fi.Mode()&fs.ModeSocket != 0:
			kind = "a socket"
		}
		return fmt.Errorf("%s is %s, not a regular file: refused (an output replaces only a regular file); remove it or give another path", o.path, kind)
	}
	o.prev = fi
	return nil
}

// Previous is the regular file the output replaces, nil when there was
// none.
func (o *Output) Previous() os.FileInfo { return o.prev }

// Commit closes the file and renames it to the output's name. The rename
// never follows a symlink at the name: one planted there since
// CreateOutput is replaced, its target untouched.
func (o *Output) Commit() error {
	if o.closed {
		return os.ErrClosed
	}
	err := o.File.Close()
	if err == nil {
		err = unix.Renameat(int(o.dir.Fd()), o.tmp, int(o.dir.Fd()), o.name)
		if err != nil {
			err = &fs.PathError{Op: "rename", Path: o.path, Err: err}
		}
	}
	if err != nil {
		unix.Unlinkat(int(o.dir.Fd()), o.tmp, 0)
	}
	o.closed = true
	o.dir.Close()
	return err
}

// Close discards the output unless it was committed: the temporary file
// is removed. It may be called after Commit (a deferred Close).
func (o *Output) Close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	o.File.Close()
	err := unix.Unlinkat(int(o.dir.Fd()), o.tmp, 0)
	o.dir.Close()
	return err
}

// WriteOutput writes what r yields to the output file path, as
// CreateOutput and Commit do.
func WriteOutput(path string, r io.Reader, perm os.FileMode) error {
	o, err := CreateOutput(path, perm)
	if err != nil {
		return err
	}
	defer o.Close()
	if _, err := io.Copy(o, r); err != nil {
		return err
	}
	return o.Commit()
}
