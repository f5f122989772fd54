// Package userns runs slopbox work inside a user namespace whose root is the
// invoking user and whose other ids come from the user's subordinate range.
//
// Store writes (layer extraction) and, later, sandbox set-up happen there, so
// that files keep their image ownership on disk (shifted into the
// subordinate range) and container root is never host root, also when
// slopbox itself runs as root.
//
// A process gains capabilities in a new user namespace only when it execs as
// a mapped uid 0, and the map of an unprivileged user can only be written by
// the set-uid newuidmap/newgidmap helpers from outside. So the child starts
// unmapped, waits on a pipe while the parent writes the maps, and then execs
// itself once more (stage 2), now as root of the namespace. When this
// process may write the maps itself (root, or a single self-mapping), Go
// writes them between the fork and the one exec, which is stage 2 at once.
// Programs using this package call Init first thing (reexec.Init does,
// from an init function).
//
// A helper outlives the host process that started it, as it always did:
// the fork's parent death signal guards the set-up, and stage 2 clears it
// (the stage-2 exec of the newuidmap way cleared it by gaining
// capabilities; the one-exec way keeps it, so stage1.c, or Init without
// cgo, clears it on the main thread). The spawn server relies on it: as
// root, prune finds a half-started libcontainer init by the files it holds
// on the server's idmapped mounts, whose paths read as the state
// directory's only while the server's mount namespace lives.
package userns

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// IDMap maps container ids [ContainerID, ContainerID+Size) to host ids from HostID.
type IDMap struct {
	ContainerID uint32 `json:"container_id"`
	HostID      uint32 `json:"host_id"`
	Size        uint32 `json:"size"`
}

// Mapping is the id mapping slopbox uses for the current user.
type Mapping struct {
	UIDs []IDMap `json:"uids"`
	GIDs []IDMap `json:"gids"`
	// Degraded is set when no subordinate range exists: only the user's own
	// id is mapped and image ownership cannot be preserved.
	Degraded bool `json:"degraded,omitempty"`
	// Warning explains Degraded with a remedy.
	Warning string `json:"-"`
}

// DefaultRootRange is used for root when /etc/subuid has no "root" entry:
// container ids 0..65535 become host ids 1_000_000_000..+65535, far above
// any real account.
const (
	DefaultRootBase = 1_000_000_000
	DefaultSize     = 65536
)

const stageEnv = "_SLOPBOX_USERNS_STAGE"

var inside bool

// Inside reports whether this process is a stage-2 child: root of a
// namespace set up by Run.
func Inside() bool { return inside }

// Init handles the two re-exec stages. It returns normally in every process
// that is not a stage-1 child.
func Init() {
	switch os.Getenv(stageEnv) {
	case "join":
		// stage1.c joins before the Go runtime starts (setns of a user
		// namespace needs a single thread); without cgo nothing did.
		fmt.Fprintln(os.Stderr, "slopbox: joining a user namespace needs a build with cgo")
		os.Exit(125)
	case "1":
		// Wait until the parent has written our maps, then exec again so the
		// kernel grants us the full capability set of the namespace. With
		// cgo, stage1.c has done this before the Go runtime started.
		sync := os.NewFile(3, "userns-sync")
		var b [1]byte
		if n, _ := sync.Read(b[:]); n != 1 {
			fmt.Fprintln(os.Stderr, "slopbox: user namespace set-up was aborted")
			os.Exit(125)
		}
		sync.Close()
		os.Setenv(stageEnv, "2")
		err := unix.Exec("/proc/self/exe", os.Args, os.Environ())
		fmt.Fprintf(os.Stderr, "slopbox: re-exec in user namespace: %v\n", err)
		os.Exit(125)
	case "2":
		// As stage1.c does with cgo (Init runs from an init function, on
		// the main thread, which holds the signal).
		unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0)
		os.Unsetenv(stageEnv)
		inside = true
	}
}

// Current returns the mapping for the effective user: root of the
// namespace is the user itself (root: the start of root's range), and
// ids 1..65535 come from /etc/subuid and /etc/subgid.
func Current() (Mapping, error) {
	euid, egid := uint32(os.Geteuid()), uint32(os.Getegid())
	name := strconv.Itoa(int(euid))
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	subU, errU := readSubID("/etc/subuid", name, euid)
	subG, errG := readSubID("/etc/subgid", name, euid)
	if euid == 0 {
		// Root maps the whole container range into its subordinate range,
		// so container root is an unprivileged host id.
		if errU != nil {
			subU = IDMap{HostID: DefaultRootBase, Size: DefaultSize}
		}
		if errG != nil {
			subG = IDMap{HostID: DefaultRootBase, Size: DefaultSize}
		}
		size := min(subU.Size, subG.Size, DefaultSize)
		if subU.HostID == 0 || subG.HostID == 0 {
			// No sandbox id may ever be host root (SPEC "Security decisions").
			return Mapping{}, fmt.Errorf("root's subordinate range in /etc/subuid or /etc/subgid starts at 0, so container root would be host root: give root a range away from 0 (for example \"root:1000000000:65536\")")
		}
		return Mapping{
			UIDs: []IDMap{{0, subU.HostID, size}},
			GIDs: []IDMap{{0, subG.HostID, size}},
		}, nil
	}
	m := Mapping{
		UIDs: []IDMap{{0, euid, 1}},
		GIDs: []IDMap{{0, egid, 1}},
	}
	if errU != nil || errG != nil {
		m.Degraded = true
		start := FreeRange(DefaultSize)
		m.Warning = fmt.Sprintf("no subordinate id range for user %s: image file ownership cannot be preserved and only uid 0 exists in containers; add \"%s:%d:%d\" to /etc/subuid and /etc/subgid (a range no other entry uses)", name, name, start, DefaultSize)
		return m, nil
	}
	if _, err := exec.LookPath("newuidmap"); err != nil {
		m.Degraded = true
		m.Warning = "newuidmap/newgidmap not found: install the uidmap package to use the subordinate id range"
		return m, nil
	}
	m.UIDs = append(m.UIDs, IDMap{1, subU.HostID, min(subU.Size, DefaultSize-1)})
	m.GIDs = append(m.GIDs, IDMap{1, subG.HostID, min(subG.Size, DefaultSize-1)})
	return m, nil
}

// readSubID returns the first range for user name (or numeric uid) in file.
func readSubID(file, name string, uid uint32) (IDMap, error) {
	f, err := os.Open(file)
	if err != nil {
		return IDMap{}, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(strings.TrimSpace(s.Text()), ":")
		if len(fields) != 3 || (fields[0] != name && fields[0] != strconv.Itoa(int(uid))) {
			continue
		}
		start, err1 := strconv.ParseUint(fields[1], 10, 32)
		size, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 != nil || err2 != nil || size == 0 {
			continue
		}
		return IDMap{HostID: uint32(start), Size: uint32(size)}, nil
	}
	return IDMap{}, fmt.Errorf("no entry for %s in %s", name, file)
}

// FreeRange returns the start of a range of size subordinate ids, from
// 100000 up, that overlaps no entry of /etc/subuid or /etc/subgid (any
// user's): the range to suggest to a user who has none.
func FreeRange(size uint32) uint32 {
	return freeRange(size, "/etc/subuid", "/etc/subgid")
}

func freeRange(size uint32, files ...string) uint32 {
	type span struct{ start, end uint64 } // end exclusive
	var used []span
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Split(strings.TrimSpace(line), ":")
			if len(fields) != 3 {
				continue
			}
			start, err1 := strconv.ParseUint(fields[1], 10, 32)
			n, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 == nil && err2 == nil && n > 0 {
				used = append(used, span{start, start + n})
			}
		}
	}
	start := uint64(100000)
	for moved := true; moved; {
		moved = false
		for _, u := range used {
			if start < u.end && u.start < start+uint64(size) {
				start, moved = u.end, true
			}
		}
	}
	return uint32(start)
}

// ToHost translates a container id through maps; ok is false when unmapped.
func ToHost(maps []IDMap, id uint32) (uint32, bool) {
	for _, m := range maps {
		if id >= m.ContainerID && id-m.ContainerID < m.Size {
			return m.HostID + (id - m.ContainerID), true
		}
	}
	return 0, false
}

// FromHost returns the container id that host id maps to under maps.
func FromHost(maps []IDMap, id uint32) (uint32, bool) {
	for _, m := range maps {
		if id >= m.HostID && id-m.HostID < m.Size {
			return m.ContainerID + (id - m.HostID), true
		}
	}
	return 0, false
}

// Command returns a command that runs this binary with args inside a new
// user and mount namespace with mapping m. Start it with Start.
func Command(args []string) *exec.Cmd {
	cmd := CommandPath("/proc/self/exe", args)
	cmd.Args[0] = os.Args[0]
	return cmd
}

// CommandPath is Command for another program, one that calls Init first
// thing (as reexec.Init does).
func CommandPath(program string, args []string) *exec.Cmd {
	cmd := exec.Command(program, args...)
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// CommandJoin is CommandPath for a program that joins the user namespace
// open as ns (which this process's user owns) instead of making one, and
// takes a mount namespace of its own (stage1.c, which needs cgo). Start it
// with cmd.Start: it has no maps to wait for. Fd 3 in it is ns; files
// after it keep their numbers, as with Start.
func CommandJoin(program string, args []string, ns *os.File) *exec.Cmd {
	cmd := exec.Command(program, args...)
	if program == "/proc/self/exe" {
		cmd.Args[0] = os.Args[0]
	}
	cmd.Env = append(os.Environ(), stageEnv+"=join")
	cmd.ExtraFiles = []*os.File{ns}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Start starts cmd (from Command) and writes the maps of m for it.
//
// When this process may write the maps itself (root, or a single
// self-mapping), Go's parent side of the fork writes them before it lets
// the child exec (SysProcAttr.UidMappings), so the child execs once,
// already root of its namespace, with no stage-1 exec waiting for them.
// Fd 3 is then closed in the child, as the stage-1 exec closes it, so the
// files after it keep their numbers.
func Start(cmd *exec.Cmd, m Mapping) error {
	root := os.Geteuid() == 0
	if root || selfMapping(m) {
		cmd.ExtraFiles = append([]*os.File{nil}, cmd.ExtraFiles...)
		cmd.Env = append(cmd.Env, stageEnv+"=2")
		cmd.SysProcAttr.UidMappings = procIDMaps(m.UIDs)
		cmd.SysProcAttr.GidMappings = procIDMaps(m.GIDs)
		// Root's sandboxes may set their groups; an unprivileged
		// self-mapping must deny setgroups before its gid_map is written.
		cmd.SysProcAttr.GidMappingsEnableSetgroups = root
		var err error
		if root {
			// The namespace is created as the host id its root maps to
			// (startAs says why), and Go writes the maps from the same
			// thread, which keeps the capabilities too.
			err = startAs(cmd, m.UIDs[0].HostID, m.GIDs[0].HostID)
		} else {
			err = cmd.Start()
		}
		if err != nil {
			return fmt.Errorf("start user namespace helper: %w", err)
		}
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer w.Close()
	cmd.ExtraFiles = append([]*os.File{r}, cmd.ExtraFiles...)
	cmd.Env = append(cmd.Env, stageEnv+"=1")
	err = cmd.Start()
	r.Close()
	if err != nil {
		return fmt.Errorf("start user namespace helper: %w", err)
	}
	if err := writeMaps(cmd.Process.Pid, m); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return err
	}
	_, err = w.Write([]byte{1})
	return err
}

// startAs (root only) starts cmd, whose SysProcAttr asks for a new user
// namespace, from a thread whose ids are uid and gid, so that the
// namespace belongs to them and not to host root: the kernel charges the
// per-user counts of everything in it (inotify instances, user
// namespaces) to its owner, and one sandbox holding host root's 128
// inotify instances made inotify_init fail for every other sandbox and for
// host root itself. Only this locked thread changes ids (raw
// syscalls, not Go's all-threads Setuid; the runtime starts no thread from
// a locked one); its saved uid stays 0 and its capabilities effective, so
// creating the namespace stays a privileged act, and it returns to its own
// ids before it is unlocked (a thread that cannot is left locked, and
// ends with the goroutine).
func startAs(cmd *exec.Cmd, uid, gid uint32) error {
	runtime.LockOSThread()
	ruid, euid, suid := unix.Getresuid()
	rgid, egid, sgid := unix.Getresgid()
	groups, err := unix.Getgroups()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	restore := func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(ruid), uintptr(euid), uintptr(suid)); e != 0 {
			return e
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(rgid), uintptr(egid), uintptr(sgid)); e != 0 {
			return e
		}
		var p unsafe.Pointer
		g := make([]uint32, len(groups))
		for i, v := range groups {
			g[i] = uint32(v)
		}
		if len(g) > 0 {
			p = unsafe.Pointer(&g[0])
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(g)), uintptr(p), 0); e != 0 {
			return e
		}
		return nil
	}
	err = func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("setgroups: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), 0); e != 0 {
			return fmt.Errorf("setresgid: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), 0); e != 0 {
			return fmt.Errorf("setresuid: %w", e)
		}
		// A non-zero euid cleared the effective set; the permitted one
		// stays (saved uid 0).
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return fmt.Errorf("capget: %w", err)
		}
		data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fmt.Errorf("capset: %w", err)
		}
		return cmd.Start()
	}()
	if rerr := restore(); rerr != nil {
		// Leave the thread locked: it ends with this goroutine.
		return errors.Join(err, fmt.Errorf("restore this thread's ids: %w", rerr))
	}
	runtime.UnlockOSThread()
	return err
}

// selfMapping reports whether m maps only the user's own ids, which an
// unprivileged user may write without newuidmap.
func selfMapping(m Mapping) bool {
	return len(m.UIDs) == 1 && m.UIDs[0].Size == 1 && len(m.GIDs) == 1 && m.GIDs[0].Size == 1 &&
		m.UIDs[0].HostID == uint32(os.Geteuid()) && m.GIDs[0].HostID == uint32(os.Getegid())
}

func procIDMaps(maps []IDMap) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(maps))
	for i, m := range maps {
		out[i] = syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}

// writeMaps writes m for process pid through the set-uid helpers.
func writeMaps(pid int, m Mapping) error {
	// The two helpers are independent set-uid programs: run them together.
	errs := make(chan error, 2)
	for _, h := range []struct {
		bin  string
		maps []IDMap
	}{{"newuidmap", m.UIDs}, {"newgidmap", m.GIDs}} {
		go func() {
			args := append([]string{strconv.Itoa(pid)}, strings.Fields(format(h.maps, " "))...)
			if out, err := exec.Command(h.bin, args...).CombinedOutput(); err != nil {
				errs <- fmt.Errorf("%s %s: %w: %s (check /etc/subuid and /etc/subgid)", h.bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
				return
			}
			errs <- nil
		}()
	}
	return errors.Join(<-errs, <-errs)
}

func format(maps []IDMap, sep string) string {
	var b strings.Builder
	for _, m := range maps {
		fmt.Fprintf(&b, "%d %d %d%s", m.ContainerID, m.HostID, m.Size, sep)
	}
	return b.String()
}

// Nested describes, rootless, a user namespace nested inside the one of
// Mapping (whose root is the invoking user) in which container uid:gid is
// that outer root, so files this user writes into a bind-mounted workspace
// belong to the workspace's owner. Container ids below it move up by one,
// ids above it stay. Layers for such a sandbox are extracted with Shift
// applied to their owners, so the image looks the same from inside.
type Nested struct {
	Key        string // "" when no nesting is needed
	UIDs, GIDs []IDMap
	uid, gid   uint32
}

// NestedFor returns the nesting for a sandbox user. None is needed for root,
// for container root, or without a subordinate range.
func (m Mapping) NestedFor(uid, gid uint32) Nested {
	if os.Geteuid() == 0 || m.Degraded || (uid == 0 && gid == 0) || uid >= DefaultSize || gid >= DefaultSize {
		return Nested{}
	}
	return Nested{Key: fmt.Sprintf("u%d-g%d", uid, gid), UIDs: nest(uid), GIDs: nest(gid), uid: uid, gid: gid}
}

// ParseNested rebuilds a Nested from its Key.
func ParseNested(key string) (Nested, error) {
	var uid, gid uint32
	if _, err := fmt.Sscanf(key, "u%d-g%d", &uid, &gid); err != nil || uid >= DefaultSize || gid >= DefaultSize {
		return Nested{}, fmt.Errorf("bad id mapping key %q", key)
	}
	return Nested{Key: key, UIDs: nest(uid), GIDs: nest(gid), uid: uid, gid: gid}, nil
}

// nest maps container id u to outer 0, 0..u-1 to 1..u and u+1.. to itself.
func nest(u uint32) []IDMap {
	if u == 0 {
		return []IDMap{{0, 0, DefaultSize}}
	}
	out := []IDMap{{ContainerID: 0, HostID: 1, Size: u}, {ContainerID: u, HostID: 0, Size: 1}}
	if u+1 < DefaultSize {
		out = append(out, IDMap{ContainerID: u + 1, HostID: u + 1, Size: DefaultSize - u - 1})
	}
	return out
}

// Shift returns the outer owner of a file the nested sandbox must see as
// uid:gid.
func (n Nested) Shift(uid, gid int) (int, int) {
	return shiftID(uid, n.uid), shiftID(gid, n.gid)
}

func shiftID(id int, u uint32) int {
	switch {
	case id == int(u):
		return 0
	case id < int(u):
		return id + 1
	}
	return id
}
