// Package supervisor starts idlemon's jobs and stops them, whole, and stops
// what a killed idlemon left running.
//
// A job runs in a session of its own (setsid), and every process it starts
// carries the job's mark (see Mark): an environment variable, inherited
// through fork, exec, setsid and double forks, that /proc/PID/environ reads
// back. A process belongs to a job when it runs as the jobs' user and
// carries the job's mark or is in the job's session. Nothing else is ever
// signalled, and each signal goes through a pidfd opened before that check
// is made again (with the process's start time), so neither a reused pid
// nor a process that only claims the mark can be hit.
//
// A job outlives an idlemon killed with SIGKILL (or by the OOM killer); the
// next idlemon finds it by its mark (Leftovers) before it starts anything.
// Between fork and exec a job's first process has no mark yet, but it still
// holds idlemon's lock on the state file (the descriptor closes at exec),
// so no new idlemon can look for leftovers until the mark is there.
package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/holders"
	"golang.org/x/sys/unix"
)

// Spec says what to run and how.
type Spec struct {
	Name  string   // the config section: the mark's job name, and for messages
	Cmd   string   // run with /bin/sh -c
	Dir   string   // working folder
	Env   []string // the whole environment (the mark is added)
	Log   string   // appended to; "" = the Supervisor's Stdout
	Cred  *syscall.Credential
	Grace time.Duration
	// Limits are the run's cgroup's (cgroup mode only).
	Limits cgroup.Limits
}

// A Supervisor starts and stops the jobs of one idlemon.
type Supervisor struct {
	Proc     string   // the proc file system; "/proc" when empty
	Stdout   *os.File // where a job without a log writes
	Instance string   // the first part of every mark: InstanceOf(the state file)
	UID      int      // the jobs' real uid: no process of another user is signalled
	// Tree, when set, is cgroup mode: each run gets a group in it, and its
	// processes are the group's (see group.go). Without it, marks only.
	Tree *cgroup.Tree
}

// Job is one started job.
type Job struct {
	Spec  Spec
	Mark  Mark
	PID   int // the leader: pid = pgid = sid
	Start uint64
	Began time.Time
	Group *cgroup.Group // its cgroup; nil without cgroup mode

	cmd      *exec.Cmd
	exited   chan struct{}
	reapOnce sync.Once
	mu       sync.Mutex
	waitErr  error
	ended    time.Time
}

func (j *Job) target() target { return target{Mark: j.Mark, SID: j.PID, SIDStart: j.Start} }

// Start starts spec's command with a new mark.
func (s *Supervisor) Start(spec Spec) (*Job, error) {
	mark := Mark{Instance: s.Instance, Nonce: newNonce(), Job: spec.Name}
	cmd := exec.Command("/bin/sh", "-c", spec.Cmd)
	cmd.Dir = spec.Dir
	cmd.Env = Env(spec.Env, mark.Env())
	out := s.Stdout
	if out == nil {
		out = os.Stdout
	}
	if spec.Log != "" {
		f, err := os.OpenFile(spec.Log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		out = f
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: spec.Cred}
	var group *cgroup.Group
	if s.Tree != nil {
		var err error
		if group, err = s.startInGroup(cmd, spec, mark); err != nil {
			return nil, err
		}
	} else if err := cmd.Start(); err != nil {
		return nil, err
	}
	j := &Job{Spec: spec, Mark: mark, PID: cmd.Process.Pid, Began: time.Now(), Group: group, cmd: cmd, exited: make(chan struct{})}
	if p, err := holders.ReadProc(s.Proc, j.PID); err == nil {
		j.Start = p.Start
	}
	go j.wait()
	return j, nil
}

// wait waits for the first process to exit without reaping it: as a
// zombie it keeps its pid, which is the job's process group and session
// id, from being given to another process while the job is stopped.
func (j *Job) wait() {
	var info unix.Siginfo
	var err error
	for {
		err = unix.Waitid(unix.P_PID, j.PID, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	// The SIGCHLD part of siginfo_t: si_pid, si_uid, si_status after the
	// three ints and their padding.
	type sigchld struct {
		Signo, Errno, Code, _ int32
		Pid                   int32
		UID                   uint32
		Status                int32
	}
	c := (*sigchld)(unsafe.Pointer(&info))
	j.mu.Lock()
	j.ended = time.Now()
	switch {
	case err != nil:
		j.waitErr = err
	case c.Code == 1: // CLD_EXITED
		if c.Status != 0 {
			j.waitErr = fmt.Errorf("exit status %d", c.Status)
		}
	default: // CLD_KILLED, CLD_DUMPED
		j.waitErr = fmt.Errorf("signal: %v", syscall.Signal(c.Status))
	}
	j.mu.Unlock()
	close(j.exited)
}

// Exited is closed when the job's first process has exited. It stays a
// zombie until Release or Stop.
func (j *Job) Exited() <-chan struct{} { return j.exited }

// Exit says how the first process ended, and after how long (after
// Exited).
func (j *Job) Exit() (error, time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.waitErr, j.ended.Sub(j.Began)
}

// reap reaps the first process once it has exited.
func (j *Job) reap() {
	go func() {
		<-j.exited
		j.reapOnce.Do(func() { _ = j.cmd.Wait() })
	}()
}

// Release ends a job whose first process has exited and which has no
// process a walk of /proc can find (Members): SIGKILL to its process
// group takes any it cannot, such as one that forks and exits in a loop.
// Then the first process is reaped.
func (s *Supervisor) Release(j *Job) {
	<-j.exited
	_ = syscall.Kill(-j.PID, syscall.SIGKILL)
	if g := j.Group; g != nil {
		// A process Members could not read (one forking in a loop) is
		// still in the group: it goes too.
		if populated, err := g.Populated(); err == nil && populated {
			_ = g.Kill()
			g.WaitEmpty(time.Now().Add(5 * time.Second))
		}
		_ = g.Remove()
	}
	j.reap()
}

// Members lists the job's live processes: in cgroup mode, those in its
// group; else the leader's session and every process with the job's
// mark, of the jobs' user, which means reading every process's stat and
// status, and the environment of the jobs' user's processes.
func (s *Supervisor) Members(j *Job) []Member {
	if j.Group != nil {
		return s.groupMembers(j.Group)
	}
	return s.find(j.target())
}

// Owns reports whether the live process m (from Identify) is one of j's.
func (j *Job) Owns(m Member) bool { return j.target().owns(m) }

// Identify reads pid's identity now, its mark included when it is one of
// the jobs' user's processes.
func (s *Supervisor) Identify(pid int) (Member, error) { return s.read(pid, true) }

// Known is a process the caller knows to be a job's: seen with its mark
// (it may have overwritten its environment since), or holding its GPU.
type Known struct {
	PID   int
	Start uint64
}

// Stop stops the whole job: SIGTERM to each of its processes, SIGKILL after
// the grace period to whatever is left, until nothing is left or 5 s more
// have passed. It says whether SIGKILL was needed, and what survived it.
// The first process's process group gets each signal as a group, at once,
// and SIGKILL at the end: that reaches members no walk of /proc finds (one
// that forks and exits in a loop is never where the walk looks). The
// group's id cannot be another's meanwhile: the first process is reaped
// only at the end. The processes in known (those the caller knows of, its
// GPU holders among them) are the job's as long as they keep their start
// time, and get SIGTERM before the others are looked for, for a prompt
// preemption.
func (s *Supervisor) Stop(j *Job, known []Known) (killed bool, left []Member) {
	if j.Group != nil {
		_ = syscall.Kill(-j.PID, syscall.SIGTERM) // at once, one call: most of a job is in its first process's group
		killed, left = s.stopGroup(j.Group, j.Spec.Grace, known)
		if len(left) == 0 {
			j.reap()
		}
		return killed, left
	}
	t := j.target()
	t.Procs = map[int]uint64{}
	for _, k := range known {
		t.Procs[k.PID] = k.Start
	}
	termed := map[int]uint64{} // pid -> start time, sent SIGTERM
	_ = syscall.Kill(-j.PID, syscall.SIGTERM)
	for _, k := range known {
		if _, done := termed[k.PID]; done {
			continue
		}
		if m, err := s.read(k.PID, false); err == nil && m.PGID == j.PID {
			termed[k.PID] = m.Start // had it as a group member
		} else if m, ok := s.signalPID(k.PID, t, syscall.SIGTERM); ok {
			termed[k.PID] = m.Start
		}
	}
	killed, left = s.stop(t, j.Spec.Grace, j.PID, termed)
	if len(left) == 0 {
		j.reap()
	}
	return killed, left
}

// stop stops t's processes; group, when not 0, is a process group of t's
// that gets each signal too.
func (s *Supervisor) stop(t target, grace time.Duration, group int, termed map[int]uint64) (killed bool, left []Member) {
	sig := syscall.SIGTERM
	deadline := time.Now().Add(grace)
	first := true
	for {
		ms := s.find(t)
		if len(ms) == 0 {
			if group > 1 {
				_ = syscall.Kill(-group, syscall.SIGKILL) // what the walk cannot see
			}
			return killed, nil
		}
		for _, m := range ms {
			if first && group > 1 && m.PGID == group && sig == syscall.SIGTERM {
				termed[m.PID] = m.Start // had it as a group member
			}
			if sig == syscall.SIGTERM && termed[m.PID] == m.Start {
				continue // once: a second SIGTERM means "hurry" to some programs
			}
			if _, ok := s.signalPID(m.PID, t, sig); ok && sig == syscall.SIGTERM {
				termed[m.PID] = m.Start
			}
		}
		first = false
		if !s.waitExit(ms, deadline) {
			if sig == syscall.SIGKILL {
				return killed, s.find(t)
			}
			sig, killed, deadline = syscall.SIGKILL, true, time.Now().Add(5*time.Second)
			if group > 1 {
				_ = syscall.Kill(-group, syscall.SIGKILL)
			}
		}
	}
}

// waitExit waits until every process of ms has exited, or deadline; it
// says whether they all did. pidfds wake it at each exit: no polling.
func (s *Supervisor) waitExit(ms []Member, deadline time.Time) bool {
	var fds []unix.PollFd
	defer func() {
		for _, f := range fds {
			unix.Close(int(f.Fd))
		}
	}()
	for _, m := range ms {
		fd, err := unix.PidfdOpen(m.PID, 0)
		if errors.Is(err, unix.ENOSYS) {
			return s.pollExit(ms, deadline)
		}
		if err != nil {
			continue // gone
		}
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		if p, err := holders.ReadProc(s.Proc, m.PID); err != nil || p.Start != m.Start || p.State == 'Z' {
			fds[len(fds)-1].Events = 0 // gone, or the pid is another process's now
			fds[len(fds)-1].Revents = unix.POLLIN
		}
	}
	for {
		pending := fds[:0]
		for _, f := range fds {
			if f.Revents == 0 {
				pending = append(pending, f)
			} else {
				unix.Close(int(f.Fd))
			}
		}
		fds = pending
		if len(fds) == 0 {
			return true
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return false
		}
		_, err := unix.Poll(fds, int(wait.Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return s.pollExit(ms, deadline)
		}
	}
}

// pollExit is waitExit without pidfds (kernels before 5.3).
func (s *Supervisor) pollExit(ms []Member, deadline time.Time) bool {
	delay := time.Millisecond
	for {
		alive := false
		for _, m := range ms {
			if p, err := holders.ReadProc(s.Proc, m.PID); err == nil && p.Start == m.Start && p.State != 'Z' {
				alive = true
				break
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// Session is a job's run as an earlier idlemon recorded it: its session
// and the processes it knew to be the job's.
type Session struct {
	Job   string
	SID   int
	Start uint64 // its leader's start time
	Procs []Known
}

// A Leftover is one run of a job that an earlier idlemon left running.
type Leftover struct {
	Job     string
	Members []Member
	t       target
	group   *cgroup.Group // cgroup mode: the run's group
}

// Leftovers finds what earlier runs of this idlemon left running: every
// live process of the jobs' user that carries this instance's mark, and
// every one that sessions (from a state file the caller trusts) name: in
// the session while its leader lives, or by pid and start time, grouped
// by run.
func (s *Supervisor) Leftovers(sessions []Session) []*Leftover {
	any := target{Mark: Mark{Instance: s.Instance}}
	var out []*Leftover
	inGroup := map[int]bool{}
	if s.Tree != nil {
		out = s.groupLeftovers()
		for _, l := range out {
			for _, m := range l.Members {
				inGroup[m.PID] = true
			}
		}
	}
	byNonce := map[string]*Leftover{}
	bySID := map[int]*Leftover{}
	all := slices.DeleteFunc(s.find(any), func(m Member) bool { return inGroup[m.PID] })
	for _, m := range all {
		l := byNonce[m.Mark.Nonce]
		if l == nil {
			l = &Leftover{Job: m.Mark.Job, t: target{Mark: m.Mark}}
			byNonce[m.Mark.Nonce] = l
			out = append(out, l)
		}
		l.Members = append(l.Members, m)
	}
	if len(sessions) > 0 {
		seen := map[int]bool{}
		for _, m := range all {
			seen[m.PID] = true
		}
		for _, sess := range sessions {
			if sess.SID <= 1 || bySID[sess.SID] != nil {
				continue
			}
			t := target{SID: sess.SID, SIDStart: sess.Start, Procs: map[int]uint64{}}
			for _, k := range sess.Procs {
				t.Procs[k.PID] = k.Start
			}
			l := &Leftover{Job: sess.Job, t: t}
			for _, m := range s.find(t) {
				if !seen[m.PID] && !inGroup[m.PID] {
					l.Members = append(l.Members, m)
				}
			}
			if len(l.Members) > 0 {
				bySID[sess.SID] = l
				out = append(out, l)
			}
		}
	}
	return out
}

// Run is the leftover of one run of a job: its processes, found when it is
// stopped.
func (s *Supervisor) Run(m Mark) *Leftover {
	l := &Leftover{Job: m.Job, t: target{Mark: m}}
	if s.Tree != nil {
		gs, _ := s.Tree.Groups()
		for _, g := range gs {
			if g.Name == cgroup.GroupName(m.Nonce, m.Job) {
				l.group = g
			}
		}
	}
	return l
}

// StopLeftover stops l as Stop stops a job: its group in cgroup mode,
// then whatever carries its mark.
func (s *Supervisor) StopLeftover(l *Leftover, grace time.Duration) (killed bool, left []Member) {
	if l.group != nil {
		return s.stopGroup(l.group, grace, nil)
	}
	return s.stop(l.t, grace, 0, map[int]uint64{})
}

// Credential resolves a user name into what a job runs as, with its
// supplementary groups (GPU device files are often group video), and the
// environment variables that go with it.
func Credential(name string) (*syscall.Credential, []string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, nil, err
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, fmt.Errorf("user %s: %v", name, err)
	}
	var groups []uint32
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	if len(groups) == 0 {
		groups = []uint32{uint32(gid)}
	}
	home := u.HomeDir
	if home == "" {
		home = "/"
	}
	env := []string{"HOME=" + home, "USER=" + u.Username, "LOGNAME=" + u.Username}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, env, nil
}

// Env returns base with each of set's NAME=value replacing any NAME already
// there.
func Env(base []string, set ...string) []string {
	out := make([]string, 0, len(base)+len(set))
	names := map[string]bool{}
	for _, kv := range set {
		names[envName(kv)] = true
	}
	for _, kv := range base {
		if !names[envName(kv)] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

func envName(kv string) string {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i]
		}
	}
	return kv
}
