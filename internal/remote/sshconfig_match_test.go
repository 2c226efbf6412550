package remote

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/sshdtest"
)

// rhelRedhatConf is the gist of RHEL 9's /etc/ssh/ssh_config.d/50-redhat.conf;
// {DIR}/crypto.config stands for /etc/crypto-policies/back-ends/openssh.config.
const rhelRedhatConf = `# The options here are in the "Match final block" to be applied as the last
# options and could be potentially overwritten by the user configuration
Match final all
	# Follow system-wide Crypto Policy, if defined:
	Include {DIR}/crypto.config

	GSSAPIAuthentication yes

# If this option is set to yes then remote X11 clients will have full access
# to the original X11 display.
	ForwardX11Trusted yes

# Uncomment this if you want to use .local domain
# Host *.local

# Send locale-related environment variables
	SendEnv LANG LC_CTYPE LC_NUMERIC LC_TIME LC_COLLATE LC_MONETARY LC_MESSAGES
	BindAddress 10.9.9.9
`

// rhelCryptoPolicy is the gist of RHEL 9's DEFAULT crypto policy for ssh:
// lists fetch would refuse anywhere else.
const rhelCryptoPolicy = `Ciphers aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes256-ctr,aes128-gcm@openssh.com,aes128-ctr
MACs hmac-sha2-256-etm@openssh.com,hmac-sha1-etm@openssh.com,umac-128-etm@openssh.com,hmac-sha2-512-etm@openssh.com
KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256
RequiredRSASize 2048
`

// Match: only "Match all" and "Match host LIST" alone are evaluated (as Host
// * and Host LIST, with ! and OpenSSH's wildcards); every other criterion,
// and any combination, is an error at load naming the file, the line and
// the criterion, in the user's file, in the system's and in what they
// include. Match final blocks of the system's files are left out (RHEL).
func TestMatchPolicy(t *testing.T) {
	tests := []struct {
		name     string
		user     string            // ~/.ssh/config; {DIR} is the test's folder
		system   string            // /etc/ssh/ssh_config
		included map[string]string // more files in {DIR}
		// for a config that loads: the hosts given Port 2201, and the ones not
		port2201, other []string
		errAt           string // "FILE:LINE" when it must not load
		errHas          []string
	}{
		{name: "match all", user: "Host gpu01\n  User u\nMatch all\n  Port 2201\n",
			port2201: []string{"gpu01", "x", "a.b"}},
		{name: "match host list", user: "Match host a,b\n  Port 2201\n",
			port2201: []string{"a", "b"}, other: []string{"c", "a,b", "ab"}},
		{name: "match Host negated", user: "Match Host !x,*\n  Port 2201\n",
			port2201: []string{"y", "gpu01"}, other: []string{"x"}},
		{name: "keywords in any case, wildcards", user: "MATCH HOST gpu?,node*.lab\n  Port 2201\n",
			port2201: []string{"gpu1", "gpu9", "node.lab", "node12.lab"}, other: []string{"gpu", "gpu10", "node12.lab2"}},
		{name: "quotes, = and a comment", user: "Match = host \"a,b\" # lab\n  Port 2201\nHost *\n  Port 22\n",
			port2201: []string{"a", "b"}, other: []string{"c"}},
		{name: "only negated patterns match nothing", user: "Match host !x\n  Port 2201\n",
			other: []string{"x", "y"}},
		{name: "host blocks: ? is exactly one character", user: "Host gpu?\n  Port 2201\n",
			port2201: []string{"gpu1"}, other: []string{"gpu", "gpu12"}},

		{name: "exec", user: "Host x\n  Port 22\nMatch exec \"true\"\n  User y\n",
			errAt: "config:3", errHas: []string{"Match exec \"true\": fetch cannot evaluate Match exec", "use a Host block, or point ssh_config in config.ini"}},
		{name: "host and exec", user: "Match host gpu01 exec \"nc -z gw 22\"\n  ProxyCommand nc gw 22\n",
			errAt: "config:1", errHas: []string{"Match exec"}},
		{name: "user", user: "\nMatch user root\n  Port 2201\n",
			errAt: "config:2", errHas: []string{"fetch cannot evaluate Match user;"}},
		{name: "all host", user: "Match all host x\n  Port 2201\n",
			errAt: "config:1", errHas: []string{"Match all combined with host"}},
		{name: "host user", user: "Host *\n  Port 22\n\nMatch host x user y\n  Port 2201\n",
			errAt: "config:4", errHas: []string{"Match host x user y: fetch cannot evaluate Match user;"}},
		{name: "final", user: "Match final\n  Port 2201\n",
			errAt: "config:1", errHas: []string{"fetch cannot evaluate Match final"}},
		{name: "canonical", user: "Match canonical host *.lab\n  Port 2201\n",
			errAt: "config:1", errHas: []string{"fetch cannot evaluate Match canonical"}},
		{name: "localuser", user: "Match localuser monitor\n", errAt: "config:1", errHas: []string{"Match localuser"}},
		{name: "originalhost", user: "Match originalhost gpu01\n", errAt: "config:1", errHas: []string{"Match originalhost"}},
		{name: "tagged", user: "Match tagged lab\n", errAt: "config:1", errHas: []string{"Match tagged"}},
		{name: "localnetwork", user: "Match localnetwork 10.0.0.0/8\n", errAt: "config:1", errHas: []string{"Match localnetwork"}},
		{name: "negated host", user: "Match !host x\n", errAt: "config:1", errHas: []string{"Match !host", "Match host !a,*"}},
		{name: "host host", user: "Match host x host y\n", errAt: "config:1", errHas: []string{"Match host combined with host"}},
		{name: "space-separated list", user: "Match host a b\n", errAt: "config:1", errHas: []string{"b is not a Match criterion", "Match host a,b"}},
		{name: "sshd's criterion", user: "Match address 10.0.0.1\n", errAt: "config:1", errHas: []string{"address is not a Match criterion"}},
		{name: "no criterion", user: "Match\n", errAt: "config:1", errHas: []string{"needs a criterion"}},
		{name: "no pattern", user: "Match host\n", errAt: "config:1", errHas: []string{"Match host needs a pattern"}},
		{name: "empty list", user: "Match host ,\n", errAt: "config:1", errHas: []string{"Match host ,: Match host needs a pattern"}},
		{name: "unterminated quote", user: "Match host \"a\n", errAt: "config:1", errHas: []string{"unterminated quote"}},
		{name: "included by the user's file", user: "Host gpu01\n  Include {DIR}/lab.conf\n",
			included: map[string]string{"lab.conf": "# lab\nHost *\nMatch user alice\n  Port 2201\n"},
			errAt:    "lab.conf:3", errHas: []string{"Match user"}},
		{name: "system file", system: "Host *\n  SendEnv LANG\nMatch exec \"test -e /x\"\n",
			errAt: "ssh_config:3", errHas: []string{"Match exec"}},
		{name: "included by the system file", system: "Include {DIR}/sys.d/*.conf\n",
			included: map[string]string{"sys.d/10-lab.conf": "\n\nMatch host gpu* localuser root\n"},
			errAt:    "sys.d/10-lab.conf:3", errHas: []string{"Match localuser"}},

		{name: "RHEL: Match final in the system's files is left out", system: "Include {DIR}/sys.d/*.conf\nHost *\n  Port 2201\n",
			included: map[string]string{"sys.d/50-redhat.conf": rhelRedhatConf, "crypto.config": rhelCryptoPolicy},
			port2201: []string{"gpu01"}},
		{name: "Match final in the system file, then a Host block", system: "Match final host gpu*\n  Port 2299\n  Ciphers aes128-ctr\nMatch host gpu*\n  Port 2201\n",
			port2201: []string{"gpu01"}, other: []string{"x"}},
		{name: "RHEL's file as the user's", user: "Include {DIR}/50-redhat.conf\n",
			included: map[string]string{"50-redhat.conf": rhelRedhatConf, "crypto.config": rhelCryptoPolicy},
			errAt:    "50-redhat.conf:3", errHas: []string{"Match final all: fetch cannot evaluate Match final"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("HOME", dir)
			for name, text := range tt.included {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700)
				writeFile(t, dir, name, strings.ReplaceAll(text, "{DIR}", dir))
			}
			user := writeFile(t, dir, "config", strings.ReplaceAll(tt.user, "{DIR}", dir))
			system := writeFile(t, dir, "ssh_config", strings.ReplaceAll(tt.system, "{DIR}", dir))
			sc, err := LoadSSHConfig(user, system)
			if tt.errAt != "" {
				if err == nil {
					t.Fatalf("loaded; want an error at %s", tt.errAt)
				}
				if !strings.HasPrefix(err.Error(), filepath.Join(dir, tt.errAt)+": ") {
					t.Errorf("error %q; want it at %s", err, tt.errAt)
				}
				for _, want := range tt.errHas {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q; want it to say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, alias := range append(tt.port2201, tt.other...) {
				got, err := sc.Resolve(alias)
				if err != nil {
					t.Errorf("%s: %v", alias, err)
					continue
				}
				if in := slices.Contains(tt.port2201, alias); in != (got.Port == 2201) {
					t.Errorf("%s: port %d; want the block applied: %v", alias, got.Port, in)
				}
			}
		})
	}
}

// A ProxyCommand in a Match block fetch refuses never runs: the config does
// not load, so no host is dialed. The same block under "Match host gpu01"
// alone does run it, so the test would see it run.
func TestMatchRefusedProxyCommandNeverRuns(t *testing.T) {
	t.Setenv("SHELL", "/bin/sh")
	tests := []struct{ match, criterion string }{
		{"Match host gpu01", ""},
		{"Match host gpu01 user nobody", "Match user"},
		{"Match host gpu01 exec \"true\"", "Match exec"},
		{"Match host gpu01,other localuser root", "Match localuser"},
		{"Match all host gpu01", "Match all combined with host"},
		{"Match final host gpu01", "Match final"},
	}
	for _, tt := range tests {
		t.Run(tt.match, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("HOME", dir)
			mark := filepath.Join(dir, "proxy-ran")
			cfg := writeFile(t, dir, "config", "Host gpu01\n  HostName 127.0.0.1\n\n"+tt.match+"\n  ProxyCommand touch "+mark+"\n")
			sc, err := LoadSSHConfig(cfg, "")
			if err == nil {
				_, key := sshdtest.NewUserKey(t, dir)
				c := &Client{SSHConfig: sc, HostKeys: NewHostKeys(false), Keys: NewKeys(""), KeyFiles: []string{key}, Home: dir, Timeout: 10 * time.Second}
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c.Run(ctx, "gpu01", "true", nil) // the proxy only touches the file: the handshake fails
			}
			_, statErr := os.Stat(mark)
			ran := statErr == nil
			if tt.criterion == "" {
				if err != nil || !ran {
					t.Fatalf("accepted block: load error %v, ProxyCommand ran: %v; want it run", err, ran)
				}
				return
			}
			if ran {
				t.Errorf("the ProxyCommand of a refused block ran")
			}
			if err == nil || !strings.HasPrefix(err.Error(), cfg+":4: ") || !strings.Contains(err.Error(), tt.criterion) {
				t.Errorf("got %v; want an error at %s:4 naming %s", err, cfg, tt.criterion)
			}
		})
	}
}

func TestWildcardMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"?", "", false}, {"?", "a", true}, {"?", "ab", false},
		{"a*c", "abbbc", true}, {"a*c", "abbbd", false}, {"*.lab", "gpu1.lab", true}, {"*.lab", "gpu1.lab.x", false},
		{"g?u*1", "gpu01", true}, {"g?u*1", "gu01", false}, {"a.b", "axb", false}, {"a[1]", "a[1]", true},
		{"**a", "ba", true}, {"*a*b*", "xaybz", true}, {"*a*b*", "xbya", false},
	}
	for _, tt := range tests {
		if got := wildcardMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("wildcardMatch(%q, %q) = %v", tt.pattern, tt.s, got)
		}
	}
}
