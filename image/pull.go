package image

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/slopbox/slopbox/internal/userns"
)

// HostPlatform is the platform images are pulled for: the host's
// architecture, never a hard-coded one.
func HostPlatform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

func (s *Store) remoteOptions(ctx context.Context) []remote.Option {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 60 * time.Second
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(HostPlatform()),
		remote.WithTransport(&httpPolicy{base: manifestLimit{stallGuard{base: tr, timeout: cmp.Or(s.stall, DefaultStallTimeout)}}, insecure: s.insecure}),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 4}),
		remote.WithUserAgent("slopbox"),
	}
}

// Pull makes ref available locally and returns it. An image that is already
// present costs one manifest HEAD request (none for a digest reference).
func (s *Store) Pull(ctx context.Context, ref string) (*Image, error) {
	r, err := s.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	if img, ok := s.upToDate(ctx, r); ok {
		return img, nil
	}
	if !userns.Inside() {
		if err := s.runHelper(ctx, helperRequest{Op: "pull", Ref: ref}); err != nil {
			return nil, err
		}
		return s.Get(r.Name())
	}
	if err := s.pullInside(ctx, r); err != nil {
		return nil, err
	}
	return s.Get(r.Name())
}

// upToDate reports whether the local image named r is complete and still
// what the registry serves.
func (s *Store) upToDate(ctx context.Context, r name.Reference) (*Image, bool) {
	d, err := s.resolveLocal(r.Name())
	if err != nil {
		return nil, false
	}
	img, err := s.Get(r.Name())
	if err != nil {
		return nil, false
	}
	if _, isDigest := r.(name.Digest); isDigest {
		return img, true
	}
	desc, err := remote.Head(r, s.remoteOptions(ctx)...)
	if err != nil {
		return nil, false
	}
	if desc.Digest.String() == d.Annotations[annotationSource] || desc.Digest.String() == d.Digest.String() {
		return img, true
	}
	return nil, false
}

// pullInside downloads and extracts r. Preconditions: inside the user namespace.
func (s *Store) pullInside(ctx context.Context, r name.Reference) error {
	desc, err := remote.Get(r, s.remoteOptions(ctx)...)
	if err != nil {
		return explainRemote(r, err)
	}
	img, err := desc.Image()
	if err != nil {
		return explainRemote(r, err)
	}
	if err := checkConfigSize(img); err != nil {
		return explainRemote(r, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return explainRemote(r, err)
	}
	if hp := HostPlatform(); cfg.Architecture != "" && cfg.Architecture != hp.Architecture {
		return fmt.Errorf("pull %s: image is for %s/%s but this host is %s/%s", r, cfg.OS, cfg.Architecture, hp.OS, hp.Architecture)
	}
	rep := newReporter(s.progress, s.logf, false)
	_, err = s.writeImage(ctx, img, []string{r.Name()}, desc.Digest.String(), rep)
	rep.wait()
	if err != nil {
		return explainRemote(r, err)
	}
	return nil
}

// explainRemote adds a hint to registry errors that have a usual cause.
func explainRemote(r name.Reference, err error) error {
	if errors.Is(err, ErrInsecure) {
		return fmt.Errorf("pull %s: %w", r, err)
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		reg := r.Context().RegistryStr()
		return fmt.Errorf("pull %s: %w: %s answers plain HTTP only; if that is expected, allow it with --insecure-registry %s (%v)", r, ErrInsecure, reg, reg, err)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("pull %s: access denied by the registry (log in: add credentials for %s to ~/.docker/config.json): %w", r, r.Context().RegistryStr(), ErrUnauthorized)
		case http.StatusNotFound:
			return fmt.Errorf("pull %s: %w in the registry: %v", r, ErrNotFound, te)
		}
	}
	return fmt.Errorf("pull %s: %w", r, err)
}

// ErrUnauthorized is wrapped when a registry refuses our credentials.
var ErrUnauthorized = errdefs.ErrUnauthenticated.WithMessage("unauthorized")

// httpPolicy lets plain HTTP reach only loopback registries and those named
// with WithInsecureRegistries. (go-containerregistry would also fall back to
// HTTP for private-network addresses; slopbox does not.)
type httpPolicy struct {
	base     http.RoundTripper
	insecure map[string]bool
}

func (p *httpPolicy) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "http" && !p.insecure[r.URL.Host] && !loopback(r.URL.Hostname()) {
		return nil, fmt.Errorf("%w: refusing plain HTTP to %s; if this registry has no TLS, allow it with --insecure-registry %s", ErrInsecure, r.URL.Host, r.URL.Host)
	}
	return p.base.RoundTrip(r)
}

func loopback(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ErrInsecure is wrapped when a registry would need plain HTTP without
// being allowed to.
var ErrInsecure = errdefs.ErrInvalidArgument.WithMessage("insecure registry")
