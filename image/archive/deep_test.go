package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/slopbox/slopbox/test/fixtures"
)

// Defect H: a hostile layer with a very deep path gets a short error, not
// one that repeats the path (it used to print 20 KB).
func TestDeepPathErrorIsShort(t *testing.T) {
	deep := strings.Repeat("d/", 2500) + "f"
	var entries []fixtures.Entry
	entries = append(entries, fixtures.Entry{Name: "l", Type: tar.TypeSymlink, Linkname: "/"})
	entries = append(entries, fixtures.Entry{Name: "l/" + deep, Body: "x"})
	dir := t.TempDir()
	_, err := ApplyLayer(dir, bytes.NewReader(fixtures.TarBytes(t, entries...)), ApplyOptions{})
	if err == nil {
		t.Fatal("a path through a symlink out of the root was accepted")
	}
	if len(err.Error()) > 1200 || !strings.Contains(err.Error(), "bytes)") {
		t.Errorf("error of %d bytes: %.300s", len(err.Error()), err)
	}
	if !errors.Is(err, ErrPathEscapes) {
		t.Errorf("the elided error lost its cause: %v", err)
	}
}
