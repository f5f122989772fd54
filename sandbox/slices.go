package sandbox

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/userns"
)

// Per-sandbox id slices (root only; podman's --userns=auto).
//
// The kernel counts inotify instances, message queue bytes, pending
// signals and processes (RLIMIT_NPROC) per (user namespace, host uid),
// and charges each count again, in every ancestor namespace, to the uid
// that owns the namespace below it (kernel/ucount.c); epoll watches,
// pipe buffers and locked memory are counted per host uid alone. Root-run
// sandboxes that share one id range and one namespace owner therefore
// share every one of those limits: one sandbox holding 128 inotify
// instances stopped inotify_init in all the others. So each root-run
// sandbox gets a slice of its own, 65536 host ids no other sandbox has,
// and its user namespace is owned by the slice's first id.
//
// A slice is held from the moment the sandbox's directory exists (in the
// pool, then under its id) until that directory is removed. It is recorded
// host-wide, one file per slice in use naming the state root and the
// sandbox id, so that two state roots on one host never share a slice;
// allocation, release and the sweep that frees the slices of sandboxes
// whose directory is gone (a slopbox killed mid-spawn) run under one lock.

// SliceSize is the number of host ids in one sandbox's slice.
const SliceSize = userns.DefaultSize

// defaultSliceDir records the slices in use on this host.
const defaultSliceDir = "/run/slopbox/userns-slices"

// sliceRange hands out slices.
type sliceRange struct {
	dir   string // one file per slice in use, named by its index
	first uint64 // host id of slice 0
	count int    // slices in the range
	// taken: host id spans other users' subordinate ranges occupy; a slice
	// overlapping one is never handed out. Read again from subIDFiles at
	// each allocation: a serve process outlives many useradds.
	taken      []idSpan
	subIDFiles []string
}

type idSpan struct{ start, end uint64 } // end exclusive

// maxSliceID bounds the range: ids from 2^31 on are negative as int32,
// which some programs still use for uids.
const maxSliceID = 1 << 31

// rootSlices is the range for root: from the end of the store's range
// (root's first /etc/subuid and /etc/subgid range, or slopbox's default)
// up to 2^31, skipping every range /etc/subuid or /etc/subgid gives
// another user. It never starts below the ids useradd hands out as
// subordinate ranges (SUB_UID_MAX, SUB_GID_MAX in /etc/login.defs): a user
// added later would get a live sandbox's host ids, as its own.
func rootSlices(dir string, store userns.Mapping) *sliceRange {
	end := uint64(0)
	for _, maps := range [][]userns.IDMap{store.UIDs, store.GIDs} {
		for _, m := range maps {
			end = max(end, uint64(m.HostID)+uint64(m.Size))
		}
	}
	first := max(end, subIDMax("/etc/login.defs"))
	r := &sliceRange{dir: dir, first: first, subIDFiles: []string{"/etc/subuid", "/etc/subgid"}}
	if first < maxSliceID {
		r.count = int((maxSliceID - first) / SliceSize)
	}
	r.taken = subIDSpans(r.subIDFiles...)
	return r
}

// defaultSubIDMax is shadow's default SUB_UID_MAX and SUB_GID_MAX.
const defaultSubIDMax = 600100000

// subIDMax is the end of the ids useradd gives as subordinate ranges: the
// larger of SUB_UID_MAX and SUB_GID_MAX in login.defs (each 600100000
// when not set there).
func subIDMax(loginDefs string) uint64 {
	vals := map[string]uint64{"SUB_UID_MAX": defaultSubIDMax, "SUB_GID_MAX": defaultSubIDMax}
	if f, err := os.Open(loginDefs); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) < 2 {
				continue
			}
			if _, ok := vals[fields[0]]; ok {
				if v, err := strconv.ParseUint(fields[1], 10, 32); err == nil {
					vals[fields[0]] = v
				}
			}
		}
		f.Close()
	}
	return max(vals["SUB_UID_MAX"], vals["SUB_GID_MAX"])
}

// subIDSpans lists the ranges the files give any user.
func subIDSpans(files ...string) []idSpan {
	var out []idSpan
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Split(strings.TrimSpace(s.Text()), ":")
			if len(fields) != 3 {
				continue
			}
			start, err1 := strconv.ParseUint(fields[1], 10, 32)
			n, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 == nil && err2 == nil && n > 0 {
				out = append(out, idSpan{start, start + n})
			}
		}
		f.Close()
	}
	return out
}

// usable says whether slice k overlaps no other user's subordinate range.
func (r *sliceRange) usable(k int) bool { return r.usableWith(k, r.taken) }

func (r *sliceRange) usableWith(k int, taken []idSpan) bool {
	start := r.first + uint64(k)*SliceSize
	for _, t := range taken {
		if start < t.end && t.start < start+SliceSize {
			return false
		}
	}
	return true
}

// Capacity is the number of slices the range can hand out.
func (r *sliceRange) Capacity() int {
	n := 0
	for k := range r.count {
		if r.usable(k) {
			n++
		}
	}
	return n
}

// mapping is slice k as the id mapping of a sandbox: container ids
// 0..65535 onto the slice's host ids.
func (r *sliceRange) mapping(k int) userns.Mapping {
	base := uint32(r.first + uint64(k)*SliceSize)
	return userns.Mapping{
		UIDs: []userns.IDMap{{ContainerID: 0, HostID: base, Size: SliceSize}},
		GIDs: []userns.IDMap{{ContainerID: 0, HostID: base, Size: SliceSize}},
	}
}

func (r *sliceRange) lock() (*flock.Flock, error) {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	// The records decide which host ids a sandbox gets: written by
	// anyone else, two sandboxes could be handed one slice.
	for _, d := range []string{filepath.Dir(r.dir), r.dir} {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
			return nil, fmt.Errorf("%s must be a directory of uid %d that no one else may write (it is mode %#o of uid %d); remove it to have it made again", d, os.Geteuid(), st.Mode, st.Uid)
		}
	}
	l := flock.New(filepath.Join(r.dir, ".lock"))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return l, nil
}

// holder is what a slice file records: the sandbox that holds the slice.
type holder struct{ root, id string }

func (h holder) String() string { return h.root + "\n" + h.id + "\n" }

func readHolder(path string) (holder, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return holder{}, err
	}
	root, rest, _ := strings.Cut(string(b), "\n")
	id, _, _ := strings.Cut(rest, "\n")
	return holder{root, id}, nil
}

// link names the symlink to the slice h holds ("id-" and a hash of h),
// so that finding it reads one record, not every one (11 ms with a
// thousand sandboxes).
func (h holder) link() string {
	sum := sha256.Sum256([]byte(h.String()))
	return "id-" + hex.EncodeToString(sum[:16])
}

// gone says whether h's sandbox no longer has a directory, in the pool or
// under its id. The pool is looked at first: a sandbox moves from there
// to its own directory (a rename), or to a reaper's claim, never back, so
// it is seen in one of them whenever it exists.
func (h holder) gone() bool {
	if h.root == "" || h.id == "" || strings.ContainsAny(h.id, "/.") {
		return true
	}
	for _, p := range []string{filepath.Join(h.root, poolDir, h.id), filepath.Join(h.root, h.id)} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	// A stale pool entry claimed by a reaper (.reap-<pid>-<start>-<id>):
	// its processes may live on until the reaper has removed it.
	claimed, _ := filepath.Glob(filepath.Join(h.root, poolDir, ".reap-*-"+h.id))
	return len(claimed) == 0
}

// errSlicesExhausted: every slice is held by an existing sandbox.
var errSlicesExhausted = errors.New("every id slice is in use")

// alloc hands sandbox id of state root root a slice of its own, and
// returns its index: the one it holds already, or the lowest free one.
// Call it once the sandbox's directory exists. When all are held it frees
// those whose sandbox is gone, then tries again.
func (r *sliceRange) alloc(root, id string) (int, error) {
	l, err := r.lock()
	if err != nil {
		return 0, fmt.Errorf("id slices: %w", err)
	}
	defer l.Unlock()
	want := holder{root, id}
	taken := r.taken
	if r.subIDFiles != nil {
		taken = subIDSpans(r.subIDFiles...)
	}
	if k, ok := r.heldLocked(want); ok {
		return k, nil
	}
	for sweep := false; ; sweep = true {
		used, err := r.indicesLocked()
		if err != nil {
			return 0, err
		}
		for k := range r.count {
			if used[k] || !r.usableWith(k, taken) {
				continue
			}
			f, err := os.OpenFile(filepath.Join(r.dir, strconv.Itoa(k)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("id slices: %w", err)
			}
			_, err = f.WriteString(want.String())
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				link := filepath.Join(r.dir, want.link())
				os.Remove(link)
				err = os.Symlink(strconv.Itoa(k), link)
			}
			if err != nil {
				os.Remove(f.Name())
				return 0, fmt.Errorf("id slices: %w", err)
			}
			return k, nil
		}
		if sweep {
			return 0, fmt.Errorf("%w: %d sandboxes hold all %d slices of %d ids (host ids %d-%d); remove sandboxes (slopbox rm, slopbox prune) to free some", errSlicesExhausted, len(used), r.Capacity(), SliceSize, r.first, r.first+uint64(r.count)*SliceSize-1)
		}
		if _, err := r.sweepLocked(); err != nil {
			return 0, err
		}
	}
}

// heldLocked returns the slice h holds, found through its link.
func (r *sliceRange) heldLocked(h holder) (int, bool) {
	target, err := os.Readlink(filepath.Join(r.dir, h.link()))
	if err != nil {
		return 0, false
	}
	k, err := strconv.Atoi(target)
	if err != nil || k < 0 || strconv.Itoa(k) != target {
		return 0, false
	}
	if got, err := readHolder(filepath.Join(r.dir, target)); err != nil || got != h {
		return 0, false
	}
	return k, true
}

// indicesLocked lists the slices in use, by their records' names only.
func (r *sliceRange) indicesLocked() (map[int]bool, error) {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("id slices: %w", err)
	}
	used := map[int]bool{}
	for _, e := range ents {
		if k, err := strconv.Atoi(e.Name()); err == nil && k >= 0 {
			used[k] = true
		}
	}
	return used, nil
}

// usedLocked reads the slices in use.
func (r *sliceRange) usedLocked() (map[int]holder, error) {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("id slices: %w", err)
	}
	used := map[int]holder{}
	for _, e := range ents {
		k, err := strconv.Atoi(e.Name())
		if err != nil || k < 0 {
			continue
		}
		h, err := readHolder(filepath.Join(r.dir, e.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("id slices: %w", err)
		}
		used[k] = h
	}
	return used, nil
}

// release frees slice k if sandbox id of root holds it.
func (r *sliceRange) release(root, id string, k int) error {
	l, err := r.lock()
	if err != nil {
		return err
	}
	defer l.Unlock()
	p := filepath.Join(r.dir, strconv.Itoa(k))
	h := holder{root, id}
	if got, err := readHolder(p); err != nil || got != h {
		return nil // not its (any more)
	}
	os.Remove(filepath.Join(r.dir, h.link()))
	return os.Remove(p)
}

// releaseID frees whatever slice sandbox id of root holds.
func (r *sliceRange) releaseID(root, id string) error {
	l, err := r.lock()
	if err != nil {
		return err
	}
	defer l.Unlock()
	h := holder{root, id}
	k, ok := r.heldLocked(h)
	if err := os.Remove(filepath.Join(r.dir, h.link())); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !ok {
		return nil // none, or one whose link a killed slopbox never made: sweep frees it
	}
	if err := os.Remove(filepath.Join(r.dir, strconv.Itoa(k))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// sweep frees the slices whose sandbox has no directory any more (its
// slopbox was killed before it released the slice) and returns how many.
func (r *sliceRange) sweep() (int, error) {
	if _, err := os.Stat(r.dir); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	l, err := r.lock()
	if err != nil {
		return 0, err
	}
	defer l.Unlock()
	return r.sweepLocked()
}

func (r *sliceRange) sweepLocked() (int, error) {
	used, err := r.usedLocked()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for k, h := range used {
		if !h.gone() {
			continue
		}
		if err := os.Remove(filepath.Join(r.dir, strconv.Itoa(k))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		os.Remove(filepath.Join(r.dir, h.link()))
		n++
	}
	// Links whose record is gone.
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "id-") {
			continue
		}
		p := filepath.Join(r.dir, e.Name())
		if target, err := os.Readlink(p); err == nil {
			if _, err := os.Lstat(filepath.Join(r.dir, filepath.Base(target))); errors.Is(err, fs.ErrNotExist) {
				os.Remove(p)
			}
		}
	}
	return n, errors.Join(errs...)
}

// sliceClones (root) returns detached clones of the sandbox directory dir
// (read-write) and of the layers' directory (read-only: every sandbox
// shares the layers), idmapped from the store's ids to slice m: a file the
// store's container id N owns appears as the slice's id N. Nothing else of
// the store is given to the slice: its root could write it all.
func (b *Backend) sliceClones(m userns.Mapping, dir, layers string) ([]*os.File, error) {
	store := b.store.Mapping()
	nsfd, err := idmapUserns(
		[]syscall.SysProcIDMap{{ContainerID: int(store.UIDs[0].HostID), HostID: int(m.UIDs[0].HostID), Size: int(min(store.UIDs[0].Size, m.UIDs[0].Size))}},
		[]syscall.SysProcIDMap{{ContainerID: int(store.GIDs[0].HostID), HostID: int(m.GIDs[0].HostID), Size: int(min(store.GIDs[0].Size, m.GIDs[0].Size))}})
	if err != nil {
		return nil, fmt.Errorf("idmapped layers: %w", err)
	}
	defer unix.Close(nsfd)
	var out []*os.File
	for i, p := range []string{dir, layers} {
		f, err := idmappedTree(p, nsfd, i == 1)
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// idmappedTree returns a detached clone of directory p (no symlink
// followed: these are slopbox's own directories) idmapped with the user
// namespace nsfd, and read-only with ro.
func idmappedTree(p string, nsfd int, ro bool) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("idmapped mount of %s: open_tree: %w", p, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(nsfd), Propagation: unix.MS_PRIVATE}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("idmapped mount of %s (Linux 5.19 or later, and a filesystem that supports idmapped mounts, give root-run sandboxes id slices of their own): %w", p, err)
	}
	return os.NewFile(uintptr(fd), "idmapped-"+filepath.Base(p)), nil
}
