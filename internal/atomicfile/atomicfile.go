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
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
