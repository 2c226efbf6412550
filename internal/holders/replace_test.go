package holders

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// holdIn starts a process that holds f open until the test ends, and
// returns its pid.
func holdIn(t *testing.T, f *os.File) int {
	t.Helper()
	c := exec.Command("sleep", "600")
	c.ExtraFiles = []*os.File{f}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c.Process.Pid
}

func openFile(t *testing.T, path string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// oneDevice makes a plain file standing for GPU 0's device and a scanner
// for it.
func oneDevice(t *testing.T) (path string, s *Scanner) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "nvidia0")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	devs, err := Find(filepath.Join(filepath.Dir(path), "nvidia*"))
	if err != nil || len(devs) != 1 {
		t.Fatalf("Find: %v %v", devs, err)
	}
	return path, NewScanner(devs)
}

func holdersOf(t *testing.T, s *Scanner) []int {
	t.Helper()
	snap, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	return snap.Holders[0]
}

// A device file removed and made again (a driver reload) is a new inode:
// its holders are the GPU's, and so are the old file's.
func TestScanRecreatedDevice(t *testing.T) {
	path, s := oneDevice(t)
	oldHolder := holdIn(t, openFile(t, path, os.O_RDONLY))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	newHolder := holdIn(t, openFile(t, path, os.O_RDONLY))
	got := holdersOf(t, s)
	for _, pid := range []int{oldHolder, newHolder} {
		if !slices.Contains(got, pid) {
			t.Errorf("holders %v lack pid %d", got, pid)
		}
	}
}

// A fifo put in a device file's place is stat'ed, never opened: the scan
// does not block, the fifo's holder counts, so does the holder of the
// device it replaced, and Warn hears of it once.
func TestScanFifoInDevicePlace(t *testing.T) {
	path, s := oneDevice(t)
	var warnings []string
	s.Warn = func(msg string) { warnings = append(warnings, msg) }
	original := path + ".real"
	if err := os.Link(path, original); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	fifoHolder := holdIn(t, openFile(t, path, os.O_RDWR))
	deviceHolder := holdIn(t, openFile(t, original, os.O_RDONLY))
	for range 2 {
		got := holdersOf(t, s)
		for _, pid := range []int{fifoHolder, deviceHolder} {
			if !slices.Contains(got, pid) {
				t.Errorf("holders %v lack pid %d", got, pid)
			}
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], path+" is a fifo, not a device file") {
		t.Errorf("warnings %q, want one that %s is a fifo", warnings, path)
	}
}

// A GPU's path is remembered to have named at most maxPast files: the
// oldest is forgotten first, the current one never.
func TestRememberBounded(t *testing.T) {
	s := NewScanner([]Device{{Index: 0, Path: "x", Dev: 1, ino: 1}})
	for ino := uint64(2); ino <= maxPast+1; ino++ {
		s.remember(Device{Index: 0, Path: "x", Dev: 1, ino: ino})
	}
	if _, ok := s.byIno[[2]uint64{1, 1}]; ok {
		t.Error("the oldest file is still counted")
	}
	for ino := uint64(2); ino <= maxPast+1; ino++ {
		if _, ok := s.byIno[[2]uint64{1, ino}]; !ok {
			t.Errorf("file %d forgotten", ino)
		}
	}
	// another GPU's file is not taken
	if s.remember(Device{Index: 1, Path: "y", Dev: 1, ino: 5}) || s.byIno[[2]uint64{1, 5}] != 0 {
		t.Error("GPU 1 took GPU 0's file")
	}
}

// A process's uid is the real uid of its status file, not the owner of
// its /proc files (root while it is not dumpable); the owner where status
// cannot be read.
func TestProcRealUID(t *testing.T) {
	dir := t.TempDir()
	f := &fakeProc{t: t, root: filepath.Join(dir, "proc")}
	f.add(10, 1, 10, 10, 'S')
	f.add(11, 1, 11, 11, 'S')
	status := "Name:\tx\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t10\nNgid:\t0\nPid:\t10\nPPid:\t1\nTracerPid:\t0\nUid:\t1234\t0\t0\t0\nGid:\t0\t0\t0\t0\n"
	if err := os.WriteFile(filepath.Join(f.root, "10", "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pid  int
		want int
	}{
		{"status", 10, 1234},
		{"no status", 11, os.Getuid()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ReadProc(f.root, tc.pid)
			if err != nil {
				t.Fatal(err)
			}
			if p.UID != tc.want {
				t.Errorf("uid %d, want %d", p.UID, tc.want)
			}
		})
	}
}

func TestStatusUID(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		uid          int
		ok           bool
	}{
		{"tabs", "Name:\tx\nUid:\t1000\t0\t0\t0\n", 1000, true},
		{"last line", "Name:\tx\nUid:\t7", 7, true},
		{"no uid line", "Name:\tx\nGid:\t1\n", 0, false},
		{"empty uid", "Name:\tx\nUid:\n", 0, false},
		{"not a number", "Name:\tx\nUid:\t-x\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid, ok := statusUID([]byte(tc.status))
			if uid != tc.uid || ok != tc.ok {
				t.Errorf("statusUID = %d, %v; want %d, %v", uid, ok, tc.uid, tc.ok)
			}
		})
	}
}
