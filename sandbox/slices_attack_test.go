package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/userns"
)

// Attacks on the id slices (issue 23 case 9, reviewed as an attacker).

// A sandbox's own spawn server runs as its slice's root. Its mount
// namespace had an idmapped clone of the whole store root (the "layers'
// parent" of root-run layers is the store root) mapping every store id to
// the slice's: from there it could write another sandbox's directory, the
// image layers every sandbox shares and the store's index. It may write
// its own sandbox's directory, read the layers, and nothing else.
func TestSliceServerReachesOnlyItsOwnSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only: rootless there are no slices")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("nsenter (util-linux) is needed to act as the server")
	}
	b, ref := testBackend(t)
	b.KeepReady(true)
	other := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, NoWorkspaceMount: true})
	es, err := readyEntries(b, templateOf(other.rec).key())
	if err != nil {
		t.Fatal(err)
	}
	e := es[0]
	e.srv.mu.Lock()
	pid := 0
	if e.srv.srv != nil {
		pid = e.srv.srv.cmd.Process.Pid
	}
	e.srv.mu.Unlock()
	if pid == 0 || e.srv.mapping == nil {
		t.Fatal("the ready sandbox has no server of its own")
	}
	// write creates path as the server: root of its user namespace (the
	// slice's first id on the host), in its mount namespace.
	write := func(path string) error {
		t.Cleanup(func() { os.Remove(path) })
		out, err := exec.Command(nsenter, "-t", strconv.Itoa(pid), "-U", "-m", "--", "/bin/sh", "-c", `echo probe > "$1"`, "sh", path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return nil
	}
	if err := write(filepath.Join(e.dir, "upper", "probe")); err != nil {
		// Evidence (seen once, under two CPU burners and -race): the entry
		// as the host and as the server see it, and what the pid is now.
		host, _ := exec.Command("ls", "-la", e.dir).CombinedOutput()
		inside, _ := exec.Command(nsenter, "-t", strconv.Itoa(pid), "-U", "-m", "--", "/bin/sh", "-c", `ls -la "$1" "$1/.."; grep -F "$1" /proc/self/mountinfo`, "sh", e.dir).CombinedOutput()
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		t.Fatalf("the server cannot write its own sandbox's upper layer, so this test tests nothing: %v\nhost view of %s:\n%s\nthe server's view:\n%s\npid %d is now %q", err, e.dir, host, inside, pid, bytes.ReplaceAll(comm, []byte{0}, []byte{' '}))
	}
	for what, p := range map[string]string{
		"another sandbox's directory":   filepath.Join(b.state.sandboxDir(other.ID()), "probe"),
		"another sandbox's upper layer": filepath.Join(b.state.sandboxDir(other.ID()), "upper", "probe"),
		"an image layer":                filepath.Join(other.rec.Layers[0], "probe"),
		"the store root":                filepath.Join(b.root, "probe"),
		"the store's blobs":             filepath.Join(b.root, "oci", "probe"),
	} {
		if err := write(p); err == nil {
			t.Errorf("a sandbox's spawn server wrote %s (%s)", what, p)
		}
	}
}

// The store root is 0711 as root, so that a slice's server reaches its
// binary and its sandbox's directory. Any local user can then go through
// it by name: nothing below it but the server's binary may be readable,
// listable or writable by others (the leases named every root-run
// sandbox, by the names users gave them, and its image).
func TestStoreRootOpaqueToOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only: rootless the store is the user's, mode 0700")
	}
	b, ref := testBackend(t)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, Name: "web", DisableSetup: true,
		Env: map[string]string{"API_KEY": "hunter2"}})
	if res := run(t, sb, "echo secret > /root/notes && echo out > /workspace/f"); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	if _, err := b.CreateVolume("data", map[string]string{"owner": "web"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.RemoveVolume("data", true) })
	var paths []string
	filepath.WalkDir(b.root, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return nil
	})
	// One process as nobody tries every path by name (as one who guessed
	// or learnt it would).
	cmd := exec.Command("/bin/sh", "-c", `while IFS= read -r p; do
		if [ -d "$p" ]; then ls -- "$p" >/dev/null 2>&1 && echo "list $p"
		elif [ -r "$p" ]; then echo "read $p"; fi
		[ -w "$p" ] && echo "write $p"
	done; true`)
	cmd.Stdin = strings.NewReader(strings.Join(paths, "\n") + "\n")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(b.root, "bin")
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		how, p, _ := strings.Cut(l, " ")
		if l == "" || how != "write" && (p == bin || filepath.Dir(p) == bin) {
			continue
		}
		t.Errorf("another user can %s %s", how, p)
	}
	t.Logf("%d paths under the store root tried as nobody", len(paths))
}

// Slices must stay out of the subordinate ranges useradd hands out (up to
// SUB_UID_MAX, 600100000 by default): a user added after a sandbox took a
// slice there would get that sandbox's host ids. With root's own range low
// (root:100000:65536 is a common /etc/subuid line), the first slice came
// right after it, at 165536.
func TestRootSlicesAboveUseraddRanges(t *testing.T) {
	store := userns.Mapping{UIDs: []userns.IDMap{{HostID: 100000, Size: SliceSize}}, GIDs: []userns.IDMap{{HostID: 100000, Size: SliceSize}}}
	r := rootSlices(t.TempDir(), store)
	if r.first < 600100000 {
		t.Fatalf("first slice at host id %d, inside the range useradd gives new users (to 600100000)", r.first)
	}
	// A login.defs with a higher SUB_UID_MAX moves it up.
	defs := filepath.Join(t.TempDir(), "login.defs")
	os.WriteFile(defs, []byte("# comment\nSUB_UID_MAX\t1200000000\nSUB_GID_MAX 900000000\n"), 0o644)
	if got := subIDMax(defs); got != 1200000000 {
		t.Errorf("subIDMax: %d, want 1200000000", got)
	}
}

// A range added to /etc/subuid after the Backend was made (useradd,
// usermod --add-subuids) is skipped by the next allocation: a serve
// process runs for days.
func TestSlicesSkipRangesAddedLater(t *testing.T) {
	r, root := testSlices(t, 4)
	subuid := filepath.Join(t.TempDir(), "subuid")
	os.WriteFile(subuid, nil, 0o644)
	r.subIDFiles = []string{subuid}
	sandboxDirFor(t, root, "a")
	if k, err := r.alloc(root, "a"); err != nil || k != 0 {
		t.Fatalf("alloc: %d, %v", k, err)
	}
	os.WriteFile(subuid, fmt.Appendf(nil, "late:%d:65536\n", r.first+SliceSize), 0o644)
	sandboxDirFor(t, root, "b")
	if k, err := r.alloc(root, "b"); err != nil || k != 2 {
		t.Fatalf("alloc after a range was added over slice 1: %d, %v; want 2", k, err)
	}
}

// The slice records decide which host ids a sandbox gets: a directory of
// them that another user could write (or a symlink to one) would let that
// user hand two sandboxes one slice, or free another's. Such a directory is
// refused.
func TestSlicesDirMustBeRoots(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only")
	}
	r, root := testSlices(t, 2)
	sandboxDirFor(t, root, "a")
	if err := os.MkdirAll(r.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(r.dir, 0o777)
	if _, err := r.alloc(root, "a"); err == nil {
		t.Fatal("allocated from a world-writable directory of records")
	}
	os.Chmod(r.dir, 0o700)
	os.Chown(r.dir, 65534, 65534)
	if _, err := r.alloc(root, "a"); err == nil {
		t.Fatal("allocated from a directory of records owned by nobody")
	}
	link := filepath.Join(t.TempDir(), "slices")
	os.Symlink(r.dir, link)
	os.Chown(r.dir, 0, 0)
	r.dir = link
	if _, err := r.alloc(root, "a"); err == nil {
		t.Fatal("allocated through a symlink")
	}
}

// A spawn refused because its name is taken discarded the sandbox it had
// prepared through the Backend's shared server rather than the sandbox's
// own: as root that started a server as the store's ids, for nothing, and
// left the prepared PID 1 to the killed one.
func TestSpawnNameTakenDiscardsThroughOwnServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only")
	}
	b, ref := testBackend(t)
	b.KeepReady(false)
	spec := backend.SpawnSpec{Image: ref, Name: "taken", DisableSetup: true, NoWorkspaceMount: true}
	spawnT(t, b, spec)
	if _, err := b.Spawn(context.Background(), spec); !errors.Is(err, ErrNameInUse) {
		t.Fatalf("second spawn named taken: %v", err)
	}
	b.mu.Lock()
	for prog, s := range b.spawners {
		s.mu.Lock()
		if s.srv != nil {
			t.Errorf("a shared spawn server (%q) was started as root", prog)
		}
		s.mu.Unlock()
	}
	b.mu.Unlock()
	if held := heldSlices(t, b); len(held) != 1 {
		t.Errorf("slices held after the refused spawn: %v, want the first sandbox's", held)
	}
}

// The records are on /run: after a reboot a stopped sandbox is started in
// whatever slice is free, likely not its old one. What it wrote before
// keeps its owners, inside and on disk (the store's ids: the upper layer
// is idmapped, never chowned to a slice's ids), and so does what it writes
// after.
func TestSandboxRestartedInAnotherSliceKeepsOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only")
	}
	b, ref := testBackend(t)
	b.KeepReady(false)
	sb := spawnT(t, b, backend.SpawnSpec{Image: ref, DisableSetup: true, NoWorkspaceMount: true})
	if res := run(t, sb, "mkdir /data && echo a > /data/r && echo b > /data/u && chown 1000:1000 /data/u && mkdir /data/d && chown 5:6 /data/d"); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	before := hostRange(t, sb.rec.Pid)
	held := heldSlices(t, b)
	if len(held) != 1 {
		t.Fatalf("held %v", held)
	}
	if err := sb.Stop(); err != nil {
		t.Fatal(err)
	}
	// The reboot: the record is gone, and another sandbox takes the slice.
	if err := os.Remove(filepath.Join(b.slices.dir, strconv.Itoa(held[0]))); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	sandboxDirFor(t, other, "squatter")
	if k, err := b.slices.alloc(other, "squatter"); err != nil || k != held[0] {
		t.Fatalf("the squatter got slice %d (%v), want %d", k, err, held[0])
	}
	t.Cleanup(func() { b.slices.releaseID(other, "squatter") })
	if err := sb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := hostRange(t, sb.rec.Pid)
	if after == before {
		t.Fatalf("started again in the same host ids %v: this test tests nothing", after)
	}
	res := run(t, sb, "echo c > /data/new && mkdir /data/d2 && chown 1000:1000 /data/d2 && stat -c '%n %u:%g' /data/r /data/u /data/d /data/new /data/d2")
	want := "/data/r 0:0\n/data/u 1000:1000\n/data/d 5:6\n/data/new 0:0\n/data/d2 1000:1000\n"
	if res.ExitCode != 0 || res.Stdout != want {
		t.Fatalf("owners in the sandbox after a start in host ids %v (was %v): %+v, want\n%s", after, before, res, want)
	}
	if err := sb.Stop(); err != nil {
		t.Fatal(err)
	}
	base := b.store.Mapping().UIDs[0].HostID
	for name, id := range map[string]uint32{"r": 0, "u": 1000, "d": 5, "new": 0, "d2": 1000} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(sb.UpperDir(), "data", name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != base+id {
			t.Errorf("%s is host uid %d on disk, want the store's %d", name, st.Uid, base+id)
		}
	}
}

// Allocation read every record, to see whether the sandbox held one
// already: 1.5 ms with 100 sandboxes, 11 ms with 1000, and 17508 fit. It
// finds a sandbox's own slice through one link now, and others' by their
// records' names: here the others' records cannot even be read (they are
// directories), and allocation works.
func TestSlicesAllocReadsNoOtherRecord(t *testing.T) {
	r, root := testSlices(t, 64)
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for k := range 50 {
		if err := os.Mkdir(filepath.Join(r.dir, strconv.Itoa(k)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sandboxDirFor(t, root, "a")
	k, err := r.alloc(root, "a")
	if err != nil || k != 50 {
		t.Fatalf("alloc among 50 held slices: %d, %v; want 50", k, err)
	}
	if again, err := r.alloc(root, "a"); err != nil || again != k {
		t.Fatalf("alloc again: %d, %v; want %d", again, err, k)
	}
	if err := r.releaseID(root, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(r.dir, "50")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("slice 50 still recorded after its release: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(r.dir, holder{root, "a"}.link())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link of a released slice is left: %v", err)
	}
}
