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

// A network's DNS server answers at most maxUDP queries and holds at most
// maxTCP connections at once: a container that floods it gets no answer
// to the queries beyond that (as a full socket buffer would do), and the
// helper's memory and sockets stay bounded.
const (
	maxUDP = 64
	maxTCP = 16
)

func (d *daemon) serveDNS(n *network) {
	go func() {
		slots := make(chan struct{}, maxTCP)
		for {
			c, err := n.tcp.AcceptTCP()
			if err != nil {
				return
			}
			select {
			case slots <- struct{}{}:
				go func() {
					defer func() { <-slots }()
					d.serveTCP(n, c)
				}()
			default:
				c.Close()
			}
		}
	}()
	slots := make(chan struct{}, maxUDP)
	buf := make([]byte, 4096)
	for {
		k, src, err := n.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			continue // dropped: the client asks again
		}
		q := append([]byte(nil), buf[:k]...)
		go func() {
			defer func() { <-slots }()
			if out := d.answer(n, src.Addr().Unmap(), q, 512); out != nil {
				n.udp.WriteToUDPAddrPort(out, src)
			}
		}()
	}
}

func (d *daemon) serveTCP(n *network, c *net.TCPConn) {
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
		src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		out := d.answer(n, src.Addr().Unmap(), q, 65535)
		if out == nil {
			return
		}
		binary.BigEndian.PutUint16(l[:], uint16(len(out)))
		if _, err := c.Write(append(l[:], out...)); err != nil {
			return
		}
	}
}

// lookup is the addresses name has for a container asking from src on n.
func (d *daemon) lookup(n *network, src netip.Addr, name string) (addrs []netip.Addr, known bool) {
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
		for _, ep := range m.eps {
			for _, nm := range ep.names {
				if nm == name {
					addrs = append(addrs, ep.IPAddress)
					break
				}
			}
		}
	}
	return addrs, len(addrs) > 0
}

// answer is the reply to query q (nil: none).
func (d *daemon) answer(n *network, src netip.Addr, q []byte, max int) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(h, qs, dnsmessage.RCodeFormatError, nil)
	}
	question := qs[0]
	name := strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))
	if question.Class == dnsmessage.ClassINET || question.Class == dnsmessage.ClassANY {
		if addrs, ok := d.lookup(n, src, name); ok {
			var rrs []dnsmessage.AResource
			if question.Type == dnsmessage.TypeA || question.Type == dnsmessage.TypeALL {
				for _, a := range addrs {
					rrs = append(rrs, dnsmessage.AResource{A: a.As4()})
				}
			}
			// AAAA and the rest: the name exists, with no such record
			// (an answer at once, never a forward that may time out).
			return reply(h, qs, dnsmessage.RCodeSuccess, rrs)
		}
	}
	if n.cfg.Internal || len(d.upstream) == 0 {
		return reply(h, qs, dnsmessage.RCodeRefused, nil)
	}
	for _, up := range d.upstream {
		if out := forward(up, q); out != nil && len(out) <= max {
			return out
		}
	}
	return reply(h, qs, dnsmessage.RCodeServerFailure, nil)
}

func forward(server string, q []byte) []byte {
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
