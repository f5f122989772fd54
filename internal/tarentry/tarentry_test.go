package tarentry

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/slopbox/slopbox/internal/sparse"
)

func openDir(t *testing.T, dir string) *os.File {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func writer(buf *bytes.Buffer) *Writer {
	return &Writer{TW: tar.NewWriter(buf), Header: func(name string, fi fs.FileInfo) (*tar.Header, error) {
		st := fi.Sys().(*syscall.Stat_t)
		return &tar.Header{Name: name, Mode: Mode(st), Uid: int(st.Uid), Gid: int(st.Gid), ModTime: fi.ModTime(), Format: tar.FormatPAX}, nil
	}}
}

type got struct {
	hdr  *tar.Header
	data string
}

func entries(t *testing.T, b []byte) []got {
	t.Helper()
	var out []got
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out = append(out, got{h, string(data)})
	}
}

// swap replaces name in dir with a symlink to target, as a sandbox that
// writes the tree can between a writer's look at a name and its read.
func swap(t *testing.T, dir, name, target string) {
	t.Helper()
	tmp := filepath.Join(dir, ".swap")
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// TestHeaderFromTheOpenedFile: a file swapped for a symlink after it was
// opened, before its header is written, is written as the file opened
// (its header from fstat of the descriptor read, never a stat by name),
// nothing of the symlink's target; without procfs to reopen it through,
// the swap is refused and nothing is written.
func TestHeaderFromTheOpenedFile(t *testing.T) {
	for _, proc := range []bool{true, false} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("file"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("the secret, longer"), 0o600); err != nil {
			t.Fatal(err)
		}
		var want syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, "f"), &want); err != nil {
			t.Fatal(err)
		}
		d := openDir(t, dir)
		e, err := Open(int(d.Fd()), "f")
		if err != nil {
			t.Fatal(err)
		}
		swap(t, dir, "f", "secret")
		if !proc {
			procFD = "/nonexistent/"
		}
		var buf bytes.Buffer
		w := writer(&buf)
		var sawIno uint64
		h := w.Header
		w.Header = func(name string, fi fs.FileInfo) (*tar.Header, error) {
			sawIno = fi.Sys().(*syscall.Stat_t).Ino
			return h(name, fi)
		}
		err = w.Write(e, "f")
		e.Close()
		procFD = "/proc/self/fd/"
		if err == nil {
			err = w.TW.Close()
		}
		if !proc {
			if !errors.Is(err, ErrChanged) {
				t.Errorf("without procfs: %v, want ErrChanged", err)
			}
			if strings.Contains(buf.String(), "secret") {
				t.Error("without procfs: the symlink's target was written")
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ents := entries(t, buf.Bytes())
		if len(ents) != 1 {
			t.Fatalf("%d entries, want 1", len(ents))
		}
		g := ents[0]
		if g.hdr.Typeflag != tar.TypeReg || g.hdr.Size != 4 || g.data != "file" || g.hdr.Mode != 0o640 || sawIno != want.Ino {
			t.Errorf("entry %c size %d mode %o %q (ino %d, want %d): want the file opened, not the symlink nor its target",
				g.hdr.Typeflag, g.hdr.Size, g.hdr.Mode, g.data, sawIno, want.Ino)
		}
	}
}

// TestSymlinkFromTheOpenedLink: a symlink swapped for another after it
// was opened is written with the target of the one opened.
func TestSymlinkFromTheOpenedLink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("first", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	d := openDir(t, dir)
	e, err := Open(int(d.Fd()), "l")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	swap(t, dir, "l", "/etc/shadow")
	var buf bytes.Buffer
	w := writer(&buf)
	if err := w.Write(e, "l"); err != nil {
		t.Fatal(err)
	}
	w.TW.Close()
	ents := entries(t, buf.Bytes())
	if len(ents) != 1 || ents[0].hdr.Typeflag != tar.TypeSymlink || ents[0].hdr.Linkname != "first" {
		t.Errorf("entries %+v: want the symlink to first", ents)
	}
}

// TestLinksAndBound: a file met again is a hard link to its first name,
// not counted again; the file that passes the bound is refused before any
// of it is written.
func TestLinksAndBound(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c"), []byte("67890"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := openDir(t, dir)
	var buf bytes.Buffer
	w := writer(&buf)
	w.Links, w.Size = map[[2]uint64]string{}, &sparse.Counter{Bound: sparse.Bound{Bytes: 8, What: "8 bytes"}}
	for _, n := range []string{"a", "b", "c"} {
		e, err := Open(int(d.Fd()), n)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Write(e, n)
		e.Close()
		if n == "c" {
			if !errors.Is(err, sparse.ErrTooLarge) {
				t.Errorf("c: %v, want ErrTooLarge", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	w.TW.Flush()
	ents := entries(t, append(buf.Bytes(), make([]byte, 1024)...))
	if len(ents) != 2 || ents[0].data != "12345" || ents[1].hdr.Typeflag != tar.TypeLink || ents[1].hdr.Linkname != "a" || ents[1].hdr.Size != 0 {
		t.Errorf("entries %+v: want a, then b a link to it", ents)
	}
}

func TestOpenOneName(t *testing.T) {
	d := openDir(t, t.TempDir())
	if _, err := Open(int(d.Fd()), "a/b"); err == nil {
		t.Error("a path of two names was opened")
	}
}
