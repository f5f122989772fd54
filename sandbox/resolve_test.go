package sandbox

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestResolveBeneathRetriesRenameRace: the kernel answers EAGAIN to an
// openat2 RESOLVE_BENEATH lookup through ".." when any rename on the host
// races it (openat2(2)); other sandboxes and harnesses rename files all the
// time, so a spawn must not fail on that (the CI flake "real/sub/back in
// the workspace …: resource temporarily unavailable").
func TestResolveBeneathRetriesRenameRace(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"real/sub", "spin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a, b := filepath.Join(root, "spin", "a"), filepath.Join(root, "spin", "b")
		if err := os.WriteFile(a, nil, 0o644); err != nil {
			t.Error(err)
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.Rename(a, b)
			a, b = b, a
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	want := filepath.Join(root, "real")
	for i := 0; i < 20000; i++ {
		got, err := resolveBeneath(root, "real/sub/../../real/sub/..")
		if err != nil {
			t.Fatalf("lookup %d: %v", i, err)
		}
		if got != want {
			t.Fatalf("lookup %d: %s, want %s", i, got, want)
		}
	}
}
