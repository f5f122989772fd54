package integration

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// pythonRef pushes fixtures.Python to e's registry and pulls it.
func (e *env) pythonRef(t *testing.T) string {
	t.Helper()
	ref := strings.Replace(e.ref, "it/busybox", "it/python", 1)
	fixtures.Push(t, ref, fixtures.Python(t, image.HostPlatform()))
	e.must("pull", "-q", ref)
	t.Cleanup(func() { e.run("", "rmi", "-f", ref) })
	return ref
}

// Every sandbox resolves localhost and its own hostname, from Python
// (glibc's getaddrinfo) and from busybox, in every network mode; the
// image's own /etc files are untouched; --hostname, --add-host and --dns
// show in the files Docker writes.
func TestNameResolution(t *testing.T) {
	e := newEnv(t)
	py := e.pythonRef(t)
	script := `import socket
print(socket.getaddrinfo("localhost", 80, proto=socket.IPPROTO_TCP)[0][4][0])
print(socket.gethostname(), socket.gethostbyname(socket.gethostname()))
print(socket.gethostbyname("db"))`
	for _, mode := range []string{"none", "host", "bridge"} {
		out, code := e.run("", "run", "--rm", "--network", mode, "--hostname", "box-"+mode, "--add-host", "db:10.1.2.3", py, "python3", "-c", script)
		if code != 0 {
			t.Errorf("%s: python: exit %d\n%s", mode, code, out)
			continue
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || (lines[0] != "127.0.0.1" && lines[0] != "::1") || !strings.HasPrefix(lines[1], "box-"+mode+" ") || lines[2] != "10.1.2.3" {
			t.Errorf("%s: python resolved:\n%s", mode, out)
		}
		out, code = e.run("", "run", "--rm", "--network", mode, "-h", "bb", e.ref, "sh", "-c", "ping -c1 -W1 localhost 2>&1 | head -1; ping -c1 -W1 bb 2>&1 | head -1; hostname; cat /etc/hostname")
		if code != 0 || !strings.Contains(out, "(127.0.0.1)") || !strings.Contains(out, "PING bb (") || !strings.HasSuffix(out, "bb\nbb\n") {
			t.Errorf("%s: busybox: exit %d\n%s", mode, code, out)
		}
	}
	// The files as Docker writes them; --dns and --dns-search replace the host's.
	out := e.must("run", "--rm", "--dns", "192.0.2.53", "--dns-search", "example.com", "--dns-option", "ndots:2", "--add-host", "v6:[2001:db8::1]", "-h", "named", e.ref,
		"sh", "-c", "cat /etc/resolv.conf; echo ---; cat /etc/hosts")
	resolv, hosts, _ := strings.Cut(out, "---\n")
	if resolv != "search example.com\nnameserver 192.0.2.53\noptions ndots:2\n" {
		t.Errorf("resolv.conf with --dns:\n%s", resolv)
	}
	for _, want := range []string{"127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n", "2001:db8::1\tv6\n", "\tnamed\n"} {
		if !strings.Contains(hosts, want) {
			t.Errorf("/etc/hosts lacks %q:\n%s", want, hosts)
		}
	}
	// Without --dns, the host's servers, but not loopback ones, which
	// another network namespace cannot reach.
	host, _ := os.ReadFile("/etc/resolv.conf")
	// host mode: the host's servers, loopback ones included (the host's
	// network is the sandbox's), and the host's search list; /etc/hosts is
	// the host's, then the hostname.
	out = e.must("run", "--rm", "--network", "host", "-h", "hh", e.ref, "sh", "-c", "cat /etc/resolv.conf; echo ---; cat /etc/hosts")
	resolv, hosts, _ = strings.Cut(out, "---\n")
	for _, key := range []string{"nameserver", "search"} {
		if got, want := resolvField(resolv, key), resolvField(string(host), key); !slices.Equal(got, want) {
			t.Errorf("host mode: resolv.conf's %s %q, the host's %q\n%s", key, got, want, resolv)
		}
	}
	if hostHosts, _ := os.ReadFile("/etc/hosts"); !strings.HasPrefix(hosts, string(hostHosts)) || !strings.Contains(hosts, "\thh\n") {
		t.Errorf("host mode: /etc/hosts is not the host's and the hostname:\n%s\n(host's:\n%s)", hosts, hostHosts)
	}
	// bridge: the hostname on the sandbox's own address, slirp4netns's DNS
	// forwarder as the server.
	out = e.must("run", "--rm", "--network", "bridge", "-h", "bh", e.ref, "sh", "-c", "cat /etc/resolv.conf; echo ---; cat /etc/hosts; echo ---; ping -c1 -W1 bh 2>&1 | head -1")
	parts := strings.Split(out, "---\n")
	if len(parts) != 3 || !slices.Equal(resolvField(parts[0], "nameserver"), []string{"10.0.2.3"}) || !strings.Contains(parts[1], "\n10.0.2.100\tbh\n") || !strings.Contains(parts[2], "PING bh (10.0.2.100)") {
		t.Errorf("bridge: resolv.conf, /etc/hosts, ping of the hostname:\n%s", out)
	}
	out = e.must("run", "--rm", e.ref, "cat", "/etc/resolv.conf")
	if strings.Contains(out, "nameserver 127.") || !strings.Contains(out, "nameserver ") {
		t.Errorf("resolv.conf in none mode:\n%s\n(host's:\n%s)", out, host)
	}
	// Container root may edit them (as in Docker), and the image keeps its own.
	e.must("run", "-d", "--name", "edit", e.ref, "sleep", "infinity")
	e.must("exec", "edit", "sh", "-c", "echo '10.9.9.9 added' >> /etc/hosts")
	if out := e.must("exec", "edit", "cat", "/etc/hosts"); !strings.Contains(out, "added") {
		t.Errorf("an edit of /etc/hosts did not hold:\n%s", out)
	}
	e.must("rm", "-f", "edit")
	imageOwnEtc(t, e)
	for _, bad := range [][]string{{"--add-host", "nocolon"}, {"--add-host", "x:not-an-ip"}, {"--dns", "dns.example"}} {
		if out, code := e.run("", append(append([]string{"run", "--rm"}, bad...), e.ref, "true")...); code != 125 || !strings.Contains(out, bad[0]) {
			t.Errorf("%v: exit %d %q, want 125 naming the flag", bad, code, out)
		}
	}
}

// resolvField returns the values of a resolv.conf's lines starting with
// key, in order.
func resolvField(file, key string) []string {
	var out []string
	for _, l := range strings.Split(file, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == key {
			out = append(out, f[1:]...)
		}
	}
	return out
}

// imageOwnEtc: with an image that ships its own /etc/hosts, /etc/hostname
// and /etc/resolv.conf, in every mode each is a mount point in the
// sandbox, the sandbox sees slopbox's files, edits inside hold, and the
// image's layer files on the host stay byte for byte as they were.
func imageOwnEtc(t *testing.T, e *env) {
	t.Helper()
	own := map[string]string{
		"hosts":       "192.0.2.77\timage-host\n",
		"hostname":    "image-hostname\n",
		"resolv.conf": "nameserver 192.0.2.78\n",
	}
	base, err := fixtures.Busybox(t, image.HostPlatform()).Layers()
	if err != nil {
		t.Fatal(err)
	}
	var entries []fixtures.Entry
	entries = append(entries, fixtures.Entry{Name: "etc/", Type: tar.TypeDir})
	for name, body := range own {
		entries = append(entries, fixtures.Entry{Name: "etc/" + name, Body: body})
	}
	ref := strings.Replace(e.ref, "it/busybox", "it/ownetc", 1)
	fixtures.Push(t, ref, fixtures.Image(t, image.HostPlatform(), []string{"sh"}, append(base, fixtures.Layer(t, entries...))...))
	e.must("pull", "-q", ref)
	t.Cleanup(func() { e.run("", "rmi", "-f", ref) })
	// The image's files as unpacked on the host.
	layerFiles := map[string]string{}
	filepath.WalkDir(filepath.Join(e.root, "layers"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && filepath.Base(filepath.Dir(p)) == "etc" {
			if body, ok := own[d.Name()]; ok {
				layerFiles[p] = body
			}
		}
		return nil
	})
	if len(layerFiles) != len(own) {
		t.Fatalf("found %d of the image's /etc files under %s/layers: %v", len(layerFiles), e.root, layerFiles)
	}
	for _, mode := range []string{"none", "host", "bridge"} {
		name := "ownetc-" + mode
		e.must("run", "-d", "--name", name, "--network", mode, "-h", "box", ref, "sleep", "infinity")
		mounts := map[string]bool{}
		for _, l := range strings.Split(e.must("exec", name, "cat", "/proc/self/mountinfo"), "\n") {
			if f := strings.Fields(l); len(f) > 4 {
				mounts[f[4]] = true
			}
		}
		for f := range own {
			if !mounts["/etc/"+f] {
				t.Errorf("%s: /etc/%s is not a mount point in the sandbox", mode, f)
			}
		}
		out := e.must("exec", name, "sh", "-c", "cat /etc/hostname /etc/hosts /etc/resolv.conf")
		if strings.Contains(out, "image-host") || strings.Contains(out, "192.0.2.78") || !strings.HasPrefix(out, "box\n") {
			t.Errorf("%s: the sandbox sees the image's files, not its own:\n%s", mode, out)
		}
		e.must("exec", name, "sh", "-c", "for f in hosts hostname resolv.conf; do echo edited-$f >> /etc/$f; done")
		for f := range own {
			if got := e.must("exec", name, "cat", "/etc/"+f); !strings.Contains(got, "edited-"+f) {
				t.Errorf("%s: an edit of /etc/%s did not hold: %q", mode, f, got)
			}
		}
		e.must("rm", "-f", name)
	}
	for p, want := range layerFiles {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Errorf("the image's %s changed: %q %v, want %q", p, got, err, want)
		}
	}
}

// outside stands in for the internet: an HTTP server answering "internet"
// at an address that is not the host's loopback. As root it is a network
// namespace of the test's own, joined to the host by a veth pair, with a
// DNS server that resolves internet.test to it; rootless (no namespace can
// be joined to the host without privilege) it is the host's first
// non-loopback address, and there is no DNS server (port 53 needs root).
type outsideNet struct {
	ip, port, dns string
}

func outside(t *testing.T) outsideNet {
	t.Helper()
	if os.Geteuid() != 0 {
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				ln, err := net.Listen("tcp", net.JoinHostPort(n.IP.String(), "0"))
				if err != nil {
					t.Fatal(err)
				}
				return outsideNet{ip: n.IP.String(), port: serveText(t, ln, "internet")}
			}
		}
		t.Fatal("this host has no non-loopback IPv4 address to stand in for the internet")
	}
	ns := fmt.Sprintf("sbxout%d", os.Getpid())
	veth := fmt.Sprintf("sbxo%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	t.Cleanup(func() { exec.Command("ip", "link", "del", veth).Run() })
	ip("addr", "add", "198.51.100.1/24", "dev", veth)
	ip("link", "set", veth, "up")
	ip("-n", ns, "addr", "add", "198.51.100.2/24", "dev", "eth0")
	ip("-n", ns, "link", "set", "eth0", "up")
	ip("-n", ns, "link", "set", "lo", "up")
	var ln net.Listener
	var pc net.PacketConn
	inNetns(t, "/run/netns/"+ns, func() error {
		var err error
		if ln, err = net.Listen("tcp", "198.51.100.2:80"); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", "198.51.100.2:53")
		return err
	})
	t.Cleanup(func() { pc.Close() })
	go serveDNS(pc, map[string]net.IP{"internet.test.": net.ParseIP("198.51.100.2")})
	return outsideNet{ip: "198.51.100.2", port: serveText(t, ln, "internet"), dns: "198.51.100.2"}
}

// inNetns runs f on a thread joined to the network namespace at path:
// sockets it makes stay in that namespace.
func inNetns(t *testing.T, path string, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked if the thread cannot get back: it dies with the goroutine
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// serveText serves body on ln until the test ends and returns its port.
func serveText(t *testing.T, ln net.Listener, body string) string {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// serveDNS answers A queries for names from pc until it is closed.
func serveDNS(pc net.PacketConn, names map[string]net.IP) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
		b.EnableCompression()
		ip, ok := names[strings.ToLower(q.Name.String())]
		if !ok {
			b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RCode: dnsmessage.RCodeNameError})
		}
		b.StartQuestions()
		b.Question(q)
		if ok && q.Type == dnsmessage.TypeA {
			b.StartAnswers()
			var a [4]byte
			copy(a[:], ip.To4())
			b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: a})
		}
		if msg, err := b.Finish(); err == nil {
			pc.WriteTo(msg, from)
		}
	}
}

// Bridge mode: a network namespace of the sandbox's own with outbound
// access (by IP, by an --add-host name, and as root by a name a DNS server
// serves), the host's loopback out of reach unless --allow-host-loopback;
// none reaches nothing outside; the network helper goes with the sandbox.
func TestBridgeNetwork(t *testing.T) {
	e := newEnv(t)
	out := outside(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	loopPort := serveText(t, ln, "host-loopback")
	get := func(box, url string) (string, int) {
		return e.run("", "exec", box, "timeout", "5", "wget", "-q", "-O", "-", url)
	}
	args := []string{"run", "-d", "--name", "br", "--network", "bridge", "--add-host", "web:" + out.ip}
	if out.dns != "" {
		args = append(args, "--dns", out.dns)
	}
	e.must(append(args, e.ref, "sleep", "infinity")...)
	for _, url := range []string{"http://" + out.ip + ":" + out.port + "/", "http://web:" + out.port + "/"} {
		if body, code := get("br", url); code != 0 || body != "internet" {
			t.Errorf("bridge: GET %s: exit %d %q", url, code, body)
		}
	}
	if out.dns != "" {
		if body, code := get("br", "http://internet.test:"+out.port+"/"); code != 0 || body != "internet" {
			t.Errorf("bridge: GET by a name the test's DNS server serves: exit %d %q", code, body)
		}
		dnsThroughSlirp(t, e, out)
	}
	if body, code := get("br", "http://10.0.2.2:"+loopPort+"/"); code == 0 || strings.Contains(body, "host-loopback") {
		t.Errorf("bridge: the host's loopback is reachable without --allow-host-loopback: %q", body)
	}
	if got := e.must("exec", "br", "sh", "-c", "ip -4 addr show tap0 | grep -o 'inet [0-9.]*'; ip route | grep default"); !strings.Contains(got, "inet 10.0.2.100") || !strings.Contains(got, "default via 10.0.2.2") {
		t.Errorf("bridge interface:\n%s", got)
	}
	// rlm_code's spelling for the host: host-gateway.
	e.must("run", "-d", "--name", "loop", "--network", "bridge", "--allow-host-loopback", "--add-host", "host.docker.internal:host-gateway", e.ref, "sleep", "infinity")
	if body, code := get("loop", "http://host.docker.internal:"+loopPort+"/"); code != 0 || body != "host-loopback" {
		t.Errorf("--allow-host-loopback: GET the host's loopback: exit %d %q", code, body)
	}
	if got := e.must("exec", "loop", "cat", "/etc/resolv.conf"); got != "nameserver 10.0.2.3\n" {
		t.Errorf("bridge resolv.conf: %q, want slirp4netns's forwarder", got)
	}
	// none: nothing outside, not even the host's loopback.
	e.must("run", "-d", "--name", "iso", e.ref, "sleep", "infinity")
	for _, url := range []string{"http://" + out.ip + ":" + out.port + "/", "http://127.0.0.1:" + loopPort + "/"} {
		if body, code := get("iso", url); code == 0 || strings.Contains(body, "internet") || strings.Contains(body, "host-loopback") {
			t.Errorf("none: GET %s reached: %q", url, body)
		}
	}
	if out, code := e.run("", "run", "--rm", "--allow-host-loopback", e.ref, "true"); code != 125 || !strings.Contains(out, "--network bridge") {
		t.Errorf("--allow-host-loopback without bridge: exit %d %q", code, out)
	}
	// inspect names each one's network, as dockerd's does, with no
	// address: a bridge sandbox's 10.0.2.100 is its own slirp4netns's,
	// which nothing outside it reaches (podman's slirp4netns mode shows
	// none either).
	addrs := "{{.NetworkSettings.IPAddress}}|{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{$v.IPAddress}}/{{$v.IPPrefixLen}} {{$v.Gateway}}{{end}}"
	if got := e.must("inspect", "-f", addrs, "br"); got != "|bridge /0 \n" {
		t.Errorf("inspect of a bridge sandbox: %q", got)
	}
	if got := e.must("inspect", "-f", addrs, "iso"); got != "|none /0 \n" {
		t.Errorf("inspect of a sandbox without a network: %q", got)
	}
	// The helper goes with the sandbox: stop, then rm.
	ids := map[string]bool{}
	for _, name := range []string{"br", "loop"} {
		ids[strings.TrimSpace(e.must("inspect", "--format", "{{.Id}}", name))] = true
	}
	e.must("stop", "-t", "0", "br")
	e.must("rm", "-f", "br", "loop", "iso")
	fixtures.Eventually(t, "nothing left after rm", func() (bool, string) {
		left := e.leftovers(ids)
		return len(left) == 0, strings.Join(left, "\n")
	})
}

// helperProcs returns the host-side helpers of sandbox id (marked
// _SLOPBOX_HELPER_OF=id in their environment), each as "slirp4netns" or
// "forwarder" (slopbox re-executed as its port forwarder) or its command
// name.
func helperProcs(id string) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if !strings.Contains("\x00"+string(environ), "\x00_SLOPBOX_HELPER_OF="+id+"\x00") {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		what := strings.TrimSpace(string(comm))
		if strings.Contains("\x00"+string(environ), "\x00_SLOPBOX_REEXEC=sandbox-ports\x00") {
			what = "forwarder"
		}
		out[pid] = what
	}
	return out
}

// dnsThroughSlirp: without --dns, a bridge sandbox asks slirp4netns's own
// DNS forwarder (10.0.2.3), which asks the host's resolver. slopbox runs
// in a mount namespace of its own (unshare -m, private propagation) whose
// /etc/resolv.conf names the test's DNS server, so the host's is not
// touched; the whole run --rm happens in it, mounts and cleanup included.
// Root only: rootless, neither a mount over /etc/resolv.conf nor a DNS
// server on port 53 is possible (the rootless run of TestBridgeNetwork
// has no DNS server, see outside).
func dnsThroughSlirp(t *testing.T, e *env, out outsideNet) {
	t.Helper()
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+out.dns+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", "sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolv,
		e.bin, "--root", e.root, "run", "--rm", "--network", "bridge", e.ref,
		"sh", "-c", "cat /etc/resolv.conf; timeout 20 wget -q -O - http://internet.test:"+out.port+"/")
	cmd.WaitDelay = 10 * time.Second
	cmd.Stderr = os.Stderr
	got, err := cmd.Output()
	if err != nil || string(got) != "nameserver 10.0.2.3\ninternet" {
		t.Errorf("bridge without --dns, the host's resolver the test's DNS server: %v\n%s", err, got)
	}
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Published ports: a server inside a bridge sandbox, bound to 127.0.0.1 or
// to every address, reached from the host through -p (on the host's
// loopback); many concurrent connections; 32 MiB checked byte for byte;
// UDP; ps and inspect show the ports; a conflict, a privileged port
// (rootless), none and host mode say what they do; rm releases the port.
func TestPublishedPorts(t *testing.T) {
	e := newEnv(t)
	py := e.pythonRef(t)
	p1, p2, p3 := freePort(t), freePort(t), freePort(t)
	serve := `mkdir -p /w && echo hello > /w/index.html && head -c 33554432 /dev/urandom > /w/big && sha256sum /w/big > /w/big.sum && httpd -p %s -h /w && touch /w/ready && sleep infinity`
	e.must("run", "-d", "--name", "lo", "--network", "bridge", "-p", fmt.Sprintf("%d:8000", p1), e.ref, "sh", "-c", fmt.Sprintf(serve, "127.0.0.1:8000"))
	e.must("run", "-d", "--name", "any", "--network", "bridge", "-p", fmt.Sprintf("127.0.0.1:%d:80/tcp", p2), e.ref, "sh", "-c", fmt.Sprintf(serve, "80"))
	for _, box := range []string{"lo", "any"} {
		waitFor(t, box+"'s server", func() bool { _, code := e.run("", "exec", box, "test", "-e", "/w/ready"); return code == 0 })
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(port int, path string) ([]byte, error) {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("status %s", resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	for _, c := range []struct {
		box  string
		port int
	}{{"lo", p1}, {"any", p2}} {
		if b, err := get(c.port, "/index.html"); err != nil || string(b) != "hello\n" {
			t.Errorf("%s: GET through -p: %q %v", c.box, b, err)
		}
		big, err := get(c.port, "/big")
		sum := strings.Fields(e.must("exec", c.box, "cat", "/w/big.sum"))[0]
		if err != nil || len(big) != 32<<20 || fmt.Sprintf("%x", sha256.Sum256(big)) != sum {
			t.Errorf("%s: 32 MiB through -p: %d bytes, %v (sha256 inside %s)", c.box, len(big), err, sum)
		}
	}
	// Many connections at once, to a threaded server with a deep accept
	// queue (busybox httpd's, 9, would make the kernel drop SYNs and the
	// test measure TCP's retransmission timer rather than the forwarder).
	pc := freePort(t)
	e.must("run", "-d", "--name", "conc", "--network", "bridge", "-p", fmt.Sprintf("%d:8000", pc), py, "python3", "-c", `import socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000))
s.listen(1024)
def one(c):
    try:
        c.recv(65536)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nhello\n")
    finally:
        c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()`)
	waitFor(t, "the threaded server", func() bool { b, err := get(pc, "/"); return err == nil && string(b) == "hello\n" })
	// No process per connection: while the connections run, the sandbox's
	// host-side helpers are one forwarder and one slirp4netns.
	concID := strings.TrimSpace(e.must("inspect", "--format", "{{.Id}}", "conc"))
	seen := map[int]string{}
	stop, sampled := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			for pid, what := range helperProcs(concID) {
				seen[pid] = what
			}
			n++
			select {
			case <-stop:
				sampled <- n
				return
			case <-time.After(5 * time.Millisecond): // not a core's worth of /proc reads
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b, err := get(pc, "/"); err != nil || string(b) != "hello\n" {
				errs <- fmt.Errorf("%q %v", b, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	samples := <-sampled
	close(errs)
	if n := len(errs); n > 0 {
		t.Errorf("%d of 200 concurrent GETs failed, e.g. %v", n, <-errs)
	}
	kinds := map[string]int{}
	for _, what := range seen {
		kinds[what]++
	}
	if len(seen) != 2 || kinds["slirp4netns"] != 1 || kinds["forwarder"] != 1 {
		t.Errorf("the sandbox's helpers during 200 connections (%d samples of /proc): %v, want one forwarder and one slirp4netns", samples, seen)
	}
	// Nothing listening inside: the connection is closed, not hung.
	e.must("run", "-d", "--name", "empty", "--network", "bridge", "-p", fmt.Sprintf("%d:9", p3), e.ref, "sleep", "infinity")
	if _, err := get(p3, "/"); err == nil {
		t.Error("GET through a port nothing listens on inside succeeded")
	}
	// UDP, to a server bound to the sandbox's loopback.
	up := freePort(t)
	e.must("run", "-d", "--name", "udp", "--network", "bridge", "-p", fmt.Sprintf("%d:5353/udp", up), py, "python3", "-c",
		`import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 5353))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(b"echo:" + d, a)`)
	uc, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", up))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	// Pinged until the server is up (a datagram sent before it has bound
	// is lost), within the tests' patience.
	got := ""
	fixtures.Wait(func() (bool, string) {
		uc.Write([]byte("ping"))
		uc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 64)
		if n, err := uc.Read(buf); err == nil {
			got = string(buf[:n])
		}
		return got != "", ""
	})
	if got != "echo:ping" {
		t.Errorf("UDP through -p: %q", got)
	}
	// A server listening on the sandbox's ::1 only (Node's localhost).
	p6 := freePort(t)
	e.must("run", "-d", "--name", "v6", "--network", "bridge", "-p", fmt.Sprintf("%d:8001", p6), py, "python3", "-c", `import socket
s = socket.socket(socket.AF_INET6)
s.bind(("::1", 8001))
s.listen(16)
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nv6\n")
    c.close()`)
	waitFor(t, "the ::1 server through -p", func() bool { b, err := get(p6, "/"); return err == nil && string(b) == "v6\n" })
	// ps and inspect show them.
	if ps := e.must("ps"); !strings.Contains(ps, fmt.Sprintf("127.0.0.1:%d->8000/tcp", p1)) || !strings.Contains(ps, fmt.Sprintf("127.0.0.1:%d->5353/udp", up)) {
		t.Errorf("ps does not show the ports:\n%s", ps)
	}
	if out := e.must("port", "lo"); out != fmt.Sprintf("8000/tcp -> 127.0.0.1:%d\n", p1) {
		t.Errorf("port: %q", out)
	}
	if out := e.must("port", "udp", "5353/udp"); out != fmt.Sprintf("127.0.0.1:%d\n", up) {
		t.Errorf("port udp 5353/udp: %q", out)
	}
	if ins := e.must("inspect", "-f", "{{json .NetworkSettings.Ports}}", "any"); !strings.Contains(ins, fmt.Sprintf(`"HostPort":"%d"`, p2)) {
		t.Errorf("inspect: %s", ins)
	}
	// A host port taken by another sandbox, or by the host.
	if out, code := e.run("", "run", "--rm", "--network", "bridge", "-p", fmt.Sprintf("%d:80", p1), e.ref, "true"); code != 125 || !strings.Contains(out, "already published by sandbox lo") {
		t.Errorf("a port another sandbox publishes: exit %d %q", code, out)
	}
	if os.Geteuid() != 0 {
		if out, code := e.run("", "run", "--rm", "--network", "bridge", "-p", "80:80", e.ref, "true"); code != 125 || !strings.Contains(out, "privileged") {
			t.Errorf("rootless -p 80: exit %d %q", code, out)
		}
	}
	if out, code := e.run("", "run", "--rm", "--network", "none", "-p", "8080:80", e.ref, "true"); code != 125 || !strings.Contains(out, "--network bridge") {
		t.Errorf("-p with none: exit %d %q", code, out)
	}
	// As Docker's: -p without --network gives the sandbox bridge networking.
	if out, code := e.run("", "run", "--rm", "-p", fmt.Sprintf("%d:80", freePort(t)), e.ref, "sh", "-c", "ip -o link | grep -vc ' lo:'"); code != 0 || strings.TrimSpace(out) == "0" {
		t.Errorf("-p without --network: exit %d %q, want a bridge-networked sandbox", code, out)
	}
	if out, code := e.run("", "run", "--rm", "--network", "host", "-p", "8080:80", e.ref, "true"); code != 0 || !strings.Contains(out, "discarded") {
		t.Errorf("-p with host: exit %d %q", code, out)
	}
	for _, bad := range []string{"8080:80/sctp", "8000-8001:80-81", "x"} {
		if out, code := e.run("", "run", "--rm", "--network", "bridge", "-p", bad, e.ref, "true"); code != 125 || !strings.Contains(out, bad) {
			t.Errorf("-p %s: exit %d %q", bad, code, out)
		}
	}
	// No sandbox half-made by those refusals; stop and rm release ports.
	e.must("stop", "-t", "0", "lo")
	if _, err := get(p1, "/index.html"); err == nil {
		t.Error("the port still answers after stop")
	}
	e.must("start", "lo")
	waitFor(t, "lo's server after start", func() bool { b, err := get(p1, "/index.html"); return err == nil && string(b) == "hello\n" })
	// Created sandboxes bind their ports at start, as Docker's do: two may
	// be created with the same host port; the second to start is refused
	// and stays created.
	pcr := freePort(t)
	for _, n := range []string{"cr1", "cr2"} {
		e.must("create", "--name", n, "--network", "bridge", "-p", fmt.Sprintf("%d:80", pcr), e.ref, "sleep", "infinity")
	}
	e.must("start", "cr1")
	if out, code := e.run("", "start", "cr2"); code == 0 || !strings.Contains(out, "already published by sandbox cr1") {
		t.Errorf("start of a second sandbox publishing the same port: exit %d %q", code, out)
	}
	if ps := e.must("ps", "-a", "--filter", "name=cr2"); !strings.Contains(ps, "Created") {
		t.Errorf("a sandbox whose start failed is not created again:\n%s", ps)
	}
	e.must("rm", "-f", "cr1")
	e.must("start", "cr2")
	e.must("rm", "-f", "cr2")
	// Host port left to the kernel: one is picked at each start.
	e.must("run", "-d", "--name", "rnd", "--network", "bridge", "-p", "8000", e.ref, "sleep", "infinity")
	if out := e.must("port", "rnd", "8000"); !strings.HasPrefix(out, "127.0.0.1:") || strings.HasSuffix(out, ":0\n") {
		t.Errorf("port of -p 8000: %q", out)
	}
	e.must("stop", "-t", "0", "rnd")
	e.must("start", "rnd")
	if out := e.must("port", "rnd", "8000"); !strings.HasPrefix(out, "127.0.0.1:") || strings.HasSuffix(out, ":0\n") {
		t.Errorf("port of -p 8000 after a restart: %q", out)
	}
	ids := map[string]bool{}
	for _, name := range []string{"lo", "any", "empty", "udp", "rnd", "conc", "v6"} {
		ids[strings.TrimSpace(e.must("inspect", "--format", "{{.Id}}", name))] = true
	}
	e.must("rm", "-f", "lo", "any", "empty", "udp", "rnd", "conc", "v6")
	for _, p := range []int{p1, p2, p3, pc, p6} {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("host port %d not released by rm: %v", p, err)
			continue
		}
		ln.Close()
	}
	if c, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", up)); err != nil {
		t.Errorf("UDP host port %d not released by rm: %v", up, err)
	} else {
		c.Close()
	}
	fixtures.Eventually(t, "nothing left after rm", func() (bool, string) {
		left := e.leftovers(ids)
		return len(left) == 0, strings.Join(left, "\n")
	})
}

// canBind reports whether nothing holds network/addr on the host now.
func canBind(network, addr string) error {
	if strings.HasPrefix(network, "udp") {
		c, err := net.ListenPacket(network, addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	ln, err := net.Listen(network, addr)
	if err == nil {
		ln.Close()
	}
	return err
}

// kill and prune release published ports: kill of a running sandbox; a
// run -d whose main command exited, then prune; a foreground run whose
// slopbox process was SIGKILLed, then prune alone, which also leaves no
// slirp4netns or forwarder of it (but prune leaves the sandbox of a
// foreground run whose slopbox lives, and one kept with --keep).
func TestPortsReleasedByKillAndPrune(t *testing.T) {
	e := newEnv(t)
	e.must("pull", "-q", e.ref)
	held := func(what string, port int) {
		t.Helper()
		if canBind("tcp", fmt.Sprintf("127.0.0.1:%d", port)) == nil {
			t.Fatalf("%s: host port %d is not published", what, port)
		}
	}
	pk := freePort(t)
	e.must("run", "-d", "--name", "k", "--network", "bridge", "-p", fmt.Sprintf("%d:80", pk), e.ref, "sleep", "infinity")
	held("kill", pk)
	e.must("kill", "k")
	if err := canBind("tcp", fmt.Sprintf("127.0.0.1:%d", pk)); err != nil {
		t.Errorf("kill did not release host port %d: %v", pk, err)
	}
	e.must("rm", "-f", "k")

	// The main command of a detached sandbox exits (when told to).
	pe := freePort(t)
	e.must("run", "-d", "--name", "ex", "--network", "bridge", "-p", fmt.Sprintf("%d:80", pe), e.ref, "sh", "-c", "until [ -e /tmp/go ]; do sleep 0.1; done")
	held("exited", pe)
	e.must("exec", "ex", "touch", "/tmp/go")
	fixtures.Eventually(t, "the sandbox stopped when its main command exited", func() (bool, string) {
		return strings.Contains(e.must("ps", "-a", "--filter", "name=ex"), "Exited"), e.evidence("ex")
	})
	e.must("prune")
	if err := canBind("tcp", fmt.Sprintf("127.0.0.1:%d", pe)); err != nil {
		t.Errorf("prune of an exited sandbox did not release host port %d: %v", pe, err)
	}

	// SIGKILL of a foreground run serving through a published port.
	ps := freePort(t)
	cmd := exec.Command(e.bin, "--root", e.root, "run", "--network", "bridge", "-p", fmt.Sprintf("%d:8000", ps), e.ref,
		"sh", "-c", "mkdir -p /w && echo served > /w/index.html && exec httpd -f -p 8000 -h /w")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	client := &http.Client{Timeout: 5 * time.Second}
	waitFor(t, fmt.Sprintf("the server in the foreground sandbox through -p %d", ps), func() bool {
		b, err := httpBody(client, fmt.Sprintf("http://127.0.0.1:%d/", ps))
		return err == nil && b == "served\n"
	})
	e.killOwnerThenPrune(t, cmd, ps, "a foreground run")
	// A foreground run that ended by itself with --keep leaves a running
	// sandbox that prune keeps.
	e.must("run", "--keep", "--name", "kept", "--network", "bridge", e.ref, "true")
	e.must("prune")
	if out := e.must("exec", "kept", "echo", "still-here"); out != "still-here\n" {
		t.Errorf("exec in the kept sandbox after prune: %q", out)
	}
}

// nonLoopbackIPv4 returns an IPv4 address of one of the host's interfaces
// that are up and not loopback.
func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.String()
			}
		}
	}
	t.Fatal("this host has no non-loopback IPv4 address")
	return ""
}

// Where published ports are bound: 127.0.0.1 without a host IP (not on
// the host's other addresses), the given address with one; in host mode
// nothing at all.
func TestPublishedPortHostAddress(t *testing.T) {
	e := newEnv(t)
	ext := nonLoopbackIPv4(t)
	serve := "mkdir -p /w && echo at-%s > /w/index.html && exec httpd -f -p 8000 -h /w"
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(hostport string) (string, error) {
		resp, err := client.Get("http://" + hostport + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	pd := freePort(t)
	e.must("run", "-d", "--name", "dflt", "--network", "bridge", "-p", fmt.Sprintf("%d:8000", pd), e.ref, "sh", "-c", fmt.Sprintf(serve, "default"))
	ln, err := net.Listen("tcp", ext+":0")
	if err != nil {
		t.Fatal(err)
	}
	px := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	e.must("run", "-d", "--name", "ext", "--network", "bridge", "-p", fmt.Sprintf("%s:%d:8000", ext, px), e.ref, "sh", "-c", fmt.Sprintf(serve, "ext"))
	loDflt, extExt := fmt.Sprintf("127.0.0.1:%d", pd), net.JoinHostPort(ext, strconv.Itoa(px))
	waitFor(t, "the default-bound port", func() bool { b, err := get(loDflt); return err == nil && b == "at-default\n" })
	waitFor(t, "the port on "+ext, func() bool { b, err := get(extExt); return err == nil && b == "at-ext\n" })
	if b, err := get(net.JoinHostPort(ext, strconv.Itoa(pd))); err == nil && b == "at-default\n" {
		t.Errorf("-p %d:8000 answers on %s: %q", pd, ext, b)
	}
	if b, err := get(fmt.Sprintf("127.0.0.1:%d", px)); err == nil && b == "at-ext\n" {
		t.Errorf("-p %s:%d:8000 answers on 127.0.0.1: %q", ext, px, b)
	}
	if out := e.must("port", "ext", "8000"); out != extExt+"\n" {
		t.Errorf("port ext 8000: %q, want %s", out, extExt)
	}
	// host mode: the ports are discarded, and nothing slopbox started
	// listens on them.
	ph := freePort(t)
	e.must("run", "-d", "--name", "hostnet", "--network", "host", "-p", fmt.Sprintf("%d:80", ph), "-p", fmt.Sprintf("%d:81/udp", ph), e.ref, "sleep", "infinity")
	for _, a := range []struct{ network, addr string }{
		{"tcp", fmt.Sprintf("127.0.0.1:%d", ph)}, {"tcp", fmt.Sprintf("0.0.0.0:%d", ph)}, {"udp", fmt.Sprintf("127.0.0.1:%d", ph)},
	} {
		if err := canBind(a.network, a.addr); err != nil {
			t.Errorf("host mode: %s %s is taken: %v", a.network, a.addr, err)
		}
	}
	hostID := strings.TrimSpace(e.must("inspect", "--format", "{{.Id}}", "hostnet"))
	if h := helperProcs(hostID); len(h) != 0 {
		t.Errorf("host mode: helpers running: %v", h)
	}
	e.must("rm", "-f", "dflt", "ext", "hostnet")
}
