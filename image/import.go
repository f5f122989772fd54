package image

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Import makes an image of one layer from a root filesystem tarball
// (docker import): plain or gzip-compressed, with config cfg, named ref
// ("" for none). It returns the image's id. The image is written as a
// docker-save archive and loaded as Load does, so that it is checked and
// extracted the same way.
func (s *Store) Import(ctx context.Context, r io.Reader, ref string, cfg v1.Config, comment string) (string, error) {
	if ref != "" {
		if _, err := s.ParseReference(ref); err != nil {
			return "", err
		}
	}
	// The layer, uncompressed, and its digest.
	layer, err := os.CreateTemp(s.path("tmp"), fmt.Sprintf("%d-import-", os.Getpid()))
	if err != nil {
		return "", err
	}
	defer os.Remove(layer.Name())
	defer layer.Close()
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return "", fmt.Errorf("%w: import: %v", ErrBadArchive, err)
		}
		defer gz.Close()
		src = gz
	}
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(layer, h), &ctxReader{ctx: ctx, r: src})
	if err != nil {
		return "", fmt.Errorf("import: reading the tarball: %w", err)
	}
	diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	now := time.Now().UTC()
	config, err := json.Marshal(v1.ConfigFile{
		Architecture: runtime.GOARCH, OS: "linux", Created: v1.Time{Time: now}, Config: cfg,
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}},
		History: []v1.History{{Created: v1.Time{Time: now}, CreatedBy: "slopbox import", Comment: comment}},
	})
	if err != nil {
		return "", err
	}
	var tags []string
	if ref != "" {
		tags = []string{ref}
	}
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": tags, "Layers": []string{"layer.tar"}}})

	archive, err := os.CreateTemp(s.path("tmp"), fmt.Sprintf("%d-import-", os.Getpid()))
	if err != nil {
		return "", err
	}
	defer os.Remove(archive.Name())
	defer archive.Close()
	tw := tar.NewWriter(archive)
	for _, f := range []struct {
		name string
		b    []byte
	}{{"config.json", config}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.b)), ModTime: now}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.b); err != nil {
			return "", err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "layer.tar", Mode: 0o644, Size: size, ModTime: now}); err != nil {
		return "", err
	}
	if _, err := layer.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if _, err := io.CopyN(tw, layer, size); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := archive.Close(); err != nil {
		return "", err
	}
	if _, err := s.Load(ctx, archive.Name()); err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	sum := sha256.Sum256(config)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
