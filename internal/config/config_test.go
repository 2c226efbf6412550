package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func parse(t testing.TB, src string) (*Config, error) {
	t.Helper()
	return Parse(strings.NewReader(src), "/etc/gpumon/config.ini")
}

// The file users of the older Python tool already have must load unchanged.
func TestOldToolConfig(t *testing.T) {
	c, err := parse(t, `[common]
user = monitor
hosts = gpu1,gpu2, gpu3
key_filename = /home/monitor/.ssh/id_rsa
`)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Path: "/etc/gpumon/config.ini", User: "monitor", Hosts: []string{"gpu1", "gpu2", "gpu3"},
		KeyFiles: []string{"/home/monitor/.ssh/id_rsa"}, StrictHostKeyChecking: StrictYes,
		Timeout: DefaultTimeout, Concurrency: DefaultConcurrency, Output: DefaultOutput,
		IdlemonState: "/run/idlemon/state.json",
	}
	if diff := cmp.Diff(want, c, cmp.AllowUnexported(Config{}), cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == ".lines"
	}, cmp.Ignore())); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

func TestNewKeys(t *testing.T) {
	c, err := parse(t, `[common]
Hosts = gpu[01-03], node[1-2,7]
    extra1
hosts_file = hosts.txt
hosts_command = sinfo -h -N -o %N  # not a comment: configparser has no inline comments
timeout = 7.5
concurrency = 64
known_hosts = ~/kh, /etc/ssh/ssh_known_hosts
strict_host_key_checking = accept-new
output = /srv/www/load_data.csv
idlemon_state = /var/run/idle/state.json
`)
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	if diff := cmp.Diff([]string{"gpu01", "gpu02", "gpu03", "node1", "node2", "node7", "extra1"}, c.Hosts); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}
	checks := []struct{ name, got, want string }{
		{"hosts_file relative to the config's folder", c.HostsFile, "/etc/gpumon/hosts.txt"},
		{"hosts_command keeps # and %", c.HostsCommand, "sinfo -h -N -o %N  # not a comment: configparser has no inline comments"},
		{"timeout", c.Timeout.String(), (7500 * time.Millisecond).String()},
		{"known_hosts ~", strings.Join(c.KnownHosts, " "), filepath.Join(home, "kh") + " /etc/ssh/ssh_known_hosts"},
		{"strict", c.StrictHostKeyChecking, StrictAcceptNew},
		{"output", c.Output, "/srv/www/load_data.csv"},
		{"idlemon_state, a path on the hosts", c.IdlemonState, "/var/run/idle/state.json"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %q, want %q", ch.name, ch.got, ch.want)
		}
	}
	if c.Concurrency != 64 {
		t.Errorf("concurrency = %d", c.Concurrency)
	}
}

// A mistake is reported with the file, line and key, never read as a default.
func TestBadConfig(t *testing.T) {
	tests := []struct {
		name, src, want, hint string
	}{
		{"unknown key", "[common]\nhosts = a\ntimout = 5\n", "/etc/gpumon/config.ini:3: timout: unknown key in [common]", "known keys"},
		{"bad timeout", "[common]\nhosts = a\n\ntimeout = soon\n", `/etc/gpumon/config.ini:4: timeout: "soon" is not a number of seconds`, ""},
		{"zero timeout", "[common]\nhosts = a\ntimeout = 0\n", `config.ini:3: timeout: "0" is not a number`, ""},
		{"bad concurrency", "[common]\nhosts = a\nconcurrency = -2\n", `config.ini:3: concurrency: "-2" is not a whole number`, ""},
		{"checking off", "[common]\nhosts = a\nstrict_host_key_checking = no\n", `config.ini:3: strict_host_key_checking: "no" is not yes or accept-new`, "never skips"},
		{"unknown section", "[common]\nhosts = a\n[comon]\nx = 1\n", "config.ini:3: unknown section [comon]", "known sections"},
		{"no hosts", "[common]\nuser = x\n", "hosts: no hosts", ""},
		{"no common", "[render]\ntitle = x\n", "no [common] section", ""},
		{"bad range", "[common]\nhosts = gpu[01-\n", `config.ini:2: hosts: "gpu[01-": '[' without ']'`, ""},
		{"reversed range", "[common]\nhosts = gpu[9-1]\n", `"9-1" is not a range`, ""},
		{"huge range", "[common]\nhosts = gpu[1-9999999]\n", "more than 100000 hosts", ""},
		{"relative idlemon_state", "[common]\nhosts = a\nidlemon_state = state.json\n", `config.ini:3: idlemon_state: "state.json" is not an absolute path`, ""},
		{"option-like host", "[common]\nhosts = -oProxyCommand=x\n", "cannot start with '-'", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.src)
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
			var ce *Error
			if tt.hint != "" && (!errors.As(err, &ce) || !strings.Contains(ce.Hint(), tt.hint)) {
				t.Errorf("hint of %q does not mention %q", err, tt.hint)
			}
		})
	}
}

func TestExpandRange(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"gpu1", []string{"gpu1"}},
		{"gpu[08-11]", []string{"gpu08", "gpu09", "gpu10", "gpu11"}},
		{"n[1-2,5]", []string{"n1", "n2", "n5"}},
		{"r[1-2]-g[1-2].lab", []string{"r1-g1.lab", "r1-g2.lab", "r2-g1.lab", "r2-g2.lab"}},
		{"x[7]", []string{"x7"}},
	}
	for _, tt := range tests {
		got, err := ExpandRange(tt.in)
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestResolveHosts(t *testing.T) {
	dir := t.TempDir()
	hostsFile := filepath.Join(dir, "hosts")
	os.WriteFile(hostsFile, []byte("# lab A\ngpu[01-02]\n\ngpu03  # spare\ngpu01\n"), 0o644)
	src := "[common]\nhosts = local, gpu01\nhosts_file = hosts\nhosts_command = printf 'node1\\nnode2\\nnode1\\n'\n"
	c, err := Parse(strings.NewReader(src), filepath.Join(dir, "config.ini"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.ResolveHosts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"local", "gpu01", "gpu02", "gpu03", "node1", "node2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}

	t.Run("failing command", func(t *testing.T) {
		c, _ := Parse(strings.NewReader("[common]\nhosts_command = echo 'sinfo: cannot reach slurmctld' >&2; exit 1\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "c.ini:2: hosts_command:") || !strings.Contains(err.Error(), "cannot reach slurmctld") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		c, _ := Parse(strings.NewReader("[common]\nhosts_file = nope\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "c.ini:2: hosts_file:") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("bad line in hosts file", func(t *testing.T) {
		os.WriteFile(filepath.Join(dir, "bad"), []byte("gpu1\ngpu[3-\n"), 0o644)
		c, _ := Parse(strings.NewReader("[common]\nhosts_file = bad\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "bad:2:") {
			t.Errorf("got %v", err)
		}
	})
}

// The shipped example must stay a valid config.
func TestExampleConfigParses(t *testing.T) {
	c, err := Load("../../config.example.ini")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Hosts) != 5 || c.User != "monitor" || c.Timeout != 20*time.Second {
		t.Errorf("example config read as %+v", c)
	}
}
