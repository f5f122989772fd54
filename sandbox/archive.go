package sandbox

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/copytar"
	"github.com/slopbox/slopbox/internal/userns"
)

// A sandbox that is not running has no mount namespace to copy through:
// a path below one of its bind mounts (a volume, a bind source, the
// workspace) is that mount's source on the host, read and written there
// as slopbox cp's host side does, every component opened beneath the
// source with no symlink followed (a symlink the sandbox planted is
// refused, never followed); any other path is in its layers (layers.go).

// mountOf finds the bind mount holding container path p (the deepest
// whose target is p or a directory above it): its host source, whether it
// is read-only, and p below it ("" for the target itself).
func (s *Sandbox) mountOf(p string) (source, rel string, readOnly, ok bool) {
	p = path.Clean("/" + p)
	best := -1
	for i, m := range s.rec.Mounts {
		if m.Type != "bind" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
			continue
		}
		t := path.Clean("/" + m.Destination)
		if p != t && !strings.HasPrefix(p, strings.TrimSuffix(t, "/")+"/") {
			continue
		}
		if best < 0 || len(t) > len(path.Clean("/"+s.rec.Mounts[best].Destination)) {
			best = i
		}
	}
	if best < 0 {
		return "", "", false, false
	}
	m := s.rec.Mounts[best]
	rel = strings.TrimPrefix(strings.TrimPrefix(p, path.Clean("/"+m.Destination)), "/")
	return m.Source, rel, slices.Contains(m.Options, "ro"), true
}

// Errors of WriteFiles, checked with errors.Is.
var (
	// ErrNotMounted: the path is in a stopped sandbox's own filesystem.
	ErrNotMounted = errdefs.ErrConflict.WithMessage("not below a mount")
	// ErrReadOnlyMount: the path is below a read-only mount.
	ErrReadOnlyMount = errdefs.ErrPermissionDenied.WithMessage("is on a read-only mount")
)

// readMounted is ReadFiles of src when it lies below a bind mount; ok is
// false when it does not.
func (s *Sandbox) readMounted(w io.Writer, src string) (ok bool, err error) {
	dir, name := copytar.Source(src)
	source, rel, _, ok := s.mountOf(dir)
	if !ok {
		return false, nil
	}
	if name != "." {
		name = path.Base(path.Clean("/" + dir))
	}
	return true, copytar.Write(w, filepath.Join(source, rel), name, copytar.Options{NoSymlinks: true})
}

// WriteFiles extracts the tar stream r into the directory dest of a
// sandbox that is not running (the Engine API's PUT archive of a created
// or stopped container), as Docker's does: dest must exist and lie below
// one of its bind mounts (a volume's directory, a bind source, the
// workspace), which is written on the host by descriptors, dest and every
// entry opened beneath the mount's source with no symlink followed. The
// entries are owned by the sandbox's root in a volume and by the source
// directory's owner in a bind mount (by the caller when not root), without
// setuid or setgid bits. A path in the sandbox's own filesystem is refused
// (ErrNotMounted): its layers are written only through the running
// sandbox.
func (s *Sandbox) WriteFiles(r io.Reader, dest string) error {
	source, rel, ro, ok := s.mountOf(dest)
	if !ok {
		return fmt.Errorf("%s is %w of %s: slopbox copies into a container that is not running only below its volumes and bind mounts; start it first", dest, ErrNotMounted, cmpName(s.rec))
	}
	if ro {
		return fmt.Errorf("%s %w of %s", dest, ErrReadOnlyMount, cmpName(s.rec))
	}
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	top, err := unix.Openat2(unix.AT_FDCWD, source, how)
	if err != nil {
		return fmt.Errorf("open the source of the mount at %s: %w", dest, err)
	}
	root := os.NewFile(uintptr(top), source)
	defer root.Close()
	var st unix.Stat_t
	if err := unix.Fstat(top, &st); err != nil {
		return err
	}
	o := copytar.Options{UID: int(st.Uid), GID: int(st.Gid), NoSymlinks: true}
	if _, isVolume := s.b.VolumeOfMount(source); isVolume && os.Geteuid() == 0 {
		// A volume's data belongs to the sandboxes' root.
		m := s.b.store.Mapping()
		if u, ok := userns.ToHost(m.UIDs, 0); ok {
			o.UID = int(u)
		}
		if g, ok := userns.ToHost(m.GIDs, 0); ok {
			o.GID = int(g)
		}
	}
	if os.Geteuid() != 0 {
		o.UID, o.GID = os.Geteuid(), os.Getegid() // a user cannot give files away
	}
	d := root
	if rel != "" {
		fd, err := openAtBeneath(top, rel, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return &fs.PathError{Op: "open", Path: dest, Err: err}
		}
		d = os.NewFile(uintptr(fd), dest)
		defer d.Close()
	}
	return copytar.Extract(r, d, "", o)
}
