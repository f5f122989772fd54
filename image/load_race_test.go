package image

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// TestLoadDirNeverFollowsSwappedSymlink: load of an OCI layout directory
// reads it into an archive (tarTree); a blob swapped with a symlink to a
// secret host file, and a directory swapped with a symlink to the secret's
// directory (renameat2 RENAME_EXCHANGE, for 3 s), never put the secret's
// bytes in it. The walk used to lstat a name and then open it by name.
func TestLoadDirNeverFollowsSwappedSymlink(t *testing.T) {
	secretDir := t.TempDir()
	const secretText = "SECRET-HOST-KEY!"
	if err := os.WriteFile(filepath.Join(secretDir, "secret"), []byte(secretText), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs", "sha256")
	os.MkdirAll(blobs, 0o755)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	os.WriteFile(filepath.Join(blobs, "f"), []byte(strings.Repeat("x", len(secretText))), 0o644)
	os.Symlink(filepath.Join(secretDir, "secret"), filepath.Join(blobs, "s"))
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	os.WriteFile(filepath.Join(dir, "d", "secret"), []byte(strings.Repeat("y", len(secretText))), 0o644)
	os.Symlink(secretDir, filepath.Join(dir, "ds"))
	stops := []func(){fixtures.FlipNames(t, blobs, "f", "s"), fixtures.FlipNames(t, dir, "d", "ds")}
	tries, wins := 0, 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); tries++ {
		var b bytes.Buffer
		tarTree(dir, &b) // an error (a symlink met) is fine; a leak is not
		if bytes.Contains(b.Bytes(), []byte(secretText)) {
			wins++
		}
	}
	for _, stop := range stops {
		stop()
	}
	if wins > 0 {
		t.Fatalf("the layout's archive carried the secret in %d of %d reads", wins, tries)
	}
	t.Logf("%d reads, none carried the secret", tries)
}
