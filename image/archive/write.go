package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/sparse"
	"github.com/slopbox/slopbox/internal/tarentry"
)

// WriteLayer writes dir, a layer in overlayfs form (an overlay upper
// directory, or what ApplyLayer made), as an OCI layer tar to w: 0/0
// character devices become .wh.NAME whiteouts, a directory marked opaque
// gets a .wh..wh..opq entry, hard links inside dir become link entries.
// Owners are the numeric ids as this process sees them (inside the store's
// user namespace: the image's). dir is read through an os.Root, so no
// symlink in it takes a read outside, and every entry is written through
// internal/tarentry: opened by its last name, not followed, its header
// from fstat of the descriptor the content is read from. Entries are in walk order
// (names sorted), so the same tree gives the same tar. A tar holds a
// sparse file's holes as zeros, which whoever extracts the layer writes
// out: the files' apparent sizes together may not exceed bound, and the
// file that would pass it is refused (sparse.ErrTooLarge) before its
// contents are read.
func WriteLayer(dir string, w io.Writer, bound sparse.Bound) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := &tarentry.Writer{TW: tar.NewWriter(w), Links: map[[2]uint64]string{}, Size: &sparse.Counter{Bound: bound},
		Header: func(name string, fi fs.FileInfo) (*tar.Header, error) {
			st := fi.Sys().(*syscall.Stat_t)
			return &tar.Header{Name: name, Mode: tarentry.Mode(st), Uid: int(st.Uid), Gid: int(st.Gid),
				ModTime: time.Unix(st.Mtim.Unix()).UTC(), Format: tar.FormatPAX}, nil
		}}
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel == "." {
			return err
		}
		return writeEntry(root, tw, rel)
	})
	if errors.Is(err, sparse.ErrTooLarge) {
		return fmt.Errorf("the layer is %w", err)
	}
	if err != nil {
		return fmt.Errorf("write layer from %s: %w", dir, err)
	}
	return tw.TW.Close()
}

// writeEntry writes the layer's entry rel through tarentry (its parent
// through the root, rel's last name not followed, its header from the
// descriptor read): a 0/0 character device as its whiteout, an opaque
// directory with its marker, a socket not at all.
func writeEntry(root *os.Root, tw *tarentry.Writer, rel string) error {
	e, err := tarentry.OpenIn(root, rel)
	if err != nil {
		return err
	}
	defer e.Close()
	st := e.Stat()
	mtime := time.Unix(st.Mtim.Unix()).UTC()
	switch e.Kind() {
	case unix.S_IFDIR:
		if err := e.Reopen(); err != nil { // readable, for its xattr
			return err
		}
		var b [1]byte
		n, xerr := unix.Fgetxattr(int(e.File().Fd()), OpaqueXattr, b[:])
		if err := tw.Write(e, rel); err != nil {
			return err
		}
		if xerr == nil && n == 1 && b[0] == 'y' {
			return tw.TW.WriteHeader(&tar.Header{Name: path.Join(rel, whiteoutOpaqueDir), Typeflag: tar.TypeReg, ModTime: mtime, Format: tar.FormatPAX})
		}
		return nil
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			return tw.TW.WriteHeader(&tar.Header{Name: path.Join(path.Dir(rel), whiteoutPrefix+path.Base(rel)), Typeflag: tar.TypeReg, ModTime: mtime, Format: tar.FormatPAX})
		}
		return tw.Write(e, rel)
	case unix.S_IFSOCK:
		return nil // not archived, as docker
	case unix.S_IFBLK, unix.S_IFIFO, unix.S_IFLNK, unix.S_IFREG:
		return tw.Write(e, rel)
	}
	return fmt.Errorf("%s: unexpected file type %o", rel, st.Mode&unix.S_IFMT)
}
