package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slopbox/slopbox/test/fixtures"
)

// TestUserNetworks: user-defined networks, root and rootless, through the
// CLI. Containers on one network reach each other by name, alias and
// short id through the network's DNS server; a name or address on another
// network is out of reach; a network with a running container cannot be
// removed (Docker's "has active endpoints"); overlapping subnets and
// names in use are refused; nothing is left once the containers go.
func TestUserNetworks(t *testing.T) {
	e := newEnv(t)
	e.must("network", "create", "front")
	e.must("network", "create", "--subnet", "10.77.0.0/24", "--label", "tier=back", "back")
	if out, code := e.run("", "network", "create", "front"); code == 0 || !strings.Contains(out, "already exists") {
		t.Errorf("a name in use: exit %d %q", code, out)
	}
	if out, code := e.run("", "network", "create", "--subnet", "10.77.0.128/25", "over"); code == 0 || !strings.Contains(out, "overlaps") {
		t.Errorf("an overlapping subnet: exit %d %q", code, out)
	}
	if out, code := e.run("", "network", "create", "--subnet", "10.78.0.0/24", "--gateway", "10.79.0.1", "badgw"); code == 0 || !strings.Contains(out, "gateway") {
		t.Errorf("a gateway outside the subnet: exit %d %q", code, out)
	}
	e.must("run", "-d", "--name", "web", "--network", "front", "--network-alias", "www", e.ref, "busybox", "httpd", "-f", "-p", "80", "-h", "/etc")
	e.must("run", "-d", "--name", "db", "--network", "back", "--ip", "10.77.0.9", e.ref, "sleep", "infinity")
	e.must("run", "-d", "--name", "cli", "--network", "front", e.ref, "sleep", "infinity")
	e.must("network", "connect", "back", "cli")
	var webInfo []struct {
		Id              string
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress, Gateway string }
		}
	}
	if err := json.Unmarshal([]byte(e.must("inspect", "web")), &webInfo); err != nil || len(webInfo) != 1 {
		t.Fatalf("inspect web: %v", err)
	}
	webIP := webInfo[0].NetworkSettings.Networks["front"].IPAddress
	if !strings.HasPrefix(webIP, "172.") {
		t.Errorf("web's address on front: %q (want one of Docker's default pools)", webIP)
	}
	// Its /etc/hosts names its own address on its first network, as
	// Docker's does (hostname -i).
	if hosts := e.must("exec", "web", "cat", "/etc/hosts"); webIP == "" || !strings.Contains(hosts, webIP+"\t") {
		t.Errorf("web's /etc/hosts does not name its address %s:\n%s", webIP, hosts)
	}
	for _, name := range []string{"web", "www", webInfo[0].Id[:12]} {
		if out, code := e.run("", "exec", "cli", "timeout", "5", "wget", "-q", "-O", "-", "http://"+name+"/hostname"); code != 0 || strings.TrimSpace(out) == "" {
			t.Errorf("cli → %s on front: exit %d %q", name, code, out)
		}
	}
	if out, code := e.run("", "exec", "cli", "timeout", "5", "busybox", "ping", "-c", "1", "-W", "2", "db"); code != 0 || !strings.Contains(out, "10.77.0.9") {
		t.Errorf("cli → db on back (connected while running): exit %d %q", code, out)
	}
	// web is on front only: back's names and addresses are out of reach.
	if out, code := e.run("", "exec", "web", "busybox", "nslookup", "db"); code == 0 && strings.Contains(out, "10.77.0.9") {
		t.Errorf("web resolved db, which is on another network: %q", out)
	}
	if out, code := e.run("", "exec", "web", "timeout", "5", "busybox", "ping", "-c", "1", "-W", "1", "10.77.0.9"); code == 0 {
		t.Errorf("web reached db's address on another network: %q", out)
	}
	if out, code := e.run("", "network", "rm", "front"); code == 0 || !strings.Contains(out, "active endpoints") {
		t.Errorf("rm of a network in use: exit %d %q", code, out)
	}
	var nets []struct {
		Name       string
		Containers map[string]struct{ Name, IPv4Address string }
		Labels     map[string]string
	}
	if err := json.Unmarshal([]byte(e.must("network", "inspect", "back")), &nets); err != nil || len(nets) != 1 {
		t.Fatalf("network inspect back: %v", err)
	}
	if len(nets[0].Containers) != 2 || nets[0].Labels["tier"] != "back" {
		t.Errorf("network inspect back: %+v", nets[0])
	}
	if got := e.must("network", "ls", "-q", "--filter", "label=tier=back"); len(strings.Fields(got)) != 1 {
		t.Errorf("network ls --filter label=tier=back: %q", got)
	}
	// A container started with no network, connected while it runs: as
	// root it resolves and reaches web at once (its resolv.conf now names
	// front's DNS server, as Docker's starts its resolver); rootless the
	// connection is refused until it is stopped, and says so.
	e.must("run", "-d", "--name", "lone", "--network", "none", e.ref, "sleep", "infinity")
	if os.Geteuid() == 0 {
		e.must("network", "connect", "front", "lone")
		if out, code := e.run("", "exec", "lone", "timeout", "5", "wget", "-q", "-O", "-", "http://web/hostname"); code != 0 || strings.TrimSpace(out) == "" {
			t.Errorf("lone → web after connect: exit %d %q (resolv.conf: %q)", code, out, e.must("exec", "lone", "cat", "/etc/resolv.conf"))
		}
	} else if out, code := e.run("", "network", "connect", "front", "lone"); code == 0 || !strings.Contains(out, "stop it first") {
		t.Errorf("rootless connect of a running container started on none: exit %d %q", code, out)
	}
	// Compose's order: created on an internal network, connected to
	// another, then started. It has outbound access (a default route) and
	// resolves web on front through inner's DNS server, which answers for
	// every network the asker is on.
	e.must("network", "create", "--internal", "inner")
	e.must("create", "--name", "mix", "--network", "inner", e.ref, "sleep", "infinity")
	e.must("network", "connect", "front", "mix")
	e.must("start", "mix")
	if out := e.must("exec", "mix", "ip", "route"); !strings.Contains(out, "default") {
		t.Errorf("mix, created on an internal network and connected to front: no default route:\n%s", out)
	}
	if out, code := e.run("", "exec", "mix", "timeout", "5", "wget", "-q", "-O", "-", "http://web/hostname"); code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("mix → web: exit %d %q (resolv.conf: %q)", code, out, e.must("exec", "mix", "cat", "/etc/resolv.conf"))
	}
	// Docker 25's repeated --network: one container on both.
	e.must("run", "-d", "--name", "two", "--network", "front", "--network", "back", e.ref, "sleep", "infinity")
	if out := e.must("inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", "two"); strings.Fields(out) == nil || !strings.Contains(out, "front") || !strings.Contains(out, "back") {
		t.Errorf("run --network front --network back: on %q", out)
	}
	if out, code := e.run("", "exec", "two", "busybox", "ping", "-c", "1", "-W", "2", "db"); code != 0 {
		t.Errorf("two → db on back: exit %d %q", code, out)
	}
	e.must("network", "disconnect", "back", "cli")
	e.must("rm", "-f", "web", "db", "cli", "lone", "mix", "two")
	e.must("network", "rm", "inner")
	e.must("network", "rm", "front", "back")
	// The helper goes with the last container on a network.
	deadline := time.Now().Add(5 * time.Second)
	for len(netdProcs(e.root)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if p := netdProcs(e.root); len(p) > 0 {
		t.Errorf("the network helper is still running after its last container went: %v", p)
	}
}

// netdProcs are the network helpers of the store at root.
func netdProcs(root string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if strings.Contains("\x00"+string(environ), "\x00_SLOPBOX_NETD="+root) {
			out = append(out, pid)
		}
	}
	return out
}

// TestServeNetworkedAtOnce: a fresh serve asked to create and start four
// containers on one network at the same moment (compose's services): each
// starts and reaches the others by name. The first attaches of a serve
// used to race to connect to the network helper, the second closing the
// connection the first was using ("use of closed network connection").
func TestServeNetworkedAtOnce(t *testing.T) {
	e := newEnv(t)
	e.must("pull", e.ref)
	e.must("network", "create", "burst")
	sock := e.serve(t)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: fixtures.Patience()}
	post := func(path, body string) (int, string) {
		resp, err := client.Post("http://slopbox/v1.44"+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const n = 4
	var wg sync.WaitGroup
	errs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("burst%d", i)
			body := fmt.Sprintf(`{"Image":%q,"Cmd":["sleep","infinity"],"HostConfig":{"NetworkMode":"burst"}}`, e.ref)
			if code, out := post("/containers/create?name="+name, body); code != 201 {
				errs[i] = fmt.Sprintf("create %s: %d %s", name, code, out)
				return
			}
			if code, out := post("/containers/"+name+"/start", ""); code != 204 {
				errs[i] = fmt.Sprintf("start %s: %d %s", name, code, out)
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for i := range n {
			e.run("", "rm", "-f", fmt.Sprintf("burst%d", i))
		}
		e.run("", "network", "rm", "burst")
	})
	for _, s := range errs {
		if s != "" {
			t.Error(s)
		}
	}
	if t.Failed() {
		return
	}
	for i := 1; i < n; i++ {
		if out, code := e.run("", "exec", "burst0", "busybox", "ping", "-c", "1", "-W", "2", fmt.Sprintf("burst%d", i)); code != 0 {
			t.Errorf("burst0 → burst%d: exit %d %q", i, code, out)
		}
	}
}
