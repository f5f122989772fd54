package archive

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzApplyLayer feeds arbitrary bytes to the layer applier as a tar
// stream. Whatever it makes of them (an error is fine), nothing may appear
// or change outside the layer's directory.
func FuzzApplyLayer(f *testing.F) {
	seed := func(entries ...*tar.Header) []byte {
		var b bytes.Buffer
		w := tar.NewWriter(&b)
		for _, h := range entries {
			w.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				w.Write(make([]byte, h.Size))
			}
		}
		w.Close()
		return b.Bytes()
	}
	f.Add(seed(&tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "a/f", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}))
	f.Add(seed(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(seed(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, &tar.Header{Name: "l/pwned", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(seed(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../.."}, &tar.Header{Name: "l/x", Typeflag: tar.TypeDir}))
	f.Add(seed(&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../outside"}))
	f.Add(seed(&tar.Header{Name: "d/.wh..wh..opq", Typeflag: tar.TypeReg}, &tar.Header{Name: ".wh.x", Typeflag: tar.TypeReg}))
	f.Add(seed(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Size: 1}, &tar.Header{Name: "f", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, &tar.Header{Name: "f/x", Typeflag: tar.TypeReg, Size: 1}))
	f.Fuzz(func(t *testing.T, layer []byte) {
		jail := t.TempDir()
		outside := filepath.Join(jail, "outside")
		if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(jail, "layer")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Go's fuzzing has no per-input deadline: an input that makes
		// ApplyLayer spin would stall the run silently. Crash instead, so
		// that the fuzzer keeps the input.
		done := make(chan struct{})
		go func() {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				panic(fmt.Sprintf("ApplyLayer took over 5 s on a layer of %d bytes", len(layer)))
			}
		}()
		ApplyLayer(dir, bytes.NewReader(layer), ApplyOptions{})
		close(done)
		ents, err := os.ReadDir(jail)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 2 {
			t.Fatalf("the layer made %v beside its directory", ents)
		}
		if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
			t.Fatalf("a file outside the layer changed: %q %v", b, err)
		}
		var st fs.FileInfo
		if st, err = os.Lstat(outside); err != nil || st.Mode()&fs.ModeType != 0 || st.Mode().Perm() != 0o644 {
			t.Fatalf("a file outside the layer changed: %v %v", st, err)
		}
		// Make the tree removable whatever modes the layer gave it.
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
}
