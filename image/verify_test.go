package image

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/slopbox/slopbox/test/fixtures"
)

// Defect G: a layer blob is checked against its diffID also when a layer
// with that diffID is already extracted: an image whose config claims a
// cached diffID for a different blob is refused, and nothing of it is
// stored.
func TestForgedBlobForCachedDiffIDRefused(t *testing.T) {
	reg := fixtures.Registry(t, nil)
	good := testImage(t)
	fixtures.Push(t, reg+"/good:v1", good)
	s := openTestStore(t)
	if _, err := s.Pull(context.Background(), reg+"/good:v1"); err != nil {
		t.Fatal(err)
	}
	goodCfg, err := good.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// Another image whose first layer is something else, and whose config
	// claims the good image's diffIDs.
	forged := fixtures.Image(t, HostPlatform(), []string{"sh"},
		fixtures.Layer(t, entry{Name: "etc/", Type: tar.TypeDir}, entry{Name: "etc/hostname", Body: "evil\n"}),
		fixtures.Layer(t, entry{Name: "x", Body: "y"}))
	cfg, err := forged.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.RootFS.DiffIDs = goodCfg.RootFS.DiffIDs
	forged, err = mutate.ConfigFile(forged, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fixtures.Push(t, reg+"/forged:v1", forged)
	_, err = s.Pull(context.Background(), reg+"/forged:v1")
	if err == nil || !strings.Contains(err.Error(), "but the image config says") {
		t.Fatalf("pull of a forged image: %v, want its layers refused", err)
	}
	if _, err := s.Get(reg + "/forged:v1"); err == nil {
		t.Error("the forged image was stored")
	}
	layers, _ := forged.Layers()
	for _, l := range layers {
		d, _ := l.Digest()
		if _, err := os.Stat(s.blobPath(d)); err == nil {
			t.Errorf("the forged blob %s was stored", d)
		}
	}
	assertConsistent(t, s)
}

// Defect G: an OCI layout whose manifest bytes do not match the digest
// that names them is refused, not loaded.
func TestLayoutWithTamperedManifestRefused(t *testing.T) {
	img := testImage(t)
	dir := filepath.Join(testDir(t), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "example.com/t/img:v1"})); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	mf := filepath.Join(dir, "blobs", "sha256", d.Hex)
	b, err := os.ReadFile(mf)
	if err != nil {
		t.Fatal(err)
	}
	// Still valid JSON, still the same layers: only the bytes differ.
	if err := os.WriteFile(mf, append(b, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openTestStore(t)
	_, err = s.Load(context.Background(), dir)
	if !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), "manifest's bytes have digest") {
		t.Fatalf("load of a tampered layout: %v", err)
	}
	if _, err := s.Get("example.com/t/img:v1"); err == nil {
		t.Error("the tampered image was stored")
	}
}
