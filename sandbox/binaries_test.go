package sandbox

import (
	"os"
	"path/filepath"
	"strings"
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
