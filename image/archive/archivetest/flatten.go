// Package archivetest helps tests check applied layers: Flatten composes
// overlay-ready layer directories into one tree, as overlayfs would show
// them. It is for tests only; slopbox itself always uses overlayfs.
package archivetest

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// opaqueXattr is archive.OpaqueXattr (not imported: archive's own tests
// use this package).
const opaqueXattr = "user.overlay.opaque"

// Flatten, a test helper (tests compare applied layers as one tree), merges
// overlay-ready layer dirs (oldest first) into dst, applying
// whiteouts and opaque dirs, copying file contents (never hardlinking into
// the layer dirs).
//
// dst is created if missing. A 0/0 character device in a layer deletes that
// name from dst; a directory carrying user.overlay.opaque=y first has dst's
// existing content removed. Modes, symlinks, times and xattrs (other than
// overlay ones) are preserved; owners are preserved where permitted (errors
// ignored); files hardlinked together inside one layer dir are hardlinked
// together in dst. Entries in dst are always replaced, never written through,
// so a symlink left by a lower layer cannot redirect an upper layer's writes.
func Flatten(dst string, layers []string) error {
	root, err := filepath.Abs(dst)
	if err != nil {
		return fmt.Errorf("flatten: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("flatten: %w", err)
	}
	f := &flattener{dst: root, buf: make([]byte, 1<<20), dirs: map[string]unix.Stat_t{}}
	for _, l := range layers {
		src, err := filepath.Abs(l)
		if err != nil {
			return fmt.Errorf("flatten: %w", err)
		}
		f.src = src
		f.links = map[[2]uint64]string{}
		var st unix.Stat_t
		if err := unix.Lstat(src, &st); err != nil {
			return fmt.Errorf("flatten: layer %s: %w", l, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("flatten: layer %s is not a directory", l)
		}
		f.dirs["."] = st
		f.copyXattrs(".")
		if err := f.walk("."); err != nil {
			return fmt.Errorf("flatten: layer %s: %w", l, err)
		}
	}
	return f.finishDirs()
}

type flattener struct {
	dst, src string
	buf      []byte
	// links maps (dev, ino) of a multiply-linked file in the current layer to
	// the dst-relative path of its first copy.
	links map[[2]uint64]string
	// dirs holds, per dst-relative directory, the stat of the uppermost layer
	// directory providing it; mode and times are applied at the end.
	dirs map[string]unix.Stat_t
}

func (f *flattener) srcPath(rel string) string {
	if rel == "." {
		return f.src
	}
	return f.src + "/" + rel
}

func (f *flattener) dstPath(rel string) string {
	if rel == "." {
		return f.dst
	}
	return f.dst + "/" + rel
}

func (f *flattener) walk(dir string) error {
	d, err := os.Open(f.srcPath(dir))
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		rel := join(dir, name)
		if err := f.entry(rel); err != nil {
			return fmt.Errorf("%q: %w", rel, err)
		}
	}
	return nil
}

// removeDst removes whatever is at rel in dst.
func (f *flattener) removeDst(rel string) error {
	p := f.dstPath(rel)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		prefix := rel + "/"
		for k := range f.dirs {
			if k == rel || strings.HasPrefix(k, prefix) {
				delete(f.dirs, k)
			}
		}
		return os.RemoveAll(p)
	}
	return unix.Unlink(p)
}

func (f *flattener) entry(rel string) error {
	var st unix.Stat_t
	sp, dp := f.srcPath(rel), f.dstPath(rel)
	if err := unix.Lstat(sp, &st); err != nil {
		return err
	}
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFCHR && st.Rdev == 0 {
		return f.removeDst(rel) // overlay whiteout
	}
	if typ == unix.S_IFDIR {
		var dst unix.Stat_t
		err := unix.Lstat(dp, &dst)
		switch {
		case errors.Is(err, unix.ENOENT):
			if err := unix.Mkdir(dp, 0o700); err != nil {
				return err
			}
		case err != nil:
			return err
		case dst.Mode&unix.S_IFMT != unix.S_IFDIR:
			if err := unix.Unlink(dp); err != nil {
				return err
			}
			if err := unix.Mkdir(dp, 0o700); err != nil {
				return err
			}
		case IsOverlayOpaque(sp):
			if err := f.clearDir(rel); err != nil {
				return err
			}
		}
		_ = unix.Lchown(dp, int(st.Uid), int(st.Gid))
		f.copyXattrs(rel)
		f.dirs[rel] = st
		return f.walk(rel)
	}

	if err := f.removeDst(rel); err != nil {
		return err
	}
	key := [2]uint64{st.Dev, st.Ino}
	if typ != unix.S_IFDIR && st.Nlink > 1 {
		if first, ok := f.links[key]; ok {
			return unix.Linkat(unix.AT_FDCWD, f.dstPath(first), unix.AT_FDCWD, dp, 0)
		}
	}
	switch typ {
	case unix.S_IFREG:
		err := f.copyFile(sp, dp)
		if errors.Is(err, os.ErrPermission) && st.Mode&0o400 == 0 && int(st.Uid) == os.Geteuid() {
			// An unreadable file of ours (e.g. mode 0000, when flattening
			// without CAP_DAC_OVERRIDE): make it readable for the copy only.
			if err = unix.Chmod(sp, st.Mode&0o7777|0o400); err == nil {
				_ = unix.Unlink(dp)
				err = f.copyFile(sp, dp)
				if rerr := unix.Chmod(sp, st.Mode&0o7777); err == nil {
					err = rerr
				}
			}
		}
		if err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := os.Readlink(sp)
		if err != nil {
			return err
		}
		if err := unix.Symlink(target, dp); err != nil {
			return err
		}
	case unix.S_IFIFO:
		if err := unix.Mkfifo(dp, 0o600); err != nil {
			return err
		}
	case unix.S_IFCHR, unix.S_IFBLK:
		if err := unix.Mknod(dp, typ|0o600, int(st.Rdev)); err != nil {
			if errors.Is(err, unix.EPERM) {
				return nil // not permitted (user namespace): skip, like ApplyLayer
			}
			return err
		}
	default:
		return nil // sockets and the like are not image content
	}
	_ = unix.Lchown(dp, int(st.Uid), int(st.Gid))
	f.copyXattrs(rel)
	if typ != unix.S_IFLNK {
		if err := unix.Fchmodat(unix.AT_FDCWD, dp, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dp, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Nlink > 1 {
		f.links[key] = rel
	}
	return nil
}

// IsOverlayOpaque reports whether layer directory p is marked opaque.
func IsOverlayOpaque(p string) bool {
	var b [4]byte
	n, err := unix.Lgetxattr(p, opaqueXattr, b[:])
	return err == nil && n == 1 && b[0] == 'y'
}

// clearDir removes the content lower layers left in dst's directory rel.
func (f *flattener) clearDir(rel string) error {
	d, err := os.Open(f.dstPath(rel))
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := f.removeDst(join(rel, name)); err != nil {
			return err
		}
	}
	return nil
}

func (f *flattener) copyFile(sp, dp string) error {
	in, err := os.OpenFile(sp, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fd, err := unix.Open(dp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(fd), dp)
	// *os.File to *os.File: io.Copy can use copy_file_range (a real copy,
	// possibly reflinked), falling back to the pooled buffer.
	_, err = io.CopyBuffer(out, in, f.buf)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyXattrs copies the xattrs of rel from the layer to dst, best effort,
// leaving out overlay's own.
func (f *flattener) copyXattrs(rel string) {
	sp, dp := f.srcPath(rel), f.dstPath(rel)
	size, err := unix.Llistxattr(sp, nil)
	if err != nil || size <= 0 {
		return
	}
	list := make([]byte, size)
	n, err := unix.Llistxattr(sp, list)
	if err != nil {
		return
	}
	for _, name := range strings.Split(string(list[:n]), "\x00") {
		if name == "" || strings.HasPrefix(name, "user.overlay.") || strings.HasPrefix(name, "trusted.overlay.") {
			continue
		}
		vsize, err := unix.Lgetxattr(sp, name, nil)
		if err != nil {
			continue
		}
		val := make([]byte, vsize)
		m, err := unix.Lgetxattr(sp, name, val)
		if err != nil {
			continue
		}
		_ = unix.Lsetxattr(dp, name, val[:m], 0)
	}
}

func (f *flattener) finishDirs() error {
	for _, rel := range deepestFirst(f.dirs) {
		st := f.dirs[rel]
		dp := f.dstPath(rel)
		var cur unix.Stat_t
		if err := unix.Lstat(dp, &cur); err != nil || cur.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		_ = unix.Lchown(dp, int(st.Uid), int(st.Gid))
		if err := unix.Fchmodat(unix.AT_FDCWD, dp, st.Mode&0o7777, 0); err != nil {
			return fmt.Errorf("flatten: %q: %w", rel, err)
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, dp, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("flatten: %q: %w", rel, err)
		}
	}
	return nil
}

func join(parent, base string) string {
	if parent == "." || parent == "" {
		return base
	}
	return parent + "/" + base
}

// deepestFirst returns m's keys (relative paths), deepest first.
func deepestFirst[V any](m map[string]V) []string {
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
