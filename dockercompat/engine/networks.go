package engine

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/dockercompat/networks"
)

// The /networks handlers: request → typed options → networks.Service →
// typed response.

// networkList is GET /networks?filters=.
func (s *Server) networkList(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	list, err := s.b.Networks().List(f)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// networkCreate is POST /networks/create.
func (s *Server) networkCreate(w http.ResponseWriter, r *request) {
	var body struct {
		Name, Driver                              string
		Internal, Attachable, Ingress, EnableIPv6 bool
		IPAM                                      *networks.IPAM
		Options, Labels                           map[string]string
	}
	if !decodeBody(w, r, &body) {
		return
	}
	o := networks.CreateOptions{Name: body.Name, Driver: body.Driver, Internal: body.Internal, Attachable: body.Attachable,
		EnableIPv6: body.EnableIPv6, Labels: body.Labels, Options: body.Options}
	if body.IPAM != nil {
		o.IPAM = *body.IPAM
	}
	res, err := s.b.Networks().Create(o)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}

// networkPrune is POST /networks/prune?filters=.
func (s *Server) networkPrune(w http.ResponseWriter, r *request) {
	f, err := filterParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	res, err := s.b.Networks().Prune(f)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// networkInspect is GET /networks/{id}.
func (s *Server) networkInspect(w http.ResponseWriter, r *request) {
	n, err := s.b.Networks().Inspect(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

// networkRemove is DELETE /networks/{id}.
func (s *Server) networkRemove(w http.ResponseWriter, r *request) {
	if err := s.b.Networks().Remove(r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// networkConnect is POST /networks/{id}/connect and /disconnect.
func (s *Server) networkConnect(w http.ResponseWriter, r *request) {
	var body struct {
		Container      string
		Force          bool
		EndpointConfig *struct {
			Aliases    []string
			IPAMConfig *struct{ IPv4Address string }
		}
	}
	if !decodeBody(w, r, &body) {
		return
	}
	svc, id := s.b.Networks(), r.PathValue("id")
	var err error
	if strings.HasSuffix(r.URL.Path, "/disconnect") {
		err = svc.Disconnect(id, body.Container)
	} else {
		var o networks.ConnectOptions
		if ec := body.EndpointConfig; ec != nil {
			o.Aliases = ec.Aliases
			if ec.IPAMConfig != nil {
				o.IPv4 = ec.IPAMConfig.IPv4Address
			}
		}
		err = svc.Connect(id, body.Container, o)
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// decodeBody reads r's JSON body into v, or answers Docker's 400 and
// returns false.
func decodeBody(w http.ResponseWriter, r *request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		fail(w, errdefs.ErrInvalidArgument.WithMessage("invalid JSON in the request body: "+err.Error()))
		return false
	}
	return true
}
