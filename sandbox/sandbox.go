package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	cgmanager "github.com/opencontainers/cgroups/manager"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/backendkit"
	"github.com/slopbox/slopbox/internal/netd"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// Name is the backend's registry name.
const Name = "sandbox"

func init() {
	backend.Register(Name, func() (backend.Backend, error) { return New(image.DefaultRoot()) })
}

// Backend creates and finds sandboxes. Its state lives beside the image
// store, under <root>/c/<id>/.
type Backend struct {
	root  string
	store *image.Store
	state stateRoot

	binOnce sync.Once
	bins    binaries
	binErr  error

	seccomp seccompCache
	pool    pool

	mu       sync.Mutex
	spawners map[string]*spawner // by id mapping variant
	// netd is the connection to the user's network helper, and
	// netSpawners (rootless) the spawn servers in its user namespace.
	netd        *netd.Client
	netSpawners map[string]*spawner
	// netdMu and netSpawnMu: one caller at a time connects to the helper
	// and makes a joined spawn server (each replaces, and closes, what it
	// finds stale).
	netdMu, netSpawnMu sync.Mutex
	warming            sync.WaitGroup // Prewarm's start, which Close waits for

	// slices (root only) gives each sandbox host ids of its own
	// (slices.go); nil rootless.
	slices *sliceRange

	// initEnv is PID 1's environment. HOME is set so that libcontainer
	// does not look it up in the image's /etc/passwd (a FIFO there would
	// hang the start).
	initEnv []string
	// startDeadline bounds the start of a PID 1 (0: the server's default).
	startDeadline time.Duration
	// spawnHelper: see UseSpawnHelper.
	spawnHelper string
	// claimedHook, for tests, runs as soon as a sandbox serves commands.
	claimedHook func(*record)
}

// spawnerFor returns the spawn server that runs program ("" for this
// binary).
func (b *Backend) spawnerFor(program string) *spawner {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.spawners == nil {
		b.spawners = map[string]*spawner{}
	}
	if b.spawners[program] == nil {
		b.spawners[program] = &spawner{program: program}
	}
	return b.spawners[program]
}

// Close stops the sandboxes kept ready (pool.go) and releases the
// Backend's spawn helpers. Spawned sandboxes keep running; the Backend
// starts new helpers if it is used again.
func (b *Backend) Close() {
	b.warming.Wait() // a server Prewarm starts is stopped below, not left behind
	if e := b.takeReserved(); e != nil {
		b.removeEntryDir(e) // its slice and its server too
	}
	b.pool.drain(b)
	b.mu.Lock()
	defer b.mu.Unlock()
	for program, s := range b.spawners {
		s.close()
		delete(b.spawners, program) // a closed one starts no server again
	}
	for program, s := range b.netSpawners {
		s.close()
		delete(b.netSpawners, program)
	}
	if b.netd != nil {
		b.netd.Close()
		b.netd = nil
	}
}

var _ backend.Backend = (*Backend)(nil)

// New opens the backend over the store at root (image.DefaultRoot() for the
// user's default).
func New(root string, opts ...image.Option) (*Backend, error) {
	if !reexec.Initialized() {
		return nil, errors.New("sandbox: call sandbox.Init() first thing in main (and in TestMain): slopbox re-executes the program for its user-namespace and spawn helpers")
	}
	if msg := buildProblem(); msg != "" {
		return nil, errors.New(msg)
	}
	if root == "" {
		return nil, errors.New("sandbox: no store directory given (image.DefaultRoot() is the user's default)")
	}
	// Absolute: helpers (the port forwarder) run in a sandbox's directory
	// and are given the root.
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	s, err := image.Open(root, opts...)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		root:    root,
		store:   s,
		state:   stateRoot{dir: filepath.Join(root, "c")},
		seccomp: seccompCache{dir: filepath.Join(root, "cache")},
		initEnv: []string{"_SLOPBOX_AGENT=1", "HOME=/"},
	}
	if os.Geteuid() == 0 && !userns.Inside() {
		b.slices = rootSlices(defaultSliceDir, s.Mapping())
		// A sandbox's own server runs as its slice's root, not the
		// store's: it passes through the store's directory (not
		// listable) to its binary in bin/ and its directory in c/, and
		// mounts the layers' directory, idmapped, over layers/. So can
		// any local user, by name: nothing else below it is for others
		// (TestStoreRootOpaqueToOtherUsers); the seccomp cache was.
		if err := os.Chmod(root, 0o711); err != nil {
			return nil, err
		}
		if err := os.Chmod(b.seccomp.dir, 0o700); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return b, nil
}

// sliceSpawner (root) returns a spawn server of its own for the sandbox
// id, which holds slice k: root of a user namespace that maps the slice and is
// owned by its first id. It serves that one sandbox; the caller closes it
// once the sandbox is claimed or discarded.
func (b *Backend) sliceSpawner(program string, k int, id string) *spawner {
	m := b.slices.mapping(k)
	return &spawner{program: program, mapping: &m, slice: k, marker: spawnServerMarker + id}
}

// Name returns "sandbox".
func (*Backend) Name() string { return Name }

// Store is the image store sandboxes are created from.
func (b *Backend) Store() *image.Store { return b.store }

// Root is the state root the backend was opened on.
func (b *Backend) Root() string { return b.root }

// SpawnCommand is Spawn that also records the command a docker-style `run`
// starts, for `ps`.
func (b *Backend) SpawnCommand(ctx context.Context, spec backend.SpawnSpec, command []string) (*Sandbox, error) {
	return b.spawn(ctx, spec, command, false, false)
}

// SpawnForeground is SpawnCommand for a caller that runs the command
// attached and then stops or removes the sandbox (`slopbox run` without
// -d, `env run`): the sandbox is recorded as the calling process's, so
// that if this process is killed first, prune removes the sandbox (its
// PID 1, network helper and published ports) although it still runs.
// Nothing needs releasing when the caller is done: a stopped sandbox is
// prune's whoever owned it, a removed one is gone, a kept one is never
// owned, and a start clears the owner.
func (b *Backend) SpawnForeground(ctx context.Context, spec backend.SpawnSpec, command []string) (*Sandbox, error) {
	return b.spawn(ctx, spec, command, false, true)
}

// Create records a sandbox without starting it (`docker create`); Start
// starts it and runs command detached.
func (b *Backend) Create(ctx context.Context, spec backend.SpawnSpec, command []string) (*Sandbox, error) {
	return b.spawn(ctx, spec, command, true, false)
}

// Open returns the sandbox named ref (name, id or id prefix), which may have
// been created by another process.
func (b *Backend) Open(ref string) (*Sandbox, error) {
	rec, err := b.state.find(ref)
	if err != nil {
		return nil, err
	}
	return b.sandbox(rec), nil
}

func (b *Backend) sandbox(rec *record) *Sandbox {
	return &Sandbox{b: b, rec: rec, dir: b.state.sandboxDir(rec.ID)}
}

// Info describes a sandbox for `ps` and `inspect`.
type Info struct {
	ID        string    `json:"Id"`
	Name      string    `json:"Name"`
	Image     string    `json:"Image"`
	ImageID   string    `json:"ImageId"`
	Command   []string  `json:"Command,omitempty"`
	Created   time.Time `json:"Created"`
	Running   bool      `json:"Running"`
	Pid       int       `json:"Pid"`
	LastExec  time.Time `json:"LastExec"`
	Workspace string    `json:"Workspace,omitempty"`
	Workdir   string    `json:"Workdir"`
	User      string    `json:"User"`
	Network   string    `json:"Network"`
	// Networks are its user-defined networks (the first is its Docker
	// NetworkMode), with their interfaces while it runs.
	Networks []NetworkInfo `json:"Networks,omitempty"`
	// Ports are the published ports, host ports as bound at the last
	// start (as asked for before the first).
	Ports          []backend.PortMapping `json:"Ports,omitempty"`
	Limits         backend.Limits        `json:"Limits"`
	Unenforced     []string              `json:"UnenforcedLimits,omitempty"`
	Labels         map[string]string     `json:"Labels,omitempty"`
	StateDir       string                `json:"StateDir"`
	ReadonlyRootfs bool                  `json:"ReadonlyRootfs,omitempty"`
	AutoRemove     bool                  `json:"AutoRemove,omitempty"`
	// OOMKills counts the processes the kernel's OOM killer ended in the
	// sandbox (its memory cgroup's count; 0 without a memory limit).
	OOMKills uint64 `json:"OOMKills"`
	// CapAdd, CapDrop and SeccompProfile show how the sandbox departs
	// from the defaults ("default", or "unconfined").
	CapAdd         []string `json:"CapAdd,omitempty"`
	CapDrop        []string `json:"CapDrop,omitempty"`
	SeccompProfile string   `json:"SeccompProfile"`
	// ExitCode and FinishedAt: how and when the main command (run -d,
	// start) last exited; zero before that.
	ExitCode   int       `json:"ExitCode"`
	FinishedAt time.Time `json:"FinishedAt,omitzero"`
	Tty        bool      `json:"Tty,omitempty"`
	Paused     bool      `json:"Paused,omitempty"`
	OpenStdin  bool      `json:"OpenStdin,omitempty"`
	// Broken says why the sandbox's state cannot be read; `rm -f` and
	// `prune` remove it (and kill what it still runs).
	Broken string `json:"Broken,omitempty"`
	// Hostname, Env (the main command's environment: the image's, then
	// the sandbox's own) and BindMounts (the host directories mounted,
	// sources resolved) are for the Engine API's inspect (slopbox serve).
	Hostname   string            `json:"-"`
	Env        map[string]string `json:"-"`
	BindMounts []backend.Mount   `json:"-"`
}

func (b *Backend) info(rec *record) Info {
	dir := b.state.sandboxDir(rec.ID)
	if rec.Broken != "" {
		fi, _ := os.Stat(dir)
		var t time.Time
		if fi != nil {
			t = fi.ModTime()
		}
		return Info{ID: rec.ID, Name: rec.Name, Created: t, LastExec: t, StateDir: dir, Broken: rec.Broken}
	}
	last := rec.Created
	if fi, err := os.Stat(filepath.Join(dir, socketFile)); err == nil && fi.ModTime().After(last) {
		last = fi.ModTime()
	}
	i := Info{
		ID: rec.ID, Name: rec.Name, Image: rec.Image, ImageID: rec.ImageID, Command: rec.Command,
		Created: rec.Created, Running: rec.Pid > 0 && rec.running(), Pid: rec.Pid, LastExec: last,
		Workspace: rec.Workspace, Workdir: rec.Workdir, User: fmt.Sprintf("%d:%d", rec.User.UID, rec.User.GID),
		Network: rec.Network, Networks: networkInfos(rec, rec.Pid > 0 && rec.running()), Ports: rec.Bound, Limits: rec.Limits, Unenforced: rec.Unenforced, Labels: rec.Labels, StateDir: dir,
		ReadonlyRootfs: rec.ReadOnly, OOMKills: oomKills(rec), AutoRemove: rec.AutoRemove,
		CapAdd: rec.CapAdd, CapDrop: rec.CapDrop, SeccompProfile: seccompProfileName(rec),
		Tty: rec.Detach.TTY, OpenStdin: rec.Detach.OpenStdin,
		Hostname: cmp.Or(rec.Hostname, hostname(rec.Name)), Env: rec.Env,
	}
	for _, m := range rec.Mounts {
		if m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") {
			bm := backend.Mount{Source: m.Source, Target: m.Destination, ReadOnly: slices.Contains(m.Options, "ro")}
			bm.Volume, _ = b.VolumeOfMount(m.Source)
			i.BindMounts = append(i.BindMounts, bm)
		}
	}
	if len(rec.Nets) > 0 {
		i.Network = rec.Nets[0].Name // Docker's NetworkMode
	}
	if rec.Reserved {
		i.Pid = 0 // created: nothing runs yet
	}
	if i.Ports == nil {
		i.Ports = rec.Ports
	}
	i.Paused = rec.Paused && i.Running
	exitInfo(dir, &i)
	return i
}

func seccompProfileName(rec *record) string {
	if rec.Unconfined {
		return "unconfined"
	}
	return "default"
}

// oomKills reads the OOM kill count of rec's memory cgroup, if any.
func oomKills(rec *record) uint64 {
	if rec.Limits.MemoryBytes == 0 {
		return 0
	}
	m, err := cgroupManager(rec)
	if err != nil || m == nil {
		return 0
	}
	n, _ := m.OOMKillCount()
	return n
}

// List returns every sandbox of this user, oldest first, then the broken
// ones (see Info.Broken).
func (b *Backend) List() ([]Info, error) {
	recs, broken, err := b.state.list()
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(recs)+len(broken))
	for _, r := range append(recs, broken...) {
		out = append(out, b.info(r))
	}
	return out, nil
}

// Prune removes every sandbox whose init is gone (crashed, killed, or left
// by a slopbox process that was killed), every one a foreground run's
// slopbox process left running when it was killed, and half-created
// state; with all, running ones too. It returns the removed ids.
func (b *Backend) Prune(all bool) ([]string, error) { return b.PruneMatching(all, nil) }

// PruneMatching is Prune limited to the sandboxes match takes (docker
// container prune's filters); with a match, half-created state, which has
// no labels or times to match, is left for a prune without one.
func (b *Backend) PruneMatching(all bool, match func(Info) bool) ([]string, error) {
	recs, broken, err := b.state.list()
	if err != nil {
		return nil, err
	}
	if match != nil {
		broken = nil
	}
	var removed []string
	var errs []error
	for _, r := range recs {
		if r.Pid > 0 && r.running() && !all && !r.orphaned() {
			continue
		}
		if match != nil && !match(b.info(r)) {
			continue
		}
		if err := b.destroy(r); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, r.ID)
	}
	if err := b.reapStalePool(); err != nil {
		errs = append(errs, err)
	}
	for _, r := range broken {
		// Abandoned by a create that died half-way, or with a truncated or
		// corrupt state file: destroy finds and kills its processes first.
		if r.Broken == noStateYet && recentlyCreated(b.state.sandboxDir(r.ID)) {
			continue // a create in progress
		}
		if err := b.destroy(r); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, r.ID)
	}
	b.state.pruneNames()
	if b.slices != nil {
		// Slices whose sandbox's directory is gone: a slopbox killed
		// before it released one.
		if _, err := b.slices.sweep(); err != nil {
			errs = append(errs, fmt.Errorf("free id slices: %w", err))
		}
	}
	sort.Strings(removed)
	return removed, errors.Join(errs...)
}

// destroy kills PID 1, removes the cgroup and the state directory. For a
// record without a pid (never started, or broken) it looks for the
// sandbox's processes first: nothing it started may outlive its state.
func (b *Backend) destroy(rec *record) error {
	var errs []error
	// A supervisor's restart under way (it holds the lock while it
	// starts the sandbox) is done first, and what it started is read
	// again: its PID 1 must not outlive the removal. One waiting out its
	// delay is the monitor killed below.
	if unlock, err := lockSupervision(b.state.sandboxDir(rec.ID), rec.Name); err == nil {
		defer unlock()
		if cur, err := b.state.read(rec.ID); err == nil {
			rec = cur
		}
	}
	// The monitor first: it must not write into the directory being removed.
	if err := killMonitor(b.state.sandboxDir(rec.ID)); err != nil {
		errs = append(errs, err)
	}
	var killErr error
	if rec.Pid > 0 {
		killErr = rec.killInit(5 * time.Second)
	} else {
		killErr = killStragglers(rec.ID, b.state.sandboxDir(rec.ID))
	}
	if err := killSupervisorHelpers(b.state.sandboxDir(rec.ID)); err != nil {
		errs = append(errs, err)
	}
	if err := killHelpers(rec, b.state.sandboxDir(rec.ID)); err != nil {
		errs = append(errs, err)
	}
	if killErr != nil {
		// What still runs keeps its state, and its id slice: the error
		// says so, and rm -f or prune tries again.
		return errors.Join(append(errs, killErr)...)
	}
	if len(rec.Cgroups) == 0 && (rec.Broken != "" || rec.Limits.MemoryBytes > 0 || rec.Limits.CPUs > 0 || rec.Limits.Pids > 0) {
		// The state lost its cgroup paths (broken), or never got them (a
		// slopbox killed between making the cgroup and recording it): they
		// follow from the id.
		cg := &cgroups.Cgroup{Name: rec.ID, Parent: cgroupParent, Resources: &cgroups.Resources{SkipDevices: true}, Rootless: os.Geteuid() != 0}
		if m, err := cgmanager.New(cg); err == nil {
			rec.Cgroups = m.GetPaths()
		}
	}
	// Destroy empties the map it was given: keep the paths.
	paths := maps.Clone(rec.Cgroups)
	if m, err := cgroupManager(rec); err != nil {
		errs = append(errs, err)
	} else if m != nil {
		if err := m.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
		// The shared parent goes with the last sandbox (rmdir fails while
		// another sandbox still has a cgroup in it).
		for _, p := range paths {
			if parent := filepath.Dir(p); filepath.Base(parent) == cgroupParent {
				os.Remove(parent)
			}
		}
	}
	if err := b.removeSandboxDir(rec); err != nil {
		errs = append(errs, err)
	} else {
		if rec.Name != "" {
			b.state.releaseName(rec.Name, rec.ID)
		}
		if b.slices != nil {
			if err := b.slices.releaseID(b.state.dir, rec.ID); err != nil {
				errs = append(errs, fmt.Errorf("free its id slice: %w", err))
			}
		}
		if err := b.store.Release(rec.ID); err != nil {
			errs = append(errs, err)
		}
		if rec.AutoRemove { // its anonymous volumes go with it, as docker run --rm's
			if err := b.dropAnonymousVolumes(rec); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeSandboxDir removes rec's directory. A removal that finds the
// directory filled again while it emptied it met a process its record does
// not name, still writing there: the sandbox's own spawn server (as root)
// finishing the request of a create or start that was killed half-way, or
// a monitor whose starter was killed before it recorded it (run 33 of
// docs/testing.md: prune's "directory not empty" right after a run killed
// mid-create). Those are found by their marks and command lines, killed,
// waited for, and the removal is tried again, a few times: rootless, the
// writer can be the user's one spawn server, which is not killed, ending
// the request within moments. What then still fails names what the
// directory holds.
func (b *Backend) removeSandboxDir(rec *record) error {
	dir := b.state.sandboxDir(rec.ID)
	err := b.removeDir(dir)
	if err == nil || !errors.Is(err, syscall.ENOTEMPTY) {
		return err
	}
	kerr := errors.Join(killStragglers(rec.ID, dir), waitKilled(rec.ID, killMonitorsOf(b.root, rec.ID)))
	for try := 0; ; try++ {
		err = b.removeDir(dir)
		if err == nil || !errors.Is(err, syscall.ENOTEMPTY) || try == 4 {
			break
		}
		time.Sleep(time.Duration(50<<try) * time.Millisecond)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("%w (it still holds %s)", err, dirEvidence(dir)), kerr)
	}
	// What did not die keeps its id slice: the caller frees it only
	// without an error.
	return kerr
}

// dirEvidence names what dir holds (up to 8 entries, a directory's with a
// slash), for an error that it could not be removed.
func dirEvidence(dir string) string {
	f, err := os.Open(dir)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	ents, _ := f.ReadDir(9)
	if len(ents) == 0 {
		return "nothing now"
	}
	var names []string
	for i, e := range ents {
		if i == 8 {
			names = append(names, "…")
			break
		}
		n := strconv.Quote(e.Name())
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// removeDir deletes a sandbox directory. Its upper layer holds files of the
// subordinate ids, which only root of the user namespace may delete: the
// spawn server does it.
func (b *Backend) removeDir(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if os.Geteuid() == 0 {
		if err := unmountStale(dir); err != nil {
			return err
		}
		return os.RemoveAll(dir)
	}
	if userns.Inside() {
		return os.RemoveAll(dir)
	}
	bins, err := b.binaries()
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	req := &spawnd.Request{Op: spawnd.OpRemove, Dir: dir}
	if _, err := b.spawnerFor(bins.server).call(context.Background(), b.store.Mapping(), req, nil, true); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// Sandbox is one sandbox. Its methods are safe for concurrent use; one
// command runs at a time per Sandbox value.
type Sandbox struct {
	b   *Backend
	rec *record
	dir string

	slot backendkit.Slot[*proc]

	cgOnce sync.Once
	cg     cgroups.Manager // nil without limits
}

// cgroup is the sandbox's cgroup manager (nil when it has no cgroup),
// attached once per Sandbox value rather than at every exec.
func (s *Sandbox) cgroup() cgroups.Manager {
	s.cgOnce.Do(func() { s.cg, _ = cgroupManager(s.rec) })
	return s.cg
}

var _ backend.Sandbox = (*Sandbox)(nil)

// ID returns the sandbox id.
func (s *Sandbox) ID() string { return s.rec.ID }

// Name returns the sandbox name.
func (s *Sandbox) Name() string { return s.rec.Name }

// Workdir is where the workspace appears inside.
func (s *Sandbox) Workdir() string { return s.rec.Workdir }

// Info describes the sandbox.
func (s *Sandbox) Info() Info { return s.b.info(s.rec) }

// Unenforced lists the limits this host could not enforce.
func (s *Sandbox) Unenforced() []string { return s.rec.Unenforced }

// proc is one running command.
type proc struct {
	conn     *agentConn
	exited   chan struct{}
	killCh   chan struct{}
	killOnce sync.Once
	status   syscall.WaitStatus
	lost     bool // the connection to PID 1 broke before the exit status came
	failed   *backend.Result
	p        *backendkit.Proc
	oomBase  uint64
}

// Kill and Done make proc a backendkit.Command.
func (p *proc) Kill()                 { p.kill() }
func (p *proc) Done() <-chan struct{} { return p.exited }

func (p *proc) kill() { p.killOnce.Do(func() { close(p.killCh) }) }

func (p *proc) exitCode() int {
	switch {
	case p.lost:
		return backend.ExitSignalBase + int(syscall.SIGKILL)
	case p.status.Signaled():
		return backend.ExitSignalBase + int(p.status.Signal())
	}
	return p.status.ExitStatus()
}

// start prepares and starts one command.
func (s *Sandbox) start(ctx context.Context, req backend.ExecRequest) (*proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.slot.Start(func() (*proc, error) { return s.startLocked(req) })
}

// command resolves a request into what PID 1 runs; setup reports whether
// the entry script wraps it.
func (s *Sandbox) command(req backend.ExecRequest) (cmd *execRequest, setup bool, err error) {
	rec := s.rec
	if len(req.Argv) == 0 && req.Shell == "" {
		return nil, false, errors.New("exec: empty command (set Argv or Shell)")
	}
	if err := req.Validate(); err != nil {
		return nil, false, fmt.Errorf("exec: %w", err)
	}
	who := rec.User
	if req.User != "" {
		if who, err = resolveUser(rec.Layers, req.User); err == nil {
			who.Groups = withGroups(who.Groups, rec.GroupAdd)
			err = checkMapped(who, s.b.store.Mapping())
		}
		if err != nil {
			return nil, false, fmt.Errorf("exec: %w", err)
		}
	}
	cwd := rec.Cwd
	if req.Cwd != "" {
		cwd = req.Cwd
		if !path.IsAbs(cwd) {
			cwd = path.Join(rec.Workdir, cwd)
		}
	}
	setup = !rec.NoSetup && !req.NoSetup
	var argv []string
	switch {
	case setup:
		command := req.Shell
		if len(req.Argv) > 0 {
			command = backend.ShellQuote(req.Argv)
		}
		// The entry script's exact bytes run as `sh -c`, with $0 named
		// after it: nothing is written into the workspace or the image.
		argv = []string{"/bin/sh", "-c", string(backend.EntryScript(rec.Setup, command)), backend.EntryScriptName}
	case len(req.Argv) > 0:
		argv = req.Argv
	default:
		argv = []string{"/bin/sh", "-c", req.Shell}
	}
	return &execRequest{argv: argv, env: backend.MergeEnv(false, rec.Env, req.Env), cwd: cwd, makeCwd: req.Cwd == "", uid: who.UID, gid: who.GID, groups: who.Groups}, setup, nil
}

// dial connects to the sandbox's PID 1.
func (s *Sandbox) dial() (*agentConn, error) {
	if s.rec.Broken != "" {
		ref := cmp.Or(s.rec.Name, s.rec.ID)
		return nil, fmt.Errorf("exec: sandbox %s is broken (%s): remove it with `slopbox rm -f %s`", ref, s.rec.Broken, ref)
	}
	if s.rec.Reserved {
		return nil, fmt.Errorf("exec: sandbox %s is not running: it is created; start it with `slopbox start %s`", s.rec.Name, s.rec.Name)
	}
	if s.Paused() {
		return nil, fmt.Errorf("exec: sandbox %s %w: unpause it first (`slopbox unpause %s`)", s.rec.Name, ErrPaused, s.rec.Name)
	}
	conn, err := dialAgent(filepath.Join(s.dir, socketFile))
	if err != nil {
		if !s.rec.alive() {
			return nil, fmt.Errorf("exec: sandbox %s is not running (start it with `slopbox start %s`, or remove it with `slopbox rm %s`)", s.rec.Name, s.rec.Name, s.rec.Name)
		}
		return nil, fmt.Errorf("exec: %w", err)
	}
	return conn, nil
}

// startLocked starts req's command in the sandbox, with the slot held.
// A command PID 1 cannot exec gives a proc that has exited with the
// failed result.
func (s *Sandbox) startLocked(req backend.ExecRequest) (*proc, error) {
	rec := s.rec
	cmd, setup, err := s.command(req)
	if err != nil {
		return nil, err
	}
	conn, err := s.dial()
	if err != nil {
		return nil, err
	}
	pipes, err := openStdio(conn, req)
	if err != nil {
		return nil, err
	}
	p := &proc{conn: conn, exited: make(chan struct{}), killCh: make(chan struct{})}
	if m := s.cgroup(); m != nil {
		p.oomBase, _ = m.OOMKillCount()
	}
	var cg *execCgroup
	if req.Timeout > 0 {
		if cg = s.newExecCgroup(); cg != nil {
			cmd.cgroupProcs = cg.procs
		}
	}
	started := time.Now()
	_, execErr, err := conn.start(cmd, pipes.stdinR, pipes.outW, pipes.errW)
	cg.started()
	pipes.stdinR.Close()
	pipes.outW.Close()
	pipes.errW.Close()
	if err == nil && execErr != nil {
		var ee *execError
		switch {
		case !errors.As(execErr, &ee), ee.cwd:
			err = fmt.Errorf("exec: %w", execErr)
		default:
			p.failed = backendkit.FailedResult(ee.code, ee.msg, rec.Unenforced)
		}
	}
	if err != nil || p.failed != nil {
		cg.release(true) // it joined, then failed to exec
		conn.close()
		pipes.outR.Close()
		pipes.errR.Close()
		if pipes.stdinW != nil {
			pipes.stdinW.Close()
		}
		if err != nil {
			return nil, err
		}
		close(p.exited)
		return p, nil
	}
	touch(filepath.Join(s.dir, socketFile))
	var killed atomic.Bool
	go p.awaitExit(cg, &killed)
	p.p = &backendkit.Proc{
		Stdout: pipes.outR, Stderr: pipes.errR, StdinW: pipes.stdinW, Stdin: req.Stdin,
		Setup: setup, Limit: req.OutputLimit, Timeout: req.Timeout, Started: started,
		Exited: p.exited, KillReq: p.killCh,
		KillTree: func() {
			killed.Store(true)
			cg.kill()
			conn.kill(syscall.SIGKILL)
		},
		ExitCode:   p.exitCode,
		Unenforced: rec.Unenforced,
	}
	return p, nil
}

// execStdio holds both ends of a command's stdio pipes: the command is
// given stdinR, outW and errW.
type execStdio struct {
	outR, outW     *os.File
	errR, errW     *os.File
	stdinR, stdinW *os.File // stdinW nil: stdinR is /dev/null
}

// openStdio opens the pipes of req's command: its stdout and stderr, and
// a stdin pipe when req has Stdin (else /dev/null). On failure it closes
// conn, then what it opened.
func openStdio(conn *agentConn, req backend.ExecRequest) (execStdio, error) {
	var pipes execStdio
	var err error
	pipes.outR, pipes.outW, err = backendkit.Pipe()
	if err != nil {
		conn.close()
		return execStdio{}, err
	}
	pipes.errR, pipes.errW, err = backendkit.Pipe()
	if err != nil {
		conn.close()
		pipes.outR.Close()
		pipes.outW.Close()
		return execStdio{}, err
	}
	if req.Stdin != nil {
		pipes.stdinR, pipes.stdinW, err = os.Pipe()
	} else {
		pipes.stdinR, err = os.Open(os.DevNull)
	}
	if err != nil {
		conn.close()
		pipes.outR.Close()
		pipes.outW.Close()
		pipes.errR.Close()
		pipes.errW.Close()
		return execStdio{}, err
	}
	return pipes, nil
}

// awaitExit waits for the exit status of p, the next reply on its
// connection (a broken connection means the sandbox itself went away),
// then releases cg (waiting for it to empty when the command was
// killed) and marks p exited.
func (p *proc) awaitExit(cg *execCgroup, killed *atomic.Bool) {
	typ, val, err := p.conn.reply(0)
	if err != nil || typ != replyExited {
		p.lost = true
	} else {
		p.status = syscall.WaitStatus(val)
	}
	cg.release(killed.Load())
	close(p.exited)
}

func touch(p string) {
	now := time.Now()
	os.Chtimes(p, now, now)
}

// wait collects the command's result.
func (s *Sandbox) wait(ctx context.Context, p *proc, buffered bool, emit func(backend.EventKind, string)) *backend.Result {
	if p.failed != nil {
		if emit != nil && p.failed.Stderr != "" {
			emit(backend.EventStderr, p.failed.Stderr)
		}
		res := *p.failed
		return &res
	}
	res := backendkit.Collect(ctx, p.p, buffered, emit)
	p.conn.close()
	if m := s.cgroup(); m != nil {
		if n, err := m.OOMKillCount(); err == nil && n > p.oomBase {
			res.OOMKilled = true
		}
	}
	touch(filepath.Join(s.dir, socketFile))
	return res
}

func (s *Sandbox) finish(p *proc, res *backend.Result) { s.slot.Finish(p, res.ExitCode, nil) }

// Exec runs one command to completion. A command that cannot be found or
// executed gives exit code 127 or 126 in the Result, not an error. When ctx
// is cancelled the command is killed and the partial Result is returned
// with the context's error.
func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (*backend.Result, error) {
	return s.runner().Exec(ctx, req)
}

// Stream runs one command and sends output chunks as they are read, then
// one finished event. The caller must drain the channel or cancel ctx.
func (s *Sandbox) Stream(ctx context.Context, req backend.ExecRequest) (<-chan backend.Event, error) {
	return s.runner().Stream(ctx, req)
}

func (s *Sandbox) runner() backendkit.Runner[*proc] {
	return backendkit.Runner[*proc]{What: "exec", Start: s.start, Wait: s.wait, Finish: s.finish}
}

// Poll reports whether a command of this Sandbox value runs, else the last
// exit code (nil before the first command).
func (s *Sandbox) Poll() (bool, *int) { return s.slot.Poll() }

// Kill stops the running command's whole session and waits (bounded) until
// its main process is gone.
func (s *Sandbox) Kill() error { return s.slot.Kill() }

// Cleanup kills everything in the sandbox and removes its state, cgroup and
// root filesystem, unless the sandbox was spawned with Keep (then it stays
// for inspection; `slopbox rm` removes it). It is idempotent.
func (s *Sandbox) Cleanup() error {
	if !s.slot.Close() {
		return nil
	}
	if s.rec.Keep {
		return nil
	}
	return s.Remove()
}

// Remove kills and removes the sandbox regardless of Keep.
func (s *Sandbox) Remove() error {
	s.slot.Close()
	if err := s.b.destroy(s.rec); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", s.rec.Name, err)
	}
	return nil
}

// Running reports whether the sandbox's init still runs.
func (s *Sandbox) Running() bool { return s.rec.running() }

// Stop kills the sandbox's init (and so every process in it) but keeps its
// state, like `docker stop`; a sandbox made with AutoRemove is removed.
func (s *Sandbox) Stop() error {
	if s.rec.Reserved {
		return nil // created: nothing runs, and PID 1 stays ready for start
	}
	if err := s.rec.killInit(5 * time.Second); err != nil {
		return err
	}
	s.awaitExitRecord()
	if err := errors.Join(killSupervisorHelpers(s.dir), killHelpers(s.rec, s.dir)); err != nil {
		return err
	}
	if s.rec.AutoRemove {
		return s.Remove()
	}
	return nil
}

// DefaultStopGrace is how long docker stop waits after the stop signal
// before it kills (docker stop -t, StopTimeout).
const DefaultStopGrace = 10 * time.Second

// StopGrace is docker stop: sig (SIGTERM when 0) goes to the main command,
// and once it has ended, or grace has passed with the sandbox still
// running, Stop kills every process that is left. A sandbox with no main
// command running, or a grace of 0, is stopped at once. A stop signal
// the monitor does not forward (RTMIN+3, PWR: see Signal) is SIGTERM
// with the same grace, not a kill at once.
func (s *Sandbox) StopGrace(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	if sig == 0 || !slices.Contains(forwardedSignals, os.Signal(sig)) && sig != syscall.SIGKILL {
		sig = syscall.SIGTERM
	}
	if grace > 0 && sig != syscall.SIGKILL && s.Running() && s.Signal(sig) == nil {
		ctx, cancel := context.WithTimeout(ctx, grace)
		defer cancel()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		// Its monitor stops the sandbox once the main command is done.
		for s.Running() && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
		if !s.Running() {
			if _, err := os.Stat(s.dir); err != nil {
				return nil // removed with its command (AutoRemove)
			}
		}
	}
	return s.Stop()
}

// Start starts a created or stopped sandbox (its files are kept) and runs
// its recorded command, if any, detached.
func (s *Sandbox) Start(ctx context.Context) error {
	return s.StartAttached(ctx, AttachedStart{})
}

// StartAttached is Start for a client attached before it (see
// AttachedStart).
func (s *Sandbox) StartAttached(ctx context.Context, a AttachedStart) error {
	if s.rec.Paused && !s.rec.alive() {
		s.rec.Paused = false // stopped while paused
	}
	switch {
	case s.rec.Reserved && s.rec.alive():
		// Created with its PID 1 ready: its ports are bound now, and
		// only the command is left to run. If that fails, it is created
		// again, as it was.
		if err := s.b.publish(s.rec, s.rec.Pid); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		s.rec.Reserved = false
		err := s.b.state.write(s.rec)
		if err == nil && len(s.rec.Command) > 0 {
			err = s.runDetached(ctx, backend.ExecRequest{Argv: s.rec.Command}, s.rec.Detach, a)
		}
		if err != nil {
			killPorts(s.dir)
			s.rec.Reserved, s.rec.Bound = true, nil
			s.b.state.write(s.rec)
		}
		return err
	case s.rec.Pid > 0 && s.rec.running():
		return nil
	default:
		// PID 1 of a start that was killed half-way (see Starting).
		if err := s.rec.killInit(5 * time.Second); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		s.rec.Reserved = false
		s.rec.Owner = nil // this run is nobody's foreground run
		if err := s.b.start(ctx, s.rec); err != nil {
			return err
		}
	}
	if len(s.rec.Command) == 0 {
		return nil
	}
	err := s.runDetached(ctx, backend.ExecRequest{Argv: s.rec.Command}, s.rec.Detach, a)
	if err != nil {
		// Stopped again, as it was (docker's start of a command that
		// cannot run leaves the container exited, with 127 or 126): the
		// PID 1 this start made, its network helper and ports do not
		// outlive it, and its exit says why (125: slopbox's own failure).
		if kerr := s.rec.killInit(5 * time.Second); kerr != nil {
			err = errors.Join(err, kerr)
		}
		if kerr := killHelpers(s.rec, s.dir); kerr != nil {
			err = errors.Join(err, kerr)
		}
		code := 125
		if se := (*StartError)(nil); errors.As(err, &se) {
			code = se.Code
		}
		s.writeExit(code)
	}
	return err
}

// SetDetachOptions records how Start attaches the main command (docker
// create -t/-i).
func (s *Sandbox) SetDetachOptions(o DetachOptions) error {
	s.rec.Detach = o
	return s.b.state.write(s.rec)
}

// Attach runs a command with the caller's stdio: output goes to it, byte
// for byte, as it is written (the CLI's exec and run). The sandbox is
// handed the caller's pipes and sockets, never its files: a regular file
// or terminal is reached through a pipe (see callerStdio). There is no entry script. With detach it returns once the command
// has started and leaves it running. Otherwise it returns the exit code;
// ctx and req.Timeout kill the command's whole session. A command that
// cannot be started has its message on stderr and a shell's exit code
// (127 not found, 126 not executable).
func (s *Sandbox) Attach(ctx context.Context, req backend.ExecRequest, stdin, stdout, stderr *os.File, detach bool) (int, error) {
	code, err := s.AttachStrict(ctx, req, stdin, stdout, stderr, detach)
	var se *StartError
	if errors.As(err, &se) {
		fmt.Fprintln(stderr, se.Msg)
		return se.Code, nil
	}
	return code, err
}

// AttachStrict is Attach, but a command that cannot be started gives a
// *StartError (Docker's exec reports 126 for it, whatever the cause).
func (s *Sandbox) AttachStrict(ctx context.Context, req backend.ExecRequest, stdin, stdout, stderr *os.File, detach bool) (int, error) {
	req.NoSetup = true
	cmd, _, err := s.command(req)
	if err != nil {
		return 0, err
	}
	cmd.detach = detach
	io, err := newCallerStdio(stdin, stdout, stderr, detach)
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	defer io.finish()
	conn, err := s.dial()
	if err != nil {
		return 0, err
	}
	defer conn.close()
	touch(filepath.Join(s.dir, socketFile))
	var cg *execCgroup
	if req.Timeout > 0 && !detach {
		if cg = s.newExecCgroup(); cg != nil {
			cmd.cgroupProcs = cg.procs
		}
	}
	killed := false
	defer func() { cg.release(killed) }()
	_, execErr, err := conn.start(cmd, io.files[0], io.files[1], io.files[2])
	cg.started()
	io.handedOver()
	if err != nil {
		return 0, err
	}
	if execErr != nil {
		killed = true // it joined its cgroup, then failed to exec
		var ee *execError
		if errors.As(execErr, &ee) && !ee.cwd {
			return ee.code, &StartError{Code: ee.code, Msg: ee.msg}
		}
		return 0, fmt.Errorf("exec: %w", execErr)
	}
	if detach {
		return 0, nil
	}
	type reply struct {
		typ uint32
		val int32
		err error
	}
	done := make(chan reply, 1)
	go func() {
		typ, val, err := conn.reply(0)
		done <- reply{typ, val, err}
	}()
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var oomBase uint64
	if m := s.cgroup(); m != nil {
		oomBase, _ = m.OOMKillCount()
	}
	var r reply
	timedOut := false
	select {
	case r = <-done:
	case <-timeout:
		timedOut = true
	case <-ctx.Done():
	}
	if r.typ == 0 && r.err == nil {
		killed = true
		cg.kill()
		conn.kill(syscall.SIGKILL)
		select {
		case r = <-done:
		case <-time.After(backendkit.ReapMax):
			return -1, errors.New("exec: the command did not exit after SIGKILL")
		}
	}
	touch(filepath.Join(s.dir, socketFile))
	p := &proc{lost: r.err != nil || r.typ != replyExited, status: syscall.WaitStatus(r.val)}
	// A command killed by slopbox or the kernel says why, as docker's
	// "OOMKilled" does, rather than exiting 137 in silence.
	switch {
	case timedOut:
		fmt.Fprintf(stderr, "slopbox: the command timed out after %v and was killed\n", req.Timeout)
	case p.exitCode() != 0:
		// The OOM killer may have hit the command or one of its children.
		if m := s.cgroup(); m != nil {
			if n, err := m.OOMKillCount(); err == nil && n > oomBase {
				fmt.Fprintf(stderr, "slopbox: the command was killed by the kernel's OOM killer (memory limit %d bytes)\n", s.rec.Limits.MemoryBytes)
			}
		}
	}
	return p.exitCode(), nil
}
