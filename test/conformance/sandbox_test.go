package conformance

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/sandbox"
	"github.com/slopbox/slopbox/test/fixtures"
)

// TestMain lets the (static) test binary act as slopbox's helpers and as
// the sandboxes' init.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestSandbox runs the suite against containers: as root when the tests run
// as root, rootless when they run as an unprivileged user (make test does
// both).
func TestSandbox(t *testing.T) {
	var once sync.Once
	var b *sandbox.Backend
	var ref string
	setup := func(t *testing.T) {
		once.Do(func() {
			root := filepath.Join(searchable(t, os.TempDir()), "slopbox-conformance-"+t.Name()[:4]+randomSuffix())
			reg := fixtures.Registry(t, nil)
			ref = reg + "/conformance/busybox:latest"
			fixtures.Push(t, ref, fixtures.Busybox(t, image.HostPlatform()))
			var err error
			if b, err = sandbox.New(root); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Store().Pull(context.Background(), ref); err != nil {
				t.Fatal(err)
			}
		})
		if b == nil {
			t.Fatal("sandbox backend set-up failed")
		}
	}
	t.Cleanup(func() {
		if b == nil {
			return
		}
		b.Close() // stops the sandboxes kept ready
		if ids, err := b.Prune(true); err != nil {
			t.Errorf("prune: %v (%v)", err, ids)
		}
		b.Store().Remove(ref)
		os.RemoveAll(b.Store().Root())
	})
	Run(t, Factory{
		Name: sandbox.Name,
		New: func(t *testing.T) (backend.Backend, backend.SpawnSpec) {
			setup(t)
			ws := filepath.Join(searchable(t, t.TempDir()), "ws")
			if err := os.Mkdir(ws, 0o755); err != nil {
				t.Fatal(err)
			}
			return b, backend.SpawnSpec{Image: ref, Workspace: ws}
		},
		// Commands see the workspace at the sandbox's workdir (/workspace).
		UsersAvailable: "65534:65534",
	})
}

// searchable makes dir and its parents traversable by the user namespace's
// root (an unprivileged host id when the tests run as root).
func searchable(t *testing.T, dir string) string {
	for p := dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func randomSuffix() string {
	b := make([]byte, 4)
	f, _ := os.Open("/dev/urandom")
	f.Read(b)
	f.Close()
	return string("0123456789abcdef"[b[0]&15]) + string("0123456789abcdef"[b[1]&15]) + string("0123456789abcdef"[b[2]&15]) + string("0123456789abcdef"[b[3]&15])
}
