package idlemon

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpumon/gpumon/internal/idlemon/textfile"
	"github.com/gpumon/gpumon/internal/idlestate"
)

// The schedule decides what idlemon does: which job to stop and why, which
// to start, when to look again. Its functions are pure: they take the state
// before, what a scan saw, and the time, and return the state after and the
// decision. The scan, the processes and the clock stay in daemon.go.

// rules are the schedule's settings.
type rules struct {
	MinIdle     time.Duration // a GPU idle this long may run a job
	BackoffBase time.Duration // first restart delay of a job that ends by itself
	BackoffMax  time.Duration
	BackoffOK   time.Duration // a run this long resets the back-off
}

// phase is where a job is in its life.
type phase int

const (
	waiting  phase = iota // not running: starts when its GPUs have been idle for MinIdle
	running               // started, not being stopped
	stopping              // SIGTERM sent; what is left goes at the end of the grace period
)

func (p phase) String() string {
	return [...]string{"waiting", "running", "stopping"}[p]
}

// jobSched is what the schedule knows of one job.
type jobSched struct {
	Name      string
	GPUs      []int
	All       bool // gpus = ALL: runs only when every GPU is idle, and first
	Phase     phase
	Backoff   time.Duration // the last restart delay; 0 = none
	NotBefore time.Time     // back-off: no start before
}

// gpuSched is what the schedule knows of one GPU.
type gpuSched struct {
	Index     int
	State     string    // idlestate.Idle, Job or Busy
	Since     time.Time // State since
	FreeSince time.Time // no foreign holder since; zero while it has one
	Holders   []idlestate.Holder
}

// schedState is the schedule's whole state.
type schedState struct {
	Rules  rules
	GPUs   []gpuSched
	Jobs   []jobSched
	Paused string // why no job may run (an active terminal user), or ""
}

// observation is what one scan saw.
type observation struct {
	// Foreign lists, per GPU index, the processes that make it busy: not
	// ours, not an ignored program.
	Foreign map[int][]idlestate.Holder
	// Paused says why no job may run now (an active terminal user), or "".
	Paused string
	// Shutdown says why idlemon is stopping, or "": every job stops,
	// nothing starts.
	Shutdown string
}

// stopJob is a decision to stop job Job (an index into schedState.Jobs).
type stopJob struct {
	Job       int
	Reason    string
	Preempted bool   // by a foreign holder, not by a terminal user
	Kind      string // textfile.Preempted, Terminal or Shutdown
}

// decision is what to do after a scan.
type decision struct {
	Stop  []stopJob
	Start []int // indices into schedState.Jobs, to start in this order
	// Wake is the next moment a start falls due if nothing else changes
	// (a GPU's idle time reaching MinIdle, a back-off ending); zero when
	// nothing is due. It is always after now: a job blocked by something
	// that time alone does not change (a busy GPU, another of our jobs, a
	// terminal user) waits for the next scan, not for a timer.
	Wake time.Time
}

// clone returns a copy of s that shares nothing with it.
func (s schedState) clone() schedState {
	c := s
	c.GPUs = slices.Clone(s.GPUs)
	for i := range c.GPUs {
		c.GPUs[i].Holders = slices.Clone(c.GPUs[i].Holders)
	}
	c.Jobs = slices.Clone(s.Jobs)
	return c
}

// decide is the schedule's decision on a scan: obs as seen at now.
// The returned state has the stopped jobs stopping and the started ones
// running; the caller reports a failed start with startFailed.
func decide(s schedState, obs observation, now time.Time) (schedState, decision) {
	s = s.clone()
	for i := range s.GPUs {
		g := &s.GPUs[i]
		g.Holders = slices.Clone(obs.Foreign[g.Index])
		switch {
		case len(g.Holders) > 0:
			g.FreeSince = time.Time{}
		case g.FreeSince.IsZero():
			g.FreeSince = now
		}
	}
	s.Paused = obs.Paused
	var d decision
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.Phase != running {
			continue
		}
		reason, preempted, kind := "", false, textfile.Preempted
		for _, gi := range j.GPUs {
			if g := s.gpu(gi); g != nil && len(g.Holders) > 0 {
				h := g.Holders[0]
				reason = fmt.Sprintf("preempted by %s pid %d %s", h.User, h.PID, firstWord(h.Command))
				preempted = true
				break
			}
		}
		if reason == "" && obs.Paused != "" {
			reason, kind = obs.Paused, textfile.Terminal
		}
		if reason == "" && obs.Shutdown != "" {
			reason, kind = obs.Shutdown, textfile.Shutdown
		}
		if reason != "" {
			j.Phase = stopping
			d.Stop = append(d.Stop, stopJob{Job: i, Reason: reason, Preempted: preempted, Kind: kind})
		}
	}
	if obs.Paused == "" && obs.Shutdown == "" {
		d.Start = s.startable(now)
		for _, i := range d.Start {
			s.Jobs[i].Phase = running
		}
		d.Wake = s.wake(now)
	}
	s.gpuStates(now)
	return s, d
}

// waitReason says why job i is not running at now (a textfile refusal
// reason), or "" when it runs, is being stopped, or may start now.
func (s *schedState) waitReason(i int, now time.Time) string {
	j := s.Jobs[i]
	if j.Phase != waiting {
		return ""
	}
	if s.Paused != "" {
		return textfile.TerminalUser
	}
	for _, gi := range j.GPUs {
		if g := s.gpu(gi); g != nil && len(g.Holders) > 0 {
			return textfile.BusyGPU
		}
	}
	for k, o := range s.Jobs {
		if k != i && o.Phase != waiting && (j.All || o.All || slices.ContainsFunc(o.GPUs, func(g int) bool { return slices.Contains(j.GPUs, g) })) {
			return textfile.OtherJob
		}
	}
	if now.Before(j.NotBefore) {
		return textfile.Backoff
	}
	if !s.idle(j.GPUs, now) {
		return textfile.MinIdle
	}
	return ""
}

// startable lists the jobs that may start at now, in order. The ALL job
// goes first when every GPU is idle and nothing of ours runs; per-GPU jobs
// wait for it then.
func (s *schedState) startable(now time.Time) []int {
	all, busy := -1, 0
	for i, j := range s.Jobs {
		if j.All {
			all = i
		}
		if j.Phase != waiting {
			busy++
		}
	}
	if all >= 0 {
		j := s.Jobs[all]
		if j.Phase != waiting {
			return nil
		}
		if s.idle(j.GPUs, now) {
			if busy == 0 && !now.Before(j.NotBefore) {
				return []int{all}
			}
			return nil
		}
	}
	var out []int
	for i, j := range s.Jobs {
		if !j.All && j.Phase == waiting && !now.Before(j.NotBefore) && s.idle(j.GPUs, now) {
			out = append(out, i)
		}
	}
	return out
}

// wake is the first moment after now at which startable would start
// something, the GPUs staying as they are. Only two kinds of moment can
// change its answer: a GPU's FreeSince+MinIdle and a job's NotBefore.
func (s *schedState) wake(now time.Time) time.Time {
	var at []time.Time
	for _, g := range s.GPUs {
		if !g.FreeSince.IsZero() {
			at = append(at, g.FreeSince.Add(s.Rules.MinIdle))
		}
	}
	for _, j := range s.Jobs {
		if j.Phase == waiting {
			at = append(at, j.NotBefore)
		}
	}
	slices.SortFunc(at, time.Time.Compare)
	for _, t := range at {
		if t.After(now) && len(s.startable(t)) > 0 {
			return t
		}
	}
	return time.Time{}
}

// idle says whether every GPU of gs has been free for MinIdle at now.
func (s *schedState) idle(gs []int, now time.Time) bool {
	for _, gi := range gs {
		g := s.gpu(gi)
		if g == nil || g.FreeSince.IsZero() || now.Sub(g.FreeSince) < s.Rules.MinIdle {
			return false
		}
	}
	return true
}

// idleFor is how long every GPU of gs has been free at now.
func (s *schedState) idleFor(gs []int, now time.Time) time.Duration {
	least := time.Duration(-1)
	for _, gi := range gs {
		g := s.gpu(gi)
		if g == nil || g.FreeSince.IsZero() {
			return 0
		}
		if d := now.Sub(g.FreeSince); least < 0 || d < least {
			least = d
		}
	}
	return max(least, 0)
}

func (s *schedState) gpu(idx int) *gpuSched {
	for i := range s.GPUs {
		if s.GPUs[i].Index == idx {
			return &s.GPUs[i]
		}
	}
	return nil
}

// gpuStates sets each GPU's state for the state file: busy with a foreign
// holder, job while one of our jobs runs or stops on it, idle otherwise.
func (s *schedState) gpuStates(now time.Time) {
	for i := range s.GPUs {
		g := &s.GPUs[i]
		state := idlestate.Idle
		if len(g.Holders) > 0 {
			state = idlestate.Busy
		} else {
			for _, j := range s.Jobs {
				if j.Phase != waiting && slices.Contains(j.GPUs, g.Index) {
					state = idlestate.Job
				}
			}
		}
		if state != g.State || g.Since.IsZero() {
			g.State, g.Since = state, now
		}
	}
}

// startFailed is the state after job i could not start at now: waiting,
// with a longer back-off.
func startFailed(s schedState, i int, now time.Time) schedState {
	s = s.clone()
	s.Jobs[i].Phase = waiting
	s.backoff(i, now)
	s.gpuStates(now)
	return s
}

// exited is the state after job i's first process ended by itself at now,
// after running for ran: the rest of its processes, if any (left), are to
// be stopped; it restarts after a back-off that doubles at each early end
// and starts again from the base after a run of BackoffOK.
func exited(s schedState, i int, ran time.Duration, left bool, now time.Time) schedState {
	s = s.clone()
	j := &s.Jobs[i]
	if j.Phase != running {
		return s // a stop is under way: stopped ends it
	}
	j.Phase = waiting
	if left {
		j.Phase = stopping
	}
	if ran >= s.Rules.BackoffOK {
		j.Backoff = 0
	}
	s.backoff(i, now)
	s.gpuStates(now)
	return s
}

// stopped is the state once job i is gone after a stop: it may start again
// as soon as its GPUs have been idle for MinIdle (a preempted job gets no
// back-off; one that ended by itself keeps the one exited gave it).
func stopped(s schedState, i int, now time.Time) schedState {
	s = s.clone()
	s.Jobs[i].Phase = waiting
	s.gpuStates(now)
	return s
}

func (s *schedState) backoff(i int, now time.Time) {
	j := &s.Jobs[i]
	if j.Backoff == 0 {
		j.Backoff = s.Rules.BackoffBase
	} else {
		j.Backoff *= 2
	}
	j.Backoff = min(j.Backoff, s.Rules.BackoffMax)
	j.NotBefore = now.Add(j.Backoff)
}
