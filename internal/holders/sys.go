package holders

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// openat opens path (NUL-terminated) relative to dirfd, without copying it.
func openat(dirfd int, path []byte, flags int) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&path[0])), uintptr(flags), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
