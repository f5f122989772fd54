package engine

import (
	"sync"
	"testing"
	"time"
)

// A stop that lands while the restart policy is starting the container
// again, after its main command runs and before its watch is there, gets
// one die for that run, before the stop event (the old code sent one from
// the stop and one from the restart's watch).
func TestStopMidRestartDiesOnce(t *testing.T) {
	s, c, ref := testServer(t)
	events := make(chan map[string]any, 256)
	s.events.mu.Lock()
	s.events.subs[events] = struct{}{}
	s.events.mu.Unlock()

	var once sync.Once
	stopped := make(chan int, 1)
	testHookRestarted = func(id string, cancel <-chan struct{}) {
		once.Do(func() {
			// The stop runs beside the restart, which goes on once the
			// stop has cancelled it.
			go func() {
				code, _ := call(t, c, "POST", "/containers/again/stop?t=0", nil)
				stopped <- code
			}()
			select {
			case <-cancel:
			case <-time.After(20 * time.Second):
				t.Error("the stop did not cancel the restart")
			}
		})
	}
	t.Cleanup(func() { testHookRestarted = nil })

	// The first run exits 1; the restarted one sleeps until stopped.
	cmd := []string{"sh", "-c", "if [ -e /ran ]; then exec sleep 1000; fi; touch /ran; exit 1"}
	if code, out := call(t, c, "POST", "/containers/create?name=again", map[string]any{"Image": ref, "Cmd": cmd,
		"HostConfig": map[string]any{"RestartPolicy": map[string]any{"Name": "always"}}}); code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	if code, out := call(t, c, "POST", "/containers/again/start", nil); code != 204 {
		t.Fatalf("start: %d %s", code, out)
	}
	select {
	case code := <-stopped:
		if code != 204 {
			t.Errorf("stop: %d", code)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no restart within a minute")
	}
	// The restart's watch has its die by the time the stop returns;
	// wait a moment for a late second one.
	time.Sleep(500 * time.Millisecond)
	var seq []string
	for done := false; !done; {
		select {
		case ev := <-events:
			if a := ev["Action"].(string); a == "start" || a == "die" || a == "stop" {
				seq = append(seq, a)
			}
		default:
			done = true
		}
	}
	want := []string{"start", "die", "start", "die", "stop"}
	if len(seq) != len(want) {
		t.Fatalf("events %q, want %q", seq, want)
	}
	for i := range want {
		if seq[i] != want[i] {
			t.Fatalf("events %q, want %q", seq, want)
		}
	}
	if code, out := call(t, c, "GET", "/containers/again/json", nil); code != 200 {
		t.Errorf("inspect: %d %s", code, out)
	}
}
