package engine

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An event of a container whose record is being removed (rm -f: its
// state directory is there, its state file gone, so it reads as broken)
// says what the container was: its image and labels, not a broken
// record's blanks. Run 40's TestServeEventShape saw a die with no image
// and no labels.
func TestEventOfARecordBeingRemoved(t *testing.T) {
	s, c, ref := testServer(t)
	if code, out := call(t, c, "POST", "/containers/create?name=going", map[string]any{"Image": ref, "Cmd": []string{"true"},
		"Labels": map[string]string{"suite": "going"}}); code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	sb, err := s.b.Open("going")
	if err != nil {
		t.Fatal(err)
	}
	before := sb.Info()
	events := make(chan *eventMessage, 16)
	s.events.mu.Lock()
	s.events.subs[events] = struct{}{}
	s.events.mu.Unlock()
	// As a removal leaves it for a moment: the directory, no state file.
	// The file comes back after, so that the server's cleanup finds the
	// container (a created one has its PID 1 waiting) and removes it.
	state := filepath.Join(before.StateDir, "state.json")
	saved, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.WriteFile(state, saved, 0o600); err != nil {
			t.Error(err)
		}
	}()
	if now, err := s.b.Open("going"); err != nil || now.Info().Broken == "" {
		t.Fatalf("the record without its state file: %v, want it read as broken", err)
	}
	s.emitContainer("die", before, nil)
	select {
	case ev := <-events:
		attrs := ev.Actor.Attributes
		if attrs["image"] != ref || attrs["suite"] != "going" || attrs["name"] != "going" {
			t.Errorf("die of a record being removed: attributes %v, want image %s, suite going, name going", attrs, ref)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no die event")
	}
}
