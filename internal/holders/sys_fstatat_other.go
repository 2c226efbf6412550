//go:build !(linux && (amd64 || arm64 || ppc64le || riscv64 || loong64))

package holders

import "golang.org/x/sys/unix"

// fstatat stats name (NUL-terminated) relative to dirfd, following links.
func fstatat(dirfd int, name []byte, st *unix.Stat_t) error {
	return unix.Fstatat(dirfd, string(cstr(name)), st, 0)
}
