package sshdtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// Tests of several packages (test binaries run at once) make cgroups of
// the same shapes, sharing parents such as /system.slice: the folders
// sshdtest made are listed in cgroupsMade, under the lock, so that
// whichever test leaves last removes a shared parent, and never one that
// was there before (a real host's /system.slice).
const (
	cgroupsLock = "/tmp/sshdtest-cgroups.lock"
	cgroupsMade = "/tmp/sshdtest-cgroups.made"
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
// sshdtest made are removed, deepest first, but for parents another
// test's cgroup still uses (that test removes them). Register it after the
// process's own Cleanup (StartProcessAs), so that it runs first. Use
// paths no other test uses at once (random job and container ids).
func PutInCgroup(t testing.TB, root, path string, pid int) {
	t.Helper()
	if !strings.HasPrefix(path, "/") || slices.Contains(strings.Split(path, "/"), "..") {
		t.Fatalf("sshdtest: cgroup path %q is not absolute and clean", path)
	}
	unlock := lockCgroups(t)
	defer unlock()
	var dirs []string // the path's folders, the leaf last
	dir := root
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		dir = filepath.Join(dir, part)
		dirs = append(dirs, dir)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			err = recordMade(dir)
		} else if errors.Is(err, os.ErrExist) {
			err = nil
		}
		if err != nil {
			removeCgroups(t, root, dirs)
			t.Fatalf("sshdtest: %v", err)
		}
	}
	t.Cleanup(func() {
		unlock := lockCgroups(t)
		defer unlock()
		removeCgroups(t, root, dirs)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("sshdtest: moving %d into %s: %v", pid, dir, err)
	}
}

// lockCgroups takes the lock on the list of folders made.
func lockCgroups(t testing.TB) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(cgroupsLock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("sshdtest: lock %s: %v", cgroupsLock, err)
	}
	return func() { f.Close() }
}

// recordMade adds dir to the list of folders sshdtest made.
func recordMade(dir string) error {
	f, err := os.OpenFile(cgroupsMade, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%q\n", dir) // quoted: a test may put a newline in a name
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// made reads the list of folders sshdtest made.
func made() map[string]bool {
	b, _ := os.ReadFile(cgroupsMade)
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if d, err := strconv.Unquote(l); err == nil {
			out[d] = true
		}
	}
	return out
}

// removeCgroups moves the processes of the leaf of dirs back to root, and
// removes the folders of dirs that sshdtest made, deepest first, up to the
// first one another test's cgroup still holds. Call it under the lock.
func removeCgroups(t testing.TB, root string, dirs []string) {
	t.Helper()
	leaf := dirs[len(dirs)-1]
	if procs, err := os.ReadFile(filepath.Join(leaf, "cgroup.procs")); err == nil {
		for _, pid := range strings.Fields(string(procs)) {
			// a process that ended meanwhile (ESRCH) needs no moving
			_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0o644)
		}
	}
	ours := made()
walk:
	for i := len(dirs) - 1; i >= 0; i-- {
		if !ours[dirs[i]] {
			break // there before the tests: not ours to remove, nor its parents
		}
		err := syscall.Rmdir(dirs[i])
		switch {
		case err == nil || errors.Is(err, syscall.ENOENT):
			delete(ours, dirs[i])
		case i < len(dirs)-1 && (errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EBUSY)):
			break walk // another test's cgroup is below: it removes this one
		default:
			t.Errorf("sshdtest: removing cgroup %s: %v", dirs[i], err)
			break walk
		}
	}
	var b strings.Builder
	for d := range ours {
		fmt.Fprintf(&b, "%q\n", d)
	}
	if err := os.WriteFile(cgroupsMade, []byte(b.String()), 0o600); err != nil {
		t.Errorf("sshdtest: %v", err)
	}
}
