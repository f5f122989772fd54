package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	systemdDbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/opencontainers/cgroups"
	cgmanager "github.com/opencontainers/cgroups/manager"
	cgsystemd "github.com/opencontainers/cgroups/systemd"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/image"
	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// agentPath is where the init is bind-mounted inside every sandbox. /dev is
// a fresh tmpfs, so nothing lands in the image's tree.
const agentPath = "/dev/.slopbox-init"

// Spawn creates and starts a sandbox from spec. On any error nothing is
// left behind: no process, no state directory.
func (b *Backend) Spawn(ctx context.Context, spec backend.SpawnSpec) (backend.Sandbox, error) {
	return b.spawn(ctx, spec, nil, false, false)
}

// spawn is Spawn; command, when set, is recorded for `ps` and `start`. With
// create the sandbox is only recorded, not started; with owned it is
// recorded as the calling process's (SpawnForeground).
func (b *Backend) spawn(ctx context.Context, spec backend.SpawnSpec, command []string, create, owned bool) (*Sandbox, error) {
	// As root each bind (the workspace, mounts, assets) goes to the spawn
	// server as a descriptor, at most spawnd.MaxFDs in one message: refused
	// here, before anything starts.
	if n := len(spec.Mounts) + len(spec.StaticAssets) + 1; os.Geteuid() == 0 && n > spawnd.MaxFDs {
		return nil, fmt.Errorf("spawn: %w", backend.InvalidValue("more than %d bind mounts: as root each is passed as a descriptor, and the kernel passes at most %d in one message; bind a common parent directory instead", spawnd.MaxFDs, spawnd.MaxFDs))
	}
	return b.spawnWith(ctx, spec, nil, command, create, owned)
}

// SpawnBuildStep starts a sandbox for one Dockerfile RUN over img, an image
// the builder has assembled (its layers need not be named in the store).
// It has the defaults of any sandbox, and no workspace or other host mount
// (refused); its users keep the store's id mapping (no nested namespace),
// so what it writes belongs to the image's ids; and the seccomp filter
// allows setuid and setgid modes (oci.WithSetidModes), which can only
// land in its upper directory, in the store. The caller stops it, takes
// UpperDir as the step's layer, and removes it.
func (b *Backend) SpawnBuildStep(ctx context.Context, spec backend.SpawnSpec, img *image.Image) (*Sandbox, error) {
	if !spec.NoWorkspaceMount || spec.Workspace != "" || len(spec.Mounts) > 0 || len(spec.StaticAssets) > 0 {
		return nil, errors.New("spawn: a build step has no workspace or host mounts")
	}
	if img == nil || len(img.Layers) == 0 {
		return nil, errors.New("spawn: a build step needs at least one layer")
	}
	return b.spawnWith(ctx, spec, img, nil, false, true)
}

// UpperDir is the directory that holds what the sandbox wrote to its root
// filesystem (overlay form). Read it only once the sandbox is stopped.
func (s *Sandbox) UpperDir() string { return filepath.Join(s.dir, "upper") }

// spawnWith is spawn; with build set (SpawnBuildStep), the sandbox runs
// over that image instead of spec.Image.
func (b *Backend) spawnWith(ctx context.Context, spec backend.SpawnSpec, build *image.Image, command []string, create, owned bool) (*Sandbox, error) {
	nw, err := b.checkSpawn(ctx, spec, build)
	if err != nil {
		return nil, err
	}
	ws, err := spawnWorkspace(spec)
	if err != nil {
		return nil, err
	}
	// What is left to check needs the image: the spawn server (rootless:
	// an exec, newuidmap and newgidmap) starts meanwhile.
	warmed := b.warmSpawner()
	defer warmed()
	r, err := b.resolveSpawn(ctx, spec, build, ws)
	if err != nil {
		return nil, err
	}
	rec := newRecord(spec, build != nil, command, ws, nw, r)
	if owned && !spec.Keep { // a kept sandbox outlives its caller, killed or not
		rec.Owner = callerOf(ctx)
	} else if !owned && len(command) > 0 && !create {
		// run -d: RunDetached follows. Not for a foreground run kept
		// with --keep: its command ran attached, and the sandbox lives on.
		rec.Starting = callerOf(ctx)
	}
	rec.markMounts(spec.Mounts)
	if !spec.DisableSetup {
		rec.Setup = backend.SetupCommands(spec.Setup, spec.Context)
	}
	if err := warmed(); err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	if create {
		if rec.Name == "" {
			rec.Name = "slopbox-" + rec.ID[:8]
		}
		// PID 1 starts now, from the warm pool when one is ready, so
		// that start has only the command to run (docker create + start
		// is docker-py's and the docker CLI's way to run).
		rec.Reserved = true
		if err := b.create(ctx, rec, r.mounts); err != nil {
			return nil, err
		}
		return b.sandbox(rec), nil
	}
	if err := b.create(ctx, rec, r.mounts); err != nil {
		return nil, err
	}
	return b.sandbox(rec), nil
}

// spawnNet is how a sandbox is networked, as spawnNetwork resolved and
// checked it from its spec.
type spawnNet struct {
	network string
	nets    []netAttach
	ports   []backend.PortMapping
	dns     *oci.DNS // nil: the host's
}

// checkSpawn checks what of spec can be checked before its image is read:
// the spec itself (its one Validate), its capabilities, and its network
// settings, which it returns resolved. It fails as spawnWith does.
func (b *Backend) checkSpawn(ctx context.Context, spec backend.SpawnSpec, build *image.Image) (spawnNet, error) {
	if err := ctx.Err(); err != nil {
		return spawnNet{}, err
	}
	if spec.Image == "" && build == nil {
		return spawnNet{}, errors.New("spawn: no image given")
	}
	if err := spec.Validate(); err != nil {
		return spawnNet{}, fmt.Errorf("spawn: %w", err)
	}
	for _, c := range append(slices.Clone(spec.CapAdd), spec.CapDrop...) {
		if _, err := oci.CapabilityName(c); err != nil {
			return spawnNet{}, fmt.Errorf("spawn: %w", err)
		}
	}
	return b.spawnNetwork(spec)
}

// spawnNetwork resolves spec's network mode and networks (the bridge's
// helper must be there to be used), and checks what goes with them: host
// loopback, hostname, published ports, extra hosts and DNS settings.
func (b *Backend) spawnNetwork(spec backend.SpawnSpec) (spawnNet, error) {
	network, nets, err := b.resolveNetworks(spec)
	if err != nil {
		return spawnNet{}, fmt.Errorf("spawn: %w", err)
	}
	if network == backend.NetworkBridge {
		if _, err := netHelper(); err != nil {
			return spawnNet{}, fmt.Errorf("spawn: %w", err)
		}
	} else if spec.AllowHostLoopback {
		return spawnNet{}, fmt.Errorf("spawn: %w", backend.InvalidValue("--allow-host-loopback is for --network bridge (with %s the host's loopback is %s)", network, map[bool]string{true: "shared", false: "out of reach"}[network == backend.NetworkHost]))
	}
	if spec.Hostname != "" && !oci.ValidHostname(spec.Hostname) {
		return spawnNet{}, fmt.Errorf("spawn: %w", backend.InvalidValue("invalid hostname %q: letters, digits, '-' and '.', at most 63, starting with a letter or digit", spec.Hostname))
	}
	ports, err := checkPorts(spec.Ports, network)
	if err != nil {
		return spawnNet{}, fmt.Errorf("spawn: %w", err)
	}
	for _, h := range spec.ExtraHosts {
		if _, err := oci.ParseHostEntry(h); err != nil {
			return spawnNet{}, fmt.Errorf("spawn: %w", backend.InvalidValue("%v", err))
		}
	}
	var dns *oci.DNS
	if len(spec.DNS)+len(spec.DNSSearch)+len(spec.DNSOptions) > 0 {
		d, err := oci.ParseDNS(spec.DNS, spec.DNSSearch, spec.DNSOptions)
		if err != nil {
			return spawnNet{}, fmt.Errorf("spawn: %w", backend.InvalidValue("%v", err))
		}
		dns = &d
	}
	return spawnNet{network: network, nets: nets, ports: ports, dns: dns}, nil
}

// spawnWorkspace is the host path of spec's workspace, as the kernel
// opened it, or "" when there is none (NoWorkspaceMount, which is then
// required).
func spawnWorkspace(spec backend.SpawnSpec) (string, error) {
	ws := spec.Workspace
	if ws != "" {
		abs, err := filepath.Abs(ws)
		if err == nil {
			// Opened as a mount source is, no symlink followed (an
			// earlier sandbox may have planted one where this one's
			// workspace is named), and known by the path the kernel
			// opened: mount sources are compared and reopened by it.
			abs, err = workspacePath(abs)
		}
		if err != nil {
			return "", fmt.Errorf("spawn: workspace: %w", err)
		}
		ws = abs
	} else if !spec.NoWorkspaceMount {
		return "", errors.New("spawn: no workspace directory given (or set NoWorkspaceMount)")
	}
	return ws, nil
}

// spawnImage is what resolveSpawn found for a sandbox in its image.
type spawnImage struct {
	img       *image.Image
	workdir   string // where the workspace is mounted
	cwd       string // where commands start
	mounts    []specs.Mount
	sourceIDs map[string]fileID // each mount's source, by its destination
	who       identity
	groupAdd  []uint32
	mapKey    string // the nested mapping's key, "" for none
	layers    []string
}

// resolveSpawn reads the sandbox's image (build, else spec.Image's) and
// resolves against it, in this order: the bind mounts (workspace ws
// included), the user and its groups, the layers extracted for that user
// and the working directory. It fails as spawnWith does.
func (b *Backend) resolveSpawn(ctx context.Context, spec backend.SpawnSpec, build *image.Image, ws string) (*spawnImage, error) {
	r := &spawnImage{img: build, workdir: spec.Workdir}
	var err error
	if r.img == nil {
		if r.img, err = b.store.Get(spec.Image); err != nil {
			return nil, fmt.Errorf("spawn: %w", err)
		}
	}
	if r.workdir == "" {
		r.workdir = oci.DefaultWorkdir
	}
	if r.mounts, r.sourceIDs, err = b.mounts(spec, ws, r.workdir); err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	if r.who, r.groupAdd, err = b.spawnUser(spec, r.img); err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	// Rootless, a sandbox user other than root gets a nested user namespace
	// in which it is the invoking user, and layers extracted for it.
	r.mapKey = b.store.Mapping().NestedFor(r.who.UID, r.who.GID).Key
	if build != nil {
		r.mapKey = ""
	}
	if r.layers, err = b.store.LayersFor(ctx, r.img, r.mapKey); err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	r.cwd = spawnCwd(spec, r.img, r.workdir)
	return r, nil
}

// spawnUser resolves the sandbox's user in img (spec's, else the default
// for its context and image) with the groups spec adds, and checks that
// they are mapped in the store's user namespace.
func (b *Backend) spawnUser(spec backend.SpawnSpec, img *image.Image) (identity, []uint32, error) {
	userSpec := spec.User
	if userSpec == "" {
		userSpec = defaultUser(spec, img.Config.Config.User)
	}
	who, err := resolveUser(img.Layers, userSpec)
	var groupAdd []uint32
	if err == nil {
		groupAdd, err = addGroups(img.Layers, &who, spec.GroupAdd)
	}
	if err == nil {
		err = checkMapped(who, b.store.Mapping())
	}
	return who, groupAdd, err
}

// spawnCwd is where the sandbox's commands start: spec's Cwd, else the
// workdir, or without a workspace the image's working directory (or /).
func spawnCwd(spec backend.SpawnSpec, img *image.Image, workdir string) string {
	cwd := workdir
	if spec.NoWorkspaceMount {
		cwd = img.Config.Config.WorkingDir
		if cwd == "" {
			cwd = "/"
		}
	}
	if spec.Cwd != "" {
		cwd = spec.Cwd
	}
	return cwd
}

// newRecord is the record of a sandbox about to be created from spec (a
// build step's with build), with what checkSpawn and resolveSpawn found;
// command, when set, is recorded for ps and start. It gets its id and
// creation time here.
func newRecord(spec backend.SpawnSpec, build bool, command []string, ws string, nw spawnNet, r *spawnImage) *record {
	return &record{
		SourceIDs: r.sourceIDs,
		ID:        newID(),
		Name:      spec.Name,
		Hostname:  spec.Hostname,
		Image:     r.img.Name,
		ImageID:   r.img.ID,
		Created:   time.Now().UTC(),
		Workspace: ws,
		Workdir:   r.workdir,
		Cwd:       r.cwd,
		User:      r.who,
		GroupAdd:  r.groupAdd,
		Layers:    r.layers,
		MapKey:    r.mapKey,
		Env:       spawnEnv(r.img.Config.Config.Env, spec),
		NoSetup:   spec.DisableSetup,
		Keep:      spec.Keep, AutoRemove: spec.AutoRemove, Disposable: (spec.Disposable || spec.AutoRemove) && !spec.Keep,
		Labels:     spec.Labels,
		Network:    nw.network,
		Nets:       nw.nets,
		ExtraHosts: spec.ExtraHosts, DNS: nw.dns, AllowHostLoopback: spec.AllowHostLoopback, Ports: nw.ports,
		ReadOnly: spec.ReadOnlyRootfs,
		CapAdd:   spec.CapAdd, CapDrop: spec.CapDrop, Unconfined: spec.SeccompUnconfined,
		Limits:  spec.Limits,
		Command: command,
		Build:   build,
	}
}

// markMounts records the targets of mounts that keep their owners' ids
// (KeepOwners, once each) and of the writable ones handed over to the
// sandbox's user (HandOver).
func (rec *record) markMounts(mounts []backend.Mount) {
	for _, m := range mounts {
		switch t := path.Clean(m.Target); {
		case m.KeepOwners:
			// Any mount at t keeping its owners is enough: a mount that
			// replaces it there never brings the owners' ids back.
			if !slices.Contains(rec.KeepOwners, t) {
				rec.KeepOwners = append(rec.KeepOwners, t)
			}
		case m.HandOver && !m.ReadOnly:
			rec.HandOver = append(rec.HandOver, t)
		}
	}
}

// defaultUser is the user when the spawn spec names none: SPEC "User".
func defaultUser(spec backend.SpawnSpec, imageUser string) string {
	switch spec.Context {
	case backend.ContextEvaluation:
		return "1000:1000"
	case backend.ContextAgent:
		if spec.AgentUser != "" {
			return spec.AgentUser
		}
		return "0:0"
	}
	if imageUser != "" {
		return imageUser
	}
	return "0:0"
}

// spawnEnv merges image env < host env (IncludeOSEnv) < spec env < spawn env.
func spawnEnv(imageEnv []string, spec backend.SpawnSpec) map[string]string {
	layers := []map[string]string{envMap(imageEnv)}
	if spec.IncludeOSEnv {
		layers = append(layers, envMap(os.Environ()))
	}
	layers = append(layers, spec.SpecEnv, spec.Env)
	out := map[string]string{}
	for _, l := range layers {
		for k, v := range l {
			out[k] = v
		}
	}
	return out
}

func envMap(kv []string) map[string]string {
	m := map[string]string{}
	for _, e := range kv {
		if k, v, ok := strings.Cut(e, "="); ok {
			m[k] = v
		}
	}
	return m
}

// mounts resolves the bind mounts by container path (SPEC "Mounts").
func (b *Backend) mounts(spec backend.SpawnSpec, ws, workdir string) ([]specs.Mount, map[string]fileID, error) {
	// The inode each source resolved to, by its real path: claim mounts
	// that inode or nothing.
	ids := map[string]fileID{}
	opened := func(fd int, err error) (string, error) {
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return "", err
		}
		p, err := fdPath(fd)
		if err == nil {
			ids[p] = fileID{Dev: st.Dev, Ino: st.Ino}
		}
		return p, err
	}
	plan := oci.MountPlan{
		Workspace:      ws,
		Workdir:        workdir,
		MountWorkspace: !spec.NoWorkspaceMount,
		AllowedRoots:   spec.AllowedMountRoots,
		EvalSource:     func(src string) (string, error) { return opened(openSource(src)) },
		EvalBeneath:    func(root, rel string) (string, error) { return opened(openBeneath(root, rel)) },
		AnyTarget:      spec.NoWorkspaceMount && spec.Workdir == "",
	}
	if err := b.volumeMounts(&spec, &plan); err != nil {
		return nil, nil, err
	}
	for _, m := range spec.Mounts {
		// Only where the operator's mount roots allow it (the plan refuses
		// the others): a refused request creates nothing on the host.
		if m.CreateMissing && filepath.IsAbs(m.Source) && oci.WithinAny(filepath.Clean(m.Source), spec.AllowedMountRoots) {
			if err := mkdirSource(m.Source); err != nil {
				return nil, nil, fmt.Errorf("%s: the source %s does not exist, and cannot be made a directory: %w", m.FlagName(), m.Source, err)
			}
		}
		plan.Extra = append(plan.Extra, oci.BindSource{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, a := range spec.StaticAssets {
		plan.Static = append(plan.Static, oci.BindSource{Source: a.Source, Target: a.SavePath, ReadOnly: true})
	}
	ms, err := plan.Resolve()
	if err != nil {
		return nil, nil, err
	}
	handOver := map[string]bool{}
	if !spec.NoWorkspaceMount {
		handOver[path.Clean(workdir)] = true
	}
	flags := map[string]string{} // how each was asked for, for the refusal
	for _, m := range spec.Mounts {
		if m.HandOver {
			handOver[path.Clean(m.Target)] = true
		}
		flags[path.Clean(m.Target)] = m.Flag
	}
	byDest := map[string]fileID{}
	for _, m := range ms {
		id, ok := ids[m.Source]
		if !ok {
			return nil, nil, fmt.Errorf("mount %s: %s was not opened", m.Destination, m.Source)
		}
		byDest[m.Destination] = id
		// Again on what is mounted: the path of the descriptor opened,
		// whose inode claim mounts, not resolved by name again.
		bm := backend.Mount{Source: m.Source, Target: m.Destination, ReadOnly: slices.Contains(m.Options, "ro"), HandOver: handOver[m.Destination], Flag: flags[m.Destination]}
		if err := backend.CheckOpenedSource(bm, spec.Unsafe); err != nil {
			return nil, nil, err
		}
	}
	return ms, byDest, nil
}

// recordNamed claims rec's name and runs place, which puts rec's directory
// and state file in place, under the create lock; the name is released if
// place fails.
func (b *Backend) recordNamed(rec *record, place func() error) error {
	lock, err := b.state.lockNew()
	if err != nil {
		return err
	}
	defer lock.Unlock()
	if err := b.state.claimNameLocked(rec.Name, rec.ID); err != nil {
		return err
	}
	if err := place(); err != nil {
		b.state.releaseName(rec.Name, rec.ID)
		return err
	}
	// Its layers stay in the store while it exists (rmi -f, GC).
	if err := b.store.Lease(rec.ID, cmp.Or(rec.Name, rec.ID), rec.Layers); err != nil {
		return fmt.Errorf("lease the image's layers: %w", err)
	}
	return nil
}

// create starts a new sandbox and records it: it claims a sandbox the pool
// started ahead of need for the same image, user and network, or else starts
// one the same way. The sandbox takes the prestarted one's id. On failure it
// removes everything it made.
func (b *Backend) create(ctx context.Context, rec *record, mounts []specs.Mount) error {
	rec.Mounts = mounts
	bins, err := b.binaries()
	if err != nil {
		return fmt.Errorf("spawn: %w", err)
	}
	srv := b.spawnerFor(bins.server)
	t := templateOf(rec)
	name := rec.Name
	var e *poolEntry
	if pooledOnly(ctx) && (len(rec.Nets) > 0 || rec.Build) {
		return errNotPooled
	}
	if len(rec.Nets) > 0 {
		// Rootless, a sandbox on a user network lives in the network
		// helper's user namespace: a server there starts it, and none is
		// kept ready.
		if srv, err = b.netSpawner(bins.server); err != nil {
			return fmt.Errorf("spawn: %w", err)
		}
		rec.NetJoined = srv.joined
	} else if e = b.pool.take(t.key()); e == nil && pooledOnly(ctx) {
		return errNotPooled // nothing made yet: the caller spawns it cold
	}
	for fromPool := e != nil; ; fromPool, e = false, nil {
		if e == nil {
			if e, err = b.prestartEntry(ctx, srv, bins, t); err != nil {
				return fmt.Errorf("spawn: %w", err)
			}
		}
		rec.ID, rec.Name = e.id, name
		if rec.Name == "" {
			rec.Name = "slopbox-" + rec.ID[:8]
		}
		// Recorded with its pid from the start, so that a concurrent prune
		// sees a live sandbox.
		rec.Pid = e.pid
		rec.PidStart, _, _ = procStart(e.pid)
		if err := b.adopt(rec, e.dir); err != nil {
			b.discardEntry(e.srv, e) // as root, the sandbox's own server
			return fmt.Errorf("spawn: %w", err)
		}
		err := b.claim(ctx, e.srv, rec, e.pid)
		if e.srv.mapping != nil {
			// The sandbox's own server is done with it (claimed or not);
			// a failed one's slice is freed below, once it has gone.
			if err != nil {
				e.srv.closeWait(5 * time.Second)
			} else {
				e.srv.close()
			}
		}
		if err == nil {
			break
		}
		if derr := b.destroy(rec); derr != nil {
			// Say so: the caller was promised that nothing is left.
			return errors.Join(err, fmt.Errorf("removing the half-made sandbox %s failed too (`slopbox prune` retries): %w", rec.ID, derr))
		}
		if !fromPool || ctx.Err() != nil {
			return err
		}
		// The ready sandbox is gone (its spawn server died): start one.
	}
	if rec.Build || len(rec.Nets) > 0 {
		return nil // each step has its own layers: nothing to start ahead
	}
	b.pool.refill(t.key(), func() (*poolEntry, error) {
		return b.prestartEntry(context.Background(), srv, bins, t)
	})
	return nil
}

// Prewarm starts the spawn helper in the background (rootless: a user
// namespace that newuidmap and newgidmap map, then a Go runtime), so that
// a spawn that follows finds it running: a one-shot caller such as the CLI
// calls it first thing, and the helper's start overlaps its reading of the
// image and the flags. A failed start is reported by that spawn, which
// tries again. Root-run sandboxes each start a server of their own (their
// id slice's): there it reserves the next sandbox's directory and slice
// and starts that server (reserve). It also readies this process's encoder
// of spawn requests (spawnd.WarmCodec). Call UseSpawnHelper, if at all,
// before it.
func (b *Backend) Prewarm() {
	go func() {
		spawnd.WarmCodec()
		json.Marshal(record{}) // the state records' too
	}()
	if userns.Inside() {
		return
	}
	if b.slices != nil {
		b.reserve()
		return
	}
	b.warming.Add(1)
	go func() {
		defer b.warming.Done()
		b.startSpawner()
	}()
}

// startSpawner starts the Backend's spawn server unless it runs already.
func (b *Backend) startSpawner() error {
	bins, err := b.binaries()
	if err == nil {
		_, err = b.spawnerFor(bins.server).server(b.store.Mapping())
	}
	return err
}

// warmSpawner starts the spawn server in the background, unless it runs
// already, and returns a function that waits until that is done and
// returns the start's error. The caller calls it before it returns, so no
// start it began outlives it; a failed start is reported from there rather
// than tried again.
func (b *Backend) warmSpawner() (wait func() error) {
	done := make(chan struct{})
	var err error
	if b.slices != nil {
		// Each sandbox starts a server of its own.
		close(done)
		return func() error { return nil }
	}
	go func() {
		defer close(done)
		err = b.startSpawner()
	}()
	return func() error {
		<-done
		return err
	}
}

// adopt records rec, under its unique name, over the prestarted sandbox in
// dir, which becomes rec's directory.
func (b *Backend) adopt(rec *record, dir string) error {
	return b.recordNamed(rec, func() error {
		// Volatile: claim rewrites it, synced, a millisecond later.
		if err := b.state.writeIn(dir, rec, false); err != nil {
			return err
		}
		return os.Rename(dir, b.state.sandboxDir(rec.ID))
	})
}

// start starts a recorded sandbox again over its root filesystem (kept
// from the earlier start) and records it.
func (b *Backend) start(ctx context.Context, rec *record) error {
	bins, err := b.binaries()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	srv := b.spawnerFor(bins.server)
	if len(rec.Nets) > 0 {
		if srv, err = b.netSpawner(bins.server); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	rec.NetJoined = srv.joined
	// Helpers of an earlier start whose PID 1 died without a stop.
	dir := b.state.sandboxDir(rec.ID)
	killHelpers(rec, dir)
	if b.slices != nil {
		// The slice it holds (a new one if the host's record of slices
		// was lost with a reboot), and a server of its own.
		k, err := b.slices.alloc(b.state.dir, rec.ID)
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		srv = b.sliceSpawner(bins.server, k, rec.ID)
		defer srv.close()
	}
	pid, err := b.prestart(ctx, srv, bins, templateOf(rec), rec.ID, dir, nil)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := b.claim(ctx, srv, rec, pid); err != nil {
		// Stopped again, as it was: no PID 1 or network helper left.
		unix.Kill(pid, unix.SIGKILL)
		killHelpers(rec, dir)
		return err
	}
	return nil
}

// template is what a sandbox's PID 1 is started from before it is claimed:
// everything but the sandbox's own mounts and hostname.
type template struct {
	layers      []string
	mapKey      string
	network     string
	tmpBytes    int64            // a tmpfs of this size at /tmp
	tmpfs       map[string]int64 // and at these paths
	rootfsBytes int64            // the writable layer on a tmpfs of this size
	readOnly    bool
	caps        [2][]string // added, dropped
	unconfined  bool        // no seccomp profile
	setid       bool        // a build step: setid modes allowed
	volatile    bool        // Disposable: the writable layer mounted volatile
}

func templateOf(rec *record) template {
	return template{layers: rec.Layers, mapKey: rec.MapKey, network: rec.Network, tmpBytes: rec.Limits.TmpBytes, tmpfs: rec.Limits.Tmpfs,
		rootfsBytes: rec.Limits.RootfsBytes, readOnly: rec.ReadOnly,
		caps: [2][]string{rec.CapAdd, rec.CapDrop}, unconfined: rec.Unconfined, setid: rec.Build, volatile: rec.Disposable}
}

func (t template) key() string {
	return fmt.Sprintf("%q %q %q %d %d %v %q %v %v %v %v", t.layers, t.mapKey, t.network, t.tmpBytes, t.rootfsBytes, t.readOnly, t.caps, t.unconfined, t.setid, t.tmpfs, t.volatile)
}

// prestart starts PID 1 of sandbox id over dir, unclaimed, and returns its
// pid.
//
// If ctx ends first, prestart returns at once and the server's late reply
// is handled in the background: its sandbox is discarded, then abandoned
// (when not nil) runs, to remove what the caller made for it.
func (b *Backend) prestart(ctx context.Context, srv *spawner, bins binaries, t template, id, dir string, abandoned func()) (int, error) {
	lnFile, err := agentListener(dir)
	if err != nil {
		return 0, err
	}
	sent := false // then callPrestart owns lnFile
	defer func() {
		if !sent {
			lnFile.Close()
		}
	}()
	spec, err := b.templateSpec(bins, t, id, dir)
	if err != nil {
		return 0, err
	}
	req, err := b.prestartRequest(srv, t, id, dir, spec)
	if err != nil {
		return 0, err
	}
	fds := []int{int(lnFile.Fd())}
	var clones []*os.File // callPrestart owns them, as lnFile
	if srv.mapping != nil {
		// The sandbox's directory and the layers' directory, as the
		// server mounts them over their own paths in its mount namespace:
		// idmapped from the store's ids to the slice's, so the image's
		// files appear with their owners and what the sandbox writes to
		// its upper layer is stored with the store's ids, as any
		// sandbox's. Only these two: the store root, other sandboxes'
		// directories and the blobs stay the store's ids, which the
		// slice's root cannot pass; and the layers, which every sandbox
		// shares, are read-only.
		if clones = srv.takeClones(req.LayersRoot); clones == nil {
			if clones, err = b.sliceClones(*srv.mapping, dir, req.LayersRoot); err != nil {
				return 0, err
			}
		}
		for _, f := range clones {
			fds = append(fds, int(f.Fd()))
		}
		req.IDMapped = true
	}
	sent = true
	return b.callPrestart(ctx, srv, req, fds, append([]*os.File{lnFile}, clones...), abandoned)
}

// agentListener makes the socket PID 1 of the sandbox in dir listens on
// (any earlier one removed) and returns it as a file, to be passed to the
// spawn server.
func agentListener(dir string) (*os.File, error) {
	sock := filepath.Join(dir, socketFile)
	os.Remove(sock)
	ln, err := listenAgent(sock)
	if err != nil {
		return nil, err
	}
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, err
	}
	return lnFile, nil
}

// templateSpec is the OCI spec PID 1 of sandbox id over dir is started
// with, from template t: its user namespace (nested when t says so), root
// filesystem, the init at agentPath, network, tmpfs mounts, capabilities
// and seccomp profile.
func (b *Backend) templateSpec(bins binaries, t template, id, dir string) (*specs.Spec, error) {
	userNS := oci.WithInheritedUserNamespace()
	if t.mapKey != "" {
		nested, err := userns.ParseNested(t.mapKey)
		if err != nil {
			return nil, err
		}
		userNS = oci.WithIDMappings(specMaps(nested.UIDs), specMaps(nested.GIDs))
	}
	return oci.New(
		userNS,
		oci.WithRootfs(filepath.Join(dir, "rootfs"), t.readOnly),
		oci.WithProcess([]string{agentPath}, append(slices.Clone(b.initEnv), sandboxMarker+id), "/"),
		oci.WithUser(0, 0, nil),
		oci.WithHostname("sandbox"), // the sandbox's own is set when it is claimed
		oci.WithNetwork(t.network),
		oci.WithMounts(append([]specs.Mount{{
			Destination: agentPath, Type: "bind", Source: bins.init,
			Options: []string{"bind", "ro", "nosuid", "nodev"},
		}}, tmpMounts(t.tmpBytes, t.tmpfs)...)),
		oci.WithCapabilities(t.caps[0], t.caps[1]),
		unconfined(t.unconfined),
		setidModes(t.setid && !t.unconfined),
	)
}

// prestartRequest is the spawn server's request to prestart sandbox id
// over dir with spec: its compiled seccomp filter, and its layers relative
// to the layers' directory (a sandbox's own server, srv.mapping set, sees
// no other).
func (b *Backend) prestartRequest(srv *spawner, t template, id, dir string, spec *specs.Spec) (*spawnd.Request, error) {
	req := spawnd.Request{Op: spawnd.OpPrestart, ID: id, Dir: dir, LayersRoot: filepath.Dir(filepath.Dir(t.layers[0])), Spec: spec,
		StartDeadline: b.startDeadline, RootfsBytes: t.rootfsBytes, Volatile: t.volatile}
	var err error
	if req.Seccomp, err = b.seccomp.get(spec.Linux.Seccomp); err != nil {
		return nil, err
	}
	for _, l := range t.layers {
		rel, err := filepath.Rel(req.LayersRoot, l)
		if err != nil {
			return nil, err
		}
		if srv.mapping != nil && !filepath.IsLocal(rel) {
			// A sandbox's own server sees the layers' directory only.
			return nil, fmt.Errorf("layer %s is not in the store's layers directory %s", l, req.LayersRoot)
		}
		req.Layers = append(req.Layers, rel)
	}
	return &req, nil
}

// callPrestart sends req with fds to srv and returns the pid it started.
// It owns files (the fds' files), closed once the server has answered.
//
// A caller that gives up (ctx) ends only its own call: the server goes on
// for everyone else, and the sandbox it starts late is discarded, then
// abandoned (when not nil) runs.
func (b *Backend) callPrestart(ctx context.Context, srv *spawner, req *spawnd.Request, fds []int, files []*os.File, abandoned func()) (int, error) {
	type reply struct {
		resp *spawnd.Response
		err  error
	}
	replies := make(chan reply, 1)
	go func() {
		for _, f := range files {
			defer f.Close()
		}
		resp, err := srv.call(context.Background(), b.store.Mapping(), req, fds, true)
		replies <- reply{resp, err}
	}()
	select {
	case r := <-replies:
		if r.err != nil {
			return 0, r.err
		}
		return r.resp.Pid, nil
	case <-ctx.Done():
		go func() {
			if r := <-replies; r.err == nil {
				srv.call(context.Background(), b.store.Mapping(), &spawnd.Request{Op: spawnd.OpDiscard, ID: req.ID}, nil, false)
			}
			if abandoned != nil {
				abandoned()
			}
		}()
		return 0, &abandonedError{ctx.Err()}
	}
}

// abandonedError is prestart's error when its caller gave up (ctx) before
// the server answered: the answer is handled in the background, which
// discards the sandbox and runs abandoned.
type abandonedError struct{ err error }

func (e *abandonedError) Error() string {
	return e.err.Error() + " (the sandbox being started is discarded)"
}
func (e *abandonedError) Unwrap() error { return e.err }

// claim gives prestarted PID 1 pid the sandbox's mounts and hostname, lets
// it serve, and records it with its limits applied.
func (b *Backend) claim(ctx context.Context, srv *spawner, rec *record, pid int) error {
	req := spawnd.Request{Op: spawnd.OpClaim, ID: rec.ID, Hostname: cmp.Or(rec.Hostname, hostname(rec.Name)), ReadOnlyRoot: rec.ReadOnly}
	var fds []int
	for _, m := range rec.Mounts {
		lm := spawnd.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: slices.Contains(m.Options, "ro")}
		f, err := b.bindSource(rec, m, &lm, srv.mapping)
		if err != nil {
			return fmt.Errorf("start: mount %s on %s: %w", m.Source, m.Destination, err)
		}
		if f != nil {
			if len(fds) == spawnd.MaxFDs {
				f.Close()
				return fmt.Errorf("start: %w", backend.InvalidValue("more than %d bind mounts: as root each is passed as a descriptor, and the kernel passes at most %d in one message; bind a common parent directory instead", spawnd.MaxFDs, spawnd.MaxFDs))
			}
			defer f.Close()
			fds, lm.FD = append(fds, int(f.Fd())), true
		}
		req.Mounts = append(req.Mounts, lm)
	}
	rec.Pid = pid
	start, _, ok := procStart(pid)
	if !ok {
		return fmt.Errorf("start: sandbox init %d exited at once", pid)
	}
	rec.PidStart = start
	// Limits hold before PID 1 serves anything: no command, not even an
	// exec from another process, runs outside the cgroup.
	if err := b.applyLimits(rec); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	// slirp4netns needs only the network namespace PID 1 holds: it sets
	// the interface up while PID 1 mounts. A failed claim's sandbox is
	// destroyed by the caller, helper included (its pid is recorded).
	netReady := func() error { return nil }
	var err error
	if rec.Network == backend.NetworkBridge {
		if netReady, err = b.startNetHelper(rec, pid); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	// Its interfaces on user networks, before it runs anything; then its
	// /etc files, which name its address there.
	if err := b.attachNetworks(rec, pid); err != nil {
		netReady()
		return fmt.Errorf("start: %w", err)
	}
	etc, err := b.etcFiles(rec, req.Hostname)
	if err != nil {
		netReady()
		return fmt.Errorf("start: %w", err)
	}
	req.Mounts = append(req.Mounts, etc...)
	_, err = srv.call(ctx, b.store.Mapping(), &req, fds, false)
	if nerr := netReady(); err == nil && nerr != nil {
		err = nerr
	}
	if err == nil && !rec.Reserved {
		// A created sandbox binds its ports at start, as Docker does
		// (compose creates a replacement while the old one holds them).
		err = b.publish(rec, pid)
	}
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if b.claimedHook != nil {
		b.claimedHook(rec)
	}
	if err := b.state.write(rec); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// bindSource opens the source of bind m once, with no symlink followed
// (m.Source is the real path resolved at spawn, so a symlink there now
// was swapped in since, by a sandbox that can write that directory), and
// does everything else through that fd, never by the name again.
//
// As root it returns the detached mount the spawn server attaches (the
// caller opens what the sandbox's ids may not traverse to, such as a 0700
// temporary directory), prepared so the sandbox's user can write a
// read-write bind as Docker's container root can, without any sandbox id
// mapping to host root, and without changing the owner of the caller's
// files unasked:
//   - a mount that keeps its owners (KeepOwners: asked for by a config,
//     not by the caller) is neither handed over nor idmapped onto the
//     sandbox's user: host root's files and sockets there, and another
//     user's, are nobody's to the sandbox (keptClone);
//   - a mount asked to (HandOver, podman's :U) first has its entries owned
//     by host uid 0 or gid 0 handed to the user's unprivileged host ids
//     (SPEC "Security decisions"), unless what was opened is a host
//     directory that must keep its owners;
//   - the workspace (or a directory in it), whoever owns it (host root
//     included), and a source
//     owned by a host id outside the sandbox's range (a user's directory),
//     is mounted idmapped: its owner appears as the sandbox's user, and
//     files the sandbox writes there belong to that owner on the host,
//     none setuid or setgid (seccomp refuses those modes; a root-owned
//     one is refused without the filter).
//
// A source already owned by an id of the sandbox's range maps as the
// sandbox does, and one owned by root that is not handed over stays root's
// (the CLI says so, and how to hand it over).
//
// Rootless the spawn server, which is the caller on the host, opens the
// source itself the same way: lm gets the inode opened here, and the
// server refuses to mount any other.
//
// With slice (root, the sandbox's own id slice) every source but a
// root-owned file is mounted idmapped onto the slice: the store's ids as
// the slice's, and an owner outside the store's range as the sandbox's
// user, so that on disk nothing differs from a sandbox without a slice.
func (b *Backend) bindSource(rec *record, m specs.Mount, lm *spawnd.Mount, slice *userns.Mapping) (*os.File, error) {
	fd, err := openSource(m.Source)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := checkSourceID(rec, m, fd, &st); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		lm.Dev, lm.Ino = st.Dev, st.Ino
		return nil, nil
	}
	// Asked for by someone other than the caller (an rlm_code config):
	// whoever owns the source, and whatever is mounted there, no owner
	// appears as the sandbox's user, and nothing is handed over.
	if slices.Contains(rec.KeepOwners, m.Destination) {
		return keptClone(fd, b.store.Mapping(), slice)
	}
	// Read-only sources too are idmapped by the rule below: a root-owned
	// 0700 directory must be readable by container root (docker-py's
	// VolumeBindTest binds mkdtemp directories read-only).
	if !lm.ReadOnly && slices.Contains(rec.HandOver, m.Destination) {
		if err := b.handOverSource(rec, fd, &st); err != nil {
			return nil, err
		}
	}
	// A read-write source owned by an id no sandbox id maps to (the
	// caller's, host root's) is mounted idmapped, as the workspace is: its
	// owner appears as the sandbox's user, so the sandbox writes there as
	// Docker's would (a root-owned mkdtemp directory too), no existing
	// entry changes owner, and what it creates is the owner's (never
	// setuid or setgid: the seccomp filter refuses those modes). A
	// root-owned file mounted on its own stays host root's: container
	// root is not host root, and cannot write it.
	_, mapped := userns.FromHost(b.store.Mapping().UIDs, st.Uid)
	if slice != nil && (mapped || st.Uid != 0 || st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		if !mapped && !lm.ReadOnly && rec.Unconfined && (st.Uid == 0 || st.Gid == 0) {
			return nil, fmt.Errorf("%s is owned by host root (%d:%d): files the sandbox writes there would be root's, and without the seccomp filter they could be setuid or setgid; use a workspace owned by an unprivileged user, or keep the filter", m.Source, st.Uid, st.Gid)
		}
		return sliceClone(fd, &st, b.store.Mapping(), *slice, rec.User.UID, rec.User.GID)
	}
	if !mapped && (st.Uid != 0 || st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		if !lm.ReadOnly && rec.Unconfined && (st.Uid == 0 || st.Gid == 0) {
			// Only seccomp keeps setuid and setgid bits off the files
			// the sandbox writes there as host root's.
			return nil, fmt.Errorf("%s is owned by host root (%d:%d): files the sandbox writes there would be root's, and without the seccomp filter they could be setuid or setgid; use a workspace owned by an unprivileged user, or keep the filter", m.Source, st.Uid, st.Gid)
		}
		f, err := idmapClone(fd, &st, b.store.Mapping(), rec.User.UID, rec.User.GID)
		if f != nil || err != nil {
			return f, err
		}
	}
	return cloneSource(fd)
}

// checkSourceID fstats the bind source fd opened for m into st and
// refuses it unless it is the inode checked when the sandbox was made, or
// nothing was: a name swapped since (a rename inside a directory some
// sandbox writes) must not bring another directory in. (A record written
// before inodes were kept has none.)
func checkSourceID(rec *record, m specs.Mount, fd int, st *unix.Stat_t) error {
	if err := unix.Fstat(fd, st); err != nil {
		return err
	}
	if id, ok := rec.SourceIDs[m.Destination]; ok && (id.Dev != st.Dev || id.Ino != st.Ino) {
		return fmt.Errorf("%s is not the directory or file it was when the sandbox was created (replaced since, inode %d, was %d): refused; create the sandbox again to mount what is there now", m.Source, st.Ino, id.Ino)
	}
	return nil
}

// handOverSource (root only) checks that the path of the opened source fd
// may be handed over, hands it over (handOver) and fstats it again into
// st: its owner may be the user's now.
func (b *Backend) handOverSource(rec *record, fd int, st *unix.Stat_t) error {
	opened, err := fdPath(fd)
	if err != nil {
		return err
	}
	if err := backend.CheckHandOver(opened); err != nil {
		return err
	}
	if err := b.handOver(rec, fd, st); err != nil {
		return err
	}
	return unix.Fstat(fd, st)
}

// handOver (root only) hands the entries of the source fd (st its stat)
// owned by host uid 0 or gid 0 to the sandbox user's unprivileged host ids
// before it is idmapped, so no sandbox id maps to host root through it.
func (b *Backend) handOver(rec *record, fd int, st *unix.Stat_t) error {
	if st.Uid != 0 && st.Gid != 0 {
		return nil
	}
	m := b.store.Mapping()
	uid, uok := userns.ToHost(m.UIDs, rec.User.UID)
	gid, gok := userns.ToHost(m.GIDs, rec.User.GID)
	if !uok || !gok || uid == 0 || gid == 0 {
		src, _ := fdPath(fd)
		return fmt.Errorf("user %d:%d has no unprivileged host id to own the root-owned %s", rec.User.UID, rec.User.GID, src)
	}
	if err := handOverRootOwned(fd, int(uid), int(gid)); err != nil {
		src, _ := fdPath(fd)
		return fmt.Errorf("hand root-owned %s to uid %d: %w", src, uid, err)
	}
	return nil
}

// unconfined removes the seccomp profile when asked (and allowed).
func unconfined(on bool) oci.Opt {
	if on {
		return oci.WithoutSeccomp()
	}
	return nil
}

// setidModes lets a build step set setuid and setgid modes and file
// capabilities (CAP_SETFCAP): it writes only into the store.
func setidModes(on bool) oci.Opt {
	if on {
		return func(s *specs.Spec) error {
			if err := oci.WithCapabilities([]string{"SETFCAP"}, nil)(s); err != nil {
				return err
			}
			return oci.WithSetidModes()(s)
		}
	}
	return nil
}

// tmpMounts are /tmp as a tmpfs of size bytes (none for 0) and the other
// tmpfs mounts (--tmpfs PATH), each of its size.
func tmpMounts(size int64, others map[string]int64) []specs.Mount {
	var out []specs.Mount
	if size > 0 {
		out = append(out, specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", size)}})
	}
	// Shallower first, so that a tmpfs inside another one is mounted in it.
	for _, dst := range slices.SortedFunc(maps.Keys(others), func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(a, "/"), strings.Count(b, "/")), cmp.Compare(a, b))
	}) {
		if others[dst] > 0 {
			out = append(out, specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs",
				Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", others[dst])}})
		}
	}
	return out
}

func specMaps(maps []userns.IDMap) []specs.LinuxIDMapping {
	var out []specs.LinuxIDMapping
	for _, m := range maps {
		out = append(out, specs.LinuxIDMapping{ContainerID: m.ContainerID, HostID: m.HostID, Size: m.Size})
	}
	return out
}

func hostname(name string) string {
	h := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, name)
	return h[:min(len(h), 63)]
}

// listenAgent binds PID 1's socket (through viaShortPath when its path is
// longer than sun_path).
func listenAgent(path string) (*net.UnixListener, error) {
	var ln *net.UnixListener
	err := viaShortPath(path, func(addr string) (err error) {
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// chownToNamespaceRoot hands dir to root of the user namespace (as root,
// an unprivileged host id; rootless, the user already owns it).
func (b *Backend) chownToNamespaceRoot(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	m := b.store.Mapping()
	return os.Chown(dir, int(m.UIDs[0].HostID), int(m.GIDs[0].HostID))
}

// applyLimits puts PID 1 (and so every command it starts) into a cgroup with
// the sandbox's limits, where the host allows it: always as root; rootless
// only when the cgroup is delegated to the user. Limits that cannot be
// enforced are recorded and reported with every result, or refused with
// Limits.Strict.
func (b *Backend) applyLimits(rec *record) error {
	l := rec.Limits
	var wanted []string
	if l.MemoryBytes > 0 {
		wanted = append(wanted, "memory")
	}
	if l.CPUs > 0 {
		wanted = append(wanted, "cpus")
	}
	if l.Pids > 0 {
		wanted = append(wanted, "pids")
	}
	if len(wanted) == 0 {
		return nil
	}
	res := &cgroups.Resources{SkipDevices: true}
	if l.MemoryBytes > 0 {
		res.Memory, res.MemorySwap = l.MemoryBytes, l.MemoryBytes
	}
	if l.CPUs > 0 {
		res.CpuPeriod = oci.CPUPeriod
		res.CpuQuota = int64(l.CPUs * oci.CPUPeriod)
	}
	if l.Pids > 0 {
		res.PidsLimit = &l.Pids
	}
	rootless := os.Geteuid() != 0
	rec.Scope = ""
	m, err := limitedCgroup(&cgroups.Cgroup{Name: rec.ID, Parent: cgroupParent, Resources: res, Rootless: rootless}, rec.Pid)
	if err != nil && rootless && userSystemd() {
		// A login session's own cgroup (session-N.scope) is not the
		// user's: systemd delegates user@UID.service. Its user manager
		// makes a transient scope there and moves PID 1 into it (asking
		// the system manager when the session's cgroup is not its own),
		// as podman and runc --systemd-cgroup do.
		ctrls := slices.Clone(wanted)
		if i := slices.Index(ctrls, "cpus"); i >= 0 {
			ctrls[i] = "cpu" // the limit's name, the controller's
		}
		if serr := userControllers(ctrls); serr != nil {
			err = fmt.Errorf("%v; a systemd user scope: %v", err, serr)
		} else {
			sm, serr := scopeCgroup(rec, res)
			if serr != nil {
				return fmt.Errorf("limits through a systemd user scope: %w", serr)
			}
			m, err = sm, nil
		}
	}
	if err != nil {
		if l.Strict {
			return fmt.Errorf("cannot enforce %s limits here (%v); run as root, or on cgroup v2 with the controllers delegated to this user, or drop --strict-limits", strings.Join(wanted, ", "), err)
		}
		rec.Unenforced = wanted
		return nil
	}
	rec.Cgroups = m.GetPaths()
	return nil
}

// limitedCgroup makes the cgroup cg describes, moves pid into it and sets
// its limits; on failure nothing is left.
func limitedCgroup(cg *cgroups.Cgroup, pid int) (cgroups.Manager, error) {
	m, err := cgmanager.New(cg)
	if err != nil {
		return nil, err
	}
	if err = m.Apply(pid); err == nil {
		err = m.Set(cg.Resources)
	}
	if err != nil {
		m.Destroy()
		return nil, err
	}
	return m, nil
}

// scopeCgroup puts PID 1 into a transient scope of the user's systemd
// manager, slopbox-ID-N.scope (a new name each start: the scope of a
// sandbox just stopped may not be gone yet), with the limits as the
// unit's properties. The scope outlives an OOM kill inside it
// (OOMPolicy=continue, where systemd 253+ would stop it) and is collected
// when it empties, failed or not. Once PID 1 is in it a failure is the
// sandbox's: stopping the unit would wait out PID 1 ignoring SIGTERM.
func scopeCgroup(rec *record, res *cgroups.Resources) (cgroups.Manager, error) {
	var b [3]byte
	rand.Read(b[:])
	if res.MemorySwap > 0 || res.Memory > 0 {
		res.Unified = map[string]string{"memory.oom.group": "0"}
	}
	scope := &cgroups.Cgroup{
		Name: rec.ID + "-" + hex.EncodeToString(b[:]), ScopePrefix: cgroupParent, Resources: res, Rootless: true, Systemd: true,
		SystemdProps: []systemdDbus.Property{{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")}},
	}
	m, err := cgmanager.New(scope)
	if err != nil {
		return nil, err
	}
	if err := m.Apply(rec.Pid); err != nil {
		return nil, err
	}
	if err := m.Set(res); err != nil {
		return nil, err
	}
	rec.Scope = scope.Name
	return m, nil
}

// userControllers checks that this user's systemd manager has the
// cgroup v2 controllers (memory, cpu, pids) the limits need delegated.
func userControllers(wanted []string) error {
	uid := os.Getuid()
	dir := fmt.Sprintf("/sys/fs/cgroup/user.slice/user-%d.slice/user@%d.service", uid, uid)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no systemd user manager runs for uid %d", uid)
	}
	if missing := missingControllers(dir, wanted); len(missing) > 0 {
		return fmt.Errorf("user@%d.service lacks the %s controller(s) (Delegate= in a user@.service drop-in)", uid, strings.Join(missing, ", "))
	}
	return nil
}

// missingControllers lists those of wanted that dir's cgroup.controllers
// lacks: all of them when it cannot be read.
func missingControllers(dir string, wanted []string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return wanted
	}
	have := strings.Fields(string(b))
	var missing []string
	for _, c := range wanted {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	return missing
}

// userSystemd says whether this user's systemd manager can be asked for a
// cgroup: a cgroup v2 host booted with systemd, and a D-Bus user bus.
func userSystemd() bool {
	if !cgroups.IsCgroup2UnifiedMode() || !cgsystemd.IsRunningSystemd() {
		return false
	}
	return userBus() == nil
}

// userBus finds this user's D-Bus bus for libcontainer's systemd driver:
// $DBUS_SESSION_BUS_ADDRESS, $XDG_RUNTIME_DIR/bus, or, where a login
// without pam_systemd's environment (su -l, sudo -iu) left both unset,
// /run/user/UID/bus when this user owns it (podman looks there too).
func userBus() error {
	_, err := cgsystemd.DetectUserDbusSessionBusAddress()
	if err == nil {
		return nil
	}
	bus := fmt.Sprintf("/run/user/%d/bus", os.Getuid())
	var st unix.Stat_t
	if unix.Lstat(bus, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != os.Getuid() {
		return err
	}
	return os.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+bus)
}

// cgroupParent groups the sandboxes' cgroups in every hierarchy (and
// prefixes their systemd scopes: slopbox-ID.scope).
const cgroupParent = "slopbox"

// cgroupManager reattaches to a sandbox's cgroup.
func cgroupManager(rec *record) (cgroups.Manager, error) {
	if len(rec.Cgroups) == 0 {
		return nil, nil
	}
	cg := &cgroups.Cgroup{Name: rec.ID, Parent: cgroupParent, Resources: &cgroups.Resources{SkipDevices: true}, Rootless: os.Geteuid() != 0}
	if rec.Scope != "" && cgsystemd.IsRunningSystemd() && userBus() == nil {
		cg = &cgroups.Cgroup{Name: rec.Scope, ScopePrefix: cgroupParent, Resources: cg.Resources, Rootless: true, Systemd: true}
	}
	return cgmanager.NewWithPaths(cg, maps.Clone(rec.Cgroups))
}
