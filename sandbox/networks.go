package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/netd"
)

// User-defined networks (package netd): a sandbox on one gets, when its
// PID 1 starts, an interface on the network's bridge from the user's
// network helper; its outbound access is its own slirp4netns, as with
// --network bridge, unless every network it is on is internal.
// Rootless, the helper may configure the sandbox's namespace only when the
// sandbox lives in the helper's user namespace: such a sandbox's spawn
// server joins it (netSpawner) instead of making one.

// netAttach is one user network of a sandbox, as recorded.
type netAttach struct {
	ID       string     `json:"id"`
	Name     string     `json:"name"`
	Aliases  []string   `json:"aliases,omitempty"`
	IPv4     string     `json:"ipv4,omitempty"` // asked for
	Gateway  netip.Addr `json:"gateway"`
	Internal bool       `json:"internal,omitempty"`
	// Endpoint is its interface while the sandbox runs (the last start's).
	Endpoint *netd.Endpoint `json:"endpoint,omitempty"`
}

// NetworkInfo is a user network of a sandbox, for inspect.
type NetworkInfo struct {
	ID, Name string
	Aliases  []string
	IPv4     string // asked for
	// Endpoint is set while the sandbox runs.
	Endpoint *netd.Endpoint
}

// Networks is the store of the user's networks.
func (b *Backend) Networks() *netd.Store {
	return netd.OpenStore(filepath.Join(b.root, "networks"))
}

// bridgeSubnet is the predefined bridge network's (slirp4netns's).
var bridgeSubnet = netip.MustParsePrefix("10.0.2.0/24")

// ReservedSubnets are the subnets a user network may not overlap.
func ReservedSubnets() []netip.Prefix { return []netip.Prefix{bridgeSubnet} }

// resolveNetworks turns a spec's network and attachments into the
// sandbox's namespace mode and its user networks.
func (b *Backend) resolveNetworks(spec backend.SpawnSpec) (mode string, nets []netAttach, err error) {
	mode = spec.Network
	atts := slices.Clone(spec.Networks)
	if !backend.IsPredefinedNetwork(mode) {
		atts = append([]backend.NetworkAttachment{{Network: mode}}, atts...)
		mode = ""
	}
	if mode == "" || mode == "default" {
		mode = backend.NetworkNone
		if len(atts) == 0 {
			return mode, nil, nil
		}
	}
	if len(atts) == 0 {
		return mode, nil, nil
	}
	if mode == backend.NetworkHost || (mode == backend.NetworkNone && spec.Network != "" && backend.IsPredefinedNetwork(spec.Network)) {
		return "", nil, backend.InvalidValue("container cannot be connected to network %s and to other networks (--network %s stands alone)", mode, mode)
	}
	outbound := mode == backend.NetworkBridge
	store := b.Networks()
	for _, a := range atts {
		if backend.IsPredefinedNetwork(a.Network) {
			return "", nil, backend.InvalidValue("network %s: a predefined network is a mode (--network %s), not an attachment besides another network", a.Network, a.Network)
		}
		cfg, err := store.Get(a.Network)
		if err != nil {
			return "", nil, backendError(err)
		}
		for _, al := range a.Aliases {
			if !dnsName(al) {
				return "", nil, backend.InvalidValue("network alias %q is not a DNS name (labels of letters, digits, '-' and '_', each at most 63 characters, separated by dots)", al)
			}
		}
		i := slices.IndexFunc(nets, func(n netAttach) bool { return n.ID == cfg.ID })
		if i >= 0 {
			// The same network twice (compose's EndpointsConfig beside
			// --network): one endpoint, the aliases of both.
			for _, al := range a.Aliases {
				if !slices.Contains(nets[i].Aliases, al) {
					nets[i].Aliases = append(nets[i].Aliases, al)
				}
			}
			if a.IPv4 != "" {
				nets[i].IPv4 = a.IPv4
			}
			continue
		}
		if a.IPv4 != "" {
			ip, err := netip.ParseAddr(a.IPv4)
			if err != nil || !cfg.Usable(ip) {
				return "", nil, backend.InvalidValue("address %q is not a host address of network %s's subnet %s", a.IPv4, cfg.Name, cfg.Subnet)
			}
		}
		nets = append(nets, netAttach{ID: cfg.ID, Name: cfg.Name, Aliases: a.Aliases, IPv4: a.IPv4, Gateway: cfg.Gateway, Internal: cfg.Internal})
		outbound = outbound || !cfg.Internal
	}
	for _, n := range nets {
		if len(n.Aliases) > maxAliases {
			return "", nil, backend.InvalidValue("network %s: %d aliases, at most %d", n.Name, len(n.Aliases), maxAliases)
		}
	}
	if len(nets) > 32 {
		return "", nil, backend.InvalidValue("a container may be on at most 32 networks")
	}
	mode = backend.NetworkNone
	if outbound {
		mode = backend.NetworkBridge
	}
	return mode, nets, nil
}

// maxAliases bounds a container's aliases on one network.
const maxAliases = 64

// dnsName reports whether s is a name the network's DNS server can answer:
// dot-separated labels of letters, digits, '-' and '_' (compose's service
// names may have them), each 1 to 63 long, 253 in all.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// backendError gives netd's errors their backend class.
func backendError(err error) error {
	switch {
	case errors.Is(err, netd.ErrNotFound):
		return err
	case errors.Is(err, netd.ErrInvalid):
		return backend.InvalidValue("%v", err)
	}
	return err
}

// netClient is this Backend's connection to the network helper (kept: it
// keeps the helper, and rootless its user namespace, while the Backend's
// joined spawn server lives).
//
// One caller at a time checks and replaces it (netdMu): two sandboxes
// created at once (compose's services) would otherwise each connect, and
// the second would close the connection the first is using.
func (b *Backend) netClient() (*netd.Client, error) {
	b.netdMu.Lock()
	defer b.netdMu.Unlock()
	b.mu.Lock()
	c := b.netd
	b.mu.Unlock()
	if c != nil {
		if c.Alive() {
			return c, nil
		}
		c.Close() // its helper is gone: nobody can use it
	}
	c, err := netd.Connect(b.Networks().Dir(), b.store.Mapping())
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.netd = c
	b.mu.Unlock()
	return c, nil
}

// netSpawner is the spawn server for a sandbox on a user network: as
// root the usual one (root's helper may configure any namespace);
// rootless one that joined the network helper's user namespace, started
// again when the helper is a new one.
func (b *Backend) netSpawner(program string) (*spawner, error) {
	if os.Geteuid() == 0 {
		return b.spawnerFor(program), nil
	}
	b.netSpawnMu.Lock()
	defer b.netSpawnMu.Unlock()
	c, err := b.netClient()
	if err != nil {
		return nil, fmt.Errorf("user networks: %w", err)
	}
	b.mu.Lock()
	s := b.netSpawners[program]
	b.mu.Unlock()
	if s != nil && s.netdPid == c.Pid {
		return s, nil
	}
	ns, err := c.UserNS()
	if err != nil {
		return nil, fmt.Errorf("user networks: %w", err)
	}
	ns2 := &spawner{program: program, join: ns, joined: true, netdPid: c.Pid}
	b.mu.Lock()
	if b.netSpawners == nil {
		b.netSpawners = map[string]*spawner{}
	}
	old := b.netSpawners[program]
	b.netSpawners[program] = ns2
	b.mu.Unlock()
	if old != nil {
		old.close()
	}
	return ns2, nil
}

// attachNetworks gives the sandbox whose PID 1 is pid its interfaces.
func (b *Backend) attachNetworks(rec *record, pid int) error {
	if len(rec.Nets) == 0 {
		return nil
	}
	c, err := b.netClient()
	if err != nil {
		return err
	}
	store := b.Networks()
	for i := range rec.Nets {
		n := &rec.Nets[i]
		n.Endpoint = nil
		cfg, err := store.Get(n.ID)
		if err != nil {
			return fmt.Errorf("network %s was removed since the container was created: %w", n.Name, err)
		}
		ep, err := c.Attach(netd.AttachOptions{Network: cfg, Container: rec.ID, Pid: pid, PidStart: rec.PidStart,
			Names: dnsNames(rec, n.Aliases), Aliases: n.Aliases, IPv4: n.IPv4})
		if err != nil {
			return fmt.Errorf("network %s: %w", cfg.Name, err)
		}
		n.Endpoint = &ep
	}
	return nil
}

// dnsNames are the names a network's DNS answers for the sandbox:
// Docker's DNSNames (its name, the aliases, its short id).
func dnsNames(rec *record, aliases []string) []string {
	out := []string{rec.Name}
	for _, a := range aliases {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if len(rec.ID) >= 12 {
		out = append(out, rec.ID[:12])
	}
	return out
}

// NetworkUsers are the running sandboxes on network id, by sandbox id.
func (b *Backend) NetworkUsers(id string) (map[string]Info, error) {
	recs, _, err := b.state.list()
	if err != nil {
		return nil, err
	}
	out := map[string]Info{}
	for _, rec := range recs {
		if rec.Broken != "" {
			continue
		}
		for _, n := range rec.Nets {
			if n.ID == id && rec.Pid > 0 && rec.running() && !rec.Reserved {
				out[rec.ID] = b.info(rec)
			}
		}
	}
	return out, nil
}

// ConnectNetwork attaches sandbox ref to network, now if it runs (root:
// any sandbox; rootless: one that was made on a user network, whose
// namespace the helper may configure) and at every start.
func (b *Backend) ConnectNetwork(ref, network string, aliases []string, ipv4 string) error {
	s, err := b.Open(ref)
	if err != nil {
		return err
	}
	_, nets, err := b.resolveNetworks(backend.SpawnSpec{Network: backend.NetworkBridge, Networks: []backend.NetworkAttachment{{Network: network, Aliases: aliases, IPv4: ipv4}}})
	if err != nil {
		return err
	}
	na := nets[0]
	return b.updateRecord(s.rec.ID, func(rec *record) error {
		if slices.ContainsFunc(rec.Nets, func(n netAttach) bool { return n.ID == na.ID }) {
			return fmt.Errorf("%w: endpoint with name %s already exists in network %s", netd.ErrConflict, rec.Name, na.Name)
		}
		if rec.Network == backend.NetworkHost {
			return backend.InvalidValue("container %s shares the host's network: it cannot be connected to %s", rec.Name, na.Name)
		}
		// A running sandbox, or a created one whose PID 1 was started
		// ahead (its start only runs the command): the interface now.
		if rec.Pid > 0 && rec.alive() {
			if os.Geteuid() != 0 && !rec.NetJoined {
				return backend.InvalidValue("container %s was started without a user network: rootless, only a container started on one (--network NAME) can be connected to another while its PID 1 runs; stop it first (the connection then takes effect at its start), or create it with --network %s", rec.Name, na.Name)
			}
			c, err := b.netClient()
			if err != nil {
				return err
			}
			cfg, err := b.Networks().Get(na.ID)
			if err != nil {
				return backendError(err)
			}
			ep, err := c.Attach(netd.AttachOptions{Network: cfg, Container: rec.ID, Pid: rec.Pid, PidStart: rec.PidStart,
				Names: dnsNames(rec, na.Aliases), Aliases: na.Aliases, IPv4: na.IPv4})
			if err != nil {
				return err
			}
			na.Endpoint = &ep
		}
		// A failure from here on undoes what was done for this connect:
		// its interface, and the slirp4netns it started (nothing records
		// either, since the record is not written).
		slirp := false
		undo := func(err error) error {
			if na.Endpoint != nil {
				if c, cerr := b.netClient(); cerr == nil {
					c.Detach(na.ID, rec.ID)
				}
			}
			if slirp {
				killMarked(helperMarker + rec.ID)
				os.Remove(filepath.Join(b.state.sandboxDir(rec.ID), netHelperFile))
			}
			return err
		}
		if rec.Network == backend.NetworkNone && !na.Internal {
			// Outbound access: its own slirp4netns, now if PID 1 runs (a
			// created container's too: compose creates on one network,
			// connects the others, then starts), else from its start.
			if na.Endpoint != nil {
				wait, err := b.startNetHelper(rec, rec.Pid)
				if err == nil {
					err = wait() // on failure it has killed the helper itself
				}
				if err != nil {
					return undo(fmt.Errorf("outbound access for network %s: %w", na.Name, err))
				}
				slirp = true
			}
			rec.Network = backend.NetworkBridge
		}
		first := len(rec.Nets) == 0
		rec.Nets = append(rec.Nets, na)
		if first && na.Endpoint != nil {
			// As Docker's resolver starts when a running container joins
			// its first user network: its names resolve now. If that
			// fails, the connection is undone: nothing is half-made.
			if err := b.rewriteResolvConf(rec); err != nil {
				return undo(err)
			}
		}
		return nil
	})
}

// rewriteResolvConf writes a running sandbox's /etc/resolv.conf again, in
// place (it is a bind-mounted file, so a new file would not be seen), for
// its networks now. The file is in the sandbox's directory on the host,
// which the sandbox cannot write: only the file itself is mounted into it.
// A resolv.conf of the caller's own mounts is left alone.
func (b *Backend) rewriteResolvConf(rec *record) error {
	if coveredBy(rec.Mounts, "/etc/resolv.conf") {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(b.state.sandboxDir(rec.ID), etcDir, "resolv.conf"), os.O_WRONLY|os.O_TRUNC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("resolv.conf for network %s: %w", rec.Nets[len(rec.Nets)-1].Name, err)
	}
	defer f.Close()
	_, err = f.Write(resolvConf(rec))
	return err
}

// DisconnectNetwork detaches sandbox ref from network.
func (b *Backend) DisconnectNetwork(ref, network string) error {
	s, err := b.Open(ref)
	if err != nil {
		return err
	}
	cfg, err := b.Networks().Get(network)
	if err != nil {
		return backendError(err)
	}
	return b.updateRecord(s.rec.ID, func(rec *record) error {
		i := slices.IndexFunc(rec.Nets, func(n netAttach) bool { return n.ID == cfg.ID })
		if i < 0 {
			return backend.InvalidValue("container %s is not connected to network %s", rec.Name, cfg.Name)
		}
		if c, ok := netd.Running(b.Networks().Dir()); ok {
			c.Detach(cfg.ID, rec.ID)
			c.Close()
		}
		rec.Nets = slices.Delete(rec.Nets, i, i+1)
		return nil
	})
}

// networkInfos are rec's user networks for inspect.
func networkInfos(rec *record, running bool) []NetworkInfo {
	var out []NetworkInfo
	for _, n := range rec.Nets {
		ni := NetworkInfo{ID: n.ID, Name: n.Name, Aliases: n.Aliases, IPv4: n.IPv4}
		if running {
			ni.Endpoint = n.Endpoint
		}
		out = append(out, ni)
	}
	return out
}

// updateRecord changes sandbox id's record under the state lock.
func (b *Backend) updateRecord(id string, f func(*record) error) error {
	l, err := b.state.lockNew()
	if err != nil {
		return err
	}
	defer l.Unlock()
	rec, err := b.state.find(id)
	if err != nil {
		return err
	}
	if rec.Broken != "" {
		return fmt.Errorf("sandbox %s is broken (%s): remove it with `slopbox rm -f %s`", id, rec.Broken, id)
	}
	if err := f(rec); err != nil {
		return err
	}
	return b.state.write(rec)
}
