package sandbox

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/slopbox/slopbox/internal/atomicfile"

	"golang.org/x/sys/unix"
)

// binaries are the programs a sandbox start runs: the spawn server (""
// means this binary, re-executed) and the program bind-mounted as every
// sandbox's PID 1. Both must be static: PID 1 runs inside any image.
type binaries struct {
	server string
	init   string
	// monitor keeps a detached main command's log and exit on the host
	// (internal/spawnd/monitor.c): the static C build embedded in this
	// binary, or else init, which carries the same code as a constructor.
	monitor string
}

// binaries returns, once per Backend, the programs to use:
//   - the slopbox-spawn build embedded in this binary (make build), written
//     into the store, as both server and PID 1. libcontainer re-executes
//     the server's binary for every sandbox ("runc init"), so a small one
//     starts sooner;
//   - otherwise (a binary built without the embedded helper, such as a Go
//     program using this package, or UseSpawnHelper("self")) this binary,
//     with a copy in the store as PID 1.
//
// UseSpawnHelper may also name a slopbox-spawn binary to use.
func (b *Backend) binaries() (binaries, error) {
	b.binOnce.Do(func() { b.bins, b.binErr = b.installBinaries() })
	return b.bins, b.binErr
}

func (b *Backend) installBinaries() (binaries, error) {
	bins, err := b.installServer()
	if err != nil {
		return bins, err
	}
	bins.monitor = bins.init
	if len(monitorBinary) > 0 {
		id := monitorBinaryID
		if len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
			return binaries{}, fmt.Errorf("the embedded monitor has no valid id (%q): rebuild with make", id)
		}
		dst := filepath.Join(b.root, "bin", "monitor-"+id)
		if _, err := os.Stat(dst); err != nil {
			if err := installFile(dst, bytes.NewReader(monitorBinary), 0o755); err != nil {
				return binaries{}, fmt.Errorf("install the monitor: %w", err)
			}
		}
		bins.monitor = dst
	}
	return bins, nil
}

func (b *Backend) installServer() (binaries, error) {
	dir := filepath.Join(b.root, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return binaries{}, err
	}
	os.Chmod(dir, 0o755) // root of the user namespace reads these
	env := b.spawnHelper
	switch {
	case env != "" && env != "self":
		p, err := installCopy(dir, "spawn-", env)
		return binaries{server: p, init: p}, err
	case env == "" && len(spawnHelper) > 0:
		id := spawnHelperID
		if len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
			return binaries{}, fmt.Errorf("the embedded spawn helper has no valid id (%q): rebuild with make", id)
		}
		dst := filepath.Join(dir, "spawn-"+id)
		if _, err := os.Stat(dst); err != nil {
			if err := installFile(dst, bytes.NewReader(spawnHelper), 0o755); err != nil {
				return binaries{}, fmt.Errorf("install the spawn helper: %w", err)
			}
		}
		return binaries{server: dst, init: dst}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return binaries{}, err
	}

	p, err := installCopy(dir, "init-", self)
	return binaries{init: p}, err
}

// installCopy copies the static program src into dir (once per content
// version) and returns the copy's path.
func installCopy(dir, prefix, src string) (string, error) {
	f, err := elf.Open(src)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", src, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			return "", fmt.Errorf("%s is dynamically linked, but it must run as the sandbox's init inside any image: build it with -ldflags '-extldflags -static' (see the Makefile), or point SLOPBOX_INIT at a static slopbox binary", src)
		}
	}
	f.Close()
	fi, err := os.Stat(src)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, fmt.Sprintf("%s%x-%x", prefix, fi.Size(), fi.ModTime().UnixNano()))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	return dst, installFile(dst, in, 0o755)
}

// installFile puts what r yields at path, mode mode, unless a file is
// there already, which it leaves as it is. The programs are named by their
// content, so one in place is the same program; and it may be the source
// of a bind mount that a sandbox start is making at this very moment
// (every PID 1 runs it): replaced under it, runc fails the start ("reopen
// mountpoint after mount: mountpoint "/dev/.slopbox-init" was moved
// while re-opening"), as it did when several slopbox processes started
// the first sandboxes of a root at once, each installing the helper. The
// content goes to a temporary file in the same directory first, which is
// then linked in place: a reader sees all of it or none, and of
// concurrent installers the first one's file stays.
func installFile(path string, r io.Reader, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // the link, if made, keeps the file
	_, err = io.Copy(tmp, r)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// writeFileAtomic writes r to path through a temporary file in the same
// directory (created if missing) and a rename: readers see all or nothing.
// For files that are only read, never mounted or executed, while they may
// be replaced.
func writeFileAtomic(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, r, mode)
}

// UseSpawnHelper picks the spawn server and PID 1 program before the first
// spawn: the path of a static slopbox-spawn build, or "self" for this
// binary (re-executed); "" (the default) uses the embedded helper when the
// binary carries one. The CLI passes $SLOPBOX_SPAWN_HELPER. Call it before
// Prewarm.
func (b *Backend) UseSpawnHelper(program string) { b.spawnHelper = program }

// openMonitor opens the monitor program (binaries.monitor) to run it as
// /proc/self/fd/N (monitorExec), checked: as root the monitor runs as host
// root, and the store's root directory belongs to root of the store's user
// namespace (an unprivileged host id, which extracts image layers), which
// could move another directory in place of bin/ between a check of a path
// and its exec. So the file run is the one checked: a regular file of this
// user's own that no one else may write, the embedded build's bytes when
// this binary carries one. The fd is above any that exec.Cmd moves its
// files through.
func (b *Backend) openMonitor(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the monitor: %w", err)
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 64)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), path)
	var st unix.Stat_t
	if err := unix.Fstat(nfd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		f.Close()
		return nil, fmt.Errorf("the monitor %s is not a program of this user's own (owner %d, mode %o): remove it", path, st.Uid, st.Mode)
	}
	if len(monitorBinary) > 0 {
		got, err := os.ReadFile(monitorExec(f))
		if err == nil && !bytes.Equal(got, monitorBinary) {
			err = fmt.Errorf("the monitor %s is not this slopbox's: remove it", path)
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// monitorExec is the path that runs the program open as f.
func monitorExec(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }
