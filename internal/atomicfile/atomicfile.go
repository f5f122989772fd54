// Package atomicfile writes files so that a reader, or a crash, sees the
// old content or the new, never a mix or a truncated file.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with what r yields, mode perm: a temporary file in
// the same directory, synced, renamed over path, then the directory
// synced, so that after a crash the rename is either there with the whole
// content or not at all.
func Write(path string, r io.Reader, perm os.FileMode) error {
	return write(path, r, perm, true)
}

// WriteVolatile is Write without the syncs: readers still see the old
// content or the new, never a mix, but a crash of the machine may lose the
// write (about 0.5 ms less). For records that are rewritten, synced, right
// after.
func WriteVolatile(path string, r io.Reader, perm os.FileMode) error {
	return write(path, r, perm, false)
}

// WriteVolatileOwned is WriteVolatile of a file owned by uid and gid
// from its first appearance under path (a root-run store's files that
// its unprivileged helper must read).
func WriteVolatileOwned(path string, r io.Reader, perm os.FileMode, uid, gid int) error {
	return writeOwned(path, r, perm, false, uid, gid)
}

func write(path string, r io.Reader, perm os.FileMode, durable bool) error {
	return writeOwned(path, r, perm, durable, -1, -1)
}

func writeOwned(path string, r io.Reader, perm os.FileMode, durable bool, uid, gid int) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename: harmless
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if uid >= 0 || gid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return err
		}
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
