package image

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/opencontainers/go-digest"
	imgspecs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/image/archive"
	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/internal/lowerdirs"
	"github.com/slopbox/slopbox/internal/sparse"
	"github.com/slopbox/slopbox/internal/userns"
)

// What image builds (build/) and commits add to the store: layers made from
// a directory or a tar applied over an image, a build cache of those
// layers under buildcache/KEY, and images written from a config and
// layers.

// NewLayer is a layer a build or commit made, as a manifest lists it.
type NewLayer struct {
	DiffID v1.Hash `json:"diff_id"`
	Digest v1.Hash `json:"digest"`
	Size   int64   `json:"size"`
}

// CommitDir stores dir, an overlay upper directory (a stopped build step's
// or container's), as a layer: blob and extracted form. With cacheKey set
// the layer is recorded in the build cache, which GC keeps.
func (s *Store) CommitDir(ctx context.Context, dir, cacheKey string) (NewLayer, error) {
	if !userns.Inside() {
		resp, err := s.runHelperResp(ctx, helperRequest{Op: "commit-dir", Path: dir, Key: cacheKey}, nil)
		if err != nil {
			return NewLayer{}, err
		}
		return *resp.Layer, nil
	}
	return s.commitDirInside(ctx, dir, cacheKey)
}

// CommitTar applies the tar read from f over the image whose layers have
// the diffIDs parent (oldest first) and stores what changed as a layer:
// existing directories keep their owners and modes, as they would under
// docker's COPY. Paths in the tar are resolved inside the image (see
// archive.ApplyLayer): nothing outside it is written.
func (s *Store) CommitTar(ctx context.Context, parent []v1.Hash, f *os.File, cacheKey string) (NewLayer, error) {
	var ps []string
	for _, p := range parent {
		ps = append(ps, p.String())
	}
	resp, err := s.runHelperResp(ctx, helperRequest{Op: "commit-tar", FD: 5, Key: cacheKey, Parents: ps}, f)
	if err != nil {
		return NewLayer{}, err
	}
	return *resp.Layer, nil
}

func (s *Store) commitTarInside(ctx context.Context, parents []string, f *os.File, cacheKey string) (NewLayer, error) {
	tmp, err := s.tempDir("copy")
	if err != nil {
		return NewLayer{}, err
	}
	defer os.RemoveAll(tmp)
	upper, work, merged := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return NewLayer{}, err
		}
	}
	target := upper
	if len(parents) > 0 {
		var layers []string
		for _, p := range parents {
			h, err := v1.NewHash(p)
			if err != nil {
				return NewLayer{}, err
			}
			layers = append(layers, s.LayerDir(h))
		}
		lower := lowerdirs.Of(layers)
		// The helper has a mount namespace of its own (userns.Command).
		if err := unix.Mount("overlay", merged, "overlay", unix.MS_NODEV|unix.MS_NOSUID, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", strings.Join(lower, ":"), upper, work)); err != nil {
			return NewLayer{}, fmt.Errorf("mount the image's layers: %w", err)
		}
		defer unix.Unmount(merged, unix.MNT_DETACH)
		target = merged
	}
	if _, err := archive.ApplyLayer(target, &ctxReader{ctx: ctx, r: f}, archive.ApplyOptions{Logf: s.logf}); err != nil {
		return NewLayer{}, err
	}
	if target == merged {
		if err := unix.Unmount(merged, 0); err != nil {
			return NewLayer{}, err
		}
	}
	return s.commitDirInside(ctx, upper, cacheKey)
}

// commitDirInside is CommitDir. Preconditions: inside the user namespace.
func (s *Store) commitDirInside(ctx context.Context, dir, cacheKey string) (NewLayer, error) {
	l, err := s.lock(false)
	if err != nil {
		return NewLayer{}, err
	}
	defer l.Unlock()
	tmp, err := s.tempDir("commit")
	if err != nil {
		return NewLayer{}, err
	}
	defer os.RemoveAll(tmp)
	blobPath := filepath.Join(tmp, "blob")
	bf, err := os.OpenFile(blobPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return NewLayer{}, err
	}
	defer bf.Close()
	blobHash, diffHash := sha256.New(), sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(bf, blobHash), 1<<20)
	zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	// The layer's tar holds its files' holes as zeros, which every
	// extraction of it writes out (this store's keeps them as holes):
	// it is bounded by the space the store has.
	if err := archive.WriteLayer(dir, io.MultiWriter(zw, diffHash), sparse.FreeSpace(s.root)); err != nil {
		return NewLayer{}, err
	}
	if err := zw.Close(); err != nil {
		return NewLayer{}, err
	}
	if err := bw.Flush(); err != nil {
		return NewLayer{}, err
	}
	st, err := bf.Stat()
	if err != nil {
		return NewLayer{}, err
	}
	if err := bf.Close(); err != nil {
		return NewLayer{}, err
	}
	nl := NewLayer{
		DiffID: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(diffHash.Sum(nil))},
		Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(blobHash.Sum(nil))},
		Size:   st.Size(),
	}
	// The extracted form is made from the blob, as for a pulled layer:
	// what the step wrote is applied once more through ApplyLayer.
	if !exists(s.LayerDir(nl.DiffID)) {
		f, err := os.Open(blobPath)
		if err != nil {
			return NewLayer{}, err
		}
		err = s.unpack(&ctxReader{ctx: ctx, r: f}, nl.DiffID, tmp, s.LayerDir(nl.DiffID), nil)
		f.Close()
		if err != nil {
			return NewLayer{}, err
		}
	}
	if !exists(s.blobPath(nl.Digest)) {
		if err := os.Rename(blobPath, s.blobPath(nl.Digest)); err != nil {
			return NewLayer{}, err
		}
	}
	if cacheKey != "" {
		if err := s.putCache(cacheKey, nl); err != nil {
			return NewLayer{}, err
		}
	}
	return nl, nil
}

func (s *Store) cachePath(key string) string { return s.path("buildcache", key) }

func validCacheKey(key string) bool { return len(key) == 64 && isHex(key) }

// PutCache records nl, a layer already in the store, in the build cache
// under key (a layer taken from a --cache-from image).
func (s *Store) PutCache(ctx context.Context, key string, nl NewLayer) error {
	if !userns.Inside() {
		_, err := s.runHelperResp(ctx, helperRequest{Op: "put-cache", Key: key, Layer: &nl}, nil)
		return err
	}
	if !exists(s.LayerDir(nl.DiffID)) || !exists(s.blobPath(nl.Digest)) {
		return fmt.Errorf("build cache: layer %s is not in the store", nl.DiffID)
	}
	return s.putCache(key, nl)
}

// cacheMarks is a run of build steps that make no layer (ENV, LABEL, …):
// their cache keys, under the key of the run's first step, with the layer
// they stand on (image prune drops them with it). One file per run: a
// Dockerfile of 100,000 ENV lines writes one.
type cacheMarks struct {
	Layer NewLayer `json:"layer"`
	Keys  []string `json:"keys"`
}

func (s *Store) marksPath(run string) string { return s.path("buildcache-steps", run) }

// CacheMarks returns the keys recorded for the run of layerless steps
// that starts with key run.
func (s *Store) CacheMarks(run string) map[string]bool {
	out := map[string]bool{}
	if !validCacheKey(run) {
		return out
	}
	b, err := os.ReadFile(s.marksPath(run))
	var m cacheMarks
	if err != nil || json.Unmarshal(b, &m) != nil || !exists(s.LayerDir(m.Layer.DiffID)) {
		return out
	}
	for _, k := range m.Keys {
		out[k] = true
	}
	return out
}

// PutCacheMarks records the keys of a run of layerless steps starting
// with key run, standing on layer top.
func (s *Store) PutCacheMarks(ctx context.Context, run string, top NewLayer, keys []string) error {
	if !validCacheKey(run) {
		return fmt.Errorf("invalid build cache key %q", run)
	}
	if !userns.Inside() {
		_, err := s.runHelperResp(ctx, helperRequest{Op: "put-cache-marks", Key: run, Layer: &top, Keys: keys}, nil)
		return err
	}
	if err := os.MkdirAll(s.path("buildcache-steps"), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(cacheMarks{Layer: top, Keys: keys})
	return writeCacheFile(s.marksPath(run), b)
}

func (s *Store) putCache(key string, nl NewLayer) error {
	if !validCacheKey(key) {
		return fmt.Errorf("invalid build cache key %q", key)
	}
	if err := os.MkdirAll(s.path("buildcache"), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(nl)
	return writeCacheFile(s.cachePath(key), b)
}

// writeCacheFile writes a build cache entry atomically but not synced: an
// entry is a hint, checked against the store when it is used (CachedLayer,
// CacheMarks), and the layer blob and directory it names are not synced
// either; a sync per step cost up to tens of ms on a busy disk.
func writeCacheFile(path string, b []byte) error {
	return atomicfile.WriteVolatile(path, bytes.NewReader(b), 0o644)
}

// CachedLayer returns the layer the build cache holds for key, if both
// its blob and its extracted form are in the store.
func (s *Store) CachedLayer(key string) (NewLayer, bool) {
	if !validCacheKey(key) {
		return NewLayer{}, false
	}
	b, err := os.ReadFile(s.cachePath(key))
	if err != nil {
		return NewLayer{}, false
	}
	var nl NewLayer
	if json.Unmarshal(b, &nl) != nil || !exists(s.LayerDir(nl.DiffID)) || !exists(s.blobPath(nl.Digest)) {
		return NewLayer{}, false
	}
	return nl, true
}

// cacheEntries reads the build cache: key to layer.
func (s *Store) cacheEntries() map[string]NewLayer {
	out := map[string]NewLayer{}
	ents, _ := os.ReadDir(s.path("buildcache"))
	for _, e := range ents {
		b, err := os.ReadFile(s.cachePath(e.Name()))
		var nl NewLayer
		if err == nil && json.Unmarshal(b, &nl) == nil {
			out[e.Name()] = nl
		}
	}
	return out
}

// PruneBuildCache removes the build cache entries whose layer no image in
// the store uses, and then what they alone kept (GC). It returns how many
// entries went.
func (s *Store) PruneBuildCache() (int, error) {
	idx, err := s.readIndex()
	if err != nil {
		return 0, err
	}
	used := map[string]bool{}
	for _, d := range idx.Manifests {
		_, cfg, err := s.manifest(d.Digest.String())
		if err != nil {
			return 0, err
		}
		for _, h := range cfg.RootFS.DiffIDs {
			used[h.Hex] = true
		}
	}
	n := 0
	ents, _ := os.ReadDir(s.path("buildcache-steps"))
	for _, e := range ents {
		var m cacheMarks
		b, err := os.ReadFile(s.marksPath(e.Name()))
		if err == nil && json.Unmarshal(b, &m) == nil && used[m.Layer.DiffID.Hex] {
			continue
		}
		if err := os.Remove(s.marksPath(e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	for key, nl := range s.cacheEntries() {
		if used[nl.DiffID.Hex] {
			continue
		}
		if err := os.Remove(s.cachePath(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, s.GC()
}

// BaseLayer is a layer of an existing image, for WriteBuilt.
type BaseLayer = ocispec.Descriptor

// ManifestLayers returns the layer descriptors of the image with manifest
// digest dgst.
func (s *Store) ManifestLayers(dgst string) ([]ocispec.Descriptor, error) {
	m, _, err := s.manifest(dgst)
	if err != nil {
		return nil, err
	}
	return m.Layers, nil
}

// WriteBuilt stores an image made of the layers base (descriptors of a
// stored image's layers) then added, with config cfg (whose RootFS must
// list every layer's diffID), under names (none: untagged). It returns the
// image's manifest digest.
func (s *Store) WriteBuilt(cfg *v1.ConfigFile, base []ocispec.Descriptor, added []NewLayer, names []string) (string, error) {
	return s.WriteDerived(cfg, base, added, names, "", nil)
}

// WriteDerived is WriteBuilt for an image made from another one (docker
// commit): parent, that image's id, is kept with its names as Docker's
// Parent (local, as Docker's: not in the image's config), and the
// container's config is the config's container_config, as Docker's.
func (s *Store) WriteDerived(cfg *v1.ConfigFile, base []ocispec.Descriptor, added []NewLayer, names []string, parent string, containerConfig *v1.Config) (string, error) {
	if len(cfg.RootFS.DiffIDs) != len(base)+len(added) {
		return "", fmt.Errorf("image config lists %d layers, but the image has %d", len(cfg.RootFS.DiffIDs), len(base)+len(added))
	}
	for _, n := range names {
		if _, err := s.ParseReference(n); err != nil {
			return "", err
		}
	}
	rawCfg, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	if containerConfig != nil {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(rawCfg, &fields); err != nil {
			return "", err
		}
		if fields["container_config"], err = json.Marshal(containerConfig); err != nil {
			return "", err
		}
		if rawCfg, err = json.Marshal(fields); err != nil {
			return "", err
		}
	}
	if len(rawCfg) > MaxConfigBytes {
		return "", tooLarge("the image config", int64(len(rawCfg)), MaxConfigBytes)
	}
	cfgHash := v1.Hash{Algorithm: "sha256", Hex: sha256Hex(rawCfg)}
	m := ocispec.Manifest{
		Versioned: imgspecs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.Digest(cfgHash.String()), Size: int64(len(rawCfg))},
	}
	for _, d := range base {
		d.MediaType = ociLayerType(d.MediaType)
		m.Layers = append(m.Layers, d)
	}
	for _, nl := range added {
		m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(nl.Digest.String()), Size: nl.Size})
	}
	rawMan, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	if len(rawMan) > MaxManifestBytes {
		return "", tooLarge("the image manifest", int64(len(rawMan)), MaxManifestBytes)
	}
	manHash := v1.Hash{Algorithm: "sha256", Hex: sha256Hex(rawMan)}
	if err := s.writeBlob(cfgHash, rawCfg); err != nil {
		return "", err
	}
	if err := s.writeBlob(manHash, rawMan); err != nil {
		return "", err
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.Digest(manHash.String()), Size: int64(len(rawMan))}
	if parent != "" {
		desc.Annotations = map[string]string{annotationParent: parent}
	}
	err = s.updateIndex(func(idx *ocispec.Index) error {
		if len(names) == 0 {
			setRef(idx, desc, "localhost/unnamed@"+manHash.String(), "")
		}
		for _, n := range names {
			r, _ := s.ParseReference(n)
			setRef(idx, desc, r.Name(), "")
		}
		return nil
	})
	return manHash.String(), err
}

// ociLayerType is the OCI media type of a layer blob of type t (docker's
// types are the same bytes).
func ociLayerType(t string) string {
	switch t {
	case "application/vnd.docker.image.rootfs.diff.tar.gzip":
		return ocispec.MediaTypeImageLayerGzip
	case "application/vnd.docker.image.rootfs.diff.tar":
		return ocispec.MediaTypeImageLayer
	}
	return t
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Now is the creation time builds record (UTC, whole seconds).
func Now() time.Time { return time.Now().UTC().Truncate(time.Second) }
