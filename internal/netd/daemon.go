package netd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/reexec"
)

// The helper is a re-execution of the program (handler Handler) in the
// directory of the user's network store. Rootless it is root of a user
// namespace of its own (the user's subordinate range, as the spawn
// server's), and the spawn servers of sandboxes on a user network join
// that namespace, so that the helper may configure their network
// namespaces; as root it runs as root. It runs while a container is on
// one of the user's networks or a client is connected, and exits when
// neither is so.
const (
	Handler  = "slopbox-netd"
	sockName = "netd.sock"
	logName  = "netd.log"
	// Marker is in the helper's environment, with the store's directory.
	Marker = "_SLOPBOX_NETD="

	bridgeName = "br0"
	mtu        = 1500
)

func init() {
	if _, ok := os.LookupEnv(strings.TrimSuffix(Marker, "=")); ok {
		// The helper: its main goroutine keeps the main thread for good
		// (inits run on it, locked), so that no goroutine of onThreadIn,
		// whose threads end in other namespaces, ever runs there: Go
		// parks the main thread of a locked goroutine that ends rather
		// than ending it, and it would hold that namespace.
		runtime.LockOSThread()
	}
	reexec.Register(Handler, func() int {
		if len(os.Args) < 2 {
			fmt.Fprintln(os.Stderr, "slopbox-netd: no directory")
			return 2
		}
		if err := serve(os.Args[1], os.NewFile(4, "ready")); err != nil {
			fmt.Fprintln(os.Stderr, "slopbox-netd:", err)
			return 1
		}
		return 0
	})
}

// Endpoint is one container's attachment to a network.
type Endpoint struct {
	Network     string     `json:"network"`
	NetworkID   string     `json:"network_id"`
	EndpointID  string     `json:"endpoint_id"`
	IPAddress   netip.Addr `json:"ip"`
	IPPrefixLen int        `json:"prefix_len"`
	Gateway     netip.Addr `json:"gateway"`
	MacAddress  string     `json:"mac"`
	Interface   string     `json:"interface"`
	Aliases     []string   `json:"aliases,omitempty"`
	DNSNames    []string   `json:"dns_names,omitempty"`
	Internal    bool       `json:"internal,omitempty"`
}

// request is one message to the helper.
type request struct {
	Op        string   `json:"op"` // ping, userns, attach, detach
	Network   Config   `json:"network,omitempty"`
	NetworkID string   `json:"network_id,omitempty"`
	Container string   `json:"container,omitempty"` // its id
	Names     []string `json:"names,omitempty"`     // name, aliases, short id: what DNS answers for it
	Aliases   []string `json:"aliases,omitempty"`
	Pid       int      `json:"pid,omitempty"`
	PidStart  uint64   `json:"pid_start,omitempty"`
	IPv4      string   `json:"ipv4,omitempty"`
}

type response struct {
	Error    string    `json:"error,omitempty"`
	Class    string    `json:"class,omitempty"` // invalid, conflict, notfound
	Endpoint *Endpoint `json:"endpoint,omitempty"`
	Pid      int       `json:"pid,omitempty"`
}

type endpoint struct {
	Endpoint
	container string
	pid       int
	start     uint64
	hostIf    string
	names     []string
}

type network struct {
	cfg  Config
	ns   netns.NsHandle
	h    *netlink.Handle
	br   int // the bridge's index
	udp  *net.UDPConn
	tcp  *net.TCPListener
	eps  map[string]*endpoint // by container id
	used map[netip.Addr]bool
}

type daemon struct {
	dir      string
	mu       sync.Mutex
	nets     map[string]*network // by network id
	conns    int
	upstream []string // the host's name servers
	done     chan struct{}
	once     sync.Once
}

func serve(dir string, ready *os.File) error {
	d := &daemon{dir: dir, nets: map[string]*network{}, done: make(chan struct{}), upstream: hostServers()}
	sock := filepath.Join(dir, sockName)
	os.Remove(sock)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	if ready != nil {
		ready.Write([]byte{1})
		ready.Close()
	}
	go d.watch()
	go func() {
		<-d.done
		// Only the socket that is still ours: a successor may have
		// bound the name since.
		if fi, err := os.Stat(sock); err == nil {
			if lf, err := ln.File(); err == nil {
				var st unix.Stat_t
				if unix.Fstat(int(lf.Fd()), &st) == nil && st.Ino == fi.Sys().(*unix.Stat_t).Ino {
					os.Remove(sock)
				}
				lf.Close()
			}
		}
		ln.Close()
	}()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			select {
			case <-d.done:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			continue
		}
		d.mu.Lock()
		select {
		case <-d.done:
			// Idle since: this helper is exiting. The client finds the
			// socket gone and starts the next helper.
			d.mu.Unlock()
			c.Close()
			return nil
		default:
		}
		d.conns++
		d.mu.Unlock()
		go d.handle(c)
	}
}

// idle ends the helper when no container is on a network and no client is
// connected: called with d.mu held.
func (d *daemon) idleLocked() {
	if len(d.nets) == 0 && d.conns == 0 {
		d.once.Do(func() {
			// The socket goes first, so that a client that finds it
			// finds a helper that serves it.
			os.Remove(filepath.Join(d.dir, sockName))
			close(d.done)
		})
	}
}

func (d *daemon) handle(c *net.UnixConn) {
	defer func() {
		c.Close()
		d.mu.Lock()
		d.conns--
		d.idleLocked()
		d.mu.Unlock()
	}()
	buf := make([]byte, 1<<16)
	for {
		n, _, flags, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return
		}
		var req request
		var resp response
		var fds []int
		if flags&unix.MSG_TRUNC != 0 {
			resp = response{Error: fmt.Sprintf("bad request: more than %d bytes", len(buf)), Class: "invalid"}
		} else if err := json.Unmarshal(buf[:n], &req); err != nil {
			resp = response{Error: "bad request: " + err.Error(), Class: "invalid"}
		} else {
			switch req.Op {
			case "ping":
				resp.Pid = os.Getpid()
			case "userns":
				f, err := os.Open("/proc/self/ns/user")
				if err != nil {
					resp = errResponse(err)
					break
				}
				defer f.Close()
				fds = []int{int(f.Fd())}
				resp.Pid = os.Getpid()
			case "attach":
				ep, err := d.attach(req)
				if err != nil {
					resp = errResponse(err)
				} else {
					resp.Endpoint = &ep
				}
			case "detach":
				d.detach(req.NetworkID, req.Container)
			default:
				resp = response{Error: "unknown op " + req.Op, Class: "invalid"}
			}
		}
		b, _ := json.Marshal(resp)
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
			return
		}
	}
}

type classedError struct {
	class string
	err   error
}

func (e *classedError) Error() string { return e.err.Error() }
func (e *classedError) Unwrap() error { return e.err }

func errResponse(err error) response {
	r := response{Error: err.Error()}
	var ce *classedError
	switch {
	case errors.As(err, &ce):
		r.Class = ce.class
	case errors.Is(err, ErrInvalid):
		r.Class = "invalid"
	case errors.Is(err, ErrNotFound):
		r.Class = "notfound"
	}
	return r
}

// watch forgets the endpoints of containers whose PID 1 has gone (their
// namespace, and with it the veth pair, went with it), and a network's
// namespace once no container is on it.
func (d *daemon) watch() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		d.mu.Lock()
		for _, n := range d.nets {
			for id, ep := range n.eps {
				if st, ok := procStart(ep.pid); !ok || st != ep.start {
					d.dropLocked(n, id)
				}
			}
		}
		d.idleLocked()
		d.mu.Unlock()
	}
}

func (d *daemon) detach(networkID, container string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, n := range d.nets {
		if networkID != "" && id != networkID {
			continue
		}
		if _, ok := n.eps[container]; ok {
			d.dropLocked(n, container)
		}
	}
	d.idleLocked()
}

// dropLocked removes one endpoint, and the network's namespace when it was
// the last.
func (d *daemon) dropLocked(n *network, container string) {
	ep := n.eps[container]
	if ep == nil {
		return
	}
	if l, err := n.h.LinkByName(ep.hostIf); err == nil {
		n.h.LinkDel(l) // its peer in the container, and its forwarding entry, go with it
	}
	n.h.NeighDel(&netlink.Neigh{LinkIndex: n.br, Family: netlink.FAMILY_V4, IP: ep.IPAddress.AsSlice()})
	delete(n.used, ep.IPAddress)
	delete(n.eps, container)
	if len(n.eps) == 0 {
		n.close()
		delete(d.nets, n.cfg.ID)
	}
}

func (n *network) close() {
	if n.udp != nil {
		n.udp.Close()
	}
	if n.tcp != nil {
		n.tcp.Close()
	}
	if n.h != nil {
		n.h.Close()
	}
	n.ns.Close()
}

// onThreadIn runs f on a thread of its own in namespace ns (or, with
// ns -1, in a new network namespace, which f is given) and returns f's
// error. The thread is never reused: it ends with its goroutine still
// locked, because rootless the helper may not return a thread to the
// host's namespace (it has no capability there). What f made there (a
// netlink handle, listening sockets) stays in that namespace when used
// from any thread.
func onThreadIn(ns netns.NsHandle, f func(netns.NsHandle) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		if ns == -1 {
			var err error
			if ns, err = netns.New(); err != nil {
				errc <- fmt.Errorf("new network namespace: %w", err)
				return
			}
		} else if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter the container's network namespace: %w", err)
			return
		}
		errc <- f(ns)
	}()
	return <-errc
}

// handleIn is a netlink handle in namespace ns.
func handleIn(ns netns.NsHandle) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := onThreadIn(ns, func(netns.NsHandle) error {
		var err error
		h, err = netlink.NewHandle()
		return err
	})
	return h, err
}

// ensureLocked returns cfg's namespace, making it on the first attach: a
// new network namespace with loopback up, the bridge at the gateway's
// address, and the DNS server on it.
func (d *daemon) ensureLocked(cfg Config) (*network, error) {
	if n := d.nets[cfg.ID]; n != nil {
		return n, nil
	}
	n := &network{cfg: cfg, eps: map[string]*endpoint{}, used: map[netip.Addr]bool{}, ns: -1}
	err := onThreadIn(-1, func(ns netns.NsHandle) error {
		n.ns = ns
		return n.setUp()
	})
	if err != nil {
		n.close()
		return nil, fmt.Errorf("set up network %s: %w", cfg.Name, err)
	}
	go d.serveDNS(n)
	d.nets[cfg.ID] = n
	return n, nil
}

// setUp runs on a thread in n's new namespace.
func (n *network) setUp() error {
	h, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	n.h = h
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridgeName, MTU: mtu}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	l, err := h.LinkByName(bridgeName)
	if err != nil {
		return err
	}
	n.br = l.Attrs().Index
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: n.cfg.Gateway.AsSlice(), Mask: net.CIDRMask(n.cfg.Subnet.Bits(), 32)}}
	if err := h.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("bridge address %s: %w", n.cfg.Gateway, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return err
	}
	ga := &net.UDPAddr{IP: n.cfg.Gateway.AsSlice(), Port: 53}
	if n.udp, err = net.ListenUDP("udp4", ga); err != nil {
		return fmt.Errorf("DNS server: %w", err)
	}
	if n.tcp, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: ga.IP, Port: 53}); err != nil {
		return fmt.Errorf("DNS server: %w", err)
	}
	return nil
}

func (d *daemon) attach(req request) (Endpoint, error) {
	if req.Container == "" || req.Pid <= 0 || req.Network.ID == "" {
		return Endpoint{}, &classedError{"invalid", errors.New("attach: container, pid and network are required")}
	}
	// The container's namespace, by its PID 1, checked to be the one the
	// caller means (its start time).
	cns, err := netns.GetFromPath("/proc/" + strconv.Itoa(req.Pid) + "/ns/net")
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach: the container's network namespace: %w", err)
	}
	defer cns.Close()
	if st, ok := procStart(req.Pid); !ok || st != req.PidStart {
		return Endpoint{}, &classedError{"conflict", fmt.Errorf("attach: container %s is not running", req.Container)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := d.nets[req.Network.ID]; n != nil {
		if old := n.eps[req.Container]; old != nil {
			if old.pid == req.Pid && old.start == req.PidStart {
				return Endpoint{}, &classedError{"conflict", fmt.Errorf("endpoint with name %s already exists in network %s", firstOf(req.Names, req.Container), n.cfg.Name)}
			}
			d.dropLocked(n, req.Container) // a stale one of an earlier start
		}
	}
	n, err := d.ensureLocked(req.Network)
	if err != nil {
		return Endpoint{}, err
	}
	ep, err := d.attachLockedIn(n, req, cns)
	if err != nil && len(n.eps) == 0 {
		n.close()
		delete(d.nets, n.cfg.ID)
	}
	return ep, err
}

func firstOf(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

func (d *daemon) attachLockedIn(n *network, req request, cns netns.NsHandle) (Endpoint, error) {
	ip, err := n.allocate(req.IPv4)
	if err != nil {
		return Endpoint{}, err
	}
	ch, err := handleIn(cns)
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach: %w", err)
	}
	defer ch.Close()
	links, err := ch.LinkList()
	if err != nil {
		return Endpoint{}, err
	}
	names := map[string]bool{}
	for _, l := range links {
		names[l.Attrs().Name] = true
	}
	ifname := ""
	for i := 0; ; i++ {
		if ifname = "eth" + strconv.Itoa(i); !names[ifname] {
			break
		}
	}
	a := ip.As4()
	mac := net.HardwareAddr{0x02, 0x42, a[0], a[1], a[2], a[3]}
	var rnd [4]byte
	if _, err := randRead(rnd[:]); err != nil {
		return Endpoint{}, err
	}
	hostIf := fmt.Sprintf("veth%x", rnd)
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: hostIf, MasterIndex: n.br, MTU: mtu},
		PeerName:         ifname,
		PeerHardwareAddr: mac,
		PeerNamespace:    netlink.NsFd(cns),
	}
	if err := n.h.LinkAdd(veth); err != nil {
		return Endpoint{}, fmt.Errorf("attach: veth pair: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			if l, err := n.h.LinkByName(hostIf); err == nil {
				n.h.LinkDel(l)
			}
		}
	}()
	hl, err := n.h.LinkByName(hostIf)
	if err == nil {
		err = pin(n, hl, ip, mac)
	}
	if err == nil {
		err = n.h.LinkSetUp(hl)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach: %w", err)
	}
	cl, err := ch.LinkByName(ifname)
	if err != nil {
		return Endpoint{}, fmt.Errorf("attach: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(n.cfg.Subnet.Bits(), 32)}}
	if err := ch.AddrAdd(cl, addr); err != nil {
		return Endpoint{}, fmt.Errorf("attach: address %s: %w", ip, err)
	}
	if err := ch.LinkSetUp(cl); err != nil {
		return Endpoint{}, fmt.Errorf("attach: %w", err)
	}
	if lo, err := ch.LinkByName("lo"); err == nil {
		ch.LinkSetUp(lo)
	}
	ep := &endpoint{
		Endpoint: Endpoint{
			Network: n.cfg.Name, NetworkID: n.cfg.ID, EndpointID: endpointID(n.cfg.ID, req.Container, req.PidStart),
			IPAddress: ip, IPPrefixLen: n.cfg.Subnet.Bits(), Gateway: n.cfg.Gateway, MacAddress: mac.String(),
			Interface: ifname, Aliases: req.Aliases, DNSNames: req.Names, Internal: n.cfg.Internal,
		},
		container: req.Container, pid: req.Pid, start: req.PidStart, hostIf: hostIf,
	}
	for _, nm := range req.Names {
		ep.names = append(ep.names, strings.ToLower(strings.TrimSuffix(nm, ".")))
	}
	n.eps[req.Container] = ep
	n.used[ip] = true
	ok = true
	return ep.Endpoint, nil
}

// pin ties the container's address and MAC to its bridge port: the port
// learns no address (a frame with another container's MAC as its source
// cannot take that container's traffic), a static forwarding entry sends
// the MAC's frames to this port only, and the bridge's neighbour entry for
// the address is permanent (no ARP a container sends changes where the
// helper's replies go). So a container that sends with another's address
// as its source never gets the answers: the DNS server, which tells
// askers apart by their address, answers the owner.
func pin(n *network, port netlink.Link, ip netip.Addr, mac net.HardwareAddr) error {
	if err := n.h.LinkSetLearning(port, false); err != nil {
		return fmt.Errorf("bridge port without learning: %w", err)
	}
	fdb := &netlink.Neigh{LinkIndex: port.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_MASTER, State: netlink.NUD_NOARP, HardwareAddr: mac}
	if err := n.h.NeighAdd(fdb); err != nil {
		return fmt.Errorf("static forwarding entry: %w", err)
	}
	nb := &netlink.Neigh{LinkIndex: n.br, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}
	if err := n.h.NeighSet(nb); err != nil {
		return fmt.Errorf("static neighbour entry: %w", err)
	}
	return nil
}

func endpointID(network, container string, start uint64) string {
	return hashHex(network + " " + container + " " + strconv.FormatUint(start, 10))
}

// allocate gives the asked-for address, or the next free one.
func (n *network) allocate(want string) (netip.Addr, error) {
	if want != "" {
		a, err := netip.ParseAddr(want)
		if err != nil || !a.Is4() {
			return netip.Addr{}, &classedError{"invalid", fmt.Errorf("invalid IPv4 address %q", want)}
		}
		if !n.cfg.Usable(a) {
			return netip.Addr{}, &classedError{"invalid", fmt.Errorf("address %s is not a host address of network %s's subnet %s", a, n.cfg.Name, n.cfg.Subnet)}
		}
		if n.used[a] {
			return netip.Addr{}, &classedError{"conflict", fmt.Errorf("address %s is already in use on network %s", a, n.cfg.Name)}
		}
		return a, nil
	}
	r := n.cfg.Hosts()
	for a, i := r.Addr(), 0; r.Contains(a) && i < len(n.used)+4; a = a.Next() {
		if n.cfg.Usable(a) {
			if !n.used[a] {
				return a, nil
			}
			i++
		}
	}
	return netip.Addr{}, &classedError{"conflict", fmt.Errorf("no address left on network %s (%s)", n.cfg.Name, r)}
}

// procStart is a process's start time (field 22 of /proc/PID/stat).
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// hostServers are the host's name servers, for names no container has.
func hostServers() []string {
	b, _ := os.ReadFile("/etc/resolv.conf")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a, 53).String())
			}
		}
	}
	return out
}
