package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, content := range []string{"first", "second, longer"} {
		if err := Write(p, strings.NewReader(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); string(got) != content {
			t.Errorf("content %q, want %q", got, content)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	// A failed write leaves the old file and no temporary file.
	if err := Write(filepath.Join(dir, "missing", "x"), strings.NewReader("x"), 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
	if got, _ := os.ReadFile(p); string(got) != "second, longer" {
		t.Errorf("content %q after a failed write", got)
	}
}
