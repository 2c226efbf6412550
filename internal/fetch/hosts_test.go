package fetch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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
	c, err := ParseConfig(strings.NewReader(src), filepath.Join(dir, "config.ini"))
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
		c, _ := ParseConfig(strings.NewReader("[common]\nhosts_command = echo 'sinfo: cannot reach slurmctld' >&2; exit 1\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "c.ini:2: hosts_command:") || !strings.Contains(err.Error(), "cannot reach slurmctld") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		c, _ := ParseConfig(strings.NewReader("[common]\nhosts_file = nope\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "c.ini:2: hosts_file:") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("bad line in hosts file", func(t *testing.T) {
		os.WriteFile(filepath.Join(dir, "bad"), []byte("gpu1\ngpu[3-\n"), 0o644)
		c, _ := ParseConfig(strings.NewReader("[common]\nhosts_file = bad\n"), filepath.Join(dir, "c.ini"))
		_, err := c.ResolveHosts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "bad:2:") {
			t.Errorf("got %v", err)
		}
	})
}
