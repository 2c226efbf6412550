package idlemon

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/idlestate"
)

// The schedule's decisions on a fake clock: no root, no processes, no
// sleeping.

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

var rules = Rules{MinIdle: 30 * time.Second, BackoffBase: time.Second, BackoffMax: 5 * time.Minute, BackoffOK: 10 * time.Minute}

// gpus returns n GPUs free since t0.
func gpus(n int) []GPUSched {
	out := make([]GPUSched, n)
	for i := range out {
		out[i] = GPUSched{Index: i, State: idlestate.Idle, Since: t0, FreeSince: t0}
	}
	return out
}

func busy(gs []GPUSched, idx ...int) []GPUSched {
	for _, i := range idx {
		gs[i].FreeSince, gs[i].State = time.Time{}, idlestate.Busy
		gs[i].Holders = []idlestate.Holder{alice}
	}
	return gs
}

var alice = idlestate.Holder{PID: 5151, User: "alice", Command: "/usr/bin/python train.py"}

func heldBy(idx ...int) map[int][]idlestate.Holder {
	m := map[int][]idlestate.Holder{}
	for _, i := range idx {
		m[i] = []idlestate.Holder{alice}
	}
	return m
}

func allJob(p Phase) JobSched {
	return JobSched{Name: "process-all", GPUs: []int{0, 1, 2, 3}, All: true, Phase: p}
}
func gpuJob(name string, gpu int, p Phase) JobSched {
	return JobSched{Name: name, GPUs: []int{gpu}, Phase: p}
}

func TestStep(t *testing.T) {
	tests := []struct {
		name  string
		st    State
		obs   Observation
		now   time.Time
		want  Decision
		check func(t *testing.T, st State)
	}{
		{
			// The bug that cost a core: the ALL job's idle GPUs were due
			// long ago, one GPU is busy; the timer must not fire at once,
			// forever. Only a scan that sees the GPU free can start it.
			name: "ALL job waits for a busy GPU: no wake",
			st:   State{Rules: rules, GPUs: busy(gpus(4), 1), Jobs: []JobSched{allJob(Waiting)}},
			obs:  Observation{Foreign: heldBy(1)},
			now:  at(time.Hour),
			want: Decision{},
		},
		{
			name: "per-GPU job on a busy GPU: no start, no wake",
			st:   State{Rules: rules, GPUs: busy(gpus(2), 0), Jobs: []JobSched{gpuJob("process-0", 0, Waiting)}},
			obs:  Observation{Foreign: heldBy(0)},
			now:  at(time.Hour),
			want: Decision{},
		},
		{
			name: "GPU free for less than min_idle: wake when it is due",
			st:   State{Rules: rules, GPUs: gpus(2), Jobs: []JobSched{gpuJob("process-0", 0, Waiting)}},
			now:  at(10 * time.Second),
			want: Decision{Wake: at(30 * time.Second)},
		},
		{
			name: "GPU free for min_idle: start",
			st:   State{Rules: rules, GPUs: gpus(2), Jobs: []JobSched{gpuJob("process-0", 0, Waiting), gpuJob("process-1", 1, Waiting)}},
			now:  at(30 * time.Second),
			want: Decision{Start: []int{0, 1}},
			check: func(t *testing.T, st State) {
				if st.Jobs[0].Phase != Running || st.GPUs[0].State != idlestate.Job || !st.GPUs[0].Since.Equal(at(30*time.Second)) {
					t.Errorf("after the start: %+v %+v", st.Jobs[0], st.GPUs[0])
				}
			},
		},
		{
			name: "a GPU that just became free starts its idle time now",
			st:   State{Rules: rules, GPUs: busy(gpus(1), 0), Jobs: []JobSched{gpuJob("process-0", 0, Waiting)}},
			now:  at(time.Hour),
			want: Decision{Wake: at(time.Hour + 30*time.Second)},
			check: func(t *testing.T, st State) {
				if g := st.GPUs[0]; !g.FreeSince.Equal(at(time.Hour)) || g.State != idlestate.Idle || len(g.Holders) != 0 {
					t.Errorf("gpu: %+v", g)
				}
			},
		},
		{
			name: "foreign holder on a running job's GPU: stop, preempted",
			st:   State{Rules: rules, GPUs: gpus(2), Jobs: []JobSched{gpuJob("process-0", 0, Running), gpuJob("process-1", 1, Running)}},
			obs:  Observation{Foreign: heldBy(0)},
			now:  at(time.Hour),
			want: Decision{Stop: []StopJob{{Job: 0, Reason: "preempted by alice pid 5151 python", Preempted: true}}},
			check: func(t *testing.T, st State) {
				if st.Jobs[0].Phase != Stopping || st.Jobs[1].Phase != Running || st.GPUs[0].State != idlestate.Busy {
					t.Errorf("after: %+v", st)
				}
			},
		},
		{
			name: "a foreign open while the job is being stopped: no second stop, no start",
			st:   State{Rules: rules, GPUs: gpus(1), Jobs: []JobSched{gpuJob("process-0", 0, Stopping)}},
			obs:  Observation{Foreign: heldBy(0)},
			now:  at(time.Hour),
			want: Decision{},
			check: func(t *testing.T, st State) {
				if st.GPUs[0].State != idlestate.Busy || !st.GPUs[0].FreeSince.IsZero() {
					t.Errorf("gpu: %+v", st.GPUs[0])
				}
			},
		},
		{
			name: "terminal user: every job stops, nothing starts, no wake",
			st:   State{Rules: rules, GPUs: gpus(2), Jobs: []JobSched{gpuJob("process-0", 0, Running), gpuJob("process-1", 1, Waiting)}},
			obs:  Observation{Paused: "user bob active on pts/3 (input 2s ago)"},
			now:  at(time.Hour),
			want: Decision{Stop: []StopJob{{Job: 0, Reason: "user bob active on pts/3 (input 2s ago)"}}},
			check: func(t *testing.T, st State) {
				if st.GPUs[1].State != idlestate.Idle || st.Paused == "" {
					t.Errorf("a paused GPU stays free for people: %+v", st)
				}
			},
		},
		{
			name: "shutdown: every job stops with the reason",
			st:   State{Rules: rules, GPUs: gpus(1), Jobs: []JobSched{gpuJob("process-0", 0, Running)}},
			obs:  Observation{Shutdown: "idlemon is stopping"},
			now:  at(time.Hour),
			want: Decision{Stop: []StopJob{{Job: 0, Reason: "idlemon is stopping"}}},
		},
		{
			name: "ALL job goes first when every GPU is idle",
			st:   State{Rules: rules, GPUs: gpus(4), Jobs: []JobSched{gpuJob("process-2", 2, Waiting), allJob(Waiting)}},
			now:  at(time.Hour),
			want: Decision{Start: []int{1}},
		},
		{
			// The second way to spin: every GPU idle long ago, the ALL job
			// due, but one of our per-GPU jobs runs.
			name: "ALL job blocked by a running per-GPU job: no start, no wake",
			st:   State{Rules: rules, GPUs: gpus(4), Jobs: []JobSched{gpuJob("process-2", 2, Running), gpuJob("process-3", 3, Waiting), allJob(Waiting)}},
			now:  at(time.Hour),
			want: Decision{},
		},
		{
			name: "ALL job running: per-GPU jobs wait",
			st:   State{Rules: rules, GPUs: gpus(4), Jobs: []JobSched{gpuJob("process-2", 2, Waiting), allJob(Running)}},
			now:  at(time.Hour),
			want: Decision{},
		},
		{
			name: "one GPU busy: per-GPU jobs on the others run, the ALL job waits",
			st:   State{Rules: rules, GPUs: busy(gpus(4), 1), Jobs: []JobSched{gpuJob("process-2", 2, Waiting), allJob(Waiting)}},
			obs:  Observation{Foreign: heldBy(1)},
			now:  at(time.Hour),
			want: Decision{Start: []int{0}},
		},
		{
			name: "ALL job in back-off: wake when it ends, per-GPU jobs wait for it",
			st: State{Rules: rules, GPUs: gpus(4), Jobs: []JobSched{gpuJob("process-2", 2, Waiting),
				{Name: "process-all", GPUs: []int{0, 1, 2, 3}, All: true, Backoff: 4 * time.Second, NotBefore: at(time.Hour + 4*time.Second)}}},
			now:  at(time.Hour),
			want: Decision{Wake: at(time.Hour + 4*time.Second)},
		},
		{
			name: "back-off longer than the idle time: wake at its end",
			st:   State{Rules: rules, GPUs: gpus(1), Jobs: []JobSched{{Name: "process-0", GPUs: []int{0}, Backoff: time.Minute, NotBefore: at(time.Minute)}}},
			now:  at(time.Second),
			want: Decision{Wake: at(time.Minute)},
		},
		{
			name: "back-off shorter than the idle time: wake when the GPU is due",
			st:   State{Rules: rules, GPUs: gpus(1), Jobs: []JobSched{{Name: "process-0", GPUs: []int{0}, Backoff: time.Second, NotBefore: at(2 * time.Second)}}},
			now:  at(time.Second),
			want: Decision{Wake: at(30 * time.Second)},
		},
		{
			name: "no jobs: nothing to do",
			st:   State{Rules: rules, GPUs: gpus(8)},
			now:  at(time.Hour),
			want: Decision{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.st.Clone()
			st, d := Step(tt.st, tt.obs, tt.now)
			if diff := cmp.Diff(tt.want, d); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.st); diff != "" {
				t.Errorf("Step changed its input:\n%s", diff)
			}
			if !d.Wake.IsZero() && !d.Wake.After(tt.now) {
				t.Errorf("wake %s is not after now %s: the loop would spin", d.Wake, tt.now)
			}
			if tt.check != nil {
				tt.check(t, st)
			}
		})
	}
}

// Whatever the state, a wake-up is in the future, and at that moment the
// schedule starts something: a timer never fires for nothing, so a job
// that waits costs nothing between scans.
func TestWakeStartsSomething(t *testing.T) {
	phases := []Phase{Waiting, Running, Stopping}
	n := 0
	for mask := 0; mask < 1<<4; mask++ { // which of 4 GPUs are busy
		for _, allPhase := range append(phases, -1) {
			for _, p2 := range phases {
				for _, backoff := range []time.Duration{0, 10 * time.Second, time.Hour} {
					gs := gpus(4)
					var busyIdx []int
					for i := range 4 {
						if mask&(1<<i) != 0 {
							busyIdx = append(busyIdx, i)
						}
					}
					gs = busy(gs, busyIdx...)
					gs[3].FreeSince = at(20 * time.Second) // free more recently
					jobs := []JobSched{{Name: "process-2", GPUs: []int{2}, Phase: p2, Backoff: backoff, NotBefore: at(backoff)}}
					if allPhase >= 0 {
						jobs = append(jobs, allJob(allPhase))
					}
					st := State{Rules: rules, GPUs: gs, Jobs: jobs}
					obs := Observation{Foreign: heldBy(busyIdx...)}
					now := at(5 * time.Second)
					st2, d := Step(st, obs, now)
					n++
					if d.Wake.IsZero() {
						continue
					}
					if !d.Wake.After(now) {
						t.Fatalf("state %+v: wake %s not after %s", st, d.Wake, now)
					}
					if _, d2 := Step(st2, obs, d.Wake); len(d2.Start) == 0 {
						t.Errorf("state %+v: woke at %s to start nothing", st2, d.Wake)
					}
				}
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d states tried", n)
	}
}

func TestBackoff(t *testing.T) {
	st := State{Rules: rules, GPUs: gpus(1), Jobs: []JobSched{gpuJob("process-0", 0, Running)}}
	now := at(0)
	var got []time.Duration
	for range 12 {
		st = Exited(st, 0, 2*time.Second, false, now)
		got = append(got, st.Jobs[0].Backoff)
		if st.Jobs[0].Phase != Waiting || !st.Jobs[0].NotBefore.Equal(now.Add(st.Jobs[0].Backoff)) {
			t.Fatalf("after an exit: %+v", st.Jobs[0])
		}
		st.Jobs[0].Phase = Running
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300}
	for i := range want {
		want[i] *= time.Second
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("back-offs (-want +got):\n%s", diff)
	}
	// a long run starts again from the base
	st = Exited(st, 0, 10*time.Minute, false, now)
	if st.Jobs[0].Backoff != time.Second {
		t.Errorf("after a 10-minute run: back-off %s, want 1s", st.Jobs[0].Backoff)
	}
	// processes left behind: stopping, then waiting with the back-off
	st.Jobs[0].Phase = Running
	st = Exited(st, 0, time.Second, true, now)
	if st.Jobs[0].Phase != Stopping {
		t.Errorf("first process gone, others left: %v, want stopping", st.Jobs[0].Phase)
	}
	st = Stopped(st, 0, now)
	if st.Jobs[0].Phase != Waiting || st.Jobs[0].Backoff != 2*time.Second {
		t.Errorf("after the stop: %+v", st.Jobs[0])
	}
	// an exit while a stop is under way changes nothing: Stopped ends it
	st.Jobs[0].Phase = Stopping
	if got := Exited(st, 0, time.Second, false, now); got.Jobs[0].Phase != Stopping || got.Jobs[0].Backoff != 2*time.Second {
		t.Errorf("exit during a stop: %+v", got.Jobs[0])
	}
	// a failed start backs off too
	st.Jobs[0].Phase = Running
	st = StartFailed(st, 0, now)
	if st.Jobs[0].Phase != Waiting || st.Jobs[0].Backoff != 4*time.Second {
		t.Errorf("after a failed start: %+v", st.Jobs[0])
	}
}

// A preempted job comes back once its GPU has been free for min_idle, with
// no back-off.
func TestPreemptedComesBack(t *testing.T) {
	st := State{Rules: rules, GPUs: gpus(1), Jobs: []JobSched{gpuJob("process-0", 0, Running)}}
	st, d := Step(st, Observation{Foreign: heldBy(0)}, at(time.Hour))
	if len(d.Stop) != 1 {
		t.Fatalf("no stop: %+v", d)
	}
	st = Stopped(st, 0, at(time.Hour+time.Second))
	st, d = Step(st, Observation{Foreign: heldBy(0)}, at(time.Hour+2*time.Second))
	if len(d.Start) != 0 || !d.Wake.IsZero() {
		t.Fatalf("GPU still busy: %+v", d)
	}
	st, d = Step(st, Observation{}, at(2*time.Hour))
	if len(d.Start) != 0 || !d.Wake.Equal(at(2*time.Hour+30*time.Second)) {
		t.Fatalf("GPU just free: %+v", d)
	}
	_, d = Step(st, Observation{}, d.Wake)
	if diff := cmp.Diff([]int{0}, d.Start); diff != "" {
		t.Errorf("after min_idle: %s", diff)
	}
}
