package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"github.com/slopbox/slopbox/image/archive/archivetest"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testMtime is the mtime given to every entry built by layerBuilder unless
// the test sets its own.
var testMtime = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// layerBuilder builds an uncompressed layer tar in memory.
type layerBuilder struct {
	t   testing.TB
	buf bytes.Buffer
	tw  *tar.Writer
}

func newLayer(t testing.TB) *layerBuilder {
	b := &layerBuilder{t: t}
	b.tw = tar.NewWriter(&b.buf)
	return b
}

func (b *layerBuilder) add(h *tar.Header, body []byte) *layerBuilder {
	b.t.Helper()
	if h.ModTime.IsZero() {
		h.ModTime = testMtime
	}
	if h.Typeflag == tar.TypeReg {
		h.Size = int64(len(body))
	}
	if err := b.tw.WriteHeader(h); err != nil {
		b.t.Fatalf("tar header %q: %v", h.Name, err)
	}
	if len(body) > 0 {
		if _, err := b.tw.Write(body); err != nil {
			b.t.Fatalf("tar body %q: %v", h.Name, err)
		}
	}
	return b
}

func (b *layerBuilder) dir(name string, mode int64) *layerBuilder {
	return b.add(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}, nil)
}

func (b *layerBuilder) file(name, content string, mode int64) *layerBuilder {
	return b.add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, []byte(content))
}

func (b *layerBuilder) symlink(name, target string) *layerBuilder {
	return b.add(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
}

func (b *layerBuilder) link(name, target string) *layerBuilder {
	return b.add(&tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644}, nil)
}

func (b *layerBuilder) bytes() []byte {
	b.t.Helper()
	if err := b.tw.Close(); err != nil {
		b.t.Fatal(err)
	}
	return b.buf.Bytes()
}

// logRecorder collects Logf output.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logRecorder) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// apply extracts tar bytes into a fresh layer dir and returns it.
func applyTestLayer(t testing.TB, data []byte) (string, ApplyStats, *logRecorder) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layer")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs logRecorder
	st, err := ApplyLayer(dir, bytes.NewReader(data), ApplyOptions{Logf: logs.logf})
	if err != nil {
		t.Fatalf("ApplyLayer: %v", err)
	}
	return dir, st, &logs
}

// flatten applies the given layers to their own dirs and flattens them.
func flattenTestLayers(t testing.TB, layers ...[]byte) (string, []string) {
	t.Helper()
	var dirs []string
	for _, l := range layers {
		d, _, _ := applyTestLayer(t, l)
		dirs = append(dirs, d)
	}
	dst := filepath.Join(t.TempDir(), "rootfs")
	if err := archivetest.Flatten(dst, dirs); err != nil {
		t.Fatalf("Flatten: %v", err)
	}
	return dst, dirs
}

// treeEntry describes one path for tree comparisons.
type treeEntry struct {
	mode    os.FileMode
	content string // file content or symlink target
}

func (e treeEntry) String() string { return fmt.Sprintf("%v %q", e.mode, e.content) }

// readTree lists root recursively (paths relative to root, without ".").
func readTree(t testing.TB, root string) map[string]treeEntry {
	t.Helper()
	out := map[string]treeEntry{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		e := treeEntry{mode: fi.Mode()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.content = string(b)
		case fi.Mode()&os.ModeSymlink != 0:
			e.content, err = os.Readlink(p)
			if err != nil {
				return err
			}
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func treeNames(m map[string]treeEntry) []string {
	var names []string
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func lstatT(t testing.TB, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return &st
}

func isWhiteoutDev(t testing.TB, p string) bool {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// canMknod reports whether this process may create real device nodes (root
// with CAP_MKNOD in the initial user namespace), probing in a scratch dir.
func canMknod(t testing.TB) bool {
	t.Helper()
	p := filepath.Join(t.TempDir(), "probe")
	err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
	if err == nil {
		return true
	}
	if !errors.Is(err, unix.EPERM) {
		t.Fatalf("mknod probe: %v", err)
	}
	return false
}

// countingReader counts bytes read and whether EOF was seen.
type countingReader struct {
	r   io.Reader
	n   int64
	eof bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err == io.EOF {
		c.eof = true
	}
	return n, err
}
