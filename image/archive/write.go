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
)

// WriteLayer writes dir, a layer in overlayfs form (an overlay upper
// directory, or what ApplyLayer made), as an OCI layer tar to w: 0/0
// character devices become .wh.NAME whiteouts, a directory marked opaque
// gets a .wh..wh..opq entry, hard links inside dir become link entries.
// Owners are the numeric ids as this process sees them (inside the store's
// user namespace: the image's). dir is read through an os.Root, so no
// symlink in it takes a read outside; every header comes from fstat of
// the descriptor the content is read from. Entries are in walk order
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
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{}
	size := &sparse.Counter{Bound: bound}
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel == "." {
			return err
		}
		return writeEntry(root, tw, rel, d, links, size)
	})
	if errors.Is(err, sparse.ErrTooLarge) {
		return fmt.Errorf("the layer is %w", err)
	}
	if err != nil {
		return fmt.Errorf("write layer from %s: %w", dir, err)
	}
	return tw.Close()
}

func writeEntry(root *os.Root, tw *tar.Writer, rel string, d fs.DirEntry, links map[[2]uint64]string, size *sparse.Counter) error {
	fi, err := root.Lstat(rel)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no stat", rel)
	}
	hdr := &tar.Header{
		Name: rel, Mode: int64(fi.Mode().Perm()), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()).UTC(), Format: tar.FormatPAX,
	}
	if fi.Mode()&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		f, err := root.Open(rel)
		if err != nil {
			return err
		}
		var b [1]byte
		n, xerr := unix.Fgetxattr(int(f.Fd()), OpaqueXattr, b[:])
		f.Close()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if xerr == nil && n == 1 && b[0] == 'y' {
			return tw.WriteHeader(&tar.Header{Name: path.Join(rel, whiteoutOpaqueDir), Typeflag: tar.TypeReg, ModTime: hdr.ModTime, Format: tar.FormatPAX})
		}
		return nil
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			return tw.WriteHeader(&tar.Header{Name: path.Join(path.Dir(rel), whiteoutPrefix+path.Base(rel)), Typeflag: tar.TypeReg, ModTime: hdr.ModTime, Format: tar.FormatPAX})
		}
		hdr.Typeflag, hdr.Devmajor, hdr.Devminor = tar.TypeChar, int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		return tw.WriteHeader(hdr)
	case unix.S_IFBLK:
		hdr.Typeflag, hdr.Devmajor, hdr.Devminor = tar.TypeBlock, int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		return tw.WriteHeader(hdr)
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return tw.WriteHeader(hdr)
	case unix.S_IFSOCK:
		return nil // not archived, as docker
	case unix.S_IFLNK:
		target, err := root.Readlink(rel)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	case unix.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if st.Nlink > 1 {
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return tw.WriteHeader(hdr)
			}
			links[key] = rel
		}
		// O_NONBLOCK: a FIFO swapped in after the Lstat must not block the open
		// (the fstat check below refuses it); regular files ignore it.
		f, err := root.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		var fst unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
			return err
		}
		if fst.Ino != st.Ino || fst.Dev != st.Dev || fst.Mode&unix.S_IFMT != unix.S_IFREG {
			return errors.New(rel + " changed while being read")
		}
		if err := size.Add("/"+rel, fst.Size); err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fst.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, fst.Size)
		return err
	}
	return fmt.Errorf("%s: unexpected file type %o", rel, st.Mode&unix.S_IFMT)
}
