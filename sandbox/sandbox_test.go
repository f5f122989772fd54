package sandbox

import (
	"context"
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
// --rm) has its writable layer mounted volatile, so neither its copy-ups
// nor its removal wait for the disk; any other keeps overlayfs's syncs and
// can be started again. A stopped Disposable sandbox refuses to start, as
// its layer may be incomplete, and says why.
func TestDisposableLayerIsVolatile(t *testing.T) {
	b, ref := testBackend(t)
	for _, disposable := range []bool{true, false} {
		sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, Disposable: disposable})
		res := run(t, sb, "echo x >> /etc/passwd && grep ' / / ' /proc/self/mountinfo")
		if res.ExitCode != 0 {
			t.Fatalf("disposable %v: %+v", disposable, res)
		}
		if got := strings.Contains(res.Stdout, "volatile"); got != disposable {
			t.Fatalf("disposable %v: root mount %q", disposable, res.Stdout)
		}
		if err := sb.Stop(); err != nil {
			t.Fatal(err)
		}
		err := sb.Start(context.Background())
		switch {
		case disposable && (err == nil || !strings.Contains(err.Error(), "cannot be mounted again")):
			t.Fatalf("start of a stopped disposable sandbox: %v", err)
		case !disposable && err != nil:
			t.Fatalf("start of a stopped sandbox: %v", err)
		case !disposable:
			if res := run(t, sb, "tail -n1 /etc/passwd"); res.Stdout != "x\n" {
				t.Fatalf("after a restart: %+v", res)
			}
		}
	}
}
