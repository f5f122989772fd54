package engine

import (
	"sync"

	"golang.org/x/sys/unix"
)

// exits wakes the exit watches (events.go) when the PID 1 of the sandbox
// they watch is gone: one goroutine for the whole process waits on a pidfd
// of each (epoll), so a watch learns of an exit at once rather than at its
// next poll, and a thousand idle containers cost no polling to speak of.
var exits pidWaker

type pidWaker struct {
	once sync.Once
	epfd int
	err  error

	mu    sync.Mutex
	next  int32              // the key of the next registration
	wakes map[int32]pidWatch // by key, which the epoll event carries
}

// pidWatch is one registration: its pidfd and whom to wake.
type pidWatch struct {
	fd   int
	wake chan struct{}
}

// watch has wake signalled (without blocking) once process pid exits. It
// reports false when it cannot (no pidfd here, or pid is gone already);
// the watch then relies on its polls. cancel ends the watch.
func (p *pidWaker) watch(pid int, wake chan struct{}) (cancel func(), ok bool) {
	p.once.Do(p.start)
	if p.err != nil || pid <= 0 {
		return func() {}, false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return func() {}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	key := p.next
	// The event carries the key, not the fd: an fd closed by a cancel
	// and reused by a later watch must not take an event meant for it.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: key}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return func() {}, false
	}
	p.wakes[key] = pidWatch{fd: fd, wake: wake}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if w, ok := p.wakes[key]; ok {
			delete(p.wakes, key)
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
			unix.Close(w.fd)
		}
	}, true
}

func (p *pidWaker) start() {
	p.epfd, p.err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if p.err != nil {
		return
	}
	p.wakes = map[int32]pidWatch{}
	go p.loop()
}

// loop delivers the exits.
func (p *pidWaker) loop() {
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		p.mu.Lock()
		for _, ev := range events[:n] {
			w, ok := p.wakes[ev.Fd]
			if !ok {
				continue // cancelled meanwhile
			}
			delete(p.wakes, ev.Fd)
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
			unix.Close(w.fd)
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
		p.mu.Unlock()
	}
}
