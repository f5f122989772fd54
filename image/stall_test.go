package image

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/slopbox/slopbox/test/fixtures"
)

// A registry that stalls mid-blob ends the pull with a clear error after
// the stall timeout, even when the caller set no deadline; the store stays
// consistent.
func TestStalledRegistryEndsThePull(t *testing.T) {
	l1, err := random.Layer(1<<20, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	reg := stallingRegistry(t)
	fixtures.Push(t, reg+"/slow:v1", fixtures.Image(t, HostPlatform(), nil, l1))
	s := openTestStore(t)
	WithStallTimeout(time.Second)(s)
	start := time.Now()
	_, err = s.Pull(context.Background(), reg+"/slow:v1")
	if err == nil || !strings.Contains(err.Error(), "stopped sending data") {
		t.Fatalf("pull of a stalled registry: %v, want it to give up", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("gave up after %v", d)
	}
	stagingGone(t, s)
	assertConsistent(t, s)
}

// stallingRegistry serves images whose blob downloads send one byte and
// then hang until the test ends.
func stallingRegistry(t *testing.T) string {
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	return fixtures.Registry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && !strings.Contains(r.URL.Path, "uploads") {
				w.WriteHeader(http.StatusOK)
				w.Write(bytes.Repeat([]byte{0x1f}, 1))
				w.(http.Flusher).Flush()
				select {
				case <-stall:
				case <-r.Context().Done():
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	})
}
