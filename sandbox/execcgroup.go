package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// execCgroup is one command's own cgroup, a child of its sandbox's on
// cgroup v2 (kernel 5.14 or later, for cgroup.kill). The command joins it
// before it execs, so everything it starts (setsid, double forks,
// daemons re-parented to PID 1) is in it, and a timeout kills them all at
// once with cgroup.kill, with no race against forks. Without one (cgroup
// v1, no delegation, no limits) the sandbox init's tree kill does the
// same by walking parent links. Only sandboxes with a cgroup (limits set,
// and where the host allows it) have one.
type execCgroup struct {
	dir   string
	procs *os.File
}

// newExecCgroup makes a command's cgroup under the sandbox's, or returns
// nil when the sandbox has no cgroup v2 with cgroup.kill.
//
// Not with CAP_SYS_PTRACE added: container root could then take the
// cgroup.procs file from PID 1 (pidfd_getfd) while it is handed over, and
// move its processes out of an exec's reach.
func (s *Sandbox) newExecCgroup() *execCgroup {
	parent := s.rec.Cgroups[""]
	if parent == "" {
		return nil
	}
	for _, c := range s.rec.CapAdd {
		if c := strings.TrimPrefix(strings.ToUpper(c), "CAP_"); c == "SYS_PTRACE" || c == "ALL" {
			return nil
		}
	}
	if _, err := os.Stat(filepath.Join(parent, "cgroup.kill")); err != nil {
		return nil
	}
	// Commands that left background processes leave their cgroups until
	// these end: the empty ones go now.
	old, _ := filepath.Glob(filepath.Join(parent, "exec-*"))
	for _, d := range old {
		os.Remove(d)
	}
	var b [6]byte
	rand.Read(b[:])
	dir := filepath.Join(parent, "exec-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil
	}
	// The kernel checks a migration against the credentials and cgroup
	// namespace of whoever opened cgroup.procs (Linux 5.16 and later):
	// this process, which may write here, not the sandbox's init.
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil
	}
	return &execCgroup{dir: dir, procs: f}
}

// started closes the file handed to the sandbox init.
func (c *execCgroup) started() {
	if c != nil && c.procs != nil {
		c.procs.Close()
		c.procs = nil
	}
}

// kill kills every process in the command's cgroup.
func (c *execCgroup) kill() {
	if c != nil {
		os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
	}
}

// release removes the command's cgroup once it is empty. After a kill, or
// a command that failed to start, it waits (up to 5 s) for the kernel to
// empty it; when processes the command left in the background still run,
// it stays, and goes with a later timed exec or with the sandbox.
func (c *execCgroup) release(wait bool) {
	if c == nil {
		return
	}
	c.started()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(c.dir)
		if err == nil || !wait || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
