package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// flipNames swaps the names a and b in dir with renameat2(RENAME_EXCHANGE)
// until the returned func is called, as a sandbox writing a shared
// directory can.
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

// TestCopyInRacingSymlink: `cp HOSTDIR box:DEST` while the directory's
// files are swapped with symlinks to a secret host file (renameat2
// RENAME_EXCHANGE, as a sandbox sharing the directory can): the secret
// never reaches the sandbox. The host side used to lstat a name and then
// open it by name; it lost in about one copy in three.
func TestCopyInRacingSymlink(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	const secretText = "SECRET-HOST-KEY!"
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(secretText), 0o600); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(searchable(t, t.TempDir()), "tree")
	os.Mkdir(tree, 0o755)
	var stops []func()
	for i := range 3 {
		// Same size as the secret: a followed symlink gives a well-formed entry.
		os.WriteFile(filepath.Join(tree, fmt.Sprintf("f%d", i)), []byte(strings.Repeat("x", len(secretText))), 0o644)
		os.Symlink(secret, filepath.Join(tree, fmt.Sprintf("s%d", i)))
		stops = append(stops, flipNames(t, tree, fmt.Sprintf("f%d", i), fmt.Sprintf("s%d", i)))
	}
	tries := 0
	for deadline := time.Now().Add(8 * time.Second); tries < 40 && time.Now().Before(deadline); tries++ {
		// A copy may fail (a name changed under it); it must not leak.
		e.run("", "cp", tree, fmt.Sprintf("box:/tmp/c%d", tries))
	}
	for _, stop := range stops {
		stop()
	}
	out, _ := e.run("", "exec", "box", "sh", "-c", "find /tmp -type f | xargs grep -l "+secretText+"; true")
	if leaked := strings.Fields(out); len(leaked) > 0 {
		t.Fatalf("the secret reached the sandbox in %d of %d copies: %v", len(leaked), tries, leaked)
	}
	if out := e.must("exec", "box", "sh", "-c", "ls /tmp | wc -l"); strings.TrimSpace(out) == "0" {
		t.Fatalf("no copy arrived in %d tries", tries)
	}
	t.Logf("%d copies, none carried the secret", tries)
}
