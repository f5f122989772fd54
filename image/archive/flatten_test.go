package archive

import (
	"archive/tar"
	"bytes"
	"github.com/slopbox/slopbox/image/archive/archivetest"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestUnpackFlattenLowerSymlinks checks that symlinks left by a lower layer
// are replaced, never written through, when an upper layer puts a directory
// or file at the same path.
func TestUnpackFlattenLowerSymlinks(t *testing.T) {
	e := newHostileEnv(t)
	keep := filepath.Join(e.sentinel, "keep")
	l1 := newLayer(t).
		symlink("etc", e.sentinel).symlink("d", e.sentinel).symlink("f", keep).symlink("rel", "../sentinel").
		bytes()
	l2 := newLayer(t).
		dir("etc/", 0o755).file("etc/passwd", "root:x:0:0", 0o644).
		dir("d/", 0o755).file("d/.wh..wh..opq", "", 0o644).file("d/keep", "mine", 0o644).
		file("f", "mine", 0o644).
		dir("rel/", 0o755).file("rel/.wh.keep", "", 0o644).
		bytes()
	d1, d2 := filepath.Join(e.parent, "l1"), filepath.Join(e.parent, "l2")
	for i, l := range [][]byte{l1, l2} {
		d := []string{d1, d2}[i]
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := ApplyLayer(d, bytes.NewReader(l), ApplyOptions{Logf: t.Logf}); err != nil {
			t.Fatal(err)
		}
	}
	if err := archivetest.Flatten(e.layer, []string{d1, d2}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(d1); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(d2); err != nil {
		t.Fatal(err)
	}
	e.check(t)
	got := readTree(t, e.layer)
	want := []string{"d", "d/keep", "etc", "etc/passwd", "f", "rel"}
	if names := treeNames(got); !slices.Equal(names, want) {
		t.Errorf("tree %q, want %q", names, want)
	}
	for n, c := range map[string]string{"etc/passwd": "root:x:0:0", "d/keep": "mine", "f": "mine"} {
		if got[n].content != c || !got[n].mode.IsRegular() {
			t.Errorf("%s = %v", n, got[n])
		}
	}
}

func TestUnpackFlattenTypeChanges(t *testing.T) {
	l1 := newLayer(t).dir("x/", 0o755).file("x/y", "y", 0o644).file("p", "p", 0o644).dir("d/", 0o755).file("d/old", "o", 0o644).
		dir("e/", 0o755).file("e/old", "o", 0o644).
		bytes()
	l2 := newLayer(t).file("x", "now a file", 0o644).dir("p/", 0o700).file("p/q", "q", 0o644).
		file(".wh.d", "", 0o644).dir("d/", 0o711).file("d/new", "n", 0o644). // whiteout then recreate: opaque
		file(".wh.e", "", 0o644).file("e/new", "n", 0o644).                  // same, with an implicit parent
		bytes()
	l3 := newLayer(t).dir("x/", 0o755).file("x/z", "z", 0o644).bytes()
	dst, dirs := flattenTestLayers(t, l1, l2, l3)
	for _, n := range []string{"d", "e"} {
		if !archivetest.IsOverlayOpaque(filepath.Join(dirs[1], n)) {
			t.Errorf("layer 2 %s (whiteout then directory) is not opaque", n)
		}
	}
	got := readTree(t, dst)
	want := []string{"d", "d/new", "e", "e/new", "p", "p/q", "x", "x/z"}
	if names := treeNames(got); !slices.Equal(names, want) {
		t.Errorf("tree %q, want %q", names, want)
	}
	if got["p"].mode.Perm() != 0o700 || got["d"].mode.Perm() != 0o711 {
		t.Errorf("p %v, d %v", got["p"], got["d"])
	}
	// Two layers only: x is the file.
	dst2 := flattenDirs(t, dirs[0], dirs[1])
	if got := readTree(t, dst2); got["x"].content != "now a file" {
		t.Errorf("x = %v", got["x"])
	}
}

func TestUnpackFlattenOwners(t *testing.T) {
	b := newLayer(t)
	b.add(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Uid: 1000, Gid: 1000, Mode: 0o4750}, []byte("f"))
	b.add(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Uid: 1001, Gid: 1002, Mode: 0o750}, nil)
	dir, st, _ := applyTestLayer(t, b.bytes())
	dst := flattenDirs(t, dir)
	for _, n := range []string{"f", "d"} {
		ls, fs := lstatT(t, filepath.Join(dir, n)), lstatT(t, filepath.Join(dst, n))
		if os.Geteuid() == 0 && !st.ChownDegraded && (fs.Uid != ls.Uid || fs.Gid != ls.Gid) {
			t.Errorf("%s: flattened owner %d:%d, layer %d:%d", n, fs.Uid, fs.Gid, ls.Uid, ls.Gid)
		}
		if fs.Mode != ls.Mode {
			t.Errorf("%s: flattened mode %o, layer %o", n, fs.Mode, ls.Mode)
		}
	}
	if os.Geteuid() == 0 && !st.ChownDegraded {
		if s := lstatT(t, filepath.Join(dst, "f")); s.Uid != 1000 || s.Gid != 1000 {
			t.Errorf("f owner %d:%d", s.Uid, s.Gid)
		}
	}
}
