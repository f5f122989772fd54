package image

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slopbox/slopbox/internal/userns"
)

// GC removes blobs and extracted layers no image references, and staging
// directories of processes that no longer exist.
func (s *Store) GC() error {
	if !userns.Inside() {
		return s.runHelper(context.Background(), helperRequest{Op: "gc"})
	}
	return s.gcInside()
}

// gcInside is GC. Preconditions: inside the user namespace.
func (s *Store) gcInside() error {
	l, err := s.lock(true)
	if err != nil {
		return err
	}
	defer l.Unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	blobs := map[string]bool{}
	diffs := map[string]bool{}
	for _, d := range idx.Manifests {
		blobs[d.Digest.Encoded()] = true
		b, err := s.readBlob(v1.Hash{Algorithm: "sha256", Hex: d.Digest.Encoded()}, "manifest", MaxManifestBytes)
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("gc: manifest %s: %w", d.Digest, err)
		}
		blobs[m.Config.Digest.Encoded()] = true
		for _, l := range m.Layers {
			blobs[l.Digest.Encoded()] = true
		}
		_, cfg, err := s.manifest(d.Digest.String())
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		for _, diff := range cfg.RootFS.DiffIDs {
			diffs[diff.Hex] = true
		}
	}
	// The build cache keeps its layers (PruneBuildCache drops entries).
	for _, nl := range s.cacheEntries() {
		blobs[nl.Digest.Hex] = true
		diffs[nl.DiffID.Hex] = true
	}
	// Layers a sandbox still uses stay, whatever names are gone.
	leased, err := s.leasedLayers()
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	for d := range leased {
		diffs[d] = true
	}
	var errs []string
	sweep := func(dir string, keep map[string]bool) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err.Error())
			return
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") || keep[e.Name()] {
				continue
			}
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	sweep(s.path("oci", "blobs", "sha256"), blobs)
	sweep(s.path("layers", "sha256"), diffs)
	for _, key := range s.mappedKeys() {
		sweep(s.path("layers", key, "sha256"), diffs)
	}
	if err := s.cleanStaleTmp(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("gc: %s", strings.Join(errs, "; "))
	}
	return nil
}

// cleanStaleTmp removes staging directories (named PID-kind-…) of processes
// that no longer exist, such as a pull killed with SIGKILL.
func (s *Store) cleanStaleTmp() error {
	ents, err := os.ReadDir(s.path("tmp"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(strings.SplitN(e.Name(), "-", 2)[0])
		if err == nil && pidAlive(pid) {
			continue
		}
		if err := os.RemoveAll(s.path("tmp", e.Name())); err != nil {
			return err
		}
	}
	return nil
}
