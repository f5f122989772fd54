package clients

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

// start runs req through testcontainers' GenericContainer and terminates
// the container when the test ends.
func start(t *testing.T, req testcontainers.ContainerRequest) testcontainers.Container {
	t.Helper()
	ctx := context.Background()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if c != nil {
		t.Cleanup(func() {
			if err := c.Terminate(context.Background()); err != nil {
				t.Errorf("terminate: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("GenericContainer: %v", err)
	}
	return c
}

// TestTestcontainersHTTPService (issue 42): testcontainers-go v0.45's
// GenericContainer, unchanged: it lists networks first (a 404 stopped it
// before anything was made), waits for a log line and for the port to
// listen (from the host and, by its own shell probe, inside), maps the
// port, and the service answers on it.
func TestTestcontainersHTTPService(t *testing.T) {
	c := start(t, testcontainers.ContainerRequest{
		Image:        "busybox:latest",
		Cmd:          []string{"sh", "-c", "mkdir -p /www && echo hello from slopbox > /www/index.html && echo ready && exec httpd -f -p 8080 -h /www"},
		ExposedPorts: []string{"8080/tcp"},
		WaitingFor:   wait.ForAll(wait.ForLog("ready"), wait.ForListeningPort("8080/tcp")).WithDeadline(time.Minute),
	})
	ctx := context.Background()
	port, err := c.MappedPort(ctx, "8080/tcp")
	if err != nil {
		t.Fatal(err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + host + ":" + port.Port() + "/index.html")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "hello from slopbox\n" {
		t.Errorf("GET on the mapped port %s: %d %q", port.Port(), resp.StatusCode, body)
	}
	state, err := c.State(ctx)
	if err != nil || !state.Running {
		t.Errorf("State: %+v %v, want running", state, err)
	}
}

// TestTestcontainersExecAndCopy: Exec (its output demultiplexed, exit
// codes kept), CopyToContainer, CopyFileFromContainer and Logs.
func TestTestcontainersExecAndCopy(t *testing.T) {
	c := start(t, testcontainers.ContainerRequest{
		Image:      "busybox:latest",
		Cmd:        []string{"sh", "-c", "echo started; exec sleep 1000"},
		WaitingFor: wait.ForLog("started"),
	})
	ctx := context.Background()
	code, r, err := c.Exec(ctx, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, tcexec.Multiplexed())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	if code != 3 || !strings.Contains(string(out), "out") || !strings.Contains(string(out), "err") {
		t.Errorf("exec: exit %d, output %q; want 3 with out and err", code, out)
	}
	if err := c.CopyToContainer(ctx, []byte("copied in\n"), "/tmp/in.txt", 0o640); err != nil {
		t.Fatalf("CopyToContainer: %v", err)
	}
	code, r, err = c.Exec(ctx, []string{"sh", "-c", "cat /tmp/in.txt; stat -c %a /tmp/in.txt 2>/dev/null || ls -l /tmp/in.txt"}, tcexec.Multiplexed())
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := io.ReadAll(r); code != 0 || !strings.HasPrefix(string(out), "copied in\n") {
		t.Errorf("the copied file: exit %d %q", code, out)
	}
	rc, err := c.CopyFileFromContainer(ctx, "/tmp/in.txt")
	if err != nil {
		t.Fatalf("CopyFileFromContainer: %v", err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "copied in\n" {
		t.Errorf("CopyFileFromContainer: %q", got)
	}
	logs, err := c.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := io.ReadAll(logs)
	logs.Close()
	if !strings.Contains(string(lb), "started") {
		t.Errorf("Logs: %q", lb)
	}
	if err := c.Stop(ctx, nil); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if state, err := c.State(ctx); err != nil || state.Running {
		t.Errorf("after Stop: %+v %v", state, err)
	}
}

// TestTestcontainersNetworkAliases (issue 42): testcontainers-go's network
// module makes a user-defined network (network.New), two GenericContainers
// join it with Networks and NetworkAliases, and reach each other by alias
// and by container name, resolved to their addresses on it; the server's
// port is published and listens as well. Removing the network after the
// containers are gone leaves nothing.
func TestTestcontainersNetworkAliases(t *testing.T) {
	ctx := context.Background()
	nw, err := network.New(ctx)
	if err != nil {
		t.Fatalf("network.New: %v", err)
	}
	// Registered first, so run last: after both containers are terminated.
	t.Cleanup(func() {
		if err := nw.Remove(context.Background()); err != nil {
			t.Errorf("network Remove: %v", err)
		}
		if out, err := exec.Command("/usr/bin/docker", "network", "inspect", nw.Name).CombinedOutput(); err == nil {
			t.Errorf("network %s still there after Remove: %s", nw.Name, out)
		}
	})
	srv := start(t, testcontainers.ContainerRequest{
		Image:          "busybox:latest",
		Cmd:            []string{"sh", "-c", "mkdir -p /www && echo hello over the network > /www/index.html && echo ready && exec httpd -f -p 8080 -h /www"},
		ExposedPorts:   []string{"8080/tcp"},
		Networks:       []string{nw.Name},
		NetworkAliases: map[string][]string{nw.Name: {"alias1"}},
		WaitingFor:     wait.ForAll(wait.ForLog("ready"), wait.ForListeningPort("8080/tcp")).WithDeadline(time.Minute),
	})
	// The second fetches from the first by its alias before it says so.
	cli := start(t, testcontainers.ContainerRequest{
		Image:          "busybox:latest",
		Cmd:            []string{"sh", "-c", "for i in $(seq 100); do if timeout 10 wget -q -O- http://alias1:8080/; then echo FETCHED OK; exec sleep 1000; fi; sleep 0.2; done; echo NOT FETCHED; exec sleep 1000"},
		Networks:       []string{nw.Name},
		NetworkAliases: map[string][]string{nw.Name: {"alias2"}},
		WaitingFor:     wait.ForLog("FETCHED OK").WithStartupTimeout(time.Minute),
	})
	logs, err := cli.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := io.ReadAll(logs)
	logs.Close()
	if !strings.Contains(string(lb), "hello over the network\nFETCHED OK") {
		t.Errorf("the second container's log: %q, want the first's page fetched by alias", lb)
	}

	// Both on the network, with their aliases and an address each.
	for _, c := range []struct {
		name  string
		c     testcontainers.Container
		alias string
	}{{"server", srv, "alias1"}, {"client", cli, "alias2"}} {
		nets, err := c.c.Networks(ctx)
		if err != nil || len(nets) != 1 || nets[0] != nw.Name {
			t.Errorf("%s: Networks %q %v, want %s alone", c.name, nets, err, nw.Name)
		}
		aliases, err := c.c.NetworkAliases(ctx)
		if err != nil || !slices.Contains(aliases[nw.Name], c.alias) {
			t.Errorf("%s: NetworkAliases %q %v, want %s on %s", c.name, aliases, err, c.alias, nw.Name)
		}
	}
	srvIP, err := srv.ContainerIP(ctx)
	if err != nil || srvIP == "" {
		t.Fatalf("server: ContainerIP %q %v", srvIP, err)
	}
	cliIP, err := cli.ContainerIP(ctx)
	if err != nil || cliIP == "" || cliIP == srvIP {
		t.Fatalf("client: ContainerIP %q %v (the server's %s)", cliIP, err, srvIP)
	}
	run := func(c testcontainers.Container, cmd string) (int, string) {
		t.Helper()
		code, r, err := c.Exec(ctx, []string{"sh", "-c", cmd}, tcexec.Multiplexed())
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		out, _ := io.ReadAll(r)
		return code, string(out)
	}
	// Each resolves the other's alias to its address on the network.
	if _, out := run(cli, "nslookup alias1"); !strings.Contains(out, srvIP) {
		t.Errorf("client: nslookup alias1, want %s:\n%s", srvIP, out)
	}
	if _, out := run(srv, "nslookup alias2"); !strings.Contains(out, cliIP) {
		t.Errorf("server: nslookup alias2, want %s:\n%s", cliIP, out)
	}
	// And the server's container name.
	name, err := srv.Name(ctx)
	if err != nil {
		t.Fatal(err)
	}
	name = strings.TrimPrefix(name, "/")
	if code, out := run(cli, "timeout 15 wget -q -O- http://"+name+":8080/"); code != 0 || out != "hello over the network\n" {
		t.Errorf("client: wget http://%s:8080/: exit %d %q", name, code, out)
	}

	// The server's port, published from the network, from the host.
	port, err := srv.MappedPort(ctx, "8080/tcp")
	if err != nil {
		t.Fatal(err)
	}
	host, err := srv.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + host + ":" + port.Port() + "/index.html")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "hello over the network\n" {
		t.Errorf("GET on the mapped port %s: %d %q", port.Port(), resp.StatusCode, body)
	}
}
