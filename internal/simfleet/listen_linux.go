//go:build linux

package simfleet

import (
	"io"
	"net"
	"os"
	"syscall"
)

// reservePort binds a TCP port on ip without listening on it: connecting to
// it gets ECONNREFUSED, and no other socket can take the port meanwhile.
func reservePort(ip string) (int, io.Closer, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, os.NewSyscallError("socket", err)
	}
	var sa syscall.SockaddrInet4
	copy(sa.Addr[:], net.ParseIP(ip).To4())
	if err := syscall.Bind(fd, &sa); err != nil {
		_ = syscall.Close(fd)
		return 0, nil, &net.OpError{Op: "bind", Net: "tcp4", Addr: &net.TCPAddr{IP: net.ParseIP(ip)}, Err: os.NewSyscallError("bind", err)}
	}
	got, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return 0, nil, os.NewSyscallError("getsockname", err)
	}
	return got.(*syscall.SockaddrInet4).Port, os.NewFile(uintptr(fd), "simfleet-refuse"), nil
}
