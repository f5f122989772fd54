package copytar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/test/fixtures"
)

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
	stop := fixtures.FlipNames(t, filepath.Join(tree, "sub"), "f", "s")
	defer stop()
	stopDir := fixtures.FlipNames(t, tree, "d", "ds")
	defer stopDir()
	tries, wins := 0, 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); tries++ {
		for _, src := range []string{tree, tree + "/."} {
			var b bytes.Buffer
			dir, name := Source(src)
			Write(&b, dir, name, Options{}) // an error (a name changed under it) is fine; a leak is not
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

// bigTree is a tar of top/, top/sub/ and n files of size bytes in top/sub.
func bigTree(t *testing.T, top string, n, size int) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: top + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: top + "/sub/", Typeflag: tar.TypeDir, Mode: 0o755})
	body := bytes.Repeat([]byte("x"), size)
	for i := range n {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("%s/sub/f%d", top, i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)})
		tw.Write(body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestExtractRacingDestinationSwap (security case B3, the race): while a
// copy out of a sandbox extracts DEST/sub/..., the sandbox, which can write
// DEST's parent, exchanges DEST with a directory whose sub is a symlink to
// a host directory (renameat2 RENAME_EXCHANGE). Nothing may land in that
// directory. The extraction used to open entries by a path string below a
// cache of directories checked once: 4-10 files of each copy landed.
func TestExtractRacingDestinationSwap(t *testing.T) {
	target := t.TempDir()
	stream := bigTree(t, "big", 1500, 4096)
	tries := 0
	for deadline := time.Now().Add(6 * time.Second); tries < 20 && time.Now().Before(deadline); tries++ {
		ws := t.TempDir()
		os.MkdirAll(filepath.Join(ws, "fake"), 0o755)
		os.Symlink(target, filepath.Join(ws, "fake", "sub"))
		dest := filepath.Join(ws, "res")
		into, rename, err := Into(dest, false, Options{NoSymlinks: true})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // the sandbox: once res exists, flip it with fake
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				unix.Renameat2(unix.AT_FDCWD, dest, unix.AT_FDCWD, filepath.Join(ws, "fake"), unix.RENAME_EXCHANGE)
			}
		}()
		Extract(bytes.NewReader(stream), into, rename, Options{UID: os.Getuid(), GID: os.Getgid()}) // an error is fine; a write outside is not
		close(stop)
		<-done
		into.Close()
		if ents, _ := os.ReadDir(target); len(ents) > 0 {
			t.Fatalf("try %d: %d files landed in the symlink's target", tries, len(ents))
		}
	}
	t.Logf("%d copies, none wrote through the swapped-in symlink", tries)
}

// TestHostPathsNotFollowed (security cases B3 and B4, static): on the
// host's side no symlink in the path given is followed: not in DEST's
// parent, nor in SRC's parent, nor in DIR of DIR/. (a sandbox may plant
// them in a directory it shares). Such a path is refused, naming the link.
func TestHostPathsNotFollowed(t *testing.T) {
	victim := t.TempDir()
	os.MkdirAll(filepath.Join(victim, "target"), 0o755)
	os.WriteFile(filepath.Join(victim, "secret"), []byte("SECRET"), 0o600)
	ws := t.TempDir()
	os.Symlink(victim, filepath.Join(ws, "link"))
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	os.Symlink(victim, filepath.Join(ws, "sub", "d"))
	o := Options{UID: os.Getuid(), GID: os.Getgid(), NoSymlinks: true}
	for _, dest := range []struct {
		p        string
		contents bool
	}{{ws + "/link/target/run1", false}, {ws + "/link/target/run1", true}, {ws + "/link/target", false}, {ws + "/sub/d/new", true}, {ws + "/link", false}} {
		if d, _, err := Into(dest.p, dest.contents, o); err == nil {
			d.Close()
			t.Errorf("Into(%s): not refused", dest.p)
		}
	}
	for _, src := range []string{ws + "/link/.", ws + "/sub/d/secret", ws + "/link/secret", ws + "/sub/d/."} {
		var b bytes.Buffer
		dir, name := Source(src)
		err := Write(&b, dir, name, o)
		if err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("Write(%s): err = %v, want a refusal naming the symlink", src, err)
		}
		if bytes.Contains(b.Bytes(), []byte("SECRET")) {
			t.Errorf("Write(%s) carried the secret", src)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(victim, "target")); len(ents) > 0 {
		t.Errorf("wrote through the symlink: %v", ents)
	}
	// The symlink itself, as the top entry, is copied as a symlink.
	var b bytes.Buffer
	dir, name := Source(ws + "/link")
	if err := Write(&b, dir, name, o); err != nil || bytes.Contains(b.Bytes(), []byte("SECRET")) {
		t.Errorf("Write(link): %v", err)
	}
}

// TestIntoTrailingSlashNeedsDirectory (review 6): DEST/ naming an existing
// file is an error, as with docker cp ("not a directory"), not an overwrite.
func TestIntoTrailingSlashNeedsDirectory(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "b"), []byte("keep"), 0o644)
	if d, _, err := Into(filepath.Join(dir, "b")+"/", false, Options{NoSymlinks: true}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		if d != nil {
			d.Close()
		}
		t.Errorf("Into(b/): %v, want not a directory", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "b")); string(b) != "keep" {
		t.Errorf("b: %q", b)
	}
}
