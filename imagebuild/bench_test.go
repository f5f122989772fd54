package imagebuild

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/backend"
)

// BenchmarkRunStep builds FROM base with 10 `RUN true` steps (--no-cache,
// --network none) beside the same build without them, and execs `true`
// 10 times in a running sandbox; it reports a RUN step's cost and its
// overhead over the exec. Not a timed test: `go test -bench RunStep`.
func BenchmarkRunStep(b *testing.B) {
	const n = 10
	bk := testBackend(b)
	ctx := context.Background()
	df := func(steps int) string {
		var s strings.Builder
		s.WriteString("FROM base\nLABEL x=1\n")
		for i := range steps {
			fmt.Fprintf(&s, "RUN true %d\n", i)
		}
		return s.String()
	}
	dir := searchableTempDir(b) // an empty context
	sb, err := bk.Spawn(ctx, backend.SpawnSpec{Image: "base", NoWorkspaceMount: true, DisableSetup: true})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Cleanup()
	var build0, buildN, execN time.Duration
	for b.Loop() {
		for _, steps := range []int{0, n} {
			t := time.Now()
			if _, err := New(bk).Build(ctx, Options{ContextDir: dir, DockerfileContent: []byte(df(steps)), NoCache: true, Network: "none"}); err != nil {
				b.Fatal(err)
			}
			if steps == 0 {
				build0 += time.Since(t)
			} else {
				buildN += time.Since(t)
			}
		}
		t := time.Now()
		for range n {
			if res, err := sb.Exec(ctx, backend.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatal(err, res)
			}
		}
		execN += time.Since(t)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	step := (ms(buildN) - ms(build0)) / n
	b.ReportMetric(step, "ms/step")
	b.ReportMetric(ms(execN)/n, "ms/exec")
	b.ReportMetric(step-ms(execN)/n, "ms-overhead/step")
}
