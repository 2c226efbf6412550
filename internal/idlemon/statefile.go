package idlemon

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/idlemon/textfile"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/supervisor"
	"github.com/gpumon/gpumon/internal/version"
)

// writeState writes the state file: at once when force (a job started or
// stopped), else at most once a second (next() wakes the loop when a held
// back write is due).
func (d *daemon) writeState(now time.Time, force bool) {
	if !d.dirty && !force {
		return
	}
	if !force && now.Sub(d.lastW) < time.Second {
		return
	}
	f := &idlestate.File{Version: idlestate.Version, Updated: now, PID: d.self, Host: d.host, Paused: d.sched.Paused}
	for _, g := range d.sched.GPUs {
		f.GPUs = append(f.GPUs, idlestate.GPU{Index: g.Index, State: g.State, Since: g.Since, Holders: g.Holders})
	}
	for i, jp := range d.plan.Jobs {
		ji := idlestate.JobInfo{Name: jp.Sec.Name, GPUs: jp.GPUs}
		if r := d.runs[i]; r.job != nil {
			ji.PGID, ji.Running, ji.Since, ji.LeaderStart = r.job.PID, true, r.job.Began, r.job.Start
			for _, p := range r.procs {
				ji.PIDs = append(ji.PIDs, p.PID)
			}
			ji.Procs = r.procs
			if r.job.Group != nil {
				ji.Cgroup = r.job.Group.Dir
			}
		}
		ji.Waiting = d.sched.waitReason(i, now)
		f.Jobs = append(f.Jobs, ji)
	}
	var buf bytes.Buffer
	_ = idlestate.Encode(&buf, f)
	if err := renameio.WriteFile(d.plan.Cfg.StateFile, buf.Bytes(), 0o644); err != nil {
		d.log.Printf("state file: %v", err)
	}
	d.writeMetrics(now)
	d.lastW, d.dirty = now, false
}

// readUsage reads job i's use from its run's group, where it runs in one.
func (d *daemon) readUsage(i int) {
	if r := d.runs[i]; r.job != nil && r.job.Group != nil && d.plan.Cfg.TextfileDir != "" {
		u := r.job.Group.Usage()
		d.metrics.Usage(i, textfile.Usage{CPUSeconds: u.CPUSeconds, MemoryBytes: u.MemoryBytes, OOMKills: u.OOMKills, PidsMaxHits: u.PidsMaxHits})
	}
}

// newMetrics starts the textfile's counters for plan's jobs.
func newMetrics(plan *hostPlan, mode string, now time.Time) *textfile.Metrics {
	var jobs []textfile.Job
	for _, j := range plan.Jobs {
		jobs = append(jobs, textfile.Job{Name: j.Sec.Name, GPUs: len(j.GPUs)})
	}
	return textfile.New(jobs, plan.Vendor, mode, version.String(), now)
}

// writeMetrics writes the textfile, where the config asks for one, with
// each running job's use read from its group. A failure is logged once
// until a write succeeds again.
func (d *daemon) writeMetrics(now time.Time) {
	dir := d.plan.Cfg.TextfileDir
	if dir == "" || d.metrics == nil {
		return
	}
	for i := range d.runs {
		d.readUsage(i)
	}
	err := d.metrics.Write(dir, now)
	if err != nil && !d.metricsFailed {
		d.log.Printf("textfile: %v", err)
	}
	d.metricsFailed = err != nil
}

// stopLeftovers stops what an earlier idlemon left running (it was killed
// with SIGKILL, or by the OOM killer, outside systemd), before anything
// starts: every process of the jobs' user with this idlemon's mark, and,
// when the old state file can be trusted, every one in the sessions it
// records.
func (d *daemon) stopLeftovers() {
	path := d.plan.Cfg.StateFile
	var sessions []supervisor.Session
	prev := 0
	if old, err := d.readOldState(path); err != nil {
		if !os.IsNotExist(err) {
			d.log.Printf("state file %s: %v", path, err)
		}
	} else {
		prev = old.PID
		for _, j := range old.Jobs {
			if j.Running && j.PGID > 1 {
				sess := supervisor.Session{Job: j.Name, SID: j.PGID, Start: j.LeaderStart}
				for _, p := range j.Procs {
					sess.Procs = append(sess.Procs, supervisor.Known{PID: p.PID, Start: p.Start})
				}
				sessions = append(sessions, sess)
			}
		}
	}
	byName := map[string]jobPlan{}
	for _, j := range d.plan.Jobs {
		byName[j.Sec.Name] = j
		// a group's name carries the job's name with odd bytes as '_'
		if _, clean, ok := cgroup.ParseGroupName(cgroup.GroupName("0000000000000000", j.Sec.Name)); ok {
			byName[clean] = j
		}
	}
	earlier := "an earlier idlemon"
	if prev > 0 {
		earlier = fmt.Sprintf("an earlier idlemon (pid %d)", prev)
	}
	ls := d.sup.Leftovers(sessions)
	procs := 0
	for _, l := range ls {
		procs += len(l.Members)
	}
	if d.metrics != nil {
		d.metrics.Leftovers(len(ls), procs)
	}
	for _, l := range ls {
		where := "job " + l.Job + " (no longer in the config)"
		if j, ok := byName[l.Job]; ok {
			where = "gpu " + joinInts(j.GPUs) + ": job " + l.Job
		}
		killed, left := d.sup.StopLeftover(l, d.plan.Cfg.Grace)
		how := ""
		if killed {
			how = ", SIGKILL after " + fmtDur(d.plan.Cfg.Grace)
		}
		d.log.Printf("%s: stopped %d processes (pids %s) left running by %s%s", where, len(l.Members), joinInts(memberPIDs(l.Members)), earlier, how)
		if len(left) > 0 {
			d.log.Printf("%s: %d processes survived SIGKILL (pids %s)", where, len(left), joinInts(memberPIDs(left)))
		}
	}
}

// readOldState reads the state file an earlier idlemon wrote, if it can be
// trusted: a file anyone but idlemon's user (and root) could have written
// may name any process.
func (d *daemon) readOldState(path string) (*idlestate.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	dir, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	if why := distrust(fi, dir, os.Geteuid()); why != "" {
		return nil, fmt.Errorf("not used to find what an earlier idlemon left running: %s", why)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return idlestate.Decode(fh)
}

// distrust says why a state file (file, in folder dir) cannot be trusted
// by an idlemon running as euid, or "".
func distrust(file, dir fs.FileInfo, euid int) string {
	owner := func(fi fs.FileInfo) int {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			return int(st.Uid)
		}
		return -1
	}
	var why []string
	switch {
	case file.Mode()&fs.ModeSymlink != 0:
		why = append(why, "it is a symbolic link")
	case !file.Mode().IsRegular():
		why = append(why, "it is not a regular file")
	}
	if u := owner(file); u != euid {
		why = append(why, fmt.Sprintf("it belongs to uid %d, not to idlemon's uid %d", u, euid))
	}
	if m := file.Mode().Perm(); m&0o022 != 0 {
		why = append(why, fmt.Sprintf("others may write it (mode %04o)", m))
	}
	if w := distrustFolder(dir, euid); w != "" {
		why = append(why, w)
	}
	return strings.Join(why, "; ")
}

// distrustFolder says why a state file's folder is not idlemon's alone,
// or "". Anyone who can write there can also take the lock file first
// and keep idlemon from starting.
func distrustFolder(dir fs.FileInfo, euid int) string {
	var why []string
	if st, ok := dir.Sys().(*syscall.Stat_t); ok && int(st.Uid) != euid && st.Uid != 0 {
		why = append(why, fmt.Sprintf("its folder belongs to uid %d", st.Uid))
	}
	if m := dir.Mode(); m.Perm()&0o022 != 0 {
		why = append(why, fmt.Sprintf("others may write its folder (mode %04o)", m.Perm()|stickyBits(m)))
	}
	return strings.Join(why, "; ")
}

// folderWarning is what check and the daemon say about a state file in a
// folder others can write, or "".
func folderWarning(stateFile string) string {
	dir, err := os.Stat(filepath.Dir(stateFile))
	if err != nil {
		return ""
	}
	if why := distrustFolder(dir, os.Geteuid()); why != "" {
		return "state file " + stateFile + ": " + why + ": anyone who can write there can keep idlemon from starting (its lock) and is not believed about leftovers; use a folder of root's such as /run/idlemon"
	}
	return ""
}

func stickyBits(m fs.FileMode) fs.FileMode {
	if m&fs.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}
