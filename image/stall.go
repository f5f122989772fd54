package image

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/containerd/errdefs"
)

// DefaultStallTimeout is how long a registry may send nothing while a
// response body is read before the pull gives up: a registry that stalls
// mid-blob would otherwise hold a pull forever (the header timeout covers
// only the start of a response).
const DefaultStallTimeout = 60 * time.Second

// ErrStalled is wrapped when a registry sent nothing for the stall timeout.
var ErrStalled = errdefs.ErrUnavailable.WithMessage("the registry stopped sending data")

// WithStallTimeout sets how long a registry may stall mid-response before
// the pull fails with ErrStalled (DefaultStallTimeout when 0).
func WithStallTimeout(d time.Duration) Option { return func(s *Store) { s.stall = d } }

// stallGuard closes a response body that receives nothing for timeout.
type stallGuard struct {
	base    http.RoundTripper
	timeout time.Duration
}

func (g stallGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.base.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	b := &stallBody{body: resp.Body, host: r.URL.Host, timeout: g.timeout}
	b.timer = time.AfterFunc(g.timeout, b.expire)
	resp.Body = b
	return resp, nil
}

type stallBody struct {
	body    io.ReadCloser
	host    string
	timeout time.Duration
	timer   *time.Timer

	mu      sync.Mutex
	stalled bool
}

func (b *stallBody) expire() {
	b.mu.Lock()
	b.stalled = true
	b.mu.Unlock()
	b.body.Close() // unblocks the read in progress
}

func (b *stallBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 {
		b.timer.Reset(b.timeout)
	}
	b.mu.Lock()
	stalled := b.stalled
	b.mu.Unlock()
	if stalled && err != nil {
		return n, fmt.Errorf("%w: nothing from %s for %v", ErrStalled, b.host, b.timeout)
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.timer.Stop()
	return b.body.Close()
}
