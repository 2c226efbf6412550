package idlemon

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/gpumon/gpumon/internal/holders"
	"golang.org/x/sys/unix"
)

// inotify watches the device files for opens (and closes).
type inotify struct {
	f *os.File
}

func newInotify(devs []holders.Device) (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	for _, dv := range devs {
		if _, err := unix.InotifyAddWatch(fd, dv.Path, unix.IN_OPEN|unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("watch %s: %v", dv.Path, err)
		}
	}
	return &inotify{f: os.NewFile(uintptr(fd), "inotify")}, nil
}

func (in *inotify) Close() error { return in.f.Close() }

// run reads events, adds their masks to pending and pokes notify.
func (in *inotify) run(pending *atomic.Uint32, notify chan<- struct{}) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := in.f.Read(buf)
		if err != nil {
			return
		}
		var mask uint32
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			mask |= ev.Mask
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		pending.Or(mask)
		select {
		case notify <- struct{}{}:
		default:
		}
	}
}
