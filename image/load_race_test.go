package image

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// flipNames swaps a and b in dir with renameat2(RENAME_EXCHANGE) until the
// returned func is called, as a sandbox writing a shared directory can.
func flipNames(t *testing.T, dir, a, b string) func() {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer d.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(int(d.Fd()), a, int(d.Fd()), b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
		}
	}()
	var once sync.Once
	stopFn := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(stopFn)
	return stopFn
}

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
	stops := []func(){flipNames(t, blobs, "f", "s"), flipNames(t, dir, "d", "ds")}
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
