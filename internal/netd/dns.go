package netd

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The DNS server each network has on its gateway's address (as
// aardvark-dns; Docker's embedded resolver is at 127.0.0.11, which needs a
// DNAT in every container): it answers the names of the containers that
// share a network with the asking one (container name, aliases, short id)
// and forwards other names to the host's name servers, except on an
// internal network.

func randRead(b []byte) (int, error) { return rand.Read(b) }

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Bounds, per network's DNS server: names of containers are answered at
// once, in the read loop; a forward to the host's name servers takes a
// slot until its answer (at most maxForward at once, maxForwardPerSource
// of them for one asker), and a TCP connection one of maxTCP
// (maxTCPPerSource for one asker). A container that floods the server
// gets no more than its share: the others' lookups still have theirs, as
// with aardvark-dns's per-client limits. The helper's memory and sockets
// stay bounded.
const (
	maxForward          = 64
	maxForwardPerSource = 8
	maxTCP              = 64
	maxTCPPerSource     = 4
)

// slots counts what each source holds, within a total.
type slots struct {
	mu          sync.Mutex
	total       int
	per         map[netip.Addr]int
	max, perMax int
}

func newSlots(max, perMax int) *slots {
	return &slots{per: map[netip.Addr]int{}, max: max, perMax: perMax}
}

func (s *slots) take(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= s.max || s.per[a] >= s.perMax {
		return false
	}
	s.total++
	s.per[a]++
	return true
}

func (s *slots) put(a netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.per[a]--; s.per[a] <= 0 {
		delete(s.per, a)
	}
}

func (d *daemon) serveDNS(n *network) {
	go func() {
		conns := newSlots(maxTCP, maxTCPPerSource)
		for {
			c, err := n.tcp.AcceptTCP()
			if err != nil {
				return
			}
			src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			if !conns.take(src) {
				c.Close()
				continue
			}
			go func() {
				defer conns.put(src)
				d.serveTCP(n, c, src)
			}()
		}
	}()
	forwards := newSlots(maxForward, maxForwardPerSource)
	buf := make([]byte, 4096)
	for {
		k, from, err := n.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		src := from.Addr().Unmap()
		out, fwd := d.resolve(n, src, buf[:k], true)
		if fwd == nil {
			if out != nil {
				n.udp.WriteToUDPAddrPort(out, from)
			}
			continue
		}
		if !forwards.take(src) {
			continue // dropped: the client asks again
		}
		go func() {
			defer forwards.put(src)
			if out := fwd(); out != nil {
				n.udp.WriteToUDPAddrPort(out, from)
			}
		}()
	}
}

func (d *daemon) serveTCP(n *network, c *net.TCPConn, src netip.Addr) {
	defer c.Close()
	for {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		out, fwd := d.resolve(n, src, q, false)
		if fwd != nil {
			out = fwd()
		}
		if out == nil {
			return
		}
		binary.BigEndian.PutUint16(l[:], uint16(len(out)))
		if _, err := c.Write(append(l[:], out...)); err != nil {
			return
		}
	}
}

// lookup is the addresses name has for a container asking from src on n,
// and whether that container may have other names forwarded: it has a
// network that is not internal (as Docker's resolver forwards for a
// container with external access on any of its networks). An asker that
// is no endpoint of n gets n's names alone.
func (d *daemon) lookup(n *network, src netip.Addr, name string) (addrs []netip.Addr, external bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	asker := ""
	for id, ep := range n.eps {
		if ep.IPAddress == src {
			asker = id
		}
	}
	nets := []*network{n}
	if asker != "" {
		nets = nets[:0]
		for _, m := range d.nets {
			if m.eps[asker] != nil {
				nets = append(nets, m)
			}
		}
	}
	for _, m := range nets {
		external = external || !m.cfg.Internal
		for _, ep := range m.eps {
			for _, nm := range ep.names {
				if nm == name {
					addrs = append(addrs, ep.IPAddress)
					break
				}
			}
		}
	}
	return addrs, external
}

// answer is the reply to query q (nil: none), forwarded if need be: the
// whole of it at once (the fuzzer's and the tests' entry).
func (d *daemon) answer(n *network, src netip.Addr, q []byte, udp bool) []byte {
	out, fwd := d.resolve(n, src, q, udp)
	if fwd != nil {
		return fwd()
	}
	return out
}

// resolve answers query q from src: the reply (nil: none), or, for a name
// no container has, the forward that gets it from the host's name
// servers. Only standard queries of one question are answered or
// forwarded; a UDP reply longer than the asker takes (512 bytes, or its
// EDNS size) comes back truncated, so that it asks again over TCP.
func (d *daemon) resolve(n *network, src netip.Addr, q []byte, udp bool) ([]byte, func() []byte) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil, nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(h, qs, dnsmessage.RCodeFormatError, nil), nil
	}
	if h.OpCode != 0 {
		return reply(h, qs, dnsmessage.RCodeNotImplemented, nil), nil
	}
	limit := 65535
	if udp {
		limit = 512
		if p.SkipAllAnswers() == nil && p.SkipAllAuthorities() == nil {
			for {
				rh, err := p.AdditionalHeader()
				if err != nil {
					break
				}
				if rh.Type == dnsmessage.TypeOPT {
					limit = min(4096, max(512, int(rh.Class)))
				}
				if p.SkipAdditional() != nil {
					break
				}
			}
		}
	}
	question := qs[0]
	name := strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))
	addrs, external := d.lookup(n, src, name)
	if len(addrs) > 0 && (question.Class == dnsmessage.ClassINET || question.Class == dnsmessage.ClassANY) {
		var rrs []dnsmessage.AResource
		if question.Type == dnsmessage.TypeA || question.Type == dnsmessage.TypeALL {
			for _, a := range addrs {
				rrs = append(rrs, dnsmessage.AResource{A: a.As4()})
			}
		}
		// AAAA and the rest: the name exists, with no such record
		// (an answer at once, never a forward that may time out).
		return reply(h, qs, dnsmessage.RCodeSuccess, rrs), nil
	}
	if !external || len(d.upstream) == 0 {
		return reply(h, qs, dnsmessage.RCodeRefused, nil), nil
	}
	q = append([]byte(nil), q...)
	return nil, func() []byte {
		for _, up := range d.upstream {
			if out := forward(up, q, question); out != nil {
				if len(out) > limit {
					t := reply(h, qs, dnsmessage.RCodeSuccess, nil)
					t[2] |= 0x02 // TC: ask again over TCP
					return t
				}
				return out
			}
		}
		return reply(h, qs, dnsmessage.RCodeServerFailure, nil)
	}
}

// forward asks server, and takes only a reply to this query: its id and
// its question.
func forward(server string, q []byte, question dnsmessage.Question) []byte {
	c, err := net.Dial("udp", server)
	if err != nil {
		return nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(q); err != nil {
		return nil
	}
	buf := make([]byte, 4096)
	k, err := c.Read(buf)
	if err != nil || k < 12 || buf[0] != q[0] || buf[1] != q[1] {
		return nil
	}
	var p dnsmessage.Parser
	if h, err := p.Start(buf[:k]); err != nil || !h.Response {
		return nil
	}
	got, err := p.Question()
	if err != nil || got.Type != question.Type || got.Class != question.Class ||
		!strings.EqualFold(got.Name.String(), question.Name.String()) {
		return nil
	}
	return buf[:k]
}

func reply(h dnsmessage.Header, qs []dnsmessage.Question, code dnsmessage.RCode, as []dnsmessage.AResource) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: code == dnsmessage.RCodeSuccess,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: code,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	for _, q := range qs {
		if err := b.Question(q); err != nil {
			return nil
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	for _, a := range as {
		if err := b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 600}, a); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
