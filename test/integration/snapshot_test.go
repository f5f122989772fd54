package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// slopbox snapshot DIR and snapshot diff A B, as a user runs them: where
// the archive lands (-o, archive_save_dir, ./slop_code_snapshot<ext>),
// what the spec's snapshot block keeps, the diff's text, JSON and exit
// codes, and bad usage (exit 125, no file written).
func TestSnapshotCLI(t *testing.T) {
	bin := slopboxBin(t)
	dir := t.TempDir()
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("slopbox %v: %v", args, err)
		}
		return out.String(), errb.String(), code
	}
	write := func(p, s string, mode os.FileMode) {
		t.Helper()
		p = filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("ws/main.py", "print(1)\n", 0o755)
	write("ws/run.log", "log\n", 0o644)
	write("ws/x.pyc", "c", 0o644)
	write("ws/tests/assets/a", "asset", 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "ws", "passwd"))
	write("spec.yaml", "type: local\nname: x\nsnapshot: {ignore_globs: ['*.log'], compression: bz2, archive_save_dir: snaps}\n", 0o644)

	// No spec: the defaults, into ./slop_code_snapshot.tar.gz.
	out, errs, code := run("snapshot", "ws")
	if code != 0 || out != "slop_code_snapshot.tar.gz\n" {
		t.Fatalf("snapshot ws: exit %d %q %q", code, out, errs)
	}
	f, err := os.Open(filepath.Join(dir, "slop_code_snapshot.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(z)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name+" "+string(h.Typeflag)+" "+h.Linkname)
	}
	f.Close()
	if want := []string{"main.py 0 ", "passwd 2 /etc/passwd", "run.log 0 "}; !slices.Equal(got, want) {
		t.Errorf("archive %q, want %q", got, want)
	}

	// The spec's block: *.log ignored, bz2, into archive_save_dir.
	out, errs, code = run("snapshot", "ws", "--spec", "spec.yaml")
	if code != 0 || !regexp.MustCompile(`^snaps/\d{8}T\d{6}\.[0-9a-f]{8}\.ws\.tar\.bz2\n$`).MatchString(out) {
		t.Fatalf("snapshot --spec: exit %d %q %q", code, out, errs)
	}
	fromSpec := strings.TrimSpace(out)

	// Change the workspace, snapshot to stdout, and diff.
	write("ws/main.py", "print(1)\nprint(2)\n", 0o755)
	write("ws/new.txt", "a\nb\n", 0o644)
	os.Chmod(filepath.Join(dir, "ws", "main.py"), 0o700)
	os.Remove(filepath.Join(dir, "ws", "passwd"))
	os.Symlink("/etc/hosts", filepath.Join(dir, "ws", "passwd"))
	cmd := exec.Command(bin, "snapshot", "ws", "--spec", "spec.yaml", "--compression", "xz", "-o", "-")
	cmd.Dir = dir
	after, err := cmd.Output()
	if err != nil || !bytes.HasPrefix(after, []byte{0xfd, '7', 'z', 'X', 'Z', 0}) {
		t.Fatalf("snapshot -o -: %v % x", err, after[:min(8, len(after))])
	}
	write("after.tar.xz", string(after), 0o644)
	out, errs, code = run("snapshot", "diff", fromSpec, "after.tar.xz")
	want := "modified  main.py  +1 -0  mode 0755 -> 0700\n" +
		"created   new.txt  +2 -0\n" +
		"modified  passwd -> /etc/hosts (was -> /etc/passwd)\n"
	if code != 0 || out != want {
		t.Errorf("snapshot diff: exit %d\n%s%s\nwant\n%s", code, out, errs, want)
	}
	// A directory against an archive, as JSON, with --exit-code.
	out, errs, code = run("snapshot", "diff", "--json", "--exit-code", "--spec", "spec.yaml", "after.tar.xz", "ws")
	var res struct {
		Changes []map[string]any
		Stats   map[string]int
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || len(res.Changes) != 0 {
		t.Errorf("diff of a snapshot and its directory: exit %d %v %s %s", code, err, out, errs)
	}
	out, _, code = run("snapshot", "diff", "--json", "--exit-code", "slop_code_snapshot.tar.gz", "ws")
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || res.Stats["created"] != 1 || res.Stats["modified"] != 2 {
		t.Errorf("diff --json --exit-code: exit %d %v %s", code, err, out)
	}

	// Bad usage: exit 125, a message, no file.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"snapshot", "ws", "--compression", "zip", "-o", "bad.tar"}, `unsupported compression "zip"`},
		{[]string{"snapshot", "missing", "-o", "bad.tar"}, "no such file or directory"},
		{[]string{"snapshot", "spec.yaml", "-o", "bad.tar"}, "is not a directory"},
		{[]string{"snapshot", "ws", "--spec", "missing.yaml", "-o", "bad.tar"}, "missing.yaml"},
		{[]string{"snapshot", "diff", "after.tar.xz"}, "accepts 2 arg(s)"},
		{[]string{"snapshot", "diff", "spec.yaml", "ws"}, "not a readable snapshot archive"},
	} {
		out, errs, code := run(c.args...)
		if code != 125 || !strings.Contains(errs, c.msg) {
			t.Errorf("%v: exit %d %q %q, want 125 and %q", c.args, code, out, errs, c.msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.tar")); err == nil {
		t.Error("a failed snapshot left bad.tar")
	}
}
