package remote

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Resolution follows ssh_config(5): first value wins, user file before the
// system file, %h/%p/%r/~ expanded, comma lists in ProxyJump, space lists in
// UserKnownHostsFile.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	user := writeFile(t, dir, "config", `
Host gpu01
    HostName 10.0.0.%h
    Port 2201
    IdentityFile ~/.ssh/gpu_key

Host gpu*
    HostName %h.cluster.example
    User alice
    ProxyJump bastion, admin@inner:2222
    UserKnownHostsFile ~/.ssh/kh_cluster "/etc/ssh/kh two"
    IdentityFile %d/keys/%r@%h

Host !gpu99 gpu9*
    HostKeyAlias gpu-nine
`)
	system := writeFile(t, dir, "ssh_config", `
Host *
    User systemuser
    Port 2299
    IdentitiesOnly yes
`)
	sc, err := LoadSSHConfig(user, system)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		alias string
		want  Target
	}{
		{"gpu01", Target{
			Alias: "gpu01", HostName: "10.0.0.gpu01", Port: 2201, User: "alice",
			IdentityFiles:   []string{dir + "/.ssh/gpu_key", dir + "/keys/alice@10.0.0.gpu01"},
			IdentitiesOnly:  true,
			ProxyJump:       []string{"bastion", "admin@inner:2222"},
			KnownHostsFiles: []string{dir + "/.ssh/kh_cluster", "/etc/ssh/kh two"},
		}},
		{"gpu95", Target{
			Alias: "gpu95", HostName: "gpu95.cluster.example", Port: 2299, User: "alice",
			IdentityFiles:   []string{dir + "/keys/alice@gpu95.cluster.example"},
			IdentitiesOnly:  true,
			ProxyJump:       []string{"bastion", "admin@inner:2222"},
			KnownHostsFiles: []string{dir + "/.ssh/kh_cluster", "/etc/ssh/kh two"},
			HostKeyAlias:    "gpu-nine",
		}},
		{"bob@other:2022", Target{
			Alias: "bob@other:2022", HostName: "other", Port: 2022, User: "bob", IdentitiesOnly: true,
		}},
	}
	for _, tt := range tests {
		got, err := sc.Resolve(tt.alias)
		if err != nil {
			t.Errorf("%s: %v", tt.alias, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.alias, diff)
		}
	}
	if got, _ := sc.Resolve("gpu99"); got.HostKeyAlias != "" {
		t.Errorf("negated pattern matched gpu99: %+v", got)
	}
	if got, _ := sc.Resolve("gpu95"); got.KnownHostsName() != "gpu-nine:2299" {
		t.Errorf("known_hosts name = %q", got.KnownHostsName())
	}
}

func TestResolveMissingFilesAndErrors(t *testing.T) {
	dir := t.TempDir()
	sc, err := LoadSSHConfig(filepath.Join(dir, "none"), "")
	if err != nil {
		t.Fatalf("a missing ~/.ssh/config must be fine: %v", err)
	}
	if got, _ := sc.Resolve("h"); got.Port != 22 || got.HostName != "h" || got.Addr() != "h:22" || got.KnownHostsName() != "h:22" {
		t.Errorf("defaults: %+v", got)
	}
	bad := writeFile(t, dir, "bad", "Host x\n  Port 22\nMatch exec \"true\"\n  User y\n")
	if _, err := LoadSSHConfig(bad, ""); err == nil || !filepath.IsAbs(bad) || !contains(err.Error(), bad) {
		t.Errorf("Match exec: got %v, want an error naming %s", err, bad)
	}
	badPort := writeFile(t, dir, "badport", "Host x\n  Port twentytwo\n")
	sc, _ = LoadSSHConfig(badPort, "")
	if _, err := sc.Resolve("x"); err == nil {
		t.Error("a bad Port was accepted")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
