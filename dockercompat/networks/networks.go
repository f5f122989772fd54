// Package networks is Docker's network model as slopbox serves it, one
// service for the Engine API (serve) and the CLI (slopbox network): typed
// options in, typed results out, Docker's shapes and errors.
//
// Today it serves Docker's predefined networks with slopbox's meanings:
// none (the default: loopback only), bridge (outbound through the
// sandbox's own slirp4netns, 10.0.2.100/24) and host (the host's
// namespace, a policy refusal where it is one). A user-defined network
// (network create, compose's project network) is refused at create with
// ErrNotImplemented naming what works instead; nothing is recorded.
package networks

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat/filters"
	"github.com/slopbox/slopbox/sandbox"
)

// Errors, each with its Docker status: ErrNotFound 404, ErrForbidden 403
// (Docker's for an operation on a predefined network), ErrNotImplemented
// 501.
var (
	ErrNotFound       = errors.New("network not found")
	ErrForbidden      = errors.New("operation not permitted on a pre-defined network")
	ErrNotImplemented = errors.New("not implemented by slopbox")
)

// Network is one network as GET /networks and docker network inspect show
// it.
type Network struct {
	Name       string              `json:"Name"`
	ID         string              `json:"Id"`
	Created    time.Time           `json:"Created"`
	Scope      string              `json:"Scope"`
	Driver     string              `json:"Driver"`
	EnableIPv6 bool                `json:"EnableIPv6"`
	IPAM       IPAM                `json:"IPAM"`
	Internal   bool                `json:"Internal"`
	Attachable bool                `json:"Attachable"`
	Ingress    bool                `json:"Ingress"`
	ConfigFrom ConfigReference     `json:"ConfigFrom"`
	ConfigOnly bool                `json:"ConfigOnly"`
	Containers map[string]Endpoint `json:"Containers"`
	Options    map[string]string   `json:"Options"`
	Labels     map[string]string   `json:"Labels"`
}

// IPAM is a network's address management, Docker's shape.
type IPAM struct {
	Driver  string            `json:"Driver"`
	Options map[string]string `json:"Options"`
	Config  []IPAMConfig      `json:"Config"`
}

// IPAMConfig is one of a network's subnets.
type IPAMConfig struct {
	Subnet  string `json:"Subnet,omitempty"`
	IPRange string `json:"IPRange,omitempty"`
	Gateway string `json:"Gateway,omitempty"`
}

// ConfigReference is Docker's ConfigFrom (swarm config networks): empty.
type ConfigReference struct {
	Network string `json:"Network"`
}

// Endpoint is a container on a network, as the network lists it.
type Endpoint struct {
	Name        string `json:"Name"`
	EndpointID  string `json:"EndpointID"`
	MacAddress  string `json:"MacAddress"`
	IPv4Address string `json:"IPv4Address"`
	IPv6Address string `json:"IPv6Address"`
}

// classed is an error with its own message that matches a class.
type classed struct {
	msg   string
	class error
}

func (e *classed) Error() string { return e.msg }
func (e *classed) Unwrap() error { return e.class }

func errorOf(class error, format string, a ...any) error {
	return &classed{fmt.Sprintf(format, a...), class}
}

// CreateOptions are POST /networks/create's body and docker network
// create's flags.
type CreateOptions struct {
	Name       string
	Driver     string
	Internal   bool
	Attachable bool
	EnableIPv6 bool
	IPAM       IPAM
	Labels     map[string]string
	Options    map[string]string
}

// CreateResult is what a create answers.
type CreateResult struct {
	ID      string `json:"Id"`
	Warning string `json:"Warning"`
}

// PruneResult is what a prune answers.
type PruneResult struct {
	NetworksDeleted []string `json:"NetworksDeleted"`
}

// Service is the network verbs over a sandbox backend.
type Service struct {
	b *sandbox.Backend
}

// New is the network service of b.
func New(b *sandbox.Backend) *Service { return &Service{b: b} }

// predefined are Docker's networks that always exist, with their drivers
// (Docker calls none's driver null).
var predefined = []struct{ name, driver string }{
	{backend.NetworkBridge, "bridge"}, {backend.NetworkHost, "host"}, {backend.NetworkNone, "null"},
}

// ID is the id of the predefined network name: stable, so that a
// container's inspect and the network's agree across processes.
func ID(name string) string {
	sum := sha256.Sum256([]byte("slopbox network " + name))
	return hex.EncodeToString(sum[:])
}

// IsPredefined reports whether name is one of Docker's predefined
// networks (bridge, host, none; default means bridge to Docker).
func IsPredefined(name string) bool {
	switch name {
	case backend.NetworkBridge, backend.NetworkHost, backend.NetworkNone, "default":
		return true
	}
	return false
}

// The bridge network's subnet and gateway: slirp4netns's, which every
// bridge sandbox has in its own namespace (docs/networking.md).
const (
	bridgeSubnet  = "10.0.2.0/24"
	bridgeGateway = "10.0.2.2"
)

// all is every network with the sandboxes on it.
func (s *Service) all() ([]Network, error) {
	list, err := s.b.List()
	if err != nil {
		return nil, err
	}
	created := time.Unix(0, 0)
	if fi, err := os.Stat(s.b.Store().Root()); err == nil {
		created = fi.ModTime()
	}
	var out []Network
	for _, p := range predefined {
		n := Network{
			Name: p.name, ID: ID(p.name), Created: created, Scope: "local", Driver: p.driver,
			IPAM:       IPAM{Driver: "default", Config: []IPAMConfig{}},
			Containers: map[string]Endpoint{}, Options: map[string]string{}, Labels: map[string]string{},
		}
		if p.name == backend.NetworkBridge {
			n.IPAM.Config = []IPAMConfig{{Subnet: bridgeSubnet, Gateway: bridgeGateway}}
		}
		for _, i := range list {
			if i.Broken != "" || cmp.Or(i.Network, backend.NetworkNone) != p.name || !i.Running {
				continue
			}
			// No address: a bridge sandbox's 10.0.2.100 exists only in its
			// own namespace (every one has it), as inspect says.
			n.Containers[i.ID] = Endpoint{Name: i.Name, EndpointID: ID(p.name + " " + i.ID)}
		}
		out = append(out, n)
	}
	return out, nil
}

// List is GET /networks and docker network ls: the networks filters
// take, by Docker's rules (dangling, driver, id, label, name, scope,
// type=builtin|custom).
func (s *Service) List(f filters.Args) ([]Network, error) {
	if err := f.Validate("dangling", "driver", "id", "label", "name", "scope", "type"); err != nil {
		return nil, err
	}
	for _, t := range f.Get("type") {
		if t != "builtin" && t != "custom" {
			return nil, backend.InvalidValue("invalid filter 'type=%s' (builtin or custom)", t)
		}
	}
	dangling, hasDangling, err := f.Bool("dangling")
	if err != nil {
		return nil, err
	}
	all, err := s.all()
	if err != nil {
		return nil, err
	}
	out := []Network{}
	matchName, matchID := f.Matcher("name"), f.Matcher("id")
	for _, n := range all {
		typ := "custom"
		if IsPredefined(n.Name) {
			typ = "builtin"
		}
		// Docker's dangling: a user network no container uses; the
		// predefined ones are never dangling.
		isDangling := typ == "custom" && len(n.Containers) == 0
		if matchName(n.Name) && (f.Prefix("id", n.ID) || matchID(n.ID)) && f.Exact("driver", n.Driver) &&
			f.Exact("scope", n.Scope) && f.Exact("type", typ) && f.LabelsMatch(n.Labels) &&
			(!hasDangling || dangling == isDangling) {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Inspect is GET /networks/{id}: a network by name, id or id prefix.
func (s *Service) Inspect(ref string) (Network, error) {
	all, err := s.all()
	if err != nil {
		return Network{}, err
	}
	if ref == "default" {
		ref = backend.NetworkBridge
	}
	for _, n := range all {
		if n.Name == ref || n.ID == ref {
			return n, nil
		}
	}
	for _, n := range all {
		if ref != "" && strings.HasPrefix(n.ID, ref) {
			return n, nil
		}
	}
	return Network{}, errorOf(ErrNotFound, "network %s not found", ref)
}

// Create is POST /networks/create and docker network create. A
// predefined name is Docker's 403; any other network is not implemented
// yet, and the refusal says what works now.
func (s *Service) Create(o CreateOptions) (CreateResult, error) {
	if o.Name == "" {
		return CreateResult{}, backend.InvalidValue("network create: a name is required")
	}
	if IsPredefined(o.Name) {
		return CreateResult{}, errorOf(ErrForbidden, "%s is a pre-defined network and cannot be created", o.Name)
	}
	return CreateResult{}, errorOf(ErrNotImplemented, "network %s: user-defined networks are not implemented by slopbox yet: it serves Docker's predefined networks only, none (the default), bridge (outbound access) and host; run containers with --network bridge or none, or in compose give each service network_mode: bridge or none", o.Name)
}

// Remove is DELETE /networks/{id}: a predefined network is Docker's 403.
// There are no user-defined networks yet, so none is removed.
func (s *Service) Remove(ref string) error {
	n, err := s.Inspect(ref)
	if err != nil {
		return err
	}
	if IsPredefined(n.Name) {
		return errorOf(ErrForbidden, "%s is a pre-defined network and cannot be removed", n.Name)
	}
	return nil
}

// Prune is POST /networks/prune: unused user networks go; there are none.
func (s *Service) Prune(f filters.Args) (PruneResult, error) {
	if err := f.Validate("until", "label", "label!"); err != nil {
		return PruneResult{}, err
	}
	return PruneResult{NetworksDeleted: []string{}}, nil
}

// Connect is POST /networks/{id}/connect: a running container joins a
// network. slopbox's sandboxes keep the network they were created with.
func (s *Service) Connect(ref, container string) error {
	n, err := s.Inspect(ref)
	if err != nil {
		return err
	}
	if _, err := s.b.Open(container); err != nil {
		return err
	}
	return errorOf(ErrNotImplemented, "network connect %s: not implemented by slopbox: a sandbox keeps the network it was created with (--network)", n.Name)
}

// Disconnect is POST /networks/{id}/disconnect.
func (s *Service) Disconnect(ref, container string) error {
	n, err := s.Inspect(ref)
	if err != nil {
		return err
	}
	if _, err := s.b.Open(container); err != nil {
		return err
	}
	return errorOf(ErrNotImplemented, "network disconnect %s: not implemented by slopbox: a sandbox keeps the network it was created with (--network)", n.Name)
}
