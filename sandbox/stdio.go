package sandbox

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slopbox/slopbox/internal/backendkit"
)

// callerStdio stands between a caller's stdio files and a command in a
// sandbox. A file descriptor handed to the sandbox is the caller's file
// itself: through /proc/self/fd/N a command can reopen it, and read a log
// its stdout is redirected to or write a file its stdin comes from. So the
// sandbox gets only pipes: the caller's own pipes and sockets (reopening
// one gives that pipe, nothing more) and the null device pass as they
// are; for anything else (a regular file, a terminal, another device) the
// sandbox gets a pipe and slopbox copies between it and the caller's file.
type callerStdio struct {
	files   [3]*os.File    // what the sandbox is handed
	ours    []*os.File     // our ends of the pipes, closed by finish
	theirs  []*os.File     // the sandbox's ends, closed once handed over
	copies  sync.WaitGroup // the output copies
	written atomic.Int64   // time of the last output copied, unix nanoseconds
	outputs int
}

// newCallerStdio prepares stdin, stdout and stderr for a command. Detached
// commands outlive the call, so nothing can copy for them: they accept
// only files that pass as they are.
func newCallerStdio(stdin, stdout, stderr *os.File, detach bool) (*callerStdio, error) {
	c := &callerStdio{}
	for i, f := range []*os.File{stdin, stdout, stderr} {
		if passable(f) {
			c.files[i] = f
			continue
		}
		if detach {
			c.closeAll()
			return nil, errors.New("a detached command's stdio must be pipes, sockets or /dev/null")
		}
		r, w, err := os.Pipe()
		if err != nil {
			c.closeAll()
			return nil, err
		}
		if i == 0 {
			// Not waited for: it may sit in a read of a terminal.
			c.files[i], c.theirs, c.ours = r, append(c.theirs, r), append(c.ours, w)
			go func() {
				io.Copy(w, f)
				w.Close()
			}()
			continue
		}
		c.files[i], c.theirs, c.ours = w, append(c.theirs, w), append(c.ours, r)
		c.outputs++
		c.copies.Add(1)
		go func() {
			defer c.copies.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					c.written.Store(time.Now().UnixNano())
					if _, werr := f.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	return c, nil
}

// handedOver closes our copies of the sandbox's ends once the command has
// its own, so that its exit (and its children's) ends the output.
func (c *callerStdio) handedOver() {
	for _, f := range c.theirs {
		f.Close()
	}
	c.theirs = nil
}

// finish waits, after the command exited, for the output still in the
// pipes, as backendkit.Collect drains: until background children close them,
// fall silent for DrainIdle, or DrainMax passes. Then it closes our ends.
func (c *callerStdio) finish() {
	c.handedOver()
	if c.outputs > 0 {
		done := make(chan struct{})
		go func() { c.copies.Wait(); close(done) }()
		deadline := time.Now().Add(backendkit.DrainMax)
		c.written.CompareAndSwap(0, time.Now().UnixNano())
		for waiting := true; waiting; {
			select {
			case <-done:
				waiting = false
			case <-time.After(backendkit.DrainIdle / 4):
				idle := time.Since(time.Unix(0, c.written.Load())) > backendkit.DrainIdle
				waiting = !idle && time.Now().Before(deadline)
			}
		}
	}
	c.closeAll()
}

func (c *callerStdio) closeAll() {
	c.handedOver()
	for _, f := range c.ours {
		f.Close()
	}
	c.ours = nil
}

// passable reports whether f may be handed to a sandbox as it is: a pipe,
// a socket or the null device.
func passable(f *os.File) bool {
	var st unix.Stat_t
	if f == nil || unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK:
		return true
	case unix.S_IFCHR:
		return st.Rdev == unix.Mkdev(1, 3)
	}
	return false
}
