package fetch

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpumon/gpumon/internal/inifile"
)

func parseConfig(t testing.TB, src string) (*Config, error) {
	t.Helper()
	return decodeConfig(strings.NewReader(src), "/etc/gpumon/config.ini")
}

// The file users of the older Python tool already have must load unchanged.
func TestOldToolConfig(t *testing.T) {
	c, err := parseConfig(t, `[common]
user = monitor
hosts = gpu1,gpu2, gpu3
key_filename = /home/monitor/.ssh/id_rsa
`)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Path: "/etc/gpumon/config.ini", User: "monitor", Hosts: []string{"gpu1", "gpu2", "gpu3"},
		KeyFiles: []string{"/home/monitor/.ssh/id_rsa"}, StrictHostKeyChecking: strictYes,
		Timeout: defaultTimeout, Concurrency: defaultConcurrency, Output: "/etc/gpumon/load_data.csv",
		IdlemonState: "/run/idlemon/state.json", SystemSSHConfig: "/etc/ssh/ssh_config",
		ProcessUtil: true, KernelLog: true, PollInterval: 5 * time.Minute,
	}
	if diff := cmp.Diff(want, c, cmpopts.IgnoreUnexported(Config{})); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

func TestNewKeys(t *testing.T) {
	c, err := parseConfig(t, `[common]
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
containers = Docker
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
		{"containers, any case", c.Containers, "docker"},
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
		{"unknown container engine", "[common]\nhosts = a\ncontainers = containerd\n", `config.ini:3: containers: "containerd" is not docker, podman or none`, ""},
		{"option-like host", "[common]\nhosts = -oProxyCommand=x\n", "cannot start with '-'", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig(t, tt.src)
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
			var ce *inifile.Error
			if tt.hint != "" && (!errors.As(err, &ce) || !strings.Contains(ce.Hint(), tt.hint)) {
				t.Errorf("hint of %q does not mention %q", err, tt.hint)
			}
		})
	}
}

// The shipped example must stay a valid config.
func TestExampleConfigParses(t *testing.T) {
	c, err := LoadConfig("../../config.example.ini")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Hosts) != 5 || c.User != "" || c.Timeout != 20*time.Second || c.Containers != "" {
		t.Errorf("example config read as %+v", c)
	}
}

// fetch reads the same file as render and leaves render's sections to it:
// whatever [render] holds, a bad value there is render's error only.
func TestRenderSectionsDoNotBreakFetch(t *testing.T) {
	for _, src := range []string{
		"[common]\nhosts = a\n[render]\nrefresh = 5\n[host_names]\na = A\n",
		"[common]\nhosts = a\n[render]\nrefresh = never\n",
	} {
		if _, err := decodeConfig(strings.NewReader(src), "c.ini"); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// decodeConfig is LoadConfig of a config held in r, named name.
func decodeConfig(r io.Reader, name string) (*Config, error) {
	return inifile.DecodeReader(r, name, configFrom)
}
