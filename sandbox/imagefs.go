package sandbox

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// errNotInImage: the path does not exist in the image.
var errNotInImage = errors.New("not in the image")

// maxImageSymlinks bounds the symlinks one lookup follows (as the kernel's
// 40).
const maxImageSymlinks = 40

// imageFile finds the regular file p (e.g. "/etc/passwd") in the image made
// of layers (extracted in overlay form, oldest first) as the sandbox will
// see it, and returns its path on the host; "" when it is absent or not a
// regular file (a FIFO there must not block slopbox). The lookup is
// overlayfs's own: one component at a time, newest layer first, whiteouts
// and opaque directories honoured, a non-directory hiding what lies below
// it. Symlinks are resolved inside the image, never on the host: an image
// whose /etc is a symlink to /etc still gives the image's file, or none.
func imageFile(layers []string, p string) string {
	host, err := lookupImage(layers, p)
	if err != nil {
		return ""
	}
	var st unix.Stat_t
	if unix.Lstat(host, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ""
	}
	return host
}

// lookupImage returns the host path of image path p, following symlinks
// (the last component too) inside the image.
func lookupImage(layers []string, p string) (string, error) {
	top := make([]string, len(layers))
	for i, l := range layers {
		top[len(layers)-1-i] = l // newest first
	}
	links := 0
	rest := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur, dirs := "/", top
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// The parent's layer directories: look the parent up again
			// from the root (it is a directory, no symlinks on the way).
			cur = path.Dir(cur)
			rest = append(strings.Split(strings.Trim(cur, "/"), "/"), rest...)
			cur, dirs = "/", top
			continue
		}
		host, next, err := lookupChild(dirs, c)
		if err != nil {
			return "", err
		}
		var st unix.Stat_t
		if err := unix.Lstat(host, &st); err != nil {
			return "", err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if links++; links > maxImageSymlinks {
				return "", unix.ELOOP
			}
			target, err := os.Readlink(host)
			if err != nil {
				return "", err
			}
			base := cur
			if path.IsAbs(target) {
				base = "/"
			}
			rest = append(strings.Split(strings.Trim(path.Join(base, target), "/"), "/"), rest...)
			cur, dirs = "/", top
			continue
		}
		if len(rest) == 0 {
			return host, nil
		}
		if next == nil {
			return "", unix.ENOTDIR
		}
		cur, dirs = path.Join(cur, c), next
	}
	return dirs[0], nil
}

// lookupChild finds name in the merged directory whose layer directories
// are dirs (newest first). It returns the host path of the entry that
// wins and, when that is a directory, the layer directories merged into
// it. Only single components are looked up, in directories that are real
// directories on the host: nothing on the host is followed.
func lookupChild(dirs []string, name string) (host string, merged []string, err error) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			continue
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		whiteout := st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
		switch {
		case len(merged) == 0 && whiteout:
			return "", nil, errNotInImage
		case len(merged) == 0 && !isDir:
			return p, nil, nil
		case !isDir:
			return merged[0], merged, nil // a lower non-directory is hidden
		}
		merged = append(merged, p)
		if opaque(p) {
			break
		}
	}
	if len(merged) == 0 {
		return "", nil, errNotInImage
	}
	return merged[0], merged, nil
}

// opaque reports whether layer directory p hides the directories below it.
func opaque(p string) bool {
	var b [1]byte
	n, err := unix.Lgetxattr(p, "user.overlay.opaque", b[:])
	return err == nil && n == 1 && b[0] == 'y'
}
