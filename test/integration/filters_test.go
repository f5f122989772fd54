package integration

import (
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestServeFiltersDockerRules (issue 41 case 0): compose finds a
// service's container with two label filters, project and service, and
// Docker ANDs labels. slopbox ORed them, so `compose exec service_1`
// landed in whichever container of the project came first. Every list
// endpoint follows Docker's rules key by key (labels AND, other keys'
// values OR, keys AND, unknown keys refused), and so do ps, prune and
// volume ls on the CLI, which share the code.
func TestServeFiltersDockerRules(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	const p, s = "com.docker.compose.project", "com.docker.compose.service"
	for _, c := range []struct{ name, project, service string }{
		{"flt-one", "proj", "service_1"}, {"flt-two", "proj", "service_2"}, {"flt-else", "other", "service_1"},
	} {
		must("create", "--name", c.name, "--label", p+"="+c.project, "--label", s+"="+c.service, e.ref, "true")
	}
	must("run", "--name", "flt-ran", "--label", p+"=proj", "--label", s+"=service_3", e.ref, "true")

	names := func(query string) []string {
		t.Helper()
		var list []struct{ Names []string }
		engineJSON(t, sock, http.MethodGet, "/containers/json?all=1&filters="+url.QueryEscape(query), nil, http.StatusOK, &list)
		var out []string
		for _, c := range list {
			out = append(out, strings.TrimPrefix(c.Names[0], "/"))
		}
		sort.Strings(out)
		return out
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		// compose's query: both labels must hold
		{`{"label":["` + p + `=proj","` + s + `=service_1"]}`, []string{"flt-one"}},
		{`{"label":{"` + p + `=proj":true,"` + s + `=service_1":true}}`, []string{"flt-one"}},
		{`{"label":["` + s + `=service_1"]}`, []string{"flt-else", "flt-one"}},
		{`{"label":["` + p + `"]}`, []string{"flt-else", "flt-one", "flt-ran", "flt-two"}},
		{`{"label":["` + p + `=proj","nobody"]}`, nil},
		// names OR, and AND with labels
		{`{"name":["flt-one","flt-two"]}`, []string{"flt-one", "flt-two"}},
		{`{"name":["flt-one","flt-two"],"label":["` + s + `=service_2"]}`, []string{"flt-two"}},
		{`{"name":["^/flt-o"]}`, []string{"flt-one"}},
		// statuses OR
		{`{"status":["created","exited"],"label":["` + p + `=proj"]}`, []string{"flt-one", "flt-ran", "flt-two"}},
		{`{"status":["exited"]}`, []string{"flt-ran"}},
		{`{"exited":["0"]}`, []string{"flt-ran"}},
		{`{"exited":["1"]}`, nil},
	} {
		if got := names(c.query); !slices.Equal(got, c.want) {
			t.Errorf("filters %s: %q, want %q", c.query, got, c.want)
		}
	}
	// An unknown key is refused, never ignored (a list widened, a prune
	// that removes more than asked).
	for _, path := range []string{"/containers/json", "/images/json", "/volumes", "/events"} {
		code, body := engineDo(t, sock, http.MethodGet, path+"?filters="+url.QueryEscape(`{"colour":["red"]}`), nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "invalid filter 'colour'") {
			t.Errorf("GET %s with an unknown filter: %d %s, want 400 invalid filter", path, code, body)
		}
	}
	// The CLI shares the code.
	if out := e.must("ps", "-a", "--format", "{{.Names}}", "--filter", "label="+p+"=proj", "--filter", "label="+s+"=service_1"); strings.TrimSpace(out) != "flt-one" {
		t.Errorf("slopbox ps with two labels: %q, want flt-one", out)
	}
	if out, code := e.run("", "ps", "-a", "--filter", "colour=red"); code == 0 || !strings.Contains(out, "invalid filter 'colour'") {
		t.Errorf("slopbox ps --filter colour=red: exit %d %q", code, out)
	}

	// Images: an image without the label is not listed (the filter was
	// ignored: every image came back).
	var images []struct{ Id string }
	engineJSON(t, sock, http.MethodGet, "/images/json?filters="+url.QueryEscape(`{"label":["nobody=here"]}`), nil, http.StatusOK, &images)
	if len(images) != 0 {
		t.Errorf("images with label nobody=here: %d listed, want none", len(images))
	}
	engineJSON(t, sock, http.MethodGet, "/images/json?filters="+url.QueryEscape(`{"dangling":["false"]}`), nil, http.StatusOK, &images)
	if len(images) != 1 {
		t.Errorf("images dangling=false: %d listed, want the one pulled", len(images))
	}

	// Volumes: labels AND, names OR.
	must("volume", "create", "--label", "a=1", "--label", "b=2", "flt-vol-ab")
	must("volume", "create", "--label", "a=1", "flt-vol-a")
	vols := func(query string) []string {
		t.Helper()
		var r struct{ Volumes []struct{ Name string } }
		engineJSON(t, sock, http.MethodGet, "/volumes?filters="+url.QueryEscape(query), nil, http.StatusOK, &r)
		var out []string
		for _, v := range r.Volumes {
			out = append(out, v.Name)
		}
		sort.Strings(out)
		return out
	}
	if got := vols(`{"label":["a=1","b=2"]}`); !slices.Equal(got, []string{"flt-vol-ab"}) {
		t.Errorf("volumes with labels a=1 and b=2: %q", got)
	}
	if got := vols(`{"name":["flt-vol-ab","flt-vol-a$"]}`); !slices.Equal(got, []string{"flt-vol-a", "flt-vol-ab"}) {
		t.Errorf("volumes named either: %q", got)
	}
	if out := e.must("volume", "ls", "-q", "--filter", "label=a=1", "--filter", "label=b=2"); strings.TrimSpace(out) != "flt-vol-ab" {
		t.Errorf("slopbox volume ls with two labels: %q", out)
	}

	// until=0 is the epoch: nothing was made before it (it pruned every
	// stopped container, read as "now"); two until values are refused.
	if out := e.must("prune", "--filter", "until=0"); strings.Contains(out, "Deleted:") {
		t.Errorf("slopbox prune --filter until=0 removed: %s", out)
	}
	if out, code := e.run("", "prune", "--filter", "until=24h", "--filter", "until=1s"); code == 0 {
		t.Errorf("slopbox prune with two until filters: exit 0 %s", out)
	}
	// Prune takes only what its filters name: label=proj with
	// label!=service_2 removes flt-one and flt-ran, leaves flt-two and
	// flt-else (the filter was ignored: every stopped container went).
	var pruned struct{ ContainersDeleted []string }
	engineJSON(t, sock, http.MethodPost, "/containers/prune?filters="+url.QueryEscape(`{"label":["`+p+`=proj"],"label!":["`+s+`=service_2"]}`), nil, http.StatusOK, &pruned)
	if len(pruned.ContainersDeleted) != 2 {
		t.Errorf("prune label=proj label!=service_2: deleted %q, want two", pruned.ContainersDeleted)
	}
	if got := names(`{}`); !slices.Equal(got, []string{"flt-else", "flt-two"}) {
		t.Errorf("after the filtered prune: %q, want flt-else and flt-two", got)
	}
	if code, body := engineDo(t, sock, http.MethodPost, "/containers/prune?filters="+url.QueryEscape(`{"name":["flt-two"]}`), nil); code != http.StatusBadRequest {
		t.Errorf("prune with a name filter (Docker's prune has none): %d %s, want 400", code, body)
	}
	if out := e.must("prune", "--filter", "label="+s+"=service_2"); !strings.Contains(out, "Deleted:") {
		t.Errorf("slopbox prune --filter: %q", out)
	}
	if got := names(`{}`); !slices.Equal(got, []string{"flt-else"}) {
		t.Errorf("after slopbox prune --filter: %q, want flt-else", got)
	}
	must("volume", "rm", "flt-vol-ab", "flt-vol-a")
}

// TestServeNetworksPredefined (issue 42, the first calls): GET /networks
// lists Docker's predefined networks (testcontainers-go and compose list
// them before anything else; it was a 404), inspect names the running
// containers on each with the ids that container inspect gives, filters
// follow Docker's rules, and what slopbox cannot do yet (a user-defined
// network) is refused at once with Docker's status and what works
// instead; a predefined network cannot be removed (403).
func TestServeNetworksPredefined(t *testing.T) {
	e := newEnv(t)
	sock := e.serve(t)
	must := dockerMust(t, sock)
	must("pull", "-q", e.ref)
	must("run", "-d", "--name", "net-none", e.ref, "sleep", "1000")
	t.Cleanup(func() { dockerCLI(t, debianDocker, sock, "", "rm", "-f", "net-none") })

	if out := must("network", "ls", "--format", "{{.Name}} {{.Driver}}"); out != "bridge bridge\nhost host\nnone null\n" {
		t.Errorf("docker network ls: %q", out)
	}
	var list []struct{ Name, Id string }
	engineJSON(t, sock, http.MethodGet, "/networks?filters="+url.QueryEscape(`{"name":["bridge","none"],"type":["builtin"]}`), nil, http.StatusOK, &list)
	if len(list) != 2 || list[0].Name != "bridge" || list[1].Name != "none" {
		t.Errorf("networks named bridge or none: %+v", list)
	}
	engineJSON(t, sock, http.MethodGet, "/networks?filters="+url.QueryEscape(`{"type":["custom"]}`), nil, http.StatusOK, &list)
	if len(list) != 0 {
		t.Errorf("custom networks: %+v, want none", list)
	}
	var none struct {
		Id         string
		Containers map[string]struct{ Name, EndpointID string }
	}
	engineJSON(t, sock, http.MethodGet, "/networks/none", nil, http.StatusOK, &none)
	var c struct {
		Id              string
		NetworkSettings struct {
			Networks map[string]struct{ NetworkID, EndpointID string }
		}
	}
	engineJSON(t, sock, http.MethodGet, "/containers/net-none/json", nil, http.StatusOK, &c)
	ep, ok := none.Containers[c.Id]
	if !ok || ep.Name != "net-none" || ep.EndpointID == "" {
		t.Errorf("network none's containers %+v: no net-none (%s)", none.Containers, c.Id)
	}
	if got := c.NetworkSettings.Networks["none"]; got.NetworkID != none.Id || got.EndpointID != ep.EndpointID {
		t.Errorf("container inspect's network %+v, the network's id %s and endpoint %s", got, none.Id, ep.EndpointID)
	}
	if code, body := engineDo(t, sock, http.MethodGet, "/networks/"+none.Id[:12], nil); code != http.StatusOK {
		t.Errorf("network by short id: %d %s", code, body)
	}
	if code, body := engineDo(t, sock, http.MethodGet, "/networks/nosuch", nil); code != http.StatusNotFound {
		t.Errorf("a missing network: %d %s, want 404", code, body)
	}
	// A user-defined network, with Docker's statuses.
	if out, code := dockerCLI(t, debianDocker, sock, "", "network", "create", "proj_default"); code != 0 {
		t.Errorf("docker network create: exit %d %q", code, out)
	}
	if code, body := engineDo(t, sock, http.MethodPost, "/networks/create", map[string]any{"Name": "proj_default"}); code != http.StatusConflict {
		t.Errorf("POST /networks/create of a name in use: %d %s, want 409", code, body)
	}
	if code, body := engineDo(t, sock, http.MethodDelete, "/networks/proj_default", nil); code != http.StatusNoContent {
		t.Errorf("DELETE /networks/proj_default: %d %s, want 204", code, body)
	}
	if code, body := engineDo(t, sock, http.MethodDelete, "/networks/bridge", nil); code != http.StatusForbidden || !strings.Contains(string(body), "pre-defined") {
		t.Errorf("DELETE /networks/bridge: %d %s, want 403", code, body)
	}
	if out := e.must("network", "ls", "-q", "--filter", "driver=null"); strings.TrimSpace(out) != none.Id[:12] {
		t.Errorf("slopbox network ls --filter driver=null: %q", out)
	}
}
