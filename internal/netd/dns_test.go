package netd

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsFixture: two networks, front (internal) and back; a on front only,
// b on both, c on back only.
func dnsFixture(upstream ...string) (*daemon, *network, *network) {
	ep := func(id, ip string, names ...string) *endpoint {
		return &endpoint{Endpoint: Endpoint{IPAddress: netip.MustParseAddr(ip)}, container: id, names: names}
	}
	front := &network{cfg: Config{ID: "f", Name: "front", Internal: true}, eps: map[string]*endpoint{
		"a": ep("a", "10.1.0.2", "a"), "b": ep("b", "10.1.0.3", "b", "bee"),
	}}
	back := &network{cfg: Config{ID: "k", Name: "back"}, eps: map[string]*endpoint{
		"b": ep("b", "10.2.0.3", "b", "bee"), "c": ep("c", "10.2.0.4", "c"),
	}}
	return &daemon{nets: map[string]*network{"f": front, "k": back}, upstream: upstream}, front, back
}

func query(t *testing.T, name string, op dnsmessage.OpCode, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, OpCode: op, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: typ, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func parseReply(t *testing.T, out []byte) (dnsmessage.Header, []netip.Addr) {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(out)
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	p.SkipAllQuestions()
	rrs, _ := p.AllAnswers()
	var addrs []netip.Addr
	for _, rr := range rrs {
		if a, ok := rr.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, netip.AddrFrom4(a.A))
		}
	}
	return h, addrs
}

// TestDNS: who gets which names, when a name is forwarded, and what is
// never forwarded.
func TestDNS(t *testing.T) {
	// An upstream that answers every query with one A record.
	up, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	var mu sync.Mutex
	var forwarded []string // the names the upstream was asked, in order
	go func() {
		buf := make([]byte, 4096)
		for {
			k, from, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, _ := p.Start(buf[:k])
			qs, _ := p.AllQuestions()
			mu.Lock()
			forwarded = append(forwarded, qs[0].Name.String())
			mu.Unlock()
			out := reply(h, qs, dnsmessage.RCodeSuccess, []dnsmessage.AResource{{A: [4]byte{93, 184, 216, 34}}})
			up.WriteTo(out, from)
		}
	}()
	d, front, back := dnsFixture(up.LocalAddr().String())
	a, b := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.3")
	for _, c := range []struct {
		n    *network
		src  netip.Addr
		name string
		want string // "" for none
		code dnsmessage.RCode
	}{
		{front, a, "b", "10.1.0.3", dnsmessage.RCodeSuccess},
		{front, a, "BEE", "10.1.0.3", dnsmessage.RCodeSuccess},
		// a is on front only: back's names are not its; front is
		// internal, so nothing is forwarded for it.
		{front, a, "c", "", dnsmessage.RCodeRefused},
		{front, a, "example.com", "", dnsmessage.RCodeRefused},
		// b asks front's server, where it is too: it has back, which is
		// not internal, so its other names are forwarded (Docker's
		// resolver forwards for a container with external access on any
		// network).
		{front, b, "c", "10.2.0.4", dnsmessage.RCodeSuccess},
		{front, b, "example.com", "93.184.216.34", dnsmessage.RCodeSuccess},
		// An address that is no endpoint: front's names alone.
		{front, netip.MustParseAddr("10.1.0.99"), "c", "", dnsmessage.RCodeRefused},
		{back, netip.MustParseAddr("10.2.0.99"), "a", "93.184.216.34", dnsmessage.RCodeSuccess},
	} {
		out := d.answer(c.n, c.src, query(t, c.name, 0, dnsmessage.TypeA), true)
		h, addrs := parseReply(t, out)
		got := ""
		if len(addrs) > 0 {
			got = addrs[0].String()
		}
		if h.RCode != c.code || got != c.want {
			t.Errorf("%s asks %s's server for %s: %v %q, want %v %q", c.src, c.n.cfg.Name, c.name, h.RCode, got, c.code, c.want)
		}
	}
	// A container's own names never go upstream: forwarded are only the
	// two names no container has.
	mu.Lock()
	names := slices.Clone(forwarded)
	mu.Unlock()
	if len(names) != 2 || names[0] != "example.com." || names[1] != "a." {
		t.Errorf("forwarded: %q", names)
	}
	// Only standard queries: an UPDATE is refused as not implemented,
	// not forwarded from the host's address.
	h, _ := parseReply(t, d.answer(back, b, query(t, "example.com", 5, dnsmessage.TypeA), true))
	if h.RCode != dnsmessage.RCodeNotImplemented {
		t.Errorf("UPDATE: %v, want NotImplemented", h.RCode)
	}
	// AAAA for a container's name: at once, empty.
	h, addrs := parseReply(t, d.answer(front, a, query(t, "b", 0, dnsmessage.TypeAAAA), true))
	if h.RCode != dnsmessage.RCodeSuccess || len(addrs) != 0 {
		t.Errorf("AAAA b: %v %v", h.RCode, addrs)
	}
}

// TestSlots: one source holds at most its share of a total.
func TestSlots(t *testing.T) {
	s := newSlots(5, 2)
	x, y, z := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	takes := func(a netip.Addr, n int) int {
		got := 0
		for range n {
			if s.take(a) {
				got++
			}
		}
		return got
	}
	if got := takes(x, 3); got != 2 {
		t.Fatalf("a source took %d of 3, want its 2", got)
	}
	if got := takes(y, 2) + takes(z, 2); got != 3 {
		t.Fatalf("two more sources took %d, want the 3 left of 5", got)
	}
	s.put(x)
	if !s.take(z) {
		t.Fatal("a slot put back is free again")
	}
}

// FuzzAnswer: no query, however malformed, makes the DNS server panic,
// and every reply parses.
func FuzzAnswer(f *testing.F) {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("b."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	f.Add(q, true)
	f.Add([]byte{0, 1, 0, 0, 0, 2}, false)
	d, front, _ := dnsFixture() // no upstream: nothing leaves the test
	src := netip.MustParseAddr("10.1.0.3")
	f.Fuzz(func(t *testing.T, q []byte, udp bool) {
		out := d.answer(front, src, q, udp)
		if out == nil {
			return
		}
		var p dnsmessage.Parser
		if _, err := p.Start(out); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
	})
}
