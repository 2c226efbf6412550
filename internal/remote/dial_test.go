package remote

import (
	"context"
	"net"
	"testing"
	"time"
)

// AddressFamily picks the network of a direct connection, as in ssh.
func TestDialTCPAddressFamily(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tests := []struct {
		family string
		ok     bool
	}{{"", true}, {"inet", true}, {"inet6", false}}
	for _, tt := range tests {
		conn, err := dialTCP(ctx, Target{HostName: "127.0.0.1", Port: port, AddressFamily: tt.family})
		if conn != nil {
			conn.Close()
		}
		if (err == nil) != tt.ok {
			t.Errorf("AddressFamily %q: got %v, want success %v", tt.family, err, tt.ok)
		}
	}
}
