package dockercompat

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/test/fixtures"
)

// TestSnapshotRacingFIFO: a sandbox swapping a FIFO in for a file the
// walk has just seen (renameat2 RENAME_EXCHANGE, as fast as it can) made
// a snapshot or its diff wait on the FIFO forever; the file is opened
// without blocking and its type checked on the descriptor, so every walk
// answers (with the file, or "changed during the snapshot"). The old
// code hung within a few hundred walks.
func TestSnapshotRacingFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := fixtures.FlipNames(t, dir, "f", "p")
	const walks = 3000
	done := make(chan int, 1)
	go func() {
		changed := 0
		for range walks {
			if _, err := ReadSnapshot(dir, SnapshotOptions{}); err != nil {
				changed++
			}
		}
		done <- changed
	}()
	select {
	case changed := <-done:
		stop()
		t.Logf("%d walks, %d saw the file change", walks, changed)
	case <-time.After(fixtures.Patience()):
		stop()
		// Let the hung open return: a writer for the FIFO, whichever
		// name it has now.
		for _, n := range []string{"f", "p"} {
			if fd, err := unix.Open(filepath.Join(dir, n), unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				defer unix.Close(fd)
			}
		}
		<-done
		t.Fatalf("a walk hung on the FIFO swapped in (no answer after %s)", fixtures.Patience())
	}
}
