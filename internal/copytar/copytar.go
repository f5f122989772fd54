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
	"strings"

	"github.com/slopbox/slopbox/image/archive"
)

// Source splits a docker cp source into the path to read and the name its
// top entry takes: "dir/." copies dir's contents (name ""), anything else
// the file or directory itself under its base name.
func Source(p string) (dir, name string) {
	if p == "." || strings.HasSuffix(p, "/.") {
		return strings.TrimSuffix(p, "."), ""
	}
	clean := filepath.Clean(p)
	return clean, filepath.Base(clean)
}

// Write writes src as a tar stream: its entries are named under name (or
// are src's contents when name is ""). Symlinks are stored as symlinks and
// never followed (src itself included); sockets and devices are skipped.
func Write(w io.Writer, src, name string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if name == "" && !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (it ends in /.)", src)
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		entry := path.Join(name, filepath.ToSlash(rel))
		if entry == "." || entry == "" {
			return nil // the contents of src, not src itself
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch info.Mode().Type() {
		case fs.ModeSymlink:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case 0, fs.ModeDir, fs.ModeNamedPipe:
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = entry
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
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
// symlink in the way of a file is replaced, never written through. Setuid
// and setgid bits are dropped and devices refused.
func Extract(r io.Reader, dir, rename string, o Options) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := archive.ApplyLayer(dir, pr, archive.ApplyOptions{
			IDs: func(int, int) (int, int) { return o.UID, o.GID },
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
