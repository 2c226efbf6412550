package fetch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestResolveHosts(t *testing.T) {
	dir := t.TempDir()
	hostsFile := filepath.Join(dir, "hosts")
	os.WriteFile(hostsFile, []byte("# lab A\ngpu[01-02]\n\ngpu03  # spare\ngpu01\n"), 0o644)
	src := "[common]\nhosts = local, gpu01\nhosts_file = hosts\nhosts_command = printf 'node1\\nnode2\\nnode1\\n'\n"
	c, err := decodeConfig(strings.NewReader(src), filepath.Join(dir, "config.ini"))
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
		c, _ := decodeConfig(strings.NewReader("[common]\nhosts_command = echo 'sinfo: cannot reach slurmctld' >&2; exit 1\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "c.ini:2: hosts_command:") || !strings.Contains(err.Error(), "cannot reach slurmctld") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		c, _ := decodeConfig(strings.NewReader("[common]\nhosts_file = nope\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "c.ini:2: hosts_file:") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("bad line in hosts file", func(t *testing.T) {
		os.WriteFile(filepath.Join(dir, "bad"), []byte("gpu1\ngpu[3-\n"), 0o644)
		c, _ := decodeConfig(strings.NewReader("[common]\nhosts_file = bad\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "bad:2:") {
			t.Errorf("got %v", err)
		}
	})
}

// hosts_command and hosts_file are bounded in memory and time, whatever
// they do.
func TestHostsCommandBounds(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	for _, tc := range []struct {
		name, command string
		want          []string // nil: an error
		wantErr       string
		timeout       string
	}{
		// the cap, not the timeout, must end it: a loaded machine took over
		// 1s to print 16 MiB, so the timeout is far
		{"a flood", "yes gpu01", nil, "c.ini:3: hosts_command: `yes gpu01` failed: printed more than 16 MiB", "60"},
		{"a hang", "sleep 60", nil, "c.ini:3: hosts_command: `sleep 60` failed: did not finish within 1s", "1"},
		{"a hang in a pipeline", "sleep 60 | cat", nil, "did not finish within 1s", "1"},
		{"a child left holding stdout", "sleep 60 & echo $! > " + pidFile + "; echo gpu01", []string{"gpu01"}, "", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "[common]\ntimeout = " + tc.timeout + "\nhosts_command = " + tc.command + "\n"
			c, err := decodeConfig(strings.NewReader(src), filepath.Join(dir, "c.ini"))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got, err := c.ResolveHosts(context.Background())
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("took %v", took)
			}
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("got %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// the child the command left behind was stopped with it
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, strings.TrimSpace(string(pid)))
}

// waitGone waits until the process has exited (a zombie counts: its parent,
// init, reaps it when it will).
func waitGone(t testing.TB, pid string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return
		}
		if _, after, ok := strings.Cut(string(stat), ") "); ok && strings.HasPrefix(after, "Z") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s still runs: %s", pid, stat)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHostsFileBounds(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "c.ini")
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("# a comment line\n", 1<<20+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"too large", big, ini + ":2: hosts_file: " + big + " is larger than 16 MiB"},
		{"endless", "/dev/zero", ini + ":2: hosts_file: /dev/zero is larger than 16 MiB"},
		{"a folder", dir, ini + ":2: hosts_file: read " + dir + ": is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decodeConfig(strings.NewReader("[common]\nhosts_file = "+tc.file+"\n"), ini)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.ResolveHosts(context.Background())
			if err == nil || err.Error() != tc.want {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// Ranges that are each under hostrange.MaxHosts cannot add up past it: a hosts file of
// a hundred lines pN-[0-99999] is an error naming the line where the run
// went over, not ten million connections.
func TestHostsBoundedInAll(t *testing.T) {
	dir := t.TempDir()
	var file strings.Builder
	for i := range 100 {
		fmt.Fprintf(&file, "p%d-[0-99999]\n", i)
	}
	hostsFile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostsFile, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, config, want string
	}{
		{"hosts_file", "[common]\nhosts_file = hosts\n", "hosts:2: more than 100000 hosts in all"},
		{"hosts value", "[common]\nhosts = a[0-99999], b[0-99999]\n", "more than 100000 hosts in all"},
		{"sources together", "[common]\nhosts = a[1-60000]\nhosts_command = seq -f b%g 60000\n",
			"120000 hosts from hosts, hosts_file and hosts_command together, more than 100000"},
		// 300 ranges in one bracket: refused before any is made (it took
		// 2.2 GB and 20 s when each range was checked alone)
		{"many ranges in one bracket", "[common]\nhosts = g[" + strings.Repeat("0-99998,", 299) + "0-99998]\n",
			"expands to more than 100000 hosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := decodeConfig(strings.NewReader(tt.config), filepath.Join(dir, "config.ini"))
			if err == nil {
				_, err = c.ResolveHosts(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// A name listed many times is one host: 2 million lines of the same name
// from hosts_command are not "more than 100000 hosts".
func TestHostsDuplicatesCountOnce(t *testing.T) {
	c, err := decodeConfig(strings.NewReader("[common]\nhosts = gpu01\nhosts_command = yes gpu01 | head -n 2000000\n"),
		filepath.Join(t.TempDir(), "config.ini"))
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := c.ResolveHosts(context.Background())
	if err != nil || len(hosts) != 1 || hosts[0] != "gpu01" {
		t.Fatalf("hosts = %v, %v; want [gpu01]", hosts, err)
	}
}
