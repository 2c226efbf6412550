package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
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

// A jump host that refuses the connection is reported as such, not as a
// timeout; a ProxyCommand whose shell cannot start says so.
func TestDialFailures(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	cfg := writeFile(t, dir, "config", fmt.Sprintf(`
Host bastion
    HostName 127.0.0.1
    Port %d
Host gpu01
    ProxyJump bastion
Host gpu02
    ProxyCommand nc %%h %%p
`, closed))
	sc, err := LoadSSHConfig(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{SSHConfig: sc, HostKeys: NewHostKeys(false), Keys: NewKeys(""), Home: dir, Timeout: 10 * time.Second}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = c.Run(ctx, "gpu01", "true", nil)
	var e *Error
	if !errors.As(err, &e) || e.Status != hoststatus.Unreachable || !strings.Contains(e.Msg, "jump host bastion: connection refused") {
		t.Errorf("refused jump host: got %v", err)
	}

	t.Setenv("SHELL", filepath.Join(dir, "no-such-shell"))
	_, err = c.Run(ctx, "gpu02", "true", nil)
	if !errors.As(err, &e) || e.Status != hoststatus.Error || !strings.Contains(e.Msg, "ProxyCommand nc: cannot start it with "+dir+"/no-such-shell") {
		t.Errorf("missing shell: got %v", err)
	}
}
