// Package engine serves the Docker Engine API over slopbox's image store
// and sandboxes (slopbox serve), so that docker-py and the docker CLI drive
// slopbox with DOCKER_HOST alone. Everything goes through the same image,
// sandbox and backend packages as slopbox's own CLI, policy included, and
// the sandboxes live in the same state root: a container made here is one
// the CLI sees, and the other way round.
//
// The JSON shapes, status codes, version negotiation and stream formats are
// Docker's (moby api/, docker/cli client/, docker-py); see the package's
// README section for what is covered.
package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/system"
	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/dockercompat/service"

	"golang.org/x/sys/unix"
)

// API versions served: podman's numbers. docker-py takes ApiVersion from
// /version verbatim; the docker CLI negotiates down from its own (1.51).
const (
	APIVersion    = "1.44"
	MinAPIVersion = "1.24"
	// EngineVersion is the Docker engine release that serves APIVersion
	// (Docker 25.0 shipped API 1.44): /version's Version and /info's
	// ServerVersion, which clients check as semver (the docker CLI;
	// Inspect AI's docker sandbox wants at least 24.0.6). slopbox's own
	// version is its component's, in /version's Components.
	EngineVersion = "25.0.0"
)

// Server answers Engine API requests.
type Server struct {
	b       *service.Service
	version string // slopbox's version, for /version and Server:

	// Policy is applied to every container created here (the CLI's
	// policy file, nil for none): allowed mount roots and explicit
	// allowances.
	Policy *dockercompat.Policy

	mu    sync.Mutex
	execs map[string]*execInstance
	// execClock is the time exec records expire by (exec.go): the
	// wall clock, a test's own.
	execClock func() time.Time
	// attached holds the clients attached to a main command, by container.
	attached map[string]*attachment
	// watches follow the main commands this server started, for die.
	watches map[string]*exitWatch
	// health is the last health status reported of each container with
	// a healthcheck: its health_status events, sent under healthMu.
	healthMu sync.Mutex
	health   map[string]string

	// active counts requests in flight; last is when the last one ended
	// (unix nanoseconds), for Idle.
	active atomic.Int64
	last   atomic.Int64

	// mux routes the requests (routes.go).
	mux *http.ServeMux

	events *eventHub
	// Log, when set, gets one line per request (slopbox serve --debug).
	Log func(format string, a ...any)
}

// New serves the sandboxes and images of backend b.
func New(b *service.Service, version string) *Server {
	s := &Server{b: b, version: version, execs: map[string]*execInstance{}, execClock: time.Now, attached: map[string]*attachment{}, watches: map[string]*exitWatch{}, events: newEventHub()}
	s.mux = s.routes()
	s.last.Store(time.Now().UnixNano())
	return s
}

// Idle reports how long the server has had no request in flight.
func (s *Server) Idle() time.Duration {
	if s.active.Load() > 0 {
		return 0
	}
	return time.Since(time.Unix(0, s.last.Load()))
}

var versionPrefix = regexp.MustCompile(`^/v([0-9]+\.[0-9]+)(/.*)$`)

// ServeHTTP strips and checks the API version, sets Docker's headers and
// routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer func() {
		s.last.Store(time.Now().UnixNano())
		s.active.Add(-1)
	}()
	h := w.Header()
	h.Set("Api-Version", APIVersion)
	h.Set("Ostype", "linux")
	h.Set("Server", "slopbox/"+s.version+" (linux)")
	h.Set("Docker-Experimental", "false")
	version := APIVersion
	m := versionPrefix.FindStringSubmatch(r.URL.Path)
	versioned := m != nil
	if versioned {
		version, r.URL.Path = m[1], m[2]
		if rest, ok := strings.CutPrefix(r.URL.RawPath, "/v"+version); ok {
			r.URL.RawPath = rest
		}
		if versionLess(version, MinAPIVersion) {
			fail(w, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("client version %s is too old. Minimum supported API version is %s, please upgrade your client to a newer version", version, MinAPIVersion)))
			return
		}
		if versionLess(APIVersion, version) {
			fail(w, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("client version %s is too new. Maximum supported API version is %s", version, APIVersion)))
			return
		}
	}
	if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
		// As dockerd's router (gorilla's path cleaning): a redirect to
		// the clean path, with the version the client asked for, rather
		// than ServeMux's, which would drop it.
		u := *r.URL
		u.Path, u.RawPath = clean, ""
		if versioned {
			u.Path = "/v" + version + clean
		}
		http.Redirect(w, r, u.String(), http.StatusMovedPermanently)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = limitBody(w, r, s.b.Store().Root())
	}
	r = withVersion(r, version)
	if s.Log != nil {
		s.Log("%s %s (API %s)", r.Method, r.URL.RequestURI(), version)
		defer func(start time.Time) {
			s.Log("%s %s: done in %v", r.Method, r.URL.Path, time.Since(start).Round(10*time.Microsecond))
		}(time.Now())
	}
	s.mux.ServeHTTP(w, r)
}

// cleanPath is p without empty, "." and ".." segments (a trailing slash
// kept), as dockerd's router cleans it.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// Request bodies are bounded: a JSON one in size and in the time it takes
// to arrive; an image (load) or a tar (archive PUT), streamed to disk, by
// the free space there and the time between two reads. Long streams
// (attach, logs -f, events, wait) have no deadline: a hijacked connection
// drops the body's, and a handler that streams a response has read its
// body (or never reads it) by then.
const (
	maxJSONBody = 1 << 20
	bodyTimeout = 10 * time.Second
	bodyIdle    = 30 * time.Second
)

// largeBodyDir is the directory a request's body is written to, for the
// requests whose body is not JSON ("" for the others): an image to load
// (or a build context, or a tarball to import) goes to a temporary file,
// a tar into a sandbox under the state root.
func largeBodyDir(r *http.Request, root string) string {
	switch {
	case r.Method == http.MethodPost && (r.URL.Path == "/images/load" || r.URL.Path == "/build" || r.URL.Path == "/images/create"):
		// An image, a build context, an imported root filesystem.
		return os.TempDir()
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/containers/") && strings.HasSuffix(r.URL.Path, "/archive"):
		return root
	}
	return ""
}

// limitBody bounds r's body (see maxJSONBody).
func limitBody(w http.ResponseWriter, r *http.Request, root string) io.ReadCloser {
	rc := http.NewResponseController(w)
	if dir := largeBodyDir(r, root); dir != "" {
		var st unix.Statfs_t
		limit := int64(1 << 62)
		if unix.Statfs(dir, &st) == nil {
			limit = int64(st.Bavail) * st.Bsize
		}
		return &deadlineBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit), rc: rc, idle: bodyIdle,
			tooLarge: fmt.Sprintf("larger than the %d bytes free in %s", limit, dir)}
	}
	rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	return &deadlineBody{ReadCloser: http.MaxBytesReader(w, r.Body, maxJSONBody), rc: rc,
		tooLarge: fmt.Sprintf("larger than %d bytes, the most a JSON body may be", maxJSONBody)}
}

// deadlineBody clears the connection's read deadline once the whole body
// has been read (so that the server's wait for the client's close does not
// end a long response); with idle, each read must come within it. A body
// cut off keeps its deadline: the server does not read the rest of it.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	idle     time.Duration
	done     bool
	tooLarge string // what the error says of a body over the limit
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.idle > 0 && !b.done {
		b.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		err = fmt.Errorf("the request body is %s", b.tooLarge)
	case errors.Is(err, os.ErrDeadlineExceeded):
		if b.idle > 0 {
			err = fmt.Errorf("the request body stalled: nothing came for %v", b.idle)
		} else {
			err = fmt.Errorf("the request body did not arrive within %v", bodyTimeout)
		}
	}
	return n, err
}

// request is an HTTP request with its negotiated API version.
type request struct {
	*http.Request
	version string
}

// atLeast reports whether the request's API version is v or later.
func (r *request) atLeast(v string) bool { return !versionLess(r.version, v) }

func versionLess(a, b string) bool {
	am, an, _ := strings.Cut(a, ".")
	bm, bn, _ := strings.Cut(b, ".")
	ai, _ := strconv.Atoi(am)
	bi, _ := strconv.Atoi(bm)
	if ai != bi {
		return ai < bi
	}
	aj, _ := strconv.Atoi(an)
	bj, _ := strconv.Atoi(bn)
	return aj < bj
}

func (s *Server) ping(w http.ResponseWriter, r *request) {
	h := w.Header()
	h.Set("Cache-Control", "no-cache, no-store, must-revalidate")
	h.Set("Pragma", "no-cache")
	h.Set("Swarm", "inactive")
	// The classic builder (POST /build): docker's CLI then builds with it.
	h.Set("Builder-Version", "1")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if r.Method == http.MethodHead {
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Write([]byte("OK"))
}

func (s *Server) versionInfo(w http.ResponseWriter, r *request) {
	kernel := kernelVersion()
	v := system.VersionResponse{
		Components: []system.ComponentVersion{{
			Name: "Engine", Version: EngineVersion,
			Details: map[string]string{"ApiVersion": APIVersion, "MinAPIVersion": MinAPIVersion, "Os": "linux", "Arch": runtime.GOARCH, "KernelVersion": kernel, "GitCommit": s.version},
		}, {
			Name: "slopbox", Version: s.version,
			Details: map[string]string{"GitCommit": s.version, "Runtime": "libcontainer (embedded)"},
		}},
		Version: EngineVersion, APIVersion: APIVersion, MinAPIVersion: MinAPIVersion,
		GitCommit: s.version, GoVersion: runtime.Version(), Os: "linux", Arch: runtime.GOARCH, KernelVersion: kernel,
	}
	v.Platform.Name = "slopbox " + s.version
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) info(w http.ResponseWriter, r *request) {
	list, _ := s.b.List()
	out := infoResponse{
		ID: "slopbox", Containers: len(list), Driver: "overlay",
		DockerRootDir: s.b.Store().Root(), OperatingSystem: "slopbox", OSType: "linux",
		Architecture: runtime.GOARCH, KernelVersion: kernelVersion(), NCPU: runtime.NumCPU(), MemTotal: memTotal(),
		ServerVersion: EngineVersion, Runtimes: map[string]infoRuntime{"slopbox": {Path: "libcontainer"}},
		DefaultRuntime: "slopbox", SecurityOptions: []string{"name=seccomp,profile=default", "name=rootless", "name=no-new-privileges"},
		LoggingDriver: "json-file", CgroupDriver: "cgroupfs", Labels: []string{},
	}
	out.Swarm.LocalNodeState = "inactive"
	out.Name, _ = os.Hostname()
	for _, i := range list {
		if i.Paused {
			out.ContainersPaused++
		} else if i.Running {
			out.ContainersRunning++
		}
	}
	out.ContainersStopped = len(list) - out.ContainersRunning - out.ContainersPaused
	// Images, not names: an image with two tags counts once, as dockerd's.
	stored, _ := s.b.Store().List()
	images := map[string]bool{}
	for _, i := range stored {
		images[i.ID] = true
	}
	out.Images = len(images)
	writeJSON(w, http.StatusOK, out)
}

// memTotal is the host's memory in bytes (/proc/meminfo), as dockerd's
// info reports it.
func memTotal() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func kernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// writeJSON writes v with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// boolParam reads a docker boolean query parameter as dockerd's
// httputils.BoolValue: false when absent, empty, 0, no, false or none (in
// any case), true otherwise.
func boolParam(r *request, name string) bool {
	switch strings.ToLower(strings.TrimSpace(r.URL.Query().Get(name))) {
	case "", "0", "no", "false", "none":
		return false
	}
	return true
}
