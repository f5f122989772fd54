package sandbox

import (
	"archive/tar"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/test/fixtures"
)

// readyEntries waits until the pool holds poolDepth started sandboxes of
// key and returns them. A helper process calls it too (no testing.T): its
// own loop, with the tests' patience.
func readyEntries(b *Backend, key string) ([]*poolEntry, error) {
	deadline := time.Now().Add(fixtures.Patience())
	for {
		b.pool.mu.Lock()
		var ready []*poolEntry
		for _, e := range b.pool.entries[key] {
			select {
			case <-e.done:
				if e.err != nil {
					b.pool.mu.Unlock()
					return nil, fmt.Errorf("prestart: %w", e.err)
				}
				ready = append(ready, e)
			default:
			}
		}
		b.pool.mu.Unlock()
		if len(ready) == poolDepth {
			return ready, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the pool has %d of %d sandboxes ready", len(ready), poolDepth)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readyIDs is readyEntries' ids.
func readyIDs(t *testing.T, b *Backend, key string) []string {
	t.Helper()
	es, err := readyEntries(b, key)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range es {
		ids = append(ids, e.id)
	}
	return ids
}

// imageWith pushes busybox plus extra layers as test/<name> and pulls it
// into b's store.
func imageWith(t *testing.T, b *Backend, name string, extra ...v1.Layer) string {
	t.Helper()
	ref := fixtures.Registry(t, nil) + "/test/" + name + ":latest"
	layers, err := fixtures.Busybox(t, image.HostPlatform()).Layers()
	if err != nil {
		t.Fatal(err)
	}
	fixtures.Push(t, ref, fixtures.Image(t, image.HostPlatform(), []string{"sh"}, append(layers, extra...)...))
	if _, err := b.Store().Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestClaimedSandboxIsTheCallers: a sandbox taken from the pool gets the
// spawn's own workspace, mounts, static assets and hostname, and nothing of
// the spawn that came before.
func TestClaimedSandboxIsTheCallers(t *testing.T) {
	b, ref := testBackend(t)
	dir := searchableTempDir(t)
	mk := func(name, file string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := spawnT(t, b, backend.SpawnSpec{Image: ref, Name: "first", DisableSetup: true,
		Mounts: []backend.Mount{{Source: mk("firstdata", "first"), Target: "/data", ReadOnly: true}}})
	ids := readyIDs(t, b, templateOf(first.rec).key())

	ws := workspaceDir(t)
	rw := mk("rw", "rw")
	// As root, container root is not host root: only the workspace is
	// mapped to its owner, so this one is open to all.
	if err := os.Chmod(rw, 0o777); err != nil {
		t.Fatal(err)
	}
	asset := filepath.Join(mk("assets", ""), "f")
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Name: "second", Workspace: ws, DisableSetup: true,
		Mounts:       []backend.Mount{{Source: rw, Target: "/opt/rw"}},
		StaticAssets: []backend.StaticAsset{{Source: asset, SavePath: "asset"}}})
	if sb.ID() != ids[0] && sb.ID() != ids[1] {
		t.Fatalf("sandbox %s was started for the spawn, not taken from the pool %v", sb.ID(), ids)
	}
	res := run(t, sb, `hostname; ls /data 2>&1; echo made > /workspace/out; echo w > /opt/rw/w && echo rw-ok
		echo x > /static/asset 2>&1 || echo asset-ro; grep -c ' /opt/rw ' /proc/self/mountinfo`)
	for _, want := range []string{"second\n", "No such file or directory", "rw-ok", "asset-ro", "\n1\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("claimed sandbox: missing %q in %q", want, res.Stdout)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "out"), &st); err != nil {
		t.Errorf("written in the sandbox, not on the host: %v", err)
	} else if want := workspaceOwner(b, ws); st.Uid != want {
		t.Errorf("workspace file owned by %d, want the workspace owner %d", st.Uid, want)
	}
	if _, err := os.Stat(filepath.Join(rw, "w")); err != nil {
		t.Errorf("written in the sandbox, not on the host: %v", err)
	}
	if info := sb.Info(); info.Name != "second" || !sb.Running() {
		t.Errorf("record: %+v", info)
	}
	if o, err := b.Open("second"); err != nil || o.ID() != sb.ID() {
		t.Errorf("open by name: %v", err)
	}
}

// TestPoolMountIntoProcRefused: a mount whose destination resolves into
// /proc through a symlink in the image is refused, as runc refuses it.
func TestPoolMountIntoProcRefused(t *testing.T) {
	b, _ := testBackend(t)
	ref := imageWith(t, b, "evil", fixtures.Layer(t, fixtures.Entry{Name: "opt/", Type: tar.TypeDir},
		fixtures.Entry{Name: "opt/kernel", Type: tar.TypeSymlink, Linkname: "/proc/sys/kernel"}))
	_, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, DisableSetup: true, NoWorkspaceMount: true,
		Mounts: []backend.Mount{{Source: searchableTempDir(t), Target: "/opt/kernel/x"}}})
	if err == nil || !strings.Contains(err.Error(), "/proc") {
		t.Fatalf("spawn with a mount into /proc: %v", err)
	}
	recs, _, _ := b.state.list()
	if len(recs) != 0 {
		t.Errorf("a failed spawn left %d records", len(recs))
	}
}

// TestManyLayers: an image with so many layers that the overlay's lower
// directories do not fit in a page as absolute paths.
func TestManyLayers(t *testing.T) {
	b, _ := testBackend(t)
	var layers []v1.Layer
	for i := range 48 {
		layers = append(layers, fixtures.Layer(t, fixtures.Entry{Name: fmt.Sprintf("l%02d", i), Body: strconv.Itoa(i)}))
	}
	ref := imageWith(t, b, "layers", layers...)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	if n := len(strings.Join(sb.rec.Layers, ":")); n < os.Getpagesize() {
		t.Fatalf("lowerdir of %d bytes fits in a page: the test needs more layers", n)
	}
	if res := run(t, sb, "cat /l00 /l47"); res.Stdout != "047" {
		t.Errorf("files of the first and last layers: %q", res.Stdout)
	}
}

const poolOwnerHelper = "sandbox-test-pool-owner"

func init() {
	// Spawns a sandbox over the store in argv[1] and reports the pids of
	// the pool's sandboxes, then waits to be killed.
	reexec.Register(poolOwnerHelper, func() int {
		b, err := New(os.Args[1])
		if err != nil {
			fmt.Println(err)
			return 1
		}
		sb, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: os.Args[2], DisableSetup: true, NoWorkspaceMount: true})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		sb.Cleanup()
		es, err := readyEntries(b, templateOf(sb.(*Sandbox).rec).key())
		if err != nil {
			fmt.Println(err)
			return 1
		}
		var pids []string
		for _, e := range es {
			pids = append(pids, strconv.Itoa(e.pid))
		}
		fmt.Println(strings.Join(pids, " "))
		select {}
	})
}

// TestPoolGoesWithItsOwner: the sandboxes a process kept ready exit when it
// is killed, and the next prune removes what they left on disk.
func TestPoolGoesWithItsOwner(t *testing.T) {
	b, ref := testBackend(t)
	cmd := exec.Command("/proc/self/exe", b.root, ref)
	cmd.Env = append(os.Environ(), reexec.Env+"="+poolOwnerHelper)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var line [256]byte
	n, _ := out.Read(line[:])
	var pids []int
	for _, f := range strings.Fields(string(line[:n])) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("helper: %q", line[:n])
		}
		pids = append(pids, pid)
	}
	if len(pids) != poolDepth {
		t.Fatalf("helper: %q", line[:n])
	}
	cmd.Process.Kill()
	cmd.Wait()
	fixtures.Eventually(t, "the ready sandboxes gone with their owner", func() (bool, string) {
		for _, pid := range pids {
			if _, zombie, ok := procStart(pid); ok && !zombie {
				return false, fmt.Sprintf("ready sandbox %d outlived its owner", pid)
			}
		}
		return true, ""
	})
	pool := filepath.Join(b.state.dir, poolDir)
	if ents, _ := os.ReadDir(pool); len(ents) != poolDepth {
		t.Errorf("pool directories before prune: %d, want %d", len(ents), poolDepth)
	}
	if _, err := b.Prune(false); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(pool); len(ents) != 0 {
		t.Errorf("prune left %d pool directories", len(ents))
	}
}

// TestSpawnAfterServerDied: when the spawn server dies, the sandboxes it
// kept ready go with it, and the next Spawn starts a new server and a new
// sandbox instead of failing on a ready one that is gone.
func TestSpawnAfterServerDied(t *testing.T) {
	b, ref := testBackend(t)
	first := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	ids := readyIDs(t, b, templateOf(first.rec).key())
	b.mu.Lock()
	servers := slices.Collect(maps.Values(b.spawners))
	b.mu.Unlock()
	// As root each ready sandbox has a server of its own.
	b.pool.mu.Lock()
	var ready []*poolEntry
	for _, es := range b.pool.entries {
		ready = append(ready, es...)
	}
	b.pool.mu.Unlock()
	for _, e := range ready {
		<-e.done
		servers = append(servers, e.srv)
	}
	for _, s := range servers {
		s.mu.Lock()
		if s.srv != nil {
			s.srv.cmd.Process.Kill()
		}
		s.mu.Unlock()
	}
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true})
	if sb.ID() == ids[0] || sb.ID() == ids[1] {
		t.Errorf("spawned %s, a sandbox of the dead server", sb.ID())
	}
	if res := run(t, sb, "echo ok"); res.Stdout != "ok\n" {
		t.Errorf("sandbox after the server died: %+v", res)
	}
	if res := run(t, first, "echo ok"); res.Stdout != "ok\n" {
		t.Errorf("a claimed sandbox did not outlive its server: %+v", res)
	}
}

// TestConcurrentSpawns: one Backend spawning from many goroutines at once
// (the spawn server serves them concurrently, the pool hands out each
// ready sandbox once) gives each caller its own working sandbox.
func TestConcurrentSpawns(t *testing.T) {
	b, ref := testBackend(t)
	const n = 8
	errs := make(chan error, n)
	ids := make(chan string, n)
	for i := range n {
		go func() {
			ws := workspaceDir(t)
			sb, err := b.Spawn(context.Background(), backend.SpawnSpec{Image: ref, Workspace: ws, DisableSetup: true})
			if err != nil {
				errs <- err
				return
			}
			defer sb.Cleanup()
			res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: fmt.Sprintf("echo %d > /workspace/n; cat /workspace/n", i)})
			if err == nil && res.Stdout != fmt.Sprintf("%d\n", i) {
				err = fmt.Errorf("sandbox %d: %+v", i, res)
			}
			if got, _ := os.ReadFile(filepath.Join(ws, "n")); err == nil && string(got) != fmt.Sprintf("%d\n", i) {
				err = fmt.Errorf("sandbox %d wrote %q into its workspace", i, got)
			}
			ids <- sb.(*Sandbox).ID()
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Errorf("sandbox %s handed out twice", id)
		}
		seen[id] = true
	}
}

// TestPoolKindsBounded: the pool keeps at most maxPoolKinds kinds ready; a
// kind whose ready sandboxes were all taken frees its place.
func TestPoolKindsBounded(t *testing.T) {
	var p pool
	var started atomic.Int64
	start := func() (*poolEntry, error) {
		return &poolEntry{id: strconv.FormatInt(started.Add(1), 10)}, nil
	}
	for k := range maxPoolKinds + 1 {
		p.refill(strconv.Itoa(k), start)
	}
	if len(p.entries) != maxPoolKinds || p.entries[strconv.Itoa(maxPoolKinds)] != nil {
		t.Fatalf("kinds kept: %d", len(p.entries))
	}
	for range poolDepth {
		if p.take("0") == nil {
			t.Fatal("a ready sandbox was not handed out")
		}
	}
	if p.take("0") != nil {
		t.Fatal("more sandboxes handed out than were started")
	}
	p.refill(strconv.Itoa(maxPoolKinds), start)
	if len(p.entries[strconv.Itoa(maxPoolKinds)]) != poolDepth {
		t.Fatal("a new kind found no room after one was used up")
	}
}

// workspaceOwner is the host uid files written by container root in
// workspace ws belong to: the workspace's owner (host root's, for a
// root-owned one: it is mounted idmapped, never handed over).
func workspaceOwner(b *Backend, ws string) uint32 {
	var st syscall.Stat_t
	syscall.Stat(ws, &st)
	return st.Uid
}

// TestReaperSparesAdoptedSandbox: a process reaping stale pool entries
// (every Backend does, once) may read an entry's owner while the entry is
// still in the pool, and find the owner gone a moment later, after it
// adopted the entry (renamed it to the sandbox's directory) and exited:
// run -d does exactly that. The sandbox now running must be spared. It
// was killed by its id's marker, and a just-started run -d sandbox showed
// Exited (137) under load. A truly stale entry is still reaped, its
// marked process killed.
func TestReaperSparesAdoptedSandbox(t *testing.T) {
	b, _ := testBackend(t)
	pool := filepath.Join(b.state.dir, poolDir)
	// A dead owner: a process that has exited, with its start time.
	dead := exec.Command("true")
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	deadStart, _, _ := procStart(dead.Process.Pid)
	dead.Wait()
	entry := func(id string) *exec.Cmd {
		t.Helper()
		dir := filepath.Join(pool, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "owner"), fmt.Appendf(nil, "%d %d\n", dead.Process.Pid, deadStart), 0o644); err != nil {
			t.Fatal(err)
		}
		// The sandbox's PID 1 stands in: a process with its marker.
		p := exec.Command("sleep", "300")
		p.Env = []string{sandboxMarker + id}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Process.Kill(); p.Wait() })
		return p
	}
	adopted, stale := newID(), newID()
	adoptedPID1, stalePID1 := entry(adopted), entry(stale)
	reapHook = func(id string) {
		if id == adopted { // its owner adopts it now, and exits
			if err := os.Rename(filepath.Join(pool, id), b.state.sandboxDir(id)); err != nil {
				t.Error(err)
			}
		}
	}
	// While a reaper holds an entry (claimed, its processes maybe still
	// alive), the entry's id slice is not free.
	claimed := filepath.Join(pool, fmt.Sprintf(".reap-%d-%d-%s", self().Pid, self().Start, "aaaaaaaaaaaaaaaa"))
	if err := os.Mkdir(claimed, 0o700); err != nil {
		t.Fatal(err)
	}
	if (holder{b.state.dir, "aaaaaaaaaaaaaaaa"}).gone() {
		t.Error("a pool entry claimed by a live reaper counts as gone: its id slice would be handed out again")
	}
	os.Remove(claimed)
	t.Cleanup(func() { reapHook = nil; os.RemoveAll(b.state.sandboxDir(adopted)) })
	if err := b.reapStalePool(); err != nil {
		t.Fatal(err)
	}
	if _, zombie, ok := procStart(adoptedPID1.Process.Pid); !ok || zombie {
		t.Error("the reaper killed the PID 1 of a sandbox adopted from the pool after it read the owner")
	}
	fixtures.Eventually(t, "the stale entry's PID 1 killed", func() (bool, string) {
		_, zombie, ok := procStart(stalePID1.Process.Pid)
		return !ok || zombie, "still running"
	})
	if ents, _ := os.ReadDir(pool); len(ents) != 0 {
		t.Errorf("pool entries left: %v", ents)
	}
}

// As root each sandbox has a spawn server of its own: Prewarm reserves the
// next sandbox's directory under .pool, its id slice and that server,
// running, before the caller knows what it will spawn. The spawn takes the
// reservation (its id is the sandbox's) and Close removes one no spawn
// took, with its slice and its server. Rootless, one server serves every
// sandbox and Prewarm starts it: nothing is reserved.
func TestPrewarmReservesAsRoot(t *testing.T) {
	b, ref := testBackend(t)
	b.KeepReady(false)
	reservation := func() *poolEntry {
		t.Helper()
		b.Prewarm()
		b.warming.Wait()
		b.pool.mu.Lock()
		defer b.pool.mu.Unlock()
		return b.pool.reserved
	}
	e := reservation()
	if b.slices == nil {
		if e != nil {
			t.Fatalf("rootless: a reservation %s", e.id)
		}
		return
	}
	if e == nil {
		t.Fatal("as root: no reservation")
	}
	held := func(e *poolEntry) (dir, slice, server bool) {
		_, err := os.Stat(e.dir)
		h, herr := readHolder(filepath.Join(b.slices.dir, strconv.Itoa(e.srv.slice)))
		e.srv.mu.Lock()
		defer e.srv.mu.Unlock()
		alive := e.srv.srv != nil && e.srv.srv.cmd.Process.Signal(syscall.Signal(0)) == nil
		return err == nil, herr == nil && h == holder{root: b.state.dir, id: e.id}, alive
	}
	if dir, slice, server := held(e); !dir || !slice || !server {
		t.Fatalf("reservation %s: directory %v, slice %v, server running %v", e.id, dir, slice, server)
	}
	clones := func(e *poolEntry) (int, string) {
		e.srv.mu.Lock()
		defer e.srv.mu.Unlock()
		return len(e.srv.clones), e.srv.clonesFor
	}
	// Its idmapped clones (the directory and the layers'), made ahead.
	if n, layers := clones(e); n != 2 || layers != b.store.LayersRoot() {
		t.Errorf("reservation's idmapped clones: %d of %q, want 2 of %q", n, layers, b.store.LayersRoot())
	}
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref})
	if sb.ID() != e.id {
		t.Errorf("the spawn is %s, not the reservation %s", sb.ID(), e.id)
	}
	if n, _ := clones(e); n != 0 {
		t.Errorf("the spawn left the reservation's %d clones untaken", n)
	}
	if out, err := sb.Exec(context.Background(), backend.ExecRequest{Argv: []string{"id", "-u"}}); err != nil {
		t.Errorf("exec in the reserved sandbox: %v", err)
	} else if strings.TrimSpace(string(out.Stdout)) != "0" {
		t.Errorf("exec in the reserved sandbox: id -u %q", out.Stdout)
	}

	// One no spawn takes goes with Close.
	e = reservation()
	if e == nil {
		t.Fatal("no second reservation")
	}
	srv := e.srv.srv
	b.Close()
	if n, _ := clones(e); n != 0 {
		t.Errorf("Close left the reservation's %d clones open", n)
	}
	if dir, slice, _ := held(e); dir || slice {
		t.Errorf("after Close: directory %v, slice %v", dir, slice)
	}
	// Gone (exited and reaped) before its slice was freed, not some time
	// after.
	select {
	case <-srv.exited:
	default:
		t.Errorf("Close freed the slice before the reservation's server %d had exited", srv.cmd.Process.Pid)
	}
	if ents, _ := os.ReadDir(filepath.Join(b.state.dir, poolDir)); len(ents) != 0 {
		t.Errorf("after Close: %d pool directories", len(ents))
	}

	// A killed caller's reservation (its owner gone) is reaped with its
	// slice, without waiting for a prune.
	// Its server outlives its caller (as a spawn server does once its
	// user namespace is set up): the reaper stops it before it frees the
	// slice, or a late prestart of the server could run as ids another
	// sandbox is given.
	e = reservation()
	if e == nil || b.takeReserved() != e {
		t.Fatal("no third reservation")
	}
	srv = e.srv.srv
	t.Cleanup(func() { e.srv.close() })
	if err := os.WriteFile(filepath.Join(e.dir, "owner"), []byte("999999999 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.reapStalePool(); err != nil {
		t.Fatal(err)
	}
	if dir, slice, _ := held(e); dir || slice {
		t.Errorf("a dead owner's reservation after the reaper: directory %v, slice %v", dir, slice)
	}
	if serverRuns(srv.cmd.Process.Pid) {
		t.Errorf("the reaper freed the slice of a dead owner's reservation while its server %d ran", srv.cmd.Process.Pid)
	}
}

// serverRuns reports whether process pid runs (exited: a zombie or gone).
func serverRuns(pid int) bool {
	_, zombie, ok := procStart(pid)
	return ok && !zombie
}
