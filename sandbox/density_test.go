package sandbox

import (
	"testing"

	"github.com/slopbox/slopbox/backend"
)

// TestManySandboxesOnOneID: more sandboxes than the kernel lets one uid
// hold keys (kernel.keys.maxkeys, 200 for a non-root uid) run at once on
// one subordinate range. libcontainer made a session keyring per sandbox,
// so spawns failed after about 195 ("unable to join session keyring:
// disk quota exceeded"); with NoNewKeyring they hold none. A stress test:
// scripts/test.sh runs it in its own step.
func TestManySandboxesOnOneID(t *testing.T) {
	b, ref := testBackend(t)
	const n = 210
	var sbs []*Sandbox
	for i := range n {
		sbs = append(sbs, spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, NoWorkspaceMount: true}))
		if t.Failed() {
			t.Fatalf("spawn %d of %d failed", i+1, n)
		}
	}
	for _, sb := range []*Sandbox{sbs[0], sbs[n-1]} {
		if res := run(t, sb, "echo alive"); res.Stdout != "alive\n" {
			t.Errorf("%s: %+v", sb.Name(), res)
		}
	}
}
