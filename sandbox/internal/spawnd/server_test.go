package spawnd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The host resolves a mount source to its real path before the server
// mounts it; a symlink that appears in that path in between (a sandbox
// sharing the directory swapped one in) is refused, never followed.
func TestCloneSourceRefusesSymlinks(t *testing.T) {
	d := t.TempDir()
	if err := os.Mkdir(filepath.Join(d, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(d, "swapped")); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{filepath.Join(d, "swapped"), filepath.Join(d, "swapped", "etc")} {
		if fd, err := cloneSource(src, 0, 0); err == nil || !strings.Contains(err.Error(), "symlink appeared") {
			t.Errorf("cloneSource(%s) = %d, %v; want it refused", src, fd, err)
		}
	}
}
