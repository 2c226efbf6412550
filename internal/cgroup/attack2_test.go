package cgroup

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// A tree is one idlemon's: Open refuses a folder another process holds
// (a second idlemon with the same cgroup key would stop the first's runs
// as its leftovers), and takes it again once that process is gone.
func TestOpenRefusesATreeHeldElsewhere(t *testing.T) {
	tr := newTree(t)
	f, err := os.Open(tr.Dir) // another open file description: another idlemon
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// the test's own Open holds it: release this process's hold to stand in
	// for the first idlemon with f
	treeLocksMu.Lock()
	if held := treeLocks[tr.Dir]; held != nil {
		held.Close()
		delete(treeLocks, tr.Dir)
	}
	treeLocksMu.Unlock()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(tr.H, tr.Dir); err == nil {
		t.Fatalf("Open of %s while another holds it: no error", tr.Dir)
	}
	f.Close() // the other idlemon ends
	if _, err := Open(tr.H, tr.Dir); err != nil {
		t.Fatalf("Open after the other ended: %v", err)
	}
	// and holds it now: a second idlemon (flock(1) here) is refused
	out, err := exec.Command("flock", "-n", "-s", tr.Dir, "true").CombinedOutput()
	if err == nil {
		t.Errorf("a shared flock on %s was granted while this process holds it: %s", tr.Dir, out)
	}
}

// cgroup = the v2 root itself: the root has no cgroup.kill, but the runs'
// groups, its children, have, and check (Inspect) says so. Open must agree,
// so that a stop is the cgroup.kill check promised, not a freeze and a
// SIGKILL to each process.
func TestOpenOfTheRootKnowsItsChildrenKill(t *testing.T) {
	tr := newTree(t) // a child of the root: has it cgroup.kill?
	inspected, err := Inspect(tr.H, tr.H.V2)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := Open(tr.H, tr.H.V2)
	if err != nil {
		t.Fatal(err)
	}
	if opened.CanKill != tr.CanKill || inspected.CanKill != tr.CanKill {
		t.Errorf("CanKill of the root tree: Open %v, Inspect %v; a child group's: %v", opened.CanKill, inspected.CanKill, tr.CanKill)
	}
}
