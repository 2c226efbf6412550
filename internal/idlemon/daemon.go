package idlemon

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/idlemon/textfile"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/supervisor"
	"github.com/gpumon/gpumon/internal/ttywatch"
	"golang.org/x/sys/unix"
)

// daemon is a running idlemon: the edges (the /proc scan, the jobs'
// processes, the clock, the state file) around the schedule's decisions.
type daemon struct {
	plan    *hostPlan
	opt     options
	log     *log.Logger
	scanner *holders.Scanner
	sup     *supervisor.Supervisor
	tty     *ttywatch.Watcher
	host    string
	self    int
	mode    string // modeV2, modeV2V1 or modeMarks, once running
	metrics *textfile.Metrics
	// metricsFailed: the last textfile write failed (logged once)
	metricsFailed bool

	sched schedState // the schedule's state
	runs  []*jobRun  // what runs for each job (parallel to plan.Jobs)
	ended chan ended // a job's first process exited, or a stop finished

	strays     map[string]bool         // runs of ours found without a job (being stopped)
	unsure     map[[2]uint64]time.Time // (pid, start) -> first seen without an environment
	known      map[[2]uint64]string    // (pid, start) -> the run (mark nonce) it was seen with
	strayStops sync.WaitGroup
	users      map[int]string // uid -> name
	wake       time.Time      // the schedule's next start, zero for none
	rechecks   []time.Time
	lastW      time.Time // state file last written
	dirty      bool
}

// jobRun is one job's processes while it runs.
type jobRun struct {
	job     *supervisor.Job       // nil while waiting
	procs   []idlestate.ProcStart // sorted by pid; see listProcs
	procsAt time.Time             // when procs last listed every process of the job
	holders []int                 // the job's processes holding a GPU, this scan
	stopAt  time.Time             // when the scan that stopped it ran
	stopWhy string                // textfile's stop reason
}

type ended struct {
	job     int
	run     *supervisor.Job
	stopped bool // Stop finished (else the first process exited)
	killed  bool
	left    []supervisor.Member
}

// newDaemon sets up a daemon for plan: every GPU idle, nothing running.
func newDaemon(plan *hostPlan, opt options) *daemon {
	opt.defaults()
	flags := log.LstdFlags | log.Lmicroseconds
	if os.Getenv("INVOCATION_ID") != "" || os.Getenv("JOURNAL_STREAM") != "" {
		flags = 0 // the journal stamps each line
	}
	cfg := plan.Cfg
	d := &daemon{
		plan:    plan,
		opt:     opt,
		log:     log.New(opt.Log, "", flags),
		scanner: newScanner(plan),
		sup: &supervisor.Supervisor{
			Stdout:   opt.JobStdout,
			Instance: supervisor.InstanceOf(cfg.StateFile),
			UID:      plan.JobUID,
		},
		self:   os.Getpid(),
		ended:  make(chan ended, 2*len(plan.Jobs)+1),
		strays: map[string]bool{},
		unsure: map[[2]uint64]time.Time{},
		known:  map[[2]uint64]string{},
		users:  map[int]string{},
		mode:   modeMarks,
	}
	d.metrics = newMetrics(plan, d.mode, time.Now())
	d.host, _ = os.Hostname()
	d.scanner.Warn = func(msg string) { d.log.Printf("warning: %s", msg) } // a device path that is not a device file
	if cfg.TTY.Enabled {
		d.tty = &ttywatch.Watcher{Dev: opt.TTYDev, Utmp: opt.Utmp, Idle: cfg.TTY.Idle, Whitelist: cfg.TTY.Whitelist}
	}
	now := time.Now()
	d.sched.Rules = rules{MinIdle: cfg.MinIdle, BackoffBase: opt.BackoffBase, BackoffMax: opt.BackoffMax, BackoffOK: opt.BackoffOK}
	for _, i := range plan.GPUs {
		d.sched.GPUs = append(d.sched.GPUs, gpuSched{Index: i, State: idlestate.Idle, Since: now, FreeSince: now})
	}
	for _, j := range plan.Jobs {
		d.sched.Jobs = append(d.sched.Jobs, jobSched{Name: j.Sec.Name, GPUs: j.GPUs, All: j.Sec.All})
		d.runs = append(d.runs, &jobRun{})
	}
	return d
}

// newScanner is the /proc scanner for plan's device files; on an AMD host
// it reads the KFD entries too.
func newScanner(plan *hostPlan) *holders.Scanner {
	if plan.AMD != nil {
		return holders.NewAMDScanner(plan.AMD)
	}
	return holders.NewScanner(plan.Devices)
}

// runDaemon runs the daemon until ctx ends, then stops the jobs and returns.
func runDaemon(ctx context.Context, plan *hostPlan, opt options) error {
	d := newDaemon(plan, opt)
	cfg := plan.Cfg
	lock, err := lockState(cfg.StateFile)
	if err != nil {
		return err
	}
	defer lock.Close()
	if warn := folderWarning(cfg.StateFile); warn != "" {
		d.log.Printf("warning: %s", warn)
	}
	if plan.Note != "" {
		d.log.Printf("note: %s", plan.Note)
	}
	// A log to a pipe that closes (idlemon run | head, a journal restarted)
	// must not kill idlemon with its jobs unwatched: a write fails instead.
	signal.Ignore(syscall.SIGPIPE)
	if err := d.useCgroups(); err != nil {
		return err
	}
	defer func() { d.plan.closeTree(d.sup.Tree) }()
	d.metrics = newMetrics(plan, d.mode, time.Now())
	d.stopLeftovers()

	in, err := newInotify(plan.Devices)
	if err != nil {
		d.log.Printf("inotify unavailable (%v): scanning every %s only", err, fmtDur(cfg.Interval))
	} else {
		defer in.Close()
		go in.run()
	}
	d.log.Printf("idlemon started: pid %d, %s gpus %s, %d jobs, scan every %s and on device open", d.self, vendorName(plan.Vendor), joinInts(plan.GPUs), len(plan.Jobs), fmtDur(cfg.Interval))
	return d.loop(ctx, in)
}

// useCgroups opens the jobs' cgroup tree, or says why there is none, and
// logs every limit that is not enforced.
func (d *daemon) useCgroups() error {
	t, warn := d.plan.openCgroup()
	if cfg := d.plan.Cfg; t == nil && cfg.Cgroup != config.CgroupAuto && cfg.Cgroup != config.CgroupOff {
		e := cfg.ErrorAt("defaults", "cgroup", "%s", strings.TrimPrefix(warn, "no cgroups, marks only: "))
		e.HintText = "another idlemon may use that folder: give each its own, or cgroup = auto"
		return e
	}
	if warn != "" {
		d.log.Printf("warning: %s", warn)
	}
	d.sup.Tree = t
	if t == nil {
		d.mode = modeMarks
		return nil
	}
	d.mode = d.plan.Cgroup.Mode
	for i, j := range d.plan.Jobs {
		for _, e := range d.plan.Cgroup.Enforce[i] {
			if e.Why != "" {
				d.log.Printf("warning: job %s: NOT ENFORCED: %s %s: %s", j.Sec.Name, e.Limit, e.Value, e.Why)
			}
		}
	}
	d.log.Printf("cgroup %s: a group per run under %s", d.mode, t.Dir)
	return nil
}

// lockState takes the lock of the state file, making its folder first:
// one idlemon per state file.
func lockState(stateFile string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(stateFile), 0o755); err != nil {
		return nil, err
	}
	// The lock's descriptor is close-on-exec, so a job's first process
	// holds it too between fork and exec, while it has no mark yet: a new
	// idlemon looks for leftovers only once every job carries its mark.
	lock, err := os.OpenFile(stateFile+".lock", os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, err
	}
	if err := lockWithin(lock, 5*time.Second); err != nil {
		lock.Close()
		return nil, cli.WithHint(fmt.Errorf("another idlemon is running with state file %s", stateFile),
			"stop it first (systemctl stop idlemon), or give this one another state_file")
	}
	return lock, nil
}

// loop scans at once, then on every device event (in's; nil without
// inotify), every interval, when the schedule or a recheck is due and when
// a job ends, until ctx ends; then it stops the jobs.
func (d *daemon) loop(ctx context.Context, in *inotify) error {
	var opens <-chan struct{} // nil, never ready, without inotify
	if in != nil {
		opens = in.events
	}
	ticker := time.NewTicker(d.plan.Cfg.Interval)
	defer ticker.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	d.step(time.Now())
	for {
		now := time.Now()
		timer.Reset(max(d.next(now).Sub(now), 0))
		select {
		case <-ctx.Done():
			return d.stopAll(ctx)
		case <-opens:
			d.deviceEvent(in.take(), time.Now())
		case <-ticker.C:
			d.step(time.Now())
		case <-timer.C:
			d.timerDue(time.Now())
		case e := <-d.ended:
			d.handle(e, time.Now())
			d.step(time.Now())
		}
	}
}

// deviceEvent takes inotify's events (mask): an open scans at once, and
// again a little later when that scan preempted nothing (the opener's fd
// may not be installed yet); a close asks for a scan a little later.
func (d *daemon) deviceEvent(mask uint32, now time.Time) {
	if mask&unix.IN_OPEN == 0 {
		d.recheckAt(now.Add(50 * time.Millisecond))
		return
	}
	if !d.step(now) {
		for _, r := range d.opt.Rechecks {
			d.recheckAt(now.Add(r))
		}
	}
}

// timerDue scans when the schedule's next start or a recheck is due, else
// writes the state file it held back.
func (d *daemon) timerDue(now time.Time) {
	due := !d.wake.IsZero() && !now.Before(d.wake)
	for len(d.rechecks) > 0 && !now.Before(d.rechecks[0]) {
		d.rechecks, due = d.rechecks[1:], true
	}
	if due {
		d.step(now)
	} else {
		d.writeState(now, false) // only a held-back write was due
	}
}

// lockWithin takes the state file's lock, waiting up to d for it: an
// idlemon killed a moment ago holds it until the kernel has finished
// with it.
func lockWithin(f *os.File, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// next is when the timer must fire: a recheck, the schedule's next start,
// a state file write held back. An hour away when nothing is due.
func (d *daemon) next(now time.Time) time.Time {
	next := now.Add(time.Hour)
	consider := func(at time.Time) {
		if !at.IsZero() && at.Before(next) {
			next = at
		}
	}
	if len(d.rechecks) > 0 {
		consider(d.rechecks[0])
	}
	if d.dirty {
		consider(d.lastW.Add(time.Second))
	}
	consider(d.wake)
	return next
}

// recheckAt asks for a scan at t.
func (d *daemon) recheckAt(t time.Time) {
	i, found := slices.BinarySearchFunc(d.rechecks, t, time.Time.Compare)
	if !found {
		d.rechecks = slices.Insert(d.rechecks, i, t)
	}
}

// step scans, lets the schedule decide, does what it decided and writes
// the state file. It reports whether a foreign holder preempted a job (what
// an open event is looked at for).
func (d *daemon) step(now time.Time) (preempted bool) {
	snap, err := d.scanner.Scan()
	if err != nil {
		d.log.Printf("scan: %v", err)
		return false
	}
	obs := d.observe(snap, now)
	if (obs.Paused == "") != (d.sched.Paused == "") {
		if obs.Paused == "" {
			d.log.Printf("no active terminal user any more: jobs may run again")
		} else {
			d.log.Printf("paused: %s", obs.Paused)
		}
	}
	st, dec := decide(d.sched, obs, now)
	d.sched, d.wake = st, dec.Wake
	for _, s := range dec.Stop {
		preempted = preempted || s.Preempted
		d.runs[s.Job].stopAt, d.runs[s.Job].stopWhy = now, s.Kind
		d.stop(s.Job, s.Reason)
	}
	for _, i := range dec.Start {
		d.start(i, now)
	}
	for i := range d.runs {
		d.metrics.Waiting(i, d.sched.waitReason(i, now))
	}
	d.dirty = true
	d.writeState(now, len(dec.Start) > 0)
	return preempted
}

// observe turns a scan into what the schedule needs: per GPU the foreign
// holders (not ours, not ignored), and whether a terminal user is active.
func (d *daemon) observe(snap *holders.Snapshot, now time.Time) observation {
	owner := d.owners(snap, now)
	for i := range d.runs {
		d.listProcs(i, snap, owner, now)
	}
	obs := observation{Foreign: map[int][]idlestate.Holder{}}
	for _, gpu := range d.plan.GPUs {
		for _, pid := range snap.Holders[gpu] {
			if pid == d.self || (owner[pid] != notOurs && owner[pid] != stray) {
				continue
			}
			p := snap.Proc(pid)
			if p == nil {
				continue
			}
			cmd := d.command(p)
			if d.ignored(p, cmd, gpu) {
				continue
			}
			obs.Foreign[gpu] = append(obs.Foreign[gpu], idlestate.Holder{PID: pid, User: d.userName(p.UID), Command: cmd})
		}
	}
	if d.tty != nil {
		if act := d.tty.Active(now); len(act) > 0 {
			a := act[0]
			obs.Paused = fmt.Sprintf("user %s active on %s (input %s ago)", a.User, a.TTY, fmtDur(a.Idle.Truncate(time.Second)))
		}
	}
	return obs
}

// start starts job i, which the schedule decided at now.
func (d *daemon) start(i int, now time.Time) {
	jp, r := d.plan.Jobs[i], d.runs[i]
	idle := d.sched.idleFor(jp.GPUs, now)
	job, err := d.sup.Start(jp.Spec)
	if err != nil {
		d.sched = startFailed(d.sched, i, now)
		d.log.Printf("gpu %s: cannot start job %s: %v - retry in %s", joinInts(jp.GPUs), jp.Sec.Name, err, fmtDur(d.sched.Jobs[i].Backoff))
		return
	}
	r.job = job
	d.metrics.Started(i, now)
	d.log.Printf("gpu %s: started job %s (pid %d) - idle for %s", joinInts(jp.GPUs), jp.Sec.Name, job.PID, fmtDur(idle.Truncate(time.Millisecond)))
	r.procs, r.procsAt = []idlestate.ProcStart{{PID: job.PID, Start: job.Start}}, time.Time{} // all of them at the next scan
	go func() {
		<-job.Exited()
		d.ended <- ended{job: i, run: job}
	}()
}

// stop stops job i: SIGTERM to the processes it is known to have at once,
// then to the rest of it; SIGKILL after grace_seconds, in the background.
func (d *daemon) stop(i int, reason string) {
	jp, r := d.plan.Jobs[i], d.runs[i]
	job := r.job
	if job == nil {
		d.sched = stopped(d.sched, i, time.Now()) // nothing to stop
		return
	}
	d.log.Printf("gpu %s: stopped job %s (pid %d) - %s", joinInts(jp.GPUs), jp.Sec.Name, job.PID, reason)
	var known []supervisor.Known
	for _, p := range r.procs { // the job's GPU holders among them
		known = append(known, supervisor.Known{PID: p.PID, Start: p.Start})
	}
	for k, nonce := range d.known {
		if nonce == job.Mark.Nonce {
			known = append(known, supervisor.Known{PID: int(k[0]), Start: k[1]})
		}
	}
	go func() {
		killed, left := d.sup.Stop(job, known)
		d.ended <- ended{job: i, run: job, stopped: true, killed: killed, left: left}
	}()
}

// handle takes a job's end: its first process exited by itself, or a stop
// finished.
func (d *daemon) handle(e ended, now time.Time) {
	jp, r := d.plan.Jobs[e.job], d.runs[e.job]
	if r.job != e.run {
		return // an earlier run
	}
	if e.stopped {
		if e.killed {
			d.log.Printf("gpu %s: job %s (pid %d) outlived SIGTERM by %s: killed", joinInts(jp.GPUs), jp.Sec.Name, e.run.PID, fmtDur(d.plan.Cfg.Grace))
		}
		if len(e.left) > 0 {
			d.log.Printf("gpu %s: job %s: %d processes survived SIGKILL (pids %s)", joinInts(jp.GPUs), jp.Sec.Name, len(e.left), joinInts(memberPIDs(e.left)))
		}
		d.forget(e.run)
		d.stoppedRun(e.job, now)
		d.sched = stopped(d.sched, e.job, now)
		d.dirty = true
		return
	}
	if d.sched.Jobs[e.job].Phase != running {
		return // a stop is under way
	}
	err, ran := e.run.Exit()
	status := "exit status 0"
	if err != nil {
		status = err.Error()
	}
	// the run's use as it ended (an OOM kill ends a run by itself), before
	// its group goes
	d.readUsage(e.job)
	// whatever the first process left behind goes too
	left := d.sup.Members(e.run)
	d.sched = exited(d.sched, e.job, ran, len(left) > 0, now)
	if g := e.run.Group; g != nil {
		if u := g.Usage(); u.OOMKills > 0 {
			status += fmt.Sprintf("; the OOM killer killed %d of its processes at its memory limit", u.OOMKills)
		}
	}
	d.log.Printf("gpu %s: job %s (pid %d) ended by itself (%s) after %s - restart in %s", joinInts(jp.GPUs), jp.Sec.Name, e.run.PID, status, fmtDur(ran.Truncate(time.Millisecond)), fmtDur(d.sched.Jobs[e.job].Backoff))
	if len(left) > 0 {
		r.stopWhy = textfile.Exited
		d.stop(e.job, fmt.Sprintf("its first process ended, %d of its processes are left", len(left)))
	} else {
		d.sup.Release(e.run)
		d.forget(e.run)
		r.stopWhy = textfile.Exited
		d.stoppedRun(e.job, now)
	}
	d.dirty = true
}

// stoppedRun counts the end of job i's run, gone at now, and forgets it.
// A run whose first process exited and whose other processes were then
// stopped counts as exited.
func (d *daemon) stoppedRun(i int, now time.Time) {
	r := d.runs[i]
	why, latency := r.stopWhy, time.Duration(0)
	if why == "" {
		why = textfile.Exited
	}
	if why == textfile.Preempted {
		latency = now.Sub(r.stopAt)
	}
	d.metrics.Stopped(i, why, now.Sub(r.job.Began), latency, now)
	r.job, r.procs, r.holders, r.stopAt, r.stopWhy = nil, nil, nil, time.Time{}, ""
}

// stopAll ends every job on shutdown and waits until they are gone.
func (d *daemon) stopAll(ctx context.Context) error {
	why := "idlemon is stopping"
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		why += " (" + c.Error() + ")"
	}
	now := time.Now()
	foreign := map[int][]idlestate.Holder{}
	for _, g := range d.sched.GPUs {
		foreign[g.Index] = g.Holders
	}
	st, dec := decide(d.sched, observation{Foreign: foreign, Paused: d.sched.Paused, Shutdown: why}, now)
	d.sched = st
	for _, s := range dec.Stop {
		d.runs[s.Job].stopAt, d.runs[s.Job].stopWhy = now, s.Kind
		d.stop(s.Job, s.Reason)
	}
	for d.stopping() {
		d.handle(<-d.ended, time.Now())
	}
	d.strayStops.Wait()
	d.writeState(time.Now(), true)
	d.log.Printf("idlemon stopped")
	return nil
}

// forget drops what was remembered of run's processes.
func (d *daemon) forget(run *supervisor.Job) {
	for k, nonce := range d.known {
		if nonce == run.Mark.Nonce {
			delete(d.known, k)
		}
	}
}

// stopping says whether a job is still being stopped (or, with its first
// process gone, still has processes to stop).
func (d *daemon) stopping() bool {
	for _, j := range d.sched.Jobs {
		if j.Phase == stopping {
			return true
		}
	}
	return false
}

func memberPIDs(ms []supervisor.Member) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.PID
	}
	return out
}

func (d *daemon) userName(uid int) string {
	if n, ok := d.users[uid]; ok {
		return n
	}
	n := lookupUser(uid)
	d.users[uid] = n
	return n
}

func (d *daemon) command(p *holders.Proc) string {
	if c := holders.Cmdline(d.scanner.Root, p.PID, 200); c != "" {
		return c
	}
	return p.Comm
}

func lookupUser(uid int) string {
	n := strconv.Itoa(uid)
	if u, err := user.LookupId(n); err == nil {
		return u.Username
	}
	return n
}
