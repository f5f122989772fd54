package archive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/slopbox/slopbox/image/archive/archivetest"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostileEnv is a layer dir with a sentinel dir beside it, to prove nothing
// is written outside the layer.
type hostileEnv struct {
	parent, layer, sentinel string
}

func newHostileEnv(t *testing.T) hostileEnv {
	t.Helper()
	parent := t.TempDir()
	e := hostileEnv{parent: parent, layer: filepath.Join(parent, "layer"), sentinel: filepath.Join(parent, "sentinel")}
	for _, d := range []string{e.layer, e.sentinel} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(e.sentinel, "keep"), []byte("sentinel"), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// check asserts the parent holds only layer and sentinel, and the sentinel
// holds only its untouched, singly-linked "keep" file.
func (e hostileEnv) check(t *testing.T) {
	t.Helper()
	names := func(d string) []string {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, x := range ents {
			n = append(n, x.Name())
		}
		return n
	}
	if got := names(e.parent); !slices.Equal(got, []string{"layer", "sentinel"}) {
		t.Errorf("parent of the layer now holds %q", got)
	}
	if got := names(e.sentinel); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("sentinel now holds %q", got)
	}
	b, err := os.ReadFile(filepath.Join(e.sentinel, "keep"))
	if err != nil || string(b) != "sentinel" {
		t.Errorf("sentinel/keep = %q, %v", b, err)
	}
	if st := lstatT(t, filepath.Join(e.sentinel, "keep")); st.Nlink != 1 {
		t.Errorf("sentinel/keep has %d links", st.Nlink)
	}
	if st := lstatT(t, filepath.Join(e.sentinel, "keep")); st.Mode&0o7777 != 0o644 {
		t.Errorf("sentinel/keep mode %o", st.Mode&0o7777)
	}
}

func TestUnpackHostile(t *testing.T) {
	// Paths outside the layer that a broken unpacker would write to.
	outside := filepath.Join(os.TempDir(), fmt.Sprintf("slopbox-unpack-outside-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(outside) })

	cases := []struct {
		name    string
		build   func(b *layerBuilder, e hostileEnv)
		wantErr string
	}{
		{"dotdot", func(b *layerBuilder, e hostileEnv) {
			b.file("../x", "pwned", 0o644)
		}, `unpack: entry "../x": path escapes the layer root`},
		{"dotdot-into-sentinel", func(b *layerBuilder, e hostileEnv) {
			b.file("../sentinel/pwned", "pwned", 0o644)
		}, "escapes the layer root"},
		{"dotdot-nested", func(b *layerBuilder, e hostileEnv) {
			b.dir("a/", 0o755).file("a/../../x", "pwned", 0o644)
		}, `entry "a/../../x": path escapes`},
		{"dotdot-dir", func(b *layerBuilder, e hostileEnv) {
			b.dir("../newdir/", 0o755)
		}, "escapes the layer root"},
		{"absolute", func(b *layerBuilder, e hostileEnv) {
			b.file("/etc/x", "pwned", 0o644)
		}, `entry "/etc/x": absolute path`},
		{"absolute-sentinel", func(b *layerBuilder, e hostileEnv) {
			b.file(filepath.Join(e.sentinel, "pwned"), "pwned", 0o644)
		}, "absolute path"},
		{"symlink-absolute-then-write", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", outside).file("evil/pwned", "pwned", 0o644)
		}, `entry "evil/pwned": parent "evil" is a symlink to`},
		{"symlink-to-sentinel-then-write", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", e.sentinel).file("evil/pwned", "pwned", 0o644)
		}, "escapes the layer root"},
		{"symlink-climb-then-write", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", "../../").file("evil/pwned", "pwned", 0o644)
		}, "escapes the layer root"},
		{"symlink-climb-sentinel", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", "../sentinel").file("evil/pwned", "pwned", 0o644)
		}, "escapes the layer root"},
		{"symlink-nested-climb", func(b *layerBuilder, e hostileEnv) {
			b.dir("d/", 0o755).symlink("d/evil", "../../sentinel").file("d/evil/pwned", "pwned", 0o644)
		}, "escapes the layer root"},
		{"symlink-chain", func(b *layerBuilder, e hostileEnv) {
			b.dir("d/", 0o755).symlink("a", "d/b").symlink("d/b", "../c").symlink("c", e.sentinel).
				file("a/pwned", "pwned", 0o644)
		}, "escapes the layer root"},
		{"symlink-then-dir", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", e.sentinel).dir("evil/sub/", 0o755)
		}, "escapes the layer root"},
		{"symlink-then-symlink", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", e.sentinel).symlink("evil/keep", "/etc/shadow")
		}, "escapes the layer root"},
		{"symlink-loop", func(b *layerBuilder, e hostileEnv) {
			b.symlink("loop", "loop").file("loop/x", "x", 0o644)
		}, "too many levels of symbolic links"},
		{"hardlink-dotdot", func(b *layerBuilder, e hostileEnv) {
			b.link("h", "../sentinel/keep")
		}, `entry "h": hardlink target "../sentinel/keep": path escapes the layer root`},
		{"hardlink-absolute", func(b *layerBuilder, e hostileEnv) {
			b.link("h", filepath.Join(e.sentinel, "keep"))
		}, "absolute path"},
		{"hardlink-etc-passwd", func(b *layerBuilder, e hostileEnv) {
			b.link("h", "/etc/passwd")
		}, "absolute path"},
		{"hardlink-through-symlink", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", e.sentinel).link("h", "evil/keep")
		}, "escapes the layer root"},
		{"hardlink-missing-target", func(b *layerBuilder, e hostileEnv) {
			b.link("h", "nothere")
		}, `hardlink target "nothere" does not exist`},
		{"whiteout-dotdot", func(b *layerBuilder, e hostileEnv) {
			b.file(".wh...", "", 0o644)
		}, `invalid whiteout of ".."`},
		{"whiteout-dot", func(b *layerBuilder, e hostileEnv) {
			b.file(".wh..", "", 0o644)
		}, `invalid whiteout of "."`},
		{"whiteout-empty", func(b *layerBuilder, e hostileEnv) {
			b.file(".wh.", "", 0o644)
		}, "invalid whiteout"},
		{"whiteout-nested-dotdot", func(b *layerBuilder, e hostileEnv) {
			b.dir("a/", 0o755).file("a/.wh...", "", 0o644)
		}, `entry "a/.wh...": invalid whiteout`},
		{"whiteout-through-symlink", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", e.sentinel).file("evil/.wh.keep", "", 0o644)
		}, "escapes the layer root"},
		{"opaque-through-symlink", func(b *layerBuilder, e hostileEnv) {
			b.symlink("evil", "..").file("evil/.wh..wh..opq", "", 0o644)
		}, "escapes the layer root"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newHostileEnv(t)
			b := newLayer(t)
			tc.build(b, e)
			_, err := ApplyLayer(e.layer, bytes.NewReader(b.bytes()), ApplyOptions{Logf: t.Logf})
			if err == nil {
				t.Fatalf("ApplyLayer accepted a hostile layer")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "unpack: entry ") {
				t.Errorf("error %q does not name the entry", err)
			}
			e.check(t)
			if _, err := os.Lstat(outside); err == nil {
				t.Errorf("%s was created", outside)
			}
			if _, err := os.Lstat(filepath.Join(e.parent, "x")); err == nil {
				t.Errorf("../x was created")
			}
		})
	}
}

// TestUnpackHostileReplaced covers hostile symlinks that later entries
// replace rather than write through: these are legal and must stay inside.
func TestUnpackHostileReplaced(t *testing.T) {
	e := newHostileEnv(t)
	keep := filepath.Join(e.sentinel, "keep")
	data := newLayer(t).
		symlink("f", keep).file("f", "mine", 0o600). // file over symlink
		symlink("d", e.sentinel).dir("d/", 0o755).file("d/keep", "inner", 0o644).
		symlink("l", keep).link("l2", "l"). // hardlink to the symlink itself
		symlink("w", e.sentinel).file(".wh.w", "", 0o644).
		symlink("dev", keep).add(&tar.Header{Typeflag: tar.TypeFifo, Name: "dev", Mode: 0o644}, nil).
		bytes()
	if _, err := ApplyLayer(e.layer, bytes.NewReader(data), ApplyOptions{Logf: t.Logf}); err != nil {
		t.Fatal(err)
	}
	e.check(t)
	got := readTree(t, e.layer)
	if g := got["f"]; !g.mode.IsRegular() || g.content != "mine" || g.mode.Perm() != 0o600 {
		t.Errorf("f = %v", g)
	}
	if g := got["d"]; !g.mode.IsDir() {
		t.Errorf("d = %v", g)
	}
	if g := got["d/keep"]; g.content != "inner" {
		t.Errorf("d/keep = %v", g)
	}
	if g := got["l2"]; g.mode&os.ModeSymlink == 0 || g.content != keep {
		t.Errorf("l2 = %v", g)
	}
	if !isWhiteoutDev(t, filepath.Join(e.layer, "w")) {
		t.Errorf("w is not a whiteout")
	}
	if g := got["dev"]; g.mode&os.ModeNamedPipe == 0 {
		t.Errorf("dev = %v", g)
	}
}

func TestUnpackDevices(t *testing.T) {
	privileged := canMknod(t)
	if os.Geteuid() != 0 && privileged {
		t.Fatalf("mknod of a real device succeeded for euid %d", os.Geteuid())
	}
	data := newLayer(t).
		dir("dev/", 0o755).
		add(&tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}, nil).
		add(&tar.Header{Typeflag: tar.TypeBlock, Name: "dev/loop0", Mode: 0o660, Devmajor: 7, Devminor: 0}, nil).
		add(&tar.Header{Typeflag: tar.TypeFifo, Name: "dev/fifo", Mode: 0o620}, nil).
		file("dev/after", "still here", 0o644).
		bytes()
	dir, st, logs := applyTestLayer(t, data)
	if fi, err := os.Lstat(filepath.Join(dir, "dev/fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o620 {
		t.Errorf("fifo: %v %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "dev/after")); err != nil || string(b) != "still here" {
		t.Errorf("dev/after: %q %v", b, err)
	}
	if privileged {
		t.Logf("euid %d may mknod: expecting real device nodes", os.Geteuid())
		if st.SkippedDevices != 0 {
			t.Errorf("SkippedDevices = %d", st.SkippedDevices)
		}
		c := lstatT(t, filepath.Join(dir, "dev/null"))
		if c.Mode&unix.S_IFMT != unix.S_IFCHR || c.Rdev != unix.Mkdev(1, 3) || c.Mode&0o7777 != 0o666 {
			t.Errorf("dev/null: mode %o rdev %x", c.Mode, c.Rdev)
		}
		bl := lstatT(t, filepath.Join(dir, "dev/loop0"))
		if bl.Mode&unix.S_IFMT != unix.S_IFBLK || bl.Rdev != unix.Mkdev(7, 0) || bl.Mode&0o7777 != 0o660 {
			t.Errorf("dev/loop0: mode %o rdev %x", bl.Mode, bl.Rdev)
		}
		if st.Files != 4 {
			t.Errorf("Files = %d, want 4", st.Files)
		}
		return
	}
	t.Logf("euid %d may not mknod: expecting skipped devices and one warning", os.Geteuid())
	if st.SkippedDevices != 2 {
		t.Errorf("SkippedDevices = %d, want 2", st.SkippedDevices)
	}
	for _, n := range []string{"dev/null", "dev/loop0"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists (%v)", n, err)
		}
	}
	if n := logs.count("cannot create device node dev/null"); n != 1 || len(logs.lines) == 0 {
		t.Errorf("device warnings: %q", logs.lines)
	}
	if n := logs.count("device node"); n != 1 {
		t.Errorf("want exactly one device warning, got %q", logs.lines)
	}
	if st.Files != 2 {
		t.Errorf("Files = %d, want 2", st.Files)
	}
}

func TestUnpackOwnership(t *testing.T) {
	// Can this process give a file away to 1000:1000?
	probe := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	canChown := unix.Lchown(probe, 1000, 1000) == nil
	if os.Geteuid() != 0 && canChown {
		t.Fatalf("euid %d could chown to 1000:1000", os.Geteuid())
	}
	uid, gid := os.Geteuid(), os.Getegid()
	data := newLayer(t).
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755, Uid: uid, Gid: gid}, nil).
		add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/foo", Mode: 0o640, Uid: 1000, Gid: 1000}, []byte("foo")).
		add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/bar", Mode: 0o640, Uid: 1000, Gid: 1000}, []byte("bar")).
		add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/link", Linkname: "foo", Uid: 1000, Gid: 1001}, nil).
		add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/mine", Mode: 0o600, Uid: uid, Gid: gid}, []byte("mine")).
		bytes()
	dir, st, logs := applyTestLayer(t, data)
	owner := func(n string) (uint32, uint32) {
		s := lstatT(t, filepath.Join(dir, n))
		return s.Uid, s.Gid
	}
	if u, g := owner("etc/mine"); u != uint32(uid) || g != uint32(gid) {
		t.Errorf("etc/mine owned by %d:%d", u, g)
	}
	if canChown {
		if st.ChownDegraded || len(logs.lines) != 0 {
			t.Errorf("ChownDegraded=%v logs=%q", st.ChownDegraded, logs.lines)
		}
		for _, n := range []string{"etc/foo", "etc/bar"} {
			if u, g := owner(n); u != 1000 || g != 1000 {
				t.Errorf("%s owned by %d:%d", n, u, g)
			}
		}
		if u, g := owner("etc/link"); u != 1000 || g != 1001 {
			t.Errorf("etc/link owned by %d:%d", u, g)
		}
		return
	}
	if !st.ChownDegraded {
		t.Errorf("ChownDegraded not set")
	}
	if n := logs.count("cannot preserve owner 1000:1000 of etc/foo: no subordinate id range"); n != 1 {
		t.Errorf("want one chown warning naming etc/foo, got %q", logs.lines)
	}
	if n := logs.count("cannot preserve owner"); n != 1 {
		t.Errorf("want exactly one chown warning, got %q", logs.lines)
	}
	for _, n := range []string{"etc/foo", "etc/bar", "etc/link"} {
		if u, g := owner(n); u != uint32(uid) || g != uint32(gid) {
			t.Errorf("%s owned by %d:%d, want the unpacking user %d:%d", n, u, g, uid, gid)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc/foo")); err != nil || string(b) != "foo" {
		t.Errorf("etc/foo: %q %v", b, err)
	}
}

func TestUnpackModes(t *testing.T) {
	data := newLayer(t).
		dir("bin/", 0o755).
		file("bin/su", "setuid", 0o4755).
		file("bin/wall", "setgid", 0o2755).
		file("bin/both", "both", 0o6711).
		file("bin/secret", "secret", 0o400).
		file("bin/none", "none", 0o000).
		dir("tmp/", 0o1777).
		dir("shared/", 0o2775).
		file("shared/f", "f", 0o664).
		dir("ro/", 0o555).
		file("ro/f", "read-only dir content", 0o444).
		dir("private/", 0o700).
		bytes()
	dir, st, _ := applyTestLayer(t, data)
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	want := map[string]uint32{
		"bin": 0o755, "bin/su": 0o4755, "bin/wall": 0o2755, "bin/both": 0o6711, "bin/secret": 0o400,
		"bin/none": 0, "tmp": 0o1777, "shared": 0o2775, "shared/f": 0o664, "ro": 0o555, "ro/f": 0o444,
		"private": 0o700,
	}
	for n, m := range want {
		if got := lstatT(t, filepath.Join(dir, n)).Mode & 0o7777; got != m {
			t.Errorf("%s: mode %04o, want %04o (euid %d)", n, got, m, os.Geteuid())
		}
	}
	if st.Files != 7 || st.Dirs != 5 {
		t.Errorf("stats %+v", st)
	}
	// The composed view keeps them too.
	dst := filepath.Join(t.TempDir(), "rootfs")
	if err := archivetest.Flatten(dst, []string{dir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dst, "ro"), 0o755) })
	for n, m := range want {
		if got := lstatT(t, filepath.Join(dst, n)).Mode & 0o7777; got != m {
			t.Errorf("flattened %s: mode %04o, want %04o", n, got, m)
		}
	}
}

func TestUnpackTimes(t *testing.T) {
	ft := time.Date(2001, 2, 3, 4, 5, 6, 123456789, time.UTC)
	at := time.Date(2002, 2, 3, 4, 5, 6, 987654321, time.UTC)
	dt := time.Date(1999, 12, 31, 23, 59, 59, 500000000, time.UTC)
	lt := time.Date(2010, 1, 1, 0, 0, 0, 42, time.UTC)
	data := newLayer(t).
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755, ModTime: dt, Format: tar.FormatPAX}, nil).
		add(&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o644, ModTime: ft, AccessTime: at, Format: tar.FormatPAX}, []byte("x")).
		add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "d/l", Linkname: "f", ModTime: lt, Format: tar.FormatPAX}, nil).
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "d/sub/", Mode: 0o755, ModTime: dt, Format: tar.FormatPAX}, nil).
		file("d/sub/late", "written after the dir entry", 0o644).
		file("d/sub/gone", "", 0o644).
		file("d/sub/.wh.gone", "", 0o644).
		bytes()
	dir, _, _ := applyTestLayer(t, data)
	mt := func(root, n string) (time.Time, time.Time) {
		s := lstatT(t, filepath.Join(root, n))
		return time.Unix(s.Mtim.Sec, s.Mtim.Nsec).UTC(), time.Unix(s.Atim.Sec, s.Atim.Nsec).UTC()
	}
	check := func(root string) {
		t.Helper()
		if m, a := mt(root, "d/f"); !m.Equal(ft) || !a.Equal(at) {
			t.Errorf("%s d/f: mtime %v atime %v", root, m, a)
		}
		if m, _ := mt(root, "d/l"); !m.Equal(lt) {
			t.Errorf("%s d/l: mtime %v", root, m)
		}
		for _, n := range []string{"d", "d/sub"} {
			if m, _ := mt(root, n); !m.Equal(dt) {
				t.Errorf("%s %s: mtime %v, want %v", root, n, m, dt)
			}
		}
		if m, _ := mt(root, "d/sub/late"); !m.Equal(testMtime) {
			t.Errorf("%s d/sub/late: mtime %v", root, m)
		}
	}
	check(dir) // before Flatten reads the files (relatime may then bump atimes)
	check(flattenDirs(t, dir))
}

// TestUnpackRestrictiveDirModes: directory modes are applied children first,
// after the whole layer, so a parent without search or write permission
// neither blocks its content nor the metadata of its subdirectories, even
// without CAP_DAC_OVERRIDE.
func TestUnpackRestrictiveDirModes(t *testing.T) {
	dt := time.Date(2005, 5, 5, 5, 5, 5, 0, time.UTC)
	dir, _, _ := applyTestLayer(t, newLayer(t).
		dir("nox/", 0o600).
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "nox/sub/", Mode: 0o750, ModTime: dt}, nil).
		file("nox/sub/f", "f", 0o644).
		dir("ro/", 0o500).
		file("ro/g", "g", 0o400).
		bytes())
	t.Cleanup(func() {
		os.Chmod(filepath.Join(dir, "nox"), 0o700)
		os.Chmod(filepath.Join(dir, "ro"), 0o700)
	})
	if m := lstatT(t, filepath.Join(dir, "nox")).Mode & 0o7777; m != 0o600 {
		t.Errorf("nox mode %o", m)
	}
	if m := lstatT(t, filepath.Join(dir, "ro")).Mode & 0o7777; m != 0o500 {
		t.Errorf("ro mode %o", m)
	}
	if err := os.Chmod(filepath.Join(dir, "nox"), 0o700); err != nil {
		t.Fatal(err)
	}
	s := lstatT(t, filepath.Join(dir, "nox/sub"))
	if s.Mode&0o7777 != 0o750 || !time.Unix(s.Mtim.Sec, s.Mtim.Nsec).Equal(dt) {
		t.Errorf("nox/sub: mode %o mtime %v", s.Mode&0o7777, time.Unix(s.Mtim.Sec, s.Mtim.Nsec).UTC())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ro/g")); err != nil || string(b) != "g" {
		t.Errorf("ro/g: %q %v", b, err)
	}
}

// flattenDirs flattens already-applied layer dirs into a fresh dir.
func flattenDirs(t testing.TB, layers ...string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "rootfs")
	if err := archivetest.Flatten(dst, layers); err != nil {
		t.Fatalf("Flatten: %v", err)
	}
	return dst
}

func TestUnpackWhiteoutsAcrossLayers(t *testing.T) {
	l1 := newLayer(t).
		dir("a/", 0o755).file("a/f1", "1", 0o644).file("a/f2", "2", 0o644).
		dir("b/", 0o755).file("b/x", "x", 0o644).dir("b/deep/", 0o755).file("b/deep/y", "y", 0o644).
		file("c", "c", 0o644).symlink("s", "a/f1").
		bytes()
	l2 := newLayer(t).
		dir("a/", 0o755).file("a/.wh.f1", "", 0o644).
		file(".wh.b", "", 0o644).file(".wh.c", "", 0o644).file(".wh.s", "", 0o644).
		file("c2", "c2", 0o644).
		file(".wh..wh.plnk", "", 0o644). // aufs metadata: ignored
		bytes()
	l3 := newLayer(t).
		dir("b/", 0o755).file("b/new", "new", 0o644). // recreate after whiteout
		file("a/f1", "again", 0o644).
		bytes()
	dst, dirs := flattenTestLayers(t, l1, l2, l3)

	for _, n := range []string{"a/f1", "b", "c", "s"} {
		if !isWhiteoutDev(t, filepath.Join(dirs[1], n)) {
			t.Errorf("layer 2: %s is not a 0/0 character device", n)
		}
	}
	if _, err := os.Lstat(filepath.Join(dirs[1], ".wh..wh.plnk")); err == nil {
		t.Errorf("aufs metadata entry was extracted")
	}
	got := readTree(t, dst)
	want := map[string]string{"a/f1": "again", "a/f2": "2", "b/new": "new", "c2": "c2"}
	wantNames := []string{"a", "a/f1", "a/f2", "b", "b/new", "c2"}
	if names := treeNames(got); !slices.Equal(names, wantNames) {
		t.Errorf("flattened tree %q, want %q", names, wantNames)
	}
	for n, c := range want {
		if got[n].content != c {
			t.Errorf("%s = %q, want %q", n, got[n].content, c)
		}
	}
	// Whiting out something the same layer already wrote removes it there.
	dir, st, _ := applyTestLayer(t, newLayer(t).dir("d/", 0o755).file("d/x", "x", 0o644).file(".wh.d", "", 0o644).bytes())
	if !isWhiteoutDev(t, filepath.Join(dir, "d")) || st.Whiteouts != 1 {
		t.Errorf("d not whited out (stats %+v)", st)
	}
}

func TestUnpackOpaque(t *testing.T) {
	l1 := newLayer(t).
		dir("d/", 0o755).file("d/old1", "1", 0o644).dir("d/sub/", 0o755).file("d/sub/old2", "2", 0o644).
		dir("e/", 0o755).file("e/keep", "k", 0o644).
		bytes()
	// Marker before and after the layer's own entries: both must stay.
	l2 := newLayer(t).
		dir("d/", 0o750).file("d/new", "n", 0o644).file("d/.wh..wh..opq", "", 0o644).file("d/new2", "n2", 0o644).
		file("e/.wh..wh..opq", "", 0o644). // parent not in this tar: created
		bytes()
	dst, dirs := flattenTestLayers(t, l1, l2)
	for _, n := range []string{"d", "e"} {
		if !archivetest.IsOverlayOpaque(filepath.Join(dirs[1], n)) {
			t.Errorf("layer 2 %s lacks %s=y", n, overlayOpaqueXattr)
		}
	}
	if archivetest.IsOverlayOpaque(filepath.Join(dirs[0], "d")) {
		t.Errorf("layer 1 d is opaque")
	}
	if _, err := os.Lstat(filepath.Join(dirs[1], "d/.wh..wh..opq")); err == nil {
		t.Errorf("opaque marker extracted as a file")
	}
	got := readTree(t, dst)
	wantNames := []string{"d", "d/new", "d/new2", "e"}
	if names := treeNames(got); !slices.Equal(names, wantNames) {
		t.Errorf("flattened tree %q, want %q", names, wantNames)
	}
	if m := got["d"].mode.Perm(); m != 0o750 {
		t.Errorf("d mode %o", m)
	}
	if archivetest.IsOverlayOpaque(filepath.Join(dst, "d")) {
		t.Errorf("flattened d carries the overlay xattr")
	}
}

func TestUnpackHardlinkAfterOverwrite(t *testing.T) {
	l1 := newLayer(t).
		file("a", "old", 0o644).link("b", "a").file("a", "new", 0o600).
		dir("x/", 0o755).file("x/t", "target", 0o644).link("x/h1", "x/t").link("h2", "./x/t").
		file("c", "c-old", 0o644).link("d", "c").
		bytes()
	l2 := newLayer(t).file("c", "c-new", 0o644).bytes()
	dst, dirs := flattenTestLayers(t, l1, l2)

	got := readTree(t, dirs[0])
	for n, c := range map[string]string{"a": "new", "b": "old", "x/h1": "target", "h2": "target"} {
		if got[n].content != c {
			t.Errorf("layer %s = %q, want %q", n, got[n].content, c)
		}
	}
	if st := lstatT(t, filepath.Join(dirs[0], "x/t")); st.Nlink != 3 {
		t.Errorf("x/t has %d links", st.Nlink)
	}
	fl := readTree(t, dst)
	for n, c := range map[string]string{"a": "new", "b": "old", "x/t": "target", "x/h1": "target", "h2": "target", "c": "c-new", "d": "c-old"} {
		if fl[n].content != c {
			t.Errorf("flattened %s = %q, want %q", n, fl[n].content, c)
		}
	}
	// Hardlinks inside one layer stay hardlinks in the flattened tree, but
	// never share an inode with the layer dirs.
	ft, lt := lstatT(t, filepath.Join(dst, "x/t")), lstatT(t, filepath.Join(dirs[0], "x/t"))
	if fh := lstatT(t, filepath.Join(dst, "x/h1")); fh.Ino != ft.Ino || ft.Nlink != 3 {
		t.Errorf("flattened x/h1 not linked to x/t (nlink %d)", ft.Nlink)
	}
	if ft.Ino == lt.Ino && ft.Dev == lt.Dev {
		t.Errorf("flattened x/t is hardlinked into the layer dir")
	}
}

func TestUnpackManySmallFiles(t *testing.T) {
	b := newLayer(t)
	const n = 10000
	for i := 0; i < n; i++ {
		if i%100 == 0 {
			b.dir(fmt.Sprintf("d%03d/", i/100), 0o755)
		}
		b.file(fmt.Sprintf("d%03d/f%05d", i/100, i), fmt.Sprintf("content %d", i), 0o644)
	}
	dst, dirs := flattenTestLayers(t, b.bytes())
	_ = dirs
	got := readTree(t, dst)
	if len(got) != n+n/100 {
		t.Fatalf("%d entries, want %d", len(got), n+n/100)
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("d%03d/f%05d", i/100, i)
		if c := got[name].content; c != fmt.Sprintf("content %d", i) {
			t.Fatalf("%s = %q", name, c)
		}
	}
}

// streamLayer writes a tar produced by fill through an io.Pipe and applies
// it, never holding the layer in memory.
func streamLayer(t *testing.T, dir string, fill func(tw *tar.Writer) error) ApplyStats {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := fill(tw)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	st, err := ApplyLayer(dir, pr, ApplyOptions{Logf: t.Logf})
	pr.CloseWithError(errors.New("reader done"))
	if err != nil {
		t.Fatalf("ApplyLayer: %v", err)
	}
	return st
}

func hashFile(t *testing.T, p string) ([]byte, int64) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return h.Sum(nil), n
}

func TestUnpackLargeAndSparseFiles(t *testing.T) {
	const big = 200 << 20
	const sparse = 64 << 20
	markers := []int64{0, 4097, sparse / 2, sparse - 1}
	var bigSum, sparseSum []byte
	dir := filepath.Join(t.TempDir(), "layer")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	st := streamLayer(t, dir, func(tw *tar.Writer) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big.bin", Mode: 0o644, Size: big, ModTime: testMtime}); err != nil {
			return err
		}
		h := sha256.New()
		chunk := make([]byte, 1<<20)
		for i := 0; i < big/len(chunk); i++ {
			for j := 0; j < len(chunk); j += 8 {
				binary.LittleEndian.PutUint64(chunk[j:], uint64(i)<<32|uint64(j))
			}
			h.Write(chunk)
			if _, err := tw.Write(chunk); err != nil {
				return err
			}
		}
		bigSum = h.Sum(nil)

		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "sparse.img", Mode: 0o600, Size: sparse, ModTime: testMtime}); err != nil {
			return err
		}
		h = sha256.New()
		clear(chunk)
		for off := int64(0); off < sparse; off += int64(len(chunk)) {
			c := slices.Clone(chunk)
			for _, m := range markers {
				if m >= off && m < off+int64(len(c)) {
					c[m-off] = 0xA5
				}
			}
			h.Write(c)
			if _, err := tw.Write(c); err != nil {
				return err
			}
		}
		sparseSum = h.Sum(nil)
		return nil
	})
	if st.Files != 2 || st.Bytes != big+sparse {
		t.Errorf("stats %+v", st)
	}
	dst := flattenDirs(t, dir)
	for _, root := range []string{dir, dst} {
		sum, n := hashFile(t, filepath.Join(root, "big.bin"))
		if n != big || !bytes.Equal(sum, bigSum) {
			t.Errorf("%s/big.bin: %d bytes, sha256 %x, want %d %x", root, n, sum, big, bigSum)
		}
		sum, n = hashFile(t, filepath.Join(root, "sparse.img"))
		if n != sparse || !bytes.Equal(sum, sparseSum) {
			t.Errorf("%s/sparse.img: %d bytes, sha256 %x, want %x", root, n, sum, sparseSum)
		}
	}
	f, err := os.Open(filepath.Join(dir, "sparse.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Its zeros are holes (issue 41, case 4): a sandbox's sparse file,
	// committed, costs the store its data's blocks. They were written out.
	var fst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil || fst.Blocks*512 > 1<<20 {
		t.Errorf("sparse.img (64 MiB, 4 bytes set): %d bytes on disk %v, want at most 1 MiB", fst.Blocks*512, err)
	}
	for _, m := range markers {
		var b [1]byte
		if _, err := f.ReadAt(b[:], m); err != nil || b[0] != 0xA5 {
			t.Errorf("sparse.img[%d] = %x %v", m, b[0], err)
		}
	}
}

func TestUnpackNames(t *testing.T) {
	long := strings.Repeat("n", 255)
	deep := strings.Repeat("p", 200) + "/" + strings.Repeat("q", 200) + "/" + long
	nonUTF8 := "caf\xe9-\xff\xfe"
	b := newLayer(t).
		file(long, "long", 0o644).
		dir(strings.Repeat("p", 200)+"/", 0o755).
		dir(strings.Repeat("p", 200)+"/"+strings.Repeat("q", 200)+"/", 0o755).
		file(deep, "deep", 0o644).
		add(&tar.Header{Typeflag: tar.TypeReg, Name: nonUTF8, Mode: 0o644, Format: tar.FormatGNU}, []byte("latin1")).
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "\x80dir/", Mode: 0o755, Format: tar.FormatGNU}, nil).
		add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "\x80dir/ln\xc3", Linkname: "../" + nonUTF8, Format: tar.FormatGNU}, nil).
		file("with space & $pecial\tchars", "s", 0o644).
		file("ünïcødé", "u", 0o644)
	dst, dirs := flattenTestLayers(t, b.bytes())
	for _, root := range []string{dirs[0], dst} {
		got := readTree(t, root)
		for n, c := range map[string]string{long: "long", deep: "deep", nonUTF8: "latin1", "\x80dir/ln\xc3": "../" + nonUTF8,
			"with space & $pecial\tchars": "s", "ünïcødé": "u"} {
			if e, ok := got[n]; !ok || e.content != c {
				t.Errorf("%s: %q = %v (present %v)", root, n, e, ok)
			}
		}
		if b, err := os.ReadFile(filepath.Join(root, "\x80dir/ln\xc3")); err != nil || string(b) != "latin1" {
			t.Errorf("%s: reading through the non-UTF-8 symlink: %q %v", root, b, err)
		}
	}
	// One byte too many is the file system's call, reported for the entry.
	e := newHostileEnv(t)
	_, err := ApplyLayer(e.layer, bytes.NewReader(newLayer(t).file(long+"x", "", 0o644).bytes()), ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "file name too long") {
		t.Errorf("256-byte name: %v", err)
	}
}

func TestUnpackSymlinksAsWritten(t *testing.T) {
	targets := map[string]string{
		"abs":      "/usr/bin/python3",
		"rel":      "../lib/libc.so.6",
		"dot":      ".",
		"dangling": "does/not/exist",
		"root":     "/",
		"climb":    "../../../../etc/passwd", // fine as a symlink; only traversal is refused
		"d/inner":  "../abs",
		"trailing": "dir/",
	}
	b := newLayer(t).dir("d/", 0o755)
	for n, tg := range targets {
		b.symlink(n, tg)
	}
	// An in-root relative symlink may be traversed by a later entry.
	b.dir("real/", 0o755).symlink("alias", "real").file("alias/through", "t", 0o644).
		symlink("d/up", "../real").file("d/up/through2", "t2", 0o644)
	dst, dirs := flattenTestLayers(t, b.bytes())
	for _, root := range []string{dirs[0], dst} {
		for n, tg := range targets {
			got, err := os.Readlink(filepath.Join(root, n))
			if err != nil || got != tg {
				t.Errorf("%s: %s -> %q (%v), want %q", root, n, got, err, tg)
			}
		}
		tree := readTree(t, root)
		if tree["real/through"].content != "t" || tree["real/through2"].content != "t2" {
			t.Errorf("%s: writes through in-root symlinks: %v %v", root, tree["real/through"], tree["real/through2"])
		}
	}
}

func TestUnpackXattrs(t *testing.T) {
	b := newLayer(t).
		add(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, PAXRecords: map[string]string{
			"SCHILY.xattr.user.test":           "value",
			"SCHILY.xattr.user.overlay.opaque": "y", // must not be smuggled in
			"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
			"SCHILY.xattr.trusted.x":           "t",
		}}, []byte("x")).
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755, PAXRecords: map[string]string{
			"SCHILY.xattr.user.overlay.redirect": "/etc",
		}}, nil)
	dir, _, logs := applyTestLayer(t, b.bytes())
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(filepath.Join(dir, "f"), "user.test", buf)
	if err != nil || string(buf[:n]) != "value" {
		t.Errorf("user.test = %q, %v", buf[:n], err)
	}
	for _, p := range []string{"f", "d"} {
		for _, x := range []string{"user.overlay.opaque", "user.overlay.redirect"} {
			if _, err := unix.Lgetxattr(filepath.Join(dir, p), x, buf); err == nil {
				t.Errorf("%s carries %s", p, x)
			}
		}
	}
	if logs.count("dropping overlay xattr") != 1 {
		t.Errorf("logs %q", logs.lines)
	}
	if os.Geteuid() != 0 && logs.count("not permitted to set xattr") != 1 {
		t.Errorf("want one EPERM warning for security./trusted. xattrs, logs %q", logs.lines)
	}
	dst := flattenDirs(t, dir)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "f"), "user.test", buf); err != nil || string(buf[:n]) != "value" {
		t.Errorf("flattened user.test = %q, %v", buf[:n], err)
	}
}

func TestUnpackDrainsReader(t *testing.T) {
	data := newLayer(t).file("a", "a", 0o644).bytes()
	data = append(slices.Clone(data), make([]byte, 10240)...) // trailing padding after the end marker
	cr := &countingReader{r: bytes.NewReader(data)}
	dir := filepath.Join(t.TempDir(), "layer")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyLayer(dir, cr, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if cr.n != int64(len(data)) || !cr.eof {
		t.Errorf("read %d of %d bytes, eof %v", cr.n, len(data), cr.eof)
	}
}

func TestUnpackRootEntryAndMissingParents(t *testing.T) {
	dir, st, _ := applyTestLayer(t, newLayer(t).
		add(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o751, ModTime: testMtime}, nil).
		file("./x/y/z", "z", 0o644). // parents not in the tar
		file("x//y/./w", "w", 0o644).
		bytes())
	if m := lstatT(t, dir).Mode & 0o7777; m != 0o751 {
		t.Errorf("root mode %o", m)
	}
	tree := readTree(t, dir)
	if tree["x/y/z"].content != "z" || tree["x/y/w"].content != "w" || !tree["x"].mode.IsDir() {
		t.Errorf("tree %v", tree)
	}
	if st.Files != 2 || st.Dirs != 1 {
		t.Errorf("stats %+v", st)
	}
	_, err := ApplyLayer(t.TempDir(), bytes.NewReader(newLayer(t).file(".", "", 0o644).bytes()), ApplyOptions{})
	if err == nil {
		t.Errorf("a file replacing the layer root was accepted")
	}
}

// BenchmarkApplyLayer applies a layer shaped like the real target: 8,217
// entries (~400 directories, ~7,800 small files, a few large ones), ~167 MB.
func BenchmarkApplyLayer(b *testing.B) {
	lb := newLayer(b)
	var total int64
	small := make([]byte, 16<<10)
	for i := range small {
		small[i] = byte(i * 7)
	}
	large := make([]byte, 6<<20)
	for i := range large {
		large[i] = byte(i * 13)
	}
	entries := 0
	for d := 0; d < 400; d++ {
		lb.dir(fmt.Sprintf("usr/lib/pkg%03d/", d), 0o755)
		entries++
	}
	for i := 0; entries < 8217-17; i++ {
		sz := 512 + (i*7919)%(16<<10-512)
		lb.add(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("usr/lib/pkg%03d/file%05d.py", i%400, i), Mode: 0o644}, small[:sz])
		total += int64(sz)
		entries++
	}
	for i := 0; i < 17; i++ {
		lb.add(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("usr/lib/big%02d.so", i), Mode: 0o755}, large)
		total += int64(len(large))
		entries++
	}
	data := lb.bytes()
	b.Logf("layer: %d entries, %.1f MB of content, %.1f MB tar", entries, float64(total)/1e6, float64(len(data))/1e6)
	b.SetBytes(int64(len(data)))
	base := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(base, fmt.Sprint(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		st, err := ApplyLayer(dir, bytes.NewReader(data), ApplyOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if st.Files+st.Dirs != entries-0 {
			b.Fatalf("stats %+v", st)
		}
		b.StopTimer()
		os.RemoveAll(dir)
		b.StartTimer()
	}
}

// TestUnpackRefusesTarSparse: a GNU sparse entry (GNU tar --sparse, in
// the old GNU and the PAX formats) declaring a terabyte is refused with
// the reason, instead of having its holes written out as zeros (the
// fuzzer's hang: a few hundred bytes made ApplyLayer write gigabytes).
func TestUnpackRefusesTarSparse(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Fatal("GNU tar is needed to write sparse entries")
	}
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "holes"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("x")
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, format := range []string{"gnu", "pax"} {
		layer := filepath.Join(t.TempDir(), "layer.tar")
		if out, err := exec.Command("tar", "--sparse", "--format="+format, "-cf", layer, "-C", src, "holes").CombinedOutput(); err != nil {
			t.Fatalf("tar --sparse --format=%s: %v\n%s", format, err, out)
		}
		lf, err := os.Open(layer)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "layer")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_, err = ApplyLayer(dir, lf, ApplyOptions{})
		lf.Close()
		if err == nil || !strings.Contains(err.Error(), "sparse file") || !strings.Contains(err.Error(), "holes") {
			t.Errorf("%s sparse entry: %v, want a refusal naming the sparse file", format, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, "holes")); err == nil {
			t.Errorf("%s sparse entry: holes was written (%d bytes)", format, fi.Size())
		}
	}
}
