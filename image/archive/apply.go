package archive

import (
	"archive/tar"
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/sparse"
)

// ApplyOptions tunes ApplyLayer.
type ApplyOptions struct {
	// Logf receives warnings about degradations (each kind reported once per
	// layer, naming the first path). nil: discard.
	Logf func(format string, args ...any)
	// IDs, when set, turns a tar entry's uid/gid into the on-disk owner
	// (layers extracted for a nested id mapping); nil keeps them.
	IDs func(uid, gid int) (int, int)
	// NoOverwriteDirNonDir applies docker cp's rules to what is already
	// in dir: an existing directory is never replaced by a non-directory,
	// nor an existing file by a directory, and nothing but a symlink is
	// replaced by a symlink. Such an entry is an error, and nothing is
	// removed. (An existing symlink may still give way to a directory: it
	// is replaced, never followed.)
	NoOverwriteDirNonDir bool
}

// ApplyStats summarises one applied layer.
//
// Files counts regular files plus FIFOs and device nodes actually created;
// Whiteouts counts both .wh.NAME entries and opaque markers; Bytes is the
// number of regular-file content bytes written; SkippedDevices counts block
// and character devices that could not be created (mknod not permitted);
// ChownDegraded reports that at least one owner could not be preserved.
type ApplyStats struct {
	Files, Dirs, Symlinks, Hardlinks, Whiteouts int
	Bytes                                       int64
	SkippedDevices                              int
	ChownDegraded                               bool
}

// OpaqueXattr marks an opaque directory in the on-disk (overlayfs) form:
// "y" hides what lower layers hold under it.
const OpaqueXattr = "user.overlay.opaque"

// Overlay conventions used for the on-disk layer form.
const (
	whiteoutPrefix     = ".wh."
	whiteoutMetaPrefix = ".wh..wh."
	whiteoutOpaqueDir  = ".wh..wh..opq"
	overlayOpaqueXattr = OpaqueXattr
	paxXattrPrefix     = "SCHILY.xattr."
	maxSymlinkHops     = 40
)

// ErrPathEscapes is wrapped when a layer entry would resolve outside the
// layer's directory.
var ErrPathEscapes = errdefs.ErrInvalidArgument.WithMessage("path escapes the layer root")

// unpackBufPool holds the 1 MiB copy buffers of ApplyLayer (and the tests' Flatten).
var unpackBufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// ApplyLayer extracts one uncompressed layer tar read from r into dir (which
// exists and is empty), in overlayfs-ready form: each layer is its own
// directory, to be stacked later as overlay lowerdirs.
//
// Whiteouts become 0/0 character devices, opaque markers become the
// user.overlay.opaque=y xattr on their directory. Every path is resolved
// inside dir: absolute names, ".." components, and symlinks (absolute, or
// relative ones climbing above dir) met while resolving a parent are refused
// with an error; files are created with O_EXCL|O_NOFOLLOW semantics, so an
// existing symlink is replaced, never written through. Owners are the tar
// header's uid/gid unchanged; when they cannot be set (unmapped ids in a user
// namespace) the file is kept, ChownDegraded is set and one warning is logged.
// Devices that cannot be created are skipped with a warning. On success r is
// drained to EOF so that a digest-verifying reader sees every byte.
func ApplyLayer(dir string, r io.Reader, opts ApplyOptions) (ApplyStats, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return ApplyStats{}, fmt.Errorf("unpack: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return ApplyStats{}, fmt.Errorf("unpack: layer root %s: %w", root, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return ApplyStats{}, fmt.Errorf("unpack: layer root %s is not a directory", root)
	}
	bp := unpackBufPool.Get().(*[]byte)
	defer unpackBufPool.Put(bp)
	a := &applier{
		root:      root,
		logf:      opts.Logf,
		ids:       opts.IDs,
		noReplace: opts.NoOverwriteDirNonDir,
		buf:       *bp,
		known:     map[string]struct{}{".": {}},
		dirMeta:   map[string]*tar.Header{},
		warned:    map[string]bool{},
		chownFail: map[[2]int]bool{},
		whiteouts: map[string]struct{}{},
	}
	br := bufio.NewReaderSize(r, 64<<10)
	tr := tar.NewReader(br)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return a.stats, fmt.Errorf("unpack: reading layer tar: %w", err)
		}
		if err := a.entry(hdr, tr); err != nil {
			// A hostile layer's paths can be kilobytes long: the message
			// keeps their two ends.
			return a.stats, fmt.Errorf("unpack: entry %s: %w", elide(strconv.Quote(hdr.Name), 160), shortError{err})
		}
	}
	if err := a.finishDirs(); err != nil {
		return a.stats, err
	}
	if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{br}, a.buf); err != nil {
		return a.stats, fmt.Errorf("unpack: draining layer: %w", err)
	}
	return a.stats, nil
}

type applier struct {
	ids       func(uid, gid int) (int, int)
	noReplace bool
	root      string
	logf      func(string, ...any)
	buf       []byte
	stats     ApplyStats
	// known holds resolved layer-relative paths that are real directories
	// (never symlinks) whose every ancestor is a real directory too; paths
	// under them are used directly without re-resolution.
	known map[string]struct{}
	// dirMeta holds the headers of directory entries, whose mode and times
	// are applied after the whole layer (so that read-only or setgid
	// directories do not get in the way, and mtimes are not disturbed).
	dirMeta   map[string]*tar.Header
	warned    map[string]bool
	chownFail map[[2]int]bool
	// whiteouts holds the paths where this layer created a whiteout.
	whiteouts map[string]struct{}
}

func (a *applier) warnOnce(kind, format string, args ...any) {
	if a.warned[kind] {
		return
	}
	a.warned[kind] = true
	if a.logf != nil {
		a.logf(format, args...)
	}
}

func (a *applier) full(rel string) string {
	if rel == "." {
		return a.root
	}
	return a.root + "/" + rel
}

func unpackJoin(parent, base string) string {
	if parent == "." || parent == "" {
		return base
	}
	return parent + "/" + base
}

// cleanEntryPath validates a tar path (entry name or hardlink target) and
// returns it cleaned and relative to the layer root ("." for the root).
func cleanEntryPath(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty path")
	}
	if name[0] == '/' {
		return "", fmt.Errorf("absolute path: %w", ErrPathEscapes)
	}
	for rest := name; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if c == ".." {
			return "", ErrPathEscapes
		}
	}
	return path.Clean(name), nil
}

// resolveDir resolves the layer-relative directory rel inside the root and
// returns its physical layer-relative path (no symlinks). Symlinks met on the
// way are followed only while they stay inside the root: absolute targets and
// relative targets that climb above the root are refused. Missing components
// are created (mode 0755) when create is set.
func (a *applier) resolveDir(rel string, create bool) (string, error) {
	if _, ok := a.known[rel]; ok {
		return rel, nil
	}
	cur := "."
	rest := rel
	hops := 0
	for rest != "" {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch c {
		case "", ".":
			continue
		case "..":
			// Only reachable through a relative symlink target; cur holds no
			// symlinks, so the lexical parent is the physical one.
			if cur == "." {
				return "", ErrPathEscapes
			}
			cur = path.Dir(cur)
			continue
		}
		next := unpackJoin(cur, c)
		if _, ok := a.known[next]; ok {
			cur = next
			continue
		}
		var st unix.Stat_t
		err := unix.Lstat(a.full(next), &st)
		switch {
		case errors.Is(err, unix.ENOENT) && create:
			if err := unix.Mkdir(a.full(next), 0o755); err != nil {
				return "", fmt.Errorf("creating parent %q: %w", next, err)
			}
		case err != nil:
			return "", fmt.Errorf("resolving %q: %w", next, err)
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		case create && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 && a.isOwnWhiteout(next):
			// ".wh.a" then "a/b" without an "a/" entry: a new, opaque a.
			if err := a.replaceWhiteoutWithDir(next, 0o755); err != nil {
				return "", fmt.Errorf("creating parent %q: %w", next, err)
			}
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			hops++
			if hops > maxSymlinkHops {
				return "", fmt.Errorf("resolving %q: %w", rel, unix.ELOOP)
			}
			target, err := unpackReadlink(a.full(next))
			if err != nil {
				return "", fmt.Errorf("resolving %q: %w", next, err)
			}
			if strings.HasPrefix(target, "/") || symlinkClimbsOut(cur, target) {
				return "", fmt.Errorf("parent %q is a symlink to %q: %w", next, target, ErrPathEscapes)
			}
			if rest != "" {
				rest = target + "/" + rest
			} else {
				rest = target
			}
			continue
		default:
			return "", fmt.Errorf("parent %q: %w", next, unix.ENOTDIR)
		}
		a.known[next] = struct{}{}
		cur = next
	}
	return cur, nil
}

// symlinkClimbsOut reports whether the relative symlink target, interpreted
// in directory dir (layer-relative, symlink-free), reaches above the root.
func symlinkClimbsOut(dir, target string) bool {
	depth := 0
	if dir != "." {
		depth = strings.Count(dir, "/") + 1
	}
	for rest := target; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

func unpackReadlink(p string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		n, err := unix.Readlink(p, b)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(b[:n]), nil
		}
	}
}

// forget drops cached knowledge about rel and everything beneath it, after
// a directory there was removed.
func (a *applier) forget(rel string) {
	prefix := rel + "/"
	for k := range a.known {
		if k == rel || strings.HasPrefix(k, prefix) {
			delete(a.known, k)
		}
	}
	for k := range a.dirMeta {
		if k == rel || strings.HasPrefix(k, prefix) {
			delete(a.dirMeta, k)
		}
	}
}

// remove deletes whatever is at rel (a directory recursively). It reports
// whether something was there.
func (a *applier) remove(rel string) (bool, error) {
	if rel == "." {
		return false, errors.New("cannot replace the layer root")
	}
	var st unix.Stat_t
	p := a.full(rel)
	if err := unix.Lstat(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		a.forget(rel)
		return true, os.RemoveAll(p)
	}
	return true, unix.Unlink(p)
}

func (a *applier) entry(hdr *tar.Header, tr *tar.Reader) error {
	rel, err := cleanEntryPath(hdr.Name)
	if err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if rel == "." {
		if hdr.Typeflag != tar.TypeDir {
			return errors.New("the layer root can only be a directory")
		}
		return a.dir(".", hdr)
	}
	parentRel, base := path.Split(rel)
	if parentRel == "" {
		parentRel = "."
	} else {
		parentRel = parentRel[:len(parentRel)-1]
	}

	if strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(parentRel, base)
	}

	parent, err := a.resolveDir(parentRel, true)
	if err != nil {
		return err
	}
	target := unpackJoin(parent, base)
	if err := a.mayReplace(target, hdr.Typeflag); err != nil {
		return err
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		return a.dir(target, hdr)
	case tar.TypeReg, tar.TypeGNUSparse: // the reader already maps TypeRegA
		if isSparse(hdr) {
			// archive/tar hands a sparse file's holes over as zeros, to be
			// written out in full: a header of a few bytes can declare
			// terabytes. Image builders do not write sparse entries.
			return fmt.Errorf("a sparse file (GNU sparse format, %d bytes declared) is not unpacked: its holes would be written out in full; repack the layer without --sparse", hdr.Size)
		}
		return a.regular(target, hdr, tr)
	case tar.TypeSymlink:
		if err := a.create(target, func(p string) error { return unix.Symlink(hdr.Linkname, p) }); err != nil {
			return err
		}
		a.stats.Symlinks++
		return a.meta(target, hdr, false)
	case tar.TypeLink:
		return a.hardlink(target, hdr)
	case tar.TypeChar, tar.TypeBlock:
		mode := uint32(unix.S_IFCHR)
		if hdr.Typeflag == tar.TypeBlock {
			mode = unix.S_IFBLK
		}
		dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
		err := a.create(target, func(p string) error { return unix.Mknod(p, mode|0o600, dev) })
		if errors.Is(err, unix.EPERM) {
			a.stats.SkippedDevices++
			a.warnOnce("device", "unpack: cannot create device node %s (%d:%d): %v; skipping device nodes (no CAP_MKNOD, e.g. in a user namespace)",
				rel, hdr.Devmajor, hdr.Devminor, err)
			return nil
		}
		if err != nil {
			return err
		}
		a.stats.Files++
		return a.meta(target, hdr, true)
	case tar.TypeFifo:
		if err := a.create(target, func(p string) error { return unix.Mkfifo(p, 0o600) }); err != nil {
			return err
		}
		a.stats.Files++
		return a.meta(target, hdr, true)
	default:
		a.warnOnce("type", "unpack: skipping %s: unsupported tar entry type %q", rel, hdr.Typeflag)
		return nil
	}
}

// mayReplace refuses, under NoOverwriteDirNonDir, an entry of type typ
// that would replace what is at rel against docker cp's rules.
func (a *applier) mayReplace(rel string, typ byte) error {
	if !a.noReplace {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(a.full(rel), &st); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return err
	}
	switch kind := st.Mode & unix.S_IFMT; {
	case kind == unix.S_IFDIR && typ != tar.TypeDir:
		return fmt.Errorf("cannot overwrite directory %q with a non-directory: remove it first if that is meant", rel)
	case kind == unix.S_IFLNK:
		return nil
	case typ == tar.TypeDir && kind != unix.S_IFDIR:
		return fmt.Errorf("cannot overwrite non-directory %q with a directory: remove it first if that is meant", rel)
	case typ == tar.TypeSymlink:
		return fmt.Errorf("cannot overwrite %q with a symbolic link: remove it first if that is meant", rel)
	}
	return nil
}

// isSparse reports a GNU sparse entry: the old format's type 'S', or the
// PAX format's GNU.sparse.* records.
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// create runs mk on the full path of rel; if something is already there it is
// removed (recursively for a directory) and mk retried once.
func (a *applier) create(rel string, mk func(string) error) error {
	p := a.full(rel)
	err := mk(p)
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	if _, err := a.remove(rel); err != nil {
		return fmt.Errorf("replacing existing %q: %w", rel, err)
	}
	return mk(p)
}

func (a *applier) dir(rel string, hdr *tar.Header) error {
	if rel != "." {
		p := a.full(rel)
		err := unix.Mkdir(p, 0o700)
		if errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			switch {
			case st.Mode&unix.S_IFMT == unix.S_IFDIR:
				err = nil
			case st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 && a.isOwnWhiteout(rel):
				err = a.replaceWhiteoutWithDir(rel, 0o700)
			default:
				if err := unix.Unlink(p); err != nil {
					return fmt.Errorf("replacing existing %q: %w", rel, err)
				}
				err = unix.Mkdir(p, 0o700)
			}
		}
		if err != nil {
			return err
		}
		a.known[rel] = struct{}{}
	}
	a.stats.Dirs++
	a.dirMeta[rel] = hdr
	if err := a.chown(rel, hdr); err != nil {
		return err
	}
	return a.xattrs(rel, hdr)
}

func (a *applier) regular(rel string, hdr *tar.Header, tr *tar.Reader) error {
	p := a.full(rel)
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(p, flags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		if _, err := a.remove(rel); err != nil {
			return fmt.Errorf("replacing existing %q: %w", rel, err)
		}
		fd, err = unix.Open(p, flags, 0o600)
	}
	if err != nil {
		return err
	}
	// Runs of zeros stay holes: a layer's sparse file (a sandbox's
	// `truncate -s 4G`, committed) costs its data's blocks.
	sw := sparse.NewWriter(fdFile(fd))
	n, err := io.CopyBuffer(sw, struct{ io.Reader }{tr}, a.buf)
	a.stats.Bytes += n
	if err == nil {
		err = sw.Close()
	}
	if err == nil {
		err = a.chown(rel, hdr)
	}
	if err == nil {
		err = a.xattrs(rel, hdr)
	}
	if err == nil {
		err = unix.Fchmod(fd, uint32(hdr.Mode)&0o7777)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	a.stats.Files++
	return a.times(rel, hdr)
}

func (a *applier) hardlink(rel string, hdr *tar.Header) error {
	lrel, err := cleanEntryPath(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hardlink target %q: %w", hdr.Linkname, err)
	}
	if lrel == "." {
		return fmt.Errorf("hardlink target %q is the layer root", hdr.Linkname)
	}
	ldir, lbase := path.Split(lrel)
	ldir = strings.TrimSuffix(ldir, "/")
	if ldir == "" {
		ldir = "."
	}
	lparent, err := a.resolveDir(ldir, false)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("hardlink target %q does not exist in this layer", hdr.Linkname)
	}
	if err != nil {
		return fmt.Errorf("hardlink target %q: %w", hdr.Linkname, err)
	}
	ltarget := unpackJoin(lparent, lbase)
	if ltarget == rel {
		return nil // link to itself: nothing to do
	}
	src := a.full(ltarget)
	err = a.create(rel, func(p string) error { return unix.Linkat(unix.AT_FDCWD, src, unix.AT_FDCWD, p, 0) })
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("hardlink target %q does not exist in this layer", hdr.Linkname)
	}
	if err != nil {
		return fmt.Errorf("hardlink to %q: %w", hdr.Linkname, err)
	}
	a.stats.Hardlinks++
	return nil
}

func validWhiteoutName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/")
}

func (a *applier) whiteout(parentRel, base string) error {
	if base == whiteoutOpaqueDir {
		d, err := a.resolveDir(parentRel, true)
		if err != nil {
			return err
		}
		if err := unix.Lsetxattr(a.full(d), overlayOpaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("marking %q opaque (%s): %w", d, overlayOpaqueXattr, err)
		}
		a.stats.Whiteouts++
		return nil
	}
	if strings.HasPrefix(base, whiteoutMetaPrefix) {
		a.warnOnce("aufs", "unpack: skipping aufs metadata entry %s", unpackJoin(parentRel, base))
		return nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if !validWhiteoutName(name) {
		return fmt.Errorf("invalid whiteout of %q: %w", name, ErrPathEscapes)
	}
	d, err := a.resolveDir(parentRel, true)
	if err != nil {
		return err
	}
	target := unpackJoin(d, name)
	if _, err := a.remove(target); err != nil {
		return fmt.Errorf("whiteout %q: %w", target, err)
	}
	if err := unix.Mknod(a.full(target), unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("creating overlay whiteout %q (0/0 character device): %w", target, err)
	}
	a.whiteouts[target] = struct{}{}
	a.stats.Whiteouts++
	return nil
}

func (a *applier) isOwnWhiteout(rel string) bool {
	_, ok := a.whiteouts[rel]
	return ok
}

// replaceWhiteoutWithDir handles ".wh.d" followed by "d/" (or "d/x") in the
// same layer: a new d replacing the lower one, which in overlay form is an
// opaque directory.
func (a *applier) replaceWhiteoutWithDir(rel string, mode uint32) error {
	p := a.full(rel)
	if err := unix.Unlink(p); err != nil {
		return err
	}
	delete(a.whiteouts, rel)
	if err := unix.Mkdir(p, mode); err != nil {
		return err
	}
	if err := unix.Lsetxattr(p, overlayOpaqueXattr, []byte("y"), 0); err != nil {
		return fmt.Errorf("marking %q opaque (%s): %w", rel, overlayOpaqueXattr, err)
	}
	return nil
}

// meta applies owner, xattrs, mode (unless a symlink) and times to a
// non-directory, non-regular entry.
func (a *applier) meta(rel string, hdr *tar.Header, chmod bool) error {
	if err := a.chown(rel, hdr); err != nil {
		return err
	}
	if err := a.xattrs(rel, hdr); err != nil {
		return err
	}
	if chmod {
		if err := unix.Fchmodat(unix.AT_FDCWD, a.full(rel), uint32(hdr.Mode)&0o7777, 0); err != nil {
			return err
		}
	}
	return a.times(rel, hdr)
}

func (a *applier) chown(rel string, hdr *tar.Header) error {
	key := [2]int{hdr.Uid, hdr.Gid}
	if a.chownFail[key] {
		return nil
	}
	uid, gid := hdr.Uid, hdr.Gid
	if a.ids != nil {
		uid, gid = a.ids(uid, gid)
	}
	err := unix.Lchown(a.full(rel), uid, gid)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) {
		a.chownFail[key] = true
		a.stats.ChownDegraded = true
		a.warnOnce("chown", "unpack: cannot preserve owner %d:%d of %s: no subordinate id range (%v); files will be owned by the unpacking user",
			hdr.Uid, hdr.Gid, rel, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("chown %d:%d: %w", hdr.Uid, hdr.Gid, err)
	}
	return nil
}

func (a *applier) xattrs(rel string, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattrPrefix)
		if !ok {
			continue
		}
		if strings.HasPrefix(name, "user.overlay.") || strings.HasPrefix(name, "trusted.overlay.") {
			// The layer's own overlay metadata is derived from whiteout
			// entries; an image must not smuggle in redirects or opaque marks.
			a.warnOnce("xattr-overlay", "unpack: dropping overlay xattr %s on %s", name, rel)
			continue
		}
		err := unix.Lsetxattr(a.full(rel), name, []byte(v), 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP):
			a.warnOnce("xattr-notsup", "unpack: xattrs not supported by the layer filesystem, dropping %s on %s", name, rel)
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			a.warnOnce("xattr-perm", "unpack: not permitted to set xattr %s on %s: %v; dropping such xattrs", name, rel, err)
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ERANGE), errors.Is(err, unix.E2BIG):
			a.warnOnce("xattr-invalid", "unpack: invalid xattr %s on %s: %v; dropping", name, rel, err)
		default:
			return fmt.Errorf("setting xattr %s: %w", name, err)
		}
	}
	return nil
}

func unpackTimespec(t time.Time) unix.Timespec {
	return unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
}

func (a *applier) times(rel string, hdr *tar.Header) error {
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	ts := []unix.Timespec{unpackTimespec(atime), unpackTimespec(hdr.ModTime)}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, a.full(rel), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting times: %w", err)
	}
	return nil
}

// finishDirs applies the deferred directory modes and times.
func (a *applier) finishDirs() error {
	for _, rel := range unpackDeepestFirst(a.dirMeta) {
		hdr := a.dirMeta[rel]
		var st unix.Stat_t
		if err := unix.Lstat(a.full(rel), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue // replaced or removed later in the layer
		}
		if err := unix.Fchmodat(unix.AT_FDCWD, a.full(rel), uint32(hdr.Mode)&0o7777, 0); err != nil {
			return fmt.Errorf("unpack: entry %q: chmod: %w", hdr.Name, err)
		}
		if err := a.times(rel, hdr); err != nil {
			return fmt.Errorf("unpack: entry %q: %w", hdr.Name, err)
		}
	}
	return nil
}

// unpackDeepestFirst returns the keys of m (layer-relative paths), children before
// their parents, so that a restrictive parent mode set late cannot block the
// lookup of a child.
func unpackDeepestFirst[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	depth := func(k string) int {
		if k == "." {
			return -1
		}
		return strings.Count(k, "/")
	}
	slices.SortFunc(keys, func(x, y string) int { return cmp.Compare(depth(y), depth(x)) })
	return keys
}

// fdFile writes to a raw file descriptor at given offsets, for
// sparse.Writer.
type fdFile int

func (f fdFile) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pwrite(int(f), p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrShortWrite
		}
		n += m
	}
	return n, nil
}

func (f fdFile) Truncate(size int64) error { return unix.Ftruncate(int(f), size) }

// elide shortens s to about max bytes, keeping both ends.
func elide(s string, max int) string {
	if len(s) <= max {
		return s
	}
	keep := max / 2
	return fmt.Sprintf("%s…(%d bytes)…%s", s[:keep], len(s)-2*keep, s[len(s)-keep:])
}

// shortError is err with its message elided to 400 bytes; errors.Is and
// errors.As still see err.
type shortError struct{ err error }

func (e shortError) Error() string { return elide(e.err.Error(), 400) }
func (e shortError) Unwrap() error { return e.err }
