package oci

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"strings"
)

// Name resolution files a sandbox gets bind-mounted over the image's
// (which stay untouched), as Docker writes them: EtcHosts, EtcHostname and
// ResolvConf. Pure functions of their inputs; the caller reads the host's
// files and writes the results.

// HostEntry is one extra /etc/hosts line (docker run --add-host NAME:IP).
type HostEntry struct {
	Name string
	IP   netip.Addr
	// Gateway: the IP was Docker's special "host-gateway", the address
	// at which the sandbox reaches the host; the caller fills IP in.
	Gateway bool
}

// ParseHostEntry parses --add-host's "NAME:IP" (also "NAME=IP", an IPv6
// address in brackets or not, and "NAME:host-gateway").
func ParseHostEntry(s string) (HostEntry, error) {
	name, ip, ok := strings.Cut(s, "=")
	if !ok {
		name, ip, ok = strings.Cut(s, ":")
	}
	if ok && ip == "host-gateway" && validDNSName(name) {
		return HostEntry{Name: name, Gateway: true}, nil
	}
	ip = strings.TrimSuffix(strings.TrimPrefix(ip, "["), "]")
	addr, err := netip.ParseAddr(ip)
	if !ok || name == "" || err != nil || !validDNSName(name) {
		return HostEntry{}, badOption("--add-host %q: want NAME:IP (an IPv4 or IPv6 address, or host-gateway)", s)
	}
	return HostEntry{Name: name, IP: addr}, nil
}

// validDNSName is a name /etc/hosts or a search domain may hold: labels
// of letters, digits, '-' and '_' (as resolvers take them), 253 in all.
func validDNSName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// EtcHosts is the sandbox's /etc/hosts. With the host's network (host
// mode) it starts from the host's file; otherwise from Docker's default
// lines. The sandbox's own hostname resolves to ownIP (its address on the
// bridge) or, without one, to 127.0.1.1 as on Debian, so that it resolves
// in every mode; extra entries follow.
func EtcHosts(hostFile []byte, mode, hostname string, ownIP netip.Addr, extra []HostEntry) []byte {
	var b bytes.Buffer
	if mode == NetworkHost && len(hostFile) > 0 {
		b.Write(hostFile)
		if !bytes.HasSuffix(hostFile, []byte("\n")) {
			b.WriteByte('\n')
		}
		if !hostsHas(hostFile, "localhost") {
			b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
		}
	} else {
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")
	}
	for _, e := range extra {
		fmt.Fprintf(&b, "%s\t%s\n", e.IP, e.Name)
	}
	if hostname != "" && !(mode == NetworkHost && hostsHas(hostFile, hostname)) {
		ip := "127.0.1.1"
		if ownIP.IsValid() {
			ip = ownIP.String()
		}
		fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
	}
	return b.Bytes()
}

// hostsHas reports whether a hosts file names name.
func hostsHas(file []byte, name string) bool {
	s := bufio.NewScanner(bytes.NewReader(file))
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		f := strings.Fields(line)
		for _, n := range f[min(1, len(f)):] {
			if strings.EqualFold(n, name) {
				return true
			}
		}
	}
	return false
}

// EtcHostname is /etc/hostname.
func EtcHostname(hostname string) []byte { return []byte(hostname + "\n") }

// DNS is what --dns, --dns-search and --dns-option ask for.
type DNS struct {
	Servers []netip.Addr
	Search  []string
	Options []string
}

// ParseDNS checks --dns, --dns-search and --dns-option values.
func ParseDNS(servers, search, options []string) (DNS, error) {
	var d DNS
	for _, s := range servers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return DNS{}, badOption("--dns %q: want an IP address", s)
		}
		d.Servers = append(d.Servers, a)
	}
	for _, s := range search {
		if s != "." && !validDNSName(s) {
			return DNS{}, badOption("--dns-search %q: want a domain name", s)
		}
		d.Search = append(d.Search, s)
	}
	for _, o := range options {
		if o == "" || strings.ContainsAny(o, " \t\n") {
			return DNS{}, badOption("--dns-option %q: want one resolv.conf option (ndots:2, edns0, …)", o)
		}
		d.Options = append(d.Options, o)
	}
	return d, nil
}

// googleDNS is Docker's fallback when the host has no usable server.
var googleDNS = []string{"8.8.8.8", "8.8.4.4"}

// ResolvConf is the sandbox's /etc/resolv.conf, as Docker writes it:
//   - host mode: the host's file (with d's changes);
//   - bridge mode: gateway, when set, is the one server (the network
//     helper's DNS forwarder, which asks the host's servers);
//   - otherwise the host's servers, without loopback ones (unreachable
//     from another network namespace), or Google's if none is left.
//
// d's servers, search domains and options replace the file's own.
func ResolvConf(hostFile []byte, mode string, gateway netip.Addr, d DNS) []byte {
	var servers, search, options, other []string
	s := bufio.NewScanner(bytes.NewReader(hostFile))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				servers = append(servers, f[1])
			}
		case "search", "domain":
			search = f[1:]
		case "options":
			options = append(options, f[1:]...)
		default:
			other = append(other, s.Text())
		}
	}
	if mode != NetworkHost {
		var kept []string
		for _, sv := range servers {
			if a, err := netip.ParseAddr(sv); err == nil && !a.IsLoopback() {
				kept = append(kept, sv)
			}
		}
		servers = kept
		if gateway.IsValid() {
			servers = []string{gateway.String()}
		} else if len(servers) == 0 {
			servers = googleDNS
		}
	}
	if len(d.Servers) > 0 {
		servers = nil
		for _, a := range d.Servers {
			servers = append(servers, a.String())
		}
	}
	if len(d.Search) > 0 {
		search = d.Search
		if len(search) == 1 && search[0] == "." {
			search = nil
		}
	}
	if len(d.Options) > 0 {
		options = d.Options
	}
	var b bytes.Buffer
	for _, l := range other {
		b.WriteString(l + "\n")
	}
	if len(search) > 0 {
		b.WriteString("search " + strings.Join(search, " ") + "\n")
	}
	for _, sv := range servers {
		b.WriteString("nameserver " + sv + "\n")
	}
	if len(options) > 0 {
		b.WriteString("options " + strings.Join(options, " ") + "\n")
	}
	return b.Bytes()
}
