package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/gofrs/flock"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/atomicfile"
	"github.com/slopbox/slopbox/oci"
	"github.com/slopbox/slopbox/sandbox/internal/spawnd"
)

// Sentinel errors, checked with errors.Is.
var (
	ErrNotFound  = errdefs.ErrNotFound.WithMessage("no such sandbox")
	ErrNameInUse = errdefs.ErrConflict.WithMessage("sandbox name is already in use")
)

// record is a sandbox's state on disk (state.json), shared by every slopbox
// process of the user.
type record struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Hostname  string            `json:"hostname,omitempty"`
	Image     string            `json:"image"`
	ImageID   string            `json:"image_id"`
	Created   time.Time         `json:"created"`
	Pid       int               `json:"pid"`
	PidStart  uint64            `json:"pid_start"`
	Workspace string            `json:"workspace,omitempty"`
	Workdir   string            `json:"workdir"`
	Cwd       string            `json:"cwd"`
	User      identity          `json:"user"`
	GroupAdd  []uint32          `json:"group_add,omitempty"` // added to every command's groups
	Layers    []string          `json:"layers"`
	MapKey    string            `json:"map_key,omitempty"` // id mapping variant (rootless, non-root user)
	Env       map[string]string `json:"env"`               // image < host (include_os_env) < spec < spawn
	Setup     []string          `json:"setup,omitempty"`
	NoSetup   bool              `json:"disable_setup,omitempty"`
	Keep      bool              `json:"keep,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Network   string            `json:"network"`
	// Nets are its user-defined networks (Network is then bridge, for
	// its outbound access, or none when they are all internal).
	Nets []netAttach `json:"networks,omitempty"`
	// NetJoined (rootless): its PID 1 was started in the network helper's
	// user namespace, so the helper may give it interfaces.
	NetJoined  bool     `json:"net_joined,omitempty"`
	ExtraHosts []string `json:"extra_hosts,omitempty"`
	// AllowHostLoopback: a bridge sandbox may reach the host's loopback.
	AllowHostLoopback bool     `json:"allow_host_loopback,omitempty"`
	DNS               *oci.DNS `json:"dns,omitempty"`
	// Reserved: created (docker create) with its PID 1 already started,
	// from the warm pool when one is ready, but not yet started: it runs
	// nothing, counts as not running, and start only runs its command.
	Reserved bool `json:"reserved,omitempty"`
	// Paused: its processes are stopped (Pause).
	Paused bool `json:"paused,omitempty"`
	// Ports are the published ports as asked for (host port 0: any);
	// Bound, the same with the host ports bound at the last start.
	Ports      []backend.PortMapping `json:"ports,omitempty"`
	Bound      []backend.PortMapping `json:"bound_ports,omitempty"`
	ReadOnly   bool                  `json:"readonly_rootfs,omitempty"`
	AutoRemove bool                  `json:"auto_remove,omitempty"`
	Disposable bool                  `json:"disposable,omitempty"` // backend.SpawnSpec.Disposable
	CapAdd     []string              `json:"cap_add,omitempty"`
	CapDrop    []string              `json:"cap_drop,omitempty"`
	Unconfined bool                  `json:"seccomp_unconfined,omitempty"`
	// Build marks a build step (SpawnBuildStep): setid modes allowed.
	Build      bool              `json:"build_step,omitempty"`
	Limits     backend.Limits    `json:"limits"`
	Unenforced []string          `json:"unenforced,omitempty"`
	Cgroups    map[string]string `json:"cgroups,omitempty"`
	// Scope names the systemd user scope (slopbox-SCOPE.scope) holding
	// the cgroup, when the user's manager made it: it is stopped through
	// systemd, which would keep a unit whose cgroup went behind its back.
	Scope   string        `json:"scope,omitempty"`
	Command []string      `json:"command,omitempty"` // the run command, for `ps` and `start`
	Mounts  []specs.Mount `json:"mounts,omitempty"`
	// SourceIDs are the inodes the bind mounts' sources (by destination)
	// were opened as at create: start mounts those or refuses.
	SourceIDs map[string]fileID `json:"source_ids,omitempty"`
	HandOver  []string          `json:"hand_over,omitempty"` // mount destinations whose root-owned entries go to the user
	// KeepOwners are mount destinations whose sources keep their host
	// owners: never idmapped onto the sandbox's user (backend.Mount).
	KeepOwners []string      `json:"keep_owners,omitempty"`
	Detach     DetachOptions `json:"detach,omitempty"` // how the main command was last attached
	// Owner is the slopbox process a foreground `run` or `env run` is
	// attached through (its pid and start time), from spawn until the
	// sandbox is next started: a running sandbox whose owner is gone was
	// left by a killed slopbox process, and prune removes it.
	Owner *procID `json:"owner,omitempty"`
	// Starting is the slopbox process that last started the main command
	// (run -d, start). Gone while no monitor runs: it was killed before
	// the command's monitor ran, and the command has no one to keep its
	// output or exit (nor, maybe, started): the sandbox counts as stopped,
	// for ps, wait and prune, though its PID 1 may still be there.
	Starting *procID `json:"starting,omitempty"`

	dir string // the sandbox's directory, once read or written

	// Broken says why the state file could not be read (missing: a create
	// that died half-way; truncated or corrupt). Such a record has only
	// its ID (and Name, when a name points at it); see killStragglers.
	Broken string `json:"-"`
}

// stateRoot holds one directory per sandbox: <root>/c/<id>/.
type stateRoot struct{ dir string }

func (r stateRoot) sandboxDir(id string) string { return filepath.Join(r.dir, id) }

const (
	stateFile  = "state.json"
	socketFile = "agent.sock"
)

func newID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// fullID reports whether ref has the form of a whole sandbox id (newID's).
func fullID(ref string) bool {
	if len(ref) != 16 {
		return false
	}
	_, err := hex.DecodeString(ref)
	return err == nil
}

// lockNew serialises sandbox creation, so two creates cannot take one name.
func (r stateRoot) lockNew() (*flock.Flock, error) {
	if err := os.MkdirAll(r.dir, 0o711); err != nil {
		return nil, err
	}
	l := flock.New(filepath.Join(r.dir, ".create.lock"))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return l, nil
}

// write records rec atomically. It is synced to disk (0.5 ms, a quarter
// of a ready spawn) only when the record must outlive a crash of the
// machine: a sandbox created to be started later, or kept for inspection.
// A running sandbox does not survive such a crash anyway, and a state file
// the crash truncated shows as broken and goes with prune.
func (r stateRoot) write(rec *record) error {
	rec.dir = r.sandboxDir(rec.ID)
	return r.writeIn(rec.dir, rec, rec.Keep || rec.Pid == 0)
}

// writeIn writes rec's state file into dir.
// A durable write survives a crash of the machine; a volatile one is
// atomic for readers only.
func (r stateRoot) writeIn(dir string, rec *record, durable bool) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if !durable {
		return atomicfile.WriteVolatile(filepath.Join(dir, stateFile), bytes.NewReader(b), 0o600)
	}
	return atomicfile.Write(filepath.Join(dir, stateFile), bytes.NewReader(b), 0o600)
}

func (r stateRoot) read(id string) (*record, error) {
	if !plainRef(id) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	b, err := os.ReadFile(filepath.Join(r.sandboxDir(id), stateFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("sandbox %s: corrupt state: %w", id, err)
	}
	rec.dir = r.sandboxDir(id)
	return &rec, nil
}

// names/<name> is a symlink to the id of the sandbox that has the name, so
// creating or finding a sandbox by name does not read every state file.
const namesDir = ".names"

// validName: ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$, docker's rule.
var validName = nameMatcher(128, "_.-")

// nameMatcher returns a check for names of 1 to max ASCII letters and
// digits, with the punctuation in extra allowed after the first.
func nameMatcher(max int, extra string) func(string) bool {
	return func(s string) bool {
		if s == "" || len(s) > max {
			return false
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
			if !alnum && (i == 0 || !strings.ContainsRune(extra, rune(c))) {
				return false
			}
		}
		return true
	}
}

// claimNameLocked gives name to id. Preconditions: the create lock is held.
func (r stateRoot) claimNameLocked(name, id string) error {
	if !validName(name) {
		return backend.InvalidValue("invalid sandbox name %q: use letters, digits, '_', '.' and '-', starting with a letter or digit", name)
	}
	if err := os.MkdirAll(filepath.Join(r.dir, namesDir), 0o700); err != nil {
		return err
	}
	link := filepath.Join(r.dir, namesDir, name)
	if old, err := os.Readlink(link); err == nil {
		if _, err := r.read(old); err == nil {
			return fmt.Errorf("%w: %q is used by sandbox %s (remove it with `slopbox rm -f %s`)", ErrNameInUse, name, old, name)
		}
		os.Remove(link) // left by a sandbox whose state is gone
	}
	return os.Symlink(id, link)
}

// releaseName drops name if it still points at id.
func (r stateRoot) releaseName(name, id string) {
	link := filepath.Join(r.dir, namesDir, name)
	if old, err := os.Readlink(link); err == nil && old == id {
		os.Remove(link)
	}
}

// list returns every sandbox record, oldest first. Directories whose state
// file is missing (a create that died half-way) or unreadable are returned
// as broken records.
func (r stateRoot) list() (recs, broken []*record, err error) {
	ents, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		rec, err := r.read(e.Name())
		if err != nil {
			broken = append(broken, r.brokenRecord(e.Name(), "", err))
			continue
		}
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Created.Before(recs[j].Created) })
	return recs, broken, nil
}

// brokenRecord stands for sandbox id, whose state could not be read.
func (r stateRoot) brokenRecord(id, name string, err error) *record {
	if name == "" {
		name = r.nameOf(id)
	}
	why := noStateYet
	if !errors.Is(err, ErrNotFound) {
		why = err.Error()
	}
	return &record{ID: id, Name: name, Broken: why}
}

// nameOf returns the name that points at id, if any.
func (r stateRoot) nameOf(id string) string {
	ents, _ := os.ReadDir(filepath.Join(r.dir, namesDir))
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(r.dir, namesDir, e.Name())); err == nil && target == id {
			return e.Name()
		}
	}
	return ""
}

// pruneNames removes names whose sandbox directory is gone.
func (r stateRoot) pruneNames() {
	ents, _ := os.ReadDir(filepath.Join(r.dir, namesDir))
	for _, e := range ents {
		link := filepath.Join(r.dir, namesDir, e.Name())
		if target, err := os.Readlink(link); err == nil {
			if _, err := os.Lstat(r.sandboxDir(target)); errors.Is(err, fs.ErrNotExist) {
				os.Remove(link)
			}
		}
	}
}

// noStateYet is why a sandbox directory without a state file is broken.
const noStateYet = "no state file (its create was interrupted)"

// sandboxMarker is in the environment of every sandbox's PID 1, so that
// its processes can be found when its state cannot be read.
const sandboxMarker = "_SLOPBOX_SANDBOX="

// spawnServerMarker is in the environment of a root-run sandbox's own
// spawn server (and of what it starts), which runs as the sandbox's id
// slice.
const spawnServerMarker = "_SLOPBOX_SPAWN_SERVER_OF="

// killStragglers kills what sandbox id (directory dir) may still run when
// its state file does not say: as root, its spawn server, which outlives
// a caller killed mid-spawn and could start a PID 1 after the rest is
// killed (so it goes first, and is waited for); its PID 1 (found by
// sandboxMarker in its environment; the pid namespace goes with it); and
// a libcontainer init that never became PID 1 (it holds a file under
// dir). It waits, bounded, until they are gone: then the sandbox's id
// slice runs nothing and may be freed.
func killStragglers(id, dir string) error {
	var errs []error
	if os.Geteuid() == 0 {
		errs = append(errs, waitKilled(id, killMarked(spawnServerMarker+id)))
	}
	killed := killMarked(sandboxMarker + id)
	// libcontainer's init ("<binary> init") before it became PID 1.
	killed = append(killed, spawnd.KillInits(dir, id)...)
	errs = append(errs, waitKilled(id, killed))
	return errors.Join(errs...)
}

// helperMarker is in the environment of a sandbox's host-side helpers
// (slirp4netns, the port forwarder), so that one started by a slopbox
// process killed before it recorded the helper's pid is still found.
const helperMarker = "_SLOPBOX_HELPER_OF="

// killMarked SIGKILLs every process with the environment entry kv.
func killMarked(kv string) []int {
	marker := []byte(kv + "\x00")
	return killWhere(func(proc string) bool {
		env, _ := os.ReadFile(proc + "/environ")
		return bytes.HasPrefix(env, marker) || bytes.Contains(env, append([]byte{0}, marker...))
	})
}

// killMonitorsOf SIGKILLs every monitor of sandbox id in the store at
// root (its command line: slopbox-monitor ROOT ID ...), however ROOT was
// spelled when it was started (relative to its working directory, with a
// trailing slash): one its starter did not live to record.
func killMonitorsOf(root, id string) []int {
	rootFi, err := os.Stat(root)
	if err != nil {
		return nil
	}
	return killWhere(func(proc string) bool {
		cmdline, _ := os.ReadFile(proc + "/cmdline")
		args := strings.Split(string(cmdline), "\x00")
		if len(args) < 3 || args[0] != "slopbox-monitor" || args[2] != id {
			return false
		}
		p := args[1]
		if !filepath.IsAbs(p) {
			p = filepath.Join(proc, "cwd", p)
		}
		fi, err := os.Stat(p)
		return err == nil && os.SameFile(fi, rootFi)
	})
}

// killWhere SIGKILLs every process (other than this one) that match,
// given its /proc directory, picks, and returns the pids it killed.
func killWhere(match func(proc string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var killed []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if match("/proc/"+e.Name()) && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, pid)
		}
	}
	return killed
}

// waitKilled waits, bounded, until the killed processes of sandbox id
// have gone: every thread of each (a pidfd is readable only then), not
// only its leader, which shows as a zombie while another thread of a
// multi-threaded process (a spawn server, a monitor once it runs the Go
// program) may still finish a write.
func waitKilled(id string, killed []int) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range killed {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone and reaped
		}
		for {
			left := time.Until(deadline)
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(max(left, 0)/time.Millisecond))
			if n > 0 {
				break
			}
			if err == unix.EINTR {
				continue
			}
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("wait for process %d of sandbox %s: %w", pid, id, err)
			}
			return fmt.Errorf("process %d of sandbox %s did not exit after SIGKILL", pid, id)
		}
		unix.Close(fd)
	}
	return nil
}

// plainRef reports whether ref can name a sandbox: no path separator,
// not "." or "..", nor anything else starting with a dot (a name begins
// with a letter or digit, an id is hex). A ref with a slash would read a
// record below another directory of the state root, such as one a sandbox
// wrote in its own upper directory (an Engine API path's {id} may carry
// an escaped "/").
func plainRef(ref string) bool {
	return ref != "" && !strings.HasPrefix(ref, ".") && !strings.ContainsAny(ref, "/\x00")
}

// find resolves a name, a full id or a unique id prefix.
func (r stateRoot) find(ref string) (*record, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: empty name", ErrNotFound)
	}
	if !plainRef(ref) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, ref)
	}
	if rec, err := r.read(ref); err == nil {
		return rec, nil
	} else if _, serr := os.Stat(r.sandboxDir(ref)); serr == nil && !strings.HasPrefix(ref, ".") && !strings.Contains(ref, "/") {
		return r.brokenRecord(ref, "", err), nil
	}
	if id, err := os.Readlink(filepath.Join(r.dir, namesDir, ref)); err == nil && validName(ref) {
		rec, err := r.read(id)
		if err == nil {
			return rec, nil
		}
		if _, serr := os.Stat(r.sandboxDir(id)); serr == nil {
			return r.brokenRecord(id, ref, err), nil
		}
	}
	if fullID(ref) {
		// Neither a sandbox nor a name: a prefix as long as an id is
		// that id. No scan of every record (a server's watch of a
		// removed container asks this of each one it watched).
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if len(ref) < 16 && strings.Trim(ref, "0123456789abcdef") == "" {
		// A short id (ps -q prints 12 characters): the directory's names
		// first, so removing many by short id does not read every record
		// for each.
		if ids := r.idsWithPrefix(ref); len(ids) == 1 {
			if rec, err := r.read(ids[0]); err == nil {
				return rec, nil
			}
		}
	}
	recs, broken, err := r.list()
	if err != nil {
		return nil, err
	}
	var match []*record
	for _, rec := range append(recs, broken...) {
		if rec.Name == ref {
			return rec, nil
		}
		if strings.HasPrefix(rec.ID, ref) {
			match = append(match, rec)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	return nil, fmt.Errorf("sandbox id prefix %q is ambiguous", ref)
}

// idsWithPrefix lists the sandbox ids (directory names) starting with
// prefix.
func (r stateRoot) idsWithPrefix(prefix string) []string {
	entries, _ := os.ReadDir(r.dir)
	var ids []string
	for _, e := range entries {
		if fullID(e.Name()) && strings.HasPrefix(e.Name(), prefix) {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// procStart returns the start time of pid (field 22 of /proc/pid/stat) and
// whether it is a zombie; ok is false when the process does not exist.
func procStart(pid int) (start uint64, zombie, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, false, false
	}
	start, _ = strconv.ParseUint(f[19], 10, 64)
	return start, f[0] == "Z", true
}

// procID names a process across pid reuse.
type procID struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// self is the calling process's procID.
func self() *procID {
	st, _, _ := procStart(os.Getpid())
	return &procID{Pid: os.Getpid(), Start: st}
}

// gone reports whether the process has exited (or is a zombie).
func (p *procID) gone() bool {
	st, zombie, ok := procStart(p.Pid)
	return !ok || zombie || st != p.Start
}

// orphaned reports whether rec was spawned for a foreground run whose
// slopbox process has died without being done with it.
func (rec *record) orphaned() bool {
	return rec.Owner != nil && rec.Owner.gone()
}

// alive reports whether the sandbox's PID 1 still runs (not a zombie, and
// the same process that was recorded, not a reused pid).
func (rec *record) alive() bool {
	start, zombie, ok := procStart(rec.Pid)
	return ok && !zombie && start == rec.PidStart
}

// running reports whether the sandbox runs: PID 1 alive, and started
// (not only created with PID 1 reserved), its main command not abandoned
// half-started.
func (rec *record) running() bool { return !rec.Reserved && rec.alive() && !rec.abandoned() }

// abandoned reports whether the process starting the main command died
// before the command's monitor ran (see Starting).
func (rec *record) abandoned() bool {
	if rec.Starting == nil || rec.dir == "" || !rec.Starting.gone() {
		return false
	}
	_, mon := monitorPid(rec.dir)
	return !mon
}

// killInit kills the sandbox's PID 1 (and with it the pid namespace) and
// waits, bounded, until it is gone.
func (rec *record) killInit(wait time.Duration) error {
	// Through a pidfd, opened before the process is checked: the signal
	// cannot reach a process that reused the pid, and the wait ends when
	// PID 1 has exited (its mounts gone with its namespaces), not at the
	// next tick of a poll.
	if rec.Pid <= 0 {
		return nil // never started, or a broken record
	}
	fd, err := unix.PidfdOpen(rec.Pid, 0)
	if err != nil {
		if !rec.alive() {
			return nil // gone, or the pid is another process's (or thread's) now
		}
		// No pidfd (an old kernel, a seccomp filter, no fd left): by pid.
		return rec.killInitByPid(wait)
	}
	defer unix.Close(fd)
	if !rec.alive() {
		return nil // exited, or the pid names another process now
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill sandbox init %d: %w", rec.Pid, err)
	}
	deadline := time.Now().Add(wait)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("sandbox init %d did not exit within %v", rec.Pid, wait)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		switch {
		case n > 0:
			return nil
		case err != nil && !errors.Is(err, unix.EINTR):
			return fmt.Errorf("wait for sandbox init %d: %w", rec.Pid, err)
		}
	}
}

// killInitByPid is killInit where pidfds are not available.
func (rec *record) killInitByPid(wait time.Duration) error {
	if err := syscall.Kill(rec.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill sandbox init %d: %w", rec.Pid, err)
	}
	deadline := time.Now().Add(wait)
	for rec.alive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox init %d did not exit within %v", rec.Pid, wait)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// fileID names an inode.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}
