package remote

import (
	"crypto/ed25519"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// A long-running process (live mode) sees known_hosts change: a key the
// admin adds is accepted once HostKeys looks again (at most every
// recheckEvery, by a stat), a key that differs from the one on record is
// still refused, and files that did not change are not read again.
func TestHostKeysSeeKnownHostsChange(t *testing.T) {
	const address = "gpu01:22"
	hostKey, other, stranger := testEd25519(t), testEd25519(t), testEd25519(t)
	lineFor := func(host string, k ssh.PublicKey) string { return host + " " + string(ssh.MarshalAuthorizedKey(k)) }
	line := func(k ssh.PublicKey) string { return lineFor("gpu01", k) }
	appendTo := func(t *testing.T, file, text string) {
		t.Helper()
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		before  string // known_hosts at the first poll ("" and missing: no file)
		missing bool
		first   string // at the first poll: "ok", "unknown" or "changed"
		change  func(t *testing.T, file string)
		wait    time.Duration // between the polls
		want    string        // at the second poll
	}{
		{"nothing changed", line(other), false, "changed", func(*testing.T, string) {}, recheckEvery, "changed"},
		{"key added", "", false, "unknown", func(t *testing.T, f string) { appendTo(t, f, line(hostKey)) }, recheckEvery, "ok"},
		{"file made", "", true, "unknown", func(t *testing.T, f string) { appendTo(t, f, line(hostKey)) }, recheckEvery, "ok"},
		{"file replaced by a rename", "", false, "unknown", func(t *testing.T, f string) {
			tmp := f + ".new"
			appendTo(t, tmp, line(stranger)+line(hostKey))
			if err := os.Rename(tmp, f); err != nil {
				t.Fatal(err)
			}
		}, recheckEvery, "ok"},
		{"key added, looked at again too soon", "", false, "unknown", func(t *testing.T, f string) { appendTo(t, f, line(hostKey)) }, recheckEvery / 2, "unknown"},
		{"another host's key added", line(other), false, "changed", func(t *testing.T, f string) { appendTo(t, f, lineFor("gpu02", hostKey)) }, recheckEvery, "changed"},
		{"the host's other key added beside", line(other), false, "changed", func(t *testing.T, f string) { appendTo(t, f, line(hostKey)) }, recheckEvery, "ok"},
		{"key removed", line(hostKey), false, "ok", func(t *testing.T, f string) {
			if err := os.WriteFile(f, []byte(lineFor("gpu02", stranger)), 0o600); err != nil {
				t.Fatal(err)
			}
		}, recheckEvery, "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "known_hosts")
			if !tt.missing {
				if err := os.WriteFile(file, []byte(tt.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			hk := NewHostKeys(false)
			hk.now = func() time.Time { return now }
			poll := func() error {
				cb, _, err := hk.Config(address, []string{file})
				if err != nil {
					t.Fatal(err)
				}
				return cb(address, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}, hostKey)
			}
			if got := hostKeyVerdict(poll()); got != tt.first {
				t.Fatalf("first poll: %s, want %s", got, tt.first)
			}
			tt.change(t, file)
			now = now.Add(tt.wait)
			if got := hostKeyVerdict(poll()); got != tt.want {
				t.Errorf("second poll: %s, want %s", got, tt.want)
			}
		})
	}
}

// hostKeyVerdict is what HostKeys' check said: ok, unknown, changed, or
// the error.
func hostKeyVerdict(err error) string {
	var he *HostKeyError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &he) && he.Changed:
		return "changed"
	case errors.As(err, &he):
		return "unknown"
	}
	return err.Error()
}

// Files that did not change are not read again, however often HostKeys
// looks; looking happens at most every recheckEvery.
func TestHostKeysKeepUnchangedFiles(t *testing.T) {
	file := writeFile(t, t.TempDir(), "known_hosts", "gpu01 "+string(ssh.MarshalAuthorizedKey(testEd25519(t))))
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	hk := NewHostKeys(false)
	hk.now = func() time.Time { return now }
	first := hk.load([]string{file})
	for range 3 {
		now = now.Add(recheckEvery)
		if d := hk.load([]string{file}); d != first {
			t.Fatalf("an unchanged file was read again")
		}
	}
	if first.checked != now {
		t.Errorf("checked at %s, want %s", first.checked, now)
	}
}
