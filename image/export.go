package image

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/lowerdirs"
	"github.com/slopbox/slopbox/internal/tarentry"
)

// ExportMatch is one path a pattern given to ExportPaths matched.
type ExportMatch struct {
	Pattern int    `json:"pattern"` // index in the patterns given
	Path    string `json:"path"`    // in the image, relative to /
	Dir     bool   `json:"dir"`
}

// ExportPaths writes to w, as a tar, what the paths patterns name (globs
// allowed, relative to /) hold in the image whose layers have the diffIDs
// layers (oldest first), as seen with the layers stacked: COPY --from's
// source. The entries of the k-th match are named "k/" followed by their
// path in the image; regular files, directories and symlinks only, with
// their modes (setuid bits too) and owners as the image has them. It is
// done by the store's helper, in the store's user namespace, so nothing of
// the layers (subordinate ids rootless) has to be readable by the caller.
// A pattern matching nothing is an error.
func (s *Store) ExportPaths(ctx context.Context, layers []v1.Hash, patterns []string, w *os.File) ([]ExportMatch, error) {
	var ps []string
	for _, p := range layers {
		ps = append(ps, p.String())
	}
	resp, err := s.runHelperResp(ctx, helperRequest{Op: "export-paths", FD: 5, Parents: ps, Patterns: patterns}, w)
	if err != nil {
		return nil, err
	}
	return resp.Matches, nil
}

func (s *Store) exportPathsInside(ctx context.Context, parents, patterns []string, w io.Writer) ([]ExportMatch, error) {
	l, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer l.Unlock()
	if len(parents) == 0 {
		return nil, fmt.Errorf("%s: the source has no files", strings.Join(patterns, " "))
	}
	var layers []string
	for _, p := range parents {
		h, err := v1.NewHash(p)
		if err != nil {
			return nil, err
		}
		layers = append(layers, s.LayerDir(h))
	}
	lower := lowerdirs.Of(layers)
	dir := lower[0]
	if len(lower) > 1 {
		tmp, err := s.tempDir("export")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		// A read-only overlay of the layers (no upper directory); the
		// helper has a mount namespace of its own.
		if err := unix.Mount("overlay", tmp, "overlay", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, "lowerdir="+strings.Join(lower, ":")+",userxattr"); err != nil {
			return nil, fmt.Errorf("mount the source's layers: %w", err)
		}
		defer unix.Unmount(tmp, unix.MNT_DETACH)
		dir = tmp
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	var matches []ExportMatch
	for i, pat := range patterns {
		rel := path.Clean("/" + pat)[1:]
		if rel == "" {
			rel = "."
		}
		ms := []string{rel}
		if strings.ContainsAny(rel, "*?[") {
			if ms, err = fs.Glob(root.FS(), rel); err != nil {
				return nil, fmt.Errorf("%s: %w", pat, err)
			}
			if len(ms) == 0 {
				return nil, fmt.Errorf("no source files were specified (%s matches nothing in the source)", pat)
			}
		}
		for _, m := range ms {
			fi, err := root.Stat(m)
			if err != nil || whiteout(fi) {
				return nil, fmt.Errorf("%s: not found in the source", pat)
			}
			k := len(matches)
			matches = append(matches, ExportMatch{Pattern: i, Path: m, Dir: fi.IsDir()})
			prefix := fmt.Sprint(k)
			if !fi.IsDir() {
				// A symlink named is followed, inside the source.
				if err := exportEntry(ctx, root, tw, m, path.Join(prefix, m), true); err != nil {
					return nil, err
				}
				continue
			}
			err = fs.WalkDir(root.FS(), m, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				return exportEntry(ctx, root, tw, p, path.Join(prefix, p), p == m)
			})
			if err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return matches, bw.Flush()
}

// whiteout: a character device 0/0, the overlay's mark of a removed file
// (seen only when a single layer is read without an overlay).
func whiteout(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*unix.Stat_t)
	return fi.Mode()&fs.ModeCharDevice != 0 && ok && st.Rdev == 0
}

// exportEntry writes the source's entry rel as name through tarentry
// (its header, FileInfoHeader's with no user or group names, from fstat
// of the descriptor read): rel's last name not followed, or with follow
// (a source named) followed inside the root, the regular file or
// directory it leads to opened without blocking. Regular files, directories
// and symlinks only; whiteouts are left out.
func exportEntry(ctx context.Context, root *os.Root, tw *tar.Writer, rel, name string, follow bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e, err := openExported(root, rel, follow)
	if err != nil || e == nil {
		return err
	}
	defer e.Close()
	switch e.Kind() {
	case unix.S_IFDIR, unix.S_IFLNK, unix.S_IFREG:
	default:
		return nil // whiteouts, devices, fifos, sockets: not copied
	}
	w := &tarentry.Writer{TW: tw, Header: func(name string, fi fs.FileInfo) (*tar.Header, error) {
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return nil, err
		}
		hdr.Name, hdr.Uname, hdr.Gname, hdr.Format = name, "", "", tar.FormatPAX
		return hdr, nil
	}}
	err = w.Write(e, name)
	if errors.Is(err, tarentry.ErrChanged) {
		return fmt.Errorf("%s changed while being copied", rel)
	}
	return err
}

// openExported opens rel for exportEntry: not followed (tarentry.OpenIn),
// or with follow, as root.Stat resolves it, a regular file or directory
// opened for reading without blocking (nil for anything else).
func openExported(root *os.Root, rel string, follow bool) (*tarentry.Entry, error) {
	if !follow {
		return tarentry.OpenIn(root, rel)
	}
	fi, err := root.Stat(rel)
	if err != nil || !fi.Mode().IsRegular() && !fi.IsDir() {
		return nil, err
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	e, err := tarentry.FromFile(f)
	if err != nil || (e.Kind() == unix.S_IFDIR) != fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s changed while being copied", rel)
	}
	return e.Owning(), nil
}
