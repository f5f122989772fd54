package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/slopbox/slopbox/test/fixtures"
)

// pad is 5 MiB: over the 4 MiB bound for manifests and configs.
var pad = strings.Repeat("x", 5<<20)

// oversize returns testImage with a 5 MiB config (a label) and with a
// 5 MiB manifest (an annotation).
func oversize(t *testing.T) (bigConfig, bigManifest v1.Image) {
	t.Helper()
	base := testImage(t)
	cf, err := base.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Labels = map[string]string{"pad": pad}
	if bigConfig, err = mutate.ConfigFile(base, cf); err != nil {
		t.Fatal(err)
	}
	bigManifest = mutate.Annotations(base, map[string]string{"pad": pad}).(v1.Image)
	return bigConfig, bigManifest
}

// assertNothingStored checks that a refused image left nothing: no name,
// no blob, no layer, no staging.
func assertNothingStored(t *testing.T, s *Store) {
	t.Helper()
	stagingGone(t, s)
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Errorf("the store lists %v (%v), want nothing", list, err)
	}
	for _, d := range []string{s.path("oci", "blobs", "sha256"), s.path("layers", "sha256")} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s holds %d entries, want none", d, len(ents))
		}
	}
}

func wantTooLarge(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "4 MiB bound") {
		t.Fatalf("%s: %v, want a refusal naming the 4 MiB bound", what, err)
	}
	t.Logf("%s: %v", what, err)
}

// TestPullOversizeRefused: a registry serving a 5 MiB manifest (with or
// without a Content-Length) or a 5 MiB config is refused before either
// is read whole (go-containerregistry reads manifests up to 100 MiB and
// configs whole), naming containerd's 4 MiB bound, and nothing is stored.
func TestPullOversizeRefused(t *testing.T) {
	bigConfig, bigManifest := oversize(t)
	chunked := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(noLength{w}, r)
		})
	}
	for _, c := range []struct {
		name string
		img  v1.Image
		wrap func(http.Handler) http.Handler
	}{
		{"config", bigConfig, nil},
		{"manifest", bigManifest, nil},
		{"manifest without a length", bigManifest, chunked},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := fixtures.Registry(t, c.wrap)
			ref := reg + "/big/img:v1"
			fixtures.Push(t, ref, c.img)
			s := openTestStore(t)
			_, err := s.Pull(context.Background(), ref)
			wantTooLarge(t, "pull", err)
			assertNothingStored(t, s)
		})
	}
}

// noLength serves a response without its Content-Length (chunked).
type noLength struct{ http.ResponseWriter }

func (w noLength) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w noLength) Write(b []byte) (int, error) {
	w.Header().Del("Content-Length")
	return w.ResponseWriter.Write(b)
}

// TestLoadOversizeRefused: load of a docker-save tarball or an OCI layout
// (a directory, or its tar) whose config or manifest is over 4 MiB is
// refused by its size before it is read whole, and nothing is stored.
func TestLoadOversizeRefused(t *testing.T) {
	bigConfig, bigManifest := oversize(t)
	dir := testDir(t)

	saved := filepath.Join(dir, "config.tar")
	writeTarball(t, saved, bigConfig)
	// A docker-save tarball whose manifest.json is 5 MiB (valid JSON,
	// padded).
	bigJSON := filepath.Join(dir, "manifest-json.tar")
	small := filepath.Join(dir, "small.tar")
	writeTarball(t, small, testImage(t))
	rewriteEntry(t, small, bigJSON, "manifest.json", func(b []byte) []byte { return append(b, []byte(strings.Repeat(" ", 5<<20))...) })

	layoutOf := func(img v1.Image) string {
		d := filepath.Join(testDir(t), "layout")
		p, err := layout.Write(d, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{AnnotationRefName: "example.com/big/img:v1"})); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct{ name, path string }{
		{"docker-save config", saved},
		{"docker-save manifest.json", bigJSON},
		{"layout config", layoutOf(bigConfig)},
		{"layout manifest", layoutOf(bigManifest)},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openTestStore(t)
			_, err := s.Load(context.Background(), c.path)
			wantTooLarge(t, "load", err)
			assertNothingStored(t, s)
		})
	}
}

func writeTarball(t *testing.T, path string, img v1.Image) {
	t.Helper()
	tag, err := name.NewTag("example.com/big/img:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
}

// rewriteEntry copies the tar src to dst with entry name's body changed.
func rewriteEntry(t *testing.T, src, dst, name string, change func([]byte) []byte) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	tr, tw := tar.NewReader(in), tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Name == name {
			b = change(b)
			h.Size = int64(len(b))
		}
		tw.WriteHeader(h)
		tw.Write(b)
	}
	tw.Close()
	if err := os.WriteFile(dst, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStoreRefusesOversizeConfigItHolds: a config over 4 MiB already in a
// store (written before the bound was) is not read back by images, image
// inspect, run, save or push (it cost a GB to list a 300 MB one): each
// says which image and the bound, and rmi still removes it.
func TestStoreRefusesOversizeConfigItHolds(t *testing.T) {
	reg := fixtures.Registry(t, nil)
	ref := reg + "/test/img:v1"
	fixtures.Push(t, ref, testImage(t))
	s := openTestStore(t)
	img, err := s.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := v1.NewHash(img.ID)
	b, err := os.ReadFile(s.blobPath(h))
	if err != nil {
		t.Fatal(err)
	}
	// Still valid JSON: only its size is wrong.
	if err := os.WriteFile(s.blobPath(h), append(b, []byte(strings.Repeat(" ", 5<<20))...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = s.List()
	wantTooLarge(t, "images", err)
	if !strings.Contains(err.Error(), "slopbox rmi") {
		t.Errorf("images: %v, want the hint to remove the image", err)
	}
	_, err = s.Get(ref)
	wantTooLarge(t, "get", err)
	_, err = s.Inspect(ref)
	wantTooLarge(t, "inspect", err)
	wantTooLarge(t, "save", s.Save([]string{ref}, io.Discard))
	_, err = s.Push(context.Background(), ref, reg+"/test/copy:v1", func(PushUpdate) {})
	wantTooLarge(t, "push", err)
	if _, err := s.Remove(ref); err != nil {
		t.Fatalf("rmi of the image: %v", err)
	}
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Errorf("after rmi: %v %v", list, err)
	}
}
