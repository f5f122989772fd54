package backend

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPortHostIP is where a published port listens when no host address
// is given: the host's loopback, not every interface as Docker's default
// (a sandbox's server is for the harness on this host).
const DefaultPortHostIP = "127.0.0.1"

// ParsePort parses docker run's -p/--publish value:
// [HOSTIP:][HOSTPORT:]CONTAINERPORT[/tcp|/udp]. A missing or empty host
// port is 0 (the kernel picks one); an IPv6 host address goes in brackets.
// Port ranges are refused.
func ParsePort(s string) (PortMapping, error) {
	bad := func(why string) (PortMapping, error) {
		return PortMapping{}, InvalidValue("-p %q: %s; want [HOSTIP:][HOSTPORT:]CONTAINERPORT[/tcp|/udp], e.g. 8080:80 or 127.0.0.1:8080:80/tcp", s, why)
	}
	rest, proto, _ := strings.Cut(s, "/")
	switch proto {
	case "":
		proto = "tcp"
	case "tcp", "udp":
	default:
		return bad(fmt.Sprintf("protocol %q is neither tcp nor udp", proto))
	}
	var hostIP string
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return bad("an IPv6 host address in brackets must be followed by :")
		}
		hostIP, rest = rest[1:end], rest[end+2:]
		if a, err := netip.ParseAddr(hostIP); err != nil || !a.Is6() {
			return bad(fmt.Sprintf("%q is not an IPv6 address", hostIP))
		}
	}
	parts := strings.Split(rest, ":")
	var hostPort, containerPort string
	switch {
	case len(parts) == 1:
		containerPort = parts[0]
	case len(parts) == 2:
		hostPort, containerPort = parts[0], parts[1]
	case len(parts) == 3 && hostIP == "":
		hostIP, hostPort, containerPort = parts[0], parts[1], parts[2]
		if a, err := netip.ParseAddr(hostIP); err != nil || !a.Is4() {
			return bad(fmt.Sprintf("%q is not an IPv4 address (an IPv6 one goes in brackets)", hostIP))
		}
	default:
		return bad("too many colons")
	}
	if strings.Contains(hostPort, "-") || strings.Contains(containerPort, "-") {
		return bad("port ranges are not supported: publish each port")
	}
	cp, err := strconv.Atoi(containerPort)
	if err != nil || cp < 1 || cp > 65535 {
		return bad(fmt.Sprintf("container port %q is not 1-65535", containerPort))
	}
	hp := 0
	if hostPort != "" {
		if hp, err = strconv.Atoi(hostPort); err != nil || hp < 0 || hp > 65535 {
			return bad(fmt.Sprintf("host port %q is not 0-65535", hostPort))
		}
	}
	return PortMapping{HostIP: hostIP, HostPort: hp, ContainerPort: cp, Protocol: proto}, nil
}

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
