package engine

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRoutesAsDockerd: what the ServeMux table answers where moby's
// router has a rule of its own: a container {id} carrying an escaped "/"
// names no container (it would read a record a sandbox wrote in its own
// upper directory), HEAD only for /_ping and a container's archive, an
// unclean path redirected to its clean form with the client's version,
// and the roots of subtrees a JSON 404, not a redirect.
func TestRoutesAsDockerd(t *testing.T) {
	s, c, ref := testServer(t)
	code, out := call(t, c, "POST", "/containers/create?name=victim", map[string]any{"Image": ref, "Cmd": []string{"sleep", "1000"}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, out)
	}
	var created struct{ Id string }
	json.Unmarshal(out, &created)
	sb, err := s.b.Open(created.Id)
	if err != nil {
		t.Fatal(err)
	}
	// What the container could write at /x/state.json: a record naming
	// itself, as if it were a sandbox of the state root.
	planted := filepath.Join(sb.Info().StateDir, "upper", "x")
	if err := os.MkdirAll(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(planted, "state.json"), []byte(`{"ID":"`+created.Id+`","Pid":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	escaped := created.Id + "%2Fupper%2Fx"
	for _, tc := range []struct{ method, path string }{
		{"GET", "/containers/" + escaped + "/json"},
		{"POST", "/containers/" + escaped + "/kill"},
		{"DELETE", "/containers/" + escaped + "?force=1"},
		{"POST", "/containers/" + escaped + "/wait"},
	} {
		if code, out := call(t, c, tc.method, tc.path, nil); code != http.StatusNotFound || !strings.Contains(string(out), "No such container") {
			t.Errorf("%s %s: %d %s, want 404 No such container", tc.method, tc.path, code, out)
		}
	}
	if _, err := s.b.Open("victim"); err != nil {
		t.Errorf("the container after those requests: %v", err)
	}

	noFollow := *c
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	noFollow.Timeout = 20 * time.Second // a HEAD of /events served as a GET would never end
	do := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://slopbox"+path, nil)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	jsonError := func(body string) bool {
		var m struct{ Message string }
		return json.Unmarshal([]byte(body), &m) == nil && m.Message != ""
	}
	for _, p := range []string{"/v1.41/events", "/v1.41/containers/victim/json", "/v1.41/containers/victim/logs"} {
		if resp, body := do("HEAD", p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("HEAD %s: %d %q, want dockerd's 404", p, resp.StatusCode, body)
		}
	}
	if resp, _ := do("HEAD", "/v1.41/_ping"); resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /_ping: %d, want 200", resp.StatusCode)
	}
	resp, _ := do("GET", "/v1.41/containers//victim/./json?size=1")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusMovedPermanently || loc != "/v1.41/containers/victim/json?size=1" {
		t.Errorf("an unclean path: %d to %q, want 301 to /v1.41/containers/victim/json?size=1", resp.StatusCode, loc)
	}
	for _, tc := range []struct{ method, path string }{{"POST", "/v1.41/swarm"}, {"GET", "/v1.41/images"}, {"GET", "/v1.41/nothing/here"}, {"PUT", "/v1.41/containers/victim/start"}} {
		if resp, body := do(tc.method, tc.path); resp.StatusCode != http.StatusNotFound || !jsonError(body) {
			t.Errorf("%s %s: %d %q, want a JSON 404", tc.method, tc.path, resp.StatusCode, body)
		}
	}
}
