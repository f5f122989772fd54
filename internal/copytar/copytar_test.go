package copytar

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func hostile(t *testing.T, entries ...tar.Header) *bytes.Buffer {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		h.Mode |= 0o644
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "pwned"
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return &b
}

// extractTo extracts r into the directory dest, opened as the host's side opens it.
func extractTo(t *testing.T, r io.Reader, dest, rename string, o Options) error {
	t.Helper()
	d, err := os.Open(dest)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return Extract(r, d, rename, o)
}

// TestExtractStaysInside: a stream from a hostile sandbox cannot write
// outside the destination: not through "..", absolute names, a symlink it
// sends first, or one planted in the destination; no setuid bit survives.
func TestExtractStaysInside(t *testing.T) {
	outside := t.TempDir()
	cases := map[string][]tar.Header{
		"dotdot":       {{Name: "../../" + filepath.Base(outside) + "/f", Typeflag: tar.TypeReg}},
		"symlink-dir":  {{Name: "x", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "x/f", Typeflag: tar.TypeReg}},
		"relative-up":  {{Name: "x", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../" + outside}, {Name: "x/f", Typeflag: tar.TypeReg}},
		"planted":      {{Name: "p/f", Typeflag: tar.TypeReg}},
		"hardlink-out": {{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../../../etc/passwd"}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			dest := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(dest, "p")); err != nil {
				t.Fatal(err)
			}
			err := extractTo(t, hostile(t, entries...), dest, "", Options{UID: os.Getuid(), GID: os.Getgid()})
			ents, _ := os.ReadDir(outside)
			if len(ents) != 0 {
				t.Fatalf("the copy wrote outside its destination (err %v): %v", err, ents)
			}
			if b, _ := os.ReadFile("/etc/passwd"); strings.Contains(string(b), "pwned") {
				t.Fatal("wrote through a hard link")
			}
		})
	}
	dest := t.TempDir()
	if err := extractTo(t, hostile(t, tar.Header{Name: "s", Typeflag: tar.TypeReg, Mode: 0o6755}), dest, "", Options{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dest, "s")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("setid bits kept: %v %v", fi.Mode(), err)
	}
	if err := extractTo(t, hostile(t, tar.Header{Name: "dev", Typeflag: tar.TypeChar}), t.TempDir(), "", Options{}); err == nil {
		t.Error("a device node was accepted")
	}
}

// TestRoundTrip: modes, symlinks (never followed) and renames.
func TestRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	os.MkdirAll(filepath.Join(src, "sub"), 0o750)
	os.WriteFile(filepath.Join(src, "x"), []byte("x"), 0o741)
	os.Symlink("/etc/shadow", filepath.Join(src, "sub", "abs"))
	var b bytes.Buffer
	dir, name := Source(src)
	if err := Write(&b, dir, name, Options{NoSymlinks: true}); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	into, rename, err := Into(filepath.Join(parent, "copy"), false, Options{NoSymlinks: true})
	if err != nil || rename != "copy" {
		t.Fatalf("Into: %v %q %v", into, rename, err)
	}
	defer into.Close()
	if err := Extract(&b, into, rename, Options{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(parent, "copy", "x")); err != nil || fi.Mode().Perm() != 0o741 {
		t.Errorf("x: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(parent, "copy", "sub")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("sub: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(parent, "copy", "sub", "abs")); err != nil || l != "/etc/shadow" {
		t.Errorf("symlink: %q %v", l, err)
	}
	// dir/. copies the contents.
	b.Reset()
	dir, name = Source(src + "/.")
	if name != "." {
		t.Fatalf("Source(dir/.) name %q", name)
	}
	if err := Write(&b, dir, name, Options{NoSymlinks: true}); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "new")
	into, rename, err = Into(dest, true, Options{NoSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer into.Close()
	if err := Extract(&b, into, rename, Options{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dest, "x")); err != nil {
		t.Error(err)
	}
}

// TestExtractKeepsExistingTypes: as docker cp, a copy into an existing
// destination refuses to replace a directory with a non-directory or a file
// with a directory: an error, with nothing removed. A symlink in the way is
// replaced, not followed, and a file may become a symlink (docker's
// NoOverwriteDirNonDir allows it; it used to be refused).
func TestExtractKeepsExistingTypes(t *testing.T) {
	o := Options{UID: os.Getuid(), GID: os.Getgid()}
	cases := map[string]tar.Header{
		"dir-by-file":     {Name: "d", Typeflag: tar.TypeReg},
		"dir-by-symlink":  {Name: "d", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
		"file-by-dir":     {Name: "f", Typeflag: tar.TypeDir},
		"dir-by-hardlink": {Name: "d", Typeflag: tar.TypeLink, Linkname: "f"},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			dest := t.TempDir()
			os.Mkdir(filepath.Join(dest, "d"), 0o755)
			os.WriteFile(filepath.Join(dest, "d", "keep"), []byte("kept"), 0o644)
			os.WriteFile(filepath.Join(dest, "f"), []byte("file"), 0o644)
			err := extractTo(t, hostile(t, h), dest, "", o)
			if err == nil || !strings.Contains(err.Error(), "cannot overwrite") {
				t.Errorf("extract: %v, want a refusal", err)
			}
			if b, err := os.ReadFile(filepath.Join(dest, "d", "keep")); err != nil || string(b) != "kept" {
				t.Errorf("the directory's contents: %q %v", b, err)
			}
			if fi, err := os.Lstat(filepath.Join(dest, "f")); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("the file: %v %v", fi, err)
			}
		})
	}
	// Allowed: a file over a file, a file or a directory over a symlink
	// (replaced, not followed).
	dest, outside := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dest, "f"), []byte("old"), 0o644)
	os.Symlink(filepath.Join(outside, "x"), filepath.Join(dest, "l"))
	os.Symlink(outside, filepath.Join(dest, "ld"))
	os.WriteFile(filepath.Join(dest, "fs"), []byte("file"), 0o644)
	err := extractTo(t, hostile(t, tar.Header{Name: "f", Typeflag: tar.TypeReg}, tar.Header{Name: "l", Typeflag: tar.TypeReg},
		tar.Header{Name: "ld", Typeflag: tar.TypeDir}, tar.Header{Name: "fs", Typeflag: tar.TypeSymlink, Linkname: outside}), dest, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "f")); string(b) != "pwned" {
		t.Errorf("file over file: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("wrote through a symlink: %v", ents)
	}
	if fi, err := os.Lstat(filepath.Join(dest, "ld")); err != nil || !fi.IsDir() {
		t.Errorf("directory over a symlink: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(dest, "fs")); err != nil || l != outside {
		t.Errorf("symlink over a file: %q %v", l, err)
	}
}

// TestExtractKeepsHoles (issue 41, case 4): a tar holds a sparse file's
// holes as zeros; Extract leaves them holes, whether the file ends in
// data or in zeros, and the file reads back as sent. It wrote them out.
func TestExtractKeepsHoles(t *testing.T) {
	const size = 64 << 20
	files := map[string][]int64{"data-at-end": {0, 4097, size / 2, size - 1}, "zeros-at-end": {size / 3}, "all-zeros": nil}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		chunk := make([]byte, 1<<20)
		for _, name := range []string{"data-at-end", "zeros-at-end", "all-zeros"} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size}); err != nil {
				pw.CloseWithError(err)
				return
			}
			for off := int64(0); off < size; off += int64(len(chunk)) {
				clear(chunk)
				for _, m := range files[name] {
					if m >= off && m < off+int64(len(chunk)) {
						chunk[m-off] = 0xA5
					}
				}
				tw.Write(chunk)
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	dest := t.TempDir()
	if err := extractTo(t, pr, dest, "", Options{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	for name, markers := range files {
		f, err := os.Open(filepath.Join(dest, name))
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		unix.Fstat(int(f.Fd()), &st)
		if st.Size != size || st.Blocks*512 > 1<<20 {
			t.Errorf("%s: %d bytes, %d on disk; want %d, at most 1 MiB on disk", name, st.Size, st.Blocks*512, size)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		want := make([]byte, size)
		for _, m := range markers {
			want[m] = 0xA5
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s does not read back as sent", name)
		}
	}
}
