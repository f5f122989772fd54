package image

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slopbox/slopbox/internal/userns"
)

type ocispecIndex = ocispec.Index

func toHostUID(s *Store, id uint32) (uint32, bool) { return userns.ToHost(s.mapping.UIDs, id) }

func statUID(fi os.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }

func mustRef(t *testing.T, s *Store, ref string) name.Reference {
	r, err := s.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tarDir writes dir's files as a plain tar at out.
func tarDir(t *testing.T, dir, out string) {
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	defer tw.Close()
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, _ := d.Info()
		h, _ := tar.FileInfoHeader(fi, "")
		h.Name = rel
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			src, _ := os.Open(p)
			defer src.Close()
			_, err = io.Copy(tw, src)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testDir is a t.TempDir that the user namespace's root may traverse.
func testDir(t *testing.T) string {
	d := t.TempDir()
	for p := d; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
