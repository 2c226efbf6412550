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
	"errors"
	"io"
	"time"
)

// ErrTODO marks what the contract commit leaves to be written.
var ErrTODO = errors.New("cgroup: not written yet")

// Hierarchies are the cgroup file systems mounted here.
type Hierarchies struct {
	V2 string            // the cgroup2 mount point; "" when none
	V1 map[string]string // controller (cpu, memory, pids, freezer...) -> its v1 mount point
}

// ParseMountinfo reads /proc/self/mountinfo's format. A v1 mount holding
// several controllers (cpu,cpuacct) is listed under each. Mount points are
// unescaped (\040 is a space).
func ParseMountinfo(r io.Reader) (Hierarchies, error) { return Hierarchies{}, ErrTODO }

// Mounted reads /proc/self/mountinfo.
func Mounted() (Hierarchies, error) { return Hierarchies{}, ErrTODO }

// Membership is a process's groups, from /proc/PID/cgroup: V2 is the
// path of the "0::" line ("/system.slice/idlemon.service"), V1 each v1
// controller's path.
type Membership struct {
	V2 string
	V1 map[string]string
}

// ParseProcCgroup reads /proc/PID/cgroup's format (bounded: at most 64
// KiB are read by ReadMembership).
func ParseProcCgroup(r io.Reader) (Membership, error) { return Membership{}, ErrTODO }

// ReadMembership reads proc/PID/cgroup (proc is "/proc" in production).
func ReadMembership(proc string, pid int) (Membership, error) { return Membership{}, ErrTODO }

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
	// each process and thaws.
	CanKill bool
	// Controllers are the v2 controllers enabled for the jobs' groups (in
	// Dir's cgroup.subtree_control).
	Controllers []string
}

// Open makes dir (inside h.V2; an error otherwise) the subtree: makes it
// and its parents where missing (mode 0755, as root), and enables in its
// cgroup.subtree_control those of cpu, memory and pids that its
// cgroup.controllers offers. When the calling process is in dir itself
// (auto mode under systemd, Delegate=yes), it first moves itself to
// dir/supervisor: a v2 group with processes cannot hand controllers to
// its children. It never enables a controller above dir.
func Open(h Hierarchies, dir string) (*Tree, error) { return nil, ErrTODO }

// Plan says how each limit that is set in l is enforced in t: through v2
// where t.Controllers has its controller, else through the v1 hierarchy
// of it where mounted, else not (Why says so). Pure: reads no file.
func (t *Tree) Plan(l Limits) []Enforcement { return nil }

// GroupName is the folder name of one run's group: "<nonce>.<job>", the
// job name with every byte outside [A-Za-z0-9_.-] replaced by '_'.
func GroupName(nonce, job string) string { return "" }

// ParseGroupName splits a GroupName; ok is false for any other name (not
// a group of ours: left alone).
func ParseGroupName(name string) (nonce, job string, ok bool) { return "", "", false }

// Group is one run's group: its v2 folder, and its v1 folders (controller
// -> folder) where limits go through v1.
type Group struct {
	Name string
	Dir  string
	V1   map[string]string
}

// Create makes the group of name under t with l's limits written (v2 and,
// per Plan, v1), before any process is in it. A group of that name that
// already exists is an error (a nonce is never reused).
func (t *Tree) Create(name string, l Limits) (*Group, error) { return nil, ErrTODO }

// Groups lists the groups of ours in t (by ParseGroupName), with their v1
// folders where they exist: what an earlier idlemon left.
func (t *Tree) Groups() ([]*Group, error) { return nil, ErrTODO }

// GroupOf says which group of t the membership m (of a process, from
// ReadMembership) is in, by its v2 path: the group's name, or false when
// it is in none of t's (a process in a group below a job's group is in
// that job's group).
func (t *Tree) GroupOf(m Membership) (name string, ok bool) { return "", false }

// Add moves pid into g: the v2 group, then each v1 folder.
func (g *Group) Add(pid int) error { return ErrTODO }

// Procs lists the pids in g and the groups below it (cgroup.procs),
// sorted.
func (g *Group) Procs() ([]int, error) { return nil, ErrTODO }

// Populated reads cgroup.events' populated: whether any process is in g
// or below it.
func (g *Group) Populated() (bool, error) { return false, ErrTODO }

// Freeze freezes g (cgroup.freeze = 1) and waits, until deadline, for
// cgroup.events to say frozen 1. A frozen process receives signals and
// acts on them when thawed; it cannot fork meanwhile.
func (g *Group) Freeze(deadline time.Time) error { return ErrTODO }

// Thaw writes cgroup.freeze = 0.
func (g *Group) Thaw() error { return ErrTODO }

// Kill sends SIGKILL to every process in g: cgroup.kill where the kernel
// has it; else Freeze, SIGKILL to each of Procs, Thaw (a frozen group's
// processes die as they thaw). It does not wait.
func (g *Group) Kill() error { return ErrTODO }

// WaitEmpty waits until g has no process (populated 0) or deadline; it
// says whether g is empty. It sleeps on inotify's modify events of
// cgroup.events (the kernel raises one at each change), with a slow poll
// as a fallback, never a busy loop.
func (g *Group) WaitEmpty(deadline time.Time) bool { return false }

// Remove removes g's folders (v2, then v1), which must be empty of
// processes.
func (g *Group) Remove() error { return ErrTODO }

// Usage is what g has used, for the textfile: each field is -1 when not
// known (no such controller).
type Usage struct {
	CPUSeconds  float64 // cpu.stat usage_usec (v2, always there) / 1e6
	MemoryBytes int64   // memory.current (v2) or memory.usage_in_bytes (v1)
	OOMKills    int64   // memory.events oom_kill (v2) or memory.oom_control oom_kill (v1)
	PidsMaxHits int64   // pids.events max (v2 and v1): forks refused at pids.max
}

// Usage reads g's use.
func (g *Group) Usage() Usage { return Usage{-1, -1, -1, -1} }
