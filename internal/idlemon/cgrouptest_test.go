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
