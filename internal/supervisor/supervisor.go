// Package supervisor starts idlemon's jobs and stops them, whole.
//
// A job runs in a session of its own (setsid, which also makes it the leader
// of its own process group, pgid = sid = its pid), so every process it forks
// stays findable even if it moves to another process group. It is stopped by
// SIGTERM to its process group (kill(-pgid)) and to any other group inside
// its session, then SIGKILL after the grace period. The supervisor never
// signals anything else: only groups it created or groups inside sessions
// it created, checked to still exist, and never a pgid <= 1.
package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/holders"
)

// Spec says what to run and how.
type Spec struct {
	Name  string   // for messages: the config section
	Cmd   string   // run with /bin/sh -c
	Dir   string   // working folder
	Env   []string // the whole environment
	Log   string   // appended to; "" = Stdout
	Cred  *syscall.Credential
	Grace time.Duration
}

// Stdout is where a job without a log writes (idlemon's own stdout).
var Stdout *os.File = os.Stdout

// ProcRoot is the proc file system (for tests).
var ProcRoot = "/proc"

// Job is one started job.
type Job struct {
	Spec  Spec
	PID   int // leader pid = pgid = sid
	Start uint64
	Began time.Time

	done    chan struct{}
	mu      sync.Mutex
	waitErr error
	ended   time.Time
}

// Start starts spec's command.
func Start(spec Spec) (*Job, error) {
	cmd := exec.Command("/bin/sh", "-c", spec.Cmd)
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	out := Stdout
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
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	j := &Job{Spec: spec, PID: cmd.Process.Pid, Began: time.Now(), done: make(chan struct{})}
	if st, err := holders.StartTime(j.PID); err == nil {
		j.Start = st
	}
	go func() {
		err := cmd.Wait()
		j.mu.Lock()
		j.waitErr, j.ended = err, time.Now()
		j.mu.Unlock()
		close(j.done)
	}()
	return j, nil
}

// Done is closed when the job's leader process has exited.
func (j *Job) Done() <-chan struct{} { return j.done }

// Exit returns how the leader ended (after Done).
func (j *Job) Exit() (error, time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.waitErr, j.ended.Sub(j.Began)
}

// Stop stops the whole job: SIGTERM to every group of its session, SIGKILL
// after the grace period to whatever is left. It returns once nothing of the
// job is left (or after a further 5 s if something will not die), and says
// whether SIGKILL was needed.
func (j *Job) Stop() (killed bool) {
	return StopSession(j.PID, j.Spec.Grace, j.done)
}

// StopSession stops every process group in session sid (a job's session:
// sid = pgid = the leader's pid) with SIGTERM, then SIGKILL after grace.
// leaderDone, when not nil, is closed when the caller has reaped the leader.
func StopSession(sid int, grace time.Duration, leaderDone <-chan struct{}) (killed bool) {
	if sid <= 1 {
		return false
	}
	signalSession(sid, syscall.SIGTERM)
	if waitGone(sid, grace, leaderDone) {
		return false
	}
	signalSession(sid, syscall.SIGKILL)
	waitGone(sid, 5*time.Second, leaderDone)
	return true
}

// signalSession sends sig to process group sid and to every other group
// whose members are in session sid.
func signalSession(sid int, sig syscall.Signal) {
	groups := map[int]bool{}
	for _, p := range SessionMembers(sid) {
		groups[p.PGID] = true
	}
	// the job's own group, even if its members are zombies or between
	// scans; kill(2) itself fails with ESRCH when it is empty.
	groups[sid] = true
	for pg := range groups {
		if pg > 1 && pg != os.Getpid() && pg != syscall.Getpgrp() {
			_ = syscall.Kill(-pg, sig)
		}
	}
}

// SessionMembers lists the live processes of session sid or process group
// sid.
func SessionMembers(sid int) []*holders.Proc {
	if sid <= 1 {
		return nil
	}
	return holders.Members(ProcRoot, func(p *holders.Proc) bool { return p.SID == sid || p.PGID == sid })
}

// waitGone waits until nothing of session sid is alive (and the leader is
// reaped), or until d has passed.
func waitGone(sid int, d time.Duration, leaderDone <-chan struct{}) bool {
	deadline := time.Now().Add(d)
	delay := time.Millisecond
	for {
		reaped := true
		if leaderDone != nil {
			select {
			case <-leaderDone:
			default:
				reaped = false
			}
		}
		if reaped && len(SessionMembers(sid)) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// Leftover is a job recorded by an earlier run of idlemon.
type Leftover struct {
	Name  string
	PGID  int
	Start uint64         // the leader's start time
	Procs map[int]uint64 // pid -> start time of the job's processes last seen
}

// StopLeftover stops what is left of a job of an earlier idlemon run: only
// if its leader, or one of the processes recorded for it, is still alive
// with the same start time (so a reused pid is never touched). It returns
// the number of processes found.
func StopLeftover(l Leftover, grace time.Duration) (int, error) {
	if l.PGID <= 1 {
		return 0, nil
	}
	ours := false
	if p, err := holders.ReadProc(ProcRoot, l.PGID); err == nil && p.State != 'Z' {
		ours = l.Start != 0 && p.Start == l.Start && p.PGID == l.PGID
	}
	members := SessionMembers(l.PGID)
	if !ours {
		for _, m := range members {
			if st, ok := l.Procs[m.PID]; ok && st == m.Start {
				ours = true
				break
			}
		}
	}
	if !ours || len(members) == 0 {
		return 0, nil
	}
	StopSession(l.PGID, grace, nil)
	if left := SessionMembers(l.PGID); len(left) > 0 {
		return len(members), fmt.Errorf("%d processes of %s (pgid %d) survived SIGKILL", len(left), l.Name, l.PGID)
	}
	return len(members), nil
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
