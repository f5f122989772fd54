package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// imageRoute serves /images/{name}[/json|/tag|/get|/history]; names have
// slashes, so the verb is the last segment.
func (s *Server) imageRoute(w http.ResponseWriter, r *request, rest string) {
	name, verb := rest, ""
	if i := strings.LastIndex(rest, "/"); i > 0 {
		switch rest[i+1:] {
		case "json", "tag", "get", "history", "push":
			name, verb = rest[:i], rest[i+1:]
		}
	}
	switch {
	case verb == "json" && r.Method == http.MethodGet:
		s.imageInspect(w, r, name)
	case verb == "tag" && r.Method == http.MethodPost:
		dst := r.URL.Query().Get("repo")
		if t := r.URL.Query().Get("tag"); t != "" {
			dst += ":" + t
		}
		if err := s.b.Store().Tag(name, dst); err != nil {
			s.imageError(w, name, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	case verb == "push" && r.Method == http.MethodPost:
		s.imagePush(w, r, name)
	case verb == "get" && r.Method == http.MethodGet:
		s.imageSave(w, []string{name})
	case verb == "" && r.Method == http.MethodDelete:
		rm := s.b.Store().Remove
		if boolParam(r, "force") {
			rm = s.b.Store().ForceRemove
		}
		removed, err := rm(name)
		if err != nil {
			s.imageError(w, name, err)
			return
		}
		out := []map[string]string{{"Untagged": name}}
		for _, d := range removed {
			out = append(out, map[string]string{"Deleted": d})
		}
		writeJSON(w, http.StatusOK, out)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("page not found: %s /images/%s is not served by slopbox", r.Method, rest))
	}
}

// imageError answers a missing image as Docker does: 404 "No such image",
// which docker-py maps to ImageNotFound and docker run to a pull.
func (s *Server) imageError(w http.ResponseWriter, ref string, err error) {
	if statusOf(err) == http.StatusNotFound {
		writeError(w, http.StatusNotFound, "No such image: "+ref)
		return
	}
	fail(w, err)
}

func (s *Server) imageList(w http.ResponseWriter, r *request) {
	list, err := s.b.Store().List()
	if err != nil {
		fail(w, err)
		return
	}
	byID := map[string]map[string]any{}
	var out []map[string]any
	for _, i := range list {
		if e, ok := byID[i.ID]; ok {
			e["RepoTags"] = append(e["RepoTags"].([]string), i.Name)
			continue
		}
		repo := i.Name
		if j := strings.LastIndexAny(repo, ":@"); j > strings.LastIndex(repo, "/") {
			repo = repo[:j]
		}
		e := map[string]any{
			"Id": i.ID, "ParentId": "", "RepoTags": []string{i.Name}, "RepoDigests": []string{repo + "@" + i.Digest},
			"Created": i.Created.Unix(), "Size": i.Size, "SharedSize": -1, "VirtualSize": i.Size,
			"Labels": map[string]string{}, "Containers": -1,
		}
		byID[i.ID] = e
		out = append(out, e)
	}
	if out == nil {
		out = []map[string]any{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) imageInspect(w http.ResponseWriter, r *request, name string) {
	m, err := s.b.Store().Inspect(name)
	if err != nil {
		s.imageError(w, name, err)
		return
	}
	if c, ok := m["Created"].(time.Time); ok {
		m["Created"] = c.Format(time.RFC3339Nano)
	}
	m["Parent"], m["Comment"], m["DockerVersion"], m["Author"] = "", "", "", ""
	m["ContainerConfig"] = m["Config"]
	m["VirtualSize"] = m["Size"]
	m["GraphDriver"] = map[string]any{"Name": "overlay", "Data": map[string]string{}}
	if d, ok := m["Digest"].(string); ok {
		m["RepoDigests"] = []string{strings.SplitN(name, ":", 2)[0] + "@" + d}
	}
	delete(m, "Layers")
	delete(m, "Digest")
	writeJSON(w, http.StatusOK, m)
}

// imagePull is POST /images/create?fromImage=&tag=: a stream of JSON
// messages, each ended by \r\n; an error after the stream began is its
// last message (errorDetail), as the docker CLI expects.
func (s *Server) imagePull(w http.ResponseWriter, r *request) {
	q := r.URL.Query()
	ref := q.Get("fromImage")
	if ref == "" {
		writeError(w, http.StatusBadRequest, "fromImage is required (image import is not supported)")
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
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	msg := func(v map[string]any) {
		b, _ := json.Marshal(v)
		w.Write(append(b, '\r', '\n'))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	msg(map[string]any{"status": "Pulling from " + ref, "id": tagOf(ref)})
	img, err := s.b.Store().Pull(r.Context(), ref)
	if err != nil {
		msg(map[string]any{"errorDetail": map[string]string{"message": err.Error()}, "error": err.Error()})
		return
	}
	s.events.emit("image", "pull", ref, nil)
	msg(map[string]any{"status": "Digest: " + img.Digest})
	msg(map[string]any{"status": "Status: Image is up to date for " + ref})
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
		writeError(w, http.StatusBadRequest, "load: reading the request body: "+err.Error())
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
		b, _ := json.Marshal(map[string]any{"errorDetail": map[string]string{"message": msg}, "error": msg})
		w.Write(append(b, '\r', '\n'))
		return
	}
	for _, n := range names {
		b, _ := json.Marshal(map[string]string{"stream": "Loaded image: " + n + "\n"})
		w.Write(append(b, '\r', '\n'))
	}
}
