package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/slopbox/slopbox/test/fixtures"
)

// startDockerRegistry runs Debian's docker-registry (distribution) on a free
// loopback port with storage in a temp dir, and stops it in t.Cleanup.
func startDockerRegistry(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("this test needs Debian's docker-registry package (apt-get install docker-registry): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	fixtures.Eventually(t, "docker-registry up on "+addr, func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return addr
}

func TestPullFromDebianDockerRegistry(t *testing.T) {
	addr := startDockerRegistry(t)
	ref := addr + "/slopbox/busybox:latest"
	img := fixtures.Busybox(t, HostPlatform())
	fixtures.Push(t, ref, img)
	s := openTestStore(t)
	got, err := s.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(got.Layers[0], "bin", "sh"))
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("bin/sh: %v %v", fi, err)
	}
	if st, err := os.Stat(filepath.Join(got.Layers[0], "bin", "busybox")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("bin/busybox: %v %v", st, err)
	}
	// A second pull is answered by one manifest check.
	start := time.Now()
	if _, err := s.Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	t.Logf("re-pull of a present image: %v", time.Since(start))
	assertConsistent(t, s)
}

// TestDiskFullLeavesStoreConsistent fills a small tmpfs mid-pull, checks
// that nothing half-written is left, then grows it and re-runs the pull.
func TestDiskFullLeavesStoreConsistent(t *testing.T) {
	if os.Geteuid() != 0 {
		// scripts/test.sh leaves this test out of the rootless run, saying so.
		t.Fatal("this test needs root: it mounts a size-limited tmpfs as the store")
	}
	reg := fixtures.Registry(t, nil)
	layer, err := random.Layer(6<<20, types.OCILayer) // incompressible: ~6 MB on disk twice
	if err != nil {
		t.Fatal(err)
	}
	fixtures.Push(t, reg+"/big:v1", fixtures.Image(t, HostPlatform(), nil, layer))
	mnt := testDir(t)
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	s, err := Open(filepath.Join(mnt, "store"), WithLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Pull(context.Background(), reg+"/big:v1")
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("pull onto a full disk: %v, want ENOSPC", err)
	}
	if _, err := s.Get(reg + "/big:v1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("half-pulled image is visible: %v", err)
	}
	assertConsistent(t, s)
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, "size=64m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(context.Background(), reg+"/big:v1"); err != nil {
		t.Fatalf("re-run after freeing space: %v", err)
	}
	assertConsistent(t, s)
	removeStore(t, s)
}
