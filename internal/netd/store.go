// Package netd is slopbox's user-defined networks: the records of the
// networks a user made (Store, on disk under the state root) and the
// per-user helper that wires them up (the daemon: Serve, Client).
//
// The design is podman's rootless netns with netavark and aardvark-dns
// (docs/networking.md): each network that has a running container has a
// network namespace of its own, held by the helper, with a bridge whose
// address is the network's gateway and a DNS server on that address;
// each container on the network has a veth pair from its own namespace to
// that bridge. The host's namespace, routes and firewall are never
// touched. Outbound access is the container's own slirp4netns (as with
// --network bridge), so a network needs no NAT and no forwarding:
// forwarding stays off in the network's namespace, and nothing routes
// from one network to another.
package netd

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// Errors, each matched with errors.Is.
var (
	ErrNotFound = errdefs.ErrNotFound.WithMessage("network not found")
	ErrNameUsed = errdefs.ErrConflict.WithMessage("network name in use")
	ErrOverlap  = errdefs.ErrPermissionDenied.WithMessage("pool overlaps with other one on this address space")
	ErrInvalid  = errdefs.ErrInvalidArgument.WithMessage("invalid network option")
	ErrNoPool   = errdefs.ErrPermissionDenied.WithMessage("no address pool left")
	ErrTooMany  = errdefs.ErrPermissionDenied.WithMessage("too many networks")
)

// MaxNetworks bounds how many user networks one user may have.
const MaxNetworks = 512

// Config is a user-defined network as it is recorded.
type Config struct {
	ID         string       `json:"id"`
	Name       string       `json:"name"`
	Driver     string       `json:"driver"`
	Created    time.Time    `json:"created"`
	Internal   bool         `json:"internal,omitempty"`
	Attachable bool         `json:"attachable,omitempty"`
	Subnet     netip.Prefix `json:"subnet"`
	Gateway    netip.Addr   `json:"gateway"`
	IPRange    netip.Prefix `json:"ip_range,omitempty"`
	// Aux are addresses of the subnet no endpoint gets (IPAM
	// AuxiliaryAddresses: name → address).
	Aux     map[string]netip.Addr `json:"aux,omitempty"`
	Labels  map[string]string     `json:"labels,omitempty"`
	Options map[string]string     `json:"options,omitempty"`
	// Given: the subnet was asked for (else it came from a default pool).
	Given bool `json:"given,omitempty"`
}

// CreateOptions are what a create asks for; zero values take Docker's
// defaults.
type CreateOptions struct {
	Name       string
	Driver     string
	Internal   bool
	Attachable bool
	Subnet     string
	Gateway    string
	IPRange    string
	Aux        map[string]string
	Labels     map[string]string
	Options    map[string]string
}

// Store holds the networks of one state root: one JSON file per network in
// dir, changed under dir's lock.
type Store struct{ dir string }

// OpenStore is the store in dir (made on first write).
func OpenStore(dir string) *Store { return &Store{dir: dir} }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) lock() (func(), error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// List is every network, by name.
func (s *Store) List() ([]Config, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Config
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.dir, e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		var c Config
		if json.Unmarshal(b, &c) != nil || c.ID+".json" != e.Name() {
			continue
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get finds a network by name, full id or unique id prefix (Docker's
// order: id, name, prefix).
func (s *Store) Get(ref string) (Config, error) {
	all, err := s.List()
	if err != nil {
		return Config{}, err
	}
	for _, c := range all {
		if c.ID == ref {
			return c, nil
		}
	}
	for _, c := range all {
		if c.Name == ref {
			return c, nil
		}
	}
	var found []Config
	for _, c := range all {
		if ref != "" && strings.HasPrefix(c.ID, ref) {
			found = append(found, c)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	if len(found) > 1 {
		return Config{}, fmt.Errorf("%w: network %s is ambiguous (%d networks have ids starting so)", ErrInvalid, ref, len(found))
	}
	return Config{}, fmt.Errorf("%w: network %s not found", ErrNotFound, ref)
}

// maxAux bounds a network's auxiliary addresses (each attach carries them
// to the helper).
const maxAux = 256

// Create records a new network. reserved are subnets in use otherwise
// (the predefined bridge's), which a network may not overlap either.
func (s *Store) Create(o CreateOptions, reserved ...netip.Prefix) (Config, error) {
	c, err := configFor(o)
	if err != nil {
		return Config{}, err
	}
	if err := setAddresses(&c, o); err != nil {
		return Config{}, err
	}
	if err := setAux(&c, o.Aux); err != nil {
		return Config{}, err
	}
	unlock, err := s.lock()
	if err != nil {
		return Config{}, err
	}
	defer unlock()
	if err := s.place(&c, reserved); err != nil {
		return Config{}, err
	}
	var id [32]byte
	rand.Read(id[:])
	c.ID = hex.EncodeToString(id[:])
	if err := s.write(c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// configFor is the Config o asks for before its addresses: its driver
// (bridge, the one there is), name and driver options checked.
func configFor(o CreateOptions) (Config, error) {
	c := Config{Name: o.Name, Driver: o.Driver, Internal: o.Internal, Attachable: o.Attachable,
		Labels: o.Labels, Options: o.Options, Created: time.Now().UTC()}
	if c.Driver == "" {
		c.Driver = "bridge"
	}
	if c.Driver != "bridge" {
		return Config{}, fmt.Errorf("%w: network %s: driver %q is not supported: slopbox has bridge networks only", ErrInvalid, o.Name, c.Driver)
	}
	if o.Name == "" || len(o.Name) > 255 || strings.ContainsFunc(o.Name, func(r rune) bool { return r == '/' || r < 0x20 || r == 0x7f }) {
		return Config{}, fmt.Errorf("%w: network name %q: at most 255 characters, no '/' or control characters", ErrInvalid, o.Name)
	}
	for k := range o.Options {
		switch k {
		case "com.docker.network.bridge.name", "com.docker.network.driver.mtu", "com.docker.network.bridge.enable_icc",
			"com.docker.network.bridge.enable_ip_masquerade", "com.docker.network.bridge.host_binding_ipv4":
		default:
			if !strings.HasPrefix(k, "com.docker.network.") {
				return Config{}, fmt.Errorf("%w: network %s: driver option %q is not supported", ErrInvalid, o.Name, k)
			}
		}
	}
	return c, nil
}

// setAddresses checks o's subnet, ip range and gateway and sets them in
// c (Given when a subnet is given; the store picks one otherwise, and
// then neither an ip range nor a gateway may be given).
func setAddresses(c *Config, o CreateOptions) error {
	var err error
	if o.Subnet != "" {
		if c.Subnet, err = netip.ParsePrefix(o.Subnet); err != nil || !c.Subnet.Addr().Is4() {
			return fmt.Errorf("%w: subnet %q is not an IPv4 CIDR (IPv6 networks are not supported)", ErrInvalid, o.Subnet)
		}
		if c.Subnet.Masked() != c.Subnet {
			return fmt.Errorf("%w: subnet %s has host bits set (%s)", ErrInvalid, o.Subnet, c.Subnet.Masked())
		}
		if c.Subnet.Bits() > 30 || c.Subnet.Bits() < 8 {
			return fmt.Errorf("%w: subnet %s: a prefix length of 8 to 30", ErrInvalid, o.Subnet)
		}
		if a := c.Subnet.Addr(); a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.As4()[0] == 0 || a.As4()[0] >= 240 {
			return fmt.Errorf("%w: subnet %s is not a unicast range a network can use (loopback, 0.0.0.0/8, link-local, multicast and 240.0.0.0/4 are not)", ErrInvalid, o.Subnet)
		}
		c.Given = true
	} else if o.Gateway != "" || o.IPRange != "" {
		return fmt.Errorf("%w: a gateway or ip range needs a subnet", ErrInvalid)
	}
	if o.IPRange != "" {
		if c.IPRange, err = netip.ParsePrefix(o.IPRange); err != nil || !c.Subnet.Contains(c.IPRange.Addr()) || c.IPRange.Bits() < c.Subnet.Bits() {
			return fmt.Errorf("%w: ip range %q is not a CIDR within subnet %s", ErrInvalid, o.IPRange, c.Subnet)
		}
		c.IPRange = c.IPRange.Masked()
	}
	if o.Gateway != "" {
		if c.Gateway, err = netip.ParseAddr(o.Gateway); err != nil || !c.Subnet.Contains(c.Gateway) ||
			c.Gateway == c.Subnet.Addr() || c.Gateway == broadcast(c.Subnet) {
			return fmt.Errorf("%w: gateway %q is not a host address of subnet %s", ErrInvalid, o.Gateway, c.Subnet)
		}
	}
	return nil
}

// setAux checks the auxiliary addresses aux (at most maxAux, each an
// address of c's subnet) and sets them in c.
func setAux(c *Config, aux map[string]string) error {
	if len(aux) > maxAux {
		return fmt.Errorf("%w: %d auxiliary addresses, at most %d", ErrInvalid, len(aux), maxAux)
	}
	for name, v := range aux {
		a, err := netip.ParseAddr(v)
		if err != nil || !c.Subnet.Contains(a) {
			return fmt.Errorf("%w: auxiliary address %s=%q is not an address of subnet %s", ErrInvalid, name, v, c.Subnet)
		}
		if c.Aux == nil {
			c.Aux = map[string]netip.Addr{}
		}
		c.Aux[name] = a
	}
	return nil
}

// place checks, under the store's lock, that c may join the networks
// there: fewer than MaxNetworks of them, none of its name, its subnet
// (when given) overlapping none of theirs nor reserved. A subnet not
// given is picked from those free, and the gateway defaults to the
// subnet's first address.
func (s *Store) place(c *Config, reserved []netip.Prefix) error {
	all, err := s.List()
	if err != nil {
		return err
	}
	if len(all) >= MaxNetworks {
		return fmt.Errorf("%w: %d networks exist, the most one user may have; remove some (slopbox network prune)", ErrTooMany, len(all))
	}
	used := append([]netip.Prefix{}, reserved...)
	for _, n := range all {
		if n.Name == c.Name {
			return fmt.Errorf("%w: network with name %s already exists", ErrNameUsed, c.Name)
		}
		used = append(used, n.Subnet)
	}
	if c.Given {
		for _, u := range used {
			if u.Overlaps(c.Subnet) {
				return fmt.Errorf("%w: subnet %s overlaps %s, in use", ErrOverlap, c.Subnet, u)
			}
		}
	} else if c.Subnet, err = pick(used); err != nil {
		return err
	}
	if !c.Gateway.IsValid() {
		c.Gateway = c.Subnet.Addr().Next()
	}
	return nil
}

// write records c in the store: written to a temporary file, renamed
// into place, so that no reader sees half of it.
func (s *Store) write(c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, "."+c.ID+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, c.ID+".json")); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// Remove forgets network id; inUse, called under the store's lock, says
// whether something still uses it (then it stays).
func (s *Store) Remove(id string, inUse func(Config) error) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	c, err := s.Get(id)
	if err != nil {
		return err
	}
	if inUse != nil {
		if err := inUse(c); err != nil {
			return err
		}
	}
	err = os.Remove(filepath.Join(s.dir, c.ID+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Docker's default address pools: 172.17.0.0/16 to 172.31.0.0/16 (the
// first is the predefined bridge's in Docker; slopbox leaves it too), then
// 192.168.0.0/16 in /20s.
func pick(used []netip.Prefix) (netip.Prefix, error) {
	var cands []netip.Prefix
	for i := 18; i <= 31; i++ {
		cands = append(cands, netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(i), 0, 0}), 16))
	}
	for i := 0; i < 256; i += 16 {
		cands = append(cands, netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, byte(i), 0}), 20))
	}
next:
	for _, c := range cands {
		for _, u := range used {
			if u.Overlaps(c) {
				continue next
			}
		}
		return c, nil
	}
	return netip.Prefix{}, fmt.Errorf("%w: every default pool (172.18-31.0.0/16, 192.168.0.0/16 in /20s) is in use; give --subnet", ErrNoPool)
}

func broadcast(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= (1 << (32 - p.Bits())) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Hosts is the range endpoints take their addresses from: the IP range if
// one was given, else the subnet; the first and last addresses of the
// subnet and the gateway are never given out.
func (c Config) Hosts() netip.Prefix {
	if c.IPRange.IsValid() {
		return c.IPRange
	}
	return c.Subnet
}

// Usable reports whether a is an address an endpoint may have.
func (c Config) Usable(a netip.Addr) bool {
	if !c.Subnet.Contains(a) || a == c.Subnet.Addr() || a == broadcast(c.Subnet) || a == c.Gateway {
		return false
	}
	for _, x := range c.Aux {
		if x == a {
			return false
		}
	}
	return true
}
