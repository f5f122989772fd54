package copytar

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

// Flip swaps the names a and b in dir with renameat2(RENAME_EXCHANGE) until
// stop is closed, as a sandbox sharing dir can. The returned func stops it
// and waits.
func flip(t *testing.T, dir, a, b string) func() {
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
	return func() { once.Do(func() { close(stop); wg.Wait() }) }
}

// TestWriteNeverFollowsSwappedSymlink: a tree whose file the sandbox keeps
// swapping with a symlink to a secret host file (renameat2 RENAME_EXCHANGE)
// (and a directory it swaps with a symlink to the secret's directory) is
// archived with what is in the tree, never the secret's bytes. The
// walk used to lstat a name and then open it by name: about one copy in
// three carried the secret.
func TestWriteNeverFollowsSwappedSymlink(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret")
	const secretText = "SECRET-HOST-KEY!"
	if err := os.WriteFile(secret, []byte(secretText), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := t.TempDir()
	tree := filepath.Join(shared, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	// Same size as the secret, so a followed symlink gives a well-formed entry.
	os.WriteFile(filepath.Join(tree, "sub", "f"), []byte(strings.Repeat("x", len(secretText))), 0o644)
	os.Symlink(secret, filepath.Join(tree, "sub", "s"))
	// And a directory swapped with a symlink to the secret's directory.
	os.Mkdir(filepath.Join(tree, "d"), 0o755)
	os.WriteFile(filepath.Join(tree, "d", "secret"), []byte(strings.Repeat("y", len(secretText))), 0o644)
	os.Symlink(secretDir, filepath.Join(tree, "ds"))
	stop := flip(t, filepath.Join(tree, "sub"), "f", "s")
	defer stop()
	stopDir := flip(t, tree, "d", "ds")
	defer stopDir()
	tries, wins := 0, 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); tries++ {
		for _, src := range []string{tree, tree + "/."} {
			var b bytes.Buffer
			dir, name := Source(src)
			Write(&b, dir, name) // an error (a name changed under it) is fine; a leak is not
			if bytes.Contains(b.Bytes(), []byte(secretText)) {
				wins++
			}
		}
	}
	stop()
	stopDir()
	if wins > 0 {
		t.Fatalf("the archive carried the secret in %d of %d copies", wins, 2*tries)
	}
	t.Logf("%d copies, none carried the secret", 2*tries)
}
