package engine

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/dockercompat/networks"
)

// networkRoute serves /networks, /networks/create, /networks/prune and
// /networks/{id}[/connect|/disconnect]: request → typed options →
// networks.Service → typed response.
func (s *Server) networkRoute(w http.ResponseWriter, r *request, rest string) {
	svc := networks.New(s.b)
	m := r.Method
	id, verb, _ := strings.Cut(rest, "/")
	switch {
	case rest == "" && m == http.MethodGet:
		f, err := filterParam(r)
		if err != nil {
			fail(w, err)
			return
		}
		list, err := svc.List(f)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, list)
	case rest == "create" && m == http.MethodPost:
		var body struct {
			Name, Driver                              string
			Internal, Attachable, Ingress, EnableIPv6 bool
			IPAM                                      *networks.IPAM
			Options, Labels                           map[string]string
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("invalid JSON in the request body: "+err.Error()))
			return
		}
		o := networks.CreateOptions{Name: body.Name, Driver: body.Driver, Internal: body.Internal, Attachable: body.Attachable,
			EnableIPv6: body.EnableIPv6, Labels: body.Labels, Options: body.Options}
		if body.IPAM != nil {
			o.IPAM = *body.IPAM
		}
		res, err := svc.Create(o)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, res)
	case rest == "prune" && m == http.MethodPost:
		f, err := filterParam(r)
		if err != nil {
			fail(w, err)
			return
		}
		res, err := svc.Prune(f)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	case id != "" && verb == "" && m == http.MethodGet:
		n, err := svc.Inspect(id)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, n)
	case id != "" && verb == "" && m == http.MethodDelete:
		if err := svc.Remove(id); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case id != "" && (verb == "connect" || verb == "disconnect") && m == http.MethodPost:
		var body struct {
			Container      string
			Force          bool
			EndpointConfig *struct {
				Aliases    []string
				IPAMConfig *struct{ IPv4Address string }
			}
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			fail(w, errdefs.ErrInvalidArgument.WithMessage("invalid JSON in the request body: "+err.Error()))
			return
		}
		var err error
		if verb == "disconnect" {
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
	default:
		fail(w, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("page not found: %s /networks/%s is not served by slopbox", m, rest)))
	}
}
