package sandbox

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/tarentry"
	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// The host side reads a sandbox's filesystem as overlayfs shows it to the
// sandbox: its upper directory (what it wrote, which it can write while it
// runs) over its image's layers. Every lookup is one name under a directory
// descriptor, with openat2's RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS and
// fstatat's AT_SYMLINK_NOFOLLOW: a symlink the sandbox made is stored as a
// symlink, never followed, and a name swapped for a symlink while the host
// reads fails rather than leading out of the layer.

// Change is one entry of docker diff: Kind 0 changed, 1 added, 2 deleted.
type Change struct {
	Path string
	Kind int
}

// Kinds of Change, Docker's numbers.
const (
	ChangeModified = 0
	ChangeAdded    = 1
	ChangeDeleted  = 2
)

// runtimeFiles are the files and directories slopbox mounts over the
// image (mount points in the upper directory, not the sandbox's changes),
// as Docker's diff leaves out its init layer's.
var runtimeFiles = []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev", "/proc", "/sys"}

// mergedDir is one directory of the merged view: its directory in each
// layer that shows through, newest (the upper one) first.
type mergedDir struct {
	fds   []int
	upper bool // fds[0] is the upper layer's
}

func (d *mergedDir) close() {
	for _, fd := range d.fds {
		unix.Close(fd)
	}
}

// entry is one name of a merged directory: the layer whose entry wins
// (index in fds) and its stat; deleted for a whiteout in the upper layer.
type entry struct {
	layer   int
	st      unix.Stat_t
	deleted bool
}

func whiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func opaqueFd(fd int) bool {
	var b [1]byte
	n, err := unix.Fgetxattr(fd, "user.overlay.opaque", b[:])
	return err == nil && n == 1 && b[0] == 'y'
}

func openAtBeneath(dirfd int, name string, flags int) (int, error) {
	return unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

func readNames(fd int) ([]string, error) {
	dup, err := openAtBeneath(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// entries reads the merged directory: each name once, the newest layer's
// entry winning; a whiteout hides the name, an opaque directory the
// layers below it.
func (d *mergedDir) entries() (map[string]entry, error) {
	out := map[string]entry{}
	for i, fd := range d.fds {
		names, err := readNames(fd)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if _, seen := out[n]; seen {
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // removed meanwhile
				}
				return nil, err
			}
			out[n] = entry{layer: i, st: st, deleted: whiteout(&st)}
		}
		if opaqueFd(fd) {
			break
		}
	}
	return out, nil
}

// child opens the merged directory name, whose winning entry e is a
// directory: its directory in that layer and in each layer below, as long
// as they are directories and none is opaque.
func (d *mergedDir) child(name string, e entry) (*mergedDir, error) {
	c := &mergedDir{upper: d.upper && e.layer == 0}
	for i := e.layer; i < len(d.fds); i++ {
		var st unix.Stat_t
		if i > e.layer {
			if unix.Fstatat(d.fds[i], name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				break
			}
		}
		fd, err := openAtBeneath(d.fds[i], name, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			c.close()
			return nil, err
		}
		c.fds = append(c.fds, fd)
		if opaqueFd(fd) {
			break
		}
	}
	return c, nil
}

// rootDirs opens the root of the sandbox's merged view and, apart, of its
// image alone (for what Changes compares with).
func (s *Sandbox) rootDirs() (merged, image *mergedDir, err error) {
	if s.rec.Limits.RootfsBytes > 0 {
		return nil, nil, fmt.Errorf("sandbox %s keeps its writable layer on a size-limited tmpfs that only it sees: its files cannot be read from the host", cmpName(s.rec))
	}
	if s.staleLayer() {
		return nil, nil, fmt.Errorf("sandbox %s: %w", cmpName(s.rec), spawnd.ErrStaleVolatile)
	}
	merged, image = &mergedDir{upper: true}, &mergedDir{}
	fail := func(err error) (*mergedDir, *mergedDir, error) {
		merged.close()
		image.close()
		return nil, nil, err
	}
	upper, err := unix.Open(filepath.Join(s.dir, "upper"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT): // never started: nothing written
		merged.upper = false
	case err != nil:
		return fail(fmt.Errorf("open the writable layer of %s: %w", cmpName(s.rec), err))
	default:
		merged.fds = append(merged.fds, upper)
	}
	for i := len(s.rec.Layers) - 1; i >= 0; i-- {
		for _, d := range []*mergedDir{merged, image} {
			fd, err := unix.Open(s.rec.Layers[i], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fail(fmt.Errorf("open an image layer of %s: %w", cmpName(s.rec), err))
			}
			d.fds = append(d.fds, fd)
		}
	}
	return merged, image, nil
}

// Changes lists what the sandbox changed in its image's filesystem (docker
// diff), sorted by path: what its upper layer holds, added where the image
// has no such path, changed where it has, deleted for a whiteout. A
// directory shows as changed only when something below it changed.
func (s *Sandbox) Changes() ([]Change, error) {
	merged, image, err := s.rootDirs()
	if err != nil {
		return nil, err
	}
	defer merged.close()
	defer image.close()
	var out []Change
	if merged.upper {
		if _, err := changes(merged, image, "/", &out); err != nil {
			return nil, fmt.Errorf("diff %s: %w", cmpName(s.rec), err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// changes adds the changes under directory p (d: its merged view, whose
// fds[0] is the upper layer's; img: the image's, nil where the image has
// no directory p) and reports whether it added any.
func changes(d, img *mergedDir, p string, out *[]Change) (bool, error) {
	names, err := readNames(d.fds[0])
	if err != nil {
		return false, err
	}
	var imgEntries map[string]entry
	if img != nil {
		if imgEntries, err = img.entries(); err != nil {
			return false, err
		}
	}
	found := false
	for _, n := range names {
		cp := path.Join(p, n)
		var st unix.Stat_t
		if err := unix.Fstatat(d.fds[0], n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		ie, inImage := imgEntries[n]
		inImage = inImage && !ie.deleted
		switch {
		case whiteout(&st):
			if inImage {
				*out = append(*out, Change{cp, ChangeDeleted})
				found = true
			}
			continue
		case slices.Contains(runtimeFiles, cp):
			continue
		}
		kind := ChangeModified
		if !inImage {
			kind = ChangeAdded
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			*out = append(*out, Change{cp, kind})
			found = true
			continue
		}
		fd, err := openAtBeneath(d.fds[0], n, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return false, err
		}
		sub := &mergedDir{fds: []int{fd}, upper: true}
		var subImg *mergedDir
		if inImage && ie.st.Mode&unix.S_IFMT == unix.S_IFDIR && !opaqueFd(fd) {
			subImg, err = img.child(n, ie)
			if err != nil {
				sub.close()
				return false, err
			}
		}
		at := len(*out)
		*out = append(*out, Change{cp, kind})
		below, err := changes(sub, subImg, cp, out)
		sub.close()
		if subImg != nil {
			subImg.close()
		}
		if err != nil {
			return false, err
		}
		if kind == ChangeModified && !below && !(inImage && opaqueFd2(d.fds[0], n)) {
			*out = slices.Delete(*out, at, at+1) // only carried what changed below
			continue
		}
		found = true
	}
	return found, nil
}

func opaqueFd2(dirfd int, name string) bool {
	fd, err := openAtBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return opaqueFd(fd)
}

// Export writes the sandbox's whole filesystem, as it sees it, as a tar
// stream (docker export): its image with its changes, owners as the
// sandbox sees them.
func (s *Sandbox) Export(w io.Writer) error {
	merged, image, err := s.rootDirs()
	if err != nil {
		return err
	}
	defer merged.close()
	image.close()
	tw := tar.NewWriter(w)
	if err := s.exportDir(tw, merged, ""); err != nil {
		return fmt.Errorf("export %s: %w", cmpName(s.rec), err)
	}
	return tw.Close()
}

func (s *Sandbox) exportDir(tw *tar.Writer, d *mergedDir, p string) error {
	ents, err := d.entries()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(ents))
	for n, e := range ents {
		if !e.deleted {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		e := ents[n]
		name := n
		if p != "" {
			name = p + "/" + n // "./x" stays so, for an archive of DIR/.
		}
		if err := s.exportEntry(tw, d, n, e, name); err != nil {
			return err
		}
	}
	return nil
}

// exportEntry writes entry n of the merged directory d (e: the winning
// layer's, as entries read it) as p, through tarentry: opened by its one
// name in that layer's directory, not followed, its header (owners as the
// sandbox sees them) and contents from that descriptor, and it must still
// be of the kind the merge saw. A file that shrank meanwhile is padded
// with zeros to its header's size. What the host may not read (rootless)
// is left out, a directory's entries only.
func (s *Sandbox) exportEntry(tw *tar.Writer, d *mergedDir, n string, e entry, p string) error {
	te, err := tarentry.Open(d.fds[e.layer], n)
	if err != nil {
		return err
	}
	defer te.Close()
	if te.Kind() != e.st.Mode&unix.S_IFMT {
		return fmt.Errorf("%s changed while it was read", p)
	}
	w := &tarentry.Writer{TW: tw, Pad: true, Header: func(name string, fi fs.FileInfo) (*tar.Header, error) {
		return s.header(fi.Sys().(*syscall.Stat_t), name), nil
	}}
	err = w.Write(te, p)
	if te.Kind() == unix.S_IFREG && unreadable(err) {
		return nil // the host may not read it (rootless): left out
	}
	if err != nil || te.Kind() != unix.S_IFDIR {
		return err
	}
	c, err := d.child(n, e)
	if unreadable(err) {
		return nil // the host may not read it (rootless): the directory alone
	}
	if err != nil {
		return err
	}
	defer c.close()
	err = s.exportDir(tw, c, p)
	if unreadable(err) {
		return nil
	}
	return err
}

// header is a tar header for st at p, its owner as the sandbox sees it.
func (s *Sandbox) header(st *syscall.Stat_t, p string) *tar.Header {
	m := s.b.store.Mapping()
	var size int64
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		size = st.Size
	}
	return &tar.Header{Name: p, Mode: int64(st.Mode & 0o7777), Size: size,
		Uid: containerID(m.UIDs, st.Uid), Gid: containerID(m.GIDs, st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()).UTC(), Format: tar.FormatPAX}
}

// containerID is host id h as the sandbox sees it (65534, nobody, when
// it is not mapped).
func containerID(maps []userns.IDMap, h uint32) int {
	for _, m := range maps {
		if h >= m.HostID && h-m.HostID < m.Size {
			return int(m.ContainerID + h - m.HostID)
		}
	}
	return 65534
}

// maxViewSymlinks bounds the symlinks one lookup in the merged view
// follows (as the kernel's 40).
const maxViewSymlinks = 40

// lookup finds path p of the merged view from its root: the directory
// holding its last component, that component's name and entry. Symlinks
// on the way are resolved inside the view, by slopbox reading them, never
// by the kernel; the last component is not followed. The caller closes
// the directory.
func lookup(root *mergedDir, p string) (*mergedDir, string, entry, error) {
	rest := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur, curPath := root, "/"
	own := false // cur is ours to close
	links := 0
	closeCur := func() {
		if own {
			cur.close()
		}
	}
	for len(rest) > 0 {
		n := rest[0]
		rest = rest[1:]
		if n == "" || n == "." {
			continue
		}
		if n == ".." {
			// Up: resolve the parent again from the root.
			rest = append(strings.Split(strings.Trim(path.Dir(curPath), "/"), "/"), rest...)
			closeCur()
			cur, curPath, own = root, "/", false
			continue
		}
		ents, err := cur.entries()
		if err != nil {
			closeCur()
			return nil, "", entry{}, err
		}
		e, ok := ents[n]
		if !ok || e.deleted {
			closeCur()
			return nil, "", entry{}, fmt.Errorf("%s: %w", path.Join(curPath, n), os.ErrNotExist)
		}
		if len(rest) == 0 {
			return cur, n, e, nil
		}
		switch e.st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			if links++; links > maxViewSymlinks {
				closeCur()
				return nil, "", entry{}, fmt.Errorf("%s: %w", p, unix.ELOOP)
			}
			buf := make([]byte, unix.PathMax)
			k, err := unix.Readlinkat(cur.fds[e.layer], n, buf)
			if err != nil {
				closeCur()
				return nil, "", entry{}, err
			}
			target := string(buf[:k])
			if !path.IsAbs(target) {
				target = path.Join(curPath, target)
			}
			rest = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), rest...)
			closeCur()
			cur, curPath, own = root, "/", false
		case unix.S_IFDIR:
			c, err := cur.child(n, e)
			closeCur()
			if err != nil {
				return nil, "", entry{}, err
			}
			cur, curPath, own = c, path.Join(curPath, n), true
		default:
			closeCur()
			return nil, "", entry{}, fmt.Errorf("%s: %w", path.Join(curPath, n), unix.ENOTDIR)
		}
	}
	// p is the root itself.
	return nil, "", entry{}, errRootPath
}

var errRootPath = errors.New("the root directory")

// ReadFiles writes path src of a sandbox that is not running as a tar
// stream, as CopyOut does for a running one (docker cp SANDBOX:SRC of a
// created or stopped container): its top entry named as copytar.Source
// names it, symlinks on the way resolved inside the sandbox's filesystem,
// the last one stored; read on the host through its layers.
func (s *Sandbox) ReadFiles(src string, w io.Writer) error {
	if ok, err := s.readMounted(w, src); ok {
		return err // below a mount: its source on the host (archive.go)
	}
	merged, image, err := s.rootDirs()
	if err != nil {
		return err
	}
	defer merged.close()
	image.close()
	contents := src == "." || strings.HasSuffix(src, "/.") || path.Clean("/"+src) == "/"
	tw := tar.NewWriter(w)
	if contents {
		d := merged
		if path.Clean("/"+src) != "/" {
			parent, n, e, err := lookup(merged, strings.TrimSuffix(src, "."))
			if err != nil {
				return fmt.Errorf("copy from %s: %w", cmpName(s.rec), err)
			}
			if parent != merged {
				defer parent.close()
			}
			if e.st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return fmt.Errorf("copy from %s: %s is not a directory (it ends in /.)", cmpName(s.rec), src)
			}
			if d, err = parent.child(n, e); err != nil {
				return err
			}
			defer d.close()
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(d.fds[0], &st); err != nil {
			return err
		}
		h := s.header(&st, "./")
		h.Typeflag = tar.TypeDir
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if err := s.exportDir(tw, d, "."); err != nil {
			return err
		}
		return tw.Close()
	}
	parent, n, e, err := lookup(merged, src)
	if err != nil {
		return fmt.Errorf("copy from %s: %w", cmpName(s.rec), err)
	}
	if parent != merged {
		defer parent.close()
	}
	if err := s.exportEntry(tw, parent, n, e, path.Base(path.Clean("/"+src))); err != nil {
		return err
	}
	return tw.Close()
}

// WritableSize is the size in bytes of what the sandbox wrote (the
// regular files of its upper layer, as Docker's SizeRw), counted through
// descriptors as the rest of this file reads it; 0 when it has none the
// host can see.
func (s *Sandbox) WritableSize() int64 {
	if s.rec.Limits.RootfsBytes > 0 {
		return 0
	}
	fd, err := unix.Open(filepath.Join(s.dir, "upper"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	return dirSize(fd, 0)
}

func dirSize(fd, depth int) int64 {
	names, err := readNames(fd)
	if err != nil || depth > 256 {
		return 0
	}
	var total int64
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			total += st.Size
		case unix.S_IFDIR:
			if sub, err := openAtBeneath(fd, n, unix.O_RDONLY|unix.O_DIRECTORY); err == nil {
				total += dirSize(sub, depth+1)
				unix.Close(sub)
			}
		}
	}
	return total
}

// unreadable reports an error of a file or directory the host may not
// read: rootless, a file of a subordinate id with no permission for
// others. Such a file is left out rather than ending the whole archive.
func unreadable(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}
