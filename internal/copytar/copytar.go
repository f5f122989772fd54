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

	"github.com/slopbox/slopbox/image/archive"
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
// the symlink, never followed. src's own parent is resolved as given.
// Sockets and devices are skipped.
func Write(w io.Writer, src, name string) error {
	tw := tar.NewWriter(w)
	var err error
	if name == "." {
		// DIR/. names DIR's contents: DIR is resolved as given.
		var d *os.File
		if d, err = os.OpenFile(src, os.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				return fmt.Errorf("%s is not a directory (it ends in /.)", src)
			}
			return err
		}
		defer d.Close()
		err = writeDir(tw, d, ".")
	} else {
		parent, base := filepath.Split(filepath.Clean(src))
		if base == "" { // "/"
			parent, base = "/", "."
		}
		if parent == "" {
			parent = "."
		}
		var d *os.File
		if d, err = os.OpenFile(parent, os.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
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

// writeEntry writes the entry base of the directory dir as name, opening
// it without following a symlink. A missing entry is an error only for the
// top one (top): one deleted during the walk is left out.
func writeEntry(tw *tar.Writer, dir *os.File, base, name string, top bool) error {
	// O_PATH first: a symlink or FIFO is described, never opened.
	fd, err := unix.Openat(int(dir.Fd()), base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && !top {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	p := os.NewFile(uintptr(fd), name)
	defer p.Close()
	fi, err := p.Stat()
	if err != nil {
		return err
	}
	switch fi.Mode().Type() {
	case fs.ModeSymlink:
		link, err := readlinkFD(fd)
		if err != nil {
			return &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		return writeHeader(tw, fi, link, name)
	case fs.ModeNamedPipe:
		return writeHeader(tw, fi, "", name)
	case 0, fs.ModeDir:
	default:
		return nil
	}
	// Reopen to read, still without following: if the name now holds
	// something else, that is what the header describes.
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	if fi.IsDir() {
		flags |= unix.O_DIRECTORY
	}
	rfd, err := unix.Openat(int(dir.Fd()), base, flags, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (changed while being copied?)", err)}
	}
	f := os.NewFile(uintptr(rfd), name)
	defer f.Close()
	rfi, err := f.Stat()
	if err != nil {
		return err
	}
	if rfi.Mode().Type() != fi.Mode().Type() {
		return fmt.Errorf("%s changed while being copied", name)
	}
	if rfi.IsDir() {
		p.Close()
		return writeDir(tw, f, name)
	}
	if err := writeHeader(tw, rfi, "", name); err != nil {
		return err
	}
	// Never more than the header says; a file that shrank is an error.
	if _, err := io.CopyN(tw, f, rfi.Size()); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s shrank while being copied", name)
		}
		return err
	}
	return nil
}

// writeDir writes the open directory d as name, then its entries.
func writeDir(tw *tar.Writer, d *os.File, name string) error {
	fi, err := d.Stat()
	if err != nil {
		return err
	}
	if err := writeHeader(tw, fi, "", name); err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeEntry(tw, d, n, name+"/"+n, false); err != nil {
			return err
		}
	}
	return nil
}

func writeHeader(tw *tar.Writer, fi fs.FileInfo, link, name string) error {
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	return tw.WriteHeader(hdr)
}

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

// Target resolves a docker cp destination: an existing directory receives
// the copy under its own name (into: dest, rename ""); otherwise the copy
// becomes dest itself (into: dest's parent, which must exist, and the top
// entry is renamed to dest's base name).
func Target(dest string) (into, rename string, err error) {
	dest = filepath.Clean(dest)
	fi, err := os.Lstat(dest)
	if err == nil && fi.IsDir() {
		return dest, "", nil
	}
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return "", "", fmt.Errorf("%s is a symbolic link: copy to the directory it names instead", dest)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	parent := filepath.Dir(filepath.Clean(dest))
	if pfi, err := os.Stat(parent); err != nil || !pfi.IsDir() {
		return "", "", fmt.Errorf("destination directory %s does not exist", parent)
	}
	return parent, filepath.Base(filepath.Clean(dest)), nil
}

// Into prepares dest to receive a copy (contents: the stream holds a
// directory's entries, not the directory) and returns Extract's dir and
// rename.
func Into(dest string, contents bool) (dir, rename string, err error) {
	if !contents {
		return Target(dest)
	}
	dest = filepath.Clean(dest)
	fi, err := os.Lstat(dest)
	switch {
	case err == nil && fi.IsDir():
		return dest, "", nil
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return "", "", fmt.Errorf("%s is a symbolic link: copy to the directory it names instead", dest)
	case err == nil:
		return "", "", fmt.Errorf("%s is not a directory: cannot copy a directory's contents into it", dest)
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", err
	}
	if err := os.Mkdir(dest, 0o755); err != nil {
		return "", "", fmt.Errorf("create %s: %w", dest, err)
	}
	return dest, "", nil
}

// Options say how extracted entries are owned.
type Options struct {
	// UID and GID own every extracted entry (docker cp: the caller on the
	// host, root in a sandbox).
	UID, GID int
}

// Extract reads a tar stream into dir. With rename, the stream's top entry
// (its first path component) takes that name. Every path is resolved
// inside dir: "..", absolute names and symlinks met on the way (planted in
// dir, or earlier in the stream) are refused, not followed; an existing
// symlink in the way of a file is replaced, never written through. As
// docker cp, an existing directory is never replaced by a non-directory
// nor a file by a directory, and nothing but a symlink becomes a symlink:
// such an entry is an error, with nothing removed. Setuid and setgid bits
// are dropped and devices refused.
func Extract(r io.Reader, dir, rename string, o Options) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := archive.ApplyLayer(dir, pr, archive.ApplyOptions{
			IDs:                  func(int, int) (int, int) { return o.UID, o.GID },
			NoOverwriteDirNonDir: true,
		})
		pr.CloseWithError(err)
		done <- err
	}()
	err := filter(tar.NewReader(r), tar.NewWriter(pw), rename)
	pw.CloseWithError(err)
	if aerr := <-done; err == nil || errors.Is(err, io.ErrClosedPipe) {
		if aerr != nil {
			return aerr
		}
	}
	return err
}

// filter passes the entries a copy may create, renamed and with safe modes.
func filter(tr *tar.Reader, tw *tar.Writer, rename string) error {
	top := ""
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
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
		if err := tw.WriteHeader(out); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
