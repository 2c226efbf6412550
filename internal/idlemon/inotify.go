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
	f       *os.File
	pending atomic.Uint32 // the masks of the events not yet taken
	events  chan struct{} // a poke: pending has something
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
	return &inotify{f: os.NewFile(uintptr(fd), "inotify"), events: make(chan struct{}, 1)}, nil
}

func (in *inotify) Close() error { return in.f.Close() }

// take returns the masks of the events since the last take.
func (in *inotify) take() uint32 { return in.pending.Swap(0) }

// run reads events until Close, adds their masks to pending and pokes
// events.
func (in *inotify) run() {
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
		in.pending.Or(mask)
		select {
		case in.events <- struct{}{}:
		default:
		}
	}
}
