package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
)

// A pool keeper (slopbox pool keep) is the one process that keeps
// sandboxes started ahead of need for the CLI, whose processes each spawn
// one sandbox and exit: nothing else would keep a PID 1 warm between two
// invocations. It is opt-in: started by `pool keep`, stopped by `pool rm`
// and prune, and its pool holds only the kinds it was asked to keep (an
// image with the settings that make a PID 1: user, network, read-only,
// capabilities, tmpfs sizes, --rm). A `run` asks it for a sandbox of its
// spec over a socket in the state root (0700, the user's own; the peer's
// uid checked): the keeper runs the same spawn as a cold one (Spawn, the
// spec validated and the mounts, hostname and environment put in place at
// the claim), recorded as the asking process's, and answers its id; it
// spawns nothing cold, so a spec of no kept kind is the caller's to spawn
// (errNotPooled). Its pooled PID 1s exit with it (each waits on its spawn
// server), and the reaper removes what a killed keeper left.

// errNotPooled says no sandbox of a spec's kind is kept ready: nothing was
// made, and the caller spawns it itself.
var errNotPooled = errors.New("no sandbox of this kind is kept ready")

type ctxKey int

const (
	callerKey ctxKey = iota
	pooledOnlyKey
)

// callerOf is the process a spawn is for: the caller of Spawn, or the
// process a pool keeper spawns for.
func callerOf(ctx context.Context) *procID {
	if p, ok := ctx.Value(callerKey).(*procID); ok {
		return p
	}
	return self()
}

// pooledOnly reports whether a spawn may only claim a sandbox kept ready.
func pooledOnly(ctx context.Context) bool { v, _ := ctx.Value(pooledOnlyKey).(bool); return v }

// keptKind is a kind a pool keeper keeps ready.
type keptKind struct {
	count int
	info  PoolKind
}

// PoolKind is a kind of sandbox a pool keeper keeps ready, and its
// sandboxes.
type PoolKind struct {
	Image   string   `json:"image"`
	User    string   `json:"user,omitempty"`
	Network string   `json:"network"`
	ForRm   bool     `json:"for_rm"` // for run --rm (Disposable)
	Count   int      `json:"count"`
	Ready   []string `json:"ready"`    // the ids of those ready
	Pending int      `json:"starting"` // and how many are starting
}

// Keep keeps count sandboxes of spec's kind started ahead of need, and
// from then on only the kinds kept (a pool keeper's Backend). It returns
// once they have started, or with the first error.
func (b *Backend) Keep(ctx context.Context, spec backend.SpawnSpec, count int) error {
	if count < 1 || count > 64 {
		return backend.InvalidValue("--count %d: keep 1 to 64 sandboxes of a kind", count)
	}
	nw, err := b.checkSpawn(ctx, spec, nil)
	if err != nil {
		return err
	}
	if len(nw.nets) > 0 || len(nw.ports) > 0 || len(spec.Mounts)+len(spec.StaticAssets) > 0 || spec.Workspace != "" {
		return backend.InvalidValue("a kept sandbox has no user network, published port, workspace or mount of its own: those are a run's, put in place when it claims one")
	}
	r, err := b.resolveSpawn(ctx, spec, nil, "")
	if err != nil {
		return err
	}
	rec := newRecord(spec, false, nil, "", nw, r)
	bins, err := b.binaries()
	if err != nil {
		return err
	}
	srv := b.spawnerFor(bins.server)
	t := templateOf(rec)
	key := t.key()
	b.pool.mu.Lock()
	b.pool.off = false
	if b.pool.kept == nil {
		b.pool.kept = map[string]keptKind{}
	}
	b.pool.kept[key] = keptKind{count: count, info: PoolKind{Image: spec.Image, User: spec.User, Network: rec.Network, ForRm: spec.Disposable, Count: count}}
	b.pool.mu.Unlock()
	b.pool.refill(key, func() (*poolEntry, error) {
		return b.prestartEntry(context.Background(), srv, bins, t)
	})
	b.pool.mu.Lock()
	es := slices.Clone(b.pool.entries[key])
	b.pool.mu.Unlock()
	for _, e := range es {
		select {
		case <-e.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if e.err != nil {
			return e.err
		}
	}
	return nil
}

// PoolKinds lists the kinds kept ready and their sandboxes.
func (b *Backend) PoolKinds() []PoolKind {
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	out := []PoolKind{}
	for key, k := range b.pool.kept {
		info := k.info
		info.Ready = []string{}
		for _, e := range b.pool.entries[key] {
			select {
			case <-e.done:
				if e.err == nil {
					info.Ready = append(info.Ready, e.id)
				}
			default:
				info.Pending++
			}
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b PoolKind) int { return cmpString(a.Image+a.User, b.Image+b.User) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// KeeperDir is where the pool keeper of the state root keeps its socket,
// lock and log.
func (b *Backend) KeeperDir() string { return filepath.Join(b.root, "pool") }

func keeperSocket(dir string) string { return filepath.Join(dir, "keeper.sock") }

// keeperRequest is what the keeper is asked, one request a connection.
type keeperRequest struct {
	Op      string            `json:"op"` // spawn, keep, list, stop
	Spec    backend.SpawnSpec `json:"spec"`
	Command []string          `json:"command,omitempty"`
	Detach  bool              `json:"detach,omitempty"`
	Count   int               `json:"count,omitempty"`
	// Policy is the asker's policy file: the keeper serves only askers
	// under its own.
	Policy string `json:"policy"`
}

type keeperReply struct {
	ID        string     `json:"id,omitempty"`
	NotPooled bool       `json:"not_pooled,omitempty"`
	Error     string     `json:"error,omitempty"`
	Kinds     []PoolKind `json:"kinds,omitempty"`
}

// KeeperPolicy is the policy a keeper applies to every spec it spawns (the
// sandbox policy file it was started under): its file's name, and how it
// bounds a spec (Policy.ApplySpec).
type KeeperPolicy struct {
	File  string
	Apply func(*backend.SpawnSpec)
}

// ServeKeeper is the pool keeper: it holds the keeper's lock (a second
// keeper of the same state root returns ErrKeeperRunning), listens on the
// socket and answers until asked to stop, then stops the sandboxes kept
// ready and removes the socket.
func (b *Backend) ServeKeeper(pol KeeperPolicy) error {
	dir := b.KeeperDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "keeper.lock"), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return ErrKeeperRunning
	}
	sock := keeperSocket(dir)
	os.Remove(sock) // a killed keeper's
	old := unix.Umask(0o077)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return err
	}
	defer os.Remove(sock)
	defer ln.Close()
	b.pool.mu.Lock()
	b.pool.off = false
	if b.pool.kept == nil {
		b.pool.kept = map[string]keptKind{}
	}
	b.pool.mu.Unlock()
	stop := make(chan struct{})
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				if b.answer(c, pol) {
					close(stop)
				}
			}()
		}
	}()
	<-stop
	ln.Close()
	b.KeepReady(false)
	b.Close()
	return nil
}

// ErrKeeperRunning: a pool keeper already serves the state root.
var ErrKeeperRunning = errdefs.ErrAlreadyExists.WithMessage("a pool keeper already runs for this state root")

// answer serves one connection; it reports whether the keeper was asked
// to stop.
func (b *Backend) answer(c *net.UnixConn, pol KeeperPolicy) (stop bool) {
	defer c.Close()
	peer, err := peerOf(c)
	if err != nil {
		return false // another user's, or not to be told apart: nothing said
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req keeperRequest
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		return false
	}
	var rep keeperReply
	switch {
	case req.Op == "stop":
		stop = true
	case req.Op == "list":
		rep.Kinds = b.PoolKinds()
	case req.Policy != pol.File:
		// Served under the keeper's policy only: an asker under another
		// spawns cold, under its own.
		rep.NotPooled = true
		rep.Error = fmt.Sprintf("the pool keeper runs under the policy %q, not %q", pol.File, req.Policy)
	case req.Op == "keep":
		if pol.Apply != nil {
			pol.Apply(&req.Spec)
		}
		if err := b.Keep(context.Background(), req.Spec, req.Count); err != nil {
			rep.Error = err.Error()
		}
	case req.Op == "spawn":
		rep = b.spawnFor(peer, req, pol)
	default:
		rep.Error = fmt.Sprintf("unknown request %q", req.Op)
	}
	json.NewEncoder(c).Encode(rep)
	return stop
}

// spawnFor claims a kept sandbox for req, recorded as peer's.
func (b *Backend) spawnFor(peer *procID, req keeperRequest, pol KeeperPolicy) keeperReply {
	if pol.Apply != nil {
		pol.Apply(&req.Spec) // the keeper's bounds, whatever the asker sent
	}
	if !askersOwn(req.Spec) {
		return keeperReply{NotPooled: true}
	}
	ctx := context.WithValue(context.WithValue(context.Background(), callerKey, peer), pooledOnlyKey, true)
	var sb *Sandbox
	var err error
	if req.Detach {
		sb, err = b.SpawnCommand(ctx, req.Spec, req.Command)
	} else {
		sb, err = b.SpawnForeground(ctx, req.Spec, req.Command)
	}
	switch {
	case errors.Is(err, errNotPooled):
		return keeperReply{NotPooled: true}
	case err != nil:
		return keeperReply{Error: err.Error()}
	}
	return keeperReply{ID: sb.ID()}
}

// askersOwn reports whether spec means the same in the keeper as in the
// asker: no host environment passed (this process's is not the asker's),
// and every host path absolute (this process's directory is not the
// asker's either).
func askersOwn(spec backend.SpawnSpec) bool {
	if spec.IncludeOSEnv || spec.Workspace != "" && !filepath.IsAbs(spec.Workspace) {
		return false
	}
	for _, m := range spec.Mounts {
		if m.Source != "" && !filepath.IsAbs(m.Source) {
			return false
		}
	}
	for _, a := range spec.StaticAssets {
		if !filepath.IsAbs(a.Source) {
			return false
		}
	}
	return true
}

// peerOf is the process on the other end of c, which must be this user's.
func peerOf(c *net.UnixConn) (*procID, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	if int(cred.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("peer uid %d is not this user's", cred.Uid)
	}
	start, _, ok := procStart(int(cred.Pid))
	if !ok {
		return nil, errors.New("the peer is gone")
	}
	return &procID{Pid: int(cred.Pid), Start: start}, nil
}

// Keeper is the CLI's end of the pool keeper of a state root.
type Keeper struct{ dir, policy string }

// DialKeeper returns the keeper of b's state root, or nil when none runs
// (no socket: the CLI's default, at the cost of one stat). policy is the
// caller's policy file.
func (b *Backend) DialKeeper(policy string) *Keeper {
	dir := b.KeeperDir()
	if _, err := os.Lstat(keeperSocket(dir)); err != nil {
		return nil
	}
	return &Keeper{dir: dir, policy: policy}
}

func (k *Keeper) call(req keeperRequest, timeout time.Duration) (keeperReply, error) {
	req.Policy = k.policy
	var rep keeperReply
	c, err := net.DialTimeout("unix", keeperSocket(k.dir), time.Second)
	if err != nil {
		return rep, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return rep, err
	}
	if err := json.NewDecoder(c).Decode(&rep); err != nil {
		return rep, fmt.Errorf("the pool keeper did not answer: %w", err)
	}
	return rep, nil
}

// Spawn asks the keeper for a sandbox of spec running command's kind
// (detach: for run -d): its id, or "" when none of its kind is kept ready
// or the keeper cannot be reached — then the caller spawns it cold.
func (k *Keeper) Spawn(spec backend.SpawnSpec, command []string, detach bool) string {
	rep, err := k.call(keeperRequest{Op: "spawn", Spec: spec, Command: command, Detach: detach}, 30*time.Second)
	if err != nil || rep.Error != "" || rep.NotPooled {
		return ""
	}
	return rep.ID
}

// Keep asks the keeper to keep count sandboxes of spec's kind ready.
func (k *Keeper) Keep(spec backend.SpawnSpec, count int) error {
	rep, err := k.call(keeperRequest{Op: "keep", Spec: spec, Count: count}, 2*time.Minute)
	if err != nil {
		return err
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	return nil
}

// Kinds lists what the keeper keeps ready.
func (k *Keeper) Kinds() ([]PoolKind, error) {
	rep, err := k.call(keeperRequest{Op: "list"}, 10*time.Second)
	return rep.Kinds, err
}

// Stop stops the keeper and waits until it has removed its sandboxes
// (its lock released), at most wait.
func (k *Keeper) Stop(wait time.Duration) error {
	if _, err := k.call(keeperRequest{Op: "stop"}, 10*time.Second); err != nil && !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(k.dir, "keeper.lock"), os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer lock.Close()
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			unix.Flock(int(lock.Fd()), unix.LOCK_UN)
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the pool keeper did not stop")
		}
	}
}

// KeeperRunning reports whether a keeper holds the state root's lock.
func (b *Backend) KeeperRunning() bool {
	lock, err := os.OpenFile(filepath.Join(b.KeeperDir(), "keeper.lock"), os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer lock.Close()
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		return false
	}
	return true
}
