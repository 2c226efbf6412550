package idlemon

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/idlemon/textfile"
	"github.com/gpumon/gpumon/internal/idlestate"
)

// The schedule's decisions on a fake clock: no root, no processes, no
// sleeping.

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

var testRules = rules{MinIdle: 30 * time.Second, BackoffBase: time.Second, BackoffMax: 5 * time.Minute, BackoffOK: 10 * time.Minute}

// gpus returns n GPUs free since t0.
func gpus(n int) []gpuSched {
	out := make([]gpuSched, n)
	for i := range out {
		out[i] = gpuSched{Index: i, State: idlestate.Idle, Since: t0, FreeSince: t0}
	}
	return out
}

func busy(gs []gpuSched, idx ...int) []gpuSched {
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

func allJob(p phase) jobSched {
	return jobSched{Name: "process-all", GPUs: []int{0, 1, 2, 3}, All: true, Phase: p}
}
func gpuJob(name string, gpu int, p phase) jobSched {
	return jobSched{Name: name, GPUs: []int{gpu}, Phase: p}
}

func TestStep(t *testing.T) {
	tests := []struct {
		name  string
		st    schedState
		obs   observation
		now   time.Time
		want  decision
		check func(t *testing.T, st schedState)
	}{
		{
			// The bug that cost a core: the ALL job's idle GPUs were due
			// long ago, one GPU is busy; the timer must not fire at once,
			// forever. Only a scan that sees the GPU free can start it.
			name: "ALL job waits for a busy GPU: no wake",
			st:   schedState{Rules: testRules, GPUs: busy(gpus(4), 1), Jobs: []jobSched{allJob(waiting)}},
			obs:  observation{Foreign: heldBy(1)},
			now:  at(time.Hour),
			want: decision{},
		},
		{
			name: "per-GPU job on a busy GPU: no start, no wake",
			st:   schedState{Rules: testRules, GPUs: busy(gpus(2), 0), Jobs: []jobSched{gpuJob("process-0", 0, waiting)}},
			obs:  observation{Foreign: heldBy(0)},
			now:  at(time.Hour),
			want: decision{},
		},
		{
			name: "GPU free for less than min_idle: wake when it is due",
			st:   schedState{Rules: testRules, GPUs: gpus(2), Jobs: []jobSched{gpuJob("process-0", 0, waiting)}},
			now:  at(10 * time.Second),
			want: decision{Wake: at(30 * time.Second)},
		},
		{
			name: "GPU free for min_idle: start",
			st:   schedState{Rules: testRules, GPUs: gpus(2), Jobs: []jobSched{gpuJob("process-0", 0, waiting), gpuJob("process-1", 1, waiting)}},
			now:  at(30 * time.Second),
			want: decision{Start: []int{0, 1}},
			check: func(t *testing.T, st schedState) {
				if st.Jobs[0].Phase != running || st.GPUs[0].State != idlestate.Job || !st.GPUs[0].Since.Equal(at(30*time.Second)) {
					t.Errorf("after the start: %+v %+v", st.Jobs[0], st.GPUs[0])
				}
			},
		},
		{
			name: "a GPU that just became free starts its idle time now",
			st:   schedState{Rules: testRules, GPUs: busy(gpus(1), 0), Jobs: []jobSched{gpuJob("process-0", 0, waiting)}},
			now:  at(time.Hour),
			want: decision{Wake: at(time.Hour + 30*time.Second)},
			check: func(t *testing.T, st schedState) {
				if g := st.GPUs[0]; !g.FreeSince.Equal(at(time.Hour)) || g.State != idlestate.Idle || len(g.Holders) != 0 {
					t.Errorf("gpu: %+v", g)
				}
			},
		},
		{
			name: "foreign holder on a running job's GPU: stop, preempted",
			st:   schedState{Rules: testRules, GPUs: gpus(2), Jobs: []jobSched{gpuJob("process-0", 0, running), gpuJob("process-1", 1, running)}},
			obs:  observation{Foreign: heldBy(0)},
			now:  at(time.Hour),
			want: decision{Stop: []stopJob{{Job: 0, Reason: "preempted by alice pid 5151 python", Preempted: true, Kind: textfile.Preempted}}},
			check: func(t *testing.T, st schedState) {
				if st.Jobs[0].Phase != stopping || st.Jobs[1].Phase != running || st.GPUs[0].State != idlestate.Busy {
					t.Errorf("after: %+v", st)
				}
			},
		},
		{
			name: "a foreign open while the job is being stopped: no second stop, no start",
			st:   schedState{Rules: testRules, GPUs: gpus(1), Jobs: []jobSched{gpuJob("process-0", 0, stopping)}},
			obs:  observation{Foreign: heldBy(0)},
			now:  at(time.Hour),
			want: decision{},
			check: func(t *testing.T, st schedState) {
				if st.GPUs[0].State != idlestate.Busy || !st.GPUs[0].FreeSince.IsZero() {
					t.Errorf("gpu: %+v", st.GPUs[0])
				}
			},
		},
		{
			name: "terminal user: every job stops, nothing starts, no wake",
			st:   schedState{Rules: testRules, GPUs: gpus(2), Jobs: []jobSched{gpuJob("process-0", 0, running), gpuJob("process-1", 1, waiting)}},
			obs:  observation{Paused: "user bob active on pts/3 (input 2s ago)"},
			now:  at(time.Hour),
			want: decision{Stop: []stopJob{{Job: 0, Reason: "user bob active on pts/3 (input 2s ago)", Kind: textfile.Terminal}}},
			check: func(t *testing.T, st schedState) {
				if st.GPUs[1].State != idlestate.Idle || st.Paused == "" {
					t.Errorf("a paused GPU stays free for people: %+v", st)
				}
			},
		},
		{
			name: "shutdown: every job stops with the reason",
			st:   schedState{Rules: testRules, GPUs: gpus(1), Jobs: []jobSched{gpuJob("process-0", 0, running)}},
			obs:  observation{Shutdown: "idlemon is stopping"},
			now:  at(time.Hour),
			want: decision{Stop: []stopJob{{Job: 0, Reason: "idlemon is stopping", Kind: textfile.Shutdown}}},
		},
		{
			name: "ALL job goes first when every GPU is idle",
			st:   schedState{Rules: testRules, GPUs: gpus(4), Jobs: []jobSched{gpuJob("process-2", 2, waiting), allJob(waiting)}},
			now:  at(time.Hour),
			want: decision{Start: []int{1}},
		},
		{
			// The second way to spin: every GPU idle long ago, the ALL job
			// due, but one of our per-GPU jobs runs.
			name: "ALL job blocked by a running per-GPU job: no start, no wake",
			st:   schedState{Rules: testRules, GPUs: gpus(4), Jobs: []jobSched{gpuJob("process-2", 2, running), gpuJob("process-3", 3, waiting), allJob(waiting)}},
			now:  at(time.Hour),
			want: decision{},
		},
		{
			name: "ALL job running: per-GPU jobs wait",
			st:   schedState{Rules: testRules, GPUs: gpus(4), Jobs: []jobSched{gpuJob("process-2", 2, waiting), allJob(running)}},
			now:  at(time.Hour),
			want: decision{},
		},
		{
			name: "one GPU busy: per-GPU jobs on the others run, the ALL job waits",
			st:   schedState{Rules: testRules, GPUs: busy(gpus(4), 1), Jobs: []jobSched{gpuJob("process-2", 2, waiting), allJob(waiting)}},
			obs:  observation{Foreign: heldBy(1)},
			now:  at(time.Hour),
			want: decision{Start: []int{0}},
		},
		{
			name: "ALL job in back-off: wake when it ends, per-GPU jobs wait for it",
			st: schedState{Rules: testRules, GPUs: gpus(4), Jobs: []jobSched{gpuJob("process-2", 2, waiting),
				{Name: "process-all", GPUs: []int{0, 1, 2, 3}, All: true, Backoff: 4 * time.Second, NotBefore: at(time.Hour + 4*time.Second)}}},
			now:  at(time.Hour),
			want: decision{Wake: at(time.Hour + 4*time.Second)},
		},
		{
			name: "back-off longer than the idle time: wake at its end",
			st:   schedState{Rules: testRules, GPUs: gpus(1), Jobs: []jobSched{{Name: "process-0", GPUs: []int{0}, Backoff: time.Minute, NotBefore: at(time.Minute)}}},
			now:  at(time.Second),
			want: decision{Wake: at(time.Minute)},
		},
		{
			name: "back-off shorter than the idle time: wake when the GPU is due",
			st:   schedState{Rules: testRules, GPUs: gpus(1), Jobs: []jobSched{{Name: "process-0", GPUs: []int{0}, Backoff: time.Second, NotBefore: at(2 * time.Second)}}},
			now:  at(time.Second),
			want: decision{Wake: at(30 * time.Second)},
		},
		{
			name: "no jobs: nothing to do",
			st:   schedState{Rules: testRules, GPUs: gpus(8)},
			now:  at(time.Hour),
			want: decision{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.st.clone()
			st, d := decide(tt.st, tt.obs, tt.now)
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
	phases := []phase{waiting, running, stopping}
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
					jobs := []jobSched{{Name: "process-2", GPUs: []int{2}, Phase: p2, Backoff: backoff, NotBefore: at(backoff)}}
					if allPhase >= 0 {
						jobs = append(jobs, allJob(allPhase))
					}
					st := schedState{Rules: testRules, GPUs: gs, Jobs: jobs}
					obs := observation{Foreign: heldBy(busyIdx...)}
					now := at(5 * time.Second)
					st2, d := decide(st, obs, now)
					n++
					if d.Wake.IsZero() {
						continue
					}
					if !d.Wake.After(now) {
						t.Fatalf("state %+v: wake %s not after %s", st, d.Wake, now)
					}
					if _, d2 := decide(st2, obs, d.Wake); len(d2.Start) == 0 {
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
	st := schedState{Rules: testRules, GPUs: gpus(1), Jobs: []jobSched{gpuJob("process-0", 0, running)}}
	now := at(0)
	var got []time.Duration
	for range 12 {
		st = exited(st, 0, 2*time.Second, false, now)
		got = append(got, st.Jobs[0].Backoff)
		if st.Jobs[0].Phase != waiting || !st.Jobs[0].NotBefore.Equal(now.Add(st.Jobs[0].Backoff)) {
			t.Fatalf("after an exit: %+v", st.Jobs[0])
		}
		st.Jobs[0].Phase = running
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300}
	for i := range want {
		want[i] *= time.Second
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("back-offs (-want +got):\n%s", diff)
	}
	// a long run starts again from the base
	st = exited(st, 0, 10*time.Minute, false, now)
	if st.Jobs[0].Backoff != time.Second {
		t.Errorf("after a 10-minute run: back-off %s, want 1s", st.Jobs[0].Backoff)
	}
	// processes left behind: stopping, then waiting with the back-off
	st.Jobs[0].Phase = running
	st = exited(st, 0, time.Second, true, now)
	if st.Jobs[0].Phase != stopping {
		t.Errorf("first process gone, others left: %v, want stopping", st.Jobs[0].Phase)
	}
	st = stopped(st, 0, now)
	if st.Jobs[0].Phase != waiting || st.Jobs[0].Backoff != 2*time.Second {
		t.Errorf("after the stop: %+v", st.Jobs[0])
	}
	// an exit while a stop is under way changes nothing: stopped ends it
	st.Jobs[0].Phase = stopping
	if got := exited(st, 0, time.Second, false, now); got.Jobs[0].Phase != stopping || got.Jobs[0].Backoff != 2*time.Second {
		t.Errorf("exit during a stop: %+v", got.Jobs[0])
	}
	// a failed start backs off too
	st.Jobs[0].Phase = running
	st = startFailed(st, 0, now)
	if st.Jobs[0].Phase != waiting || st.Jobs[0].Backoff != 4*time.Second {
		t.Errorf("after a failed start: %+v", st.Jobs[0])
	}
}

// A preempted job comes back once its GPU has been free for min_idle, with
// no back-off.
func TestPreemptedComesBack(t *testing.T) {
	st := schedState{Rules: testRules, GPUs: gpus(1), Jobs: []jobSched{gpuJob("process-0", 0, running)}}
	st, d := decide(st, observation{Foreign: heldBy(0)}, at(time.Hour))
	if len(d.Stop) != 1 {
		t.Fatalf("no stop: %+v", d)
	}
	st = stopped(st, 0, at(time.Hour+time.Second))
	st, d = decide(st, observation{Foreign: heldBy(0)}, at(time.Hour+2*time.Second))
	if len(d.Start) != 0 || !d.Wake.IsZero() {
		t.Fatalf("GPU still busy: %+v", d)
	}
	st, d = decide(st, observation{}, at(2*time.Hour))
	if len(d.Start) != 0 || !d.Wake.Equal(at(2*time.Hour+30*time.Second)) {
		t.Fatalf("GPU just free: %+v", d)
	}
	_, d = decide(st, observation{}, d.Wake)
	if diff := cmp.Diff([]int{0}, d.Start); diff != "" {
		t.Errorf("after min_idle: %s", diff)
	}
}

// Why a job waits, as the textfile counts refusals.
func TestWaitReason(t *testing.T) {
	r := rules{MinIdle: 30 * time.Second}
	job := func(p phase, g ...int) jobSched { return jobSched{Name: "j", GPUs: g, Phase: p} }
	tests := []struct {
		name string
		s    schedState
		at   time.Duration
		want string
	}{
		{"may start", schedState{Rules: r, GPUs: gpus(2), Jobs: []jobSched{job(waiting, 0)}}, time.Minute, ""},
		{"running", schedState{Rules: r, GPUs: gpus(2), Jobs: []jobSched{job(running, 0)}}, time.Minute, ""},
		{"terminal", schedState{Rules: r, GPUs: gpus(2), Jobs: []jobSched{job(waiting, 0)}, Paused: "user bob active"}, time.Minute, textfile.TerminalUser},
		{"busy gpu", schedState{Rules: r, GPUs: busy(gpus(2), 1), Jobs: []jobSched{job(waiting, 0, 1)}}, time.Minute, textfile.BusyGPU},
		{"other job", schedState{Rules: r, GPUs: gpus(2), Jobs: []jobSched{job(waiting, 0), allJob(running)}}, time.Minute, textfile.OtherJob},
		{"backoff", schedState{Rules: r, GPUs: gpus(2), Jobs: []jobSched{{Name: "j", GPUs: []int{0}, NotBefore: at(2 * time.Minute)}}}, time.Minute, textfile.Backoff},
		{"min idle", schedState{Rules: r, GPUs: gpus(2), Jobs: []jobSched{job(waiting, 0)}}, 10 * time.Second, textfile.MinIdle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.waitReason(0, at(tt.at)); got != tt.want {
				t.Errorf("waitReason = %q, want %q", got, tt.want)
			}
		})
	}
}
