package integration

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/slopbox/slopbox/test/fixtures"
)

// victimKey stands for a file a sandbox must never get written: a user's
// ~/.ssh/authorized_keys (rootless), a 0600 file of root's (as root).
const victimKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGxKuXhBGuV5Bwn1nGZ1yGJqFQ5W4B9WcK2D7pQ2G1XV owner@host\n"

// victims makes a file and an empty directory outside the workspace, and
// returns a check that neither changed (the file's bytes and mode, the
// directory's emptiness).
func victims(t *testing.T) (file, dir string, untouched func(what string)) {
	base := searchable(t, t.TempDir())
	file, dir = filepath.Join(base, "authorized_keys"), filepath.Join(base, "dir")
	if err := os.WriteFile(file, []byte(victimKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return file, dir, func(what string) {
		t.Helper()
		if b, err := os.ReadFile(file); err != nil || string(b) != victimKey {
			t.Errorf("%s: the file the symlink names now holds %d bytes (%v)", what, len(b), err)
			os.WriteFile(file, []byte(victimKey), 0o600)
		}
		if fi, err := os.Lstat(file); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: the file the symlink names: %v %v, want a regular 0600 file", what, fi.Mode(), err)
			os.Chmod(file, 0o600)
		}
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			t.Errorf("%s: written in the directory the symlink names: %s", what, ents[0].Name())
			for _, e := range ents {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// names lists a directory's entries.
func names(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestOutputsThroughPlantedSymlinks (issue 41, case 1): a sandbox plants,
// in its workspace on the host, a symlink at the name the caller gives
// export -o, save -o, snapshot -o or build --iidfile, and one at a
// directory on the way (and at archive_save_dir). Every command fails
// naming the flag and the symlink; the file the link names keeps its
// bytes and mode, nothing is made in the directory it names, and nothing
// (no temporary file) is left beside the links. The old code opened the
// names and followed the links: as root a 0600 root file became a tar of
// the sandbox, rootless the user's authorized_keys was replaced.
func TestOutputsThroughPlantedSymlinks(t *testing.T) {
	e := newEnv(t)
	ws := filepath.Join(searchable(t, t.TempDir()), "ws")
	os.Mkdir(ws, 0o755)
	file, dir, untouched := victims(t)
	e.must("run", "-d", "--name", "box", "--workspace", ws, e.ref, "sleep", "infinity")
	e.must("exec", "box", "sh", "-c", "ln -s "+file+" /workspace/out && ln -s "+dir+" /workspace/sub && ln -s "+file+" /workspace/sub-file")
	planted := names(ws)

	src := searchable(t, t.TempDir()) // what snapshot archives
	os.WriteFile(filepath.Join(src, "main.py"), []byte("print(1)\n"), 0o644)
	ctx := searchable(t, t.TempDir()) // what build builds
	os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte("FROM "+e.ref+"\nLABEL x=y\n"), 0o644)
	specs := searchable(t, t.TempDir())
	spec := func(saveDir string) string {
		p := filepath.Join(specs, strings.NewReplacer("/", "_").Replace(saveDir)+".yaml")
		os.WriteFile(p, []byte("type: local\nname: x\nsnapshot: {archive_save_dir: "+saveDir+"}\n"), 0o644)
		return p
	}
	for _, c := range []struct {
		flag string
		args []string
	}{
		{"-o", []string{"export", "-o", ws + "/out", "box"}},
		{"-o", []string{"export", "-o", ws + "/sub/out.tar", "box"}},
		{"-o", []string{"export", "-o", ws + "/sub-file/out.tar", "box"}},
		{"-o", []string{"save", "-o", ws + "/out", e.ref}},
		{"-o", []string{"save", "-o", ws + "/sub/out.tar", e.ref}},
		{"-o", []string{"snapshot", src, "-o", ws + "/out"}},
		{"-o", []string{"snapshot", src, "-o", ws + "/sub/out.tar.gz"}},
		{"archive_save_dir", []string{"snapshot", src, "--spec", spec(ws + "/sub")}},
		{"archive_save_dir", []string{"snapshot", src, "--spec", spec(ws + "/sub/snaps/new")}},
		{"--iidfile", []string{"build", "-q", "--iidfile", ws + "/out", ctx}},
		{"--iidfile", []string{"build", "-q", "--iidfile", ws + "/sub/iid", ctx}},
	} {
		what := strings.ReplaceAll(strings.Join(c.args, " "), ws, "WS")
		out, code := e.run("", c.args...)
		if code == 0 {
			t.Errorf("%s: exit 0, want a refusal:\n%s", what, out)
		} else if !strings.Contains(out, "symlink") || !strings.Contains(out, c.flag) {
			t.Errorf("%s: exit %d: %s\nwant a refusal naming %s and the symlink", what, code, out, c.flag)
		}
		untouched(what)
		if got := names(ws); !slices.Equal(got, planted) {
			t.Errorf("%s: the workspace holds %v, want only the links %v", what, got, planted)
		}
	}

	// The real paths work.
	real := filepath.Join(ws, "real")
	os.Mkdir(real, 0o755)
	e.must("export", "-o", real+"/fs.tar", "box")
	e.must("save", "-o", real+"/img.tar", e.ref)
	e.must("snapshot", src, "-o", real+"/snap.tar.gz")
	e.must("build", "-q", "--iidfile", real+"/iid", ctx)
	if out := e.must("snapshot", src, "--spec", spec(real+"/snaps/a")); !strings.HasPrefix(out, real+"/snaps/a/") {
		t.Errorf("snapshot into archive_save_dir %s/snaps/a: %q", real, out)
	}
	for _, f := range []string{"fs.tar", "img.tar", "snap.tar.gz", "iid", "snaps"} {
		if _, err := os.Stat(filepath.Join(real, f)); err != nil {
			t.Errorf("with the real path: %v", err)
		}
	}
}

// TestOutputReplacesExistingFile: an existing regular file at -o or
// --iidfile is replaced whole, as docker save -o replaces it, by a new
// file renamed over it: its other hard link keeps the old bytes (the old
// export opened it O_TRUNC and wrote through it), and no temporary file
// is left. A directory, FIFO or socket at the name is refused (as the
// docker CLI refuses them) and left as it is.
func TestOutputReplacesExistingFile(t *testing.T) {
	e := newEnv(t)
	e.must("run", "-d", "--name", "box", e.ref, "sleep", "infinity")
	dir := searchable(t, t.TempDir())
	src := searchable(t, t.TempDir())
	os.WriteFile(filepath.Join(src, "main.py"), []byte("print(1)\n"), 0o644)
	ctx := searchable(t, t.TempDir())
	os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte("FROM "+e.ref+"\nLABEL x=y\n"), 0o644)
	const old = "old bytes, longer than an image id, to show a truncation or a partial write: ................................................\n"
	isTar := func(p string) error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = tar.NewReader(f).Next()
		return err
	}
	for _, c := range []struct {
		args  []string
		check func(p string) error
	}{
		{[]string{"export", "-o", "OUT", "box"}, isTar},
		{[]string{"save", "-o", "OUT", e.ref}, isTar},
		{[]string{"snapshot", src, "--compression", "none", "-o", "OUT"}, isTar},
		{[]string{"build", "-q", "--iidfile", "OUT", ctx}, func(p string) error {
			b, err := os.ReadFile(p)
			if err == nil && !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).Match(b) {
				err = errors.New("not an image id: " + string(b))
			}
			return err
		}},
	} {
		what := c.args[0]
		out := filepath.Join(dir, what+".out")
		other := filepath.Join(dir, what+".link")
		if err := os.WriteFile(out, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(out, other); err != nil {
			t.Fatal(err)
		}
		args := slices.Clone(c.args)
		args[slices.Index(args, "OUT")] = out
		e.must(args...)
		if err := c.check(out); err != nil {
			t.Errorf("%s over an existing file: %v", what, err)
		}
		if b, _ := os.ReadFile(other); string(b) != old {
			t.Errorf("%s wrote into the existing file (its other link holds %d bytes): want it replaced", what, len(b))
		}

		// Not a regular file: refused, left as it is.
		for _, kind := range []string{"directory", "fifo"} {
			bad := filepath.Join(dir, what+"."+kind)
			if kind == "directory" {
				os.Mkdir(bad, 0o755)
			} else if err := syscall.Mkfifo(bad, 0o644); err != nil {
				t.Fatal(err)
			}
			args[slices.Index(c.args, "OUT")] = bad
			cctx, cancel := context.WithTimeout(context.Background(), fixtures.Patience())
			cmd := exec.CommandContext(cctx, e.bin, append([]string{"--root", e.root}, args...)...)
			b, err := cmd.CombinedOutput()
			hung := cctx.Err() != nil
			cancel()
			if hung {
				t.Errorf("%s -o a %s: hung", what, kind)
			} else if err == nil || !strings.Contains(string(b), bad) {
				t.Errorf("%s -o a %s: %v, want a refusal naming it:\n%s", what, kind, err, b)
			}
			if fi, err := os.Lstat(bad); err != nil || (kind == "directory") != fi.IsDir() || (kind == "fifo") != (fi.Mode()&os.ModeNamedPipe != 0) {
				t.Errorf("%s -o a %s: it is now %v %v", what, kind, fi.Mode(), err)
			}
		}
	}
	want := []string{}
	for _, c := range []string{"build", "export", "save", "snapshot"} {
		want = append(want, c+".directory", c+".fifo", c+".link", c+".out")
	}
	if got := names(dir); !slices.Equal(got, want) {
		t.Errorf("left in the directory: %v, want %v", got, want)
	}
}

// `slopbox oci spec --bundle DIR` (runc spec) where DIR/config.json is a
// dangling symlink a sandbox planted: refused, nothing made where it
// points (the old code checked with stat, which follows the link to
// nothing, and then wrote through it). An existing config.json is kept,
// as runc spec keeps it.
func TestOCISpecNotThroughSymlink(t *testing.T) {
	o := newOCI(t)
	bundle := searchable(t, t.TempDir())
	_, elsewhere, untouched := victims(t)
	os.Symlink(filepath.Join(elsewhere, "made"), filepath.Join(bundle, "config.json"))
	if _, stderr, code := o.run("spec", "--bundle", bundle); code == 0 || !strings.Contains(stderr, "symlink") {
		t.Errorf("spec through a symlink: exit %d: %s", code, stderr)
	}
	untouched("spec")
	os.Remove(filepath.Join(bundle, "config.json"))
	os.WriteFile(filepath.Join(bundle, "config.json"), []byte("{}"), 0o644)
	if _, stderr, code := o.run("spec", "--bundle", bundle); code == 0 || !strings.Contains(stderr, "exists") {
		t.Errorf("spec over an existing config.json: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(bundle, "config.json")); string(b) != "{}" {
		t.Errorf("the existing config.json: %q", b)
	}
	os.Remove(filepath.Join(bundle, "config.json"))
	if _, stderr, code := o.run("spec", "--bundle", bundle); code != 0 {
		t.Errorf("spec: exit %d: %s", code, stderr)
	}
	if got := names(bundle); !slices.Equal(got, []string{"config.json"}) {
		t.Errorf("the bundle holds %v", got)
	}
}
