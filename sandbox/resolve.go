package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/atomicfile"
)

// resolveRetries bounds the retries of a lookup that a concurrent rename
// interrupted (EAGAIN); each costs a few microseconds.
const resolveRetries = 1024

// resolveBeneath returns the real path of rel inside root, resolved by the
// kernel strictly beneath root (openat2 RESOLVE_BENEATH): a ".." or a
// symlink that leads out of root is refused, whatever an earlier sandbox
// planted in its workspace (SPEC "Security decisions"). Symlinks that stay
// inside are followed. The spawn server later opens the result with no
// symlinks allowed at all, so nothing swapped in between is followed.
func resolveBeneath(root, rel string) (string, error) {
	fd, err := openBeneath(root, rel)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return fdPath(fd)
}

// openBeneath opens (O_PATH) what resolveBeneath names.
func openBeneath(root, rel string) (int, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("workspace %s: %w", root, err)
	}
	defer unix.Close(rfd)
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(rfd, rel, how)
	// The kernel answers EAGAIN when a rename or mount anywhere on the host
	// raced a ".." step and it could not prove the walk stayed beneath
	// root; openat2(2) says to retry, as runc's and libpathrs' lookups do.
	for i := 0; i < resolveRetries && errors.Is(err, unix.EAGAIN); i++ {
		fd, err = unix.Openat2(rfd, rel, how)
	}
	switch {
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("%q leads out of the workspace %s through a symlink or \"..\": refused (mount a path inside the workspace, or give an absolute source)", rel, root)
	case err != nil:
		return -1, fmt.Errorf("%s in the workspace %s: %w", rel, root, err)
	}
	return fd, nil
}

// openSource opens the absolute mount source src (O_PATH) with no symlink
// followed in any component: a symlink in a mount source may have been
// planted by a sandbox that can write the directory it lies in (SPEC
// "Security decisions"), and is refused with the real path named, for a
// caller that means it to give.
func openSource(src string) (int, error) {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, src, how)
	for i := 0; i < resolveRetries && errors.Is(err, unix.EAGAIN); i++ {
		fd, err = unix.Openat2(unix.AT_FDCWD, src, how)
	}
	if errors.Is(err, unix.ELOOP) {
		real, rerr := filepath.EvalSymlinks(src)
		if rerr != nil {
			real = "?"
		}
		return -1, fmt.Errorf("%s goes through a symlink (it leads to %s): mount sources are not followed through symlinks, which a sandbox may have planted; give the real path if that is what you mean", src, real)
	}
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// mkdirSource creates the absolute directory src where it is missing, as
// Docker's -v does: component by component from /, each opened with no
// symlink followed and each missing one made beneath its parent's
// descriptor (atomicfile.MkdirAll), so that a name a sandbox swaps cannot
// lead the creation elsewhere. An existing src is left as it is, a
// directory or not (a file, a unix socket: Docker's -v mounts it as it is).
func mkdirSource(src string) error {
	err := atomicfile.MkdirAll(src, 0o755)
	if _, ok := errors.AsType[*atomicfile.SymlinkError](err); ok {
		// A symlink on the way: nothing is made through it, and
		// opening the source refuses it, naming where it leads.
		return nil
	}
	if e, ok := errors.AsType[*atomicfile.NotDirError](err); ok && e.Path == filepath.Clean(src) {
		return nil // there, not a directory: opening the source takes it
	}
	return err
}

// workspacePath is the real path of the workspace directory ws, opened
// as openSource opens a mount source.
func workspacePath(ws string) (string, error) {
	fd, err := openSource(ws)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", fmt.Errorf("%s is not a directory", ws)
	}
	return fdPath(fd)
}

// fdPath is the path fd was opened by, as the kernel has it now.
func fdPath(fd int) (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
}
