package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slopbox/slopbox/backend"
)

func TestSpawnExecSmoke(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: "echo hello; id; exit 42"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.ExitCode != 42 || res.Stdout[:6] != "hello\n" {
		t.Fatalf("result %+v", res)
	}
}

// TestDisposableLayerIsVolatile: a sandbox that goes with its command (run
// --rm, AutoRemove) has its writable layer mounted volatile, so neither its
// copy-ups nor its removal wait for the disk; Keep overrides that, and any
// other sandbox keeps overlayfs's syncs. Within one boot a stopped
// Disposable sandbox starts again with its files; once the host has
// restarted (its boot mark names another boot), start, diff and commit
// refuse it, as its files may be incomplete.
func TestDisposableLayerIsVolatile(t *testing.T) {
	b, ref := testBackend(t)
	rootMount := func(sb *Sandbox) string {
		t.Helper()
		res := run(t, sb, "grep ' / / ' /proc/self/mountinfo")
		if res.ExitCode != 0 {
			t.Fatalf("%+v", res)
		}
		return res.Stdout
	}
	for _, c := range []struct {
		name     string
		spec     backend.SpawnSpec
		volatile bool
	}{
		{"disposable", backend.SpawnSpec{Disposable: true}, true},
		{"autoremove", backend.SpawnSpec{AutoRemove: true}, true},
		{"disposable but kept", backend.SpawnSpec{Disposable: true, Keep: true}, false},
		{"plain", backend.SpawnSpec{}, false},
	} {
		c.spec.Image, c.spec.DisableSetup = ref, true
		sb := spawnT(t, b, c.spec)
		if got := strings.Contains(rootMount(sb), "volatile"); got != c.volatile {
			t.Fatalf("%s: root mount %q", c.name, rootMount(sb))
		}
		if c.spec.AutoRemove {
			continue // a stop removes it
		}
		if res := run(t, sb, "echo x >> /etc/passwd"); res.ExitCode != 0 {
			t.Fatalf("%s: %+v", c.name, res)
		}
		if err := sb.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := sb.Start(context.Background()); err != nil {
			t.Fatalf("%s: start again in the same boot: %v", c.name, err)
		}
		if res := run(t, sb, "tail -n1 /etc/passwd"); res.Stdout != "x\n" {
			t.Fatalf("%s: after a restart: %+v", c.name, res)
		}
		if got := strings.Contains(rootMount(sb), "volatile"); got != c.volatile {
			t.Fatalf("%s: root mount after a restart %q", c.name, rootMount(sb))
		}
		if !c.volatile {
			continue
		}
		// As if the host had restarted since the layer was mounted.
		if err := sb.Stop(); err != nil {
			t.Fatal(err)
		}
		marks, _ := filepath.Glob(filepath.Join(sb.dir, ".volatile-boot-*"))
		if len(marks) != 1 {
			t.Fatalf("boot marks %q", marks)
		}
		if err := os.Rename(marks[0], filepath.Join(sb.dir, ".volatile-boot-00000000-0000-0000-0000-000000000000")); err != nil {
			t.Fatal(err)
		}
		refused := func(how string) {
			t.Helper()
			for what, err := range map[string]error{
				"start":  sb.Start(context.Background()),
				"diff":   func() error { _, err := sb.Changes(); return err }(),
				"commit": sb.WithUpperDir(true, func(string) error { return nil }),
			} {
				if err == nil || !strings.Contains(err.Error(), "host has restarted") {
					t.Fatalf("%s: %s of a layer %s: %v", c.name, what, how, err)
				}
			}
		}
		refused("from an earlier boot")
		// The mark of this boot lost (a crash before it reached the disk):
		// the layer is refused still.
		if err := os.Remove(filepath.Join(sb.dir, ".volatile-boot-00000000-0000-0000-0000-000000000000")); err != nil {
			t.Fatal(err)
		}
		refused("whose boot is not on record")
	}
}

// TestOpenByShortID: the 12-character id ps -q prints opens its sandbox
// (from the directory's names, without reading every record), and a
// prefix no sandbox has is not found.
func TestOpenByShortID(t *testing.T) {
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	got, err := b.Open(sb.ID()[:12])
	if err != nil || got.ID() != sb.ID() {
		t.Fatalf("open %s: %v, %v", sb.ID()[:12], got, err)
	}
	other := "0"
	if sb.ID()[0] == '0' {
		other = "1"
	}
	if _, err := b.Open(other + sb.ID()[1:12]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open of a prefix no sandbox has: %v", err)
	}
}
