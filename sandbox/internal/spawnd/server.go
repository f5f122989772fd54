// Package spawnd is the spawn server: the helper that runs as root of the
// sandboxes' user namespace, in a mount namespace of its own, and starts
// each sandbox's PID 1 with libcontainer on the host's request. It also
// holds what runs inside a sandbox's start-up: libcontainer's init hook and
// PID 1 itself (agent.c).
//
// It is kept small on purpose. The slopbox binary carries a separate build
// of it (./slopbox-spawn) and runs that as the server, so that
// libcontainer's per-sandbox re-exec of the server's binary ("runc init")
// and PID 1 start a 5 MB program with a few package initialisers rather
// than the whole CLI. Any binary that imports sandbox can also serve itself.
package spawnd

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/lowerdirs"
	"github.com/slopbox/slopbox/internal/pidwatch"
	"github.com/slopbox/slopbox/internal/reexec"
)

// Handler is the re-exec handler name of the server.
const Handler = "sandbox-spawn-server"

// ConnFD is the server's end of its socket to the host (fd 3 is the user
// namespace set-up's sync pipe, or closed).
const ConnFD = 4

// MaxFDs: a request carries PID 1's listener, or (claim, as root) the
// detached bind mounts the host opened and cloned, in one message: the
// kernel's SCM_MAX_FD, 253.
const MaxFDs = 253

func init() {
	reexec.Register(Handler, serve)
	// libcontainer logs a harmless warning per rootless start.
	logrus.SetLevel(logrus.ErrorLevel)
}

// Op is what a Request asks for.
type Op string

const (
	// OpPrestart starts a sandbox's PID 1 over Dir, unclaimed: PID 1 serves
	// nothing and has none of the sandbox's own mounts yet. Every sandbox
	// starts this way; a Backend may also keep one ready ahead of need.
	OpPrestart Op = "prestart"
	// OpClaim gives a prestarted sandbox its mounts and hostname and lets
	// PID 1 serve. Until then no command can run in it.
	OpClaim Op = "claim"
	// OpDiscard stops a prestarted sandbox that was not claimed.
	OpDiscard Op = "discard"
	// OpRemove deletes the sandbox directory Dir.
	OpRemove Op = "remove"
)

// Request is what the host hands the server. Requests carry a sequence
// number and are served concurrently; the Response echoes it.
type Request struct {
	Seq uint64 `json:"seq"`
	Op  Op     `json:"op"`
	ID  string `json:"id,omitempty"`
	Dir string `json:"dir,omitempty"`

	// Prestart: the root filesystem's layers and the runtime spec, without
	// the sandbox's own mounts. The listener of PID 1 travels as an fd.
	LayersRoot string      `json:"layers_root,omitempty"`
	Layers     []string    `json:"layers,omitempty"` // relative to LayersRoot, oldest first
	Spec       *specs.Spec `json:"spec,omitempty"`
	// RootfsBytes, when set, bounds the root filesystem's writable layer.
	RootfsBytes int64 `json:"rootfs_bytes,omitempty"`
	// Volatile mounts the writable layer with overlayfs's volatile option
	// (no syncs to the disk): the sandbox goes with its command.
	Volatile bool `json:"volatile,omitempty"`
	// StartDeadline bounds the start of PID 1 (DefaultStartDeadline when 0).
	StartDeadline time.Duration `json:"start_deadline,omitempty"`
	// Seccomp is Spec's seccomp profile compiled by the host (u32 flags,
	// then BPF); when set, PID 1 loads it and libcontainer does not compile
	// the profile again.
	Seccomp []byte `json:"seccomp,omitempty"`
	// IDMapped (root, a sandbox with an id slice of its own): after the
	// listener come detached, idmapped clones of Dir and of LayersRoot
	// (read-only), which the server mounts over those paths in its mount
	// namespace before it uses them.
	IDMapped bool `json:"idmapped,omitempty"`

	// Claim: the sandbox's hostname and its bind mounts, in order.
	Hostname string  `json:"hostname,omitempty"`
	Mounts   []Mount `json:"mounts,omitempty"`
	// ReadOnlyRoot: the root filesystem is read-only; it is made writable
	// while the mountpoints are created, then read-only again.
	ReadOnlyRoot bool `json:"readonly_root,omitempty"`
}

// Mount is a bind mount made at claim time. Its options are always rbind,
// nosuid, nodev, and ro or rw.
type Mount struct {
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination"`
	ReadOnly    bool   `json:"ro,omitempty"`
	// FD: the source is the detached mount the request carries (as root
	// the host opens and clones every source), not Source.
	FD bool `json:"fd,omitempty"`
	// Dev and Ino, when set, are the source the host opened and checked
	// (rootless): the server mounts Source only if it opens that inode.
	Dev uint64 `json:"dev,omitempty"`
	Ino uint64 `json:"ino,omitempty"`
}

// Response answers a Request.
type Response struct {
	Seq   uint64 `json:"seq"`
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	// Errno is the error's errno, when it has one (a removal that met
	// ENOTEMPTY): the caller's errors.Is sees it.
	Errno syscall.Errno `json:"errno,omitempty"`
}

// ReadFrame reads one u32-length-prefixed frame.
func ReadFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.NativeEndian.Uint32(n[:])
	if size > 64<<20 {
		return nil, fmt.Errorf("frame of %d bytes", size)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}

// Frame prefixes b with its length.
func Frame(b []byte) []byte {
	return append(binary.NativeEndian.AppendUint32(nil, uint32(len(b))), b...)
}

type server struct {
	wmu  sync.Mutex // one response at a time on conn
	conn *net.UnixConn

	cwdMu sync.Mutex // held while the working directory matters

	mu      sync.Mutex
	pending map[string]*prestarted
	// layersMounted: the layers' directory mounted idmapped (IDMapped).
	layersMounted string

	inits *reaper
}

// prestarted is a sandbox whose PID 1 waits to be claimed.
type prestarted struct {
	pid   int
	claim *os.File // PID 1 serves once it reads a byte, exits on EOF
}

// WarmCodec builds, once per process, encoding/json's encoders and field
// tables for every type a request or a reply can hold (the runtime spec's
// are many): the first request otherwise pays for that reflection, about
// a millisecond, on the way to a sandbox's start. Both ends call it in a
// goroutine of their own before their first request.
var WarmCodec = sync.OnceFunc(func() {
	json.Marshal(Request{})
	json.Marshal(Response{})
})

// serve runs in the server: root of the user namespace, in a mount
// namespace of its own. It serves requests until the host end of the
// socket closes; prestarted sandboxes nobody claimed go with it. It
// outlives a host killed mid-request (package userns says why): it sees
// its connection close, finishes what it was doing (within the start
// deadline) and exits.
func serve() int {
	go WarmCodec()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintln(os.Stderr, "slopbox spawn server: make mounts private:", err)
		return 1
	}
	f := os.NewFile(ConnFD, "spawn-server")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "slopbox spawn server:", err)
		return 1
	}
	s := &server{conn: c.(*net.UnixConn), pending: map[string]*prestarted{}, inits: newReaper()}
	var wg sync.WaitGroup
	for {
		req, files, err := readRequest(s.conn)
		if err != nil {
			break // the host went away
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := s.handle(req, files)
			for _, f := range files {
				f.Close()
			}
			resp.Seq = req.Seq
			b, _ := json.Marshal(resp)
			s.wmu.Lock()
			s.conn.Write(Frame(b))
			s.wmu.Unlock()
		}()
	}
	wg.Wait()
	s.mu.Lock()
	for _, p := range s.pending {
		p.claim.Close()
	}
	s.mu.Unlock()
	return 0
}

func (s *server) handle(req *Request, files []*os.File) *Response {
	var resp Response
	var err error
	switch req.Op {
	case OpPrestart:
		if want := map[bool]int{false: 1, true: 3}[req.IDMapped]; len(files) != want {
			err = fmt.Errorf("prestart with %d fds, not %d (PID 1's listener, and the idmapped directories)", len(files), want)
			break
		}
		if req.IDMapped {
			if err = s.attachIDMapped(req, files[1], files[2]); err != nil {
				break
			}
		}
		resp.Pid, err = s.prestart(req, files[0])
	case OpClaim:
		resp.Pid, err = s.claim(req, files)
	case OpDiscard:
		err = s.discard(req.ID)
	case OpRemove:
		err = os.RemoveAll(req.Dir)
	default:
		err = fmt.Errorf("unknown request %q", req.Op)
	}
	if err != nil {
		resp.Error = err.Error()
		errors.As(err, &resp.Errno)
	}
	return &resp
}

func readRequest(conn *net.UnixConn) (*Request, []*os.File, error) {
	var n [4]byte
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	got, oobn, _, _, err := conn.ReadMsgUnix(n[:], oob)
	if err != nil {
		return nil, nil, err
	}
	var files []*os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, err
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				files = append(files, os.NewFile(uintptr(fd), "spawn-fd"))
			}
		}
	}
	if got < len(n) {
		if _, err := io.ReadFull(conn, n[got:]); err != nil {
			return nil, files, err
		}
	}
	size := binary.NativeEndian.Uint32(n[:])
	body := make([]byte, size)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, files, err
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, files, err
	}
	return &req, files, nil
}

// reaper waits for the sandbox inits this server started (they are its
// children), so a killed sandbox leaves no zombie behind while the server
// lives. It waits only for those pids, never for libcontainer's own
// helpers: each through a pidfd that says when it has exited, so an exit
// costs one wait however many sandboxes run (a scan of every init at each
// SIGCHLD cost a thousand waits per exit with a thousand sandboxes). An
// init no pidfd could be opened for is waited for at each SIGCHLD.
type reaper struct {
	mu   sync.Mutex
	pids map[int]bool // inits waited for at each SIGCHLD (no pidfd)
}

func newReaper() *reaper {
	r := &reaper{pids: map[int]bool{}}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		for range ch {
			r.mu.Lock()
			for pid := range r.pids {
				var ws unix.WaitStatus
				if p, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); p == pid || err == unix.ECHILD {
					delete(r.pids, pid)
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *reaper) add(pid int) {
	if _, ok := pidwatch.Watch(pid, func(fd int) {
		if !pidwatch.Reap(fd) {
			r.scan(pid) // at the next SIGCHLD
		}
	}); !ok {
		r.scan(pid)
	}
}

// scan has pid waited for at each SIGCHLD until it has been.
func (r *reaper) scan(pid int) {
	r.mu.Lock()
	r.pids[pid] = true
	r.mu.Unlock()
}

// prestart mounts the sandbox's root filesystem and has libcontainer start
// its PID 1, which waits to be claimed. Preconditions: in the server, as
// root of the user namespace, in its private mount namespace.
func (s *server) prestart(req *Request, listener *os.File) (int, error) {
	if req.ID == "" || req.Spec == nil || req.Spec.Process == nil || req.Spec.Linux == nil {
		return 0, errors.New("prestart: incomplete request")
	}
	upper, work, rootfs := filepath.Join(req.Dir, "upper"), filepath.Join(req.Dir, "work"), filepath.Join(req.Dir, "rootfs")
	if req.RootfsBytes > 0 {
		scratch, err := mountScratch(req.Dir, req.RootfsBytes)
		if err != nil {
			return 0, err
		}
		// The overlay holds its own reference; this namespace lets go.
		defer unix.Unmount(scratch, unix.MNT_DETACH)
		upper, work = filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
	}
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
	if err := s.mountRootfs(req, upper, work, rootfs); err != nil {
		return 0, err
	}
	// The container gets its own copy of this mount; this namespace lets
	// go of it as soon as it has started.
	defer unix.Unmount(rootfs, unix.MNT_DETACH)
	env := slices.Clone(req.Spec.Process.Env)
	extra := []*os.File{listener}
	if len(req.Seccomp) > 0 {
		r, err := seccompPipe(req.Seccomp)
		if err != nil {
			return 0, err
		}
		defer r.Close()
		extra = append(extra, r)
		env = append(env, fmt.Sprintf("_SLOPBOX_SECCOMP_FD=%d", 2+len(extra)))
		req.Spec.Linux.Seccomp = nil
	}
	claimR, claimW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer claimR.Close()
	extra = append(extra, claimR)
	env = append(env, fmt.Sprintf("_SLOPBOX_CLAIM_FD=%d", 2+len(extra)))
	pid, err := startInit(req, env, extra, claimR, claimW)
	if err != nil {
		return 0, err
	}
	s.inits.add(pid)
	s.mu.Lock()
	s.pending[req.ID] = &prestarted{pid: pid, claim: claimW}
	s.mu.Unlock()
	return pid, nil
}

// mountScratch mounts a tmpfs of size bytes at dir/scratch for the
// sandbox's writable layer, and returns its path: writes past it fail
// with ENOSPC, and it does not outlive the sandbox's PID 1.
func mountScratch(dir string, size int64) (string, error) {
	scratch := filepath.Join(dir, "scratch")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		return "", fmt.Errorf("size-limited root filesystem: %w", err)
	}
	return scratch, nil
}

// seccompPipe is the read end of a pipe that holds filter, the compiled
// seccomp filter PID 1 reads and loads itself.
func seccompPipe(filter []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = w.Write(filter) // a few KiB: fits the pipe
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// startInit has libcontainer create the container of req and start its
// init with env and extra (which holds claimR, the read end of its claim
// pipe), within req's start deadline, and returns its pid. On failure it
// closes claimW, the write end (and destroys a container it made).
func startInit(req *Request, env []string, extra []*os.File, claimR, claimW *os.File) (int, error) {
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName:      req.ID,
		Spec:            req.Spec,
		RootlessEUID:    false,
		RootlessCgroups: true,
		// No session keyring per sandbox (runc's --no-new-keyring): the
		// kernel lets a uid hold 200 keys, so sandboxes past about 195 on
		// one id failed to start, and keyctl, add_key and request_key
		// are refused by the seccomp profile anyway.
		NoNewKeyring: true,
	})
	if err != nil {
		claimW.Close()
		return 0, fmt.Errorf("runtime config: %w", err)
	}
	c, err := libcontainer.Create(filepath.Join(req.Dir, "lc"), req.ID, cfg)
	if err != nil {
		claimW.Close()
		return 0, fmt.Errorf("create container: %w", err)
	}
	p := &libcontainer.Process{
		Args:       req.Spec.Process.Args,
		Env:        env,
		Cwd:        "/",
		Init:       true,
		ExtraFiles: extra,
	}
	if err := runBounded(c, p, claimR, req.StartDeadline); err != nil {
		claimW.Close()
		c.Destroy()
		return 0, fmt.Errorf("start sandbox init: %w", err)
	}
	pid, err := p.Pid()
	if err != nil {
		claimW.Close()
		return 0, err
	}
	return pid, nil
}

// attachIDMapped mounts the idmapped clones of the sandbox's directory
// and of the layers' directory over their paths, in this server's mount
// namespace only (the host never sees them). The layers' mount is made
// once per server.
func (s *server) attachIDMapped(req *Request, dir, layers *os.File) error {
	if err := unix.MoveMount(int(dir.Fd()), "", unix.AT_FDCWD, req.Dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount the sandbox's directory idmapped: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.layersMounted == req.LayersRoot {
		return nil
	}
	if err := unix.MoveMount(int(layers.Fd()), "", unix.AT_FDCWD, req.LayersRoot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount the layers idmapped: %w", err)
	}
	s.layersMounted = req.LayersRoot
	return nil
}

// DefaultStartDeadline bounds how long libcontainer may take to start a
// sandbox's PID 1 (about 10 ms normally; far more on an emulated VM).
const DefaultStartDeadline = 30 * time.Second

// runBounded runs the container's init process p and kills it if it has
// not started within deadline (DefaultStartDeadline when 0): an image can
// make libcontainer's init block, for example with a FIFO where a file is
// read, and such a process must not be left behind. The init is found as
// the child of this server that holds mark, a pipe only it was given.
func runBounded(c *libcontainer.Container, p *libcontainer.Process, mark *os.File, deadline time.Duration) error {
	if deadline <= 0 {
		deadline = DefaultStartDeadline
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(p) }()
	t := time.NewTimer(deadline)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(mark.Fd()), &st); err == nil {
		// Only the init holds this pipe (it may be re-parented by now).
		KillLinked(fmt.Sprintf("pipe:[%d]", st.Ino))
	}
	err := <-done
	return fmt.Errorf("it did not start within %v and was killed (does the image hold a FIFO or device where a file is read?): %v", deadline, err)
}

// KillLinked SIGKILLs every process (other than this one) with an open
// file whose /proc/PID/fd link reads target (a pipe:[INODE], which reads
// the same in every mount namespace), and returns the pids killed.
func KillLinked(target string) []int {
	return killHolding("", func(link, _ string) bool { return link == target })
}

// KillInits SIGKILLs every libcontainer init (a process whose first
// argument is "init") of the container id whose state lies below dir (in
// dir/lc/id, as Create makes it), and returns the pids killed. An init is
// known by a file it holds below dir. But the link of a file opened
// through a mount of the spawn server's mount namespace reads a path
// relative to that mount once the namespace is gone (/lc/ID/exec.fifo,
// not DIR/lc/ID/exec.fifo: as root the server is killed first), and one
// of a file deleted since ends in " (deleted)": so an init is also known
// by a link naming lc/ID/, or by its holding one of the files in dir/lc
// (each init holds its exec.fifo from its fork until it execs the
// command).
func KillInits(dir, id string) []int {
	prefix := filepath.Clean(dir) + "/"
	type stateFile struct {
		path string
		fi   os.FileInfo
	}
	var state []stateFile
	lc := filepath.Join(dir, "lc")
	subs, _ := os.ReadDir(lc)
	for _, sub := range subs {
		files, _ := os.ReadDir(filepath.Join(lc, sub.Name()))
		for _, f := range files {
			p := filepath.Join(lc, sub.Name(), f.Name())
			if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
				state = append(state, stateFile{p, fi})
			}
		}
	}
	return killHolding("init", func(link, fdPath string) bool {
		if strings.HasPrefix(link, prefix) || id != "" && strings.Contains(link, "/lc/"+id+"/") {
			return true
		}
		if len(state) == 0 || !strings.HasPrefix(link, "/") {
			return false // pipe:[...], socket:[...], anon_inode:...
		}
		fi, err := os.Stat(fdPath) // the file itself, whatever its link reads
		if err != nil {
			return false
		}
		for _, s := range state {
			if os.SameFile(fi, s.fi) {
				// Still that file (not a new one on a freed inode)?
				now, err := os.Lstat(s.path)
				return err == nil && os.SameFile(now, fi)
			}
		}
		return false
	})
}

// killHolding SIGKILLs every process (other than this one; with arg1 set,
// only those whose first argument it is) with an open file that match
// picks, given the link of its fd and the fd's /proc path. Processes it
// may not inspect are passed over.
func killHolding(arg1 string, match func(link, fdPath string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var killed []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if arg1 != "" {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if args := strings.Split(string(cmdline), "\x00"); len(args) < 2 || args[1] != arg1 {
				continue
			}
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			fdPath := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
			if link, err := os.Readlink(fdPath); err == nil && match(link, fdPath) {
				if unix.Kill(pid, unix.SIGKILL) == nil {
					killed = append(killed, pid)
				}
				break
			}
		}
	}
	return killed
}

// outsideKernelFS resolves p's longest existing prefix (symlinks included)
// and refuses it inside /proc or /sys.
func outsideKernelFS(p string) error {
	rest := ""
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			real = path.Join(real, rest)
			for _, kernel := range []string{"/proc", "/sys"} {
				if real == kernel || strings.HasPrefix(real, kernel+"/") {
					return fmt.Errorf("it resolves to %s, inside %s", real, kernel)
				}
			}
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) || p == "/" {
			return err
		}
		rest = path.Join(path.Base(p), rest)
		p = path.Dir(p)
	}
}

// mountRootfs mounts the overlay of req's layers (lowerdir lists the newest
// first) at rootfs. Paths relative to the layers' directory keep the
// option string within a page for images with many layers; that needs
// the working directory, which prestarts running in parallel share.
func (s *server) mountRootfs(req *Request, upper, work, rootfs string) error {
	volatile := ""
	volatileLayer := req.Volatile && req.RootfsBytes == 0 // a tmpfs layer has nothing to sync
	if err := prepareVolatile(req.Dir, work, volatileLayer); err != nil {
		return err
	}
	if volatileLayer {
		volatile = ",volatile"
	}
	lower := lowerdirs.Of(req.Layers)
	abs := make([]string, len(lower))
	for i, l := range lower {
		abs[i] = filepath.Join(req.LayersRoot, l)
	}
	opts := func(lower []string) string {
		return fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", strings.Join(lower, ":"), upper, work) + volatile
	}
	data := opts(abs)
	if len(data) >= os.Getpagesize() {
		s.cwdMu.Lock()
		defer s.cwdMu.Unlock()
		if err := os.Chdir(req.LayersRoot); err != nil {
			return err
		}
		data = opts(lower)
	}
	if err := unix.Mount("overlay", rootfs, "overlay", unix.MS_NODEV, data); err != nil {
		// Say what is wrong: a layer gone from the store is the likely
		// cause; an old kernel only when nothing else is.
		for _, l := range abs {
			if _, serr := os.Stat(l); serr != nil {
				return fmt.Errorf("mount the root filesystem: the image's layer %s is missing from the store (%v): pull the image again", l, serr)
			}
		}
		hint := ""
		if errors.Is(err, unix.EINVAL) {
			hint = " (overlayfs in a user namespace needs Linux 5.11 or later)"
		}
		return fmt.Errorf("mount the root filesystem (overlay of %d layers): %w%s", len(abs), err, hint)
	}
	return nil
}

// take removes id from the prestarted sandboxes.
func (s *server) take(id string) (*prestarted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[id]
	if p == nil {
		return nil, fmt.Errorf("no prestarted sandbox %s", id)
	}
	delete(s.pending, id)
	return p, nil
}

// claim puts the sandbox's mounts and hostname in place and lets its PID 1
// serve. On failure PID 1 exits (the claim pipe closes unwritten).
func (s *server) claim(req *Request, files []*os.File) (int, error) {
	p, err := s.take(req.ID)
	if err != nil {
		return 0, err
	}
	defer p.claim.Close()
	if err := configure(p.pid, req, files); err != nil {
		return 0, err
	}
	if _, err := p.claim.Write([]byte{1}); err != nil {
		return 0, fmt.Errorf("claim sandbox init %d: %w", p.pid, err)
	}
	return p.pid, nil
}

// discard stops a prestarted sandbox and waits, bounded, until its PID 1 is
// gone, so its directory can be removed.
func (s *server) discard(id string) error {
	p, err := s.take(id)
	if err != nil {
		return err
	}
	p.claim.Close()
	deadline := time.Now().Add(5 * time.Second)
	for unix.Kill(p.pid, 0) == nil {
		if time.Now().After(deadline) {
			unix.Kill(p.pid, unix.SIGKILL)
			return fmt.Errorf("sandbox init %d did not exit", p.pid)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// configure makes req's bind mounts inside the mount namespace of PID 1
// pid and sets its hostname. The mounts are cloned here, in the server's
// namespace, where the host paths are; a thread that has entered the
// sandbox's namespaces attaches them and then ends with its goroutine.
func configure(pid int, req *Request, files []*os.File) error {
	type detached struct {
		fd  int
		dir bool
		dst string
	}
	var ms []detached
	next := 0
	defer func() {
		for _, m := range ms {
			unix.Close(m.fd)
		}
	}()
	for _, m := range req.Mounts {
		var fd int
		var err error
		if m.FD {
			// The request's fds are the FD mounts' sources, in order.
			if next >= len(files) {
				return fmt.Errorf("mount %s: no mount fd in the request", m.Destination)
			}
			fd, err = unix.FcntlInt(files[next].Fd(), unix.F_DUPFD_CLOEXEC, 0)
			next++
		} else {
			fd, err = cloneSource(m.Source, m.Dev, m.Ino)
		}
		if err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.Source, m.Destination, err)
		}
		ms = append(ms, detached{fd: fd, dst: m.Destination})
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if m.ReadOnly {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.Source, m.Destination, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		ms[len(ms)-1].dir = st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	mntns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return err
	}
	defer mntns.Close()
	utsns, err := os.Open(fmt.Sprintf("/proc/%d/ns/uts", pid))
	if err != nil {
		return err
	}
	defer utsns.Close()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in the sandbox's namespaces, ends
		// with this goroutine instead of running anything else.
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return err
			}
			if err := unix.Setns(int(mntns.Fd()), unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("enter the sandbox's mount namespace: %w", err)
			}
			// This thread's root is now the sandbox's: paths, symlinks
			// included, resolve inside it.
			if req.ReadOnlyRoot && len(ms) > 0 {
				if err := remountRoot(false); err != nil {
					return err
				}
			}
			for _, m := range ms {
				if err := place(m.fd, m.dst, m.dir); err != nil {
					return fmt.Errorf("mount on %s: %w", m.dst, err)
				}
			}
			if req.ReadOnlyRoot && len(ms) > 0 {
				if err := remountRoot(true); err != nil {
					return err
				}
			}
			if req.Hostname != "" {
				if err := unix.Setns(int(utsns.Fd()), unix.CLONE_NEWUTS); err != nil {
					return err
				}
				if err := unix.Sethostname([]byte(req.Hostname)); err != nil {
					return fmt.Errorf("set hostname: %w", err)
				}
			}
			return nil
		}()
	}()
	return <-errc
}

// cloneSource returns a detached clone of the mount source src. The host
// opened src, with no symlink followed, and checked what it opened, so no
// component of it may be a symlink now: one swapped in since (by a sandbox
// that shares the directory) is refused rather than followed, and so is
// another inode than dev and ino (when set). The source is opened once and
// cloned through that fd.
func cloneSource(src string, dev, ino uint64) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, src, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("a symlink appeared in the path since it was checked: refused")
	}
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	if ino != 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return -1, err
		}
		if st.Dev != dev || st.Ino != ino {
			return -1, fmt.Errorf("the source was replaced since it was checked: refused")
		}
	}
	return unix.OpenTree(fd, "", unix.AT_EMPTY_PATH|unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
}

// remountRoot makes the calling thread's root mount read-only or
// writable, keeping its other flags (the kernel refuses to drop locked
// ones).
func remountRoot(readonly bool) error {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return err
	}
	keep := uintptr(st.Flags) & (unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.ST_NOATIME | unix.ST_NODIRATIME | unix.ST_RELATIME)
	flags := unix.MS_REMOUNT | unix.MS_BIND | keep
	if readonly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", "/", "", flags, ""); err != nil {
		return fmt.Errorf("remount the root filesystem (read-only %v): %w", readonly, err)
	}
	return nil
}

// place creates the mountpoint dst (a directory or a file, like the
// mount's source) and attaches the detached mount fd there. It runs on a
// thread whose root is the sandbox's. Like runc, it refuses destinations
// that resolve into the kernel's interfaces (/proc, /sys).
func place(fd int, dst string, dir bool) error {
	dst = path.Clean(dst)
	if !path.IsAbs(dst) || dst == "/" {
		return errors.New("destination must be an absolute path other than /")
	}
	// Before anything is created, and again once the mountpoint exists.
	if err := outsideKernelFS(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(path.Dir(dst), 0o755); err != nil {
		return err
	}
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	} else if f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0o644); err != nil { // an image's FIFO must not block
		return err
	} else {
		f.Close()
	}
	real, err := filepath.EvalSymlinks(dst)
	if err != nil {
		return err
	}
	if err := outsideKernelFS(real); err != nil {
		return err
	}
	return unix.MoveMount(fd, "", unix.AT_FDCWD, real, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// A writable layer mounted with overlayfs's volatile option may miss
// writes if the host goes down while it is mounted, and the kernel marks
// it (<workdir>/work/incompat/volatile) and refuses to mount it again. The
// kernel's documentation allows removing that mark when the system has not
// crashed since: the sandbox's directory holds an empty file named after
// the boot that mounted it, so a later start in the same boot can mount the
// layer again, and one after a restart refuses.
const volatilePrefix = ".volatile-boot-"

// bootID is this boot's id, read once per process.
var bootID = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read the boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
})

// volatileBoots lists the boots that mounted dir's layer volatile (the
// last one only, unless a crash kept an older name) and tells whether
// this boot is one of them.
func volatileBoots(dir string) (boots []string, this bool) {
	entries, _ := os.ReadDir(dir)
	id, err := bootID()
	for _, e := range entries {
		if b, ok := strings.CutPrefix(e.Name(), volatilePrefix); ok {
			boots = append(boots, b)
			this = this || err == nil && b == id
		}
	}
	return boots, this
}

// StaleVolatile reports whether dir's writable layer may be incomplete:
// mounted volatile in an earlier boot and not since; with disposable (a
// Disposable sandbox's layer, which every mount makes volatile), also when
// no mount in this boot is on record.
func StaleVolatile(dir string, disposable bool) bool {
	boots, this := volatileBoots(dir)
	return stale(dir, boots, this, disposable)
}

func stale(dir string, boots []string, this, disposable bool) bool {
	return !this && (len(boots) > 0 || disposable && mountedBefore(dir))
}

// mountedBefore reports whether dir's writable layer has been mounted:
// overlayfs made its work directory.
func mountedBefore(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, "work", "work"))
	return err == nil
}

// ErrStaleVolatile explains a StaleVolatile layer.
var ErrStaleVolatile = errdefs.ErrFailedPrecondition.WithMessage("its writable layer was mounted without syncs to the disk (it was made to go with its command: --rm or AutoRemove) and the host has restarted since, so its files may be incomplete; remove it")

// prepareVolatile readies dir's layer (work its overlay workdir) for a
// mount, volatile or not. It refuses a layer whose last volatile mount is
// not on record for this boot: the record is checked before the kernel's
// mark, so a mark with no record (the record's name lost in a crash)
// refuses too. A layer mounted volatile earlier in this boot loses the
// kernel's mark, as the kernel's documentation allows, so it can be
// mounted again. For a volatile mount this boot's record is made first.
func prepareVolatile(dir, work string, volatile bool) error {
	boots, this := volatileBoots(dir)
	if stale(dir, boots, this, volatile) {
		return ErrStaleVolatile
	}
	incompat := filepath.Join(work, "work", "incompat")
	if _, err := os.Lstat(filepath.Join(incompat, "volatile")); err == nil {
		if !this {
			return ErrStaleVolatile
		}
		if err := os.RemoveAll(incompat); err != nil {
			return fmt.Errorf("mount the writable layer again: %w", err)
		}
	}
	if !volatile {
		return nil
	}
	id, err := bootID()
	if err != nil {
		return err
	}
	for _, b := range boots {
		if b != id {
			os.Remove(filepath.Join(dir, volatilePrefix+b))
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, volatilePrefix+id), os.O_CREATE|os.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("mark the writable layer volatile: %w", err)
	}
	return f.Close()
}
