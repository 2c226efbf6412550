package sshdtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpumon/gpumon/internal/testenv"
)

// The cgroup hierarchies the tests place processes in: on the test
// machines (FIELD-NOTES), as root, a v1 hierarchy and the v2 one are
// mounted and writable.
const (
	CgroupV1 = "/sys/fs/cgroup/pids"
	CgroupV2 = "/sys/fs/cgroup/unified"
)

// NeedCgroups stops the test (testenv.Need) unless it runs as root with
// both hierarchies mounted.
func NeedCgroups(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t)
	for _, root := range []string{CgroupV1, CgroupV2} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			testenv.Need(t, fmt.Sprintf("sshdtest: no cgroup hierarchy at %s: %v", root, err))
		}
	}
}

// PutInCgroup makes the cgroup path (e.g. "/slurm/uid_0/job_42/step_0")
// in the hierarchy mounted at root, folders as needed, and moves pid into
// it: /proc/PID/cgroup then shows path for that hierarchy. At Cleanup,
// whatever runs in it goes back to the hierarchy's root and the folders
// it made are removed, deepest first; a parent another test still uses
// stays. Register it after the process's own Cleanup (StartProcessAs), so
// that it runs first.
func PutInCgroup(t testing.TB, root, path string, pid int) {
	t.Helper()
	if !strings.HasPrefix(path, "/") || strings.Contains(path, "/../") || strings.HasSuffix(path, "/..") {
		t.Fatalf("sshdtest: cgroup path %q is not absolute and clean", path)
	}
	var made []string
	dir := root
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		dir = filepath.Join(dir, part)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			made = append(made, dir)
		} else if !errors.Is(err, os.ErrExist) {
			removeCgroups(t, root, made)
			t.Fatalf("sshdtest: %v", err)
		}
	}
	t.Cleanup(func() { removeCgroups(t, root, made) })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("sshdtest: moving %d into %s: %v", pid, dir, err)
	}
}

// removeCgroups moves the processes of made back to root and removes
// made, deepest first. A folder that another test's cgroup still holds
// (ENOTEMPTY, EBUSY) stays; it is that test's to remove.
func removeCgroups(t testing.TB, root string, made []string) {
	t.Helper()
	for i := len(made) - 1; i >= 0; i-- {
		if procs, err := os.ReadFile(filepath.Join(made[i], "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(procs)) {
				// a process that ended meanwhile (ESRCH) needs no moving
				_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		err := syscall.Rmdir(made[i])
		switch {
		case err == nil || errors.Is(err, syscall.ENOENT):
		case i < len(made)-1 && (errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EBUSY)):
		default:
			t.Errorf("sshdtest: removing cgroup %s: %v", made[i], err)
		}
	}
}
