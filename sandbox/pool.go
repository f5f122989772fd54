package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// The pool keeps sandboxes started ahead of need. Starting a sandbox's PID 1
// (libcontainer's init: namespaces, about 40 mounts, capabilities) is most
// of a spawn; what differs between two sandboxes of the same image, user
// and network is only their own mounts (workspace, extra mounts, static
// assets) and hostname, which the spawn server puts in place when the
// sandbox is claimed. So after each spawn the Backend starts the next
// sandbox of that kind in the background, and the next Spawn claims it.
//
// An unclaimed sandbox runs no command and serves no request: its PID 1
// waits for the claim and exits if its spawn server goes away first, so a
// pool never outlives the process that owns it. It lives in
// <root>/c/.pool/<id> (invisible to ps, list and prune) and is renamed to
// <root>/c/<id> when claimed. Directories that a killed process left there
// are removed by the next Backend that starts a sandbox, and by Prune.

// poolDepth is how many sandboxes of one kind are kept ready. Two start in
// parallel (on two cores) while the caller works with the one it claimed.
const poolDepth = 2

// maxPoolKinds bounds the kinds (image, user, network) kept ready at once.
const maxPoolKinds = 4

const poolDir = ".pool"

// KeepReady turns the pool on (the default: poolDepth sandboxes kept ready
// for each kind the Backend has spawned) or off, which also stops the ready
// ones. A one-shot process such as the CLI turns it off.
func (b *Backend) KeepReady(on bool) {
	b.pool.mu.Lock()
	b.pool.off = !on
	b.pool.mu.Unlock()
	if !on {
		b.pool.drain(b)
	}
}

type pool struct {
	mu  sync.Mutex
	off bool
	// kept, once set (a pool keeper, keeper.go), is the only kinds kept
	// ready and how many of each: no other kind is refilled.
	kept    map[string]keptKind
	entries map[string][]*poolEntry // by template key: ready or starting, oldest first
	reaped  bool                    // stale entries of dead processes removed

	// reserving (root) is closed once Prewarm's reservation is made or
	// has failed; reserved is that reservation: the directory, id slice
	// and running spawn server of the next sandbox, which has no PID 1
	// yet (its template is not known when Prewarm runs).
	reserving chan struct{}
	reserved  *poolEntry
}

// poolEntry is a prestarted sandbox.
type poolEntry struct {
	id, dir string
	srv     *spawner
	pid     int

	done chan struct{} // closed once started (or failed: err)
	err  error
}

// take removes an entry for key, a ready one if there is one, else the
// oldest, waiting until it has started. It returns nil when there is none.
func (p *pool) take(key string) *poolEntry {
	p.mu.Lock()
	es := p.entries[key]
	if len(es) == 0 {
		p.mu.Unlock()
		return nil
	}
	i := 0
	for j, e := range es {
		select {
		case <-e.done:
			i = j
		default:
			continue
		}
		break
	}
	e := es[i]
	if len(es) == 1 {
		delete(p.entries, key) // the kind no longer counts against maxPoolKinds
	} else {
		p.entries[key] = slices.Delete(slices.Clone(es), i, i+1)
	}
	p.mu.Unlock()
	<-e.done
	if e.err != nil {
		return nil
	}
	return e
}

// refill starts entries for key in the background up to poolDepth, unless
// the pool is off.
func (p *pool) refill(key string, start func() (*poolEntry, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	depth := poolDepth
	if p.kept != nil {
		depth = p.kept[key].count
	} else if p.entries[key] == nil && len(p.entries) >= maxPoolKinds {
		return
	}
	if p.off || depth == 0 {
		return
	}
	if p.entries == nil {
		p.entries = map[string][]*poolEntry{}
	}
	for len(p.entries[key]) < depth {
		p.entries[key] = append(p.entries[key], p.startEntry(start))
	}
}

func (p *pool) startEntry(start func() (*poolEntry, error)) *poolEntry {
	slot := &poolEntry{done: make(chan struct{})}
	go func() {
		e, err := start()
		if err == nil {
			slot.id, slot.dir, slot.srv, slot.pid = e.id, e.dir, e.srv, e.pid
		}
		slot.err = err
		close(slot.done)
	}()
	return slot
}

// drain stops every entry and removes its directory.
func (p *pool) drain(b *Backend) {
	p.mu.Lock()
	entries := p.entries
	p.entries = nil
	p.mu.Unlock()
	for _, es := range entries {
		for _, e := range es {
			<-e.done
			if e.err == nil {
				b.discardEntry(e.srv, e)
			}
		}
	}
}

// prestartEntry starts an unclaimed sandbox from t in a new directory under
// .pool: Prewarm's reservation when there is one.
func (b *Backend) prestartEntry(ctx context.Context, srv *spawner, bins binaries, t template) (*poolEntry, error) {
	e := b.takeReserved()
	if e == nil {
		var err error
		if e, err = b.newEntry(bins); err != nil {
			return nil, err
		}
	}
	if e.srv != nil {
		srv = e.srv // root: the sandbox's own
	} else {
		e.srv = srv
	}
	var err error
	e.pid, err = b.prestart(ctx, srv, bins, t, e.id, e.dir, func() { b.removeEntryDir(e) })
	if _, ok := errors.AsType[*abandonedError](err); ok {
		return nil, err // the directory goes once the server has answered
	}
	if err != nil {
		if e.pid > 0 {
			b.discardEntry(srv, e)
		} else {
			b.removeEntryDir(e)
		}
		return nil, err
	}
	return e, nil
}

// newEntry makes a new directory under .pool for a sandbox, and as root
// its id slice and spawn server (not started yet).
func (b *Backend) newEntry(bins binaries) (*poolEntry, error) {
	b.reapPool()
	e := &poolEntry{id: newID()}
	e.dir = filepath.Join(b.state.dir, poolDir, e.id)
	if err := os.MkdirAll(filepath.Dir(e.dir), 0o711); err != nil {
		return nil, err
	}
	// The entry appears under its name with its owner recorded: made as
	// .new-<id> first, so a process killed in between leaves no unowned
	// entry that a reaper would have to spare as "being set up".
	tmp := filepath.Join(filepath.Dir(e.dir), ".new-"+e.id)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	start, _, _ := procStart(os.Getpid())
	// Atomically: a concurrent reaper must never read a partial owner file
	// and take a live owner for a dead one.
	err := atomicfile.WriteVolatile(filepath.Join(tmp, "owner"), bytes.NewReader(fmt.Appendf(nil, "%d %d\n", os.Getpid(), start)), 0o644)
	if err == nil {
		err = os.Rename(tmp, e.dir)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	err = b.chownToNamespaceRoot(e.dir)
	if err == nil && b.slices != nil {
		// As root each sandbox has host ids and a spawn server of its
		// own, from now until its directory is removed.
		var k int
		if k, err = b.slices.alloc(b.state.dir, e.id); err == nil {
			e.srv = b.sliceSpawner(bins.server, k, e.id)
		}
	}
	if err != nil {
		b.removeEntryDir(e)
		return nil, err
	}
	return e, nil
}

// reserve (root; Prewarm) makes the next sandbox's directory, id slice
// and spawn server in the background, so that a spawn that follows finds
// its server running: as root each sandbox has a server of its own, and
// its start (a user namespace, a Go runtime) otherwise comes after the
// caller has read the image and flags. Close removes a reservation no
// spawn took; a killed process's is reaped as any pool entry.
func (b *Backend) reserve() {
	done := make(chan struct{})
	b.pool.mu.Lock()
	if b.pool.reserving != nil || b.pool.reserved != nil {
		b.pool.mu.Unlock()
		return
	}
	b.pool.reserving = done
	b.pool.mu.Unlock()
	b.warming.Add(1)
	go func() {
		defer b.warming.Done()
		e := b.makeReservation()
		// One reservation at a time: none is set while this one is made.
		b.pool.mu.Lock()
		b.pool.reserved = e
		b.pool.reserving = nil // made, or failed: a later Prewarm may try again
		b.pool.mu.Unlock()
		close(done)
	}()
}

// makeReservation makes a new pool entry and starts its spawn server, or
// returns nil (the spawn that follows reports what fails).
func (b *Backend) makeReservation() *poolEntry {
	bins, err := b.binaries()
	if err != nil {
		return nil
	}
	e, err := b.newEntry(bins)
	if err != nil {
		return nil
	}
	if _, err := e.srv.server(userns.Mapping{}); err != nil {
		b.removeEntryDir(e)
		return nil
	}
	// The idmapped clones its prestart passes the server (a user
	// namespace made for them, two open_tree calls): made now, off the
	// spawn's path. Should this fail, the prestart tries and says why.
	layers := b.store.LayersRoot()
	if clones, err := b.sliceClones(*e.srv.mapping, e.dir, layers); err == nil {
		e.srv.keepClones(clones, layers)
	}
	return e
}

// takeReserved returns Prewarm's reservation, waiting for one being made,
// or nil when there is none.
func (b *Backend) takeReserved() *poolEntry {
	b.pool.mu.Lock()
	ch := b.pool.reserving
	b.pool.mu.Unlock()
	if ch != nil {
		<-ch
	}
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	e := b.pool.reserved
	b.pool.reserved = nil
	return e
}

// discardEntry stops an unclaimed sandbox and removes its directory.
func (b *Backend) discardEntry(srv *spawner, e *poolEntry) {
	srv.call(context.Background(), b.store.Mapping(), &spawnd.Request{Op: spawnd.OpDiscard, ID: e.id}, nil, false)
	b.removeEntryDir(e)
}

// removeEntryDir removes an unclaimed sandbox's directory, then stops its
// own spawn server and, once that has exited, frees its id slice (root).
func (b *Backend) removeEntryDir(e *poolEntry) {
	slice := e.srv != nil && e.srv.mapping != nil
	// A server that has not gone keeps its directory, and so its slice
	// (freed, the slice's ids could be a new sandbox's while it runs):
	// the reaper stops it once this process has exited.
	if slice && !e.srv.closeWait(5*time.Second) {
		return
	}
	if b.removeDir(e.dir) != nil || !slice {
		return // a slice stays held while the directory exists
	}
	b.slices.release(b.state.dir, e.id, e.srv.slice)
}

// reapPool removes pool directories whose owning process is gone (their
// PID 1 exited with the owner's spawn server). Once per Backend, and from
// Prune.
func (b *Backend) reapPool() {
	b.pool.mu.Lock()
	done := b.pool.reaped
	b.pool.reaped = true
	b.pool.mu.Unlock()
	if !done {
		b.reapStalePool()
	}
}

func (b *Backend) reapStalePool() error {
	dir := filepath.Join(b.state.dir, poolDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		id, reaper := poolEntryID(e.Name())
		if reaper != nil && !reaper.gone() {
			continue // being reaped by a live process (this one included)
		}
		if ownerAlive(p) {
			continue
		}
		if reapHook != nil {
			reapHook(id)
		}
		// Claimed by a rename before anything is killed: the owner read
		// above may have adopted the entry (renamed it to the sandbox's
		// own directory, the same id) and exited since, its sandbox now
		// running; then the rename finds nothing and the sandbox is
		// spared. Killing by the id's marker without the claim made
		// just-started sandboxes exit with 137 under load.
		me := self()
		claimed := filepath.Join(dir, fmt.Sprintf(".reap-%d-%d-%s", me.Pid, me.Start, id))
		if err := os.Rename(p, claimed); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		// Its PID 1 exits with its server, but a libcontainer init that
		// never became PID 1 does not. What did not die keeps the entry
		// (and its slice) for a later reaper.
		if err := killStragglers(id, claimed); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := b.removeDir(claimed); err != nil {
			errs = append(errs, err)
		} else if b.slices != nil {
			// Its id slice with it (as root every entry has one, a
			// killed caller's reservation too), rather than at the next
			// prune or when the slices run out.
			if err := b.slices.releaseID(b.state.dir, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// reapHook, when set (by tests), runs once the reaper has found the owner
// of the pool entry of sandbox id gone, before it claims the entry.
var reapHook func(id string)

// poolEntryID returns the sandbox id of the pool directory named name:
// <id>, .new-<id> (being made) or .reap-<pid>-<start>-<id> (claimed by
// the reaper with that pid and start time, returned too).
func poolEntryID(name string) (id string, reaper *procID) {
	if rest, ok := strings.CutPrefix(name, ".reap-"); ok {
		if f := strings.SplitN(rest, "-", 3); len(f) == 3 {
			pid, _ := strconv.Atoi(f[0])
			start, _ := strconv.ParseUint(f[1], 10, 64)
			return f[2], &procID{Pid: pid, Start: start}
		}
		return rest, nil
	}
	return strings.TrimPrefix(name, ".new-"), nil
}

// ownerAlive reports whether the process that prestarted the sandbox in dir
// still runs. A directory still being set up (no owner file yet) counts as
// owned.
func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		if _, serr := os.Lstat(dir); errors.Is(serr, os.ErrNotExist) {
			// Gone since it was listed: adopted by its owner (renamed to
			// the sandbox's own directory) or removed. Not ours to reap:
			// its id may now be a live sandbox's.
			return true
		}
		return errors.Is(err, os.ErrNotExist) && recentlyCreated(dir)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, _ := strconv.Atoi(f[0])
	want, _ := strconv.ParseUint(f[1], 10, 64)
	start, zombie, ok := procStart(pid)
	return ok && !zombie && start == want
}

func recentlyCreated(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && time.Since(fi.ModTime()) < time.Minute
}
