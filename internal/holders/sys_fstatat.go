//go:build linux && (amd64 || arm64 || ppc64le || riscv64 || loong64)

package holders

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// fstatat stats name (NUL-terminated) relative to dirfd, following links,
// without copying the name.
func fstatat(dirfd int, name []byte, st *unix.Stat_t) error {
	_, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(st)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
