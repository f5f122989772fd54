package backend

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestExitCodeFor(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain.sh")
	if err := os.WriteFile(plain, []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) error { return exec.Command(name, args...).Run() }
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{run("/bin/sh", "-c", "exit 42"), 42},
		{run("/bin/sh", "-c", "kill -9 $$"), 137},
		{run("/nonexistent/slopbox-cmd"), 127},
		{run("slopbox-no-such-command"), 127},
		{run(plain), 126},
	}
	for i, c := range cases {
		if got := ExitCodeFor(c.err); got != c.want {
			t.Errorf("case %d (%v): got %d, want %d", i, c.err, got, c.want)
		}
	}
}
