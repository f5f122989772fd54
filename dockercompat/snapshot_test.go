package dockercompat

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsnet/compress/bzip2"
	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"
)

// Python's fnmatch.fnmatch, as SlopCodeBench matches snapshot globs.
func TestGlobIsFnmatch(t *testing.T) {
	for _, c := range []struct {
		pat, name string
		want      bool
	}{
		{"*.pyc", "a.pyc", true},
		{"*.pyc", "deep/er/a.pyc", true}, // '*' crosses '/'
		{"*.pyc", "a.py", false},
		{"venv/*", "venv/lib/x.py", true},
		{"venv/*", "venv/", true}, // a directory is matched with its trailing '/'
		{"venv/*", "venv", false},
		{"venv/*", "sub/venv/x", false}, // top level only
		{"**/.DS_Store", "a/.DS_Store", true},
		{"**/.DS_Store", ".DS_Store", false}, // ... but "./.DS_Store" matches
		{"**/.DS_Store", "./.DS_Store", true},
		{"?.txt", "a.txt", true},
		{"?.txt", "ab.txt", false},
		{"?", "/", true},
		{"[abc].go", "b.go", true},
		{"[abc].go", "d.go", false},
		{"[!abc].go", "d.go", true},
		{"[!abc].go", "a.go", false},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[z-a]x", "zx", false},    // a reversed range is empty: never matches
		{"[!z-a]x", "qx", true},    // ... and negated matches anything
		{"[]]", "]", true},         // ']' first is literal
		{"[!]]", "a", true},        //
		{"[a-]", "-", true},        // '-' last is literal
		{"[", "[", true},           // no closing ']': literal
		{"a[b", "a[b", true},       //
		{"\\*", "\\x", true},       // no escapes: '\' is literal
		{"\\*", "*", false},        //
		{"A*", "a", false},         // case-sensitive on POSIX
		{"*", "", true},            //
		{"a*b*c", "aXbYbZc", true}, // backtracking
		{"a*b*c", "aXbYbZ", false},
		{"tests/assets", "tests/assets", true},
		{"tests/assets/*", "tests/assets/", true},
		{"é?", "éü", true}, // characters, not bytes
	} {
		if got := CompileGlob(c.pat).Match(c.name); got != c.want {
			t.Errorf("fnmatch(%q, %q) = %v, want %v", c.name, c.pat, got, c.want)
		}
	}
}

// tree builds a workspace from path -> contents ("->target" makes a
// symlink, a trailing "/" a directory).
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		v := files[p]
		switch {
		case strings.HasSuffix(p, "/"):
			err := os.MkdirAll(full, 0o755)
			if err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(v, "->"):
			if err := os.Symlink(v[2:], full); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// members reads a plain tar stream: name -> header, name -> contents.
func members(t *testing.T, r io.Reader) ([]*tar.Header, map[string]string) {
	t.Helper()
	var hs []*tar.Header
	data := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
		data[h.Name] = string(b)
	}
}

func names(hs []*tar.Header) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

func snapshotBytes(t *testing.T, dir string, opts SnapshotOptions) ([]byte, *SnapshotResult) {
	t.Helper()
	var b bytes.Buffer
	res, err := WriteSnapshot(dir, opts, &b)
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), res
}

func TestSnapshotGlobs(t *testing.T) {
	dir := tree(t, map[string]string{
		"main.py":                  "print(1)\n",
		"main.pyc":                 "x",
		"pkg/__pycache__/m.pyc":    "x",
		"pkg/m.py":                 "m",
		"venv/bin/python":          "x",
		".venv/lib/site.py":        "x",
		"nested/venv/keep.py":      "k", // venv/* is top-level only
		".evaluation_tests/t.py":   "x",
		"tests/assets/big.bin":     "x",
		"tests/test_main.py":       "t",
		"data.txt":                 "d",
		".DS_Store":                "x",
		"sub/.DS_Store":            "x",
		"emptydir/":                "",
		"notes/readme.md":          "n",
		"notes/deeper/ignored.pyc": "x",
	})
	// A spec without a snapshot block: the defaults plus tests/assets.
	spec, err := ParseSpec([]byte("type: local\nname: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts := spec.SnapshotOptions(nil)
	if !slices.Equal(opts.Ignore, DefaultSnapshotOptions().Ignore) || opts.Compression != "gz" {
		t.Fatalf("spec options %+v, defaults %+v", opts, DefaultSnapshotOptions())
	}
	opts.Compression = "none"
	b, res := snapshotBytes(t, dir, opts)
	hs, _ := members(t, bytes.NewReader(b))
	want := []string{".DS_Store", "data.txt", "main.py", "nested/", "nested/venv/", "nested/venv/keep.py",
		"notes/", "notes/readme.md", "pkg/", "pkg/m.py", "sub/", "sub/.DS_Store", "tests/", "tests/test_main.py"}
	if got := names(hs); !slices.Equal(got, want) {
		t.Errorf("stored %q\nwant   %q", got, want)
	}
	wantIgnored := []string{".evaluation_tests/", ".venv/", "main.pyc", "notes/deeper/ignored.pyc",
		"pkg/__pycache__/m.pyc", "tests/assets/", "venv/"}
	if got := slices.Sorted(slices.Values(res.Ignored)); !slices.Equal(got, wantIgnored) {
		t.Errorf("ignored %q\nwant    %q", got, wantIgnored)
	}

	// from_directory's own defaults, given explicitly: **/.DS_Store
	// matches at the top through "./".
	b, _ = snapshotBytes(t, dir, SnapshotOptions{Ignore: []string{"*.pyc", "venv/*", ".venv/*", "**/.DS_Store"}, Compression: "none"})
	hs, _ = members(t, bytes.NewReader(b))
	for _, n := range names(hs) {
		if strings.HasSuffix(n, ".DS_Store") {
			t.Errorf("%s stored despite **/.DS_Store", n)
		}
	}
	// Keep globs select files; directories are stored only above them.
	b, res = snapshotBytes(t, dir, SnapshotOptions{Keep: []string{"*.py"}, Ignore: opts.Ignore, Compression: "none"})
	hs, _ = members(t, bytes.NewReader(b))
	want = []string{"main.py", "nested/", "nested/venv/", "nested/venv/keep.py", "pkg/", "pkg/m.py", "tests/", "tests/test_main.py"}
	if got := names(hs); !slices.Equal(got, want) {
		t.Errorf("keep *.py stored %q\nwant   %q", got, want)
	}
	if want := []string{"main.py", "nested/venv/keep.py", "pkg/m.py", "tests/test_main.py"}; !slices.Equal(res.Files, want) {
		t.Errorf("Files %q, want %q", res.Files, want)
	}
	// An empty ignore list ignores nothing (upstream put defaults back).
	b, _ = snapshotBytes(t, dir, SnapshotOptions{Compression: "none"})
	hs, _ = members(t, bytes.NewReader(b))
	if !slices.Contains(names(hs), "venv/bin/python") || !slices.Contains(names(hs), "main.pyc") {
		t.Errorf("an empty ignore list ignored something: %q", names(hs))
	}
	// Static assets' save paths are ignored as get_ignore_globs says.
	opts = spec.SnapshotOptions([]StaticAsset{{Name: "d", SavePath: "data.txt"}, {Name: "n", SavePath: "notes", IsDir: true}})
	opts.Compression = "none"
	b, _ = snapshotBytes(t, dir, opts)
	hs, _ = members(t, bytes.NewReader(b))
	for _, n := range names(hs) {
		if n == "data.txt" || strings.HasPrefix(n, "notes/") {
			t.Errorf("asset path %s stored", n)
		}
	}
}

func TestSnapshotCompressionRoundTrip(t *testing.T) {
	dir := tree(t, map[string]string{"a.txt": "hello\n", "b/c.bin": strings.Repeat("\x00\x01", 5000), "l": "->a.txt"})
	for _, c := range []struct {
		comp, ext string
		magic     []byte
		open      func(io.Reader) (io.Reader, error)
	}{
		{"gz", ".tar.gz", []byte{0x1f, 0x8b}, func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }},
		{"BZ2", ".tar.bz2", []byte("BZh"), func(r io.Reader) (io.Reader, error) { return bzip2.NewReader(r, nil) }},
		{"xz", ".tar.xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0}, func(r io.Reader) (io.Reader, error) { return xz.NewReader(r) }},
		{"none", ".tar", nil, func(r io.Reader) (io.Reader, error) { return r, nil }},
		{"", ".tar.gz", []byte{0x1f, 0x8b}, func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }},
	} {
		t.Run(c.comp, func(t *testing.T) {
			ext, err := SnapshotExt(c.comp)
			if err != nil || ext != c.ext {
				t.Fatalf("ext %q %v, want %q", ext, err, c.ext)
			}
			out := filepath.Join(t.TempDir(), ArchiveName+ext)
			if _, err := SnapshotToFile(dir, SnapshotOptions{Compression: c.comp}, out); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(raw, c.magic) {
				t.Errorf("magic % x", raw[:8])
			}
			r, err := c.open(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			hs, data := members(t, r)
			if got := names(hs); !slices.Equal(got, []string{"a.txt", "b/", "b/c.bin", "l"}) {
				t.Errorf("members %q", got)
			}
			if data["a.txt"] != "hello\n" || data["b/c.bin"] != strings.Repeat("\x00\x01", 5000) {
				t.Error("contents differ")
			}
			// Reproducible: the same tree gives the same bytes.
			again, _ := snapshotBytes(t, dir, SnapshotOptions{Compression: c.comp})
			if !bytes.Equal(raw, again) {
				t.Error("two snapshots of the same tree differ")
			}
			// ReadArchive recognises it by its magic.
			m, err := ReadSnapshot(out, SnapshotOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if string(m["a.txt"].Data) != "hello\n" || !m["l"].Symlink || m["l"].Linkname != "a.txt" || len(m) != 3 {
				t.Errorf("ReadSnapshot: %v", m)
			}
		})
	}
	if _, err := SnapshotToFile(dir, SnapshotOptions{Compression: "zip"}, filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(err.Error(), "gz, bz2, xz or none") {
		t.Errorf("compression zip: %v", err)
	}
}

func TestSnapshotModesAndSymlinks(t *testing.T) {
	outside := t.TempDir()
	secret := "TOP-SECRET-" + strings.Repeat("s", 20)
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := tree(t, map[string]string{
		"run.sh":        "#!/bin/sh\n",
		"private":       "p",
		"suid":          "s",
		"d/f":           "f",
		"etc":           "->/etc",                                  // a directory out of DIR, absolute
		"passwd":        "->/etc/passwd",                           // a file out of DIR
		"up":            "->../../../../../../../../../etc/passwd", // relative, escaping
		"sec":           "->" + filepath.Join(outside, "secret"),
		"secdir":        "->" + outside,
		"dangling":      "->nowhere",
		"d/sib":         "->../run.sh",
		"d/self":        "->.",
		"loop":          "->loop",
		"d/nested/deep": "->../../etc",
	})
	for p, m := range map[string]os.FileMode{"run.sh": 0o755, "private": 0o600, "suid": 0o750 | os.ModeSetuid, "d": 0o700 | os.ModeSetgid} {
		if err := os.Chmod(filepath.Join(dir, p), m); err != nil {
			t.Fatal(err)
		}
	}
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(dir, "run.sh"), mtime, mtime)
	b, _ := snapshotBytes(t, dir, SnapshotOptions{Compression: "none"})
	if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte("root:x:0:0")) {
		t.Fatal("content from outside DIR was archived")
	}
	hs, _ := members(t, bytes.NewReader(b))
	got := map[string]*tar.Header{}
	for _, h := range hs {
		got[h.Name] = h
	}
	for name, mode := range map[string]int64{"run.sh": 0o755, "private": 0o600, "suid": 0o4750, "d/": 0o2700} {
		if h := got[name]; h == nil || h.Mode != mode {
			t.Errorf("%s: mode %o, want %o", name, h.Mode, mode)
		}
	}
	if !got["run.sh"].ModTime.Equal(mtime) {
		t.Errorf("mtime %v, want %v", got["run.sh"].ModTime, mtime)
	}
	for name, target := range map[string]string{"etc": "/etc", "passwd": "/etc/passwd", "up": "../../../../../../../../../etc/passwd",
		"sec": filepath.Join(outside, "secret"), "secdir": outside, "dangling": "nowhere", "d/sib": "../run.sh", "d/self": ".",
		"loop": "loop", "d/nested/deep": "../../etc"} {
		h := got[name]
		if h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != target || h.Size != 0 {
			t.Errorf("%s: %+v, want a symlink to %s", name, h, target)
		}
	}
	for name := range got {
		if strings.HasPrefix(name, "etc/") || strings.HasPrefix(name, "secdir/") || strings.HasPrefix(name, "d/self/") {
			t.Errorf("followed a symlink: %s", name)
		}
	}
	// Reading the directory for a diff does not follow them either.
	m, err := ReadSnapshot(dir, SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e := m["sec"]; e == nil || !e.Symlink || e.Data != nil {
		t.Errorf("sec read as %+v", e)
	}
}

// asUnprivileged runs fn on a thread whose filesystem uid is nobody's
// when the test runs as root, so that mode 0 really is unreadable. The
// thread is thrown away afterwards.
func asUnprivileged(t *testing.T, probe string, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		fn()
		return
	}
	done := make(chan bool)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Setfsuid(65534); err != nil {
			done <- false
			return
		}
		if f, err := os.Open(probe); err == nil {
			f.Close()
			done <- false
			return
		}
		fn()
		done <- true
	}()
	if !<-done {
		t.Skip("cannot drop file access rights on this host")
	}
}

func TestSnapshotBadInput(t *testing.T) {
	outDir := t.TempDir()
	os.Chmod(outDir, 0o777) // writable by the unprivileged thread
	os.Chmod(filepath.Dir(outDir), 0o711)
	out := filepath.Join(outDir, "snap.tar.gz")
	if err := os.WriteFile(out, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", what, err, want)
		}
		if b, _ := os.ReadFile(out); string(b) != "previous" {
			t.Errorf("%s: the existing archive was replaced", what)
		}
		if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
			t.Errorf("%s: files left in the output directory: %v", what, ents)
		}
	}
	_, err := SnapshotToFile(filepath.Join(outDir, "missing"), SnapshotOptions{}, out)
	check("missing dir", err, "no such file or directory")
	_, err = SnapshotToFile(out, SnapshotOptions{}, out)
	check("a file", err, "is not a directory")
	_, err = SnapshotToFile(outDir, SnapshotOptions{Compression: "lz4"}, out)
	check("compression", err, `unsupported compression "lz4"`)

	dir := tree(t, map[string]string{"a/ok": strings.Repeat("ok", 100000), "b/locked": "secret", "c/open": "x"})
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o711)
	locked := filepath.Join(dir, "b", "locked")
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	asUnprivileged(t, locked, func() {
		_, err = SnapshotToFile(dir, SnapshotOptions{}, out)
	})
	check("unreadable file", err, filepath.Join("b", "locked")+": permission denied")
	os.Chmod(locked, 0o644)
	if err := os.Chmod(filepath.Join(dir, "b"), 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(filepath.Join(dir, "b"), 0o755)
	asUnprivileged(t, locked, func() {
		_, err = SnapshotToFile(dir, SnapshotOptions{}, out)
	})
	check("unreadable dir", err, "permission denied")
	if _, err := SnapshotToFile(dir, SnapshotOptions{}, filepath.Join(outDir, "no", "such", "dir.tar")); err == nil {
		t.Error("an output in a missing directory was accepted")
	}
	if _, err := ReadSnapshot(locked+"-missing", SnapshotOptions{}); err == nil {
		t.Error("a missing archive was read")
	}
	if _, err := ReadArchive(strings.NewReader("this is not a tar archive, not at all, no no no")); err == nil {
		t.Error("garbage read as an archive")
	}
}

// The archive can be written inside the directory it snapshots: neither
// it nor its temporary file is archived, on the first run or later ones.
func TestSnapshotIntoItself(t *testing.T) {
	dir := tree(t, map[string]string{"a": "a"})
	out := filepath.Join(dir, ArchiveName+".tar")
	for range 2 {
		res, err := SnapshotToFile(dir, SnapshotOptions{Compression: "none"}, out)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Files, []string{"a"}) {
			t.Errorf("stored %q", res.Files)
		}
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("archive: %v %v", fi, err)
	}
}

func TestSnapshotArchiveName(t *testing.T) {
	n, err := SnapshotArchiveName("/work/my-ws/", "bz2", time.Date(2025, 10, 10, 14, 7, 32, 0, time.Local))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(n, ".", 3)
	if len(parts) != 3 || parts[0] != "20251010T140732" || len(parts[1]) != 8 || parts[2] != "my-ws.tar.bz2" {
		t.Errorf("name %q", n)
	}
	if n, _ := SnapshotArchiveName("/", "none", time.Now()); !strings.HasSuffix(n, ".root.tar") {
		t.Errorf("name for / %q", n)
	}
}

func TestSnapshotDiff(t *testing.T) {
	a := tree(t, map[string]string{
		"same.txt":    "same\n",
		"gone.txt":    "one\ntwo\n",
		"edit.txt":    "a\nb\nc\n",
		"chmod.sh":    "#!/bin/sh\n",
		"link":        "->same.txt",
		"retype":      "->same.txt",
		"img.bin":     "\x00\x01\x02",
		"gone.bin":    "\x00",
		"touched.txt": "t\n",
		"dir/x":       "x\n",
	})
	b := tree(t, map[string]string{
		"same.txt":    "same\n",
		"new.txt":     "1\n2\n3\n",
		"edit.txt":    "a\nB\nc\nd\n",
		"chmod.sh":    "#!/bin/sh\n",
		"link":        "->edit.txt",
		"retype":      "now a file\n",
		"img.bin":     "\x00\x01\x02\x03",
		"new.bin":     "\x00\x00",
		"touched.txt": "t\n",
		"dir/x":       "x\n",
	})
	os.Chmod(filepath.Join(b, "chmod.sh"), 0o755)
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(b, "touched.txt"), later, later) // an mtime is not a change
	archive := func(dir, comp string) string {
		out := filepath.Join(t.TempDir(), "s"+comp)
		if _, err := SnapshotToFile(dir, SnapshotOptions{Compression: comp}, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	type row struct {
		path   string
		change Change
		desc   string
	}
	want := []row{
		{"chmod.sh", Modified, "file mode 0644->0755 contents=false +0-0"},
		{"edit.txt", Modified, "file contents=true +2-1"},
		{"gone.bin", Deleted, "file binary contents=true +0-0"},
		{"gone.txt", Deleted, "file contents=true +0-2"},
		{"img.bin", Modified, "file binary contents=true +0-0"},
		{"link", Modified, "symlink same.txt->edit.txt contents=true +0-0"},
		{"new.bin", Created, "file binary contents=true +0-0"},
		{"new.txt", Created, "file contents=true +3-0"},
		{"retype", Modified, "file was symlink contents=true +1-0"},
	}
	for _, c := range []struct{ name, a, b string }{
		{"dirs", a, b},
		{"gz-xz", archive(a, "gz"), archive(b, "xz")},
		{"bz2-dir", archive(a, "bz2"), b},
		{"none-none", archive(a, "none"), archive(b, "none")},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := Diff(c.a, c.b, SnapshotOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []row
			for _, ch := range d.Changes {
				desc := ch.Type
				if ch.OldType != "" {
					desc += " was " + ch.OldType
				}
				if ch.Binary {
					desc += " binary"
				}
				if ch.ModeChanged() {
					desc += " mode " + ch.OldMode + "->" + ch.NewMode
				}
				if ch.Type == "symlink" {
					desc += " " + ch.OldTarget + "->" + ch.NewTarget
				}
				desc += " contents=" + map[bool]string{true: "true", false: "false"}[ch.Contents]
				desc += " +" + strconv.Itoa(ch.LinesAdded) + "-" + strconv.Itoa(ch.LinesRemoved)
				got = append(got, row{ch.Path, ch.Change, desc})
			}
			if !slices.Equal(got, want) {
				t.Errorf("diff:\n got %v\nwant %v", got, want)
			}
			if s := d.Stats(); s != (DiffStats{Created: 2, Deleted: 2, Modified: 5, LinesAdded: 6, LinesRemoved: 3}) {
				t.Errorf("stats %+v", s)
			}
			if d, err := Diff(c.a, c.a, SnapshotOptions{}); err != nil || len(d.Changes) != 0 {
				t.Errorf("a snapshot differs from itself: %v %v", d, err)
			}
		})
	}
}

// Line counts match difflib's for simple edits; a missing final newline
// makes the last line differ; the fallback past Myers' bound stays sane.
func TestLineChanges(t *testing.T) {
	for _, c := range []struct {
		a, b           string
		added, removed int
	}{
		{"", "x\ny\nz\n", 3, 0},
		{"x\ny\n", "", 0, 2},
		{"a\nb\nc\n", "a\nc\n", 0, 1},
		{"a\nb", "a\nb\n", 1, 1},
		{"a\nb\nc\nd\n", "d\nc\nb\na\n", 3, 3},
	} {
		add, rem := lineChanges(splitLines([]byte(c.a)), splitLines([]byte(c.b)))
		if add != c.added || rem != c.removed {
			t.Errorf("%q -> %q: +%d -%d, want +%d -%d", c.a, c.b, add, rem, c.added, c.removed)
		}
	}
	var a, b []string
	for i := range 20000 {
		a = append(a, "a"+string(rune(i))+"\n")
		b = append(b, "b"+string(rune(i))+"\n")
	}
	if add, rem := lineChanges(a, b); add != 20000 || rem != 20000 {
		t.Errorf("disjoint: +%d -%d", add, rem)
	}
}

func TestIsBinary(t *testing.T) {
	for _, c := range []struct {
		data string
		want bool
	}{
		{"", false},
		{"text\n", false},
		{"a\x00b", true},
		{"\t\n\r\t\n\r", false},
		{"\x01\x02\x03abcdef", true}, // 3/9 > 30 %
		{"\x01\x02abcdefgh", false},  // 2/10
	} {
		if got := isBinary([]byte(c.data)); got != c.want {
			t.Errorf("isBinary(%q) = %v", c.data, got)
		}
	}
}

// FuzzReadArchive: any bytes are read or refused, never a panic.
func FuzzReadArchive(f *testing.F) {
	dir := f.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("a\n"), 0o644)
	os.Symlink("a", filepath.Join(dir, "l"))
	for _, c := range []string{"gz", "bz2", "xz", "none"} {
		var b bytes.Buffer
		if _, err := WriteSnapshot(dir, SnapshotOptions{Compression: c}, &b); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ReadArchive(bytes.NewReader(data))
	})
}

// FuzzGlob: any pattern compiles and matching never panics; a pattern
// without metacharacters matches exactly itself.
func FuzzGlob(f *testing.F) {
	for _, s := range []string{"*.pyc", "[!a-z]?", "[", "[]]", "a*b*c"} {
		f.Add(s, "abc")
	}
	f.Fuzz(func(t *testing.T, pat, name string) {
		g := CompileGlob(pat)
		g.Match(name)
		if !strings.ContainsAny(pat, "*?[") && g.Match(name) != (string([]rune(pat)) == string([]rune(name))) {
			t.Errorf("literal %q vs %q", pat, name)
		}
	})
}
