package sandbox

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	cgmanager "github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/reexec"
	"github.com/slopbox/slopbox/internal/userns"
	"github.com/slopbox/slopbox/oci"
)

// agentPath is where the init is bind-mounted inside every sandbox. /dev is
// a fresh tmpfs, so nothing lands in the image's tree.
const agentPath = "/dev/.slopbox-init"

const spawnHelper = "sandbox-spawn-server"

func init() {
	reexec.Register(spawnHelper, spawnServerMain)
	// libcontainer logs a harmless warning per rootless start.
	logrus.SetLevel(logrus.ErrorLevel)
}

// spawnRequest is what the host hands the spawn helper, which runs as root
// of the sandbox's user namespace.
type spawnRequest struct {
	// Remove, when set, asks the server to delete this sandbox directory
	// instead of starting anything.
	Remove     string      `json:"remove,omitempty"`
	ID         string      `json:"id"`
	Dir        string      `json:"dir"`
	LayersRoot string      `json:"layers_root"`
	Layers     []string    `json:"layers"` // relative to LayersRoot, oldest first
	Spec       *specs.Spec `json:"spec"`
	// Seccomp is Spec's seccomp profile compiled by the host; when set,
	// PID 1 loads it and libcontainer does not compile the profile again.
	Seccomp seccompProgram `json:"seccomp,omitempty"`
}

type spawnResponse struct {
	Pid   int    `json:"pid"`
	Error string `json:"error,omitempty"`
}

// maxSpawnFDs: a request carries PID 1's listener and, as root, the
// idmapped workspace mount.
const maxSpawnFDs = 2

// Spawn creates and starts a sandbox from spec. On any error nothing is
// left behind: no process, no state directory.
func (b *Backend) Spawn(ctx context.Context, spec backend.SpawnSpec) (backend.Sandbox, error) {
	return b.spawn(ctx, spec, nil, false)
}

// spawn is Spawn; command, when set, is recorded for `ps` and `start`. With
// create the sandbox is only recorded, not started.
func (b *Backend) spawn(ctx context.Context, spec backend.SpawnSpec, command []string, create bool) (*Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.Image == "" {
		return nil, errors.New("spawn: no image given")
	}
	ws := spec.Workspace
	if ws != "" {
		abs, err := filepath.Abs(ws)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("spawn: workspace: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("spawn: workspace %s is not a directory", abs)
		}
		ws = abs
	} else if !spec.NoWorkspaceMount {
		return nil, errors.New("spawn: no workspace directory given (or set NoWorkspaceMount)")
	}
	img, err := b.store.Get(spec.Image)
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	workdir := spec.Workdir
	if workdir == "" {
		workdir = oci.DefaultWorkdir
	}
	mounts, err := b.mounts(spec, ws, workdir)
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	userSpec := spec.User
	if userSpec == "" {
		userSpec = defaultUser(spec.Context, img.Config.Config.User)
	}
	who, err := resolveUser(img.Layers, userSpec)
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	// Rootless, a sandbox user other than root gets a nested user namespace
	// in which it is the invoking user, and layers extracted for it.
	mapKey := b.store.Mapping().NestedFor(who.UID, who.GID).Key
	layers, err := b.store.LayersFor(ctx, img, mapKey)
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
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
	network := spec.Network
	if network == "" {
		network = backend.NetworkNone
	}
	if network == backend.NetworkBridge {
		return nil, errors.New("spawn: network mode \"bridge\" is not supported yet; use \"none\" (default) or \"host\"")
	}
	if len(spec.Ports) > 0 {
		return nil, errors.New("spawn: published ports need bridge networking, which is not supported yet")
	}

	rec := &record{
		ID:        newID(),
		Name:      spec.Name,
		Image:     img.Name,
		ImageID:   img.ID,
		Created:   time.Now().UTC(),
		Workspace: ws,
		Workdir:   workdir,
		Cwd:       cwd,
		User:      who,
		Layers:    layers,
		MapKey:    mapKey,
		Env:       spawnEnv(img.Config.Config.Env, spec),
		NoSetup:   spec.DisableSetup,
		Keep:      spec.Keep,
		Labels:    spec.Labels,
		Network:   network,
		Limits:    spec.Limits,
		Command:   command,
	}
	if !spec.DisableSetup {
		rec.Setup = backend.SetupCommands(spec.Setup, spec.Context)
	}
	if rec.Name == "" {
		rec.Name = "slopbox-" + rec.ID[:8]
	}
	if create {
		rec.Mounts = mounts
		if err := b.prepare(rec); err != nil {
			return nil, fmt.Errorf("create: %w", err)
		}
		return b.sandbox(rec), nil
	}
	if err := b.create(ctx, rec, mounts); err != nil {
		return nil, err
	}
	return b.sandbox(rec), nil
}

// defaultUser is the user when the spawn spec names none: SPEC "User".
func defaultUser(ctx backend.Context, imageUser string) string {
	switch ctx {
	case backend.ContextEvaluation:
		return "1000:1000"
	case backend.ContextAgent:
		if u, g := os.Getenv("HUID"), os.Getenv("HGID"); u != "" && g != "" {
			return u + ":" + g
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
func (b *Backend) mounts(spec backend.SpawnSpec, ws, workdir string) ([]specs.Mount, error) {
	plan := oci.MountPlan{
		Workspace:      ws,
		Workdir:        workdir,
		MountWorkspace: !spec.NoWorkspaceMount,
		AllowedRoots:   spec.AllowedMountRoots,
		EvalSource:     filepath.EvalSymlinks,
	}
	for _, m := range spec.Mounts {
		plan.Extra = append(plan.Extra, oci.BindSource{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, a := range spec.StaticAssets {
		plan.Static = append(plan.Static, oci.BindSource{Source: a.Source, Target: a.SavePath, ReadOnly: true})
	}
	ms, err := plan.Resolve()
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if _, err := os.Stat(m.Source); err != nil {
			return nil, fmt.Errorf("mount %s: %w", m.Destination, err)
		}
	}
	return ms, nil
}

// prepare records a new sandbox (not started) under a unique name.
func (b *Backend) prepare(rec *record) error {
	lock, err := b.state.lockNew()
	if err != nil {
		return err
	}
	defer lock.Unlock()
	if err := b.state.claimNameLocked(rec.Name, rec.ID); err != nil {
		return err
	}
	dir := b.state.sandboxDir(rec.ID)
	err = os.Mkdir(dir, 0o700)
	if err == nil {
		if err = b.chownToNamespaceRoot(dir); err == nil {
			err = b.state.write(rec)
		}
		if err != nil {
			os.RemoveAll(dir)
		}
	}
	if err != nil {
		b.state.releaseName(rec.Name, rec.ID)
	}
	return err
}

// create records and starts a sandbox; on failure it removes everything it
// made.
func (b *Backend) create(ctx context.Context, rec *record, mounts []specs.Mount) error {
	rec.Mounts = mounts
	if err := b.prepare(rec); err != nil {
		return fmt.Errorf("spawn: %w", err)
	}
	if err := b.start(ctx, rec); err != nil {
		b.destroy(rec)
		return err
	}
	return nil
}

// start starts the sandbox's PID 1 over its root filesystem (kept from an
// earlier start, if any) and records it.
func (b *Backend) start(ctx context.Context, rec *record) error {
	dir := b.state.sandboxDir(rec.ID)
	sock := filepath.Join(dir, socketFile)
	os.Remove(sock)
	ln, err := listenAgent(sock)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer lnFile.Close()

	mounts := slices.Clone(rec.Mounts)
	var wsMount *os.File
	if os.Geteuid() == 0 && rec.Workspace != "" {
		for i, m := range mounts {
			if m.Source == rec.Workspace && m.Destination == rec.Workdir {
				if wsMount, err = idmapWorkspace(rec.Workspace, b.store.Mapping(), rec.User.UID, rec.User.GID); err != nil {
					return fmt.Errorf("start: %w", err)
				}
				defer wsMount.Close()
				mounts[i].Source = filepath.Join(dir, "ws")
			}
		}
	}
	initBin, err := b.initBinary()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	userNS := oci.WithInheritedUserNamespace()
	if rec.MapKey != "" {
		nested, err := userns.ParseNested(rec.MapKey)
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		userNS = oci.WithIDMappings(specMaps(nested.UIDs), specMaps(nested.GIDs))
	}
	spec, err := oci.New(
		userNS,
		oci.WithRootfs(filepath.Join(dir, "rootfs"), false),
		oci.WithProcess([]string{agentPath}, []string{"_SLOPBOX_AGENT=1"}, "/"),
		oci.WithUser(0, 0, nil),
		oci.WithHostname(hostname(rec.Name)),
		oci.WithNetwork(rec.Network),
		oci.WithMounts(append(mounts, specs.Mount{
			Destination: agentPath, Type: "bind", Source: initBin,
			Options: []string{"bind", "ro", "nosuid", "nodev"},
		})),
	)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	req := spawnRequest{ID: rec.ID, Dir: dir, LayersRoot: filepath.Dir(filepath.Dir(rec.Layers[0])), Spec: spec}
	if req.Seccomp, err = b.seccomp.get(spec.Linux.Seccomp); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	for _, l := range rec.Layers {
		rel, err := filepath.Rel(req.LayersRoot, l)
		if err != nil {
			return err
		}
		req.Layers = append(req.Layers, rel)
	}
	pid, err := b.spawnerFor("").spawn(ctx, b.store.Mapping(), &req, lnFile, wsMount)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	rec.Pid = pid
	start, _, ok := procStart(pid)
	if !ok {
		return fmt.Errorf("start: sandbox init %d exited at once", pid)
	}
	rec.PidStart = start
	if err := b.applyLimits(rec); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := b.state.write(rec); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
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

// listenAgent binds PID 1's socket. A path longer than sun_path is reached
// through a directory fd.
func listenAgent(path string) (*net.UnixListener, error) {
	addr := path
	if len(path) > 100 {
		d, err := os.Open(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		addr = fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(path))
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
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

// initBinary returns a copy of this (static) binary in the store that root
// of the user namespace can read, to bind-mount as every sandbox's PID 1.
func (b *Backend) initBinary() (string, error) {
	b.initOnce.Do(func() { b.initPath, b.initErr = b.installInit() })
	return b.initPath, b.initErr
}

func (b *Backend) installInit() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if env := os.Getenv("SLOPBOX_INIT"); env != "" {
		self = env
	}
	f, err := elf.Open(self)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", self, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			return "", fmt.Errorf("%s is dynamically linked, but it must run as the sandbox's init inside any image: build it with -ldflags '-extldflags -static' (see the Makefile), or point SLOPBOX_INIT at a static slopbox binary", self)
		}
	}
	f.Close()
	fi, err := os.Stat(self)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(b.root, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	os.Chmod(dir, 0o755)
	dst := filepath.Join(dir, fmt.Sprintf("init-%x-%x", fi.Size(), fi.ModTime().UnixNano()))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	src, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".init-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return dst, os.Rename(tmp.Name(), dst)
}

// startInit mounts the sandbox's root filesystem and has libcontainer start
// its PID 1. Preconditions: in the spawn server, as root of the user
// namespace, in its private mount namespace.
func startInit(req *spawnRequest, listener, wsMount *os.File) (int, error) {
	t0 := time.Now()
	tr := func(what string) {
		if os.Getenv("SLOPBOX_TRACE") != "" {
			fmt.Fprintf(os.Stderr, "TRACE %s %.2f\n", what, float64(time.Since(t0).Microseconds())/1000)
		}
	}
	defer tr("done")
	upper, work, rootfs := filepath.Join(req.Dir, "upper"), filepath.Join(req.Dir, "work"), filepath.Join(req.Dir, "rootfs")
	for _, d := range []string{upper, work, rootfs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	// A restarted sandbox keeps its upper layer; libcontainer's state of the
	// previous init is stale.
	if err := os.RemoveAll(filepath.Join(req.Dir, "lc")); err != nil {
		return 0, err
	}
	// lowerdir lists the newest layer first; relative paths keep the option
	// string short enough for images with many layers.
	lower := slices.Clone(req.Layers)
	slices.Reverse(lower)
	if err := os.Chdir(req.LayersRoot); err != nil {
		return 0, err
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", strings.Join(lower, ":"), upper, work)
	if err := unix.Mount("overlay", rootfs, "overlay", unix.MS_NODEV, data); err != nil {
		return 0, fmt.Errorf("mount overlay root filesystem (kernel 5.11 or later is needed for overlayfs in a user namespace): %w", err)
	}
	// The container gets its own copies of these mounts; this namespace
	// lets go of them as soon as it has started.
	defer unix.Unmount(rootfs, unix.MNT_DETACH)
	if wsMount != nil {
		ws := filepath.Join(req.Dir, "ws")
		if err := attachMount(wsMount, ws); err != nil {
			return 0, err
		}
		defer unix.Unmount(ws, unix.MNT_DETACH)
	}
	tr("overlay")
	if err := os.Chdir(req.Dir); err != nil {
		return 0, err
	}
	env := req.Spec.Process.Env
	extra := []*os.File{listener}
	if len(req.Seccomp) > 0 {
		// PID 1 loads the filter compiled by the host (seccomp_linux.go)
		// instead of libcontainer compiling it again here.
		r, w, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		_, err = w.Write(req.Seccomp) // a few KiB: fits the pipe
		w.Close()
		if err != nil {
			r.Close()
			return 0, err
		}
		defer r.Close()
		extra = append(extra, r)
		env = append(slices.Clone(env), fmt.Sprintf("_SLOPBOX_SECCOMP_FD=%d", 2+len(extra)))
		req.Spec.Linux.Seccomp = nil
	}
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName:      req.ID,
		Spec:            req.Spec,
		RootlessEUID:    false,
		RootlessCgroups: true,
	})
	if err != nil {
		return 0, fmt.Errorf("runtime config: %w", err)
	}
	tr("specconv")
	c, err := libcontainer.Create(filepath.Join(req.Dir, "lc"), req.ID, cfg)
	if err != nil {
		return 0, fmt.Errorf("create container: %w", err)
	}
	tr("create")
	p := &libcontainer.Process{
		Args:       req.Spec.Process.Args,
		Env:        env,
		Cwd:        "/",
		Init:       true,
		ExtraFiles: extra,
	}
	if err := c.Run(p); err != nil {
		c.Destroy()
		return 0, fmt.Errorf("start sandbox init: %w", err)
	}
	pid, err := p.Pid()
	if err != nil {
		return 0, err
	}
	return pid, nil
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
	cg := &cgroups.Cgroup{Name: rec.ID, Parent: cgroupParent, Resources: res, Rootless: os.Geteuid() != 0}
	m, err := cgmanager.New(cg)
	if err == nil {
		err = m.Apply(rec.Pid)
		if err == nil {
			err = m.Set(res)
		}
		if err != nil {
			m.Destroy()
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

// cgroupParent groups the sandboxes' cgroups in every hierarchy.
const cgroupParent = "slopbox"

// cgroupManager reattaches to a sandbox's cgroup.
func cgroupManager(rec *record) (cgroups.Manager, error) {
	if len(rec.Cgroups) == 0 {
		return nil, nil
	}
	cg := &cgroups.Cgroup{Name: rec.ID, Parent: cgroupParent, Resources: &cgroups.Resources{SkipDevices: true}, Rootless: os.Geteuid() != 0}
	return cgmanager.NewWithPaths(cg, maps.Clone(rec.Cgroups))
}
