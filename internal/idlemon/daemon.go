package idlemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/google/renameio/v2"
	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/supervisor"
	"github.com/gpumon/gpumon/internal/ttywatch"
	"golang.org/x/sys/unix"
)

// Options are the daemon's knobs that are not in the config file (tests
// point them elsewhere).
type Options struct {
	Log         io.Writer     // the one-line log; idlemon's stderr
	JobStdout   *os.File      // where jobs without a log write; idlemon's stdout
	TTYDev      string        // "/dev"
	Utmp        string        // "/var/run/utmp"
	BackoffBase time.Duration // first restart delay of a job that exits by itself (1s)
	BackoffMax  time.Duration // 5 min
	BackoffOK   time.Duration // a run this long resets the back-off (10 min)
	// Rechecks are the delays of the scans after an inotify open event whose
	// first scan found nobody new: the event comes before the opener's fd is
	// installed.
	Rechecks []time.Duration
	// ProcsEvery is how often a scan lists every process of a running job
	// (for the state file), which means reading every process's stat line
	// (60s; more often while the job is younger than 4*ProcsEvery). A scan
	// in between only walks up from the GPU holders; it lists the job again
	// when one of its processes holds a GPU and is not listed.
	ProcsEvery time.Duration
}

func (o *Options) defaults() {
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.JobStdout == nil {
		o.JobStdout = os.Stdout
	}
	if o.BackoffBase == 0 {
		o.BackoffBase = time.Second
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = 5 * time.Minute
	}
	if o.BackoffOK == 0 {
		o.BackoffOK = 10 * time.Minute
	}
	if o.Rechecks == nil {
		o.Rechecks = []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}
	}
	if o.ProcsEvery == 0 {
		o.ProcsEvery = time.Minute
	}
}

// Plan is a config resolved against this machine: device files found, users
// looked up. Everything that can be wrong is found here, before anything
// starts.
type Plan struct {
	Cfg     *config.Config
	Devices []holders.Device
	Jobs    []*jobState
	Ignore  map[int][]string // GPU -> programs that do not make it busy
	RunAs   string           // user the jobs run as ("" = idlemon's own)
	cred    *syscall.Credential
}

type jobState struct {
	sec  config.JobSection
	gpus []int // resolved (ALL = every GPU found)
	spec supervisor.Spec

	job      *supervisor.Job
	stopping bool
	stopWhy  string
	backoff  time.Duration
	notAfter time.Time             // do not start before
	procs    []idlestate.ProcStart // sorted by pid; see listProcs
	procsAt  time.Time             // when procs last listed every process of the job
	holders  []int                 // the job's processes holding a GPU, this scan
}

type gpuState struct {
	idx       int
	state     string
	since     time.Time
	holders   []idlestate.Holder
	freeSince time.Time // no foreign holder since; zero while busy
}

// Resolve checks cfg against this machine.
func Resolve(cfg *config.Config) (*Plan, error) {
	p := &Plan{Cfg: cfg, Ignore: map[int][]string{}}
	devs, err := holders.Find(cfg.Devices)
	if err != nil {
		return nil, cfg.ErrorAt("defaults", "devices", "%v", err)
	}
	if len(devs) == 0 {
		e := cfg.ErrorAt("defaults", "devices", "no device files match %s", cfg.Devices)
		e.HintText = "is the NVIDIA driver loaded (ls /dev/nvidia*)? set devices in [defaults] if they are elsewhere"
		return nil, e
	}
	p.Devices = devs
	have := map[int]bool{}
	var all []int
	for _, d := range devs {
		have[d.Index] = true
		all = append(all, d.Index)
		p.Ignore[d.Index] = cfg.IgnoreFor(d.Index)
	}
	for _, g := range cfg.GPUs {
		for _, i := range g.GPUs {
			if !have[i] {
				e := cfg.ErrorAt(g.Name, "gpus", "gpu %d has no device file among %s", i, cfg.Devices)
				e.HintText = "found gpus " + joinInts(all)
				return nil, e
			}
		}
	}
	var env []string
	if len(cfg.Jobs) > 0 {
		euid := os.Geteuid()
		switch {
		case cfg.User == "" && euid == 0:
			e := cfg.ErrorAt("defaults", "user", "no user to run the jobs as, and idlemon runs as root")
			if e.Line == 0 {
				e.Key = ""
				e.Msg = "no user to run the jobs as ([defaults] user), and idlemon runs as root"
			}
			e.HintText = "add user = NAME to [defaults] (e.g. a system user made with useradd --system idlejob); user = root runs them as root"
			return nil, e
		case cfg.User == "":
			p.RunAs = ""
		default:
			cred, uenv, err := supervisor.Credential(cfg.User)
			var unknown user.UnknownUserError
			if errors.As(err, &unknown) {
				e := cfg.ErrorAt("defaults", "user", "no such user %s", cfg.User)
				e.HintText = "create it (useradd --system " + cfg.User + "), or name another"
				return nil, e
			}
			if err != nil {
				return nil, cfg.ErrorAt("defaults", "user", "%v", err)
			}
			if euid != 0 && int(cred.Uid) != euid {
				e := cfg.ErrorAt("defaults", "user", "idlemon runs as uid %d and cannot start jobs as %s", euid, cfg.User)
				e.HintText = "run idlemon as root (the systemd unit does), or remove user"
				return nil, e
			}
			if euid != 0 {
				cred = nil // already that user; setgroups would need root
			}
			p.RunAs, p.cred, env = cfg.User, cred, uenv
		}
	}
	for _, sec := range cfg.Jobs {
		j := &jobState{sec: sec, gpus: sec.GPUs}
		if sec.All {
			j.gpus = all
		}
		for _, i := range j.gpus {
			if !have[i] {
				e := cfg.ErrorAt(sec.Name, "gpus", "gpu %d has no device file among %s", i, cfg.Devices)
				e.HintText = "found gpus " + joinInts(all)
				return nil, e
			}
		}
		if fi, err := os.Stat(sec.Dir); err != nil || !fi.IsDir() {
			return nil, cfg.ErrorAt(sec.Name, "dir", "%s is not a folder", sec.Dir)
		}
		if sec.Log != "" {
			if fi, err := os.Stat(filepath.Dir(sec.Log)); err != nil || !fi.IsDir() {
				return nil, cfg.ErrorAt(sec.Name, "log", "the folder of %s does not exist", sec.Log)
			}
		}
		j.spec = supervisor.Spec{
			Name: sec.Name, Cmd: sec.Cmd, Dir: sec.Dir, Log: sec.Log, Cred: p.cred, Grace: cfg.Grace,
			Env: jobEnv(env, j.gpus),
		}
		p.Jobs = append(p.Jobs, j)
	}
	return p, nil
}

func jobEnv(userEnv []string, gpus []int) []string {
	base := os.Environ()
	set := append([]string(nil), userEnv...)
	if os.Getenv("PATH") == "" {
		set = append(set, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if os.Getenv("CUDA_DEVICE_ORDER") == "" {
		// so that CUDA's indices are nvidia-smi's (and the device files')
		set = append(set, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	}
	set = append(set, "CUDA_VISIBLE_DEVICES="+joinInts(gpus))
	return supervisor.Env(base, set...)
}

// Describe prints what the plan will do.
func (p *Plan) Describe(w io.Writer) {
	c := p.Cfg
	fmt.Fprintf(w, "%s: ok\n", c.Path)
	var ds []string
	for _, d := range p.Devices {
		ds = append(ds, fmt.Sprintf("%d=%s", d.Index, d.Path))
	}
	fmt.Fprintf(w, "gpus: %s (devices %s)\n", strings.Join(ds, " "), c.Devices)
	fmt.Fprintf(w, "scan: on every open of a device file (inotify), and every %s\n", fmtDur(c.Interval))
	for _, d := range p.Devices {
		fmt.Fprintf(w, "gpu %d: ignored programs: %s\n", d.Index, strings.Join(p.Ignore[d.Index], ", "))
	}
	if len(p.Jobs) == 0 {
		fmt.Fprintf(w, "jobs: none (idlemon only watches and writes the state file)\n")
	}
	runAs := p.RunAs
	if runAs == "" {
		runAs = "idlemon's own user"
	}
	for _, j := range p.Jobs {
		when := "gpu " + joinInts(j.gpus) + " idle"
		if j.sec.All {
			when = "every gpu (" + joinInts(j.gpus) + ") idle"
		}
		out := "idlemon's stdout"
		if j.sec.Log != "" {
			out = "appended to " + j.sec.Log
		}
		fmt.Fprintf(w, "job %s: when %s for %s, runs /bin/sh -c %q in %s as %s with CUDA_VISIBLE_DEVICES=%s; output %s; stopped by SIGTERM to its process group, SIGKILL after %s\n",
			j.sec.Name, when, fmtDur(c.MinIdle), j.sec.Cmd, j.sec.Dir, runAs, joinInts(j.gpus), out, fmtDur(c.Grace))
	}
	if c.TTY.Enabled {
		wl := "nobody"
		if len(c.TTY.Whitelist) > 0 {
			wl = strings.Join(c.TTY.Whitelist, ", ")
		}
		fmt.Fprintf(w, "tty: every job pauses while a user types at a terminal within %s (whitelisted: %s)\n", fmtDur(c.TTY.Idle), wl)
	} else {
		fmt.Fprintf(w, "tty: not watched\n")
	}
	fmt.Fprintf(w, "state file: %s\n", c.StateFile)
}

// Daemon is a running idlemon.
type Daemon struct {
	plan    *Plan
	opt     Options
	log     *log.Logger
	scanner *holders.Scanner
	tty     *ttywatch.Watcher
	gpus    []*gpuState
	jobs    []*jobState
	paused  string
	host    string

	exitCh chan *jobState
	stopCh chan stopResult

	lastWrite  time.Time
	dirty      bool
	rechecks   []time.Time
	shutdown   bool
	lastTTY    time.Time
	lastPaused string
}

type stopResult struct {
	j      *jobState
	killed bool
}

// newDaemon sets up a daemon for plan: every GPU idle, nothing running.
func newDaemon(plan *Plan, opt Options) *Daemon {
	opt.defaults()
	flags := log.LstdFlags | log.Lmicroseconds
	if os.Getenv("INVOCATION_ID") != "" || os.Getenv("JOURNAL_STREAM") != "" {
		flags = 0 // the journal stamps each line
	}
	d := &Daemon{
		plan:    plan,
		opt:     opt,
		log:     log.New(opt.Log, "", flags),
		scanner: holders.NewScanner(plan.Devices),
		jobs:    plan.Jobs,
		exitCh:  make(chan *jobState, len(plan.Jobs)+1),
		stopCh:  make(chan stopResult, len(plan.Jobs)+1),
	}
	supervisor.Stdout = opt.JobStdout
	d.host, _ = os.Hostname()
	cfg := plan.Cfg
	if cfg.TTY.Enabled {
		d.tty = &ttywatch.Watcher{Dev: opt.TTYDev, Utmp: opt.Utmp, Idle: cfg.TTY.Idle, Whitelist: cfg.TTY.Whitelist}
	}
	now := time.Now()
	for _, dev := range plan.Devices {
		d.gpus = append(d.gpus, &gpuState{idx: dev.Index, state: idlestate.Idle, since: now, freeSince: now})
	}
	return d
}

// Run runs the daemon until ctx ends, then stops the jobs and returns.
func Run(ctx context.Context, plan *Plan, opt Options) error {
	d := newDaemon(plan, opt)
	opt, cfg := d.opt, plan.Cfg
	if err := os.MkdirAll(filepath.Dir(cfg.StateFile), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(cfg.StateFile+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return cli.WithHint(fmt.Errorf("another idlemon is running with state file %s", cfg.StateFile),
			"stop it first (systemctl stop idlemon), or give this one another state_file")
	}
	d.stopLeftovers()

	in, err := newInotify(plan.Devices)
	if err != nil {
		d.log.Printf("inotify unavailable (%v): scanning every %s only", err, fmtDur(cfg.Interval))
	}
	var pending atomic.Uint32
	events := make(chan struct{}, 1)
	if in != nil {
		defer in.Close()
		go in.run(&pending, events)
	}
	d.log.Printf("idlemon started: pid %d, gpus %s, %d jobs, scan every %s and on device open", os.Getpid(), joinInts(d.gpuIdx()), len(d.jobs), fmtDur(cfg.Interval))

	ticker := time.NewTicker(cfg.Interval)
	defer ticker.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	d.step(time.Now(), "start")
	for {
		d.arm(timer, time.Now())
		select {
		case <-ctx.Done():
			return d.stopAll(ctx)
		case <-events:
			ev := pending.Swap(0)
			now := time.Now()
			if ev&unix.IN_OPEN != 0 {
				found := d.step(now, "open")
				if !found {
					d.rechecks = d.rechecks[:0]
					for _, r := range d.opt.Rechecks {
						d.rechecks = append(d.rechecks, now.Add(r))
					}
				}
			} else {
				d.rechecks = append(d.rechecks, now.Add(50*time.Millisecond))
			}
		case <-ticker.C:
			d.step(time.Now(), "tick")
		case <-timer.C:
			now := time.Now()
			if len(d.rechecks) > 0 && !now.Before(d.rechecks[0]) {
				d.rechecks = d.rechecks[1:]
				if d.step(now, "recheck") {
					d.rechecks = d.rechecks[:0]
				}
			} else {
				d.step(now, "timer")
			}
		case j := <-d.exitCh:
			d.exited(j, time.Now())
			d.step(time.Now(), "exit")
		case r := <-d.stopCh:
			d.stopped(r)
			d.step(time.Now(), "stopped")
		}
	}
}

func (d *Daemon) gpuIdx() []int {
	var out []int
	for _, g := range d.gpus {
		out = append(out, g.idx)
	}
	return out
}

// arm sets the timer to the next moment something is due.
func (d *Daemon) arm(t *time.Timer, now time.Time) {
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
		consider(d.lastWrite.Add(time.Second))
	}
	for _, j := range d.jobs {
		if j.job != nil || j.stopping {
			continue
		}
		consider(j.notAfter)
		for _, gi := range j.gpus {
			if g := d.gpu(gi); g != nil && !g.freeSince.IsZero() {
				consider(g.freeSince.Add(d.plan.Cfg.MinIdle))
			}
		}
	}
	wait := next.Sub(now)
	if wait < 0 {
		wait = 0
	}
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(wait)
}

func (d *Daemon) gpu(idx int) *gpuState {
	for _, g := range d.gpus {
		if g.idx == idx {
			return g
		}
	}
	return nil
}

// step scans, stops what must stop, starts what may start and writes the
// state file. It reports whether it found a foreign holder on a GPU where
// one of our jobs runs (what an open event is looked at for).
func (d *Daemon) step(now time.Time, why string) (preempted bool) {
	snap, err := d.scanner.Scan()
	if err != nil {
		d.log.Printf("scan: %v", err)
		return false
	}
	self := os.Getpid()
	owner := d.owners(snap)
	for _, j := range d.jobs {
		d.listProcs(j, snap, owner, now)
	}
	for _, g := range d.gpus {
		var hs []idlestate.Holder
		for _, pid := range snap.Holders[g.idx] {
			if owner[pid] != nil || pid == self {
				continue
			}
			p := snap.Proc(pid)
			if p == nil {
				continue
			}
			if holders.Matches(holders.Names(d.scanner.Root, p), d.plan.Ignore[g.idx]) {
				continue
			}
			hs = append(hs, idlestate.Holder{PID: pid, User: userName(p.UID), Command: command(d.scanner.Root, p)})
		}
		g.holders = hs
		state := idlestate.Idle
		switch {
		case len(hs) > 0:
			state = idlestate.Busy
			g.freeSince = time.Time{}
		case d.jobOn(g.idx) != nil:
			state = idlestate.Job
		}
		if len(hs) == 0 && g.freeSince.IsZero() {
			g.freeSince = now
		}
		if state != g.state {
			g.state, g.since = state, now
		}
	}
	// Terminal users pause everything.
	paused := ""
	if d.tty != nil {
		if act := d.tty.Active(now); len(act) > 0 {
			a := act[0]
			paused = fmt.Sprintf("user %s active on %s (input %s ago)", a.User, a.TTY, fmtDur(a.Idle.Truncate(time.Second)))
		}
	}
	if (paused == "") != (d.paused == "") {
		if paused == "" {
			d.log.Printf("no active terminal user any more: jobs may run again")
		} else {
			d.log.Printf("paused: %s", paused)
		}
	}
	d.paused = paused
	// Stops.
	for _, j := range d.jobs {
		if j.job == nil || j.stopping {
			continue
		}
		reason := ""
		if paused != "" {
			reason = paused
		}
		for _, gi := range j.gpus {
			if g := d.gpu(gi); g != nil && len(g.holders) > 0 {
				h := g.holders[0]
				reason = fmt.Sprintf("preempted by %s pid %d %s", h.User, h.PID, firstWord(h.Command))
				preempted = true
				break
			}
		}
		if reason != "" {
			d.stop(j, reason, now)
		}
	}
	// Starts.
	if !d.shutdown && paused == "" {
		d.starts(now)
	}
	d.dirty = true
	d.writeState(now, false)
	return preempted
}

// owners says which of snap's GPU holders belong to which running job (nil:
// to none). A job's processes are its leader's descendants and everything
// in its process group or session (the leader's pid is both). Within finds
// that out by walking up from each holder through its parents, so the scan
// reads the stat lines of the holders' ancestors only, never every
// process's.
func (d *Daemon) owners(snap *holders.Snapshot) map[int]*jobState {
	owner := map[int]*jobState{}
	for _, j := range d.jobs {
		j.holders = j.holders[:0]
	}
	for _, g := range d.gpus {
		for _, pid := range snap.Holders[g.idx] {
			if _, done := owner[pid]; done {
				continue
			}
			owner[pid] = nil
			for _, j := range d.jobs {
				if j.job != nil && snap.Within(pid, []int{j.job.PID}, map[int]bool{j.job.PID: true}) {
					owner[pid] = j
					j.holders = append(j.holders, pid)
					break
				}
			}
		}
	}
	return owner
}

// listProcs keeps j.procs, the job's processes as the state file lists them
// (fetch marks those on a GPU preemptible; a restarted idlemon stops what
// they left), up to date. Listing them all (Descendants) reads every
// process's stat line, so it is done only at the first scan after the job
// started, then every quarter of the job's age up to every ProcsEvery, and
// when one of the job's GPU holders is not listed (a new child opened the
// GPU). In between the list stays as it was, less any pid that now holds a
// GPU for someone else (reused); the job's GPU holders are always on it.
func (d *Daemon) listProcs(j *jobState, snap *holders.Snapshot, owner map[int]*jobState, now time.Time) {
	if j.job == nil {
		j.procs, j.procsAt = j.procs[:0], time.Time{}
		return
	}
	// A young job is still forking its workers: list it again after a
	// quarter of its age, up to ProcsEvery.
	every := min(d.opt.ProcsEvery, now.Sub(j.job.Began)/4)
	full := j.procsAt.IsZero() || now.Sub(j.procsAt) >= every || now.Before(j.procsAt)
	for _, pid := range j.holders {
		if p := snap.Proc(pid); p != nil {
			if i, ok := findProc(j.procs, pid); !ok || j.procs[i].Start != p.Start {
				full = true
			}
		}
	}
	if full {
		j.procs, j.procsAt = j.procs[:0], now
		for pid := range snap.Descendants([]int{j.job.PID}, map[int]bool{j.job.PID: true}) {
			if p := snap.Procs[pid]; p != nil && p.State != 'Z' {
				j.procs = append(j.procs, idlestate.ProcStart{PID: pid, Start: p.Start})
			}
		}
		sort.Slice(j.procs, func(a, b int) bool { return j.procs[a].PID < j.procs[b].PID })
	}
	for pid, o := range owner {
		if i, ok := findProc(j.procs, pid); ok && o != j {
			j.procs = slices.Delete(j.procs, i, i+1)
		}
	}
	for _, pid := range j.holders {
		p := snap.Proc(pid)
		if p == nil {
			continue
		}
		if i, ok := findProc(j.procs, pid); ok {
			j.procs[i].Start = p.Start
		} else {
			j.procs = slices.Insert(j.procs, i, idlestate.ProcStart{PID: pid, Start: p.Start})
		}
	}
}

// findProc finds pid in ps, sorted by pid: its index, or where it would go.
func findProc(ps []idlestate.ProcStart, pid int) (int, bool) {
	return slices.BinarySearchFunc(ps, pid, func(p idlestate.ProcStart, pid int) int { return p.PID - pid })
}

func (d *Daemon) jobOn(gpu int) *jobState {
	for _, j := range d.jobs {
		if j.job == nil {
			continue
		}
		for _, gi := range j.gpus {
			if gi == gpu {
				return j
			}
		}
	}
	return nil
}

// idleFor says how long every gpu of gs has been free, or false.
func (d *Daemon) idleFor(gs []int, now time.Time) (time.Duration, bool) {
	min := time.Duration(-1)
	for _, gi := range gs {
		g := d.gpu(gi)
		if g == nil || g.freeSince.IsZero() {
			return 0, false
		}
		if idle := now.Sub(g.freeSince); min < 0 || idle < min {
			min = idle
		}
	}
	return min, min >= d.plan.Cfg.MinIdle
}

func (d *Daemon) starts(now time.Time) {
	var allJob *jobState
	busyJobs := 0
	for _, j := range d.jobs {
		if j.sec.All {
			allJob = j
		}
		if j.job != nil || j.stopping {
			busyJobs++
		}
	}
	// The ALL job goes first when every GPU is idle and nothing of ours runs.
	if allJob != nil && allJob.job == nil && !allJob.stopping {
		if idle, ok := d.idleFor(allJob.gpus, now); ok {
			if busyJobs == 0 && !now.Before(allJob.notAfter) {
				d.start(allJob, idle, now)
			}
			return // per-GPU jobs wait for it
		}
	}
	if allJob != nil && (allJob.job != nil || allJob.stopping) {
		return
	}
	for _, j := range d.jobs {
		if j.sec.All || j.job != nil || j.stopping || now.Before(j.notAfter) {
			continue
		}
		if idle, ok := d.idleFor(j.gpus, now); ok {
			d.start(j, idle, now)
		}
	}
}

func (d *Daemon) start(j *jobState, idle time.Duration, now time.Time) {
	job, err := supervisor.Start(j.spec)
	if err != nil {
		d.bumpBackoff(j, now)
		d.log.Printf("gpu %s: cannot start job %s: %v - retry in %s", joinInts(j.gpus), j.sec.Name, err, fmtDur(j.backoff))
		return
	}
	j.job = job
	d.log.Printf("gpu %s: started job %s (pid %d) - idle for %s", joinInts(j.gpus), j.sec.Name, job.PID, fmtDur(idle.Truncate(time.Millisecond)))
	for _, gi := range j.gpus {
		if g := d.gpu(gi); g != nil && g.state != idlestate.Job {
			g.state, g.since = idlestate.Job, now
		}
	}
	j.procs, j.procsAt = []idlestate.ProcStart{{PID: job.PID, Start: job.Start}}, time.Time{} // all of them at the next scan
	d.dirty = true
	d.writeState(now, false)
	go func() {
		<-job.Done()
		d.exitCh <- j
	}()
}

// stop sends SIGTERM to j's group now; the wait for it to end (and SIGKILL)
// goes on in the background.
func (d *Daemon) stop(j *jobState, reason string, now time.Time) {
	j.stopping, j.stopWhy = true, reason
	job := j.job
	if job.PID > 1 {
		_ = syscall.Kill(-job.PID, syscall.SIGTERM) // at once; Stop below signals the rest of the session
	}
	d.log.Printf("gpu %s: stopped job %s (pid %d) - %s", joinInts(j.gpus), j.sec.Name, job.PID, reason)
	go func() {
		killed := job.Stop()
		d.stopCh <- stopResult{j: j, killed: killed}
	}()
}

func (d *Daemon) stopped(r stopResult) {
	j := r.j
	if r.killed {
		d.log.Printf("gpu %s: job %s (pid %d) outlived SIGTERM by %s: killed", joinInts(j.gpus), j.sec.Name, j.job.PID, fmtDur(d.plan.Cfg.Grace))
	}
	j.job, j.stopping, j.procs = nil, false, nil
	// A preempted job starts again as soon as its GPUs are idle again,
	// after min_idle_seconds; no back-off.
	d.dirty = true
}

// exited handles a job's leader ending.
func (d *Daemon) exited(j *jobState, now time.Time) {
	if j.stopping || j.job == nil {
		return // stop() is waiting for the whole group; stopped() cleans up
	}
	err, ran := j.job.Exit()
	pid := j.job.PID
	status := "exit status 0"
	if err != nil {
		status = err.Error()
	}
	// whatever the leader left behind in its session goes too
	if len(supervisor.SessionMembers(j.job.PID)) > 0 {
		j.stopping = true
		job := j.job
		go func() {
			killed := job.Stop()
			d.stopCh <- stopResult{j: j, killed: killed}
		}()
	} else {
		j.job, j.procs = nil, nil
	}
	if ran >= d.opt.BackoffOK {
		j.backoff = 0
	}
	d.bumpBackoff(j, now)
	d.log.Printf("gpu %s: job %s (pid %d) ended by itself (%s) after %s - restart in %s", joinInts(j.gpus), j.sec.Name, pid, status, fmtDur(ran.Truncate(time.Millisecond)), fmtDur(j.backoff))
}

func (d *Daemon) bumpBackoff(j *jobState, now time.Time) {
	if j.backoff == 0 {
		j.backoff = d.opt.BackoffBase
	} else {
		j.backoff *= 2
	}
	if j.backoff > d.opt.BackoffMax {
		j.backoff = d.opt.BackoffMax
	}
	j.notAfter = now.Add(j.backoff)
}

// stopAll ends every job (whole groups, with grace) on shutdown.
func (d *Daemon) stopAll(ctx context.Context) error {
	d.shutdown = true
	why := "idlemon is stopping"
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		why += " (" + c.Error() + ")"
	}
	now := time.Now()
	pending := 0
	for _, j := range d.jobs {
		if j.job != nil && !j.stopping {
			d.stop(j, why, now)
		}
		if j.stopping {
			pending++
		}
	}
	for pending > 0 {
		select {
		case r := <-d.stopCh:
			d.stopped(r)
			pending--
		case <-d.exitCh:
		}
	}
	for _, g := range d.gpus {
		if g.state == idlestate.Job {
			g.state, g.since = idlestate.Idle, time.Now()
		}
	}
	d.writeState(time.Now(), true)
	d.log.Printf("idlemon stopped")
	return nil
}

// stopLeftovers stops jobs that an earlier idlemon run left running (it was
// killed with SIGKILL, or by the OOM killer, outside systemd).
func (d *Daemon) stopLeftovers() {
	f, err := os.Open(d.plan.Cfg.StateFile)
	if err != nil {
		return
	}
	old, err := idlestate.Decode(f)
	f.Close()
	if err != nil {
		return
	}
	for _, j := range old.Jobs {
		if !j.Running || j.PGID <= 1 {
			continue
		}
		l := supervisor.Leftover{Name: j.Name, PGID: j.PGID, Start: j.LeaderStart, Procs: map[int]uint64{}}
		for _, p := range j.Procs {
			l.Procs[p.PID] = p.Start
		}
		n, err := supervisor.StopLeftover(l, d.plan.Cfg.Grace)
		if n > 0 {
			d.log.Printf("gpu %s: stopped job %s (pid %d) - left running by an earlier idlemon (pid %d), %d processes", joinInts(j.GPUs), j.Name, j.PGID, old.PID, n)
		}
		if err != nil {
			d.log.Printf("%v", err)
		}
	}
}

// writeState writes the state file, at most once a second unless force.
func (d *Daemon) writeState(now time.Time, force bool) {
	if !d.dirty && !force {
		return
	}
	if !force && now.Sub(d.lastWrite) < time.Second {
		return // arm() wakes us when it is due
	}
	f := &idlestate.File{Version: idlestate.Version, Updated: now, PID: os.Getpid(), Host: d.host, Paused: d.paused}
	for _, g := range d.gpus {
		f.GPUs = append(f.GPUs, idlestate.GPU{Index: g.idx, State: g.state, Since: g.since, Holders: g.holders})
	}
	for _, j := range d.jobs {
		ji := idlestate.JobInfo{Name: j.sec.Name, GPUs: j.gpus}
		if j.job != nil {
			ji.PGID, ji.Running, ji.Since, ji.LeaderStart = j.job.PID, true, j.job.Began, j.job.Start
			for _, p := range j.procs {
				ji.PIDs = append(ji.PIDs, p.PID)
			}
			ji.Procs = j.procs
		}
		f.Jobs = append(f.Jobs, ji)
	}
	var buf bytes.Buffer
	_ = idlestate.Encode(&buf, f)
	if err := renameio.WriteFile(d.plan.Cfg.StateFile, buf.Bytes(), 0o644); err != nil {
		d.log.Printf("state file: %v", err)
	}
	d.lastWrite, d.dirty = now, false
}

// inotify watches the device files for opens (and closes).
type inotify struct {
	f *os.File
}

func newInotify(devs []holders.Device) (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	for _, dv := range devs {
		if _, err := unix.InotifyAddWatch(fd, dv.Path, unix.IN_OPEN|unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("watch %s: %v", dv.Path, err)
		}
	}
	return &inotify{f: os.NewFile(uintptr(fd), "inotify")}, nil
}

func (in *inotify) Close() error { return in.f.Close() }

// run reads events, adds their masks to pending and pokes notify.
func (in *inotify) run(pending *atomic.Uint32, notify chan<- struct{}) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := in.f.Read(buf)
		if err != nil {
			return
		}
		var mask uint32
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			mask |= ev.Mask
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		pending.Or(mask)
		select {
		case notify <- struct{}{}:
		default:
		}
	}
}

var userNames = map[int]string{}

func userName(uid int) string {
	if n, ok := userNames[uid]; ok {
		return n
	}
	n := strconv.Itoa(uid)
	if u, err := user.LookupId(n); err == nil {
		n = u.Username
	}
	userNames[uid] = n
	return n
}

func command(root string, p *holders.Proc) string {
	if c := holders.Cmdline(root, p.PID, 200); c != "" {
		return c
	}
	return p.Comm
}

func firstWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	return filepath.Base(s)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// fmtDur prints a duration the way people say it: 30s, 1.5s, 250ms, 5m0s.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', -1, 64) + "s"
	default:
		return d.Round(time.Millisecond).String()
	}
}
