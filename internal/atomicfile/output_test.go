package atomicfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/test/fixtures"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// CreateOutput refuses a symlink at the name and in the directories
// above it (nothing is written where they point, nothing is left beside
// them), and anything at the name but a regular file; it replaces a
// regular file whole, and a discarded output leaves nothing.
func TestCreateOutput(t *testing.T) {
	base := t.TempDir()
	ws, victim := filepath.Join(base, "ws"), filepath.Join(base, "victim")
	os.Mkdir(ws, 0o755)
	os.Mkdir(victim, 0o755)
	key := filepath.Join(victim, "key")
	os.WriteFile(key, []byte("key"), 0o600)
	os.Symlink(key, filepath.Join(ws, "link"))
	os.Symlink(victim, filepath.Join(ws, "sub"))
	syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644)
	os.Mkdir(filepath.Join(ws, "dir"), 0o755)
	before := entries(t, ws)
	for _, c := range []struct{ path, want string }{
		{ws + "/link", "is a symlink (to " + key + ")"},
		{ws + "/sub/out", ws + "/sub goes through a symlink (it leads to " + victim + ")"},
		{ws + "/sub/new/out", ws + "/sub/new goes through a symlink"},
		{ws + "/fifo", "is a FIFO, not a regular file"},
		{ws + "/dir", "is a directory"},
		{ws + "/", "names a directory"},
		{ws + "/missing/out", "no such file or directory"},
	} {
		err := atomicfile.WriteOutput(c.path, strings.NewReader("hostile"), 0o644)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.path, err, c.want)
		}
		if strings.Contains(c.want, "symlink") && !errors.Is(err, syscall.ELOOP) {
			t.Errorf("%s: %v is not ELOOP", c.path, err)
		}
	}
	if got := entries(t, ws); !slices.Equal(got, before) {
		t.Errorf("left in the directory: %v, want %v", got, before)
	}
	if got := entries(t, victim); !slices.Equal(got, []string{"key"}) {
		t.Errorf("made where the symlink points: %v", got)
	}
	if b, _ := os.ReadFile(key); string(b) != "key" {
		t.Errorf("the symlink's target: %q", b)
	}

	// An existing file is replaced, its other link keeps the old bytes.
	out := filepath.Join(ws, "out")
	os.WriteFile(out, []byte("old"), 0o644)
	os.Link(out, filepath.Join(ws, "other"))
	if err := atomicfile.WriteOutput(out, strings.NewReader("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "new" {
		t.Errorf("out: %q", b)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("out: mode %v", fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "other")); string(b) != "old" {
		t.Errorf("the other link: %q, want the old bytes", b)
	}
	// Discarded: nothing left, the old file kept.
	o, err := atomicfile.CreateOutput(out, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if o.Previous() == nil {
		t.Error("Previous: nil for an existing file")
	}
	o.WriteString("partial")
	o.Close()
	if b, _ := os.ReadFile(out); string(b) != "new" {
		t.Errorf("after a discarded output: %q", b)
	}
	if got := entries(t, ws); len(got) != len(before)+2 {
		t.Errorf("after a discarded output: %v, want %v and out, other", got, before)
	}
	// Relative to the working directory.
	t.Chdir(ws)
	if err := atomicfile.WriteOutput("rel", strings.NewReader("r"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "rel")); string(b) != "r" {
		t.Errorf("rel: %q", b)
	}
}

// MkdirAll makes what is missing, one directory at a time, and nothing
// at or past a symlink.
func TestMkdirAll(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	os.Mkdir(victim, 0o755)
	os.Symlink(victim, filepath.Join(base, "sub"))
	if err := atomicfile.MkdirAll(filepath.Join(base, "a", "b", "c"), 0o750); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(base, "a", "b", "c")); err != nil || !fi.IsDir() || fi.Mode().Perm()&^0o750 != 0 {
		t.Errorf("a/b/c: %v %v", fi, err)
	}
	if err := atomicfile.MkdirAll(filepath.Join(base, "a", "b"), 0o750); err != nil {
		t.Errorf("an existing directory: %v", err)
	}
	for _, p := range []string{"sub", "sub/x/y"} {
		err := atomicfile.MkdirAll(filepath.Join(base, p), 0o755)
		if _, ok := errors.AsType[*atomicfile.SymlinkError](err); !ok || !strings.Contains(err.Error(), filepath.Join(base, "sub")+" goes through a symlink") {
			t.Errorf("MkdirAll %s: %v, want a refusal naming the symlink", p, err)
		}
	}
	if got := entries(t, victim); len(got) > 0 {
		t.Errorf("made through the symlink: %v", got)
	}
	t.Chdir(base)
	if err := atomicfile.MkdirAll("r/s", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "r", "s")); err != nil {
		t.Error(err)
	}
}

// While outputs are written, a directory on the way and the output's
// name are exchanged (renameat2 RENAME_EXCHANGE, as a sandbox writing the
// directory can) with symlinks to a victim directory and file: no write
// ever lands there.
func TestOutputRacingSymlinks(t *testing.T) {
	base := t.TempDir()
	ws, victim := filepath.Join(base, "ws"), filepath.Join(base, "victim")
	os.Mkdir(ws, 0o755)
	os.Mkdir(victim, 0o755)
	key := filepath.Join(victim, "key")
	os.WriteFile(key, []byte("key"), 0o600)
	os.Mkdir(filepath.Join(ws, "d"), 0o755)
	os.Symlink(victim, filepath.Join(ws, "l"))
	os.WriteFile(filepath.Join(ws, "d", "out"), []byte("old"), 0o644)
	os.Symlink(key, filepath.Join(ws, "d", "lnk"))
	stopDir := fixtures.FlipNames(t, ws, "d", "l")
	var wrote, refused int
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; i < 3000 && time.Now().Before(deadline); i++ {
		if err := atomicfile.WriteOutput(filepath.Join(ws, "d", "out"), strings.NewReader("hostile"), 0o644); err != nil {
			refused++
		} else {
			wrote++
		}
	}
	stopDir()
	// The name itself: out exchanged with a symlink to the key.
	d := filepath.Join(ws, "d")
	if _, err := os.Lstat(filepath.Join(d, "lnk")); err != nil {
		d = filepath.Join(ws, "l") // the exchange left the real directory under l
	}
	stop := fixtures.FlipNames(t, d, "out", "lnk")
	for i := 0; i < 3000 && time.Now().Before(deadline.Add(3*time.Second)); i++ {
		if err := atomicfile.WriteOutput(filepath.Join(d, "out"), strings.NewReader("hostile"), 0o644); err != nil {
			refused++
		} else {
			wrote++
		}
	}
	stop()
	if b, _ := os.ReadFile(key); string(b) != "key" {
		t.Fatalf("the victim file now holds %q", b)
	}
	if fi, _ := os.Lstat(key); !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the victim file is now %v", fi.Mode())
	}
	if got := entries(t, victim); !slices.Equal(got, []string{"key"}) {
		t.Fatalf("written where the symlink points: %v", got)
	}
	if wrote == 0 || refused == 0 {
		t.Errorf("%d written, %d refused: the race was not run both ways", wrote, refused)
	}
	t.Logf("%d outputs written, %d refused at a symlink, none through one", wrote, refused)
}
