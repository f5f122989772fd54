// Package networks is Docker's network model as slopbox serves it, one
// service for the Engine API (serve) and the CLI (slopbox network): typed
// options in, typed results out, Docker's shapes and errors.
//
// It serves Docker's predefined networks with slopbox's meanings: none
// (the default: loopback only), bridge (outbound through the sandbox's
// own slirp4netns, 10.0.2.100/24) and host (the host's namespace, a
// policy refusal where it is one); and user-defined bridge networks
// (network create, compose's project network), whose records and data
// plane are package internal/netd's: containers on one resolve each
// other by name, alias and short id, and reach no other network.
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

	"github.com/containerd/errdefs"
	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/dockercompat/filters"
	"github.com/slopbox/slopbox/internal/netd"
	"github.com/slopbox/slopbox/sandbox"
)

// Errors, each with its Docker status: ErrNotFound 404, ErrForbidden 403
// (Docker's for an operation on a predefined network), ErrNotImplemented
// 501.
var (
	ErrNotFound       = errdefs.ErrNotFound.WithMessage("no such network")
	ErrForbidden      = errdefs.ErrPermissionDenied.WithMessage("operation not permitted on a pre-defined network")
	ErrNotImplemented = errdefs.ErrNotImplemented.WithMessage("not implemented by slopbox")
	ErrConflict       = errdefs.ErrConflict.WithMessage("network conflict")
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
	Subnet             string            `json:"Subnet,omitempty"`
	IPRange            string            `json:"IPRange,omitempty"`
	Gateway            string            `json:"Gateway,omitempty"`
	AuxiliaryAddresses map[string]string `json:"AuxiliaryAddresses,omitempty"`
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

// classify gives netd's and the backend's errors this package's classes.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, netd.ErrNotFound):
		return &classed{err.Error(), ErrNotFound}
	case errors.Is(err, netd.ErrNameUsed), errors.Is(err, netd.ErrConflict):
		return &classed{err.Error(), ErrConflict}
	case errors.Is(err, netd.ErrOverlap), errors.Is(err, netd.ErrNoPool), errors.Is(err, netd.ErrTooMany):
		return &classed{err.Error(), ErrForbidden}
	case errors.Is(err, netd.ErrInvalid):
		return backend.InvalidValue("%v", err)
	}
	return err
}

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
	user, err := s.b.Networks().List()
	if err != nil {
		return nil, err
	}
	for _, c := range user {
		n := userNetwork(c)
		for _, i := range list {
			if i.Broken != "" || !i.Running {
				continue
			}
			for _, ni := range i.Networks {
				if ni.ID == c.ID && ni.Endpoint != nil {
					ep := ni.Endpoint
					n.Containers[i.ID] = Endpoint{Name: i.Name, EndpointID: ep.EndpointID, MacAddress: ep.MacAddress,
						IPv4Address: fmt.Sprintf("%s/%d", ep.IPAddress, ep.IPPrefixLen)}
				}
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// userNetwork is a user-defined network in Docker's shape (no containers).
func userNetwork(c netd.Config) Network {
	ic := IPAMConfig{Subnet: c.Subnet.String(), Gateway: c.Gateway.String()}
	if c.IPRange.IsValid() {
		ic.IPRange = c.IPRange.String()
	}
	for name, a := range c.Aux {
		if ic.AuxiliaryAddresses == nil {
			ic.AuxiliaryAddresses = map[string]string{}
		}
		ic.AuxiliaryAddresses[name] = a.String()
	}
	return Network{
		Name: c.Name, ID: c.ID, Created: c.Created, Scope: "local", Driver: c.Driver, Internal: c.Internal, Attachable: c.Attachable,
		IPAM:       IPAM{Driver: "default", Config: []IPAMConfig{ic}}, // Options null, as dockerd's when none were given
		Containers: map[string]Endpoint{}, Options: orEmpty(c.Options), Labels: orEmpty(c.Labels),
	}
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
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

// Inspect is GET /networks/{id}: a network by id, name or unique id
// prefix (Docker's order).
func (s *Service) Inspect(ref string) (Network, error) {
	all, err := s.all()
	if err != nil {
		return Network{}, err
	}
	if ref == "default" {
		ref = backend.NetworkBridge
	}
	for _, n := range all {
		if n.ID == ref {
			return n, nil
		}
	}
	for _, n := range all {
		if n.Name == ref {
			return n, nil
		}
	}
	var found []Network
	for _, n := range all {
		if ref != "" && strings.HasPrefix(n.ID, ref) {
			found = append(found, n)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	if len(found) > 1 {
		return Network{}, backend.InvalidValue("network %s is ambiguous (%d networks have ids starting so)", ref, len(found))
	}
	return Network{}, errorOf(ErrNotFound, "network %s not found", ref)
}

// Create is POST /networks/create and docker network create: a
// user-defined bridge network with its own subnet (given, or the next of
// Docker's default pools). A predefined name is Docker's 403, a name in
// use 409, an overlapping subnet 403.
func (s *Service) Create(o CreateOptions) (CreateResult, error) {
	if o.Name == "" {
		return CreateResult{}, backend.InvalidValue("network create: a name is required")
	}
	if IsPredefined(o.Name) {
		return CreateResult{}, errorOf(ErrForbidden, "%s is a pre-defined network and cannot be created", o.Name)
	}
	if o.EnableIPv6 {
		return CreateResult{}, backend.InvalidValue("network %s: IPv6 networks are not supported by slopbox (leave EnableIPv6 off)", o.Name)
	}
	if d := o.IPAM.Driver; d != "" && d != "default" {
		return CreateResult{}, backend.InvalidValue("network %s: IPAM driver %q is not supported (only default)", o.Name, d)
	}
	if len(o.IPAM.Config) > 1 {
		return CreateResult{}, backend.InvalidValue("network %s: one IPAM config (one IPv4 subnet) per network", o.Name)
	}
	co := netd.CreateOptions{Name: o.Name, Driver: o.Driver, Internal: o.Internal, Attachable: o.Attachable,
		Labels: o.Labels, Options: o.Options}
	if len(o.IPAM.Config) == 1 {
		c := o.IPAM.Config[0]
		co.Subnet, co.Gateway, co.IPRange, co.Aux = c.Subnet, c.Gateway, c.IPRange, c.AuxiliaryAddresses
	}
	c, err := s.b.Networks().Create(co, sandbox.ReservedSubnets()...)
	if err != nil {
		return CreateResult{}, classify(err)
	}
	return CreateResult{ID: c.ID}, nil
}

// Remove is DELETE /networks/{id}: a predefined network is Docker's 403,
// and so is one a running container is on.
func (s *Service) Remove(ref string) error {
	if IsPredefined(ref) {
		return errorOf(ErrForbidden, "%s is a pre-defined network and cannot be removed", ref)
	}
	n, err := s.Inspect(ref)
	if err != nil {
		return err
	}
	if IsPredefined(n.Name) {
		return errorOf(ErrForbidden, "%s is a pre-defined network and cannot be removed", n.Name)
	}
	return classify(s.b.Networks().Remove(n.ID, s.unused))
}

// unused refuses a network a running container is on.
func (s *Service) unused(c netd.Config) error {
	users, err := s.b.NetworkUsers(c.ID)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return errorOf(ErrForbidden, "error while removing network: network %s id %s has active endpoints", c.Name, c.ID)
	}
	return nil
}

// Prune is POST /networks/prune: the user networks no running container
// is on go (until, label, label! filters).
func (s *Service) Prune(f filters.Args) (PruneResult, error) {
	if err := f.Validate("until", "label", "label!"); err != nil {
		return PruneResult{}, err
	}
	until, hasUntil, err := f.Until("until", time.Now())
	if err != nil {
		return PruneResult{}, err
	}
	list, err := s.b.Networks().List()
	if err != nil {
		return PruneResult{}, err
	}
	res := PruneResult{NetworksDeleted: []string{}}
	for _, c := range list {
		if (hasUntil && !c.Created.Before(until)) || !f.LabelsMatch(c.Labels) {
			continue
		}
		if err := s.b.Networks().Remove(c.ID, s.unused); err == nil {
			res.NetworksDeleted = append(res.NetworksDeleted, c.Name)
		} else if !errors.Is(err, ErrForbidden) && !errors.Is(err, netd.ErrNotFound) {
			return res, err
		}
	}
	return res, nil
}

// ConnectOptions are POST /networks/{id}/connect's EndpointConfig and
// docker network connect's flags.
type ConnectOptions struct {
	Aliases []string
	IPv4    string
}

// Connect is POST /networks/{id}/connect: a container joins a user
// network, now if it runs and at each start.
func (s *Service) Connect(ref, container string, o ConnectOptions) error {
	n, err := s.Inspect(ref)
	if err != nil {
		return err
	}
	if _, err := s.b.Open(container); err != nil {
		return err
	}
	if IsPredefined(n.Name) {
		return errorOf(ErrNotImplemented, "network connect %s: not implemented by slopbox: a container's predefined network (none, bridge, host) is the one it was created with; connect it to a user-defined network instead", n.Name)
	}
	return classify(s.b.ConnectNetwork(container, n.ID, o.Aliases, o.IPv4))
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
	if IsPredefined(n.Name) {
		return errorOf(ErrNotImplemented, "network disconnect %s: not implemented by slopbox: a container keeps the predefined network it was created with", n.Name)
	}
	return classify(s.b.DisconnectNetwork(container, n.ID))
}
