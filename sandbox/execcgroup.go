package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// execCgroup is one command's own cgroup, a child of its sandbox's on
// cgroup v2 (kernel 5.14 or later, for cgroup.kill). The command joins it
// before it execs, so everything it starts (setsid, double forks,
// daemons re-parented to PID 1) is in it, and a timeout kills them all at
// once with cgroup.kill, with no race against forks. Without one (cgroup
// v1, no delegation, no limits) the sandbox init's tree kill does the
// same by walking parent links.
type execCgroup struct {
	dir   string
	procs *os.File
}

// newExecCgroup makes a command's cgroup under the sandbox's, or returns
// nil when the sandbox has no cgroup v2 with cgroup.kill.
func (s *Sandbox) newExecCgroup() *execCgroup {
	parent := s.rec.Cgroups[""]
	if parent == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(parent, "cgroup.kill")); err != nil {
		return nil
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

// release removes the command's cgroup once it is empty; when processes
// the command left in the background still run, it stays until the
// sandbox's cgroup goes. After a kill the kernel empties it shortly.
func (c *execCgroup) release(killed bool) {
	if c == nil {
		return
	}
	c.started()
	for i := 0; ; i++ {
		err := os.Remove(c.dir)
		if err == nil || !killed || !errors.Is(err, unix.EBUSY) || i == 50 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
