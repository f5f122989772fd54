package engine

import (
	"context"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// routes is every endpoint the server answers, one ServeMux pattern each
// (moby's router table: method, path, handler). The version prefix is
// gone from the path by then, and the path is clean (ServeHTTP). A
// request no pattern takes gets Docker's JSON 404.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *request)) {
		// A GET pattern takes HEAD too; dockerd answers HEAD only for
		// /_ping and a container's archive (docker cp's stat), and a HEAD
		// of anything else (events, logs -f, export) would run the whole
		// request for nothing.
		head := pattern == "GET /_ping" || pattern == "GET /containers/{id}/archive"
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodHead && !head {
				notServed(w, requestOf(r))
				return
			}
			h(w, requestOf(r))
		})
	}
	// A container verb: {id} is opened first (a name, an id or its
	// prefix), or the answer is Docker's "No such container".
	container := func(pattern string, h func(http.ResponseWriter, *request, *service.Container)) {
		handle(pattern, func(w http.ResponseWriter, r *request) {
			if sb := s.open(w, r.PathValue("id")); sb != nil {
				h(w, r, sb)
			}
		})
	}

	handle("GET /_ping", s.ping)
	handle("GET /version", s.versionInfo)
	handle("GET /info", s.info)
	handle("GET /events", s.eventsStream)
	handle("POST /swarm/", noSwarm)

	handle("GET /images/json", s.imageList)
	handle("POST /images/create", s.imagePull)
	handle("POST /images/load", s.imageLoad)
	handle("GET /images/get", func(w http.ResponseWriter, r *request) { s.imageSave(w, r.URL.Query()["names"]) })
	// Image names have slashes: {ref} is the rest of the path, its last
	// segment the verb (imageVerb).
	handle("GET /images/{ref...}", s.imageGet)
	handle("POST /images/{ref...}", s.imagePost)
	handle("DELETE /images/{ref...}", s.imageRemove)
	handle("POST /build", s.imageBuild)
	handle("POST /commit", s.imageCommit)

	handle("POST /containers/create", s.containerCreate)
	handle("GET /containers/json", s.containerList)
	handle("POST /containers/prune", s.containerPrune)
	handle("DELETE /containers/{id}", s.containerRemove)
	handle("DELETE /containers/{id}/{alias}", s.linkRemove)
	handle("POST /containers/{id}/wait", s.containerWait)
	container("GET /containers/{id}/json", func(w http.ResponseWriter, r *request, sb *service.Container) {
		writeJSON(w, http.StatusOK, s.inspect(sb.Info()))
	})
	container("POST /containers/{id}/update", s.containerUpdate)
	container("POST /containers/{id}/start", s.containerStart)
	container("POST /containers/{id}/stop", s.containerStop)
	container("POST /containers/{id}/restart", s.containerRestart)
	container("POST /containers/{id}/kill", s.containerKill)
	container("POST /containers/{id}/pause", s.containerPause)
	container("POST /containers/{id}/unpause", s.containerPause)
	container("POST /containers/{id}/rename", s.containerRename)
	container("GET /containers/{id}/logs", s.containerLogs)
	container("POST /containers/{id}/attach", s.containerAttach)
	container("POST /containers/{id}/resize", s.containerResize)
	container("POST /containers/{id}/exec", s.execCreate)
	container("GET /containers/{id}/top", s.containerTop)
	container("GET /containers/{id}/stats", s.containerStats)
	container("GET /containers/{id}/changes", s.containerChanges)
	container("GET /containers/{id}/export", s.containerExport)
	container("GET /containers/{id}/archive", s.containerArchive)
	container("PUT /containers/{id}/archive", s.containerArchive)

	handle("GET /exec/{id}/json", s.execOf(s.execInspect))
	handle("POST /exec/{id}/start", s.execOf(s.execStart))
	handle("POST /exec/{id}/resize", s.execOf(s.execResize))

	handle("GET /volumes", s.volumeList)
	handle("POST /volumes/create", s.volumeCreate)
	handle("POST /volumes/prune", s.volumePrune)
	handle("GET /volumes/{name}", s.volumeInspect)
	handle("DELETE /volumes/{name}", s.volumeRemove)

	handle("GET /networks", s.networkList)
	handle("POST /networks/create", s.networkCreate)
	handle("POST /networks/prune", s.networkPrune)
	handle("GET /networks/{id}", s.networkInspect)
	handle("DELETE /networks/{id}", s.networkRemove)
	handle("POST /networks/{id}/connect", s.networkConnect)
	handle("POST /networks/{id}/disconnect", s.networkConnect)

	// The roots of the subtrees above, exactly: else ServeMux would
	// redirect them to their trailing slash, where dockerd has a 404.
	handle("/swarm", notServed)
	handle("/images", notServed)
	handle("/", notServed)
	return mux
}

// notServed is the answer to what no route takes: Docker's 404, in JSON.
func notServed(w http.ResponseWriter, r *request) {
	fail(w, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("page not found: %s %s is not served by slopbox", r.Method, r.URL.Path)))
}

// noSwarm is dockerd's answer on a node that is not in a swarm (clients'
// clean-up calls leave with force and take it as done); slopbox has no
// swarm mode to join or start.
func noSwarm(w http.ResponseWriter, _ *request) {
	fail(w, errdefs.ErrUnavailable.WithMessage("This node is not a swarm manager: slopbox has no swarm mode"))
}

// versionKey holds a request's negotiated API version in its context.
type versionKey struct{}

// withVersion is r carrying its negotiated API version, for requestOf.
func withVersion(r *http.Request, version string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), versionKey{}, version))
}

// requestOf is r with its negotiated API version (withVersion; the
// newest served when it has none).
func requestOf(r *http.Request) *request {
	v, _ := r.Context().Value(versionKey{}).(string)
	if v == "" {
		v = APIVersion
	}
	return &request{Request: r, version: v}
}
