package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/test/fixtures"
)

// TestHealthcheckBounds: a create request's healthcheck durations below
// Docker's 1 ms are refused with Docker's 400 and message; an image's
// (which neither Docker nor serve refuses) of 1 ns, or negative, runs its
// check no more often than once per healthFloor, and does not bring
// serve down (a negative interval made time.NewTicker panic). The check
// counts its runs in a file: over a window of 3 s, at most 3 runs can
// start at a 1 s floor; the test allows 6, and checks that the checks
// run at all (hundreds ran in that window without the floor).
func TestHealthcheckBounds(t *testing.T) {
	s, c, ref := testServer(t)
	for _, f := range []string{"Interval", "Timeout", "StartPeriod"} {
		code, out := call(t, c, "POST", "/containers/create", map[string]any{"Image": ref, "Cmd": []string{"sleep", "1000"},
			"Healthcheck": map[string]any{"Test": []string{"CMD", "true"}, f: 1}})
		want := f + " in Healthcheck cannot be less than 1ms"
		if code != http.StatusBadRequest || !strings.Contains(string(out), want) {
			t.Errorf("create with a Healthcheck %s of 1 ns: %d %s, want 400 %q", f, code, out, want)
		}
	}

	reg := strings.Split(ref, "/")[0]
	var names []string
	for name, interval := range map[string]time.Duration{"ns": time.Nanosecond, "negative": -time.Second} {
		img := fixtures.Busybox(t, image.HostPlatform())
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.Config.Healthcheck = &v1.HealthConfig{Test: []string{"CMD-SHELL", "echo x >> /tmp/checks"}, Interval: interval}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		hc := reg + "/test/hc-" + name + ":latest"
		fixtures.Push(t, hc, img)
		if _, err := s.b.Store().Pull(context.Background(), hc); err != nil {
			t.Fatal(err)
		}
		if code, out := call(t, c, "POST", "/containers/create?name="+name, map[string]any{"Image": hc, "Cmd": []string{"sleep", "1000"}}); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, code, out)
		}
		if code, out := call(t, c, "POST", "/containers/"+name+"/start", nil); code != http.StatusNoContent {
			t.Fatalf("start %s: %d %s", name, code, out)
		}
		names = append(names, name)
	}
	checks := func(name string) int {
		t.Helper()
		sb, err := s.b.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		res, err := sb.Exec(context.Background(), backend.ExecRequest{Argv: []string{"sh", "-c", "cat /tmp/checks 2>/dev/null | wc -l"}})
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
		if err != nil {
			t.Fatalf("%s: count of checks %q: %v", name, res.Stdout, err)
		}
		return n
	}
	before := map[string]int{}
	for _, name := range names {
		fixtures.Eventually(t, name+"'s healthcheck runs", func() (bool, string) {
			before[name] = checks(name)
			return before[name] > 0, "no check has run"
		})
	}
	time.Sleep(3 * time.Second)
	for _, name := range names {
		if ran := checks(name) - before[name]; ran > 6 {
			t.Errorf("the image's healthcheck with interval %s ran %d times in 3 s, want at most 6 (one a second at most)", name, ran)
		}
		code, out := call(t, c, "GET", "/containers/"+name+"/json", nil)
		var inspect struct {
			State struct{ Health struct{ Status string } }
		}
		json.Unmarshal(out, &inspect)
		if code != http.StatusOK || inspect.State.Health.Status != "healthy" {
			t.Errorf("inspect %s: %d, health %q, want healthy", name, code, inspect.State.Health.Status)
		}
	}
}
