package image

import (
	"context"
	"fmt"
	"os"

	"github.com/gofrs/flock"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/errgroup"

	"github.com/slopbox/slopbox/internal/userns"
)

// Rootless, a sandbox whose user is not container root runs in a user
// namespace nested in the store's, in which that user is the invoking user
// (so its files in the workspace belong to the workspace's owner). Its
// layers are extracted once more, with owners shifted for the nesting
// (userns.Nested.Shift), into layers/<key>/sha256/, from the blobs already
// in the store.

// LayerDirFor is where the layer with diffID d is extracted for the mapping
// named key ("" for the store's own).
func (s *Store) LayerDirFor(d v1.Hash, key string) string {
	if key == "" {
		return s.LayerDir(d)
	}
	return s.path("layers", key, d.Algorithm, d.Hex)
}

// LayersFor returns img's layer directories for the nesting named key,
// extracting any that are missing from the stored blobs.
func (s *Store) LayersFor(ctx context.Context, img *Image, key string) ([]string, error) {
	if key == "" {
		return img.Layers, nil
	}
	dirs, complete := s.layerDirs(img, key)
	if complete {
		return dirs, nil
	}
	if !userns.Inside() {
		if _, err := s.runHelperNames(ctx, helperRequest{Op: "extract", Ref: img.Digest, Key: key}, nil); err != nil {
			return nil, err
		}
	} else if err := s.extractInside(ctx, img.Digest, key); err != nil {
		return nil, err
	}
	if dirs, complete = s.layerDirs(img, key); !complete {
		return nil, fmt.Errorf("image %s: layers for id mapping %s are incomplete after extraction", img.Name, key)
	}
	return dirs, nil
}

func (s *Store) layerDirs(img *Image, key string) ([]string, bool) {
	var dirs []string
	complete := true
	for _, d := range img.Config.RootFS.DiffIDs {
		dir := s.LayerDirFor(d, key)
		if !exists(dir) {
			complete = false
		}
		dirs = append(dirs, dir)
	}
	return dirs, complete
}

// extractInside extracts the layers of the image with manifest digest from
// the stored blobs for the nesting named key. Preconditions: inside the
// store's user namespace.
func (s *Store) extractInside(ctx context.Context, digest, key string) error {
	nested, err := userns.ParseNested(key)
	if err != nil {
		return err
	}
	l, err := s.lock(false)
	if err != nil {
		return err
	}
	defer l.Unlock()
	m, cfg, err := s.manifest(digest)
	if err != nil {
		return err
	}
	if len(m.Layers) != len(cfg.RootFS.DiffIDs) {
		return fmt.Errorf("image %s: %d layers but %d diffIDs", digest, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	g, ctx := errgroup.WithContext(ctx)
	for i, desc := range m.Layers {
		diffID := cfg.RootFS.DiffIDs[i]
		blob, err := v1.NewHash(desc.Digest.String())
		if err != nil {
			return err
		}
		g.Go(func() error {
			dir := s.LayerDirFor(diffID, key)
			if err := os.MkdirAll(s.path("locks"), 0o700); err != nil {
				return err
			}
			lk := flock.New(s.path("locks", key+"-"+diffID.Hex))
			if err := lk.Lock(); err != nil {
				return err
			}
			defer lk.Unlock()
			if exists(dir) {
				return nil
			}
			f, err := os.Open(s.blobPath(blob))
			if err != nil {
				return fmt.Errorf("layer %s: %w (re-pull the image)", diffID, err)
			}
			defer f.Close()
			tmp, err := s.tempDir("layer")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			if err := s.unpack(&ctxReader{ctx: ctx, r: f}, diffID, tmp, dir, nested.Shift); err != nil {
				return fmt.Errorf("layer %s for id mapping %s: %w", diffID, key, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// mappedKeys lists the mapping variants that have layers in the store.
func (s *Store) mappedKeys() []string {
	ents, _ := os.ReadDir(s.path("layers"))
	var keys []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "sha256" {
			keys = append(keys, e.Name())
		}
	}
	return keys
}
