// Package pidwatch calls a function when a process exits: one goroutine
// for the whole program (Watch) waits on a pidfd of every watched process
// (epoll), so a thousand watched processes cost one blocked thread and no
// polling, and an exit is known at once. Its goroutine and epoll fd live
// as long as the program; a watched process is reaped even after the
// code that watched it is done with it (a Backend closed).
package pidwatch

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Watcher watches processes. The zero value is ready to use.
type Watcher struct {
	once sync.Once
	epfd int

	mu      sync.Mutex
	err     error           // set when epoll fails: no watch then
	next    int32           // the key of the next registration
	watches map[int32]watch // by key, which the epoll event carries
}

// watch is one registration: its pidfd and what to call.
type watch struct {
	fd     int
	exited func(pidfd int)
}

var std Watcher

// Watch is the program's Watcher's Watch.
func Watch(pid int, exited func(pidfd int)) (cancel func(), ok bool) {
	return std.Watch(pid, exited)
}

// Watch has exited called, from the watcher's goroutine, once process pid
// has exited; exited gets the pidfd, valid until it returns (to reap a
// child through it: Reap). Watch reports false when it cannot (no pidfd
// or epoll here, or pid is gone already), and then never calls exited.
// cancel ends the watch; after it returns, exited is not called. exited
// must not block, nor call Watch or a cancel.
func (p *Watcher) Watch(pid int, exited func(pidfd int)) (cancel func(), ok bool) {
	p.once.Do(p.start)
	if pid <= 0 {
		return func() {}, false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return func() {}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		unix.Close(fd)
		return func() {}, false
	}
	p.next++
	key := p.next
	// The event carries the key, not the fd: an fd closed by a cancel
	// and reused by a later watch must not take an event meant for it.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: key}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return func() {}, false
	}
	p.watches[key] = watch{fd: fd, exited: exited}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if w, ok := p.watches[key]; ok {
			delete(p.watches, key)
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
			unix.Close(w.fd)
		}
	}, true
}

func (p *Watcher) start() {
	p.watches = map[int32]watch{}
	p.epfd, p.err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if p.err == nil {
		go p.loop()
	}
}

// loop delivers the exits.
func (p *Watcher) loop() {
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		p.mu.Lock()
		if err != nil {
			// Not expected; from now on Watch says it cannot, and the
			// watches made are left to their callers' fallbacks.
			p.err = err
			p.mu.Unlock()
			return
		}
		for _, ev := range events[:n] {
			w, ok := p.watches[ev.Fd]
			if !ok {
				continue // cancelled meanwhile
			}
			delete(p.watches, ev.Fd)
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
			w.exited(w.fd)
			unix.Close(w.fd)
		}
		p.mu.Unlock()
	}
}

// Reap waits for the exited child whose pidfd is fd, and reports whether
// it did: not when waitid cannot wait by pidfd (before Linux 5.4), or
// the child is traced (its tracer sees its exit first); the caller then
// waits for it another way.
func Reap(fd int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}
