package remote

import (
	"crypto/ed25519"
	"errors"
	"net"
	"os"
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

// accept-new records an unknown host's key in the first file, where the
// next run's index finds it: the same key is accepted, another is a changed
// key naming that line, and a host on another port is still unknown.
func TestHostKeysAcceptNewThroughIndex(t *testing.T) {
	a, b := testEd25519(t), testEd25519(t)
	dir := t.TempDir()
	files := []string{dir + "/ssh/known_hosts", dir + "/other"}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	for _, address := range []string{"gpu01:22", "[::1]:22", "[::1]:2222", "gpu02:2222"} {
		hk := NewHostKeys(true)
		cb, _, err := hk.Config(address, files)
		if err != nil {
			t.Fatal(err)
		}
		if err := cb(address, remote, a); err != nil {
			t.Fatalf("%s: first seen: %v", address, err)
		}
		if err := cb(address, remote, b); !isChanged(err) {
			t.Errorf("%s: another key in the same run: %v, want it changed", address, err)
		}
		next := NewHostKeys(false)
		cb, algos, err := next.Config(address, files)
		if err != nil {
			t.Fatal(err)
		}
		if len(algos) != 1 || algos[0] != ssh.KeyAlgoED25519 {
			t.Errorf("%s: next run asks for %v", address, algos)
		}
		if err := cb(address, remote, a); err != nil {
			t.Errorf("%s: next run, the recorded key: %v", address, err)
		}
		if err := cb(address, remote, b); !isChanged(err) {
			t.Errorf("%s: next run, another key: %v, want it changed", address, err)
		}
	}
	text, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(text), "\n"); got != 4 {
		t.Errorf("%d lines recorded, want 4:\n%s", got, text)
	}
	cb, _, err := NewHostKeys(false).Config("gpu01:2222", files)
	if err != nil {
		t.Fatal(err)
	}
	var he *HostKeyError
	if err := cb("gpu01:2222", remote, a); !errors.As(err, &he) || he.Changed {
		t.Errorf("gpu01 on another port: %v, want it unknown", err)
	}
}

func isChanged(err error) bool {
	var he *HostKeyError
	return errors.As(err, &he) && he.Changed
}

// accept-new records nothing under a name that, written in known_hosts,
// would name other hosts: a HostKeyAlias of "*" would vouch for the key
// everywhere.
func TestHostKeysAcceptNewRefusesPatterns(t *testing.T) {
	a := testEd25519(t)
	file := t.TempDir() + "/known_hosts"
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	for _, name := range []string{"*", "gpu0?", "x,gpu01", "!gpu01", "|1|x|y", "@revoked", "#x", "gpu 01", "gpu01\ngpu02", "gpu\u00a001", "[gpu01]:2222", "[gpu01"} {
		address := net.JoinHostPort(name, "22")
		cb, _, err := NewHostKeys(true).Config(address, []string{file})
		if err != nil {
			t.Fatal(err)
		}
		if err := cb(address, remote, a); err == nil {
			t.Errorf("%q: recorded", name)
		}
	}
	if text, err := os.ReadFile(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("known_hosts written: %q %v", text, err)
	}
	for _, name := range []string{"gpu01", "::1", "gpu-01.lab", "10.0.0.1"} {
		address := net.JoinHostPort(name, "2222")
		cb, _, err := NewHostKeys(true).Config(address, []string{file})
		if err != nil {
			t.Fatal(err)
		}
		if err := cb(address, remote, a); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}
