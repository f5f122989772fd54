package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	mobyimage "github.com/moby/moby/api/types/image"

	"github.com/slopbox/slopbox/dockercompat/filters"
	"github.com/slopbox/slopbox/dockercompat/service"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/imagebuild"
)

// imageVerb splits GET|POST /images/{ref...} into the image's name and
// the verb its last segment names (json, tag, get, history, push), or
// the whole as a name with no verb.
func imageVerb(ref string) (name, verb string) {
	if i := strings.LastIndex(ref, "/"); i > 0 {
		switch ref[i+1:] {
		case "json", "tag", "get", "history", "push":
			return ref[:i], ref[i+1:]
		}
	}
	return ref, ""
}

// imageGet is GET /images/{name}/json, /get and /history.
func (s *Server) imageGet(w http.ResponseWriter, r *request) {
	switch name, verb := imageVerb(r.PathValue("ref")); verb {
	case "json":
		s.imageInspect(w, r, name)
	case "get":
		s.imageSave(w, []string{name})
	case "history":
		s.imageHistory(w, name)
	default:
		notServed(w, r)
	}
}

// imagePost is POST /images/{name}/tag and /push.
func (s *Server) imagePost(w http.ResponseWriter, r *request) {
	switch name, verb := imageVerb(r.PathValue("ref")); verb {
	case "tag":
		dst := r.URL.Query().Get("repo")
		if t := r.URL.Query().Get("tag"); t != "" {
			dst += ":" + t
		}
		if err := s.b.Store().Tag(name, dst); err != nil {
			s.imageError(w, name, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	case "push":
		s.imagePush(w, r, name)
	default:
		notServed(w, r)
	}
}

// imageRemove is DELETE /images/{name}.
func (s *Server) imageRemove(w http.ResponseWriter, r *request) {
	name := r.PathValue("ref")
	if name == "" {
		notServed(w, r)
		return
	}
	rm := s.b.Store().Remove
	if boolParam(r, "force") {
		rm = s.b.Store().ForceRemove
	}
	img, err := s.b.Store().Get(name)
	if err != nil {
		s.imageError(w, name, err)
		return
	}
	removed, err := rm(name)
	if err != nil {
		s.imageError(w, name, err)
		return
	}
	writeJSON(w, http.StatusOK, s.removedImage(img.ID, removed))
}

// removedImage is DELETE /images/{name}'s answer, dockerd's: an Untagged
// entry for each name removed (as Docker prints it; an image without a
// name has none), then Deleted with the image's id once no name is left.
func (s *Server) removedImage(id string, names []string) []mobyimage.DeleteResponse {
	out := []mobyimage.DeleteResponse{}
	for _, n := range names {
		if !image.Unnamed(n) {
			out = append(out, mobyimage.DeleteResponse{Untagged: image.DockerName(n)})
		}
	}
	if _, err := s.b.Store().Get(id); err != nil {
		out = append(out, mobyimage.DeleteResponse{Deleted: id})
	}
	return out
}

// imageError answers a missing image as Docker does: 404 "No such image",
// which docker-py maps to ImageNotFound and docker run to a pull.
func (s *Server) imageError(w http.ResponseWriter, ref string, err error) {
	if statusOf(err) == http.StatusNotFound {
		fail(w, errdefs.ErrNotFound.WithMessage("No such image: "+ref))
		return
	}
	fail(w, err)
}

// imageList is GET /images/json, names as Docker prints them; the
// reference filter (docker images NAME, docker-py's images(name)) keeps
// the images with a matching name, and only those names.
func (s *Server) imageList(w http.ResponseWriter, r *request) {
	list, err := s.b.Store().List()
	if err != nil {
		fail(w, err)
		return
	}
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	match, err := imageFilter(f, list)
	if err != nil {
		fail(w, err)
		return
	}
	byID := map[string]*imageSummary{}
	var order []string
	for _, i := range list {
		name := image.DockerName(i.Name)
		if !match(i, name) {
			continue
		}
		var digests []string // as image inspect's RepoDigests (service.ImageInspectOf)
		if i.Source != "" {
			digests = append(digests, service.Repository(name)+"@"+i.Source)
		}
		if e, ok := byID[i.ID]; ok {
			e.RepoTags = append(e.RepoTags, name)
			for _, d := range digests {
				if !slices.Contains(e.RepoDigests, d) {
					e.RepoDigests = append(e.RepoDigests, d)
				}
			}
			continue
		}
		labels := i.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		byID[i.ID] = &imageSummary{
			ID: i.ID, RepoTags: []string{name}, RepoDigests: append([]string{}, digests...),
			Created: i.Created.Unix(), Size: i.Size, SharedSize: -1, VirtualSize: i.Size,
			Labels: labels, Containers: -1,
		}
		order = append(order, i.ID)
	}
	out := []imageSummary{}
	for _, id := range order {
		out = append(out, *byID[id])
	}
	writeJSON(w, http.StatusOK, out)
}

// filterParam reads the filters query parameter (package filters: both
// of its JSON forms, Docker's rules).
func filterParam(r *request) (filters.Args, error) {
	return filters.FromJSON(r.URL.Query().Get("filters"))
}

// imageFilter reads docker images' filters (Docker's rules, package
// filters) into a match of an image and the name it is listed by.
// Every image in the store has a name, so none is dangling.
func imageFilter(f filters.Args, list []image.Summary) (func(i image.Summary, name string) bool, error) {
	if err := f.Validate("before", "dangling", "label", "label!", "reference", "since", "until"); err != nil {
		return nil, err
	}
	dangling, _, err := f.Bool("dangling")
	if err != nil {
		return nil, err
	}
	until, hasUntil, err := f.Until("until", time.Now())
	if err != nil {
		return nil, err
	}
	var before, since time.Time
	for _, key := range []string{"before", "since"} {
		for _, ref := range f.Get(key) {
			j := slices.IndexFunc(list, func(i image.Summary) bool {
				return image.DockerName(i.Name) == image.DockerName(ref) || i.Name == ref || strings.HasPrefix(strings.TrimPrefix(i.ID, "sha256:"), strings.TrimPrefix(ref, "sha256:"))
			})
			if j < 0 {
				return nil, fmt.Errorf("%w: %s (filter '%s=%s')", image.ErrNotFound, ref, key, ref)
			}
			if key == "before" {
				before = list[j].Created
			} else {
				since = list[j].Created
			}
		}
	}
	return func(i image.Summary, name string) bool {
		switch {
		case dangling, !f.LabelsMatch(i.Labels),
			!f.Any("reference", func(p string) bool { return referenceMatch(p, name) }),
			hasUntil && !i.Created.Before(until),
			!before.IsZero() && !i.Created.Before(before),
			!since.IsZero() && !i.Created.After(since):
			return false
		}
		return true
	}, nil
}

// referenceMatch is dockerd's reference filter: the shell pattern matches
// the name with its tag (alpine:3.10), or without it (alpine).
func referenceMatch(pattern, name string) bool {
	if ok, _ := path.Match(pattern, name); ok {
		return true
	}
	repo := name
	if j := strings.LastIndexAny(repo, ":@"); j > strings.LastIndex(repo, "/") {
		repo = repo[:j]
	}
	ok, _ := path.Match(pattern, repo)
	return ok
}

func (s *Server) imageInspect(w http.ResponseWriter, r *request, name string) {
	d, err := s.b.Store().Inspect(name)
	if err != nil {
		s.imageError(w, name, err)
		return
	}
	writeJSON(w, http.StatusOK, service.ImageInspectOf(d))
}

// imagePull is POST /images/create?fromImage=&tag=: a stream of JSON
// messages, each ended by \r\n; an error after the stream began is its
// last message (errorDetail), as the docker CLI expects.
func (s *Server) imagePull(w http.ResponseWriter, r *request) {
	q := r.URL.Query()
	if q.Has("fromSrc") {
		s.imageImport(w, r)
		return
	}
	ref := q.Get("fromImage")
	if ref == "" {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("fromImage or fromSrc is required"))
		return
	}
	if tag := q.Get("tag"); tag != "" {
		if strings.HasPrefix(tag, "sha256:") {
			ref += "@" + tag
		} else {
			ref += ":" + tag
		}
	}
	if _, err := s.b.Store().ParseReference(ref); err != nil {
		fail(w, errdefs.ErrInvalidArgument.WithMessage(err.Error()))
		return
	}
	msg := func(v streamMessage) {
		b, _ := json.Marshal(v)
		w.Write(append(b, '\r', '\n'))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	type pulled struct {
		img *image.Image
		err error
	}
	done := make(chan pulled, 1)
	go func() {
		img, err := s.b.Store().Pull(r.Context(), ref)
		done <- pulled{img, err}
	}()
	// As dockerd: a pull that fails before its stream has begun (no such
	// repository or tag, a registry that refuses) answers with its status
	// code; the stream begins once the pull takes longer than a lookup.
	var res pulled
	select {
	case res = <-done:
		if res.err != nil {
			fail(w, pullError(ref, res.err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		msg(streamMessage{Status: "Pulling from " + ref, ID: tagOf(ref)})
	case <-time.After(pullHeaderWait):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		msg(streamMessage{Status: "Pulling from " + ref, ID: tagOf(ref)})
		res = <-done
	}
	img, err := res.img, res.err
	if err != nil {
		m := pullError(ref, err).Error()
		msg(errorMessage(m, 0))
		return
	}
	s.events.emit("image", "pull", ref, nil)
	msg(streamMessage{Status: "Digest: " + img.Digest})
	msg(streamMessage{Status: "Status: Image is up to date for " + ref})
}

// pullHeaderWait is how long a pull may take before its stream begins
// (and a failure can no longer change the status code).
const pullHeaderWait = 3 * time.Second

// pullError is dockerd's class and message for a failed pull: not found
// (404) for a repository or tag the registry does not have (or will not
// show), internal (500) for the rest, whatever their own class.
func pullError(ref string, err error) error {
	name := image.DockerName(ref)
	repo := name
	if j := strings.LastIndexAny(repo, ":@"); j > strings.LastIndex(repo, "/") {
		repo = repo[:j]
	}
	switch {
	case errors.Is(err, image.ErrUnauthorized):
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("pull access denied for %s, repository does not exist or may require 'docker login': denied: requested access to the resource is denied", repo))
	case errors.Is(err, image.ErrNotFound) && strings.Contains(err.Error(), "NAME_UNKNOWN"):
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("repository %s not found: name unknown: repository name not known to registry", repo))
	case errors.Is(err, image.ErrNotFound):
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("manifest for %s not found: manifest unknown: manifest unknown", name))
	}
	return errdefs.ErrInternal.WithMessage(err.Error())
}

func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}

// imageSave streams a docker-save tarball of refs.
func (s *Server) imageSave(w http.ResponseWriter, refs []string) {
	for _, ref := range refs {
		if _, err := s.b.Store().Get(ref); err != nil {
			s.imageError(w, ref, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-tar")
	if err := s.b.Store().Save(refs, w); err != nil {
		// The status is sent; a broken tar is what the client sees.
		return
	}
}

// imageLoad is POST /images/load: a docker-save tarball or OCI archive in
// the body.
func (s *Server) imageLoad(w http.ResponseWriter, r *request) {
	f, err := os.CreateTemp("", "slopbox-load-*.tar")
	if err != nil {
		fail(w, err)
		return
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, r.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("load: reading the request body: "+err.Error()))
		return
	}
	// As dockerd: a JSON stream whose headers go out at once (chunked, so
	// docker-py reads it line by line), with a failure inside the stream.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	names, err := s.b.Store().Load(r.Context(), f.Name())
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), f.Name(), "the request body")
		b, _ := json.Marshal(errorMessage(msg, 0))
		w.Write(append(b, '\r', '\n'))
		return
	}
	for _, n := range names {
		b, _ := json.Marshal(map[string]string{"stream": "Loaded image: " + image.DockerName(n) + "\n"})
		w.Write(append(b, '\r', '\n'))
	}
}

// imageHistory is GET /images/{name}/history: the image config's history,
// newest first, as dockerd answers it: the newest entry has the image's id
// and names, the others "<missing>" (their images are not in the store);
// Size is that of the entry's layer (compressed), 0 for one that made none.
func (s *Server) imageHistory(w http.ResponseWriter, name string) {
	img, err := s.b.Store().Get(name)
	if err != nil {
		s.imageError(w, name, err)
		return
	}
	d, err := s.b.Store().Inspect(name)
	if err != nil {
		s.imageError(w, name, err)
		return
	}
	var sizes []int64
	for _, l := range d.Layers {
		sizes = append(sizes, l.Size)
	}
	var tags []string
	for _, n := range d.Names {
		tags = append(tags, image.DockerName(n))
	}
	hist := img.Config.History
	out := []mobyimage.HistoryResponseItem{}
	layer := 0
	for _, h := range hist {
		var size int64
		if !h.EmptyLayer && layer < len(sizes) {
			size = sizes[layer]
			layer++
		}
		out = append(out, mobyimage.HistoryResponseItem{ID: "<missing>", Created: h.Created.Unix(), CreatedBy: h.CreatedBy,
			Size: size, Comment: h.Comment})
	}
	if len(out) == 0 {
		out = append(out, mobyimage.HistoryResponseItem{Created: img.Config.Created.Unix()})
	}
	slices.Reverse(out)
	out[0].ID, out[0].Tags = img.ID, tags
	writeJSON(w, http.StatusOK, out)
}

// imageImport is POST /images/create?fromSrc=: docker import of a root
// filesystem tarball, the request body (fromSrc=-) or fetched from a URL
// on this host's loopback (a remote one is refused: the server would
// fetch for its client), named repo:tag, with the changes (Dockerfile
// instructions) applied to its config. Its stream ends with the image's
// id as the status, as dockerd's.
func (s *Server) imageImport(w http.ResponseWriter, r *request) {
	q := r.URL.Query()
	ref := q.Get("repo")
	if t := q.Get("tag"); ref != "" && t != "" {
		ref += ":" + t
	}
	var cfg v1.Config
	if err := imagebuild.ApplyChanges(&cfg, q["changes"]); err != nil {
		fail(w, errdefs.ErrInvalidArgument.WithMessage(err.Error()))
		return
	}
	src := q.Get("fromSrc")
	var body io.Reader = r.Body
	if src != "-" {
		u, err := url.Parse(src)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !loopbackHost(u.Hostname()) {
			fail(w, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("fromSrc %q: want - (the request body) or an http(s) URL on this host's loopback (127.0.0.1, ::1, localhost)", src)))
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.String(), nil)
		if err != nil {
			fail(w, errdefs.ErrInvalidArgument.WithMessage(err.Error()))
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fail(w, errdefs.ErrInternal.WithMessage("import: "+err.Error()))
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fail(w, errdefs.ErrInternal.WithMessage(fmt.Sprintf("import: GET %s: %s", u, resp.Status)))
			return
		}
		body = resp.Body
	}
	id, err := s.b.Store().Import(r.Context(), body, ref, cfg, q.Get("message"))
	if err != nil {
		fail(w, err)
		return
	}
	s.events.emit("image", "import", id, nil)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	b, _ := json.Marshal(map[string]string{"status": id})
	w.Write(append(b, '\r', '\n'))
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
