package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/test/fixtures"
)

// TestMain lets the (static) test binary act as its own helpers and as the
// sandboxes' init.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// searchableTempDir is a t.TempDir the user namespace's root can traverse.
func searchableTempDir(t testing.TB) string {
	d := t.TempDir()
	for p := d; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// testBackend returns a backend over a fresh store holding the busybox
// fixture image, and the image's name.
func testBackend(t testing.TB) (*Backend, string) {
	t.Helper()
	return testBackendAt(t, filepath.Join(searchableTempDir(t), "root"))
}

// testBackendAt is testBackend with its store and state at root.
func testBackendAt(t testing.TB, root string) (*Backend, string) {
	t.Helper()
	reg := fixtures.Registry(t, nil)
	ref := reg + "/test/busybox:latest"
	fixtures.Push(t, ref, fixtures.Busybox(t, image.HostPlatform()))
	b, err := New(root, image.WithLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store().Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer b.Close()
		if ids, err := b.Prune(true); err != nil {
			t.Errorf("prune: %v (%v)", err, ids)
		}
		if _, err := b.Store().Remove(ref); err != nil {
			t.Errorf("rmi: %v", err)
		}
	})
	return b, ref
}

func spawnT(t testing.TB, b *Backend, spec backend.SpawnSpec) *Sandbox {
	t.Helper()
	if spec.Workspace == "" && !spec.NoWorkspaceMount {
		spec.Workspace = workspaceDir(t)
	}
	sb, err := b.spawn(context.Background(), spec, nil, false, false)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return sb
}

// workspaceDir is a workspace owned by the user running the tests.
func workspaceDir(t testing.TB) string {
	d := filepath.Join(searchableTempDir(t), "ws")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}
