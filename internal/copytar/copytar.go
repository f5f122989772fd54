// Package copytar is what `slopbox cp` moves between the host and a
// sandbox: a tar stream of one file or tree, written without following any
// symlink, and extracted so that nothing lands outside the destination.
// The same code runs on the host and, for the sandbox's side, inside the
// sandbox (as container root, under its seccomp filter), so a path in the
// sandbox is resolved by the sandbox's own root, never the host's.
package copytar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/internal/sparse"
	"github.com/slopbox/slopbox/internal/tarentry"
)

// Source splits a docker cp source into the path to read and the name its
// top entry takes: "dir/." copies dir's contents (name "."), anything else
// the file or directory itself under its base name.
func Source(p string) (dir, name string) {
	if p == "." || strings.HasSuffix(p, "/.") {
		if p == "." {
			return ".", "."
		}
		return strings.TrimSuffix(p, "."), "."
	}
	clean := filepath.Clean(p)
	return clean, filepath.Base(clean)
}

// Write writes src as a tar stream: its entries are named under name, or,
// with name ".", are src itself as "./" followed by its contents as
// "./ENTRY" (docker's archive of DIR/.). Every entry below src is opened
// relative to its parent directory's descriptor with O_NOFOLLOW, and its
// header and contents come from that descriptor: a name swapped for a
// symlink while the tree is read (by a sandbox sharing it) is stored as
// the symlink, never followed. src's parent (and, for DIR/., DIR) is
// opened as o says: on the host with no symlink followed in any component.
// Sockets and devices are skipped.
func Write(w io.Writer, src, name string, o Options) error {
	tw := tar.NewWriter(w)
	var err error
	if name == "." {
		// DIR/. names DIR's contents.
		var d *os.File
		if d, err = openDir(src, o); err != nil {
			return err
		}
		defer d.Close()
		var e *tarentry.Entry
		if e, err = tarentry.FromFile(d); err != nil {
			return err
		}
		err = writeDir(tw, e, ".")
	} else {
		parent, base := filepath.Split(filepath.Clean(src))
		if base == "" { // "/"
			parent, base = "/", "."
		}
		if parent == "" {
			parent = "."
		}
		var d *os.File
		if d, err = openDir(parent, o); err != nil {
			return err
		}
		defer d.Close()
		err = writeEntry(tw, d, base, name, true)
	}
	if err != nil {
		return err
	}
	return tw.Close()
}

// openDir opens the directory p for reading: with o.NoSymlinks (the
// host's side of a copy) no component of p may be a symlink, which a
// sandbox that can write the directory it lies in may have planted; in the
// sandbox, p resolves as the sandbox's own paths do.
func openDir(p string, o Options) (*os.File, error) {
	if o.NoSymlinks {
		d, err := atomicfile.OpenDir(p, unix.O_RDONLY)
		if _, ok := errors.AsType[*atomicfile.SymlinkError](err); ok {
			real, rerr := filepath.EvalSymlinks(p)
			if rerr != nil {
				real = "?"
			}
			return nil, fmt.Errorf("%s goes through a symlink (it leads to %s): cp does not follow symlinks on the host, which a sandbox may have planted; give the real path if that is what you mean", p, real)
		}
		return d, err
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("%s is not a directory", p)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// writeEntry writes the entry base of the directory dir as name, opened
// without following a symlink (tarentry.Open: its header and contents
// from the descriptor read). A missing entry is an error only for the
// top one (top): one deleted during the walk is left out. Sockets and
// devices are skipped.
func writeEntry(tw *tar.Writer, dir *os.File, base, name string, top bool) error {
	e, err := tarentry.Open(int(dir.Fd()), base)
	if errors.Is(err, unix.ENOENT) && !top {
		return nil
	}
	if err != nil {
		return changed(name, err)
	}
	defer e.Close()
	switch e.Kind() {
	case unix.S_IFLNK, unix.S_IFIFO, unix.S_IFREG:
	case unix.S_IFDIR:
		if err := e.Reopen(); err != nil {
			return changed(name, err)
		}
		return writeDir(tw, e, name)
	default:
		return nil
	}
	err = entryWriter(tw).Write(e, name)
	if errors.Is(err, io.EOF) {
		// Never more than the header says; a file that shrank is an error.
		return fmt.Errorf("%s shrank while being copied", name)
	}
	return changed(name, err)
}

// changed names name in err, and words an error of a name that held
// another inode when it was reopened to be read.
func changed(name string, err error) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, tarentry.ErrChanged):
		return fmt.Errorf("%s changed while being copied", name)
	case errors.As(err, &pe):
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}

// entryWriter writes copy entries to tw: headers as tar.FileInfoHeader
// makes them from the entry's fstat, without user or group names.
func entryWriter(tw *tar.Writer) *tarentry.Writer {
	return &tarentry.Writer{TW: tw, Header: func(name string, fi fs.FileInfo) (*tar.Header, error) {
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return nil, err
		}
		hdr.Name, hdr.Uname, hdr.Gname = name, "", ""
		return hdr, nil
	}}
}

// writeDir writes the directory open for reading as e as name, then its
// entries.
func writeDir(tw *tar.Writer, e *tarentry.Entry, name string) error {
	if err := entryWriter(tw).Write(e, name); err != nil {
		return err
	}
	names, err := e.File().Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeEntry(tw, e.File(), n, name+"/"+n, false); err != nil {
			return err
		}
	}
	return nil
}

// Into opens where a copy to dest lands (contents: the stream holds a
// directory's entries, not the directory) and returns Extract's dir and
// rename. An existing directory receives the copy under its own name
// (rename ""); otherwise the copy becomes dest itself: dir is dest's
// parent, which must exist, and the top entry is renamed to dest's base
// name. dest's parent is opened as o says (on the host, no symlink
// followed), dest itself never through a symlink. The caller closes dir.
func Into(dest string, contents bool, o Options) (dir *os.File, rename string, err error) {
	trailing := strings.HasSuffix(dest, "/") || strings.HasSuffix(dest, "/.")
	clean := filepath.Clean(dest)
	parent, base := filepath.Split(clean)
	if base == "" || base == "." || base == ".." {
		d, err := openDir(clean, o)
		return d, "", err
	}
	if parent == "" {
		parent = "."
	}
	pd, err := openDir(parent, o)
	if errors.Is(err, unix.ENOENT) {
		return nil, "", fmt.Errorf("destination directory %s does not exist", parent)
	}
	if err != nil {
		return nil, "", err
	}
	var st unix.Stat_t
	err = unix.Fstatat(int(pd.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW)
	kind := st.Mode & unix.S_IFMT
	switch {
	case err == nil && kind == unix.S_IFDIR:
		defer pd.Close()
		d, err := openBeneath(pd, base)
		return d, "", err
	case err == nil && kind == unix.S_IFLNK:
		pd.Close()
		return nil, "", fmt.Errorf("%s is a symbolic link: copy to the directory it names instead", clean)
	case err == nil && contents:
		pd.Close()
		return nil, "", fmt.Errorf("%s is not a directory: cannot copy a directory's contents into it", clean)
	case err == nil && trailing:
		pd.Close()
		return nil, "", fmt.Errorf("%s is not a directory", dest)
	case err == nil:
		return pd, base, nil
	case !errors.Is(err, unix.ENOENT):
		pd.Close()
		return nil, "", &fs.PathError{Op: "stat", Path: clean, Err: err}
	case !contents:
		return pd, base, nil
	}
	defer pd.Close()
	if err := unix.Mkdirat(int(pd.Fd()), base, 0o755); err != nil {
		return nil, "", fmt.Errorf("create %s: %w", clean, err)
	}
	d, err := openBeneath(pd, base)
	return d, "", err
}

// openBeneath opens the directory rel beneath dir, one component at a
// time, none of them followed if it is a symlink.
func openBeneath(dir *os.File, rel string) (*os.File, error) {
	fd, err := unix.Dup(int(dir.Fd()))
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%s: %s is not a directory (a symlink or file is in the way): refused, not followed", rel, c)
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		fd = nfd
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// Options say how extracted entries are owned and how the path given is
// opened.
type Options struct {
	// UID and GID own every extracted entry (docker cp: the caller on the
	// host, root in a sandbox).
	UID, GID int
	// NoSymlinks: the path given (Write's source, Into's destination) is
	// opened with no symlink followed in any component, as mount sources
	// are: the host's side of a copy, whose paths may lie in a directory a
	// sandbox writes.
	NoSymlinks bool
}

// Extract reads a tar stream into dir. With rename, the stream's top entry
// (its first path component) takes that name. Every entry is created
// through descriptors: its parent is opened beneath dir one component at a
// time, none followed if it is a symlink (planted in dir, sent earlier in
// the stream, or swapped in while the copy runs), and the entry is made
// in that parent by name with O_NOFOLLOW semantics, its owner, mode and
// contents set through its own descriptor. ".." and absolute names stay
// inside dir. As docker cp, an existing directory is never replaced by a
// non-directory nor a file by a directory: such an entry is an error,
// with nothing removed; any other existing entry (a symlink included) is
// replaced, never followed. Setuid and setgid bits are dropped and
// devices refused. Runs of zeros in files are left as holes (a sparse
// file's holes arrive as zeros), so a sparse file costs its data's
// blocks, not its size.
func Extract(r io.Reader, dir *os.File, rename string, o Options) error {
	x := &extractor{root: dir, o: o, buf: make([]byte, 1<<20)}
	if err := filter(tar.NewReader(r), x.entry, rename); err != nil {
		return err
	}
	// Directories' modes and times last, deepest first: a read-only
	// directory takes its entries first, and no mtime is disturbed.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		if err := x.dirMeta(x.dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

type extractor struct {
	root *os.File
	o    Options
	buf  []byte
	dirs []*tar.Header
}

// parent opens the directory an entry named rel lands in, creating those
// missing with create (the stream may name no parent), and returns it with
// rel's base name.
func (x *extractor) parent(rel string, create bool) (*os.File, string, error) {
	dir, base := path.Split(rel)
	fd, err := unix.Dup(int(x.root.Fd()))
	if err != nil {
		return nil, "", err
	}
	unix.CloseOnExec(fd)
	for _, c := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if c == "" {
			continue
		}
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if create && errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				if err = unix.Fchownat(fd, c, x.o.UID, x.o.GID, unix.AT_SYMLINK_NOFOLLOW); err == nil {
					nfd, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				}
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, "", fmt.Errorf("%s: %s is not a directory (a symlink or file is in the way): refused, not followed", rel, c)
		}
		if err != nil {
			return nil, "", &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		fd = nfd
	}
	return os.NewFile(uintptr(fd), dir), base, nil
}

// entry creates the entry hdr names (its contents read from r) in its
// parent, opened beneath the root: what is in its way is cleared first
// (makeRoom), then the entry is made by its kind, each through the
// parent's descriptor.
func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	pd, base, err := x.parent(hdr.Name, true)
	if err != nil {
		return err
	}
	defer pd.Close()
	p := int(pd.Fd())
	if err := makeRoom(p, base, hdr); err != nil {
		return err
	}
	mode := uint32(hdr.Mode) & 0o1777
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(pd, base, hdr)
	case tar.TypeReg:
		return x.file(p, base, hdr, r, mode)
	case tar.TypeFifo:
		return x.fifo(p, base, hdr, mode)
	case tar.TypeSymlink:
		if err := unix.Symlinkat(hdr.Linkname, p, base); err != nil {
			return &fs.PathError{Op: "symlink", Path: hdr.Name, Err: err}
		}
		if err := unix.Fchownat(p, base, x.o.UID, x.o.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "chown", Path: hdr.Name, Err: err}
		}
		return x.times(p, base, hdr)
	case tar.TypeLink:
		return x.link(p, base, hdr)
	}
	return fmt.Errorf("%s: only files, directories, links and FIFOs can be copied", hdr.Name)
}

// makeRoom readies name base in the open directory p for entry hdr, as
// docker cp does: an existing directory is never replaced by a
// non-directory nor a file by a directory (an error, nothing removed);
// any other existing entry (a symlink included) is unlinked, never
// followed. A directory entry over a directory leaves it be.
func makeRoom(p int, base string, hdr *tar.Header) error {
	var st unix.Stat_t
	exists := true
	if err := unix.Fstatat(p, base, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		exists = false
	} else if err != nil {
		return &fs.PathError{Op: "stat", Path: hdr.Name, Err: err}
	}
	kind := st.Mode & unix.S_IFMT
	isDir := hdr.Typeflag == tar.TypeDir
	switch {
	case exists && kind == unix.S_IFDIR && !isDir:
		return fmt.Errorf("cannot overwrite directory %q with a non-directory: remove it first if that is meant", hdr.Name)
	case exists && kind != unix.S_IFDIR && kind != unix.S_IFLNK && isDir:
		return fmt.Errorf("cannot overwrite non-directory %q with a directory: remove it first if that is meant", hdr.Name)
	case exists && kind != unix.S_IFDIR:
		// A file or symlink gives way, as with docker cp; unlinking a
		// name never follows it.
		if err := unix.Unlinkat(p, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return &fs.PathError{Op: "remove", Path: hdr.Name, Err: err}
		}
	}
	return nil
}

// dir makes directory base in pd (or keeps the one there) and gives it
// its owner; its mode and times are set last (dirMeta), once its entries
// are in.
func (x *extractor) dir(pd *os.File, base string, hdr *tar.Header) error {
	if err := unix.Mkdirat(int(pd.Fd()), base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return &fs.PathError{Op: "mkdir", Path: hdr.Name, Err: err}
	}
	d, err := openBeneath(pd, base)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Chown(x.o.UID, x.o.GID); err != nil {
		return err
	}
	x.dirs = append(x.dirs, hdr)
	return nil
}

// file creates regular file base in the open directory p (O_EXCL,
// O_NOFOLLOW) and writes its contents from r, zeros as holes, then its
// owner, mode and times.
func (x *extractor) file(p int, base string, hdr *tar.Header, r io.Reader, mode uint32) error {
	fd, err := unix.Openat(p, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "create", Path: hdr.Name, Err: err}
	}
	f := os.NewFile(uintptr(fd), hdr.Name)
	defer f.Close()
	// The stream holds a sparse file's holes as zeros: they stay holes.
	w := sparse.NewWriter(f)
	if _, err := io.CopyBuffer(w, io.LimitReader(r, hdr.Size), x.buf); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return x.meta(f, p, base, hdr, mode)
}

// fifo makes FIFO base in the open directory p and sets its owner, mode
// and times through a descriptor of it.
func (x *extractor) fifo(p int, base string, hdr *tar.Header, mode uint32) error {
	if err := unix.Mkfifoat(p, base, 0o600); err != nil {
		return &fs.PathError{Op: "mkfifo", Path: hdr.Name, Err: err}
	}
	// Opened to set its owner and mode through a descriptor: a FIFO
	// opens for reading without blocking with O_NONBLOCK.
	fd, err := unix.Openat(p, base, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: hdr.Name, Err: err}
	}
	f := os.NewFile(uintptr(fd), hdr.Name)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
		return fmt.Errorf("%s changed while being copied", hdr.Name)
	}
	return x.meta(f, p, base, hdr, mode)
}

// link makes base in the open directory p a hard link to the entry
// hdr.Linkname names, its parent opened beneath the root as well.
func (x *extractor) link(p int, base string, hdr *tar.Header) error {
	od, obase, err := x.parent(hdr.Linkname, false)
	if err != nil {
		return err
	}
	defer od.Close()
	// linkat without AT_SYMLINK_FOLLOW links a symlink itself.
	if err := unix.Linkat(int(od.Fd()), obase, p, base, 0); err != nil {
		return &fs.PathError{Op: "link", Path: hdr.Name, Err: err}
	}
	return nil
}

// meta sets the owner and mode of the entry open as f, and its times.
func (x *extractor) meta(f *os.File, parent int, base string, hdr *tar.Header, mode uint32) error {
	if err := f.Chown(x.o.UID, x.o.GID); err != nil {
		return err
	}
	if err := f.Chmod(fs.FileMode(mode&0o777) | unixSticky(mode)); err != nil {
		return err
	}
	return x.times(parent, base, hdr)
}

func unixSticky(mode uint32) fs.FileMode {
	if mode&unix.S_ISVTX != 0 {
		return fs.ModeSticky
	}
	return 0
}

// times sets base's times in the open directory parent, not following it.
func (x *extractor) times(parent int, base string, hdr *tar.Header) error {
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(parent, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "chtimes", Path: hdr.Name, Err: err}
	}
	return nil
}

// dirMeta gives the directory hdr names its mode and times, reopened
// beneath the root as every entry is.
func (x *extractor) dirMeta(hdr *tar.Header) error {
	pd, base, err := x.parent(hdr.Name, false)
	if err != nil {
		return err
	}
	defer pd.Close()
	d, err := openBeneath(pd, base)
	if err != nil {
		return err
	}
	defer d.Close()
	mode := uint32(hdr.Mode) & 0o1777
	if err := d.Chmod(fs.FileMode(mode&0o777) | unixSticky(mode)); err != nil {
		return err
	}
	return x.times(int(pd.Fd()), base, hdr)
}

// filter passes the entries a copy may create to emit, renamed, with
// safe modes and names inside the destination.
func filter(tr *tar.Reader, emit func(*tar.Header, io.Reader) error, rename string) error {
	top := ""
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the copied tree: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		if base := path.Base(name); strings.HasPrefix(base, ".wh.") {
			return fmt.Errorf("%s: names starting with .wh. cannot be copied", hdr.Name)
		}
		if rename != "" {
			first, rest, _ := strings.Cut(name, "/")
			if top == "" {
				top = first
			}
			if first != top {
				return fmt.Errorf("%s: a copy to a new name holds one file or directory", hdr.Name)
			}
			name = path.Join(rename, rest)
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeFifo:
		case tar.TypeLink:
			hdr.Linkname = strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
			if rename != "" {
				_, rest, _ := strings.Cut(hdr.Linkname, "/")
				hdr.Linkname = path.Join(rename, rest)
			}
		default:
			return fmt.Errorf("%s: only files, directories, links and FIFOs can be copied", hdr.Name)
		}
		// Only what a copy keeps: no extended attributes, and never a
		// setuid or setgid file where it lands.
		out := &tar.Header{Typeflag: hdr.Typeflag, Name: name, Linkname: hdr.Linkname, Size: hdr.Size,
			Mode: hdr.Mode &^ 0o6000, ModTime: hdr.ModTime, Format: tar.FormatPAX}
		if err := emit(out, tr); err != nil {
			return err
		}
	}
}
