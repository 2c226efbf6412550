package idlemon

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/gpumon/gpumon/internal/holders"
	"golang.org/x/sys/unix"
)

// What is watched: each device file for opens and closes, and for what
// ends the watch on it or says its name may now be another file's (the
// node removed or renamed, as a driver reload does: a watch follows the
// inode, not the name); each device file's folder for that name made again.
const (
	fileMask = unix.IN_OPEN | unix.IN_CLOSE_WRITE | unix.IN_CLOSE_NOWRITE |
		unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	replacedMask = unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED | unix.IN_Q_OVERFLOW
	folderMask   = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ONLYDIR
)

// inotify watches the device files for opens (and closes), and keeps
// watching a device file made again under the same name.
type inotify struct {
	f       *os.File
	conn    syscall.RawConn
	paths   []string           // the device files
	folders map[int32][]string // a folder's watch -> the device files' names in it
	pending atomic.Uint32      // the masks of the events not yet taken
	events  chan struct{}      // a poke: pending has something
}

func newInotify(devs []holders.Device) (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	in := &inotify{folders: map[int32][]string{}, events: make(chan struct{}, 1)}
	for _, dv := range devs {
		if _, err := unix.InotifyAddWatch(fd, dv.Path, fileMask); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("watch %s: %v", dv.Path, err)
		}
		in.paths = append(in.paths, dv.Path)
		folder := filepath.Dir(dv.Path)
		wd, err := unix.InotifyAddWatch(fd, folder, folderMask)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("watch %s: %v", folder, err)
		}
		in.folders[int32(wd)] = append(in.folders[int32(wd)], filepath.Base(dv.Path))
	}
	in.f = os.NewFile(uintptr(fd), "inotify")
	if in.conn, err = in.f.SyscallConn(); err != nil {
		in.f.Close()
		return nil, err
	}
	return in, nil
}

func (in *inotify) Close() error { return in.f.Close() }

// take returns the masks of the events since the last take.
func (in *inotify) take() uint32 { return in.pending.Swap(0) }

// run reads events until Close, adds their masks to pending and pokes
// events. When a device file may have been replaced, it watches what is
// now at its name and reports an open, so that the daemon scans at once:
// the new file's opener raised no event on the old one.
func (in *inotify) run() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := in.f.Read(buf)
		if err != nil {
			return
		}
		var mask uint32
		replaced := false
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : min(n, off+unix.SizeofInotifyEvent+int(ev.Len))]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if names, ok := in.folders[ev.Wd]; ok {
				// a name made in a device file's folder: one of ours?
				if ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && slices.Contains(names, string(bytes.TrimRight(name, "\x00"))) {
					replaced = true
				}
				continue
			}
			mask |= ev.Mask
			replaced = replaced || ev.Mask&replacedMask != 0
		}
		if replaced {
			in.rewatch()
			mask |= unix.IN_OPEN
		}
		if mask == 0 {
			continue // only other names in the folders
		}
		in.pending.Or(mask)
		select {
		case in.events <- struct{}{}:
		default:
		}
	}
}

// rewatch watches what each device file's name names now (the same file
// keeps its watch; a name not made again yet is watched when its folder
// says it is).
func (in *inotify) rewatch() {
	in.conn.Control(func(fd uintptr) {
		for _, p := range in.paths {
			unix.InotifyAddWatch(int(fd), p, fileMask)
		}
	})
}
