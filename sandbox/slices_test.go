package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/userns"
)

// testSlices is a range of count slices recorded in a temporary directory,
// for the sandboxes of state root root (a temporary directory too).
func testSlices(t *testing.T, count int) (r *sliceRange, root string) {
	t.Helper()
	r = &sliceRange{dir: filepath.Join(t.TempDir(), "slices"), first: 2_000_000_000 / SliceSize * SliceSize, count: count}
	return r, t.TempDir()
}

// sandboxDirFor makes the directory that keeps id's slice held.
func sandboxDirFor(t *testing.T, root, id string) string {
	t.Helper()
	dir := filepath.Join(root, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSlicesConcurrentAllocationsAreDisjoint(t *testing.T) {
	const n = 48
	r, root := testSlices(t, 64)
	// Two allocators over one directory: as two slopbox processes.
	r2 := *r
	ks := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		id := fmt.Sprintf("sb%02d", i)
		sandboxDirFor(t, root, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := r
			if i%2 == 1 {
				a = &r2
			}
			ks[i], errs[i] = a.alloc(root, id)
		}()
	}
	wg.Wait()
	seen := map[int]int{}
	for i, k := range ks {
		if errs[i] != nil {
			t.Fatalf("alloc %d: %v", i, errs[i])
		}
		if j, dup := seen[k]; dup {
			t.Fatalf("sandboxes %d and %d share slice %d", j, i, k)
		}
		seen[k] = i
	}
	// Disjoint host ranges, none overlapping another's.
	for k := range seen {
		for k2 := range seen {
			a, b := r.mapping(k).UIDs[0], r.mapping(k2).UIDs[0]
			if k != k2 && a.HostID < b.HostID+b.Size && b.HostID < a.HostID+a.Size {
				t.Fatalf("slices %d and %d overlap: %+v %+v", k, k2, a, b)
			}
		}
	}
	// Asking again for a sandbox that holds one gives the same.
	if k, err := r.alloc(root, "sb07"); err != nil || k != ks[7] {
		t.Fatalf("alloc again: %d, %v; want %d", k, err, ks[7])
	}
}

func TestSlicesReleasedAndSwept(t *testing.T) {
	r, root := testSlices(t, 2)
	a, b := sandboxDirFor(t, root, "a"), sandboxDirFor(t, root, "b")
	ka, err := r.alloc(root, "a")
	if err != nil {
		t.Fatal(err)
	}
	kb, err := r.alloc(root, "b")
	if err != nil {
		t.Fatal(err)
	}
	sandboxDirFor(t, root, "c")
	if _, err := r.alloc(root, "c"); !errors.Is(err, errSlicesExhausted) {
		t.Fatalf("third sandbox in a range of two: %v, want errSlicesExhausted", err)
	}
	// Released on removal.
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if err := r.release(root, "a", ka); err != nil {
		t.Fatal(err)
	}
	kc, err := r.alloc(root, "c")
	if err != nil || kc != ka {
		t.Fatalf("after a's release c got %d, %v; want %d", kc, err, ka)
	}
	// Another sandbox's release does not free it.
	if err := r.release(root, "a", kc); err != nil {
		t.Fatal(err)
	}
	if used, _ := r.usedLocked(); used[kc] != (holder{root, "c"}) {
		t.Fatalf("slice %d after a stale release: %+v", kc, used[kc])
	}
	// A sandbox whose slopbox died after its directory went: swept.
	if err := os.RemoveAll(b); err != nil {
		t.Fatal(err)
	}
	if n, err := r.sweep(); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1 freed", n, err)
	}
	sandboxDirFor(t, root, "d")
	if kd, err := r.alloc(root, "d"); err != nil || kd != kb {
		t.Fatalf("d got %d, %v; want b's %d", kd, err, kb)
	}
	// A full range frees the slices of sandboxes gone before it gives up.
	os.RemoveAll(filepath.Join(root, "d"))
	sandboxDirFor(t, root, "e")
	if _, err := r.alloc(root, "e"); err != nil {
		t.Fatalf("alloc with a dead holder: %v", err)
	}
	// A pool directory holds a slice as well as the sandbox's own.
	if err := os.MkdirAll(filepath.Join(root, poolDir, "p"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := r.releaseID(root, "e"); err != nil {
		t.Fatal(err)
	}
	kp, err := r.alloc(root, "p")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.sweep(); n != 0 {
		t.Fatalf("sweep freed a slice of a pool entry (%d)", kp)
	}
}

func TestRootSlicesSkipOtherRanges(t *testing.T) {
	store := userns.Mapping{UIDs: []userns.IDMap{{HostID: userns.DefaultRootBase, Size: SliceSize}}, GIDs: []userns.IDMap{{HostID: userns.DefaultRootBase, Size: SliceSize}}}
	r := rootSlices(t.TempDir(), store)
	if r.first != userns.DefaultRootBase+SliceSize {
		t.Fatalf("first slice at %d, want right after the store's range", r.first)
	}
	if r.count != (maxSliceID-int(r.first))/SliceSize {
		t.Fatalf("count %d", r.count)
	}
	// Another user's range inside: its slices are skipped.
	r.taken = []idSpan{{r.first + SliceSize + 5, r.first + SliceSize + 6}}
	if r.usable(1) || !r.usable(0) || !r.usable(2) || r.Capacity() != r.count-1 {
		t.Fatalf("usable: %v %v %v, capacity %d of %d", r.usable(0), r.usable(1), r.usable(2), r.Capacity(), r.count)
	}
	t.Logf("root-run sandboxes with slices of their own: %d (host ids %d-%d)", r.count, r.first, r.first+uint64(r.count)*SliceSize-1)
}

// heldSlices lists the id slices b's sandboxes hold.
func heldSlices(t *testing.T, b *Backend) []int {
	t.Helper()
	used, err := b.slices.usedLocked()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for k, h := range used {
		if h.root == b.state.dir {
			out = append(out, k)
		}
	}
	return out
}

// A root-run sandbox holds a slice while it exists, stopped too, and
// gives it back when it is removed.
func TestSandboxSliceReleasedOnRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only")
	}
	b, ref := testBackend(t)
	b.KeepReady(false)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, NoWorkspaceMount: true})
	held := heldSlices(t, b)
	if len(held) != 1 {
		t.Fatalf("one sandbox holds slices %v", held)
	}
	if got := hostRange(t, sb.rec.Pid); got != [2]uint64{uint64(b.slices.mapping(held[0]).UIDs[0].HostID), SliceSize} {
		t.Fatalf("PID 1's uid_map %v is not slice %d's", got, held[0])
	}
	if err := sb.Stop(); err != nil {
		t.Fatal(err)
	}
	if h := heldSlices(t, b); len(h) != 1 || h[0] != held[0] {
		t.Fatalf("a stopped sandbox holds %v, want %v", h, held)
	}
	if err := sb.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if h := heldSlices(t, b); len(h) > 0 {
		t.Fatalf("slices %v still held after rm", h)
	}
}
