package cgroup

import (
	"errors"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// pollEvery is the fallback poll of cgroup.events, should an inotify
// event be missed or inotify be unavailable.
const pollEvery = 100 * time.Millisecond

// waitEvents waits until done says yes to g's cgroup.events, or deadline.
// It reads the file once, then again after each inotify modify event the
// kernel raises on it and at each pollEvery, sleeping in between.
func (g *Group) waitEvents(deadline time.Time, done func(map[string]string) bool) (bool, error) {
	path := filepath.Join(g.Dir, "cgroup.events")
	fd := watch(path)
	if fd >= 0 {
		defer unix.Close(fd)
	}
	for {
		ev, err := g.events()
		if err != nil {
			return false, err
		}
		if done(ev) {
			return true, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		poll := pollEvery
		if g.poll > 0 {
			poll = g.poll
		}
		sleep(fd, min(left, poll))
	}
}

// watch is an inotify descriptor watching path for IN_MODIFY, or -1
// where inotify fails (then the poll alone serves).
func watch(path string) int {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return -1
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return -1
	}
	return fd
}

// sleep waits up to d for an event on the inotify descriptor fd (just d
// when fd is -1), and drains what is queued.
func sleep(fd int, d time.Duration) {
	if fd < 0 {
		time.Sleep(d)
		return
	}
	ms := max(1, int(d.Milliseconds()))
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, ms); err != nil && !errors.Is(err, unix.EINTR) || n <= 0 {
		return
	}
	var buf [4096]byte
	for {
		if n, err := unix.Read(fd, buf[:]); n <= 0 || err != nil {
			return
		}
	}
}
