package holders

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// fakeProc builds a proc tree in a temp dir: root/PID/stat, and root/PID/fd
// holding links to the files named.
type fakeProc struct {
	t    *testing.T
	root string
}

func (f *fakeProc) add(pid, ppid, pgid, sid int, state byte, fds ...string) {
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (proc %d) %c %d %d %d 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 %d 1000 1\n", pid, pid, state, ppid, pgid, sid, 1000+pid)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		f.t.Fatal(err)
	}
	for i, target := range fds {
		if err := os.Symlink(target, filepath.Join(dir, "fd", strconv.Itoa(i))); err != nil {
			f.t.Fatal(err)
		}
	}
}

// TestScanAncestry: the holders of a fake tree, and which of them belong to
// a job (leader 100, session 100): its descendants, also one that left the
// session, and an orphan still in the session; not an unrelated process nor
// its child.
func TestScanAncestry(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, "nvidia0")
	other := filepath.Join(dir, "other")
	for _, n := range []string{dev, other} {
		if err := os.WriteFile(n, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := statDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeProc{t: t, root: filepath.Join(dir, "proc")}
	f.add(1, 0, 1, 1, 'S', other)
	f.add(100, 1, 100, 100, 'S', other, other)      // the job's leader
	f.add(101, 100, 101, 101, 'S', other, dev)      // its child, in a session of its own
	f.add(102, 101, 101, 101, 'S', dev)             // grandchild
	f.add(200, 1, 100, 100, 'S', other, other, dev) // orphan left in the job's session
	f.add(300, 1, 300, 300, 'S', dev)               // somebody else's
	f.add(301, 300, 300, 300, 'S', dev)             // and its child
	f.add(302, 1, 302, 302, 'Z')                    // a zombie
	// a process with many files (several getdents), the device last
	many := make([]string, 700)
	for i := range many {
		many[i] = other
	}
	many[len(many)-1] = dev
	f.add(400, 301, 300, 300, 'S', many...)
	f.add(500, 1, 500, 500, 'S', other)

	s := NewScanner([]Device{d})
	s.Root = f.root
	snap, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := snap.Holders[0], []int{101, 102, 200, 300, 301, 400}; !reflect.DeepEqual(got, want) {
		t.Fatalf("holders %v, want %v", got, want)
	}
	if len(snap.PIDs) != 10 {
		t.Errorf("saw %d processes, want 10", len(snap.PIDs))
	}
	// Lazy: only the holders' stat lines have been read.
	if len(snap.Procs) != 6 || snap.Procs[100] != nil || snap.Procs[500] != nil {
		t.Errorf("read %d processes after the scan, want the 6 holders", len(snap.Procs))
	}
	if p := snap.Proc(102); p == nil || p.PPID != 101 || p.UID != os.Getuid() || p.Comm != "proc 102" {
		t.Errorf("Proc(102) = %+v", p)
	}

	roots, groups := []int{100}, map[int]bool{100: true}
	ours := map[int]bool{101: true, 102: true, 200: true}
	for _, pid := range snap.Holders[0] {
		if got := snap.Within(pid, roots, groups); got != ours[pid] {
			t.Errorf("Within(%d) = %v, want %v", pid, got, ours[pid])
		}
	}
	if len(snap.Procs) == 10 {
		t.Errorf("Within read every process")
	}
	desc := snap.Descendants(roots, groups)
	if want := map[int]bool{100: true, 101: true, 102: true, 200: true}; !reflect.DeepEqual(desc, want) {
		t.Errorf("Descendants = %v, want %v", desc, want)
	}
	if len(snap.Procs) != 10 {
		t.Errorf("after Descendants %d processes read, want 10", len(snap.Procs))
	}
	for _, pid := range snap.PIDs {
		if snap.Within(pid, roots, groups) != desc[pid] {
			t.Errorf("Within(%d) and Descendants disagree", pid)
		}
	}
	// the uid of a process read by Descendants is read when asked for
	if p := snap.Proc(500); p == nil || p.UID != os.Getuid() {
		t.Errorf("Proc(500) = %+v", p)
	}
	if p := snap.Proc(999); p != nil {
		t.Errorf("Proc(999) = %+v", p)
	}
}

func TestParseStatShort(t *testing.T) {
	if parseStat([]byte("1 (init) S 0 1 1 0 -1"), &Proc{}) {
		t.Error("short stat parsed")
	}
	if parseStat([]byte("x (init) S 0 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 5 1000 1"), &Proc{}) {
		t.Error("bad pid parsed")
	}
}
