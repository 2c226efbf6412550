package idlemon

import (
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/ignore"
	"github.com/gpumon/gpumon/internal/supervisor"
)

// owners' answers besides a job's index: notOurs for a holder no job of
// ours explains; stray for one that carries the mark of a run of ours that
// is not running (it is being stopped, and its GPU counts as busy until it
// is gone: it is not free for a new run); unsure for one of the jobs' user
// that shows no environment yet, as a process does in the middle of an
// execve: ours until a look a moment later (unsureFor) says otherwise;
// gone for one that has exited since the scan saw it.
const (
	notOurs = -1
	stray   = -2
	unsure  = -3
	gone    = -4
)

// unsureFor is how long a process of the jobs' user may show no
// environment before it counts as a foreign holder: an execve takes
// microseconds.
const unsureFor = 10 * time.Millisecond

// owners says which job each of snap's GPU holders belongs to (an index
// into plan.Jobs), or notOurs, stray or unsure. A job's processes are,
// first, its first process's descendants and the members of its session:
// Within walks up from each holder through its parents, reading the stat
// lines of the holders' ancestors only. A holder that left the job's tree
// (a daemonized worker: double fork, setsid), or a child of one, is the
// job's when it, or the ancestor it descends from, runs as the jobs' user
// and carries the job's mark; environments are read only then.
func (d *daemon) owners(snap *holders.Snapshot, now time.Time) map[int]int {
	owner := map[int]int{}
	for _, r := range d.runs {
		r.holders = r.holders[:0]
	}
	for _, gpu := range d.plan.GPUs {
		for _, pid := range snap.Holders[gpu] {
			if _, done := owner[pid]; done {
				continue
			}
			owner[pid] = d.ownerOf(snap, pid, now)
			if i := owner[pid]; i >= 0 {
				d.runs[i].holders = append(d.runs[i].holders, pid)
			}
		}
	}
	for k, since := range d.unsure {
		if now.Sub(since) > time.Minute {
			delete(d.unsure, k)
		}
	}
	return owner
}

func (d *daemon) ownerOf(snap *holders.Snapshot, pid int, now time.Time) int {
	if d.sup.Tree != nil {
		return d.groupOwner(pid)
	}
	for i, r := range d.runs {
		if r.job != nil && snap.Within(pid, []int{r.job.PID}, map[int]bool{r.job.PID: true}) {
			// Remembered too: a worker seen only while its parent was
			// still in the job's tree may leave it (its parent exits, it
			// goes to init) and overwrite its mark before the next scan.
			if p := snap.Proc(pid); p != nil {
				d.known[[2]uint64{uint64(pid), p.Start}] = r.job.Mark.Nonce
			}
			return i
		}
	}
	if i, ok := d.knownOwner(snap, pid); ok {
		return i
	}
	return d.ownerByMark(snap, pid, now)
}

// groupOwner is ownerOf in cgroup mode: the job whose run's group pid is
// in, stray for a group of a run that no longer runs, else notOurs
// (gone once the process has exited). Nothing else counts: no process of
// a job can leave its group, and none can join it but by root's hand.
func (d *daemon) groupOwner(pid int) int {
	m, ok := d.sup.RunOf(pid)
	if !ok {
		if snapGone(d.scanner.Root, pid) {
			return gone
		}
		return notOurs
	}
	for i, r := range d.runs {
		if r.job != nil && r.job.Mark.Nonce == m.Nonce {
			return i
		}
	}
	d.stopStray(m)
	return stray
}

// snapGone says whether pid has exited since the scan.
func snapGone(proc string, pid int) bool {
	_, err := os.Stat(proc + "/" + strconv.Itoa(pid))
	return err != nil
}

// knownOwner is the job that pid was seen with the mark of, if it still
// runs.
func (d *daemon) knownOwner(snap *holders.Snapshot, pid int) (int, bool) {
	p := snap.Proc(pid)
	if p == nil {
		return 0, false
	}
	nonce, ok := d.known[[2]uint64{uint64(pid), p.Start}]
	if !ok {
		return 0, false
	}
	for i, r := range d.runs {
		if r.job != nil && r.job.Mark.Nonce == nonce {
			return i, true
		}
	}
	return 0, false
}

// ownerByMark walks up from pid through the jobs' user's processes
// (status's real uid: the owner of /proc/PID is root while a process is
// not dumpable, as it is for a moment in every execve), the holder first,
// to the first with a mark of ours.
func (d *daemon) ownerByMark(snap *holders.Snapshot, pid int, now time.Time) int {
	cur := pid
	for steps := 0; cur > 1 && steps < 64; steps++ {
		m, err := d.sup.Identify(cur)
		if err != nil && cur == pid {
			return gone
		}
		if err != nil || m.UID != d.sup.UID {
			break
		}
		if m.Mark.Instance == d.sup.Instance {
			return d.markedOwner(snap, pid, m)
		}
		if m.Mark.Instance != "" {
			break // another idlemon's job
		}
		if cur == pid && m.NoEnv && d.stillUnsure(pid, m.Start, now) {
			return unsure
		}
		cur = m.PPID
	}
	return notOurs
}

// markedOwner is the job whose run m's mark names, pid being m or one of
// its descendants; stray when that run no longer runs (its processes are
// stopped).
func (d *daemon) markedOwner(snap *holders.Snapshot, pid int, m supervisor.Member) int {
	for i, r := range d.runs {
		if r.job != nil && r.job.Owns(m) {
			// Remembered: a worker may overwrite its environment later
			// (setproctitle, Perl's $0), and the mark with it.
			if p := snap.Proc(pid); p != nil {
				d.known[[2]uint64{uint64(pid), p.Start}] = m.Mark.Nonce
			}
			return i
		}
	}
	d.stopStray(m.Mark)
	return stray
}

// stillUnsure says whether a holder of the jobs' user without an
// environment (pid, started at start) is within unsureFor of when it was
// first seen so; the first time, it asks for a look when that ends.
func (d *daemon) stillUnsure(pid int, start uint64, now time.Time) bool {
	k := [2]uint64{uint64(pid), start}
	since, seen := d.unsure[k]
	if !seen {
		since = now
		d.unsure[k] = now
		d.recheckAt(now.Add(unsureFor))
	}
	return now.Sub(since) < unsureFor
}

// stopStray stops the processes of a run of ours that is no longer
// running: they survived its stop (SIGKILL does not end a process stuck
// in the kernel at once). They are not foreign users.
func (d *daemon) stopStray(m supervisor.Mark) {
	if d.strays[m.Nonce] {
		return
	}
	d.strays[m.Nonce] = true
	d.log.Printf("job %s: processes of an earlier run (%s) hold a GPU: stopping them", m.Job, m.Nonce)
	d.strayStops.Add(1)
	go func() {
		defer d.strayStops.Done()
		d.sup.StopLeftover(d.sup.Run(m), d.plan.Cfg.Grace)
	}()
}

// ignored says whether p, running command, is a program that never makes
// gpu busy: by its own names, or, run by an interpreter, by its script's
// (AMD's amd-smi and rocm-smi are Python scripts that start with
// "#!/usr/bin/env python3": the process is python3, the script its first
// argument).
func (d *daemon) ignored(p *holders.Proc, command string, gpu int) bool {
	ip := ignore.Process{Comm: p.Comm, Args: command, UID: p.UID, MemMiB: ignore.Unknown}
	if exe, err := os.Readlink(d.scanner.Root + "/" + strconv.Itoa(p.PID) + "/exe"); err == nil {
		ip.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	if ignore.Ignored(ip, d.plan.Ignore[gpu]) {
		return true
	}
	script := scriptOf(command)
	return script != "" && ignore.Ignored(ignore.Process{Args: script, UID: p.UID, MemMiB: ignore.Unknown}, d.plan.Ignore[gpu])
}

// interpreter matches the names of the interpreters whose scripts
// ignored looks at: python, python3, python3.12, perl...
var interpreter = regexp.MustCompile(`^(python|perl)[0-9.]*$`)

// scriptOf is the script and its arguments when command (arguments
// separated by spaces) runs an interpreter on a script, else "": never
// "python -c ..." nor "sh -c ...", whose code is not a program's name.
func scriptOf(command string) string {
	first, rest, ok := strings.Cut(command, " ")
	if !ok || !interpreter.MatchString(path.Base(first)) || strings.HasPrefix(rest, "-") {
		return ""
	}
	return rest
}

// listProcs keeps job i's process list for the state file (fetch marks
// those on a GPU preemptible) up to date. Listing them all reads every
// process's stat line, so it is done only at the first scan after the job
// started, then every quarter of the job's age up to every ProcsEvery, and
// when one of the job's GPU holders is not listed (a new child opened the
// GPU). In between the list stays as it was, less any pid that now holds a
// GPU for someone else (reused); the job's GPU holders are always on it.
func (d *daemon) listProcs(i int, snap *holders.Snapshot, owner map[int]int, now time.Time) {
	r := d.runs[i]
	if r.job == nil {
		r.procs, r.procsAt = r.procs[:0], time.Time{}
		return
	}
	// A young job is still forking its workers: list it again after a
	// quarter of its age, up to ProcsEvery.
	every := min(d.opt.ProcsEvery, now.Sub(r.job.Began)/4)
	full := r.procsAt.IsZero() || now.Sub(r.procsAt) >= every || now.Before(r.procsAt)
	for _, pid := range r.holders {
		if p := snap.Proc(pid); p != nil {
			if k, ok := findProc(r.procs, pid); !ok || r.procs[k].Start != p.Start {
				full = true
			}
		}
	}
	if full {
		r.procs, r.procsAt = r.procs[:0], now
		if r.job.Group != nil {
			r.procs = d.groupProcs(r.job)
		} else {
			for pid := range snap.Descendants([]int{r.job.PID}, map[int]bool{r.job.PID: true}) {
				if p := snap.Procs[pid]; p != nil && p.State != 'Z' {
					r.procs = append(r.procs, idlestate.ProcStart{PID: pid, Start: p.Start})
				}
			}
		}
		sort.Slice(r.procs, func(a, b int) bool { return r.procs[a].PID < r.procs[b].PID })
	}
	for pid, o := range owner {
		if k, ok := findProc(r.procs, pid); ok && o != i {
			r.procs = slices.Delete(r.procs, k, k+1)
		}
	}
	for _, pid := range r.holders {
		p := snap.Proc(pid)
		if p == nil {
			continue
		}
		if k, ok := findProc(r.procs, pid); ok {
			r.procs[k].Start = p.Start
		} else {
			r.procs = slices.Insert(r.procs, k, idlestate.ProcStart{PID: pid, Start: p.Start})
		}
	}
}

// groupProcs lists the processes in job's group, with their start times.
func (d *daemon) groupProcs(job *supervisor.Job) []idlestate.ProcStart {
	var out []idlestate.ProcStart
	for _, m := range d.sup.Members(job) {
		out = append(out, idlestate.ProcStart{PID: m.PID, Start: m.Start})
	}
	return out
}

// findProc finds pid in ps, sorted by pid: its index, or where it would go.
func findProc(ps []idlestate.ProcStart, pid int) (int, bool) {
	return slices.BinarySearchFunc(ps, pid, func(p idlestate.ProcStart, pid int) int { return p.PID - pid })
}
