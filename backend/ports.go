package backend

import (
	"fmt"
	"net/netip"
	"strconv"
)

// DefaultPortHostIP is where a published port listens when no host address
// is given: the host's loopback, not every interface as Docker's default
// (a sandbox's server is for the harness on this host).
const DefaultPortHostIP = "127.0.0.1"

// String is the mapping as docker ps shows it: 127.0.0.1:8080->80/tcp.
func (p PortMapping) String() string {
	ip := p.HostIP
	if ip == "" {
		ip = DefaultPortHostIP
	}
	proto := p.Protocol
	if proto == "" {
		proto = "tcp"
	}
	host := ip + ":" + strconv.Itoa(p.HostPort)
	if a, err := netip.ParseAddr(ip); err == nil {
		host = netip.AddrPortFrom(a, uint16(p.HostPort)).String()
	}
	return fmt.Sprintf("%s->%d/%s", host, p.ContainerPort, proto)
}
