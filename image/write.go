package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/slopbox/slopbox/image/archive"
)

// layerAttempts bounds retries of one layer after a transient network error
// (connection cut mid-blob); digest mismatches and hostile content are not
// retried.
const layerAttempts = 3

// writeImage stores img under names: every layer blob is downloaded, verified
// and extracted concurrently, then config and manifest are written, and only
// then does index.json name the image. Preconditions: inside the user
// namespace (or host root).
func (s *Store) writeImage(ctx context.Context, img v1.Image, names []string, source string, rep reporter) (ocispec.Descriptor, error) {
	l, err := s.lock(false)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer l.Unlock()
	if err := s.cleanStaleTmp(); err != nil {
		s.logf("warning: cleaning stale staging files: %v", err)
	}

	// The config and manifest are read (and bounded) first: an image
	// refused for them leaves no layer behind. Every source checked their
	// sizes before reading them; this holds whatever the source.
	if err := checkConfigSize(img); err != nil {
		return ocispec.Descriptor{}, err
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("read image config: %w", err)
	}
	rawMan, err := img.RawManifest()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if len(rawCfg) > MaxConfigBytes {
		return ocispec.Descriptor{}, tooLarge("the image config", int64(len(rawCfg)), MaxConfigBytes)
	}
	if len(rawMan) > MaxManifestBytes {
		return ocispec.Descriptor{}, tooLarge("the image manifest", int64(len(rawMan)), MaxManifestBytes)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("read image config: %w", err)
	}
	if cfg.OS != "" && cfg.OS != "linux" {
		return ocispec.Descriptor{}, fmt.Errorf("image is for %s/%s; slopbox runs linux images only", cfg.OS, cfg.Architecture)
	}
	layers, err := img.Layers()
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("read image layers: %w", err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return ocispec.Descriptor{}, fmt.Errorf("image has %d layers but its config lists %d diffIDs", len(layers), len(cfg.RootFS.DiffIDs))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, layer := range layers {
		diffID := cfg.RootFS.DiffIDs[i]
		g.Go(func() error {
			var err error
			for attempt := 1; attempt <= layerAttempts; attempt++ {
				if err = s.storeLayer(gctx, layer, diffID, rep); err == nil || !transient(err) || gctx.Err() != nil {
					break
				}
				s.logf("layer %s: %v (attempt %d of %d, retrying)", diffID, err, attempt, layerAttempts)
				time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return ocispec.Descriptor{}, err
	}

	cfgName, err := img.ConfigName()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := s.writeBlob(cfgName, rawCfg); err != nil {
		return ocispec.Descriptor{}, err
	}
	manDigest, err := img.Digest()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := s.writeBlob(manDigest, rawMan); err != nil {
		return ocispec.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: string(mt), Digest: digest.Digest(manDigest.String()), Size: int64(len(rawMan))}
	if err := s.updateIndex(func(idx *ocispec.Index) error {
		for _, n := range names {
			setRef(idx, desc, n, source)
		}
		return nil
	}); err != nil {
		return ocispec.Descriptor{}, err
	}
	return desc, nil
}

// writeBlob stores b under its digest h, verifying it first.
func (s *Store) writeBlob(h v1.Hash, b []byte) error {
	sum := sha256.Sum256(b)
	if h.Algorithm != "sha256" || hex.EncodeToString(sum[:]) != h.Hex {
		return fmt.Errorf("blob %s: content does not match its digest", h)
	}
	if _, err := os.Stat(s.blobPath(h)); err == nil {
		return nil
	}
	return writeFileAtomic(s, s.blobPath(h), b)
}

// storeLayer makes sure layer's compressed blob is in blobs/ and its
// extracted form in layers/. Both are staged in tmp/ and renamed into place
// only after the compressed digest and the diffID have been verified.
func (s *Store) storeLayer(ctx context.Context, layer v1.Layer, diffID v1.Hash, rep reporter) error {
	dgst, err := layer.Digest()
	if err != nil {
		return err
	}
	size, _ := layer.Size()
	short := diffID.Hex[:12]
	dir, blob := s.LayerDir(diffID), s.blobPath(dgst)
	if exists(dir) && exists(blob) {
		rep.done(short, size, true)
		return nil
	}
	// One process extracts a given layer at a time; the others wait and
	// then find it committed.
	if err := os.MkdirAll(s.path("locks"), 0o700); err != nil {
		return err
	}
	lk := flock.New(s.path("locks", diffID.Hex))
	if ok, err := lk.TryLockContext(ctx, 50*time.Millisecond); err != nil || !ok {
		return fmt.Errorf("lock layer %s: %w", diffID, err)
	}
	defer lk.Unlock()
	haveDir, haveBlob := exists(dir), exists(blob)
	if haveDir && haveBlob {
		rep.done(short, size, true)
		return nil
	}

	tmp, err := s.tempDir("layer")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	rc, err := layer.Compressed()
	if err != nil {
		return fmt.Errorf("fetch layer %s: %w", dgst, err)
	}
	defer rc.Close()
	var src io.Reader = &ctxReader{ctx: ctx, r: rc}
	src = rep.track(short, size, src)

	blobFile, err := os.OpenFile(filepath.Join(tmp, "blob"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer blobFile.Close()
	bw := bufio.NewWriterSize(blobFile, 1<<20)
	// Every blob is checked here, whatever its source (a registry, a
	// layout, a docker-save archive): its own digest, and its content
	// against the diffID, also when that layer is already extracted.
	blobHash := sha256.New()
	compressed := io.TeeReader(src, io.MultiWriter(bw, blobHash))

	if !haveDir {
		if err := s.unpack(compressed, diffID, tmp, dir, nil); err != nil {
			return fmt.Errorf("layer %s: %w", dgst, err)
		}
	} else if err := checkDiffID(compressed, diffID); err != nil {
		return fmt.Errorf("layer %s: %w", dgst, err)
	}
	// A verifying reader (remote) reports a digest mismatch at EOF, or on
	// Close; the hash above covers the others.
	if err := rc.Close(); err != nil {
		return fmt.Errorf("fetch layer %s: %w", dgst, err)
	}
	if got := hex.EncodeToString(blobHash.Sum(nil)); dgst.Algorithm == "sha256" && got != dgst.Hex {
		return fmt.Errorf("layer blob has digest sha256:%s, but the manifest says %s: refused", got, dgst)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write layer blob %s: %w", dgst, err)
	}
	if err := blobFile.Close(); err != nil {
		return fmt.Errorf("write layer blob %s: %w", dgst, err)
	}
	if err := os.Rename(filepath.Join(tmp, "blob"), blob); err != nil {
		return fmt.Errorf("commit layer blob %s: %w", dgst, err)
	}
	rep.done(short, size, false)
	return nil
}

// checkDiffID reads the compressed layer r to EOF and checks that its
// uncompressed content has digest diffID.
func checkDiffID(r io.Reader, diffID v1.Hash) error {
	tar, closeTar, err := decompress(bufio.NewReaderSize(r, 1<<20))
	if err != nil {
		return err
	}
	defer closeTar()
	h := sha256.New()
	if _, err := io.Copy(h, tar); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != diffID.Hex {
		return fmt.Errorf("uncompressed content has digest sha256:%s, but the image config says %s", got, diffID)
	}
	return nil
}

// decompress sniffs the compression of a layer stream.
func decompress(r *bufio.Reader) (io.Reader, func(), error) {
	magic, err := r.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		zr, err := zstd.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	}
	return r, func() {}, nil
}

// transient reports whether err looks like a network failure worth a retry.
func transient(err error) bool {
	var oe *net.OpError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &oe)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// ctxReader stops a copy when ctx is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// unpack extracts the compressed layer read from r into a staging directory
// under tmp, checks its diffID, and commits it to dir. r is read to EOF.
// ids, when set, shifts file owners (see ApplyOptions.IDs).
func (s *Store) unpack(r io.Reader, diffID v1.Hash, tmp, dir string, ids func(uid, gid int) (int, int)) error {
	tar, closeTar, err := decompress(bufio.NewReaderSize(r, 1<<20))
	if err != nil {
		return err
	}
	defer closeTar()
	h := sha256.New()
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	short := diffID.Hex[:12]
	if _, err := archive.ApplyLayer(root, io.TeeReader(tar, h), archive.ApplyOptions{IDs: ids, Logf: func(f string, a ...any) {
		s.logf("layer %s: "+f, append([]any{short}, a...)...)
	}}); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != diffID.Hex {
		return fmt.Errorf("uncompressed content has digest sha256:%s, but the image config says %s", got, diffID)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Rename(root, dir); err != nil && !errors.Is(err, fs.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		return fmt.Errorf("commit layer %s: %w", diffID, err)
	}
	return nil
}
