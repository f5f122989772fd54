package image

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseReference: any string is parsed or refused, never a panic, and
// a reference that parses names itself again.
func FuzzParseReference(f *testing.F) {
	for _, s := range []string{"busybox", "127.0.0.1:5000/a/b:v1", "ghcr.io/x/y@sha256:" + string(bytes.Repeat([]byte("a"), 64)), "NOT A REF", "a:b:c", "localhost:99999/x", ""} {
		f.Add(s)
	}
	root := f.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	s, err := Open(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		r, err := s.ParseReference(ref)
		if err != nil {
			return
		}
		again, err := s.ParseReference(r.String())
		if err != nil || again.String() != r.String() {
			t.Fatalf("%q parsed as %q, which parses as %v %v", ref, r.String(), again, err)
		}
	})
}
