// Package holders finds which processes hold GPU device files open, by
// reading /proc/*/fd directly (what fuser does, without running it): each fd
// is stat'ed through its /proc link and matched against the device files by
// (dev, inode), or, for character devices, by the device number alone, so an
// open of the same GPU through a container's own /dev counts too. It also
// reads each process's parent, group, session, uid and start time, which
// idlemon needs to tell its own jobs' processes from everybody else's.
package holders

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Device is one GPU's device file.
type Device struct {
	Index int
	Path  string
	Dev   uint64 // st_dev of the file
	Ino   uint64
	Rdev  uint64 // for a character device: its device number
	Char  bool
}

var trailingNumber = regexp.MustCompile(`([0-9]+)$`)

// Find expands glob and stats each match. The GPU index is the trailing
// number of the file name (/dev/nvidia3 is GPU 3); names without one
// (nvidiactl) are left out.
func Find(glob string) ([]Device, error) {
	names, err := filepath.Glob(glob)
	if err != nil {
		return nil, err
	}
	var out []Device
	seen := map[int]string{}
	for _, name := range names {
		m := trailingNumber.FindString(filepath.Base(name))
		if m == "" {
			continue
		}
		idx, err := strconv.Atoi(m)
		if err != nil {
			continue
		}
		if prev, ok := seen[idx]; ok {
			return nil, fmt.Errorf("%s and %s both name GPU %d", prev, name, idx)
		}
		seen[idx] = name
		d, err := Stat(name)
		if err != nil {
			return nil, err
		}
		d.Index = idx
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// Stat describes one device file.
func Stat(name string) (Device, error) {
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		return Device{}, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	return Device{
		Path: name,
		Dev:  uint64(st.Dev),
		Ino:  uint64(st.Ino),
		Rdev: uint64(st.Rdev),
		Char: st.Mode&unix.S_IFMT == unix.S_IFCHR,
	}, nil
}

// Proc is what /proc/PID/stat and status say about one process.
type Proc struct {
	PID, PPID, PGID, SID int
	UID                  int    // real uid
	Comm                 string // at most 15 characters
	State                byte   // R, S, Z...
	Start                uint64 // start time, clock ticks after boot (stat field 22)
}

// Snapshot is one scan.
type Snapshot struct {
	Procs   map[int]*Proc
	Holders map[int][]int // GPU index -> pids holding its device file, sorted
}

// Scanner scans a proc file system for holders of a fixed set of devices.
type Scanner struct {
	Root    string // "/proc" unless set
	devs    []Device
	byIno   map[[2]uint64]int // (dev, ino) -> GPU index
	byRdev  map[uint64]int    // rdev of a character device -> GPU index
	buf     []byte
	pathBuf []byte
}

// NewScanner returns a scanner for devs.
func NewScanner(devs []Device) *Scanner {
	s := &Scanner{Root: "/proc", devs: devs, byIno: map[[2]uint64]int{}, byRdev: map[uint64]int{}, buf: make([]byte, 4096)}
	for _, d := range devs {
		s.byIno[[2]uint64{d.Dev, d.Ino}] = d.Index
		if d.Char {
			s.byRdev[d.Rdev] = d.Index
		}
	}
	return s
}

// Scan reads every process once. Processes that vanish meanwhile (ENOENT,
// ESRCH) or that cannot be read (EACCES when not root) are skipped.
func (s *Scanner) Scan() (*Snapshot, error) {
	d, err := os.Open(s.Root)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Procs: make(map[int]*Proc, len(names)), Holders: map[int][]int{}}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		p, err := s.readStat(pid)
		if err != nil {
			continue
		}
		snap.Procs[pid] = p
		if p.State == 'Z' {
			continue
		}
		s.scanFDs(pid, snap)
	}
	for _, pids := range snap.Holders {
		sort.Ints(pids)
	}
	return snap, nil
}

func (s *Scanner) scanFDs(pid int, snap *Snapshot) {
	dir := s.Root + "/" + strconv.Itoa(pid) + "/fd"
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return // gone, or not ours to read
	}
	defer unix.Close(fd)
	var seen map[int]bool
	for {
		n, err := unix.Getdents(fd, s.buf)
		if err != nil || n <= 0 {
			return
		}
		b := s.buf[:n]
		for len(b) > 0 {
			reclen := int(uint16(b[16]) | uint16(b[17])<<8)
			nameb := b[19:reclen]
			if i := bytes.IndexByte(nameb, 0); i >= 0 {
				nameb = nameb[:i]
			}
			b = b[reclen:]
			if len(nameb) == 0 || nameb[0] == '.' {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, string(nameb), &st, 0) != nil {
				continue
			}
			idx, ok := s.byIno[[2]uint64{uint64(st.Dev), uint64(st.Ino)}]
			if !ok && st.Mode&unix.S_IFMT == unix.S_IFCHR {
				idx, ok = s.byRdev[uint64(st.Rdev)]
			}
			if !ok {
				continue
			}
			if seen == nil {
				seen = map[int]bool{}
			}
			if !seen[idx] {
				seen[idx] = true
				snap.Holders[idx] = append(snap.Holders[idx], pid)
			}
		}
	}
}

// readStat reads /proc/PID/stat (and the uid from the directory's owner).
func (s *Scanner) readStat(pid int) (*Proc, error) {
	path := s.Root + "/" + strconv.Itoa(pid) + "/stat"
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	n, err := unix.Read(fd, s.buf)
	var st unix.Stat_t
	serr := unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, serr
	}
	p, err := ParseStat(s.buf[:n])
	if err != nil {
		return nil, err
	}
	p.UID = int(st.Uid)
	return p, nil
}

// ParseStat parses the text of /proc/PID/stat: "pid (comm) S ppid pgrp
// session ... starttime(22) ...". comm may hold spaces and parentheses.
func ParseStat(b []byte) (*Proc, error) {
	open := bytes.IndexByte(b, '(')
	close := bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return nil, errors.New("bad stat")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return nil, err
	}
	f := strings.Fields(string(b[close+1:]))
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 20 {
		return nil, errors.New("short stat")
	}
	p := &Proc{PID: pid, Comm: string(b[open+1 : close]), State: f[0][0]}
	p.PPID, _ = strconv.Atoi(f[1])
	p.PGID, _ = strconv.Atoi(f[2])
	p.SID, _ = strconv.Atoi(f[3])
	p.Start, _ = strconv.ParseUint(f[19], 10, 64)
	return p, nil
}

// ReadProc reads one process from /proc (root "/proc" when empty).
func ReadProc(root string, pid int) (*Proc, error) {
	if root == "" {
		root = "/proc"
	}
	s := &Scanner{Root: root, buf: make([]byte, 4096)}
	return s.readStat(pid)
}

// StartTime is the start time of pid (stat field 22), or an error.
func StartTime(pid int) (uint64, error) {
	p, err := ReadProc("", pid)
	if err != nil {
		return 0, err
	}
	return p.Start, nil
}

// Descendants returns the pids of the processes descending from any of
// roots (roots included when they are alive), or belonging to one of the
// process groups or sessions in groups.
func (snap *Snapshot) Descendants(roots []int, groups map[int]bool) map[int]bool {
	children := map[int][]int{}
	for _, p := range snap.Procs {
		children[p.PPID] = append(children[p.PPID], p.PID)
	}
	out := map[int]bool{}
	queue := []int{}
	for _, r := range roots {
		if _, ok := snap.Procs[r]; ok {
			queue = append(queue, r)
		}
	}
	for _, p := range snap.Procs {
		if groups[p.PGID] || groups[p.SID] {
			queue = append(queue, p.PID)
		}
	}
	for len(queue) > 0 {
		pid := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if out[pid] {
			continue
		}
		out[pid] = true
		queue = append(queue, children[pid]...)
	}
	return out
}

// Cmdline is a process's command line, spaces between arguments, at most
// max bytes; "" when it cannot be read.
func Cmdline(root string, pid, max int) string {
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\x00")
	b = bytes.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, b)
	if len(b) > max {
		b = b[:max]
	}
	return strings.ToValidUTF8(string(b), "?")
}

// Names returns the names a process goes by: its comm, the base name of its
// executable, and the base name of argv[0].
func Names(root string, p *Proc) []string {
	if root == "" {
		root = "/proc"
	}
	out := []string{p.Comm}
	base := root + "/" + strconv.Itoa(p.PID)
	if exe, err := os.Readlink(base + "/exe"); err == nil {
		exe = strings.TrimSuffix(exe, " (deleted)")
		out = append(out, filepath.Base(exe))
	}
	if b, err := os.ReadFile(base + "/cmdline"); err == nil {
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		if len(b) > 0 {
			out = append(out, filepath.Base(string(b)))
		}
	}
	return out
}

// Matches reports whether a process going by names is one of programs. The
// kernel cuts comm to 15 bytes, so a 15-byte comm matches any program name
// it begins (nvidia-persistenced shows as nvidia-persiste).
func Matches(names []string, programs []string) bool {
	for i, n := range names {
		if n == "" {
			continue
		}
		for _, prog := range programs {
			if n == prog || (i == 0 && len(n) == 15 && strings.HasPrefix(prog, n)) {
				return true
			}
		}
	}
	return false
}

// GroupAlive reports whether any process other than a zombie is in process
// group pgid (a zombie left to a pid 1 that does not reap still counts for
// kill(2)).
func GroupAlive(root string, pgid int) bool {
	if pgid <= 1 {
		return false
	}
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	return len(Members(root, func(p *Proc) bool { return p.PGID == pgid })) > 0
}

// Members lists the live (non-zombie) processes for which keep is true.
func Members(root string, keep func(*Proc) bool) []*Proc {
	if root == "" {
		root = "/proc"
	}
	d, err := os.Open(root)
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	s := &Scanner{Root: root, buf: make([]byte, 4096)}
	var out []*Proc
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		p, err := s.readStat(pid)
		if err != nil || p.State == 'Z' || p.State == 'X' {
			continue
		}
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}
