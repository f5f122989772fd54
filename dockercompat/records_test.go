package dockercompat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestRecordsReadWhole: the records serve rewrites while a container runs
// (its health, its restart count, its create record on update) are read whole by an inspect at any
// moment, never empty or cut (os.WriteFile truncates first: run 46's
// docker-py found State.Health missing between a truncate and its write).
func TestRecordsReadWhole(t *testing.T) {
	dir := t.TempDir()
	if err := SaveHealth(dir, []byte(`{"Status":"starting"}`)); err != nil {
		t.Fatal(err)
	}
	if err := SetRestartCount(dir, 1); err != nil {
		t.Fatal(err)
	}
	if err := (CreateRecord{Entrypoint: []string{"sh"}}).save(dir); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 2; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := SaveHealth(dir, []byte(`{"Status":"healthy","FailingStreak":0,"Log":[]}`)); err != nil {
				t.Error(err)
				return
			}
			if err := SetRestartCount(dir, n); err != nil {
				t.Error(err)
				return
			}
			if err := (CreateRecord{Entrypoint: []string{"sh"}, Binds: []string{"/a:/b"}}).save(dir); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 20000 {
		b, err := os.ReadFile(filepath.Join(dir, HealthFile))
		if err != nil || !json.Valid(b) {
			t.Errorf("health read while it was rewritten: %q, %v", b, err)
			break
		}
		if b, err := os.ReadFile(filepath.Join(dir, createdFile)); err != nil || !json.Valid(b) {
			t.Errorf("create record read while it was rewritten: %q, %v", b, err)
			break
		}
		if n := RestartCount(dir); n < 1 {
			t.Errorf("restart count read while it was rewritten: %d", n)
			break
		}
	}
	close(stop)
	wg.Wait()
	if left, _ := filepath.Glob(filepath.Join(dir, ".tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
