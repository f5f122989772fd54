package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/dockercompat/dockerview"
	"github.com/slopbox/slopbox/sandbox"
)

// volumeJSON is a volume in Docker's shape.
func volumeJSON(v sandbox.Volume) map[string]any {
	return map[string]any{
		"Name": v.Name, "Driver": v.Driver, "Mountpoint": v.Mountpoint, "CreatedAt": v.CreatedAt.Format(time.RFC3339),
		"Labels": nonNil(v.Labels), "Options": nonNil(v.Options), "Scope": "local",
	}
}

// volumeError answers a volume error with Docker's wording for a missing
// volume; the others carry their class (in use: conflict, a bad name:
// invalid argument).
func volumeError(w http.ResponseWriter, name string, err error) {
	if errors.Is(err, sandbox.ErrVolumeNotFound) {
		err = classedAs(err, "get "+name+": no such volume")
	}
	fail(w, err)
}

// volumeRoute serves /volumes, /volumes/create, /volumes/prune and
// /volumes/{name}.
func (s *Server) volumeRoute(w http.ResponseWriter, r *request, rest string) {
	m := r.Method
	switch {
	case rest == "" && m == http.MethodGet:
		s.volumeList(w, r)
	case rest == "create" && m == http.MethodPost:
		var body struct {
			Name, Driver string
			DriverOpts   map[string]string
			Labels       map[string]string
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("invalid JSON in the request body: "+err.Error()))
			return
		}
		if body.Driver != "" && body.Driver != "local" {
			fail(w, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("error looking up volume plugin %s: plugin %q not found", body.Driver, body.Driver)))
			return
		}
		if len(body.DriverOpts) > 0 {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("volume driver options are not supported: slopbox's local volumes are plain directories"))
			return
		}
		v, err := s.b.CreateVolume(body.Name, body.Labels)
		if err != nil {
			volumeError(w, body.Name, err)
			return
		}
		s.events.emit("volume", "create", v.Name, map[string]string{"driver": "local"})
		writeJSON(w, http.StatusCreated, volumeJSON(v))
	case rest == "prune" && m == http.MethodPost:
		s.volumePrune(w, r)
	case rest != "" && !strings.Contains(rest, "/") && m == http.MethodGet:
		v, err := s.b.Volume(rest)
		if err != nil {
			volumeError(w, rest, err)
			return
		}
		writeJSON(w, http.StatusOK, volumeJSON(v))
	case rest != "" && !strings.Contains(rest, "/") && m == http.MethodDelete:
		if err := s.b.RemoveVolume(rest, boolParam(r, "force")); err != nil {
			volumeError(w, rest, err)
			return
		}
		s.events.emit("volume", "destroy", rest, map[string]string{"driver": "local"})
		w.WriteHeader(http.StatusNoContent)
	default:
		fail(w, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("page not found: %s /volumes/%s is not served by slopbox", m, rest)))
	}
}

func (s *Server) volumeList(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	match, err := dockerview.VolumeFilter(f, func(v sandbox.Volume) int { return len(s.b.VolumeUsers(v)) })
	if err != nil {
		fail(w, err)
		return
	}
	list, err := s.b.Volumes()
	if err != nil {
		fail(w, err)
		return
	}
	out := []map[string]any{}
	for _, v := range list {
		if match(v) {
			out = append(out, volumeJSON(v))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"Volumes": out, "Warnings": []string{}})
}

// volumePrune removes the volumes no container uses: from API 1.42 on
// only anonymous ones unless the all filter is true, as Docker's.
func (s *Server) volumePrune(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	match, err := dockerview.VolumePruneFilter(f, !r.atLeast("1.42"))
	if err != nil {
		fail(w, err)
		return
	}
	removed, err := s.b.PruneVolumes(func(v sandbox.Volume) bool { return !match(v) })
	if err != nil {
		fail(w, err)
		return
	}
	for _, name := range removed {
		s.events.emit("volume", "destroy", name, map[string]string{"driver": "local"})
	}
	if removed == nil {
		removed = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"VolumesDeleted": removed, "SpaceReclaimed": 0})
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
