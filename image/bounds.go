package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/slopbox/slopbox/internal/regfile"
	"github.com/slopbox/slopbox/internal/sparse"
)

// Bounds on what the store reads into memory whole. A manifest (or index)
// and an image config are parsed in memory, unlike layers, which are
// streamed: an image naming a config of hundreds of MB would otherwise
// cost GBs wherever it is read (pull, load, images).
const (
	// MaxManifestBytes is containerd's bound for a manifest read from a
	// registry (remotes/docker MaxManifestSize, about 4 MiB); slopbox
	// holds every manifest and index to it, whatever its source.
	MaxManifestBytes = 4 << 20
	// MaxConfigBytes bounds an image config likewise: the largest real
	// ones are tens of KiB, most of it history.
	MaxConfigBytes = 4 << 20
)

// ErrTooLarge is wrapped when a manifest or config is over its bound.
// It is internal/sparse's (a layer or copy over its bound), so that one
// class covers every size bound.
var ErrTooLarge = sparse.ErrTooLarge

// tooLargeError is ErrTooLarge saying what, how large, and the bound.
type tooLargeError struct{ msg string }

func (e *tooLargeError) Error() string { return e.msg }
func (e *tooLargeError) Unwrap() error { return ErrTooLarge }

func tooLarge(what string, size int64, bound int) error {
	kind := "manifests and indexes (containerd's bound)"
	if strings.Contains(what, "config") {
		kind = "image configs"
	}
	return &tooLargeError{fmt.Sprintf("%s is %d bytes, over the %d MiB bound for %s: refused", what, size, bound>>20, kind)}
}

// manifestLimit is a transport that refuses a registry's manifest (GET
// /v2/…/manifests/…) over MaxManifestBytes: by its Content-Length when
// it says, else once that many bytes have been read.
// go-containerregistry reads up to 100 MiB of a manifest and has no
// option to lower it.
type manifestLimit struct{ base http.RoundTripper }

func (m manifestLimit) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := m.base.RoundTrip(r)
	if err != nil || r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/manifests/") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	what := "the registry's manifest " + path.Base(r.URL.Path)
	if resp.ContentLength > MaxManifestBytes {
		resp.Body.Close()
		return nil, tooLarge(what, resp.ContentLength, MaxManifestBytes)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: MaxManifestBytes, what: what}
	return resp, nil
}

// limitedBody fails a read past left bytes.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	read int64
	what string
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.rc.Read(p)
	l.read += int64(n)
	if l.left -= int64(n); l.left < 0 {
		return 0, tooLarge(l.what, l.read, MaxManifestBytes)
	}
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }

// checkConfigSize refuses an image whose manifest declares a config over
// MaxConfigBytes, before the config is read: go-containerregistry reads a
// registry's config blob up to the size its descriptor declares, no more.
func checkConfigSize(img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	if m.Config.Size > MaxConfigBytes {
		return tooLarge("the config "+m.Config.Digest.String(), m.Config.Size, MaxConfigBytes)
	}
	return nil
}

// tarEntrySize is the size of the entry name of the tar opener reads, as
// go-containerregistry's tarball package finds it (the first entry of
// that cleaned name, links followed), so that a docker-save archive's
// manifest.json and configs are checked before it reads them whole.
func tarEntrySize(opener tarball.Opener, name string) (int64, error) {
	seen := map[string]bool{}
	for {
		if seen[name] {
			return 0, fmt.Errorf("%w: link cycle at %s", ErrBadArchive, name)
		}
		seen[name] = true
		hdr, err := findEntry(opener, name)
		if err != nil {
			return 0, err
		}
		if hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
			return hdr.Size, nil
		}
		name = path.Join(path.Dir(name), path.Clean(hdr.Linkname))
	}
}

func findEntry(opener tarball.Opener, name string) (*tar.Header, error) {
	f, err := opener()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: no %s in the archive", ErrBadArchive, name)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
		}
		if path.Clean(hdr.Name) == path.Clean(name) {
			return hdr, nil
		}
	}
}

// checkLayoutFile refuses an OCI layout's file rel (index.json, or
// blobs/ALG/HEX of a manifest, index or config) over bound, by its size
// on disk, before go-containerregistry reads it whole.
func checkLayoutFile(dir, rel, what string, bound int) error {
	fi, err := os.Lstat(filepath.Join(dir, rel))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	if fi.Size() > int64(bound) {
		return tooLarge(what, fi.Size(), bound)
	}
	return nil
}

func blobRel(h v1.Hash) string { return filepath.Join("blobs", h.Algorithm, h.Hex) }

// readBlob reads the store's blob h (a manifest or config, as what says),
// refusing one over bound without reading it: a store may hold one
// written before the bounds were.
func (s *Store) readBlob(h v1.Hash, what string, bound int) ([]byte, error) {
	f, err := regfile.Open(s.blobPath(h))
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, h, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > int64(bound) {
		return nil, tooLarge("the "+what+" "+h.String(), fi.Size(), bound)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(bound)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, h, err)
	}
	if len(b) > bound {
		return nil, tooLarge("the "+what+" "+h.String(), int64(len(b)), bound)
	}
	return b, nil
}
