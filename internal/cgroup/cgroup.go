// Package cgroup is idlemon's use of the kernel's control groups: a
// subtree of the cgroup v2 hierarchy where each run of a job gets a group
// of its own, with its limits, so that every process the job starts is
// found, frozen and killed whatever it does with sessions, process groups,
// titles or environment, and cannot take the host's CPUs, memory or pids.
//
// cgroup v2 is required (a cgroup2 mount, /sys/fs/cgroup on pure v2 hosts,
// /sys/fs/cgroup/unified on hybrid ones). A limit whose controller is not
// in the v2 hierarchy is set through the cgroup v1 hierarchy of that
// controller where one is mounted, in a folder at the same path relative
// to its mount as the v2 group; Plan says which limit goes where, and which
// cannot be enforced, and why.
//
// Everything here takes paths, so tests run on real cgroups in folders of
// their own.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/gpumon/gpumon/internal/cli"
	"golang.org/x/sys/unix"
)

// maxRead bounds what is read of any one kernel file (/proc/PID/cgroup,
// cgroup.events...): 64 KiB.
const maxRead = 64 << 10

// maxProcs bounds a cgroup.procs: a fork bomb in a group without pids_max
// may hold tens of thousands of pids, and Kill without cgroup.kill must
// see them all. 4 MiB is half a million pids.
const maxProcs = 4 << 20

// maxMountinfo bounds /proc/self/mountinfo, which has a line per mount:
// thousands on a Kubernetes node; maxMountLine bounds one line (an
// overlay's lowerdir lists every layer).
const (
	maxMountinfo = 16 << 20
	maxMountLine = 1 << 20
)

// Hierarchies are the cgroup file systems mounted here.
type Hierarchies struct {
	V2 string            // the cgroup2 mount point; "" when none
	V1 map[string]string // controller (cpu, memory, pids, freezer...) -> its v1 mount point
}

// v1Controllers are the names a v1 mount's super options may hold that
// are controllers; the other options (rw, name=systemd, xattr,
// release_agent=...) are not.
var v1Controllers = map[string]bool{
	"blkio": true, "cpu": true, "cpuacct": true, "cpuset": true, "devices": true,
	"freezer": true, "hugetlb": true, "memory": true, "misc": true, "net_cls": true,
	"net_prio": true, "perf_event": true, "pids": true, "rdma": true, "debug": true,
}

// ParseMountinfo reads /proc/self/mountinfo's format. A v1 mount holding
// several controllers (cpu,cpuacct) is listed under each. Mount points are
// unescaped (\040 is a space). Where a hierarchy is mounted twice, the
// first mount counts.
func ParseMountinfo(r io.Reader) (Hierarchies, error) {
	h := Hierarchies{V1: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxMountLine)
	for n := 1; sc.Scan(); n++ {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		before, after, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(before), strings.Fields(after)
		if !ok || len(fields) < 6 || len(tail) < 3 {
			return Hierarchies{}, fmt.Errorf("mountinfo line %d: not ID PARENT DEV ROOT POINT OPTIONS ... - TYPE SOURCE OPTIONS", n)
		}
		point := unescapeMount(fields[4])
		switch tail[0] {
		case "cgroup2":
			if h.V2 == "" {
				h.V2 = point
			}
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				if _, seen := h.V1[opt]; v1Controllers[opt] && !seen {
					h.V1[opt] = point
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Hierarchies{}, fmt.Errorf("mountinfo: %w", err)
	}
	return h, nil
}

// unescapeMount undoes the kernel's octal escapes of a mount point
// (\040 space, \011 tab, \012 newline, \134 backslash).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Mounted reads /proc/self/mountinfo.
func Mounted() (Hierarchies, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Hierarchies{}, err
	}
	defer f.Close()
	return ParseMountinfo(io.LimitReader(f, maxMountinfo))
}

// Membership is a process's groups, from /proc/PID/cgroup: V2 is the
// path of the "0::" line ("/system.slice/idlemon.service"), V1 each v1
// controller's path.
type Membership struct {
	V2 string
	V1 map[string]string
}

// ParseProcCgroup reads /proc/PID/cgroup's format (bounded: at most 64
// KiB are read by ReadMembership). Named v1 hierarchies (name=systemd)
// are no controllers and are left out.
func ParseProcCgroup(r io.Reader) (Membership, error) {
	m := Membership{V1: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxRead)
	for n := 1; sc.Scan(); n++ {
		// ID:CONTROLLERS:PATH; the path may hold colons.
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return Membership{}, fmt.Errorf("cgroup line %d: not ID:CONTROLLERS:/PATH", n)
		}
		if parts[0] == "0" && parts[1] == "" {
			m.V2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" && !strings.HasPrefix(c, "name=") {
				m.V1[c] = parts[2]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Membership{}, fmt.Errorf("cgroup: %w", err)
	}
	return m, nil
}

// ReadMembership reads proc/PID/cgroup (proc is "/proc" in production).
func ReadMembership(proc string, pid int) (Membership, error) {
	b, err := readBounded(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return Membership{}, err
	}
	m, err := ParseProcCgroup(strings.NewReader(string(b)))
	if err != nil {
		return Membership{}, fmt.Errorf("%s/%d/%w", proc, pid, err)
	}
	return m, nil
}

// readBounded reads path, an error when it holds more than maxRead bytes.
func readBounded(path string) ([]byte, error) { return readAtMost(path, maxRead) }

// readAtMost reads path, an error when it holds more than limit bytes.
func readAtMost(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", path, limit)
	}
	return b, nil
}

// writeFile writes s to an existing kernel file in one write(2), as the
// cgroup files want it, with the file named in the error.
func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", s, path, err)
	}
	return nil
}

// Limits are what one run of a job may take. 0 is no limit, for each.
type Limits struct {
	CPUWeight  int   // v2 cpu.weight (1..10000); v1 cpu.shares = max(2, weight*1024/100)
	MemoryHigh int64 // v2 memory.high; v1: not enforced (v1 has no throttle: say so)
	MemoryMax  int64 // v2 memory.max (and memory.oom.group = 1: the whole job goes at once); v1 memory.limit_in_bytes
	PidsMax    int64 // v2 and v1 pids.max
}

// Enforcement is how one limit that is set is enforced, for `idlemon
// check` and the log.
type Enforcement struct {
	Limit string // "cpu_weight", "memory_high", "memory_max", "pids_max" (the config's keys)
	Value string // as the config means it: "1", "8 GiB", "512"
	// File is the file that enforces it ("cgroup v2 memory.max",
	// "cgroup v1 memory.limit_in_bytes (/sys/fs/cgroup/memory)"); "" when
	// it is not enforced.
	File string
	// Why says why it is not enforced ("no memory controller in the v2
	// hierarchy (/sys/fs/cgroup/unified) nor a v1 memory hierarchy"); ""
	// when it is.
	Why string
}

// Tree is idlemon's subtree: each run of a job gets a group in it.
type Tree struct {
	H   Hierarchies
	Dir string // the subtree's v2 folder (absolute)
	Rel string // Dir relative to H.V2, starting with "/": the v1 groups mirror it
	// CanKill: cgroup.kill exists (Linux 5.14); else Kill freezes, signals
	// each process and thaws. Groups made or listed by t after it is set
	// false use the second way even where cgroup.kill exists.
	CanKill bool
	// Controllers are the v2 controllers enabled for the jobs' groups (in
	// Dir's cgroup.subtree_control).
	Controllers []string
}

// limitControllers are the controllers the limits need, enabled by Open
// where v2 offers them.
var limitControllers = []string{"cpu", "memory", "pids"}

// supervisorGroup is the folder of Dir that Open moves the calling
// process into when it is in Dir itself.
const supervisorGroup = "supervisor"

// Open makes dir (inside h.V2; an error otherwise) the subtree: makes it
// and its parents where missing (mode 0755, as root), and enables in its
// cgroup.subtree_control those of cpu, memory and pids that its
// cgroup.controllers offers. When the calling process is in dir itself
// (auto mode under systemd, Delegate=yes), it first moves itself to
// dir/supervisor: a v2 group with processes cannot hand controllers to
// its children. It never enables a controller above dir.
//
// It takes an exclusive flock on dir, held until the process ends: a
// second idlemon given the same folder (another state file, the same
// cgroup key) is refused, as it would take the first one's runs for
// leftovers of its own and stop them. A flock held by a process that is
// not root's (anybody may take one) is no idlemon's, and does not stop
// Open.
//
// dir may be h.V2 itself (Rel "/"); the root has no cgroup.kill, but its
// children, the runs' groups, have where the kernel has it: CanKill says
// so.
func Open(h Hierarchies, dir string) (*Tree, error) {
	if h.V2 == "" {
		return nil, cli.WithHint(errors.New("no cgroup v2 hierarchy is mounted"),
			"mount one (hybrid hosts: cgroup2 on /sys/fs/cgroup/unified) or set cgroup = off")
	}
	rel, err := relInside(h.V2, dir)
	if err != nil {
		return nil, err
	}
	t := &Tree{H: h, Dir: filepath.Clean(dir), Rel: rel}
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return nil, cli.WithHint(err, "idlemon makes its cgroups as root; a systemd unit needs Delegate=yes")
	}
	if err := lockTree(t.Dir); err != nil {
		return nil, err
	}
	if err := t.moveSelfOut(); err != nil {
		return nil, err
	}
	t.Controllers, err = enableControllers(t.Dir, writeFile)
	if err != nil {
		return nil, err
	}
	_, err = os.Stat(filepath.Join(t.Dir, "cgroup.kill"))
	t.CanKill = err == nil
	if t.Rel == "/" {
		t.CanKill = inspectChildKill(t.Dir) // the runs' groups are the root's children
	}
	return t, nil
}

// treeLocks are the trees this process holds the flock of, by folder: a
// daemon opens its tree once, tests open theirs again in the same process.
var (
	treeLocksMu sync.Mutex
	treeLocks   = map[string]*os.File{}
)

// lockTree takes an exclusive flock on dir for the rest of this process's
// life (the descriptor is close-on-exec: no job inherits it), or finds it
// held by this process already.
func lockTree(dir string) error {
	treeLocksMu.Lock()
	defer treeLocksMu.Unlock()
	if f, ok := treeLocks[dir]; ok {
		if same, err := sameFile(f, dir); err == nil && same {
			return nil
		}
		f.Close() // the folder was removed and made again
		delete(treeLocks, dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) && !heldByRoot(f) {
			// Anybody who may read the folder may flock it: a job's user
			// holding it must not turn idlemon's cgroups off. No idlemon
			// holds it, so go on without it.
			return nil
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			return cli.WithHint(fmt.Errorf("cgroup folder %s is in use by another idlemon", dir),
				"give each idlemon a folder of its own (cgroup = auto does), or stop the other one")
		}
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	treeLocks[dir] = f
	return nil
}

// heldByRoot says whether a process running as root holds a flock on
// the open f, by /proc/locks ("1: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE
// 0 EOF"; waiters' lines have "->" after the number).
func heldByRoot(f *os.File) bool {
	fi, err := f.Stat()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if err != nil || !ok {
		return true // unknown: take it for another idlemon
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	locks, err := readAtMost("/proc/locks", maxMountinfo)
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(locks), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != id {
			continue
		}
		status, err := readBounded(filepath.Join("/proc", fields[4], "status"))
		if err != nil {
			continue // exited meanwhile, or in another pid namespace
		}
		if uids := keyValues(strings.ReplaceAll(string(status), ":\t", " "))["Uid"]; strings.HasPrefix(uids, "0\t0\t") {
			return true
		}
	}
	return false
}

// sameFile says whether the open f is the file at path now.
func sameFile(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(held, now), nil
}

// relInside is dir relative to the mount point v2, starting with "/", or
// an error when dir is not absolute or not in v2.
func relInside(v2, dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("cgroup folder %q is not an absolute path", dir)
	}
	rel, err := filepath.Rel(filepath.Clean(v2), filepath.Clean(dir))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", cli.WithHint(fmt.Errorf("cgroup folder %s is not in the cgroup v2 hierarchy (%s)", dir, v2),
			"give a folder under %s, or cgroup = auto", v2)
	}
	if rel == "." {
		return "/", nil
	}
	return "/" + rel, nil
}

// moveSelfOut moves the calling process from t.Dir, where it may not stay
// and delegate controllers, to t.Dir/supervisor. The root is exempt from
// that rule, and never left.
func (t *Tree) moveSelfOut() error {
	if t.Rel == "/" {
		return nil
	}
	self, err := ReadMembership("/proc", os.Getpid())
	if err != nil {
		return err
	}
	if self.V2 != t.Rel {
		return nil
	}
	sup := filepath.Join(t.Dir, supervisorGroup)
	if err := os.Mkdir(sup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return writeFile(filepath.Join(sup, "cgroup.procs"), strconv.Itoa(os.Getpid()))
}

// enableControllers writes "+c" to dir's cgroup.subtree_control for each
// of limitControllers that dir's cgroup.controllers offers, one at a time
// (a write naming several is refused whole when one is refused), and
// returns those of them subtree_control then holds. A refusal is not an
// error: Plan sends that limit elsewhere or says it is not enforced.
func enableControllers(dir string, write func(path, s string) error) ([]string, error) {
	offered, err := readBounded(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	for _, c := range limitControllers {
		if slices.Contains(strings.Fields(string(offered)), c) {
			_ = write(ctl, "+"+c)
		}
	}
	enabled, err := readBounded(ctl)
	if err != nil {
		return nil, err
	}
	var got []string
	for _, c := range limitControllers {
		if slices.Contains(strings.Fields(string(enabled)), c) {
			got = append(got, c)
		}
	}
	return got, nil
}

// GroupOf says which group of t the membership m (of a process, from
// ReadMembership) is in, by its v2 path: the group's name, or false when
// it is in none of t's (a process in a group below a job's group is in
// that job's group). A path that is not clean (.., //, a trailing /) is in
// none, nor is a removed group's (" (deleted)" follows its path).
func (t *Tree) GroupOf(m Membership) (name string, ok bool) {
	p := m.V2
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return "", false
	}
	prefix := strings.TrimSuffix(t.Rel, "/") + "/"
	rest, found := strings.CutPrefix(p, prefix)
	if !found || rest == "" {
		return "", false
	}
	name, _, _ = strings.Cut(rest, "/")
	if _, _, ok := ParseGroupName(name); !ok {
		return "", false
	}
	return name, true
}
