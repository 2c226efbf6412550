package cgroup

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/gpumon/gpumon/internal/testenv"
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

// A Remove cut short (idlemon killed between its rmdirs; here a v1 folder
// still busy) leaves the group where the next idlemon finds it: its v2
// folder goes last, as Groups lists groups by it. Else its v1 folders stay
// forever, unlisted.
func TestRemoveCutShortLeavesTheGroupFindable(t *testing.T) {
	tr := newTree(t)
	g := create(t, tr, "half", Limits{PidsMax: 10})
	if g.V1["pids"] == "" {
		testenv.Need(t, "pids_max through a v1 pids hierarchy (a hybrid host)")
	}
	busy := exec.Command("sleep", "60")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Process.Kill(); busy.Wait() })
	if err := writeFile(filepath.Join(g.V1["pids"], "cgroup.procs"), strconv.Itoa(busy.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err == nil {
		t.Fatal("Remove of a group whose v1 folder holds a process: no error")
	}
	groups, err := tr.Groups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Name != g.Name {
		t.Errorf("after a Remove cut short, Groups = %v, want %s (its v1 folder %s is left)", groups, g.Name, g.V1["pids"])
	}
}

// Anybody who may read the tree's folder may flock it: a flock held by a
// process of the jobs' user (here nobody) must not make Open refuse the
// tree, or any job could turn cgroups off for the next idlemon.
func TestOpenIgnoresAFlockNotRoots(t *testing.T) {
	tr := newTree(t)
	treeLocksMu.Lock() // forget this process's hold, as a new idlemon would have none
	if held := treeLocks[tr.Dir]; held != nil {
		held.Close()
		delete(treeLocks, tr.Dir)
	}
	treeLocksMu.Unlock()
	nobody := exec.Command("flock", "-n", tr.Dir, "-c", "echo held; exec sleep 60")
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := nobody.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := nobody.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nobody.Process.Kill(); nobody.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("flock as nobody: %q, %v", line, err)
	}
	if _, err := Open(tr.H, tr.Dir); err != nil {
		t.Errorf("Open while nobody holds a flock on %s: %v", tr.Dir, err)
	}
}
