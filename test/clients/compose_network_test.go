package clients

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The compose files of this file leave network_mode out, so that compose
// makes its project networks (P_default, or the file's own) as user-defined
// bridge networks and attaches each service to them: name resolution by
// service and container name through the network's DNS server (on its
// gateway), published ports on the host's 127.0.0.1, isolation between
// networks.

// multiServiceCompose: web serves a named volume with busybox httpd, is
// healthy once it answers itself, and publishes port 80 on a free port of
// 127.0.0.1; client starts only once web is healthy.
const multiServiceCompose = `services:
  web:
    image: busybox:latest
    command: ["sh", "-c", "[ -f /srv/index.html ] || echo hello from the web volume > /srv/index.html; echo web ready; exec httpd -f -p 80 -h /srv"]
    volumes:
      - site:/srv
    ports:
      - "127.0.0.1::80"
    stop_grace_period: 1s
    healthcheck:
      test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1/index.html"]
      interval: 1s
      start_period: 1s
      retries: 60
  client:
    image: busybox:latest
    command: ["sleep", "3600"]
    init: true
    stop_grace_period: 1s
    depends_on:
      web:
        condition: service_healthy
volumes:
  site: {}
`

// retried is a shell loop running cmd up to 50 times, 0.2 s apart, until
// it succeeds: a server that was just (re)started may take a moment. Only
// the last attempt's errors are printed.
func retried(cmd string) string {
	return "for i in $(seq 49); do " + cmd + " 2>/dev/null && exit 0; sleep 0.2; done; " + cmd
}

// composeRow is a line of compose ps --format json.
type composeRow struct{ ID, Name, Service, State, Health string }

func composePS(t *testing.T, docker, dir, project string, args ...string) map[string]composeRow {
	t.Helper()
	out, code := compose(t, docker, dir, project, "", append([]string{"ps", "--format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("docker compose ps: exit %d\n%s", code, out)
	}
	rows := map[string]composeRow{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r composeRow
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Service != "" {
			rows[r.Service] = r
		}
	}
	return rows
}

// endpoint is a container's NetworkSettings.Networks[NAME] in docker
// inspect.
type endpoint struct {
	IPAddress, Gateway, NetworkID string
	Aliases, DNSNames             []string
}

// endpoints is docker inspect's NetworkSettings.Networks of a container.
func endpoints(t *testing.T, docker, container string) map[string]endpoint {
	t.Helper()
	out, err := exec.Command(docker, "inspect", "--type", "container", container).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", container, err)
	}
	var got []struct {
		NetworkSettings struct{ Networks map[string]endpoint }
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != 1 {
		t.Fatalf("docker inspect %s: %v\n%s", container, err, out)
	}
	return got[0].NetworkSettings.Networks
}

// subnets is docker network inspect's IPAM subnets of a network.
func subnets(t *testing.T, docker, network string) []netip.Prefix {
	t.Helper()
	out, err := exec.Command(docker, "network", "inspect", network).Output()
	if err != nil {
		t.Fatalf("docker network inspect %s: %v", network, err)
	}
	var got []struct {
		IPAM struct{ Config []struct{ Subnet string } }
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != 1 {
		t.Fatalf("docker network inspect %s: %v\n%s", network, err, out)
	}
	var ps []netip.Prefix
	for _, c := range got[0].IPAM.Config {
		if p, err := netip.ParsePrefix(c.Subnet); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// dockerLs is the non-empty lines `docker KIND ls -q --filter F` prints.
func dockerLs(t *testing.T, docker, kind, filter string) []string {
	t.Helper()
	out, err := exec.Command(docker, kind, "ls", "-q", "--filter", filter).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s ls --filter %s: %v\n%s", kind, filter, err, out)
	}
	return strings.Fields(string(out))
}

// TestComposeMultiService: two services on compose's project network
// (P_default), through docker compose v2.40.3 and each docker client. web
// (busybox httpd on a named volume, a healthcheck, a published port) and
// client (depends_on web service_healthy); client reaches web by service
// name, container name and short id; the published port answers on the
// host's 127.0.0.1; ps, logs, cp, stop/start/restart; down then up keeps
// the volume; down --volumes --remove-orphans leaves no container, network
// or volume of the project.
func TestComposeMultiService(t *testing.T) {
	composePlugin(t)
	for name, docker := range dockerClients(t) {
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(docker); err != nil {
				t.Skipf("no %s client on this machine (%s): an optional extra", name, docker)
			}
			multiService(t, docker, "multi-"+strings.ReplaceAll(name, ".", ""))
		})
	}
}

func multiService(t *testing.T, docker, project string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(multiServiceCompose), 0o644); err != nil {
		t.Fatal(err)
	}
	must := func(stdin string, args ...string) string {
		t.Helper()
		out, code := compose(t, docker, dir, project, stdin, args...)
		if code != 0 {
			t.Fatalf("docker compose %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	t.Cleanup(func() { compose(t, docker, dir, project, "", "down", "--volumes", "--remove-orphans") })
	const content = "hello from the web volume\n"
	netName, projectLabel := project+"_default", "label=com.docker.compose.project="+project

	must("", "up", "--detach", "--wait", "--wait-timeout", "120")
	rows := composePS(t, docker, dir, project, "--status", "running")
	if rows["web"].State != "running" || rows["web"].Health != "healthy" || rows["client"].State != "running" {
		t.Fatalf("compose ps: %+v, want web running and healthy, client running", rows)
	}
	webName, webID := rows["web"].Name, strings.TrimSpace(must("", "ps", "-q", "web"))
	if len(webID) < 12 {
		t.Fatalf("compose ps -q web: %q", webID)
	}

	// The project network, its subnet from Docker's default pools, and
	// web's endpoint on it: an address in the subnet, the service name
	// as alias, the names the DNS server answers.
	if nets := dockerLs(t, docker, "network", projectLabel); len(nets) != 1 {
		t.Errorf("networks of the project: %q, want %s alone", nets, netName)
	}
	ep, ok := endpoints(t, docker, webName)[netName]
	if !ok {
		t.Fatalf("docker inspect %s: not on %s: %+v", webName, netName, endpoints(t, docker, webName))
	}
	ip, err := netip.ParseAddr(ep.IPAddress)
	if err != nil {
		t.Fatalf("web's IPAddress on %s: %q", netName, ep.IPAddress)
	}
	gw, _ := netip.ParseAddr(ep.Gateway)
	sub := subnets(t, docker, netName)
	if len(sub) == 0 || !sub[0].Contains(ip) || !sub[0].Contains(gw) {
		t.Errorf("web's address %s, gateway %q: not in %s's subnets %v", ip, ep.Gateway, netName, sub)
	}
	if !netip.MustParsePrefix("172.16.0.0/12").Contains(ip) && !netip.MustParsePrefix("192.168.0.0/16").Contains(ip) {
		t.Errorf("web's address %s: not from Docker's default pools", ip)
	}
	if !slices.Contains(ep.Aliases, "web") || !slices.Contains(ep.DNSNames, "web") || !slices.Contains(ep.DNSNames, webName) {
		t.Errorf("web's endpoint on %s: Aliases %q, DNSNames %q; want web among both and %s among DNSNames", netName, ep.Aliases, ep.DNSNames, webName)
	}

	// The network's DNS server on its gateway answers web's service
	// name, container name and short id.
	if resolv := must("", "exec", "-T", "client", "cat", "/etc/resolv.conf"); !strings.Contains(resolv, "nameserver "+ep.Gateway+"\n") {
		t.Errorf("client's /etc/resolv.conf, want nameserver %s (the gateway):\n%s", ep.Gateway, resolv)
	}
	for _, host := range []string{"web", webName, webID[:12]} {
		if got := must("", "exec", "-T", "client", "timeout", "15", "wget", "-q", "-O-", "http://"+host+"/index.html"); got != content {
			t.Errorf("client: wget http://%s/index.html: %q, want %q", host, got, content)
		}
	}
	if got := must("", "exec", "-T", "client", "nslookup", "web"); !strings.Contains(got, ep.IPAddress) {
		t.Errorf("client: nslookup web, want %s:\n%s", ep.IPAddress, got)
	}

	// The published port, from the host.
	hostPort := strings.TrimSpace(must("", "port", "web", "80"))
	if h, _, err := net.SplitHostPort(hostPort); err != nil || h != "127.0.0.1" {
		t.Fatalf("compose port web 80: %q, want 127.0.0.1:PORT", hostPort)
	}
	resp, err := http.Get("http://" + hostPort + "/index.html")
	if err != nil {
		t.Fatalf("GET on the published port: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != content {
		t.Errorf("GET http://%s/index.html: %d %q", hostPort, resp.StatusCode, body)
	}

	// A network with containers on it stays.
	if out, err := exec.Command(docker, "network", "rm", netName).CombinedOutput(); err == nil || !strings.Contains(string(out), "active endpoints") {
		t.Errorf("docker network rm %s while up: %v %s, want refused: has active endpoints", netName, err, out)
	}

	if logs := must("", "logs", "--no-color", "web"); !strings.Contains(logs, "web ready") {
		t.Errorf("compose logs web: no \"web ready\":\n%s", logs)
	}

	// cp both ways.
	src := filepath.Join(dir, "in.txt")
	os.WriteFile(src, []byte("copied into client\n"), 0o644)
	must("", "cp", src, "client:/tmp/in.txt")
	back := filepath.Join(dir, "back.txt")
	must("", "cp", "client:/tmp/in.txt", back)
	if b, err := os.ReadFile(back); err != nil || string(b) != "copied into client\n" {
		t.Errorf("compose cp into client and back: %q %v", b, err)
	}

	// web stopped, started, restarted: it answers by name again (its
	// address may have changed; the DNS server follows).
	must("", "stop", "web")
	if rows := composePS(t, docker, dir, project, "--status", "running"); rows["web"].State == "running" {
		t.Errorf("web running after compose stop web: %+v", rows)
	}
	must("", "start", "web")
	must("", "restart", "web")
	if got := must("", "exec", "-T", "client", "sh", "-c", retried("timeout 10 wget -q -O- http://web/index.html")); got != content {
		t.Errorf("after restart, client: wget http://web/index.html: %q", got)
	}

	// down keeps the named volume (and removes the network); up again
	// serves what was written to it.
	must("", "exec", "-T", "web", "sh", "-c", "echo kept across down > /srv/kept.txt")
	must("", "down")
	if nets := dockerLs(t, docker, "network", projectLabel); len(nets) != 0 {
		t.Errorf("compose down left the project's networks: %q", nets)
	}
	if vols := dockerLs(t, docker, "volume", projectLabel); len(vols) != 1 {
		t.Errorf("after compose down, the project's volumes: %q, want %s_site", vols, project)
	}
	must("", "up", "--detach", "--wait", "--wait-timeout", "120")
	if got := must("", "exec", "-T", "client", "sh", "-c", retried("timeout 10 wget -q -O- http://web/kept.txt")); got != "kept across down\n" {
		t.Errorf("after down and up, client: wget http://web/kept.txt: %q", got)
	}

	must("", "down", "--volumes", "--remove-orphans")
	if out, _ := exec.Command(slopbox, "--root", root, "ps", "-aq", "--filter", projectLabel).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("compose down left containers: %s", out)
	}
	if nets := dockerLs(t, docker, "network", projectLabel); len(nets) != 0 {
		t.Errorf("compose down left networks: %q", nets)
	}
	if vols := dockerLs(t, docker, "volume", projectLabel); len(vols) != 0 {
		t.Errorf("compose down --volumes left volumes: %q", vols)
	}
	if out, err := exec.Command(docker, "network", "inspect", netName).CombinedOutput(); err == nil {
		t.Errorf("docker network inspect %s after down: %s", netName, out)
	}
}

// isolatedCompose: a on front, b on back, c on both; each serves "I am X"
// on port 80 and is healthy once it answers itself.
const isolatedCompose = `x-server: &server
  image: busybox:latest
  stop_grace_period: 1s
  healthcheck:
    test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1/"]
    interval: 1s
    start_period: 1s
    retries: 60
services:
  a:
    <<: *server
    command: ["sh", "-c", "mkdir -p /www && echo I am a > /www/index.html && exec httpd -f -p 80 -h /www"]
    networks: [front]
  b:
    <<: *server
    command: ["sh", "-c", "mkdir -p /www && echo I am b > /www/index.html && exec httpd -f -p 80 -h /www"]
    networks: [back]
  c:
    <<: *server
    command: ["sh", "-c", "mkdir -p /www && echo I am c > /www/index.html && exec httpd -f -p 80 -h /www"]
    networks: [front, back]
networks:
  front: {}
  back: {}
`

// TestComposeNetworksIsolated: two networks of one project, front and back,
// through docker compose and each docker client. c (on both) reaches a
// and b by name; a does not resolve b's name (nor b a's) and does not
// reach b's address; c reaches b's address (so that the address is right).
func TestComposeNetworksIsolated(t *testing.T) {
	composePlugin(t)
	for name, docker := range dockerClients(t) {
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(docker); err != nil {
				t.Skipf("no %s client on this machine (%s): an optional extra", name, docker)
			}
			networksIsolated(t, docker, "iso-"+strings.ReplaceAll(name, ".", ""))
		})
	}
}

func networksIsolated(t *testing.T, docker, project string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(isolatedCompose), 0o644); err != nil {
		t.Fatal(err)
	}
	must := func(args ...string) string {
		t.Helper()
		out, code := compose(t, docker, dir, project, "", args...)
		if code != 0 {
			t.Fatalf("docker compose %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	t.Cleanup(func() { compose(t, docker, dir, project, "", "down", "--volumes", "--remove-orphans") })
	front, back := project+"_front", project+"_back"

	must("up", "--detach", "--wait", "--wait-timeout", "120")
	rows := composePS(t, docker, dir, project)
	for _, s := range []string{"a", "b", "c"} {
		if rows[s].State != "running" {
			t.Fatalf("compose ps: %+v, want a, b and c running", rows)
		}
	}
	epA, epB, epC := endpoints(t, docker, rows["a"].Name), endpoints(t, docker, rows["b"].Name), endpoints(t, docker, rows["c"].Name)
	if _, ok := epA[front]; !ok || len(epA) != 1 {
		t.Errorf("a's networks: %+v, want %s alone", epA, front)
	}
	if _, ok := epB[back]; !ok || len(epB) != 1 {
		t.Errorf("b's networks: %+v, want %s alone", epB, back)
	}
	if _, ok := epC[front]; !ok || len(epC) != 2 {
		t.Errorf("c's networks: %+v, want %s and %s", epC, front, back)
	}
	if _, ok := epC[back]; !ok {
		t.Errorf("c's networks: %+v, want %s and %s", epC, front, back)
	}
	bIP := epB[back].IPAddress
	if _, err := netip.ParseAddr(bIP); err != nil {
		t.Fatalf("b's IPAddress on %s: %q", back, bIP)
	}
	if sf, sb := subnets(t, docker, front), subnets(t, docker, back); len(sf) == 0 || len(sb) == 0 || sf[0].Overlaps(sb[0]) {
		t.Errorf("subnets: %s %v, %s %v; want one each, apart", front, sf, back, sb)
	}

	// c, on both, reaches a and b by name, and b by address.
	for host, want := range map[string]string{"a": "I am a\n", "b": "I am b\n", bIP: "I am b\n"} {
		if got := must("exec", "-T", "c", "timeout", "15", "wget", "-q", "-O-", "http://"+host+"/"); got != want {
			t.Errorf("c: wget http://%s/: %q, want %q", host, got, want)
		}
	}
	// a does not resolve b, b does not resolve a: the name is not found,
	// not merely unreachable. busybox ping says "bad address" (Debian's
	// static busybox wget dies of SIGSEGV on a name getaddrinfo does not
	// find, so it cannot tell); busybox nslookup asks the resolv.conf
	// server itself and must not print the other's address.
	ips := map[string]string{"a": epA[front].IPAddress, "b": bIP}
	for _, p := range [][2]string{{"a", "b"}, {"b", "a"}} {
		out, code := compose(t, docker, dir, project, "", "exec", "-T", p[0], "timeout", "30", "ping", "-c", "1", "-W", "1", p[1])
		if code == 0 || !strings.Contains(out, "bad address") {
			t.Errorf("%s: ping %s: exit %d %q, want a name not found (bad address)", p[0], p[1], code, out)
		}
		out, code = compose(t, docker, dir, project, "", "exec", "-T", p[0], "timeout", "30", "nslookup", p[1])
		if ip := ips[p[1]]; code == 0 || ip == "" || strings.Contains(out, ip) {
			t.Errorf("%s: nslookup %s: exit %d, want it not found (and not %q):\n%s", p[0], p[1], code, ip, out)
		}
	}
	// a does not reach b's address.
	if out, code := compose(t, docker, dir, project, "", "exec", "-T", "a", "timeout", "5", "wget", "-q", "-O-", "http://"+bIP+"/"); code == 0 || strings.Contains(out, "I am b") {
		t.Errorf("a: wget http://%s/ (b on %s): exit %d %q, want it unreachable", bIP, back, code, out)
	}

	must("down", "--volumes", "--remove-orphans")
	if nets := dockerLs(t, docker, "network", "label=com.docker.compose.project="+project); len(nets) != 0 {
		t.Errorf("compose down left networks: %q", nets)
	}
}

// inspectNetworkedCompose is Inspect AI's multi-service shape (a default
// service and another, each with init, a short stop grace period and a
// healthcheck) without network_mode: both on the project's default
// network, as a CTF-style task has an agent's box and a target.
const inspectNetworkedCompose = `services:
  default:
    image: busybox:latest
    command: "tail -f /dev/null"
    init: true
    stop_grace_period: 1s
    healthcheck:
      test: ["CMD", "true"]
      interval: 1s
      start_period: 1s
  victim:
    image: busybox:latest
    command: ["sh", "-c", "mkdir -p /www && echo the flag > /www/flag.txt && exec httpd -f -p 8080 -h /www"]
    init: true
    stop_grace_period: 1s
    healthcheck:
      test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/flag.txt"]
      interval: 1s
      start_period: 1s
      retries: 60
`

// TestComposeInspectNetworked replays Inspect AI's calls for a
// multi-service task on the default network: up --wait, ps --format json,
// exec default reaching victim by name, down --volumes.
func TestComposeInspectNetworked(t *testing.T) {
	composePlugin(t)
	for name, docker := range dockerClients(t) {
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(docker); err != nil {
				t.Skipf("no %s client on this machine (%s): an optional extra", name, docker)
			}
			project := "inspnet-" + strings.ReplaceAll(name, ".", "")
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(inspectNetworkedCompose), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { compose(t, docker, dir, project, "", "down", "--volumes", "--remove-orphans") })
			if out, code := compose(t, docker, dir, project, "", "up", "--detach", "--wait", "--wait-timeout", "120"); code != 0 {
				t.Fatalf("docker compose up --wait: exit %d\n%s", code, out)
			}
			rows := composePS(t, docker, dir, project, "--status", "running")
			if rows["default"].Health != "healthy" || rows["victim"].Health != "healthy" {
				t.Errorf("compose ps: %+v, want both running and healthy", rows)
			}
			if out, code := compose(t, docker, dir, project, "", "exec", "-T", "default", "timeout", "15", "wget", "-q", "-O-", "http://victim:8080/flag.txt"); code != 0 || out != "the flag\n" {
				t.Errorf("compose exec default wget http://victim:8080/flag.txt: exit %d %q", code, out)
			}
			if out, code := compose(t, docker, dir, project, "", "down", "--volumes", "--remove-orphans"); code != 0 {
				t.Errorf("docker compose down: exit %d\n%s", code, out)
			}
			if nets := dockerLs(t, docker, "network", "label=com.docker.compose.project="+project); len(nets) != 0 {
				t.Errorf("compose down left networks: %q", nets)
			}
		})
	}
}
