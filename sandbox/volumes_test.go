package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/image"
)

// TestVolumeRemoveRacingSymlink: removing a volume whose data a sandbox
// wrote, with a directory of it swapped with a symlink to a host
// directory (renameat2 RENAME_EXCHANGE, as a sandbox sharing the volume
// can), never removes what the symlink points at: the removal works on
// descriptors and follows no symlink. A few seconds of tries; zero wins.
func TestVolumeRemoveRacingSymlink(t *testing.T) {
	b, err := New(filepath.Join(searchableTempDir(t), "root"), image.WithLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	victim := filepath.Join(t.TempDir(), "victim")
	tries, start := 0, time.Now()
	for ; time.Since(start) < 3*time.Second || tries < 20; tries++ {
		if err := os.MkdirAll(victim, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			os.WriteFile(filepath.Join(victim, "keep"+strconv.Itoa(i)), []byte("host"), 0o644)
		}
		v, err := b.CreateVolume("race", nil)
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(v.Mountpoint, "d")
		os.Mkdir(d, 0o755)
		for i := range 20 {
			os.WriteFile(filepath.Join(d, "keep"+strconv.Itoa(i)), []byte("vol"), 0o644)
		}
		if err := os.Symlink(victim, filepath.Join(v.Mountpoint, "l")); err != nil {
			t.Fatal(err)
		}
		dfd, err := unix.Open(v.Mountpoint, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := unix.Renameat2(dfd, "d", dfd, "l", unix.RENAME_EXCHANGE); errors.Is(err, unix.ENOENT) {
					return // removed
				}
			}
		}()
		err = b.RemoveVolume("race", false)
		close(stop)
		wg.Wait()
		unix.Close(dfd)
		if err != nil {
			// A name that changed kind under it fails the removal (and
			// nothing is followed); once the names hold still, it goes.
			if err := b.RemoveVolume("race", false); err != nil {
				t.Fatalf("try %d: remove: %v", tries, err)
			}
		}
		ents, _ := os.ReadDir(victim)
		if len(ents) != 20 {
			t.Fatalf("try %d: the removal went through the symlink: %d of the host's 20 files left", tries, len(ents))
		}
	}
	t.Logf("%d removals, none followed the symlink", tries)
}

// TestVolumeRemoveUnmountsNothing: a volume's data is the sandboxes' to
// write; a "ws" symlink there to a host mount point (what removing a
// sandbox directory detaches, as root) does not get that mount detached
// when the volume is removed.
func TestVolumeRemoveUnmountsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root: only root detaches mounts when it removes")
	}
	b, err := New(filepath.Join(searchableTempDir(t), "root"), image.WithLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	os.WriteFile(filepath.Join(mnt, "host"), []byte("host"), 0o644)
	v, err := b.CreateVolume("plant", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mnt, filepath.Join(v.Mountpoint, "ws")); err != nil {
		t.Fatal(err)
	}
	if err := b.RemoveVolume("plant", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "host")); err != nil {
		t.Errorf("the host's mount behind the volume's ws symlink was detached: %v", err)
	}
}
