package engine

import (
	"encoding/json"
	"fmt"
	"github.com/slopbox/slopbox/dockercompat/service"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slopbox/slopbox/dockercompat"
	"github.com/slopbox/slopbox/test/fixtures"
)

// collectEvents subscribes to s's events; the function returned gives the
// container events' actions so far, of start, die, stop, kill and destroy.
func collectEvents(s *Server) func() []string {
	events := make(chan *eventMessage, 256)
	s.events.mu.Lock()
	s.events.subs[events] = struct{}{}
	s.events.mu.Unlock()
	var seq []string
	return func() []string {
		for {
			select {
			case ev := <-events:
				if a := string(ev.Action); slices.Contains([]string{"start", "die", "stop", "kill", "destroy"}, a) {
					seq = append(seq, a)
				}
			default:
				return seq
			}
		}
	}
}

// inspectState is a container's State as inspect gives it.
func inspectState(t *testing.T, c *http.Client, name string) (code int, st struct {
	Status              string
	Running, Restarting bool
}, restarts int) {
	t.Helper()
	code, out := call(t, c, "GET", "/containers/"+name+"/json", nil)
	var in struct {
		State struct {
			Status              string
			Running, Restarting bool
		}
		RestartCount int
	}
	json.Unmarshal(out, &in)
	return code, in.State, in.RestartCount
}

// restartingContainer creates and starts container name with restart
// policy always, whose first run exits 1 at once and whose later runs
// sleep; with a restart count of 9 set before that exit, its restart
// waits 51.2 s (delay: true), and else 100 ms.
func restartingContainer(t *testing.T, s *Server, c *http.Client, ref, name string, delay bool) *service.Container {
	t.Helper()
	first := "exit 1"
	if delay {
		first = "while [ ! -e /go ]; do sleep 0.05; done; exit 1"
	}
	cmd := []string{"sh", "-c", fmt.Sprintf("if [ -e /ran ]; then exec sleep 1000; fi; touch /ran; %s", first)}
	if code, out := call(t, c, "POST", "/containers/create?name="+name, map[string]any{"Image": ref, "Cmd": cmd,
		"HostConfig": map[string]any{"RestartPolicy": map[string]any{"Name": "always"}}}); code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	t.Cleanup(func() { call(t, c, "DELETE", "/containers/"+name+"?force=1", nil) })
	if code, out := call(t, c, "POST", "/containers/"+name+"/start", nil); code != 204 {
		t.Fatalf("start: %d %s", code, out)
	}
	sb, err := s.b.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if delay {
		if err := dockercompat.SetRestartCount(sb.Info().StateDir, 9); err != nil {
			t.Fatal(err)
		}
		if code, out := call(t, c, "POST", "/containers/"+name+"/exec", map[string]any{"Cmd": []string{"touch", "/go"}}); code != 201 {
			t.Fatalf("exec create: %d %s", code, out)
		} else {
			var e struct{ Id string }
			json.Unmarshal(out, &e)
			if code, out := call(t, c, "POST", "/exec/"+e.Id+"/start", map[string]any{"Detach": true}); code != 200 {
				t.Fatalf("exec start: %d %s", code, out)
			}
		}
		fixtures.Eventually(t, name+" restarting", func() (bool, string) {
			_, st, _ := inspectState(t, c, name)
			return st.Restarting && st.Status == "restarting" && !st.Running, fmt.Sprintf("state %+v", st)
		})
	} else {
		fixtures.Eventually(t, name+" restarted", func() (bool, string) {
			_, st, n := inspectState(t, c, name)
			return st.Running && n == 1, fmt.Sprintf("state %+v, restarts %d", st, n)
		})
	}
	return sb
}

// The restart policy is carried out by the container's monitor, not by
// serve: serve reports each run's start and die, and an action through
// the API during the restart's delay cancels it (the monitor waiting is
// killed: nothing is left running, and no start follows).
func TestRestartDelayActions(t *testing.T) {
	s, c, ref := testServer(t)
	for _, tc := range []struct {
		action, method, path string
		code                 int
		want                 []string
		status               string
	}{
		{"stop", "POST", "/stop?t=0", 204, []string{"start", "die"}, "exited"},
		{"rm", "DELETE", "", 409, []string{"start", "die"}, "restarting"},
		{"rm-f", "DELETE", "?force=1", 204, []string{"start", "die", "destroy"}, ""},
		{"start", "POST", "/start", 204, []string{"start", "die", "start"}, "running"},
		{"restart", "POST", "/restart?t=0", 204, []string{"start", "die", "start"}, "running"},
		{"kill", "POST", "/kill", 204, []string{"start", "die"}, "exited"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			events := collectEvents(s)
			name := "delay-" + tc.action
			sb := restartingContainer(t, s, c, ref, name, true)
			code, out := call(t, c, tc.method, "/containers/"+name+tc.path, nil)
			if code != tc.code {
				t.Errorf("%s: %d %s, want %d", tc.action, code, out, tc.code)
			}
			if tc.action == "rm" && !strings.Contains(string(out), "You cannot remove a restarting container") {
				t.Errorf("rm of a restarting container: %s", out)
			}
			time.Sleep(500 * time.Millisecond) // a late event, a restart not cancelled
			code, st, _ := inspectState(t, c, name)
			switch {
			case tc.status == "" && code != 404:
				t.Errorf("inspect after %s: %d, want 404", tc.action, code)
			case tc.status != "" && st.Status != tc.status:
				t.Errorf("after %s: status %q, want %q", tc.action, st.Status, tc.status)
			}
			if tc.status == "exited" && sb.MonitorAlive() {
				t.Errorf("after %s: its monitor still waits to restart it", tc.action)
			}
			if got := events(); !slices.Equal(got, tc.want) {
				t.Errorf("events %q, want %q", got, tc.want)
			}
		})
	}
}

// A container restarted by its policy has the start of each run from
// serve's watch, then stops by hand for good: a stop's exit is not
// answered, and neither is a later kill's.
func TestRestartedThenStopped(t *testing.T) {
	s, c, ref := testServer(t)
	events := collectEvents(s)
	restartingContainer(t, s, c, ref, "again", false)
	if code, out := call(t, c, "POST", "/containers/again/stop?t=0", nil); code != 204 {
		t.Fatalf("stop: %d %s", code, out)
	}
	time.Sleep(time.Second) // a restart would have begun by now
	if _, st, n := inspectState(t, c, "again"); st.Running || st.Restarting || st.Status != "exited" || n != 1 {
		t.Errorf("after stop: %+v, restarts %d; want exited, 1", st, n)
	}
	if got, want := events(), []string{"start", "die", "start", "die", "stop"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	// Started by hand: restarts count from 0 again.
	if code, out := call(t, c, "POST", "/containers/again/start", nil); code != 204 {
		t.Fatalf("start: %d %s", code, out)
	}
	if _, st, n := inspectState(t, c, "again"); !st.Running || n != 0 {
		t.Errorf("after start: %+v, restarts %d; want running, 0", st, n)
	}
}
