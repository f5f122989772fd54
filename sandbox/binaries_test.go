package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/slopbox/slopbox/backend"
)

// TestSpawnServerPrograms: make test builds with the spawn server embedded
// (slopbox_helper), as bin/slopbox is; a binary without it, or with
// UseSpawnHelper("self"), serves itself. Both give the same sandbox.
func TestSpawnServerPrograms(t *testing.T) {
	for _, mode := range []string{"default", "self"} {
		t.Run(mode, func(t *testing.T) {
			b, ref := testBackend(t)
			if mode == "self" {
				b.UseSpawnHelper("self")
			}
			sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
			res := run(t, sb, "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; echo ok > out")
			if !strings.Contains(res.Stdout, "NoNewPrivs:\t1") || !strings.Contains(res.Stdout, "Seccomp:\t2") {
				t.Errorf("sandbox security state: %q", res.Stdout)
			}
			bins, err := b.binaries()
			if err != nil {
				t.Fatal(err)
			}
			embedded := len(spawnHelper) > 0 && mode == "default"
			if got := strings.HasPrefix(filepath.Base(bins.server), "spawn-"); got != embedded {
				t.Errorf("server %q: embedded helper in use = %v, want %v", bins.server, got, embedded)
			}
			if embedded && bins.init != bins.server {
				t.Errorf("PID 1 is %s, want the helper %s", bins.init, bins.server)
			}
			if _, err := os.Stat(bins.init); err != nil {
				t.Error(err)
			}
		})
	}
}

// installFile never replaces a program in place: the first sandboxes of a
// root, started at once by several slopbox processes, each install the
// spawn helper, and one replaced under a start's bind mount of it failed
// that start ("mountpoint ... was moved while re-opening").
func TestInstallFileKeepsTheFileInPlace(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "bin", "spawn-0123456789abcdef")
	if err := installFile(dst, strings.NewReader("first"), 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if before.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", before.Mode().Perm())
	}
	// Another installer that found no file a moment ago.
	if err := installFile(dst, strings.NewReader("second"), 0o755); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("the installed file was replaced")
	}
	if b, _ := os.ReadFile(dst); string(b) != "first" {
		t.Errorf("content %q, want the first installer's", b)
	}
	// Many at once: one file, whole, and no temporary file left.
	dst2 := filepath.Join(dir, "bin", "spawn-fedcba9876543210")
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := installFile(dst2, strings.NewReader(strings.Repeat(strconv.Itoa(i%10), 1<<16)), 0o755); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if b, _ := os.ReadFile(dst2); len(b) != 1<<16 || strings.Count(string(b), string(b[:1])) != len(b) {
		t.Errorf("concurrent installs left %d bytes, not one installer's whole file", len(b))
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "bin"))
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files left: %v, want the two programs only", names)
	}
}
