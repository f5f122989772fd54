// Package ociruntime is slopbox as an OCI runtime: the runc command line's
// operations (create, start, state, kill, delete, exec, ps, pause, resume)
// on a bundle's config.json, through the same embedded libcontainer as
// slopbox's sandboxes, with libcontainer's own state directory layout, so
// containerd's runc shim (io.containerd.runc.v2 with BinaryName) and the
// runtime-spec's validation tools drive it as they drive runc.
//
// What slopbox adds to a bundle: Docker's seccomp profile when the bundle
// has none, and no_new_privileges. What the bundle decides: its
// namespaces, a user namespace included (containerd's rootfs belongs to
// host root, so one added here would leave container root unable to write
// its own files).
package ociruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runc/libcontainer/utils"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/oci"
)

// DefaultRoot is where container state lives by default (runc's is
// /run/runc): as root under /run, else under $XDG_RUNTIME_DIR.
func DefaultRoot() string {
	if os.Geteuid() == 0 {
		return "/run/slopbox-runc"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "slopbox-runc")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("slopbox-runc-%d", os.Geteuid()))
}

// Runtime holds the global options of the command line.
type Runtime struct {
	Root          string
	SystemdCgroup bool
}

// CreateOpts are create's options.
type CreateOpts struct {
	Bundle, PidFile, ConsoleSocket string
	NoPivot, NoNewKeyring          bool
}

// ErrNotExist is returned for an unknown container; its text is the one
// containerd's shim looks for ("does not exist").
var ErrNotExist = errdefs.ErrNotFound.WithMessage("container does not exist")

func (r *Runtime) load(id string) (*libcontainer.Container, error) {
	if id == "" {
		return nil, errors.New("container id cannot be empty")
	}
	c, err := libcontainer.Load(r.Root, id)
	if errors.Is(err, libcontainer.ErrNotExist) {
		return nil, ErrNotExist
	}
	return c, err
}

// loadStatus loads a container and reads its status.
func (r *Runtime) loadStatus(id string) (*libcontainer.Container, libcontainer.Status, error) {
	c, err := r.load(id)
	if err != nil {
		return nil, 0, err
	}
	st, err := c.Status()
	return c, st, err
}

// LoadSpec reads a bundle's config.json.
func LoadSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("JSON specification file %s not found: %w", filepath.Join(bundle, "config.json"), err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if spec.Process == nil {
		return nil, errors.New("config.json has no process")
	}
	return &spec, nil
}

// hardenSpec adds slopbox's defaults that a bundle left out.
func hardenSpec(spec *specs.Spec) error {
	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	if spec.Linux.Seccomp == nil {
		def, err := oci.New()
		if err != nil {
			return err
		}
		spec.Linux.Seccomp = def.Linux.Seccomp
	}
	allowStatx(spec.Linux.Seccomp)
	spec.Process.NoNewPrivileges = true
	return nil
}

// allowStatx adds statx to a profile that allows newfstatat but does not
// name statx (profiles written before 2018, runtime-tools v0.9.0's
// default among them). libcontainer's init, after the filter is loaded,
// checks /proc's mount with statx(STATX_MNT_ID) before it execs, so such
// a profile would fail every container (runc 1.3 and later fail the
// same way). statx tells nothing newfstatat does not.
func allowStatx(s *specs.LinuxSeccomp) {
	if s == nil {
		return
	}
	fstatat := false
	for _, sc := range s.Syscalls {
		for _, n := range sc.Names {
			switch {
			case n == "statx":
				return
			case n == "newfstatat" && sc.Action == specs.ActAllow && len(sc.Args) == 0:
				fstatat = true
			}
		}
	}
	if fstatat && s.DefaultAction != specs.ActAllow {
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: []string{"statx"}, Action: specs.ActAllow})
	}
}

// Create sets the container up and leaves its process waiting for Start.
// The process inherits this process's stdio unless it has a terminal, whose
// master goes to the console socket.
func (r *Runtime) Create(id string, o CreateOpts) error {
	if id == "" {
		return errors.New("container id cannot be empty")
	}
	bundle, err := filepath.Abs(o.Bundle)
	if err != nil {
		return err
	}
	spec, err := LoadSpec(bundle)
	if err != nil {
		return err
	}
	if err := hardenSpec(spec); err != nil {
		return err
	}
	// The spec's relative paths (root.path) are the bundle's.
	if err := os.Chdir(bundle); err != nil {
		return err
	}
	rootless := os.Geteuid() != 0
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName:       id,
		UseSystemdCgroup: r.SystemdCgroup,
		NoPivotRoot:      o.NoPivot,
		NoNewKeyring:     o.NoNewKeyring,
		Spec:             spec,
		RootlessEUID:     rootless,
		RootlessCgroups:  rootless,
	})
	if err != nil {
		return err
	}
	cfg.Labels = append(cfg.Labels, "bundle="+bundle)
	if err := os.MkdirAll(r.Root, 0o711); err != nil {
		return err
	}
	c, err := libcontainer.Create(r.Root, id, cfg)
	if err != nil {
		return err
	}
	p, err := process(spec.Process)
	if err != nil {
		c.Destroy()
		return err
	}
	p.Init = true
	closers, err := stdio(p, spec.Process.Terminal, o.ConsoleSocket)
	defer closeAll(closers)
	if err == nil {
		err = c.Start(p)
	}
	if err == nil && o.PidFile != "" {
		err = writePid(o.PidFile, p)
	}
	if err != nil {
		if pid, perr := p.Pid(); perr == nil {
			unix.Kill(pid, unix.SIGKILL)
		}
		c.Destroy()
		return err
	}
	return nil
}

// Start runs the created container's process.
func (r *Runtime) Start(id string) error {
	c, st, err := r.loadStatus(id)
	if err != nil {
		return err
	}
	switch st {
	case libcontainer.Created:
		return c.Exec()
	case libcontainer.Stopped:
		return errors.New("cannot start a container that has stopped")
	default:
		return fmt.Errorf("cannot start an already running container")
	}
}

// State is runc's state output: the runtime-spec state and a few more
// fields runc prints.
type State struct {
	Version     string            `json:"ociVersion"`
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Rootfs      string            `json:"rootfs"`
	Created     time.Time         `json:"created"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Owner       string            `json:"owner"`
}

// State reports a container, stopped ones included: one snapshot of the
// loaded container and its status.
func (r *Runtime) State(id string) (*State, error) {
	c, err := r.load(id)
	if err != nil {
		return nil, err
	}
	status, err := c.Status()
	if err != nil {
		return nil, err
	}
	st, err := c.State()
	if err != nil {
		return nil, err
	}
	pid := st.InitProcessPid
	if status == libcontainer.Stopped {
		pid = 0
	}
	bundle, annotations := utils.Annotations(st.Config.Labels)
	return &State{
		Version: specs.Version, ID: id, Pid: pid, Status: status.String(), Bundle: bundle,
		Rootfs: st.Config.Rootfs, Created: st.Created, Annotations: annotations,
	}, nil
}

// Kill signals the container's process, or with all every process in it.
func (r *Runtime) Kill(id string, sig unix.Signal, all bool) error {
	c, st, err := r.loadStatus(id)
	if err != nil {
		return err
	}
	if st == libcontainer.Stopped {
		return errors.New("container not running")
	}
	if all && sig != unix.SIGKILL {
		// Without a cgroup (rootless on cgroup v1), those of its pid
		// namespace.
		pids, err := processes(c)
		if err != nil {
			return err
		}
		for _, pid := range pids {
			unix.Kill(pid, sig)
		}
		return nil
	}
	return c.Signal(sig)
}

// Delete removes a stopped or created container; force kills a running
// one first.
func (r *Runtime) Delete(id string, force bool) error {
	c, st, err := r.loadStatus(id)
	if errors.Is(err, ErrNotExist) && force {
		return nil
	}
	if err != nil {
		return err
	}
	switch st {
	case libcontainer.Stopped:
		return c.Destroy()
	case libcontainer.Created:
		return killAndDestroy(c)
	default:
		if !force {
			return fmt.Errorf("cannot delete container %s that is not stopped: %s", id, st)
		}
		return killAndDestroy(c)
	}
}

func killAndDestroy(c *libcontainer.Container) error {
	// A frozen process takes SIGKILL only once thawed.
	if st, err := c.Status(); err == nil && st == libcontainer.Paused {
		if err := c.Resume(); err != nil {
			return err
		}
	}
	if err := c.Signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
		return err
	}
	for i := 0; i < 100; i++ {
		if st, err := c.Status(); err == nil && st == libcontainer.Stopped {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c.Destroy()
}

// ExecOpts are exec's options.
type ExecOpts struct {
	PidFile, ConsoleSocket string
	Detach                 bool
}

// Exec runs p in the running container. Detached it returns once the
// process has started; otherwise it waits and returns its exit status.
func (r *Runtime) Exec(id string, p *specs.Process, o ExecOpts) (int, error) {
	c, st, err := r.loadStatus(id)
	if err != nil {
		return -1, err
	}
	if st != libcontainer.Running {
		return -1, fmt.Errorf("cannot exec in a container that is not running (%s)", st)
	}
	if p.Terminal && o.ConsoleSocket == "" {
		return -1, errors.New("a terminal needs --console-socket (slopbox oci hands the terminal's master to it)")
	}
	lp, err := process(p)
	if err != nil {
		return -1, err
	}
	t := true
	lp.NoNewPrivileges = &t
	closers, err := stdio(lp, p.Terminal, o.ConsoleSocket)
	defer closeAll(closers)
	if err != nil {
		return -1, err
	}
	if err := c.Run(lp); err != nil {
		return -1, err
	}
	if o.PidFile != "" {
		if err := writePid(o.PidFile, lp); err != nil {
			lp.Signal(unix.SIGKILL)
			return -1, err
		}
	}
	if o.Detach {
		return 0, nil
	}
	ps, err := lp.Wait()
	if ps == nil {
		return -1, err
	}
	if ws, ok := ps.Sys().(unix.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// Ps lists the host pids of the container's processes: its cgroup's,
// or, where it has none (rootless on cgroup v1), those in its init's pid
// namespace.
func (r *Runtime) Ps(id string) ([]int, error) {
	c, err := r.load(id)
	if err != nil {
		return nil, err
	}
	return processes(c)
}

// processes lists the container's processes as Ps does.
func processes(c *libcontainer.Container) ([]int, error) {
	pids, err := c.Processes()
	if err == nil && len(pids) > 0 {
		return pids, nil
	}
	if ns, nerr := pidsInNS(c); nerr == nil && len(ns) > 0 {
		return ns, nil
	}
	return pids, err
}

// pidsInNS lists the processes in the pid namespace of the container's
// init, for a container without a cgroup. A container sharing this
// process's pid namespace has no such list (it would be the host's).
func pidsInNS(c *libcontainer.Container) ([]int, error) {
	st, err := c.OCIState()
	if err != nil || st.Status == specs.StateStopped || st.Pid <= 0 {
		return nil, err
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", st.Pid))
	if err != nil {
		return nil, err
	}
	if self, _ := os.Readlink("/proc/self/ns/pid"); self == ns {
		return nil, errors.New("the container has no cgroup and shares the host's pid namespace: its processes cannot be listed")
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range ents {
		pid, perr := strconv.Atoi(e.Name())
		if perr != nil {
			continue
		}
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); l == ns {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Pause freezes the container (its cgroup's freezer).
func (r *Runtime) Pause(id string) error {
	c, err := r.load(id)
	if err != nil {
		return err
	}
	return c.Pause()
}

// Resume thaws it.
func (r *Runtime) Resume(id string) error {
	c, err := r.load(id)
	if err != nil {
		return err
	}
	return c.Resume()
}

// process converts a spec process as runc does.
func process(p *specs.Process) (*libcontainer.Process, error) {
	lp := &libcontainer.Process{
		Args: p.Args, Env: p.Env, UID: int(p.User.UID), GID: int(p.User.GID), Cwd: p.Cwd,
		Label: p.SelinuxLabel, NoNewPrivileges: &p.NoNewPrivileges, AppArmorProfile: p.ApparmorProfile,
		Scheduler: p.Scheduler, IOPriority: p.IOPriority,
	}
	if p.ConsoleSize != nil {
		lp.ConsoleWidth, lp.ConsoleHeight = uint16(p.ConsoleSize.Width), uint16(p.ConsoleSize.Height)
	}
	if c := p.Capabilities; c != nil {
		lp.Capabilities = &configs.Capabilities{Bounding: c.Bounding, Effective: c.Effective, Inheritable: c.Inheritable, Permitted: c.Permitted, Ambient: c.Ambient}
	}
	for _, g := range p.User.AdditionalGids {
		lp.AdditionalGroups = append(lp.AdditionalGroups, int(g))
	}
	for _, rl := range p.Rlimits {
		t, ok := rlimits[rl.Type]
		if !ok {
			return nil, fmt.Errorf("unknown rlimit %q", rl.Type)
		}
		lp.Rlimits = append(lp.Rlimits, configs.Rlimit{Type: t, Hard: rl.Hard, Soft: rl.Soft})
	}
	aff, err := configs.ConvertCPUAffinity(p.ExecCPUAffinity)
	if err != nil {
		return nil, err
	}
	lp.CPUAffinity = aff
	return lp, nil
}

var rlimits = map[string]int{
	"RLIMIT_CPU": unix.RLIMIT_CPU, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_DATA": unix.RLIMIT_DATA,
	"RLIMIT_STACK": unix.RLIMIT_STACK, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_RSS": unix.RLIMIT_RSS,
	"RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK,
	"RLIMIT_AS": unix.RLIMIT_AS, "RLIMIT_LOCKS": unix.RLIMIT_LOCKS, "RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING,
	"RLIMIT_MSGQUEUE": unix.RLIMIT_MSGQUEUE, "RLIMIT_NICE": unix.RLIMIT_NICE, "RLIMIT_RTPRIO": unix.RLIMIT_RTPRIO,
	"RLIMIT_RTTIME": unix.RLIMIT_RTTIME,
}

// stdio gives p this process's stdio, or with a terminal the console
// socket that receives its master. The returned files are closed once p
// has started.
func stdio(p *libcontainer.Process, terminal bool, consoleSocket string) ([]*os.File, error) {
	if !terminal {
		p.Stdin, p.Stdout, p.Stderr = os.Stdin, os.Stdout, os.Stderr
		return nil, nil
	}
	if consoleSocket == "" {
		return nil, errors.New("the process has a terminal: --console-socket is required")
	}
	conn, err := net.Dial("unix", consoleSocket)
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	f, err := conn.(*net.UnixConn).File()
	conn.Close()
	if err != nil {
		return nil, err
	}
	p.ConsoleSocket = f
	return []*os.File{f}, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// writePid writes the process's pid atomically (create, then rename).
func writePid(path string, p *libcontainer.Process) error {
	pid, err := p.Pid()
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ExampleSpec is runc spec's starting point: `sh` on a terminal in
// rootfs/, with the usual namespaces and mounts; rootless, adapted as
// runc spec --rootless does.
func ExampleSpec(rootless bool) *specs.Spec {
	s := specconv.Example()
	if rootless {
		specconv.ToRootless(s)
	}
	return s
}
