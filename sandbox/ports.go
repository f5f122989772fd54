package sandbox

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/slopbox/slopbox/internal/reexec"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
)

// Published ports, in the style of rootlesskit's builtin port driver: the
// host's sockets are bound by the slopbox process that starts the sandbox
// (so a conflict is an error of that command), then handed to a forwarder,
// one per sandbox with ports, which accepts on them and asks the sandbox's
// PID 1 for a socket connected to the container port on the sandbox's own
// loopback (opDial, over the agent socket; the socket comes back by
// SCM_RIGHTS). The forwarder then copies bytes between the two sockets
// (splice(2) for TCP): no process per connection, nothing listening inside
// the sandbox, and a server bound to 127.0.0.1 inside is reachable. It
// runs as the caller, in its own session, exits when PID 1 does, and is
// killed with the sandbox (stop, rm, prune) by its recorded pid.
const (
	portsHelper = "sandbox-ports"
	portsFile   = "ports.pid" // "pid start-time" of the forwarder
	udpIdle     = 60 * time.Second
)

func init() {
	reexec.Register(portsHelper, func() int { return portsMain(os.Args[1:]) })
}

// checkPorts validates the ports of a sandbox in network mode; in host
// mode they are dropped (the sandbox's servers are on the host already),
// as Docker discards them.
func checkPorts(ports []backend.PortMapping, network string) ([]backend.PortMapping, error) {
	if len(ports) == 0 || network == backend.NetworkHost {
		return nil, nil
	}
	if network != backend.NetworkBridge {
		return nil, backend.InvalidValue("publishing ports (-p) needs --network bridge: with --network %s nothing reaches the sandbox", network)
	}
	out := make([]backend.PortMapping, len(ports))
	seen := map[string]bool{}
	for i, p := range ports {
		p.Protocol = cmp.Or(p.Protocol, "tcp")
		if p.Protocol != "tcp" && p.Protocol != "udp" {
			return nil, backend.InvalidValue("port %d: protocol %q is neither tcp nor udp", p.ContainerPort, p.Protocol)
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 || p.HostPort < 0 || p.HostPort > 65535 {
			return nil, backend.InvalidValue("port mapping %d:%d: ports are 1-65535 (host port 0: any free one)", p.HostPort, p.ContainerPort)
		}
		p.HostIP = cmp.Or(p.HostIP, backend.DefaultPortHostIP)
		if ip := net.ParseIP(p.HostIP); ip == nil {
			return nil, backend.InvalidValue("port %d: host address %q is not an IP address", p.ContainerPort, p.HostIP)
		}
		key := fmt.Sprintf("%s/%s/%d", p.Protocol, p.HostIP, p.HostPort)
		if p.HostPort != 0 && seen[key] {
			return nil, backend.InvalidValue("host port %s:%d/%s is published twice", p.HostIP, p.HostPort, p.Protocol)
		}
		seen[key] = true
		out[i] = p
	}
	return out, nil
}

// publish binds rec's ports on the host (recording the ports the kernel
// chose for host port 0) and starts the forwarder for PID 1 pid.
func (b *Backend) publish(rec *record, pid int) error {
	if len(rec.Ports) == 0 {
		return nil
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	specs := []string{}
	rec.Bound = slices.Clone(rec.Ports)
	for i, p := range rec.Ports {
		addr := net.JoinHostPort(p.HostIP, strconv.Itoa(p.HostPort))
		// The address family asked for only: Go's "tcp" on 0.0.0.0
		// would listen on IPv6 too, which Docker's -p 0.0.0.0:… does not.
		family := "6"
		if ip := net.ParseIP(p.HostIP); ip != nil && ip.To4() != nil {
			family = "4"
		}
		var f *os.File
		var bound net.Addr
		if p.Protocol == "udp" {
			pc, err := net.ListenPacket("udp"+family, addr)
			if err != nil {
				return b.portError(rec, p, err)
			}
			f, err = pc.(*net.UDPConn).File()
			bound = pc.LocalAddr()
			pc.Close()
			if err != nil {
				return err
			}
		} else {
			ln, err := net.Listen("tcp"+family, addr)
			if err != nil {
				return b.portError(rec, p, err)
			}
			f, err = ln.(*net.TCPListener).File()
			bound = ln.Addr()
			ln.Close()
			if err != nil {
				return err
			}
		}
		files = append(files, f)
		_, port, _ := net.SplitHostPort(bound.String())
		rec.Bound[i].HostPort, _ = strconv.Atoi(port)
		specs = append(specs, fmt.Sprintf("%s/%d", p.Protocol, p.ContainerPort))
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, append([]string{b.root, rec.ID, strconv.Itoa(pid)}, specs...)...)
	cmd.Args[0] = "slopbox-ports"
	cmd.Env = append(os.Environ(), reexec.Env+"="+portsHelper, helperMarker+rec.ID)
	cmd.ExtraFiles = files
	cmd.Dir = b.state.sandboxDir(rec.ID) // where to look for what holds a sandbox
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the port forwarder: %w", err)
	}
	if st, _, ok := procStart(cmd.Process.Pid); ok {
		writePidFile(filepath.Join(b.state.sandboxDir(rec.ID), portsFile), cmd.Process.Pid, st)
	}
	reapWhenDone(cmd.Process) // a long-lived caller (serve) reaps it
	return nil
}

// portError explains why host port p could not be bound.
func (b *Backend) portError(rec *record, p backend.PortMapping, err error) error {
	where := fmt.Sprintf("%s/%s", net.JoinHostPort(p.HostIP, strconv.Itoa(p.HostPort)), p.Protocol)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		if infos, lerr := b.List(); lerr == nil {
			for _, i := range infos {
				for _, q := range i.Ports {
					if i.ID != rec.ID && i.Running && q.HostPort == p.HostPort && q.Protocol == p.Protocol {
						return backend.InvalidValue("host port %s is already published by sandbox %s: pick another host port, or remove it", where, i.Name)
					}
				}
			}
		}
		return backend.InvalidValue("host port %s is already in use on the host: pick another host port", where)
	case errors.Is(err, syscall.EACCES) && p.HostPort < 1024:
		start, _ := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
		return backend.InvalidValue("host port %s is privileged: an unprivileged user may bind ports from %s only (net.ipv4.ip_unprivileged_port_start); publish on a higher host port, e.g. -p %d:%d", where, strings.TrimSpace(string(start)), 8000+p.HostPort, p.ContainerPort)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return backend.InvalidValue("host port %s: %s is not an address of this host", where, p.HostIP)
	}
	return fmt.Errorf("publish %s: %w", where, err)
}

// killPorts stops the sandbox's port forwarder, if it has one, which
// releases its host ports.
func killPorts(dir string) error {
	err := killRecorded(dir, portsFile, "the port forwarder")
	os.Remove(filepath.Join(dir, portsFile))
	return err
}

// portsMain is the forwarder: args are the state root, the sandbox id,
// PID 1's pid and, for each inherited socket from fd 3 on, "tcp/PORT" or
// "udp/PORT", the container port it leads to.
func portsMain(args []string) int {
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "slopbox-ports: internal use only")
		return 2
	}
	sock := filepath.Join(args[0], "c", args[1], socketFile)
	pid, err := strconv.Atoi(args[2])
	if err != nil {
		return 2
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 1 // PID 1 is gone already
	}
	for i, spec := range args[3:] {
		proto, port, _ := strings.Cut(spec, "/")
		cport, err := strconv.Atoi(port)
		if err != nil {
			return 2
		}
		f := os.NewFile(uintptr(3+i), spec)
		if proto == "udp" {
			pc, err := net.FilePacketConn(f)
			if err != nil {
				return 1
			}
			go forwardUDP(pc, sock, cport)
		} else {
			ln, err := net.FileListener(f)
			if err != nil {
				return 1
			}
			go forwardTCP(ln, sock, cport)
		}
		f.Close()
	}
	// Until PID 1 exits (its pidfd becomes readable).
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err == nil || err != unix.EINTR {
			return 0
		}
	}
}

// dialPort asks PID 1, listening on sock, for a socket of proto connected
// to port on the sandbox's loopback.
func dialPort(sock string, proto uint32, port int) (net.Conn, error) {
	a, err := dialAgent(sock)
	if err != nil {
		return nil, err
	}
	defer a.c.Close()
	msg := make([]byte, 20)
	for i, v := range []uint32{16, agentMagic, opDial, proto, uint32(port)} {
		binary.NativeEndian.PutUint32(msg[4*i:], v)
	}
	if _, err := a.c.Write(msg); err != nil {
		return nil, fmt.Errorf("%w: %v", errAgentGone, err)
	}
	typ, val, f, err := a.replyFile(5 * time.Second)
	if err != nil {
		return nil, err
	}
	if f == nil {
		if typ == replyFailed {
			return nil, syscall.Errno(val)
		}
		return nil, fmt.Errorf("unexpected reply %d from the sandbox init", typ)
	}
	defer f.Close()
	return net.FileConn(f)
}

// forwardTCP accepts connections on ln and joins each to a connection to
// port inside the sandbox.
func forwardTCP(ln net.Listener, sock string, port int) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		go func() {
			in, err := dialPort(sock, protoTCP, port)
			if err != nil {
				// Nothing listens inside: the client sees a reset, as
				// it would connecting to a closed port.
				if tc, ok := c.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
				c.Close()
				return
			}
			ct, ok1 := c.(*net.TCPConn)
			it, ok2 := in.(*net.TCPConn)
			if !ok1 || !ok2 {
				c.Close()
				in.Close()
				return
			}
			join(ct, it)
		}()
	}
}

// join copies between a and b both ways (splice(2) between TCP sockets),
// passing each side's end of stream on as a half-close, and closes both
// when both directions are done.
func join(a, b *net.TCPConn) {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src *net.TCPConn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			// A reset or error on one side ends both directions.
			a.SetLinger(0)
			b.SetLinger(0)
			a.Close()
			b.Close()
			return
		}
		dst.CloseWrite()
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// forwardUDP relays datagrams between pc's clients and port inside the
// sandbox: one inside socket per client address, dropped after udpIdle
// without traffic.
func forwardUDP(pc net.PacketConn, sock string, port int) {
	type flow struct {
		conn net.Conn
		last atomic.Int64 // unix nanoseconds of the last datagram, either way
	}
	var mu sync.Mutex
	flows := map[string]*flow{}
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		key := from.String()
		mu.Lock()
		fl := flows[key]
		mu.Unlock()
		if fl == nil {
			in, err := dialPort(sock, protoUDP, port)
			if err != nil {
				continue
			}
			fl = &flow{conn: in}
			fl.last.Store(time.Now().UnixNano())
			mu.Lock()
			flows[key] = fl
			mu.Unlock()
			go func() {
				back := make([]byte, 65536)
				for {
					in.SetReadDeadline(time.Now().Add(udpIdle))
					n, err := in.Read(back)
					if errors.Is(err, syscall.ECONNREFUSED) {
						// Nothing listened when the last datagram came:
						// not the end of the flow; idleness is.
						continue
					}
					if ne, ok := err.(net.Error); ok && ne.Timeout() && time.Since(time.Unix(0, fl.last.Load())) < udpIdle {
						continue // the client still sends
					}
					if err != nil {
						break
					}
					fl.last.Store(time.Now().UnixNano())
					pc.WriteTo(back[:n], from)
				}
				mu.Lock()
				delete(flows, key)
				mu.Unlock()
				in.Close()
			}()
		}
		fl.last.Store(time.Now().UnixNano())
		fl.conn.Write(buf[:n])
	}
}
