package sandbox

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
)

// Item 1: an image in use keeps its layers. rmi is refused naming the
// sandbox (not for a name whose layers other images keep anyway); forced, the name goes and the layers stay until the sandbox is
// removed; then GC takes them.
func TestImageInUseKeepsItsLayers(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Name: "user-of-image", Keep: false})
	layers := sb.rec.Layers
	// Another name for the same image goes: the layers stay with ref
	// (docker-py's test_build_with_cache_from removes build2, all of
	// whose layers build1 and busybox have, while containers of busybox
	// are about).
	if err := b.Store().Tag(ref, "second-name"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store().Remove("second-name"); err != nil {
		t.Errorf("rmi of another name of an image in use: %v", err)
	}
	_, err := b.Store().Remove(ref)
	if !errors.Is(err, image.ErrInUse) || !strings.Contains(err.Error(), "user-of-image") {
		t.Fatalf("rmi of an image in use: %v, want ErrInUse naming the sandbox", err)
	}
	if _, err := b.Store().ForceRemove(ref); err != nil {
		t.Fatalf("rmi -f: %v", err)
	}
	if _, err := b.Store().Get(ref); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("the name is still there: %v", err)
	}
	if err := b.Store().GC(); err != nil {
		t.Fatal(err)
	}
	if res := run(t, sb, "ls /bin | wc -l"); strings.TrimSpace(res.Stdout) == "0" || res.ExitCode != 0 {
		t.Errorf("the sandbox lost its image: %+v", res)
	}
	for _, l := range layers {
		if _, err := os.Stat(l); err != nil {
			t.Errorf("a layer in use was removed: %v", err)
		}
	}
	// Stopped and started again, it still has its layers.
	if err := sb.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(t.Context()); err != nil {
		t.Fatalf("start after rmi -f: %v", err)
	}
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := b.Store().GC(); err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if _, err := os.Stat(l); err == nil {
			t.Errorf("layer %s outlived its last sandbox and the image", l)
		}
	}
	// The test's own cleanup removes the image: push it back under its name.
	if _, err := b.Store().Pull(t.Context(), ref); err != nil {
		t.Fatal(err)
	}
}
