package sandbox

import (
	"context"
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
