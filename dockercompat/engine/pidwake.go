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
	wakes map[int32]chan struct{} // by pidfd
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
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(fd)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return func() {}, false
	}
	p.wakes[int32(fd)] = wake
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.wakes[int32(fd)] == wake {
			delete(p.wakes, int32(fd))
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
			unix.Close(fd)
		}
	}, true
}

func (p *pidWaker) start() {
	p.epfd, p.err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if p.err != nil {
		return
	}
	p.wakes = map[int32]chan struct{}{}
	go p.loop()
}

// loop delivers the exits. An fd closed by a cancel and reused by a later
// watch may see its event go to the later one: a spurious wake, which only
// makes that watch poll once more.
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
			wake, ok := p.wakes[ev.Fd]
			if !ok {
				continue
			}
			delete(p.wakes, ev.Fd)
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(ev.Fd), nil)
			unix.Close(int(ev.Fd))
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		p.mu.Unlock()
	}
}
