package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/test/fixtures"
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

// unixDialProbe, run in a sandbox, writes hello to the unix socket at
// its argument.
const unixDialProbe = "sandbox-test-unix-dial"

func init() {
	reexec.Register(unixDialProbe, func() int {
		c, err := net.Dial("unix", os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer c.Close()
		if _, err := io.WriteString(c, "hello\n"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	})
}

// TestBindMountOfASocket: -v of an existing unix socket (a host agent's,
// /var/run/docker.sock-like) mounts it as it is, as Docker's -v does: it
// is not taken for a missing directory to create, and a client in the
// sandbox reaches the host's listener through it. A source under a
// regular file still says why it cannot be made, naming the -v.
func TestBindMountOfASocket(t *testing.T) {
	b, ref := testBackend(t)
	exe := probeBinary(t)
	dir := searchableTempDir(t)
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// As root the sandbox's root is an unprivileged host id: it may connect.
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- string(b)
	}()
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true,
		Mounts: []backend.Mount{{Source: sock, Target: "/s", CreateMissing: true}, {Source: exe, Target: "/probe", ReadOnly: true}}})
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Argv: []string{"sh", "-c", "test -S /s && " + reexec.Env + "=" + unixDialProbe + " /probe /s"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("in the sandbox: %v %+v", err, res)
	}
	select {
	case s := <-got:
		if s != "hello\n" {
			t.Errorf("the host's listener got %q through the mounted socket, want hello", s)
		}
	case <-time.After(fixtures.Patience()):
		t.Error("the host's listener got no connection through the mounted socket")
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, DisableSetup: true, Workspace: workspaceDir(t),
		Mounts: []backend.Mount{{Source: file + "/sub", Target: "/x", CreateMissing: true}}})
	if want := "-v " + file + "/sub:/x: the source " + file + "/sub does not exist, and cannot be made a directory: " + file + " is not a directory"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("a source under a regular file: %v, want %q", err, want)
	}
}
