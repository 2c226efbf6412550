package remote

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/testenv"
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

// debianSSHConfig is Debian 12's stock /etc/ssh/ssh_config, comments cut.
const debianSSHConfig = `Include /etc/ssh/ssh_config.d/*.conf

Host *
#   ForwardAgent no
#   ProxyCommand ssh -q -W %h:%p gateway.example.com
    SendEnv LANG LC_*
    HashKnownHosts yes
    GSSAPIAuthentication yes
`

// A keyword fetch cannot honour is an error naming the file, the line and the
// host, but only with a value that asks for something fetch does not do, and
// only where it applies (the first value obtained, in a block for the host).
func TestKeywordPolicy(t *testing.T) {
	tests := []struct {
		name   string
		user   string // ~/.ssh/config; {DIR} is the test's folder
		system string // /etc/ssh/ssh_config
		errAt  string // "" for no error, else "FILE:LINE" (config or ssh_config)
		errHas string
	}{
		{name: "debian stock", system: debianSSHConfig},
		{name: "typical user file", user: `
IgnoreUnknown UseKeychain,AddKeysToAgent
Host *
    UseKeychain yes
    ServerAliveInterval 30
    ServerAliveCountMax 3
    ControlMaster auto
    ControlPath ~/.ssh/cm-%r@%h:%p
    ControlPersist 10m
    ForwardAgent yes
    ForwardX11 no
    Compression yes
    LogLevel ERROR
    StrictHostKeyChecking accept-new
    ConnectTimeout 5
    AddressFamily inet
    PreferredAuthentications publickey,keyboard-interactive
    Ciphers +aes128-cbc
    HostKeyAlgorithms +ssh-rsa
    PubkeyAcceptedKeyTypes +ssh-rsa
    KexAlgorithms ^curve25519-sha256
    ProxyUseFdpass no
    CanonicalizeHostname no
    VerifyHostKeyDNS ask
    IdentityAgent SSH_AUTH_SOCK
    GlobalKnownHostsFile /dev/null none
Host gpu01
    LocalForward 8888 localhost:8888
    RemoteCommand tmux new -A -s main
    RequestTTY yes
    Tunnel no
`, system: debianSSHConfig},
		{name: "certificate", user: "Host gpu*\n  CertificateFile ~/.ssh/id_ed25519-cert.pub\n", errAt: "config:2", errHas: "CertificateFile ~/.ssh/id_ed25519-cert.pub (for gpu01): fetch cannot log in with a certificate"},
		{name: "pkcs11 under its old name", user: "Host *\n  SmartcardDevice /usr/lib/opensc-pkcs11.so\n", errAt: "config:2", errHas: "PKCS#11"},
		{name: "pkcs11 none", user: "Host *\n  PKCS11Provider none\n"},
		{name: "known hosts command", user: "Host *\n  KnownHostsCommand /usr/bin/fetch-keys %H\n", errAt: "config:2", errHas: "KnownHostsCommand"},
		{name: "fd passing", user: "\n\nHost gpu01\n  ProxyUseFdpass yes\n", errAt: "config:4", errHas: "cannot take a passed socket"},
		{name: "bind address", user: "Host *\n  BindAddress 10.1.1.1\n", errAt: "config:2", errHas: "default address"},
		{name: "bind interface", user: "Host *\n  BindInterface eth1\n", errAt: "config:2", errHas: "default interface"},
		{name: "cipher list", user: "Host *\n  Ciphers aes256-gcm@openssh.com\n", errAt: "config:2", errHas: "cannot restrict algorithms"},
		{name: "algorithm removed", user: "Host *\n  KexAlgorithms -diffie-hellman-group14-sha1\n", errAt: "config:2", errHas: "cannot restrict algorithms"},
		{name: "canonicalize", user: "Host *\n  CanonicalizeHostname yes\n  CanonicalDomains lab.example\n", errAt: "config:2", errHas: "canonicalize"},
		{name: "no public keys", user: "Host *\n  PubkeyAuthentication no\n", errAt: "config:2", errHas: "keys only"},
		{name: "no publickey in the list", user: "Host *\n  PreferredAuthentications password\n", errAt: "config:2", errHas: "publickey"},
		{name: "other agent", user: "Host *\n  IdentityAgent ~/.1password/agent.sock\n", errAt: "config:2", errHas: "SSH_AUTH_SOCK"},
		{name: "global known hosts", user: "Host *\n  GlobalKnownHostsFile /etc/ssh/lab_known_hosts\n", errAt: "config:2", errHas: "UserKnownHostsFile"},
		{name: "revoked keys", user: "Host *\n  RevokedHostKeys /etc/ssh/revoked\n", errAt: "config:2", errHas: "revoke"},
		{name: "sshfp", user: "Host *\n  VerifyHostKeyDNS yes\n", errAt: "config:2", errHas: "DNS"},
		{name: "rsa size", user: "Host *\n  RequiredRSASize 3072\n", errAt: "config:2", errHas: "RSA"},
		{name: "unknown keyword", user: "Host *\n  UseKeychain yes\n", errAt: "config:2", errHas: "UseKeychain (for gpu01) is not an ssh_config keyword"},
		{name: "unknown keyword ignored", user: "Host *\n  IgnoreUnknown Use*\n  UseKeychain yes\n"},
		{name: "another host's block", user: "Host gpu02\n  CertificateFile x\n  BindAddress 10.0.0.1\n"},
		{name: "first value wins", user: "Host *\n  ProxyUseFdpass no\n", system: "Host *\n  ProxyUseFdpass yes\n"},
		{name: "system file", system: "\nHost *\n  ProxyUseFdpass yes\n", errAt: "ssh_config:3"},
		{name: "included file", user: "Host gpu01\n  Include {DIR}/conf.d/*.conf\n", errAt: "conf.d/b.conf:3", errHas: "BindAddress"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("HOME", dir)
			os.Mkdir(filepath.Join(dir, "conf.d"), 0o700)
			writeFile(t, dir, "conf.d/a.conf", "Port 2222\n")
			writeFile(t, dir, "conf.d/b.conf", "# lab nodes\n\n  BindAddress 10.0.0.1\n")
			user := writeFile(t, dir, "config", strings.ReplaceAll(tt.user, "{DIR}", dir))
			system := writeFile(t, dir, "ssh_config", tt.system)
			sc, err := LoadSSHConfig(user, system)
			if err != nil {
				t.Fatal(err)
			}
			_, err = sc.Resolve("gpu01")
			switch {
			case tt.errAt == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.errAt == "":
			case err == nil:
				t.Errorf("no error; want one at %s", tt.errAt)
			case !strings.HasPrefix(err.Error(), filepath.Join(dir, tt.errAt)+": ") || !strings.Contains(err.Error(), tt.errHas):
				t.Errorf("error %q; want it at %s, saying %q", err, tt.errAt, tt.errHas)
			}
		})
	}
}

// Every keyword the installed OpenSSH knows has a rule: fetch never meets a
// keyword ssh accepts and calls it unknown. The keywords come from `ssh -G`
// (those with a value by default) and from ssh_config(5)'s source, where
// the system keeps man pages.
func TestKeywordPolicyCoversOpenSSH(t *testing.T) {
	out, err := exec.Command("ssh", "-G", "-F", "/dev/null", "gpu01").Output()
	if err != nil {
		testenv.Need(t, fmt.Sprintf("ssh -G (openssh-client): %v", err))
	}
	var keywords []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			keywords = append(keywords, f[0])
		}
	}
	if len(keywords) < 60 {
		t.Fatalf("ssh -G printed %d keywords:\n%s", len(keywords), out)
	}
	if man, err := os.Open("/usr/share/man/man5/ssh_config.5.gz"); err == nil {
		defer man.Close()
		z, err := gzip.NewReader(man)
		if err != nil {
			t.Fatal(err)
		}
		src, err := io.ReadAll(z)
		if err != nil {
			t.Fatal(err)
		}
		fromMan := regexp.MustCompile(`(?m)^\.It Cm ([A-Za-z0-9]+)`).FindAllStringSubmatch(string(src), -1)
		if len(fromMan) < 90 {
			t.Fatalf("found %d keywords in ssh_config(5); the pattern is off", len(fromMan))
		}
		for _, m := range fromMan {
			keywords = append(keywords, m[1])
		}
	}
	for _, k := range keywords {
		lower := strings.ToLower(k)
		_, rule := keywordPolicy[lower]
		_, alias := keywordAliases[lower]
		if !rule && !alias {
			t.Errorf("ssh_config keyword %s has no rule", k)
		}
	}
}

// ProxyCommand is read as ssh reads it (the rest of the line, quotes and #
// included); the first of ProxyJump and ProxyCommand obtained wins, "none"
// included; a token ProxyCommand does not take is an error at its line.
func TestResolveProxyCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	user := writeFile(t, dir, "config", `
Host direct
    ProxyCommand none
Host jumped
    ProxyJump bastion
Host gpu*
    HostName %h.lab.internal
    ProxyCommand = ssh -W "%h:%p" gw # the shell's comment
Host bad
    ProxyCommand nc %h %p %C
Host empty
    ProxyCommand
Host jnone
    ProxyJump none
Host *
    ProxyJump gw2
    ProxyCommand nc %h %p
`)
	sc, err := LoadSSHConfig(user, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		alias, command string
		jump           []string
	}{
		{"gpu01", `ssh -W "%h:%p" gw # the shell's comment`, nil},
		{"direct", "", nil},
		{"jumped", "", []string{"bastion"}},
		{"other", "", []string{"gw2"}},
		{"jnone", "", nil},
	}
	for _, tt := range tests {
		got, err := sc.Resolve(tt.alias)
		if err != nil {
			t.Errorf("%s: %v", tt.alias, err)
			continue
		}
		if got.ProxyCommand != tt.command || !slices.Equal(got.ProxyJump, tt.jump) {
			t.Errorf("%s: ProxyCommand %q ProxyJump %q; want %q %q", tt.alias, got.ProxyCommand, got.ProxyJump, tt.command, tt.jump)
		}
	}
	_, err = sc.Resolve("bad")
	if want := user + ":10: ProxyCommand for bad: unknown token %C"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %q...", err, want)
	}
	_, err = sc.Resolve("empty")
	if want := user + ":12: ProxyCommand for empty has no command"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %q...", err, want)
	}
}

// Include follows OpenSSH: relative names in ~/.ssh, globs sorted, a loop
// stopped, a parse error reported by the included file's name and line.
func TestInclude(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	os.MkdirAll(filepath.Join(dir, ".ssh", "lab"), 0o700)
	writeFile(t, dir, ".ssh/lab/2.conf", "Host gpu01\n  User second\n  Port 2202\n")
	writeFile(t, dir, ".ssh/lab/1.conf", "Host gpu01\n  User first\n")
	user := writeFile(t, dir, ".ssh/config", "Include lab/*.conf\nHost *\n  Port 2200\n")
	sc, err := LoadSSHConfig(user, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := sc.Resolve("gpu01")
	if err != nil || got.User != "first" || got.Port != 2202 {
		t.Errorf("got %+v %v; want user first, port 2202", got, err)
	}

	loop := writeFile(t, dir, ".ssh/loop", "Include loop\n")
	if _, err := LoadSSHConfig(loop, ""); err == nil || !strings.Contains(err.Error(), "levels of Include") {
		t.Errorf("include loop: %v", err)
	}
	bad := writeFile(t, dir, ".ssh/lab/bad.conf", "Host x\n\nMatch exec true\n")
	top := writeFile(t, dir, ".ssh/top", "Include lab/bad.conf\n")
	if _, err := LoadSSHConfig(top, ""); err == nil || !strings.Contains(err.Error(), bad+":3: Match exec true: fetch cannot evaluate Match exec") {
		t.Errorf("got %v, want the included file's line", err)
	}
}

// This machine's own /etc/ssh/ssh_config (and what it includes) loads and
// resolves without complaint, as fetch reads it on every run.
func TestInstalledSystemConfig(t *testing.T) {
	const system = "/etc/ssh/ssh_config"
	if _, err := os.Stat(system); err != nil {
		testenv.Need(t, fmt.Sprintf("%s: %v", system, err))
	}
	sc, err := LoadSSHConfig("", system)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Resolve("gpu01"); err != nil {
		t.Fatal(err)
	}
}
