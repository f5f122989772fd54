package dockercompat

import (
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"

	"github.com/slopbox/slopbox/backend"
)

// ParsePort parses docker run's -p/--publish value:
// [HOSTIP:][HOSTPORT:]CONTAINERPORT[/tcp|/udp]. A missing or empty host
// port is 0 (the kernel picks one); an IPv6 host address goes in brackets.
// Port ranges are refused.
func ParsePort(s string) (backend.PortMapping, error) {
	bad := func(why string) (backend.PortMapping, error) {
		return backend.PortMapping{}, backend.InvalidValue("-p %q: %s; want [HOSTIP:][HOSTPORT:]CONTAINERPORT[/tcp|/udp], e.g. 8080:80 or 127.0.0.1:8080:80/tcp", s, why)
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
	return backend.PortMapping{HostIP: hostIP, HostPort: hp, ContainerPort: cp, Protocol: proto}, nil
}

// ParseVolume reads docker's -v HOST:CONTAINER[:OPTIONS] (read-write by
// default; options ro, rw, U, and z/Z, which mean nothing without SELinux),
// -v VOLUME:CONTAINER[:OPTIONS] (a named volume) and -v CONTAINER (an
// anonymous volume). The CLI's -v and the Engine API's HostConfig.Binds
// both use it.
func ParseVolume(v string) (backend.Mount, error) {
	parts := strings.Split(v, ":")
	if len(parts) == 1 && path.IsAbs(v) {
		return backend.Mount{Target: v, AnonymousVolume: true}, nil
	}
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return backend.Mount{}, backend.InvalidValue("-v %q: want HOST:CONTAINER[:ro|rw], VOLUME:CONTAINER[:ro|rw] or CONTAINER", v)
	}
	// A missing host directory is created, as Docker's -v and Binds do.
	m := backend.Mount{Source: parts[0], Target: parts[1], CreateMissing: true}
	if IsVolumeName(m.Source) {
		m.Source, m.Volume, m.CreateMissing = "", parts[0], false
	}
	if len(parts) == 3 {
		for _, o := range strings.Split(parts[2], ",") {
			switch o {
			case "ro":
				m.ReadOnly = true
			case "rw", "z", "Z": // no SELinux labels to set here, as on a host without SELinux
			case "U":
				m.HandOver = true
			default:
				return backend.Mount{}, backend.InvalidValue("-v %q: option %q is not supported (ro, rw, U)", v, o)
			}
		}
	}
	return m, nil
}

// IsVolumeName reports whether a -v source names a volume rather than a
// host path, as Docker tells them apart: a name has no slash and does not
// start with a dot.
func IsVolumeName(src string) bool {
	return src != "" && !strings.Contains(src, "/") && !strings.HasPrefix(src, ".")
}
