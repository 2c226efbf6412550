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

// A host behind a proxy (or under a HostKeyAlias) is out of ssh-keyscan's
// reach: the hint is ssh itself, which follows ~/.ssh/config.
func TestUnknownIndirectHostHint(t *testing.T) {
	key, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		t.Fatal(err)
	}
	e := &HostKeyError{Address: "gpu03.internal", Offered: key, Files: []string{"/h/.ssh/known_hosts"}, Alias: "gpu03", Indirect: true}
	want := "add it: ssh -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/h/.ssh/known_hosts gpu03 true"
	if got := e.Error(); !strings.Contains(got, want) || strings.Contains(got, "ssh-keyscan") {
		t.Errorf("%q\nwant it to contain %q and no ssh-keyscan", got, want)
	}
}
