//go:build !linux

package simfleet

import (
	"io"
	"net"
)

// reservePort finds a free port on ip and leaves nothing listening on it, so
// that connecting gets ECONNREFUSED (elsewhere than Linux the port is not held).
func reservePort(ip string) (int, io.Closer, error) {
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, nil, ln.Close()
}
