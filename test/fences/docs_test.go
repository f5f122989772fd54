package fences

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// publicImage is the image the docs' runnable blocks name; the test runs
// them against the fixtures' busybox, served locally, in its place.
const publicImage = "docker.io/library/busybox:latest"

// runnable returns the fenced blocks of a Markdown file opened with
// "```sh {test}": the docs' commands that a test runs, so they cannot drift.
func runnable(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh {test}":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	if in {
		t.Fatalf("%s: a ```sh {test} block is not closed", path)
	}
	return blocks
}

// TestDocsCommands runs every "```sh {test}" block of README.md and
// docs/*.md with sh -e, in a temporary directory, with `slopbox` on PATH
// being bin/slopbox over a temporary state root.
func TestDocsCommands(t *testing.T) {
	bin := os.Getenv("SLOPBOX_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin/slopbox")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (make build)", bin, err)
	}
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	total := 0
	for _, f := range files {
		for i, block := range runnable(t, f) {
			total++
			t.Run(filepath.Base(f)+"#"+string(rune('1'+i)), func(t *testing.T) { runBlock(t, bin, block) })
		}
	}
	if total == 0 {
		t.Fatal("no ```sh {test} block in README.md or docs/")
	}
}

func runBlock(t *testing.T, bin, block string) {
	dir := t.TempDir()
	for p := dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	root := filepath.Join(dir, "root")
	pathDir := filepath.Join(dir, "path")
	work := filepath.Join(dir, "work")
	os.Mkdir(pathDir, 0o755)
	os.Mkdir(work, 0o755)
	os.WriteFile(filepath.Join(pathDir, "slopbox"), []byte("#!/bin/sh\nexec '"+bin+"' --root '"+root+"' \"$@\"\n"), 0o755)
	ref := fixtures.Registry(t, nil) + "/docs/busybox:latest"
	fixtures.Push(t, ref, fixtures.Busybox(t, image.HostPlatform()))
	t.Cleanup(func() {
		out, _ := exec.Command(bin, "--root", root, "ps", "-a", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			exec.Command(bin, "--root", root, "rm", "-f", id).Run()
		}
	})
	script := strings.ReplaceAll(block, publicImage, ref)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-ex", "-c", script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+pathDir+":"+os.Getenv("PATH"), "HOME="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The block runs in a process group of its own: what it started in
	// the background (a serve) and left running is killed after it, and
	// holds the output pipe for a second at most. A block that leaves a
	// process behind fails (exec.ErrWaitDelay) even when it exits 0.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Errorf("the block failed: %v\n--- block\n%s\n--- output\n%s", err, block, out.String())
	}
}
