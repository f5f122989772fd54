package engine

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/volume"
	"github.com/slopbox/slopbox/dockercompat/service"
)

// volumeJSON is a volume in Docker's shape.
func volumeJSON(v service.Volume) volume.Volume {
	return volume.Volume{
		Name: v.Name, Driver: v.Driver, Mountpoint: v.Mountpoint, CreatedAt: v.CreatedAt.Format(time.RFC3339),
		Labels: nonNil(v.Labels), Options: nonNil(v.Options), Scope: "local",
	}
}

// volumeError answers a volume error with Docker's wording for a missing
// volume; the others carry their class (in use: conflict, a bad name:
// invalid argument).
func volumeError(w http.ResponseWriter, name string, err error) {
	if errors.Is(err, service.ErrVolumeNotFound) {
		err = classedAs(err, "get "+name+": no such volume")
	}
	fail(w, err)
}

// volumeCreate is POST /volumes/create.
func (s *Server) volumeCreate(w http.ResponseWriter, r *request) {
	var body volume.CreateRequest
	if !decodeBody(w, r, &body) {
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
}

// volumeInspect is GET /volumes/{name}.
func (s *Server) volumeInspect(w http.ResponseWriter, r *request) {
	name := r.PathValue("name")
	v, err := s.b.Volume(name)
	if err != nil {
		volumeError(w, name, err)
		return
	}
	writeJSON(w, http.StatusOK, volumeJSON(v))
}

// volumeRemove is DELETE /volumes/{name}?force=.
func (s *Server) volumeRemove(w http.ResponseWriter, r *request) {
	name := r.PathValue("name")
	if err := s.b.RemoveVolume(name, boolParam(r, "force")); err != nil {
		volumeError(w, name, err)
		return
	}
	s.events.emit("volume", "destroy", name, map[string]string{"driver": "local"})
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) volumeList(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	list, err := s.b.ListVolumes(f)
	if err != nil {
		fail(w, err)
		return
	}
	out := volume.ListResponse{Volumes: []volume.Volume{}, Warnings: []string{}}
	for _, v := range list {
		out.Volumes = append(out.Volumes, volumeJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
}

// volumePrune removes the volumes no container uses: from API 1.42 on
// only anonymous ones unless the all filter is true, as Docker's.
func (s *Server) volumePrune(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	removed, err := s.b.PruneVolumes(f, !r.atLeast("1.42"))
	if err != nil {
		fail(w, err)
		return
	}
	for _, name := range removed {
		s.events.emit("volume", "destroy", name, map[string]string{"driver": "local"})
	}
	writeJSON(w, http.StatusOK, volume.PruneReport{VolumesDeleted: removed})
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
