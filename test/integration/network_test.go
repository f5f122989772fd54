package integration

import (
	"os"
	"strings"
	"testing"

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
	for _, mode := range []string{"none", "host"} {
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
	for _, bad := range [][]string{{"--add-host", "nocolon"}, {"--add-host", "x:not-an-ip"}, {"--dns", "dns.example"}} {
		if out, code := e.run("", append(append([]string{"run", "--rm"}, bad...), e.ref, "true")...); code != 125 || !strings.Contains(out, bad[0]) {
			t.Errorf("%v: exit %d %q, want 125 naming the flag", bad, code, out)
		}
	}
}
