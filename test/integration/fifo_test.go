package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/slopbox/slopbox/test/fixtures"
)

// answers runs slopbox with args and returns its output and exit code,
// failing the test if it has not answered after fixtures.Patience: a
// hang, not a slow command (it is killed then, and its code is -1).
func (e *env) answers(args ...string) (string, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fixtures.Patience())
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, append([]string{"--root", e.root}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		e.t.Errorf("slopbox %v hung: no answer after %s\n%s", args, fixtures.Patience(), out.String())
		return out.String(), -1
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		e.t.Fatalf("slopbox %v: %v", args, err)
	}
	return out.String(), 0
}

// TestFIFOsRefusedByTheCLI: a FIFO named where slopbox reads a file hung
// `load -i`, `import`, `snapshot diff` and `build` (as the Dockerfile);
// each now refuses it at once, saying what it is and, where a stream
// makes sense, how to pipe one in. `load -i` of a symlink is refused
// naming its target, as symlinked mount sources are.
func TestFIFOsRefusedByTheCLI(t *testing.T) {
	e := newEnv(t)
	dir := searchable(t, t.TempDir())
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	ctxDir := filepath.Join(dir, "context")
	os.Mkdir(ws, 0o755)
	os.Mkdir(ctxDir, 0o755)
	if err := syscall.Mkfifo(filepath.Join(ctxDir, "Dockerfile"), 0o644); err != nil {
		t.Fatal(err)
	}
	const fifoSays = "is a named pipe (FIFO), not a regular file"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "-i", fifo}, "(to load a stream, pipe it in: slopbox load < "},
		{[]string{"import", fifo}, "(to import a stream, pipe it in: slopbox import - < "},
		{[]string{"snapshot", "diff", fifo, ws}, fifoSays},
		{[]string{"snapshot", "diff", ws, fifo}, fifoSays},
		{[]string{"build", ctxDir}, fifoSays},
	} {
		out, code := e.answers(c.args...)
		if code == -1 {
			continue
		}
		if code == 0 || !strings.Contains(out, fifoSays) || !strings.Contains(out, c.want) {
			t.Errorf("slopbox %v: exit %d: %s, want a refusal saying %q", c.args, code, out, c.want)
		}
	}

	// A regular archive still loads, by path and from stdin.
	archive := filepath.Join(dir, "img.tar")
	e.must("pull", "-q", e.ref)
	e.must("save", "-o", archive, e.ref)
	if out, code := e.answers("load", "-i", archive); code != 0 || !strings.Contains(out, "Loaded image") {
		t.Errorf("load -i of an archive: exit %d: %s", code, out)
	}
	link := filepath.Join(dir, "link.tar")
	os.Symlink(archive, link)
	if out, code := e.answers("load", "-i", link); code == 0 || !strings.Contains(out, "is a symlink, which is not followed: name its target ("+archive+")") {
		t.Errorf("load -i of a symlink: exit %d: %s", code, out)
	}
}
