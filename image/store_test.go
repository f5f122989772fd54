package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/slopbox/slopbox/test/fixtures"
)

type entry = fixtures.Entry

func openTestStore(t *testing.T) *Store {
	t.Helper()
	root := filepath.Join(testDir(t), "store")
	var mu sync.Mutex
	s, err := Open(root, WithLogger(func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		t.Logf(f, a...)
	}))
	if err != nil {
		t.Fatal(err)
	}
	// Layer dirs belong to the namespace's ids: remove them from inside it.
	t.Cleanup(func() { removeStore(t, s) })
	return s
}

func removeStore(t *testing.T, s *Store) {
	if err := s.updateIndex(func(idx *ocispecIndex) error { idx.Manifests = nil; return nil }); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if err := s.GC(); err != nil {
		t.Errorf("cleanup gc: %v", err)
	}
}

func testImage(t *testing.T) v1.Image {
	return fixtures.Image(t, HostPlatform(), []string{"sh"},
		fixtures.Layer(t,
			entry{Name: "etc/", Type: tar.TypeDir},
			entry{Name: "etc/hostname", Body: "base\n"},
			entry{Name: "etc/gone", Body: "x"},
			entry{Name: "home/user/", Type: tar.TypeDir, Mode: 0o700, UID: 1000, GID: 1000},
			entry{Name: "home/user/secret", Body: "s", Mode: 0o600, UID: 1000, GID: 1000},
		),
		fixtures.Layer(t,
			entry{Name: "etc/.wh.gone"},
			entry{Name: "etc/hostname", Body: "top\n"},
			entry{Name: "bin/", Type: tar.TypeDir},
			entry{Name: "bin/sh", Body: "#!fake", Mode: 0o755},
		),
	)
}

// assertConsistent checks the store invariants after any failure: no
// staging leftovers and every index entry complete.
// stagingGone waits until the store's staging directory is empty: a pull's
// helper removes what it staged as it ends, after Pull has returned.
func stagingGone(t *testing.T, s *Store) {
	t.Helper()
	fixtures.Eventually(t, "the pull's staging removed", func() (bool, string) {
		ents, _ := os.ReadDir(s.path("tmp"))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return len(names) == 0, fmt.Sprintf("tmp holds %v", names)
	})
}

func assertConsistent(t *testing.T, s *Store) {
	t.Helper()
	ents, _ := os.ReadDir(s.path("tmp"))
	for _, e := range ents {
		t.Errorf("staging leftover: tmp/%s", e.Name())
	}
	list, err := s.List()
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, i := range list {
		if _, err := s.Get(i.Name); err != nil {
			t.Errorf("incomplete image %s: %v", i.Name, err)
		}
	}
	blobs, _ := os.ReadDir(s.path("oci", "blobs", "sha256"))
	for _, b := range blobs {
		if strings.HasPrefix(b.Name(), ".tmp-") {
			t.Errorf("partial blob %s", b.Name())
		}
	}
}

func TestPullListInspectTagRemove(t *testing.T) {
	reg := fixtures.Registry(t, nil)
	ref := reg + "/test/img:v1"
	img := testImage(t)
	fixtures.Push(t, ref, img)
	s := openTestStore(t)

	got, err := s.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if got.Digest != want.String() || len(got.Layers) != 2 {
		t.Fatalf("pulled %+v, want digest %s with 2 layers", got, want)
	}
	// Overlay-ready form: the upper layer whites out etc/gone with a 0/0 char device.
	fi, err := os.Lstat(filepath.Join(got.Layers[1], "etc", "gone"))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("whiteout etc/gone: %v %v", fi, err)
	}
	flat := filepath.Join(testDir(t), "flat")
	flattenInNS(t, s, flat, got.Layers)
	if b, _ := os.ReadFile(filepath.Join(flat, "etc", "hostname")); string(b) != "top\n" {
		t.Errorf("etc/hostname = %q, want top", b)
	}
	if _, err := os.Lstat(filepath.Join(flat, "etc", "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etc/gone survived its whiteout: %v", err)
	}
	// Ownership is preserved through the id map.
	st, err := os.Stat(filepath.Join(got.Layers[0], "home", "user"))
	if err != nil {
		t.Fatal(err)
	}
	if host, ok := toHostUID(s, 1000); ok && statUID(st) != host {
		t.Errorf("home/user owned by %d, want host uid %d (container 1000)", statUID(st), host)
	}

	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Name != ref {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if err := s.Tag(ref, "example.com/other:v2"); err != nil {
		t.Fatal(err)
	}
	m, err := s.Inspect("example.com/other:v2")
	if err != nil {
		t.Fatal(err)
	}
	if tags := m.Names; len(tags) != 2 {
		t.Errorf("RepoTags = %v", tags)
	}
	if _, err := s.Inspect("nope:latest"); !errors.Is(err, ErrNotFound) {
		t.Errorf("inspect missing: %v, want ErrNotFound", err)
	}
	// Removing one name keeps the layers; removing the last collects them.
	if _, err := s.Remove("example.com/other:v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(got.Layers[0]); err != nil {
		t.Fatalf("layer removed while still referenced: %v", err)
	}
	if _, err := s.Remove(ref); err != nil {
		t.Fatal(err)
	}
	for _, l := range got.Layers {
		if _, err := os.Stat(l); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("layer %s not collected: %v", l, err)
		}
	}
	if _, err := s.Remove(ref); !errors.Is(err, ErrNotFound) {
		t.Errorf("second rmi: %v, want ErrNotFound", err)
	}
	assertConsistent(t, s)
}

func TestPullBadReference(t *testing.T) {
	s := openTestStore(t)
	for _, ref := range []string{"UPPER/case", "a:b:c", "", "img@sha256:123"} {
		if _, err := s.Pull(context.Background(), ref); !errors.Is(err, ErrBadRef) {
			t.Errorf("pull %q: %v, want ErrBadRef", ref, err)
		}
	}
}

func TestPullByDigestAndPresentIsOneRequest(t *testing.T) {
	// Count what a pull costs the registry, apart from the /v2/ ping that
	// sets up authentication.
	var requests atomic.Int64
	reg := fixtures.Registry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v2/" {
				requests.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	ref := reg + "/test/img:v1"
	img := testImage(t)
	fixtures.Push(t, ref, img)
	s := openTestStore(t)
	if _, err := s.Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	requests.Store(0)
	if _, err := s.Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("re-pull of a present image made %d requests, want 1 (a manifest HEAD)", n)
	}
	d, _ := img.Digest()
	requests.Store(0)
	byDigest := reg + "/test/img@" + d.String()
	if _, err := s.Pull(context.Background(), byDigest); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(context.Background(), byDigest); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n > 3 {
		t.Errorf("digest pulls made %d requests; the second should make none", n)
	}
	// The tag moved: a re-pull fetches the new image.
	img2 := fixtures.Image(t, HostPlatform(), nil, fixtures.Layer(t, entry{Name: "new", Body: "n"}))
	fixtures.Push(t, ref, img2)
	got, err := s.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := img2.Digest(); got.Digest != d2.String() {
		t.Errorf("after the tag moved, pulled %s, want %s", got.Digest, d2)
	}
	assertConsistent(t, s)
}

func TestPullPicksHostPlatformFromIndex(t *testing.T) {
	reg := fixtures.Registry(t, nil)
	other := "arm64"
	if HostPlatform().Architecture == "arm64" {
		other = "amd64"
	}
	hostImg := fixtures.Image(t, HostPlatform(), nil, fixtures.Layer(t, entry{Name: "arch", Body: "host"}))
	otherImg := fixtures.Image(t, v1.Platform{OS: "linux", Architecture: other}, nil, fixtures.Layer(t, entry{Name: "arch", Body: "other"}))
	// The foreign image comes first, so a naive "first match" would pick it.
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: otherImg, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: hostImg, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: HostPlatform().Architecture}}},
	)
	fixtures.PushIndex(t, reg+"/multi:v1", idx)
	fixtures.Push(t, reg+"/foreign:v1", otherImg)
	s := openTestStore(t)
	got, err := s.Pull(context.Background(), reg+"/multi:v1")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(got.Layers[0], "arch")); string(b) != "host" {
		t.Errorf("picked the %q image from the index", b)
	}
	// A re-pull of the index by tag is a no-op (the source digest is the index's).
	if _, ok := s.upToDate(context.Background(), mustRef(t, s, reg+"/multi:v1")); !ok {
		t.Error("index image not recognised as up to date")
	}
	_, err = s.Pull(context.Background(), reg+"/foreign:v1")
	if err == nil || !strings.Contains(err.Error(), "this host is linux/"+HostPlatform().Architecture) {
		t.Errorf("foreign single-platform image: %v", err)
	}
	assertConsistent(t, s)
}

func TestRegistryFaults(t *testing.T) {
	img := testImage(t)
	layers, _ := img.Layers()
	bigDigest, _ := layers[0].Digest()

	t.Run("404", func(t *testing.T) {
		reg := fixtures.Registry(t, nil)
		s := openTestStore(t)
		_, err := s.Pull(context.Background(), reg+"/missing:v1")
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("pull missing: %v, want ErrNotFound", err)
		}
		assertConsistent(t, s)
	})
	t.Run("401", func(t *testing.T) {
		reg := fixtures.Registry(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") == "" {
					w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		s := openTestStore(t)
		t.Setenv("DOCKER_CONFIG", t.TempDir())
		_, err := s.Pull(context.Background(), reg+"/private:v1")
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "config.json") {
			t.Fatalf("pull without credentials: %v, want ErrUnauthorized with a hint", err)
		}
		assertConsistent(t, s)
	})
	t.Run("credentials from docker config", func(t *testing.T) {
		reg := fixtures.Registry(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
					w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		dir := t.TempDir()
		// base64("alice:s3cret")
		cfg := fmt.Sprintf(`{"auths":{%q:{"auth":"YWxpY2U6czNjcmV0"}}}`, reg)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("DOCKER_CONFIG", dir)
		fixtures.PushWithAuth(t, reg+"/private:v1", img, "alice", "s3cret")
		s := openTestStore(t)
		if _, err := s.Pull(context.Background(), reg+"/private:v1"); err != nil {
			t.Fatalf("pull with credentials: %v", err)
		}
	})
	t.Run("500 then success", func(t *testing.T) {
		var failures atomic.Int64
		reg := fixtures.Registry(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.Contains(r.URL.Path, "/blobs/") && r.Method == http.MethodGet && failures.Add(1) <= 2 {
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		fixtures.Push(t, reg+"/flaky:v1", img)
		failures.Store(0)
		s := openTestStore(t)
		if _, err := s.Pull(context.Background(), reg+"/flaky:v1"); err != nil {
			t.Fatalf("pull through transient 500s: %v", err)
		}
		if failures.Load() < 2 {
			t.Errorf("the registry never failed (%d)", failures.Load())
		}
		assertConsistent(t, s)
	})
	t.Run("connection cut mid-blob then success", func(t *testing.T) {
		var cuts atomic.Int64
		reg := fixtures.Registry(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, bigDigest.String()) && cuts.Add(1) == 1 {
					cutAfter(w, r, h, 100)
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		fixtures.Push(t, reg+"/cut:v1", img)
		cuts.Store(0)
		s := openTestStore(t)
		if _, err := s.Pull(context.Background(), reg+"/cut:v1"); err != nil {
			t.Fatalf("pull through a cut connection: %v", err)
		}
		if cuts.Load() < 2 {
			t.Errorf("the blob was fetched %d times; expected a retry after the cut", cuts.Load())
		}
		assertConsistent(t, s)
	})
	t.Run("digest mismatch", func(t *testing.T) {
		reg := fixtures.Registry(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, bigDigest.String()) {
					rec := &captureWriter{header: http.Header{}}
					h.ServeHTTP(rec, r)
					body := rec.buf.Bytes()
					if len(body) > 40 {
						body[len(body)-20] ^= 0xff // corrupt inside the gzip stream's data
					}
					w.WriteHeader(rec.code)
					w.Write(body)
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		fixtures.Push(t, reg+"/corrupt:v1", img)
		s := openTestStore(t)
		_, err := s.Pull(context.Background(), reg+"/corrupt:v1")
		if err == nil {
			t.Fatal("a corrupt blob was accepted")
		}
		t.Logf("corrupt blob: %v", err)
		if list, _ := s.List(); len(list) != 0 {
			t.Errorf("the index names an image after a failed pull: %+v", list)
		}
		if ents, _ := os.ReadDir(s.path("layers", "sha256")); len(ents) > 1 {
			// The intact layer may be committed; the corrupt one must not be.
			for _, e := range ents {
				if l, _ := img.LayerByDigest(bigDigest); l != nil {
					if d, _ := l.DiffID(); d.Hex == e.Name() {
						t.Errorf("corrupt layer committed")
					}
				}
			}
		}
		assertConsistent(t, s)
	})
}

func TestConcurrentPulls(t *testing.T) {
	reg := fixtures.Registry(t, nil)
	ref := reg + "/test/img:v1"
	img := fixtures.Image(t, HostPlatform(), nil, fixtures.Layer(t, manyFiles(2000)...), fixtures.Layer(t, manyFiles(500)...))
	fixtures.Push(t, ref, img)
	s := openTestStore(t)
	// Two pulls, each in its own helper process, plus a reader process
	// (this one) listing the store all along.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s2, err := Open(s.Root())
			if err == nil {
				_, err = s2.Pull(context.Background(), ref)
			}
			errs[i] = err
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
			if _, err := s.List(); err != nil {
				t.Errorf("list during pull: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(got.Layers[0])
	if len(ents) != 2000 {
		t.Errorf("layer 0 has %d entries, want 2000", len(ents))
	}
	assertConsistent(t, s)
}

func TestCancelledPullLeavesStoreConsistent(t *testing.T) {
	l1, err := random.Layer(1<<20, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	img := fixtures.Image(t, HostPlatform(), nil, l1)
	reg := stallingRegistry(t)
	fixtures.Push(t, reg+"/slow:v1", img)
	s := openTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := s.Pull(ctx, reg+"/slow:v1"); err == nil {
		t.Fatal("pull of a stalled registry succeeded")
	}
	stagingGone(t, s) // the helper removes its staging dir on SIGTERM
	assertConsistent(t, s)
}

func TestStaleStagingIsCleaned(t *testing.T) {
	reg := fixtures.Registry(t, nil)
	fixtures.Push(t, reg+"/test/img:v1", testImage(t))
	s := openTestStore(t)
	// A pull killed with SIGKILL leaves tmp/PID-…; a dead pid is collected
	// by the next write.
	stale := s.path("tmp", "999999999-layer-x")
	if err := os.MkdirAll(filepath.Join(stale, "root", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // as the helper that was killed would have left it
		for _, p := range []string{stale, filepath.Join(stale, "root"), filepath.Join(stale, "root", "etc")} {
			os.Lchown(p, int(s.mapping.UIDs[0].HostID), int(s.mapping.GIDs[0].HostID))
		}
	}
	if _, err := s.Pull(context.Background(), reg+"/test/img:v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale staging dir survived: %v", err)
	}
	assertConsistent(t, s)
}

func TestSaveLoadRoundTrip(t *testing.T) {
	reg := fixtures.Registry(t, nil)
	ref := reg + "/test/img:v1"
	img := testImage(t)
	fixtures.Push(t, ref, img)
	s := openTestStore(t)
	if _, err := s.Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Save([]string{ref}, &buf); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "img.tar")
	os.WriteFile(tarPath, buf.Bytes(), 0o644)

	s2 := openTestStore(t)
	names, err := s2.Load(context.Background(), tarPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != ref {
		t.Fatalf("loaded %v, want [%s]", names, ref)
	}
	got, err := s2.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	flat := filepath.Join(testDir(t), "flat")
	flattenInNS(t, s, flat, got.Layers)
	if b, _ := os.ReadFile(filepath.Join(flat, "etc", "hostname")); string(b) != "top\n" {
		t.Errorf("loaded etc/hostname = %q", b)
	}

	// An OCI layout directory, and the same as a tar archive.
	dir := filepath.Join(testDir(t), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "example.com/oci/img:v3"})); err != nil {
		t.Fatal(err)
	}
	s3 := openTestStore(t)
	if names, err := s3.Load(context.Background(), dir); err != nil || len(names) != 1 || names[0] != "example.com/oci/img:v3" {
		t.Fatalf("load layout: %v %v", names, err)
	}
	archive := filepath.Join(t.TempDir(), "oci.tar")
	tarDir(t, dir, archive)
	s4 := openTestStore(t)
	if names, err := s4.Load(context.Background(), archive); err != nil || len(names) != 1 {
		t.Fatalf("load OCI archive: %v %v", names, err)
	}
	if _, err := s4.Get("example.com/oci/img:v3"); err != nil {
		t.Fatal(err)
	}

	// Garbage is refused clearly and loads nothing.
	junk := filepath.Join(t.TempDir(), "junk.tar")
	os.WriteFile(junk, []byte("this is not a tar file at all, not even close......"), 0o644)
	if _, err := s4.Load(context.Background(), junk); !errors.Is(err, ErrBadArchive) {
		t.Errorf("load junk: %v, want ErrBadArchive", err)
	}
	if _, err := s4.Load(context.Background(), filepath.Join(t.TempDir(), "missing.tar")); err == nil {
		t.Error("load of a missing file succeeded")
	}
	assertConsistent(t, s4)
}

func manyFiles(n int) []entry {
	var es []entry
	for i := range n {
		es = append(es, entry{Name: fmt.Sprintf("f%05d", i), Body: fmt.Sprint(i)})
	}
	return es
}

// cutAfter serves the first n bytes of the real response, then drops the
// connection.
func cutAfter(w http.ResponseWriter, r *http.Request, h http.Handler, n int) {
	rec := &captureWriter{header: http.Header{}}
	h.ServeHTTP(rec, r)
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.code)
	w.Write(rec.buf.Bytes()[:min(n, rec.buf.Len())])
	w.(http.Flusher).Flush()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}
}

type captureWriter struct {
	header http.Header
	buf    bytes.Buffer
	code   int
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = 200
	}
	return c.buf.Write(b)
}
func (c *captureWriter) WriteHeader(code int) { c.code = code }

func TestPlainHTTPOnlyForLoopbackOrAllowed(t *testing.T) {
	// Serve the registry on a non-loopback address of this host.
	var ip net.IP
	ifaces, _ := net.InterfaceAddrs()
	for _, a := range ifaces {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ip = n.IP
			break
		}
	}
	if ip == nil {
		t.Fatal("this test needs a non-loopback IPv4 address on the host")
	}
	reg := fixtures.Registry(t, nil)
	_, port, _ := net.SplitHostPort(reg)
	fixtures.Push(t, reg+"/plain/img:v1", testImage(t))
	// The test registry listens on 127.0.0.1 only; forward the host's
	// address to it.
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", "127.0.0.1:"+port)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	remoteAddr := l.Addr().String()
	s := openTestStore(t)
	_, err = s.Pull(context.Background(), remoteAddr+"/plain/img:v1")
	if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "--insecure-registry "+remoteAddr) {
		t.Fatalf("plain HTTP to %s without --insecure-registry: %v", remoteAddr, err)
	}
	assertConsistent(t, s)
	s2, err := Open(s.Root(), WithInsecureRegistries(remoteAddr))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Pull(context.Background(), remoteAddr+"/plain/img:v1"); err != nil {
		t.Fatalf("pull with --insecure-registry %s: %v", remoteAddr, err)
	}
}
