// Package tarentry writes one entry of a host tree to a tar stream, the
// one way every tar writer of slopbox that reads a tree does (issue 43:
// docker export and cp, layers, COPY, snapshots): the entry is opened
// once, by one name under its parent's descriptor, with no symlink
// followed (O_PATH|O_NOFOLLOW); its header comes from fstat of the
// descriptor its contents are read from, never from a stat by name, so a
// name swapped (by a sandbox that writes the tree) for a symlink or
// another file between the two is stored as what was opened or refused,
// never followed. A regular file is reopened for reading through that
// descriptor (procfs), not by its name again, and must be the inode first
// opened; no more bytes are read than its header says. The Writer counts regular files'
// apparent sizes against a sparse.Counter and writes a file met again
// under another name as a hard link, when asked.
package tarentry

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/sparse"
)

// ErrChanged (aborted: a race with whoever writes the tree) is wrapped when the name of an entry holds another inode
// when it is reopened for reading than when it was opened.
var ErrChanged = errdefs.ErrAborted.WithMessage("changed while being read")

// Entry is one opened entry: a descriptor (O_PATH until Reopen, or the
// readable one of FromFile), its fstat, and a symlink's target read
// through it.
type Entry struct {
	f      *os.File
	own    bool     // f is closed by Close
	parent *os.File // OpenIn's parent directory, closed by Close
	dirfd  int
	base   string
	st     syscall.Stat_t
	link   string
	read   bool // f is open for reading
}

// Open opens the entry base (one name, no "/") of the directory open as
// dirfd without following it if it is a symlink, and fstats it. dirfd
// must stay open while the entry is used (Reopen opens base in it again).
func Open(dirfd int, base string) (*Entry, error) {
	if base == "" || strings.Contains(base, "/") {
		return nil, &fs.PathError{Op: "open", Path: base, Err: unix.EINVAL}
	}
	fd, err := unix.Openat(dirfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: base, Err: err}
	}
	e := &Entry{f: os.NewFile(uintptr(fd), base), own: true, dirfd: dirfd, base: base}
	if err := syscall.Fstat(fd, &e.st); err != nil {
		e.f.Close()
		return nil, &fs.PathError{Op: "fstat", Path: base, Err: err}
	}
	if e.st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if e.link, err = readlinkFD(fd); err != nil {
			e.f.Close()
			return nil, &fs.PathError{Op: "readlink", Path: base, Err: err}
		}
	}
	return e, nil
}

// OpenIn opens rel (a path relative to root) as Open does: its parent
// directory through root (no symlink in it leads out of root), rel's last
// component in it, not followed.
func OpenIn(root *os.Root, rel string) (*Entry, error) {
	dir, base := path.Split(path.Clean(rel))
	if dir == "" {
		dir = "."
	}
	d, err := root.Open(dir)
	if err != nil {
		return nil, err
	}
	e, err := Open(int(d.Fd()), base)
	if err != nil {
		d.Close()
		return nil, err
	}
	e.parent = d
	return e, nil
}

// FromFile is the entry of f, a regular file or directory open for
// reading (the top of a walk); f stays the caller's to close.
func FromFile(f *os.File) (*Entry, error) {
	e := &Entry{f: f, read: true, dirfd: -1, base: f.Name()}
	if err := syscall.Fstat(int(f.Fd()), &e.st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	if k := e.st.Mode & unix.S_IFMT; k != unix.S_IFREG && k != unix.S_IFDIR {
		return nil, fmt.Errorf("%s: not a file or directory", f.Name())
	}
	return e, nil
}

// Owning makes Close close a FromFile entry's file too, and returns e.
func (e *Entry) Owning() *Entry {
	e.own = true
	return e
}

// Close closes the entry's descriptors.
func (e *Entry) Close() error {
	var err error
	if e.own {
		err = e.f.Close()
	}
	if e.parent != nil {
		e.parent.Close()
	}
	return err
}

// Stat is the entry's fstat: of the descriptor opened, or reopened.
func (e *Entry) Stat() *syscall.Stat_t { return &e.st }

// Kind is the entry's file type (its mode's S_IFMT bits).
func (e *Entry) Kind() uint32 { return e.st.Mode & unix.S_IFMT }

// Link is a symlink's target, read through the descriptor fstat'd.
func (e *Entry) Link() string { return e.link }

// Info is the entry's fstat as an fs.FileInfo (Sys: *syscall.Stat_t), as
// os.File.Stat would give it, without another fstat.
func (e *Entry) Info() fs.FileInfo { return statInfo{name: path.Base(e.base), st: e.st} }

// File is the entry's descriptor: after Reopen (or from FromFile), open
// for reading.
func (e *Entry) File() *os.File { return e.f }

// procFD is where a descriptor is reopened (procfs's magic link to what
// it has open); a variable for the tests of the fallback.
var procFD = "/proc/self/fd/"

// Reopen opens a regular file or directory for reading, without blocking
// (a FIFO is not waited on): the inode the entry's descriptor has open,
// through procfs (no name is looked up again), or where procfs is not
// mounted, by the same name in the same directory with no symlink
// followed. Either way it must be the inode opened first, or the error
// wraps ErrChanged. The entry's stat is then the new descriptor's fstat.
func (e *Entry) Reopen() error {
	if e.read {
		return nil
	}
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	switch e.Kind() {
	case unix.S_IFDIR:
		flags |= unix.O_DIRECTORY
	case unix.S_IFREG:
	default:
		return fmt.Errorf("%s: not a file or directory: not reopened", e.base)
	}
	fd, err := unix.Open(procFD+strconv.Itoa(int(e.f.Fd())), flags, 0)
	if errors.Is(err, unix.ENOENT) {
		fd, err = unix.Openat(e.dirfd, e.base, flags|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT) {
			return &fs.PathError{Op: "open", Path: e.base, Err: fmt.Errorf("%w (%w)", ErrChanged, err)}
		}
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: e.base, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &fs.PathError{Op: "fstat", Path: e.base, Err: err}
	}
	if st.Dev != e.st.Dev || st.Ino != e.st.Ino || st.Mode&unix.S_IFMT != e.Kind() {
		unix.Close(fd)
		return &fs.PathError{Op: "open", Path: e.base, Err: ErrChanged}
	}
	e.f.Close()
	e.f, e.st, e.read = os.NewFile(uintptr(fd), e.base), st, true
	return nil
}

// Writer writes entries to a tar stream.
type Writer struct {
	TW *tar.Writer
	// Header makes an entry's header from its fstat (fi, as Entry.Info):
	// name, mode, owners, time and format, by the writer's own rules.
	// Write sets the type, size, link target and device numbers, from
	// the same fstat, and a directory's trailing "/".
	Header func(name string, fi fs.FileInfo) (*tar.Header, error)
	// WriteHeader, when set, writes a header instead of TW.WriteHeader,
	// and Content receives the contents instead of TW (a cache key's sum
	// beside the stream).
	WriteHeader func(*tar.Header) error
	Content     io.Writer
	// Size, when set, counts the apparent sizes of regular files (a
	// sparse file in full) and refuses the file that would pass its
	// bound (sparse.ErrTooLarge) before its contents are read.
	Size *sparse.Counter
	// Links, when set, maps the files written (device, inode) with more
	// than one link to the name first written: a file met again is
	// written as a hard link to it.
	Links map[[2]uint64]string
	// Pad: a file that shrank while it was read is padded with zeros to
	// the size its header gives; otherwise Write returns io.EOF
	// (wrapped).
	Pad bool
}

// Write writes e as name: a regular file is reopened for reading (Reopen)
// unless it is a hard link written before, and its header and contents
// come from that descriptor. Sockets are not written (tar has none).
func (w *Writer) Write(e *Entry, name string) error {
	kind := e.Kind()
	if kind == unix.S_IFSOCK {
		return nil
	}
	if kind == unix.S_IFREG {
		if first, ok := w.link(e, name); ok {
			return w.write(e, name, tar.TypeLink, first)
		}
		if err := e.Reopen(); err != nil {
			return err
		}
		if w.Size != nil {
			if err := w.Size.Add("/"+strings.TrimPrefix(name, "/"), e.st.Size); err != nil {
				return err
			}
		}
	}
	return w.write(e, name, typeflag(kind), e.link)
}

// link is the name a file met before under another name was written as,
// with Links; it records a first one.
func (w *Writer) link(e *Entry, name string) (string, bool) {
	if w.Links == nil || e.st.Nlink <= 1 {
		return "", false
	}
	key := [2]uint64{e.st.Dev, e.st.Ino}
	if first, ok := w.Links[key]; ok {
		return first, true
	}
	w.Links[key] = name
	return "", false
}

// write writes e's header of type flag (and, for a file, its contents).
func (w *Writer) write(e *Entry, name string, flag byte, link string) error {
	hdr, err := w.Header(name, e.Info())
	if err != nil {
		return err
	}
	hdr.Typeflag, hdr.Linkname, hdr.Size = flag, link, 0
	switch flag {
	case tar.TypeReg:
		hdr.Size = e.st.Size
	case tar.TypeDir:
		if !strings.HasSuffix(hdr.Name, "/") {
			hdr.Name += "/"
		}
	case tar.TypeChar, tar.TypeBlock:
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(e.st.Rdev)), int64(unix.Minor(e.st.Rdev))
	}
	wh := w.TW.WriteHeader
	if w.WriteHeader != nil {
		wh = w.WriteHeader
	}
	if err := wh(hdr); err != nil {
		return err
	}
	if flag != tar.TypeReg {
		return nil
	}
	out := io.Writer(w.TW)
	if w.Content != nil {
		out = w.Content
	}
	n, err := io.CopyN(out, e.f, hdr.Size)
	if errors.Is(err, io.EOF) && w.Pad {
		_, err = out.Write(make([]byte, hdr.Size-n))
	}
	return err
}

func typeflag(kind uint32) byte {
	switch kind {
	case unix.S_IFDIR:
		return tar.TypeDir
	case unix.S_IFLNK:
		return tar.TypeSymlink
	case unix.S_IFIFO:
		return tar.TypeFifo
	case unix.S_IFCHR:
		return tar.TypeChar
	case unix.S_IFBLK:
		return tar.TypeBlock
	}
	return tar.TypeReg
}

// Mode is a stat's permission and special bits (setuid, setgid, sticky)
// as tar stores them.
func Mode(st *syscall.Stat_t) int64 { return int64(st.Mode & 0o7777) }

// readlinkFD reads the target of the symlink open (O_PATH) as fd.
func readlinkFD(fd int) (string, error) {
	for n := 256; ; n *= 2 {
		b := make([]byte, n)
		m, err := unix.Readlinkat(fd, "", b)
		if err != nil {
			return "", err
		}
		if m < n {
			return string(b[:m]), nil
		}
	}
}

// statInfo is an fs.FileInfo of one fstat, as package os makes it.
type statInfo struct {
	name string
	st   syscall.Stat_t
}

func (s statInfo) Name() string       { return s.name }
func (s statInfo) Size() int64        { return s.st.Size }
func (s statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s statInfo) Sys() any           { return &s.st }

func (s statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if s.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
