package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slopbox/slopbox/dockercompat"
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

// A stop, kill, forced removal, start or restart through the API that lands while
// the restart policy is starting the container again — just before the
// start, or once its main command runs but before its watch is there —
// waits for that restart: the run it started has one start and one die,
// before the action's own event. The first code sent a second die from
// the stop; a kill returned before the exit, a removal's destroy came
// before the run's start, a start raced the restart's.
func TestActionsMidRestart(t *testing.T) {
	s, c, ref := testServer(t)
	for _, tc := range []struct {
		action, stage, path string
		code                int
		want                []string
		running             bool
	}{
		{"stop", "started", "/stop?t=0", 204, []string{"start", "die", "start", "die", "stop"}, false},
		{"stop", "starting", "/stop?t=0", 204, []string{"start", "die", "start", "die"}, false},
		{"kill", "started", "/kill", 204, []string{"start", "die", "start", "die"}, false},
		{"rm", "started", "?force=1", 204, []string{"start", "die", "start", "die", "destroy"}, false},
		{"rm", "starting", "?force=1", 204, []string{"start", "die", "start", "die", "destroy"}, false},
		{"start", "starting", "/start", 204, []string{"start", "die", "start", "die", "start"}, true},
		{"restart", "starting", "/restart?t=0", 204, []string{"start", "die", "start", "die", "start"}, true},
	} {
		t.Run(tc.action+"-"+tc.stage, func(t *testing.T) {
			name := "again-" + tc.action + "-" + tc.stage
			method := "POST"
			if tc.action == "rm" {
				method = "DELETE"
			}
			var once sync.Once
			done := make(chan int, 1)
			hook := func(id, stage string, cancel <-chan struct{}) {
				if stage != tc.stage {
					return
				}
				once.Do(func() {
					// The action runs beside the restart, which goes on
					// once the action has cancelled it.
					go func() {
						req, _ := http.NewRequest(method, "http://slopbox/v1.41/containers/"+name+tc.path, nil)
						resp, err := c.Do(req)
						if err != nil {
							done <- -1
							return
						}
						resp.Body.Close()
						done <- resp.StatusCode
					}()
					select {
					case <-cancel:
					case <-time.After(20 * time.Second):
						t.Error("the action did not cancel the restart")
					}
				})
			}
			s.testHookRestart.Store(&hook)
			t.Cleanup(func() { s.testHookRestart.Store(nil) })
			events := collectEvents(s)

			// The first run exits 1; the restarted one sleeps until stopped.
			cmd := []string{"sh", "-c", "if [ -e /ran ]; then exec sleep 1000; fi; touch /ran; exit 1"}
			if code, out := call(t, c, "POST", "/containers/create?name="+name, map[string]any{"Image": ref, "Cmd": cmd,
				"HostConfig": map[string]any{"RestartPolicy": map[string]any{"Name": "always"}}}); code != 201 {
				t.Fatalf("create: %d %s", code, out)
			}
			if code, out := call(t, c, "POST", "/containers/"+name+"/start", nil); code != 204 {
				t.Fatalf("start: %d %s", code, out)
			}
			select {
			case code := <-done:
				if code != tc.code {
					t.Errorf("%s: %d, want %d", tc.action, code, tc.code)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("no restart within a minute")
			}
			// Right after the answer the container is as the action left
			// it (a run the restart started is over), and every event is
			// out: wait a moment for a late one.
			code, out := call(t, c, "GET", "/containers/"+name+"/json", nil)
			if tc.action == "rm" {
				if code != 404 {
					t.Errorf("inspect after rm -f: %d %s", code, out)
				}
			} else {
				var in struct{ State struct{ Running bool } }
				json.Unmarshal(out, &in)
				if code != 200 || in.State.Running != tc.running {
					t.Errorf("inspect right after %s: %d running %v, want %v", tc.action, code, in.State.Running, tc.running)
				}
			}
			time.Sleep(500 * time.Millisecond)
			if got := events(); !slices.Equal(got, tc.want) {
				t.Errorf("events %q, want %q", got, tc.want)
			}
			call(t, c, "DELETE", "/containers/"+name+"?force=1", nil)
		})
	}
}

// A stop of a container that another process (the CLI) started while
// this server's restart of it still waited out its delay has the die of
// that run: the restart started nothing, so the stop sends it.
func TestStopOfARunStartedElsewhereDuringRestartDelay(t *testing.T) {
	s, c, ref := testServer(t)
	events := collectEvents(s)
	cmd := []string{"sh", "-c", "if [ -e /ran ]; then exec sleep 1000; fi; touch /ran; sleep 5; exit 1"}
	if code, out := call(t, c, "POST", "/containers/create?name=elsewhere", map[string]any{"Image": ref, "Cmd": cmd,
		"HostConfig": map[string]any{"RestartPolicy": map[string]any{"Name": "always"}}}); code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	sb, err := s.b.Open("elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	if code, out := call(t, c, "POST", "/containers/elsewhere/start", nil); code != 204 {
		t.Fatalf("start: %d %s", code, out)
	}
	// Nine restarts so far (the start counts from 0): the next waits
	// 51.2 s. Written while the first run sleeps.
	if err := dockercompat.SetRestartCount(sb.Info().StateDir, 9); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !s.isRestarting(sb.ID()) {
		if time.Now().After(deadline) {
			t.Fatal("no restart pending after the first run's exit")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Stopped by then, as the restart waits for: started as the CLI does.
	for cur, err := s.b.Open(sb.ID()); err == nil && cur.Running(); cur, err = s.b.Open(sb.ID()) {
		if time.Now().After(deadline) {
			t.Fatal("still running after its exit")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cur, err := s.b.Open(sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, out := call(t, c, "POST", "/containers/elsewhere/stop?t=0", nil); code != 204 {
		t.Fatalf("stop: %d %s", code, out)
	}
	if got, want := events(), []string{"start", "die", "die", "stop"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q (the CLI's start has no event here; its run's die does)", got, want)
	}
}
