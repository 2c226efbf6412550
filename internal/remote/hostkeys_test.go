package remote

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// The hint for an unknown host is a command that works as printed:
// ssh-keyscan ignores ~/.ssh/config, so it gets the real address and port.
func TestUnknownHostHint(t *testing.T) {
	tests := []struct{ address, want string }{
		{"[127.0.0.21]:2222", "add it: ssh-keyscan -p 2222 127.0.0.21 >> /h/.ssh/known_hosts"},
		{"gpu01.lab", "add it: ssh-keyscan gpu01.lab >> /h/.ssh/known_hosts"},
		{"[::1]:2222", "add it: ssh-keyscan -p 2222 ::1 >> /h/.ssh/known_hosts"},
	}
	key, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		e := &HostKeyError{Address: tt.address, Offered: key, Files: []string{"/h/.ssh/known_hosts"}}
		if got := e.Error(); !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q\nwant it to contain %q", tt.address, got, tt.want)
		}
	}
}
