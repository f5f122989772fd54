package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Docker's defaults for paths, where they cost no safety (issue 26): a
// missing working directory of the sandbox (run -w) is made (exec -w's is
// not, as Docker's), a missing -v source directory is created, and without --workspace a
// relative -v resolves against the current directory as Docker's CLI
// resolves it. (-p without --network:
// TestPublishedPorts.)
func TestDockerPathDefaults(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	if out := e.must("run", "--rm", "-w", "/new/work/dir", e.ref, "sh", "-c", "pwd; stat -c %u:%a ."); out != "/new/work/dir\n0:755\n" {
		t.Errorf("run -w of a missing directory: %q, want it made, root's, 0755", out)
	}
	e.must("run", "-d", "--name", "wd", "-w", "/made/here", e.ref, "sleep", "1000")
	if out := e.must("exec", "wd", "pwd"); out != "/made/here\n" {
		t.Errorf("exec into a sandbox made with -w of a missing directory: %q", out)
	}
	if out, code := e.run("", "exec", "-w", "/not/made", "wd", "pwd"); code == 0 {
		t.Errorf("exec -w of a missing directory: exit 0 %q, want it refused as Docker's exec", out)
	}
	dir := searchable(t, t.TempDir())
	missing := filepath.Join(dir, "made", "by", "run")
	e.must("run", "--rm", "-v", missing+":/m", e.ref, "sh", "-c", "echo hi > /m/f")
	if b, err := os.ReadFile(filepath.Join(missing, "f")); err != nil || string(b) != "hi\n" {
		t.Errorf("-v of a missing source: %q %v, want the directory created and written", b, err)
	}
	// A relative -v, from the caller's directory.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, "--root", e.root, "run", "--rm", "-v", "./rel:/r", e.ref, "sh", "-c", "echo there > /r/g")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run -v ./rel:/r from %s: %v %s", dir, err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "rel", "g")); err != nil || strings.TrimSpace(string(b)) != "there" {
		t.Errorf("-v ./rel: %q %v, want ./rel of the caller's directory", b, err)
	}
}

// docker images as harnesses call it: --format over Docker's fields, a
// REPOSITORY[:TAG] argument, names as Docker prints them.
func TestImagesFormatAndFilter(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	e.must("tag", e.ref, "busybox:1.36")
	t.Cleanup(func() { e.run("", "rmi", "busybox:1.36") })
	out := e.must("images", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}")
	if !strings.Contains(out, "busybox:1.36 ") || strings.Contains(out, "index.docker.io") {
		t.Errorf("images --format: %q, want busybox:1.36 as Docker prints it", out)
	}
	if out := e.must("images", "--format", "{{.Repository}}:{{.Tag}}", "busybox"); out != "busybox:1.36\n" {
		t.Errorf("images busybox: %q, want that repository alone", out)
	}
	if out := e.must("images", "-q", "busybox:nosuchtag"); out != "" {
		t.Errorf("images of a missing tag: %q, want nothing", out)
	}
	if out := e.must("images", "--format", "table {{.Repository}}\t{{.Tag}}", "busybox:1.36"); !strings.HasPrefix(out, "REPOSITORY") || !strings.Contains(out, "1.36") {
		t.Errorf("images --format table: %q", out)
	}
}
