package oci

import (
	"net/netip"
	"strings"
	"testing"
)

func TestResolvConf(t *testing.T) {
	host := []byte("# a comment\nnameserver 127.0.0.53\nnameserver 10.0.0.2\nsearch corp.example\noptions edns0\n")
	for _, c := range []struct {
		name, mode string
		gw         netip.Addr
		dns        DNS
		want       string
	}{
		{"none drops loopback servers", NetworkNone, netip.Addr{}, DNS{}, "search corp.example\nnameserver 10.0.0.2\noptions edns0\n"},
		{"host keeps the host's", NetworkHost, netip.Addr{}, DNS{}, "search corp.example\nnameserver 127.0.0.53\nnameserver 10.0.0.2\noptions edns0\n"},
		{"bridge asks the gateway", NetworkBridge, netip.MustParseAddr("10.0.2.3"), DNS{}, "search corp.example\nnameserver 10.0.2.3\noptions edns0\n"},
		{"--dns replaces", NetworkNone, netip.Addr{}, DNS{Servers: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Search: []string{"."}, Options: []string{"ndots:1"}}, "nameserver 192.0.2.1\noptions ndots:1\n"},
	} {
		if got := string(ResolvConf(host, c.mode, c.gw, c.dns)); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
	if got := string(ResolvConf([]byte("nameserver 127.0.0.1\n"), NetworkNone, netip.Addr{}, DNS{})); got != "nameserver 8.8.8.8\nnameserver 8.8.4.4\n" {
		t.Errorf("only loopback servers: %q, want Docker's fallback", got)
	}
}

func TestEtcHosts(t *testing.T) {
	e, err := ParseHostEntry("db:10.1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	got := string(EtcHosts(nil, NetworkNone, "box", netip.Addr{}, []HostEntry{e}))
	for _, want := range []string{"127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n", "10.1.2.3\tdb\n", "127.0.1.1\tbox\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("none: lacks %q:\n%s", want, got)
		}
	}
	got = string(EtcHosts(nil, NetworkBridge, "box", netip.MustParseAddr("10.0.2.100"), nil))
	if !strings.HasSuffix(got, "10.0.2.100\tbox\n") {
		t.Errorf("bridge: %s", got)
	}
	got = string(EtcHosts([]byte("127.0.0.1 localhost\n10.5.5.5 thehost\n"), NetworkHost, "thehost", netip.Addr{}, nil))
	if got != "127.0.0.1 localhost\n10.5.5.5 thehost\n" {
		t.Errorf("host mode keeps the host's file: %q", got)
	}
	for _, bad := range []string{"nocolon", ":1.2.3.4", "x:300.1.1.1", "bad name:1.2.3.4"} {
		if _, err := ParseHostEntry(bad); err == nil {
			t.Errorf("ParseHostEntry(%q) accepted", bad)
		}
	}
	if e, err := ParseHostEntry("host.docker.internal:host-gateway"); err != nil || !e.Gateway || e.Name != "host.docker.internal" {
		t.Errorf("host-gateway: %+v %v", e, err)
	}
	if e, err := ParseHostEntry("v6:[2001:db8::1]"); err != nil || e.IP.String() != "2001:db8::1" {
		t.Errorf("v6: %v %v", e, err)
	}
}
