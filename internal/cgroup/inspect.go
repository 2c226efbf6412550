package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Inspect is what Open(h, dir) would give, found without changing
// anything (for `idlemon check`): the controllers Open could enable are
// those of cpu, memory and pids in dir's cgroup.controllers, or, while dir
// does not exist, in its nearest existing ancestor's
// cgroup.subtree_control (what a new child is given).
func Inspect(h Hierarchies, dir string) (*Tree, error) {
	if h.V2 == "" {
		return nil, errors.New("no cgroup v2 hierarchy")
	}
	rel, err := relInside(h.V2, dir)
	if err != nil {
		return nil, err
	}
	t := &Tree{H: h, Dir: dir, Rel: rel}
	file := filepath.Join(dir, "cgroup.controllers")
	probe := dir
	for {
		if _, err := os.Stat(probe); err == nil {
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe || len(parent) < len(h.V2) {
			break
		}
		probe, file = parent, filepath.Join(parent, "cgroup.subtree_control")
	}
	b, _ := os.ReadFile(file)
	for _, c := range strings.Fields(string(b)) {
		if slices.Contains([]string{"cpu", "memory", "pids"}, c) {
			t.Controllers = append(t.Controllers, c)
		}
	}
	_, err = os.Stat(filepath.Join(probe, "cgroup.kill"))
	t.CanKill = err == nil
	if !t.CanKill && probe == h.V2 {
		t.CanKill = inspectChildKill(h.V2) // the root group has no cgroup.kill of its own
	}
	return t, nil
}

// inspectChildKill says whether a child group of root would have
// cgroup.kill: a child's, where one exists, else the kernel's version
// (5.14 brought it).
func inspectChildKill(root string) bool {
	es, _ := os.ReadDir(root)
	for _, e := range es {
		if e.IsDir() {
			_, err := os.Stat(filepath.Join(root, e.Name(), "cgroup.kill"))
			return err == nil
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	return major > 5 || major == 5 && minor >= 14
}
