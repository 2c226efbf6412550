// Package holders finds which processes hold GPU device files open, by
// reading /proc/*/fd directly (what fuser does, without running it): each fd
// is stat'ed through its /proc link and matched against the device files by
// (dev, inode), or, for character devices, by the device number alone, so an
// open of the same GPU through a container's own /dev counts too. It also
// reads each process's parent, group, session, uid and start time, which
// idlemon needs to tell its own jobs' processes from everybody else's.
//
// On an AMD host (NewAMDScanner) an open file says less: every ROCm process
// opens /dev/kfd and every render node it can see, whatever GPU it uses, so
// the GPUs a process holds come from its KFD entry's VRAM per GPU (see
// amdHolders).
package holders

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Device is one GPU's device file.
type Device struct {
	Index int
	Path  string
	Dev   uint64 // st_dev of the file
	ino   uint64
	rdev  uint64 // for a character device: its device number
	char  bool
	mode  uint32 // the file's type (S_IFMT bits)
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
		d, err := statDevice(name)
		if err != nil {
			return nil, err
		}
		d.Index = idx
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// statDevice describes one device file.
func statDevice(name string) (Device, error) {
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		return Device{}, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	return Device{
		Path: name,
		Dev:  uint64(st.Dev),
		ino:  uint64(st.Ino),
		rdev: uint64(st.Rdev),
		char: st.Mode&unix.S_IFMT == unix.S_IFCHR,
		mode: st.Mode & unix.S_IFMT,
	}, nil
}

// oddKind names the type of a device file that is neither a character
// device nor a regular file (which stands for one in tests), or is "".
func (d Device) oddKind() string {
	switch d.mode {
	case unix.S_IFCHR, unix.S_IFREG:
		return ""
	case unix.S_IFIFO:
		return "a fifo"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a folder"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "a file of another kind"
}

// Proc is what /proc/PID/stat and status say about one process.
type Proc struct {
	PID, PPID, PGID, SID int
	UID                  int    // real uid
	Comm                 string // at most 15 characters
	State                byte   // R, S, Z...
	Start                uint64 // start time, clock ticks after boot (stat field 22)

	uidKnown bool // UID was read (loadAll leaves it out)
}

// Snapshot is one scan. Scan looks at every process's open files but reads
// the stat line only of the holders; the other processes are read when they
// are asked for (Proc, Within), or all at once by loadAll and Descendants.
// The lazy reads use the Scanner's buffers: a Snapshot is used by the
// goroutine that scans, before its next Scan.
type Snapshot struct {
	PIDs    []int         // every process seen, in /proc order
	Procs   map[int]*Proc // the processes read so far (all of them after loadAll)
	Holders map[int][]int // GPU index -> pids holding it (its device file; on AMD see amdHolders), sorted
	s       *Scanner      //
	all     bool          // loadAll done
	gone    map[int]bool  // could not be read
}

// Scanner scans a proc file system for holders of a fixed set of devices.
// It reuses its buffers from scan to scan and is not safe for concurrent
// use.
type Scanner struct {
	Root string // "/proc" unless set
	// Warn, when set, is told once about a device path that names
	// something else than a device file (a fifo put in its place), or the
	// file of another GPU.
	Warn    func(msg string)
	devs    []Device          // each device path's file at the last scan
	warned  []bool            // parallel to devs: Warn was told about it
	past    map[int][]Device  // GPU index -> the files its path named, oldest first
	byIno   map[[2]uint64]int // (dev, ino) -> GPU index
	byRdev  map[uint64]int    // rdev of a character device -> GPU index
	buf     []byte            // getdents of an fd dir; stat lines
	dirBuf  []byte            // getdents of Root
	pathBuf []byte
	pids    []int
	seen    []int     // GPUs one process holds
	kfd     *kfdState // on an AMD host (NewAMDScanner), else nil
}

// NewScanner returns a scanner for devs.
func NewScanner(devs []Device) *Scanner {
	s := &Scanner{
		Root: "/proc", devs: slices.Clone(devs), warned: make([]bool, len(devs)),
		past: map[int][]Device{}, byIno: map[[2]uint64]int{}, byRdev: map[uint64]int{},
	}
	for _, d := range devs {
		s.remember(d)
	}
	return s
}

// maxPast bounds the files a device path is remembered to have named.
const maxPast = 8

// remember counts d's file as its GPU's, unless it is another GPU's
// already. A GPU's earlier files stay counted (up to maxPast): a device
// node removed and made again, as a driver reload does, is a new inode,
// and a process may still hold the old one.
func (s *Scanner) remember(d Device) bool {
	key := [2]uint64{d.Dev, d.ino}
	if idx, ok := s.byIno[key]; ok && idx != d.Index {
		return false
	}
	if d.char {
		if idx, ok := s.byRdev[d.rdev]; ok && idx != d.Index {
			return false
		}
		s.byRdev[d.rdev] = d.Index
	}
	s.byIno[key] = d.Index
	past := append(s.past[d.Index], d)
	if len(past) > maxPast {
		old := past[0]
		past = past[1:]
		if !slices.ContainsFunc(past, func(p Device) bool { return p.Dev == old.Dev && p.ino == old.ino }) {
			delete(s.byIno, [2]uint64{old.Dev, old.ino})
		}
		if old.char && !slices.ContainsFunc(past, func(p Device) bool { return p.char && p.rdev == old.rdev }) {
			delete(s.byRdev, old.rdev)
		}
	}
	s.past[d.Index] = past
	return true
}

// refresh stats the device paths again (a stat never opens: a fifo in a
// device's place cannot block it). A path that names another file than at
// the last scan has that file counted too: whoever holds what is now at
// the GPU's path holds the GPU, as far as idlemon can tell.
func (s *Scanner) refresh() {
	for i := range s.devs {
		d := &s.devs[i]
		if d.Path == "" {
			continue
		}
		nd, err := statDevice(d.Path)
		if err != nil || (nd.Dev == d.Dev && nd.ino == d.ino) {
			s.warnOdd(i) // gone for now (removed, not yet made again), or the same
			continue
		}
		nd.Index = d.Index
		*d = nd
		s.warned[i] = false
		if !s.remember(nd) {
			s.warnOnce(i, fmt.Sprintf("%s is now the same file as another GPU's device file: it counts as that GPU's", d.Path))
			continue
		}
		s.warnOdd(i)
	}
}

// warnOdd tells Warn, once per file, that device i's path names what is
// not a device file, if it does.
func (s *Scanner) warnOdd(i int) {
	d := s.devs[i]
	if kind := d.oddKind(); kind != "" {
		s.warnOnce(i, fmt.Sprintf("%s is %s, not a device file: its holders count as the GPU's, and so do the holders of what it named before", d.Path, kind))
	}
}

// warnOnce tells Warn msg about device i's file, unless it was told one.
func (s *Scanner) warnOnce(i int, msg string) {
	if s.warned[i] || s.Warn == nil {
		return
	}
	s.warned[i] = true
	s.Warn(msg)
}

func (s *Scanner) root() string {
	if s.Root == "" {
		return "/proc"
	}
	return s.Root
}

func (s *Scanner) buffers() {
	if s.buf == nil {
		s.buf = make([]byte, 8192)
	}
	if s.dirBuf == nil {
		s.dirBuf = make([]byte, 64<<10)
	}
}

// Scan lists every process and looks at its open files, through the fd
// directory (a kernel thread's is empty, a zombie's too). Processes that
// vanish meanwhile (ENOENT, ESRCH) or that cannot be read (EACCES when not
// root) are skipped; so are holders whose stat line cannot be read.
func (s *Scanner) Scan() (*Snapshot, error) {
	s.buffers()
	dfd, err := unix.Open(s.root(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: s.root(), Err: err}
	}
	defer unix.Close(dfd)
	pids, err := s.listPIDs(dfd)
	if err != nil {
		return nil, &os.PathError{Op: "readdirent", Path: s.root(), Err: err}
	}
	s.refresh()
	snap := &Snapshot{PIDs: pids, Procs: map[int]*Proc{}, Holders: map[int][]int{}, s: s}
	if s.kfd != nil {
		s.kfd.holders = s.kfd.holders[:0]
	}
	for _, pid := range pids {
		s.scanFDs(dfd, pid, snap)
	}
	if s.kfd != nil {
		s.applyKFD(dfd, snap)
	}
	for idx, hs := range snap.Holders {
		kept := hs[:0]
		for _, pid := range hs {
			if p, err := s.readStat(dfd, pid, true); err == nil {
				snap.Procs[pid] = p
				kept = append(kept, pid)
			}
		}
		sort.Ints(kept)
		if len(kept) == 0 {
			delete(snap.Holders, idx)
		} else {
			snap.Holders[idx] = kept
		}
	}
	return snap, nil
}

// listPIDs reads the numeric entries of the open directory dfd.
func (s *Scanner) listPIDs(dfd int) ([]int, error) {
	pids := make([]int, 0, max(len(s.pids)+64, 256))
	for {
		n, err := unix.Getdents(dfd, s.dirBuf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		for b := s.dirBuf[:n]; len(b) >= 19; {
			reclen := int(uint16(b[16]) | uint16(b[17])<<8)
			if reclen < 19 || reclen > len(b) {
				break
			}
			if pid, ok := atoi(cstr(b[19:reclen])); ok && pid > 0 {
				pids = append(pids, pid)
			}
			b = b[reclen:]
		}
	}
	s.pids = pids
	return pids, nil
}

// path puts "PID/suffix\0" (relative to dfd) or, when dfd is AT_FDCWD,
// "Root/PID/suffix\0" in pathBuf.
func (s *Scanner) path(dfd, pid int, suffix string) []byte {
	b := s.pathBuf[:0]
	if dfd == unix.AT_FDCWD {
		b = append(b, s.root()...)
		b = append(b, '/')
	}
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, '/')
	b = append(b, suffix...)
	b = append(b, 0)
	s.pathBuf = b
	return b
}

// fdDirFull is how much room a getdents of an fd directory must leave
// unused for the directory to be known read to its end: the kernel fills
// the buffer until the next entry does not fit, and an fd's entry takes at
// most 32 bytes.
const fdDirFull = 256

// scanFDs records the devices pid holds open: one open, one getdents
// (mostly), a stat per fd, one close.
func (s *Scanner) scanFDs(dfd, pid int, snap *Snapshot) {
	s.seen = s.seen[:0]
	fd, err := openat(dfd, s.path(dfd, pid, "fd"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return // gone, or not ours to read
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Getdents(fd, s.buf)
		if err != nil || n <= 0 {
			return
		}
		for b := s.buf[:n]; len(b) >= 19; {
			reclen := int(uint16(b[16]) | uint16(b[17])<<8)
			if reclen < 19 || reclen > len(b) {
				break
			}
			name := b[19:reclen] // NUL-terminated
			b = b[reclen:]
			if name[0] == '.' || name[0] == 0 {
				continue
			}
			s.check(fd, name, pid, snap)
		}
		if n <= len(s.buf)-fdDirFull {
			return // room was left: that was all (saves a getdents per process)
		}
	}
}

// check stats the fd name (NUL-terminated) in the fd directory dir and
// records pid as a holder if it is a device's. It reports whether the stat
// worked.
func (s *Scanner) check(dir int, name []byte, pid int, snap *Snapshot) bool {
	var st unix.Stat_t
	if fstatat(dir, name, &st) != nil {
		return false
	}
	idx, ok := s.byIno[[2]uint64{uint64(st.Dev), uint64(st.Ino)}]
	if !ok && st.Mode&unix.S_IFMT == unix.S_IFCHR {
		idx, ok = s.byRdev[uint64(st.Rdev)]
	}
	if ok && !slices.Contains(s.seen, idx) {
		s.seen = append(s.seen, idx)
		if idx == kfdIndex {
			s.kfd.holders = append(s.kfd.holders, pid)
		} else {
			snap.Holders[idx] = append(snap.Holders[idx], pid)
		}
	}
	return true
}

// readStat reads PID/stat under dfd (or Root when dfd is AT_FDCWD), and
// when uid is set the real uid (realUID).
func (s *Scanner) readStat(dfd, pid int, uid bool) (*Proc, error) {
	p := &Proc{}
	if err := s.readStatInto(dfd, pid, uid, p); err != nil {
		return nil, err
	}
	return p, nil
}

func (s *Scanner) readStatInto(dfd, pid int, uid bool, p *Proc) error {
	if s.buf == nil {
		s.buf = make([]byte, 8192)
	}
	fd, err := openat(dfd, s.path(dfd, pid, "stat"), unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return err
	}
	n, err := unix.Read(fd, s.buf)
	var st unix.Stat_t
	var serr error
	if uid {
		serr = unix.Fstat(fd, &st)
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	if !parseStat(s.buf[:n], p) {
		return errors.New("bad stat")
	}
	if uid {
		p.UID, p.uidKnown = s.realUID(dfd, pid, int(st.Uid)), true
	}
	return nil
}

// realUID is pid's real uid, from its status file: the owner of its /proc
// files is its effective uid, and root while it is not dumpable (after it
// changed its uids without exec, or asked prctl), whoever it runs as. It
// is owner (the stat file's) when status cannot be read: the process has
// just gone, or a fake tree has none.
func (s *Scanner) realUID(dfd, pid, owner int) int {
	fd, err := openat(dfd, s.path(dfd, pid, "status"), unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return owner
	}
	n, err := unix.Read(fd, s.buf) // Uid is line 9: the first read holds it
	unix.Close(fd)
	if err != nil {
		return owner
	}
	if uid, ok := statusUID(s.buf[:n]); ok {
		return uid
	}
	return owner
}

// statusUID reads the first number (the real uid) of status's Uid line.
func statusUID(status []byte) (int, bool) {
	i := bytes.Index(status, []byte("\nUid:"))
	if i < 0 {
		return 0, false
	}
	b := status[i+5:]
	for len(b) > 0 && isSpace(b[0]) && b[0] != '\n' {
		b = b[1:]
	}
	end := 0
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	return atoi(b[:end])
}

// Proc returns process pid, read now if it was not yet (with its uid), or
// nil when it cannot be read.
func (snap *Snapshot) Proc(pid int) *Proc {
	if p, ok := snap.Procs[pid]; ok && p.uidKnown {
		return p
	}
	if snap.gone[pid] || snap.s == nil {
		return nil
	}
	p, err := snap.s.readStat(unix.AT_FDCWD, pid, true)
	if err != nil {
		if snap.gone == nil {
			snap.gone = map[int]bool{}
		}
		snap.gone[pid] = true
		return nil
	}
	snap.Procs[pid] = p
	return p
}

// loadAll reads the stat line of every process seen (not their uids).
func (snap *Snapshot) loadAll() {
	if snap.all || snap.s == nil {
		return
	}
	snap.all = true
	s := snap.s
	dfd, err := unix.Open(s.root(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(dfd)
	slab := make([]Proc, len(snap.PIDs))
	for i, pid := range snap.PIDs {
		if _, ok := snap.Procs[pid]; ok || snap.gone[pid] {
			continue
		}
		if s.readStatInto(dfd, pid, false, &slab[i]) == nil {
			snap.Procs[pid] = &slab[i]
		}
	}
}

// Within reports whether pid is one of the processes Descendants(roots,
// groups) returns, by walking up its parents only: pid, or one of its
// ancestors, is a live root or belongs to one of the groups or sessions in
// groups.
func (snap *Snapshot) Within(pid int, roots []int, groups map[int]bool) bool {
	for steps := 0; pid > 0 && steps < 1<<16; steps++ {
		p := snap.Proc(pid)
		if p == nil {
			return false
		}
		if slices.Contains(roots, pid) || groups[p.PGID] || groups[p.SID] {
			return true
		}
		pid = p.PPID
	}
	return false
}

// parseStat parses the text of /proc/PID/stat into p: "pid (comm) S ppid
// pgrp session ... starttime(22) ...". comm may hold spaces and
// parentheses. It allocates nothing but comm.
func parseStat(b []byte, p *Proc) bool {
	open := bytes.IndexByte(b, '(')
	close := bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return false
	}
	pid, ok := atoi(bytes.TrimSpace(b[:open]))
	if !ok {
		return false
	}
	*p = Proc{PID: pid}
	rest := b[close+1:]
	// field 3 (state) is the first after comm
	field := 2
	for field < 22 {
		for len(rest) > 0 && isSpace(rest[0]) {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			return false // short stat
		}
		i := 0
		for i < len(rest) && !isSpace(rest[i]) {
			i++
		}
		tok := rest[:i]
		rest = rest[i:]
		field++
		switch field {
		case 3:
			p.State = tok[0]
		case 4:
			p.PPID, _ = atoi(tok)
		case 5:
			p.PGID, _ = atoi(tok)
		case 6:
			p.SID, _ = atoi(tok)
		case 22:
			p.Start, _ = atou(tok)
		}
	}
	p.Comm = string(b[open+1 : close])
	return true
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// cstr cuts b at its first NUL.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// atoi parses a decimal int, "-" allowed; what strconv.Atoi accepts for
// the numbers of a stat line, without allocating.
func atoi(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := atou(b)
	if !ok || u > 1<<62 {
		return 0, false
	}
	if neg {
		return -int(u), true
	}
	return int(u), true
}

func atou(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	return u, true
}

// ReadProc reads one process from /proc (root "/proc" when empty).
func ReadProc(root string, pid int) (*Proc, error) {
	s := &Scanner{Root: root}
	return s.readStat(unix.AT_FDCWD, pid, true)
}

// Descendants returns the pids of the processes descending from any of
// roots (roots included when they are alive), or belonging to one of the
// process groups or sessions in groups. It reads every process (loadAll).
func (snap *Snapshot) Descendants(roots []int, groups map[int]bool) map[int]bool {
	snap.loadAll()
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
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, b)
	if len(b) > max {
		b = b[:max]
	}
	return strings.ToValidUTF8(string(b), "?")
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
	s := &Scanner{Root: root}
	var out []*Proc
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		p, err := s.readStat(unix.AT_FDCWD, pid, true)
		if err != nil || p.State == 'Z' || p.State == 'X' {
			continue
		}
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}
