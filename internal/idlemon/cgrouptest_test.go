package idlemon

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/testenv"
)

// testTree is a cgroup v2 folder of the test's own for its jobs' groups
// (cgroup = FOLDER in the config: every idlemon test runs in cgroup mode
// unless it says cgroup = off). At the test's end whatever is left in it
// is killed and every folder it made, v2 and v1, is removed.
func testTree(t testing.TB) string {
	t.Helper()
	h, err := cgroup.Mounted()
	if err != nil || h.V2 == "" {
		t.Fatalf("no cgroup v2 hierarchy here (%v): idlemon's tests need one (/sys/fs/cgroup/unified on a hybrid host)", err)
	}
	var b [6]byte
	rand.Read(b[:])
	dir := filepath.Join(h.V2, "gpumon-test-"+hex.EncodeToString(b[:]))
	t.Cleanup(func() { removeTree(t, h, dir) })
	return dir
}

// removeTree kills and removes dir's groups and dir, and their v1 mirrors.
func removeTree(t testing.TB, h cgroup.Hierarchies, dir string) {
	rel := strings.TrimPrefix(dir, h.V2)
	roots := []string{dir}
	for _, m := range h.V1 {
		roots = append(roots, m+rel)
	}
	for _, root := range roots {
		var dirs []string
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // children first
			g := &cgroup.Group{Name: filepath.Base(dirs[i]), Dir: dirs[i]}
			if root == dir {
				if populated, _ := g.Populated(); populated {
					t.Errorf("processes left in %s at the test's end: killed", dirs[i])
					g.Kill()
					g.WaitEmpty(time.Now().Add(patience))
				}
			}
			os.Remove(dirs[i])
		}
	}
}

// groupsIn lists the run groups left in the tree dir.
func groupsIn(t testing.TB, dir string) []string {
	t.Helper()
	es, _ := os.ReadDir(dir)
	var out []string
	for _, e := range es {
		if _, _, ok := cgroup.ParseGroupName(e.Name()); e.IsDir() && ok {
			out = append(out, e.Name())
		}
	}
	return out
}

// check says which mode the host is in and why, how each limit is
// enforced, and which one is not; it makes nothing.
func TestCheckSaysCgroupMode(t *testing.T) {
	e := newCgroupEnv(t, 1)
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"cgroups", "user = root\nmemory_high = 1G\nmemory_max = 2G\npids_max = 64\n[process-a]\ngpus = 0\ncmd = sleep 600\n", []string{
			"cgroup: v2+v1, a group per run under " + e.cgroup + " (cgroup = " + e.cgroup + "); stop: SIGTERM to every process of the group, then cgroup.kill\n",
			"job process-a: limits cpu_weight 1 (cgroup v1 cpu.shares", "memory_max 2 GiB (cgroup v1 memory.limit_in_bytes", "pids_max 64 (cgroup v1 pids.max",
			"warning: job process-a: NOT ENFORCED: memory_high 1 GiB: cgroup v1 has no memory.high",
		}},
		{"off", "cgroup = off\nuser = root\npids_max = 64\n[process-a]\ngpus = 0\ncmd = sleep 600\n", []string{
			"cgroup: none (marks only): cgroup = off in " + e.path("idlemon.ini"),
			"warning: job process-a: its limits are not enforced without cgroups\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out testenv.SyncBuffer
			if err := Main(t.Context(), []string{"-c", e.config(tt.body), "check"}, &out, &testenv.SyncBuffer{}); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("check's output lacks %q:\n%s", w, out.String())
				}
			}
			if _, err := os.Stat(e.cgroup); err == nil {
				t.Errorf("check made %s", e.cgroup)
			}
		})
	}
}

// A cgroup folder or textfile folder the config names and that cannot be
// used is an error naming the line, for check and run alike: whoever
// wrote it wants its limits, or its metrics.
func TestCheckRefusesUnusableFolders(t *testing.T) {
	e := newCgroupEnv(t, 1)
	tests := []struct {
		name, body, want string
	}{
		{"cgroup outside v2", "cgroup = " + e.path("cg") + "\n", "cgroup: cgroup folder " + e.path("cg") + " is not in the cgroup v2 hierarchy ("},
		{"textfile missing", "textfile_dir = " + e.path("nope") + "\n", "textfile_dir: " + e.path("nope") + " does not exist"},
		{"textfile a file", "textfile_dir = " + e.path("idlemon.ini") + "\n", "textfile_dir: " + e.path("idlemon.ini") + " is not a folder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := e.config(tt.body)
			for _, cmd := range []string{"check", "run"} {
				err := Main(t.Context(), []string{"-c", cfg, cmd}, &testenv.SyncBuffer{}, &testenv.SyncBuffer{})
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: %v, want an error with %q", cmd, err, tt.want)
				}
			}
		})
	}
}
