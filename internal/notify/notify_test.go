package notify

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

// run is one render run: the clock and what the newest snapshot shows.
type run struct {
	min   int // minutes after t0; the data is as new as the run
	hosts int
	up    int
	idle  []IdleGPU
	held  []IdleGPU // held idle, in a spell shorter than idle_after
	down  []DownHost
}

func (r run) obs() Observations {
	return Observations{Now: at(r.min), DataTime: at(r.min), Hosts: r.hosts, Up: r.up, IdleHeld: r.idle,
		HeldIdle: append(slices.Clone(r.idle), r.held...), Down: r.down}
}

// told is an event as one line: kind, state, reminder, host, gpu.
func told(e Event) string {
	s := fmt.Sprintf("%d %s %s", int(e.At.Sub(t0).Minutes()), e.Kind, e.State)
	if e.reminder {
		s += " again"
	}
	if e.Host != "" {
		s += " " + e.Host
	}
	if e.GPU != "" {
		s += "/" + e.GPU
	}
	return s
}

func idle(host, gpu string, sinceMin int, users ...string) IdleGPU {
	return IdleGPU{Host: host, GPU: gpu, Since: at(sinceMin), Users: users, MemMiB: 70000}
}

func down(host string, sinceMin int) DownHost { return DownHost{Host: host, Since: at(sinceMin)} }

// Each episode fires once, is reminded once per remind_after and resolves
// once, however many runs (every 5 minutes, as cron) see it.
func TestStep(t *testing.T) {
	p := Params{HostDownAfter: 15 * time.Minute, RemindAfter: 24 * time.Hour}
	every5 := func(from, to int, f func(m int) run) []run {
		var rs []run
		for m := from; m <= to; m += 5 {
			rs = append(rs, f(m))
		}
		return rs
	}
	tests := []struct {
		name string
		runs []run
		want []string
	}{
		{
			name: "idle-held GPU fires once, then resolves once",
			runs: append(every5(0, 60, func(m int) run {
				return run{min: m, hosts: 2, up: 2, idle: []IdleGPU{idle("gpu01", "3", -120, "alice")}}
			}), every5(65, 90, func(m int) run { return run{min: m, hosts: 2, up: 2} })...),
			want: []string{"0 idle_held firing gpu01/3", "65 idle_held resolved gpu01/3"},
		},
		{
			name: "the same snapshot read twice tells nothing new",
			runs: []run{
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu01", "0", -120, "alice")}},
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu01", "0", -120, "alice")}},
			},
			want: []string{"0 idle_held firing gpu01/0"},
		},
		{
			name: "reminded every remind_after while it lasts",
			runs: every5(0, 49*60, func(m int) run {
				return run{min: m, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu01", "0", -120, "alice")}}
			}),
			want: []string{"0 idle_held firing gpu01/0", "1440 idle_held firing again gpu01/0", "2880 idle_held firing again gpu01/0"},
		},
		{
			name: "another holder's spell on the same GPU: the old one resolves, the new fires",
			runs: []run{
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu01", "0", -120, "alice")}},
				{min: 5, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu01", "0", -125, "bob")}},
			},
			want: []string{"0 idle_held firing gpu01/0", "5 idle_held resolved gpu01/0", "5 idle_held firing gpu01/0"},
		},
		{
			name: "a GPU on a host gone down is not known to be released",
			runs: []run{
				{min: 0, hosts: 2, up: 2, idle: []IdleGPU{idle("gpu01", "0", -120, "alice")}},
				{min: 5, hosts: 2, up: 1, down: []DownHost{down("gpu01", 5)}},
				{min: 10, hosts: 2, up: 1, down: []DownHost{down("gpu01", 5)}},
				{min: 15, hosts: 2, up: 2},
			},
			want: []string{"0 idle_held firing gpu01/0", "15 idle_held resolved gpu01/0"},
		},
		{
			// history's spell starts again when the host answers; the
			// holder is not told twice about one idle GPU
			name: "a host down for a run, back with the GPU still held idle by the same holder: the episode goes on",
			runs: append([]run{
				{min: 0, hosts: 2, up: 2, idle: []IdleGPU{idle("gpu01", "0", -120, "alice")}},
				{min: 5, hosts: 2, up: 1, down: []DownHost{down("gpu01", 5)}},
			}, every5(10, 200, func(m int) run {
				if m < 130 {
					return run{min: m, hosts: 2, up: 2, held: []IdleGPU{idle("gpu01", "0", 10, "alice")}}
				}
				return run{min: m, hosts: 2, up: 2, idle: []IdleGPU{idle("gpu01", "0", 10, "alice")}}
			})...),
			want: []string{"0 idle_held firing gpu01/0"},
		},
		{
			name: "every host down for a while, back with the GPU still held idle: only all_down is told",
			runs: []run{
				{min: 0, hosts: 2, up: 2, idle: []IdleGPU{idle("gpu01", "0", -120, "alice")}},
				{min: 5, hosts: 2, up: 0, down: []DownHost{down("gpu01", 5), down("gpu02", 5)}},
				{min: 20, hosts: 2, up: 0, down: []DownHost{down("gpu01", 5), down("gpu02", 5)}},
				{min: 25, hosts: 2, up: 2, held: []IdleGPU{idle("gpu01", "0", 25, "alice")}},
				{min: 145, hosts: 2, up: 2, idle: []IdleGPU{idle("gpu01", "0", 25, "alice")}},
				{min: 150, hosts: 2, up: 2},
			},
			want: []string{"0 idle_held firing gpu01/0", "20 all_down firing", "25 all_down resolved", "150 idle_held resolved gpu01/0"},
		},
		{
			name: "back after a gap with another holder on the GPU: the old episode resolves",
			runs: []run{
				{min: 0, hosts: 2, up: 2, idle: []IdleGPU{idle("gpu01", "0", -120, "alice")}},
				{min: 5, hosts: 2, up: 1, down: []DownHost{down("gpu01", 5)}},
				{min: 10, hosts: 2, up: 2, held: []IdleGPU{idle("gpu01", "0", 10, "bob")}},
			},
			want: []string{"0 idle_held firing gpu01/0", "10 idle_held resolved gpu01/0"},
		},
		{
			name: "a host down past host_down_after fires once and resolves when it answers",
			runs: append(every5(0, 40, func(m int) run {
				return run{min: m, hosts: 3, up: 2, down: []DownHost{down("gpu02", 0)}}
			}), run{min: 45, hosts: 3, up: 3}, run{min: 50, hosts: 3, up: 3}),
			want: []string{"15 host_down firing gpu02", "45 host_down resolved gpu02"},
		},
		{
			name: "a host that misses a run or two is not news",
			runs: []run{
				{min: 0, hosts: 3, up: 2, down: []DownHost{down("gpu02", 0)}},
				{min: 5, hosts: 3, up: 2, down: []DownHost{down("gpu02", 0)}},
				{min: 10, hosts: 3, up: 3},
			},
			want: nil,
		},
		{
			name: "down, back unseen between runs, down again: a new episode",
			runs: []run{
				{min: 20, hosts: 3, up: 2, down: []DownHost{down("gpu02", 0)}},
				{min: 25, hosts: 3, up: 2, down: []DownHost{down("gpu02", 25)}},
				{min: 40, hosts: 3, up: 2, down: []DownHost{down("gpu02", 25)}},
			},
			want: []string{"20 host_down firing gpu02", "25 host_down resolved gpu02", "40 host_down firing gpu02"},
		},
		{
			name: "everything down: one message, not one per host; hosts still down after it are told",
			runs: []run{
				{min: 0, hosts: 3, up: 3},
				{min: 5, hosts: 3, up: 0, down: []DownHost{down("a", 5), down("b", 5), down("c", 5)}},
				{min: 30, hosts: 3, up: 0, down: []DownHost{down("a", 5), down("b", 5), down("c", 5)}},
				{min: 35, hosts: 3, up: 2, down: []DownHost{down("c", 5)}},
				{min: 40, hosts: 3, up: 2, down: []DownHost{down("c", 5)}},
				{min: 45, hosts: 3, up: 3},
			},
			want: []string{"30 all_down firing", "35 all_down resolved", "35 host_down firing c", "45 host_down resolved c"},
		},
		{
			name: "a host told down before everything went down resolves when it answers",
			runs: []run{
				{min: 20, hosts: 2, up: 1, down: []DownHost{down("a", 0)}},
				{min: 25, hosts: 2, up: 0, down: []DownHost{down("a", 0), down("b", 25)}},
				{min: 30, hosts: 2, up: 2},
			},
			want: []string{"20 host_down firing a", "30 host_down resolved a"},
		},
		{
			name: "everything down for one run (the monitor's network) is not news",
			runs: []run{
				{min: 0, hosts: 1, up: 1},
				{min: 5, hosts: 1, up: 0, down: []DownHost{down("a", 5)}},
				{min: 10, hosts: 1, up: 1},
			},
			want: nil,
		},
		{
			name: "everything down counts from the last host to go down",
			runs: []run{
				{min: 0, hosts: 2, up: 1, down: []DownHost{down("a", 0)}},
				{min: 20, hosts: 2, up: 0, down: []DownHost{down("a", 0), down("b", 20)}},
				{min: 30, hosts: 2, up: 0, down: []DownHost{down("a", 0), down("b", 20)}},
				{min: 35, hosts: 2, up: 0, down: []DownHost{down("a", 0), down("b", 20)}},
			},
			want: []string{"35 all_down firing"},
		},
		{
			name: "a host no longer polled resolves",
			runs: []run{
				{min: 20, hosts: 2, up: 1, down: []DownHost{down("a", 0)}},
				{min: 25, hosts: 1, up: 1},
			},
			want: []string{"20 host_down firing a", "25 host_down resolved a"},
		},
		{
			name: "everything down for a day: reminded once per remind_after, not per host",
			runs: every5(0, 25*60, func(m int) run {
				return run{min: m, hosts: 2, up: 0, down: []DownHost{down("a", 0), down("b", 0)}}
			}),
			want: []string{"15 all_down firing", "1455 all_down firing again"},
		},
		{
			name: "GPUs in the order of their numbers (2 before 10), resolved before fired",
			runs: []run{
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu01", "10", -120, "alice"), idle("gpu01", "2", -120, "bob")}},
				{min: 5, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu01", "10", -120, "alice"), idle("gpu01", "2", -125, "carol")}},
			},
			want: []string{"0 idle_held firing gpu01/2", "0 idle_held firing gpu01/10", "5 idle_held resolved gpu01/2", "5 idle_held firing gpu01/2"},
		},
		{
			name: "no hosts at all is not everything down",
			runs: []run{{min: 0}},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := stepRuns(tt.runs, p, told)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// stepRuns steps through runs from no open episode: the episodes left
// open, and each event as tell writes it.
func stepRuns[R interface{ obs() Observations }](runs []R, p Params, tell func(Event) string) (map[string]Episode, []string) {
	open := map[string]Episode{}
	var got []string
	for _, r := range runs {
		var events []Event
		open, events = step(open, r.obs(), p)
		for _, e := range events {
			got = append(got, tell(e))
		}
	}
	return open, got
}

// remind_after = 0 never repeats.
func TestStepNoReminders(t *testing.T) {
	open := map[string]Episode{}
	n := 0
	for m := 0; m < 10*24*60; m += 60 {
		var events []Event
		open, events = step(open, run{min: m, hosts: 1, up: 1, idle: []IdleGPU{idle("g", "0", -200, "a")}}.obs(),
			Params{HostDownAfter: time.Minute})
		n += len(events)
	}
	if n != 1 {
		t.Errorf("%d events in 10 days, want the one firing", n)
	}
}

// What a resolved or fired event says: the holders, for how long, since
// when.
func TestEventText(t *testing.T) {
	loc := time.UTC
	e := Event{Episode: Episode{Kind: idleHeld, Host: "gpu01", GPU: "3", Model: "NVIDIA H100 80GB HBM3",
		Users: []string{"alice"}, Since: at(-312), MemMiB: 71680}, State: Firing, At: at(0),
		Commands: []string{"python train.py --lr `rm -rf`"}}
	want := "GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) has been held idle by alice for 5.2 h (since 2026-11-25 02:48 UTC), 70.0 GiB in use."
	if got := e.Text(loc, false); got != want {
		t.Errorf("firing:\n got %s\nwant %s", got, want)
	}
	if got := e.Text(loc, true); !strings.HasSuffix(got, " Processes: `python train.py --lr 'rm -rf'`.") {
		t.Errorf("with commands: %s", got)
	}
	e.State = resolved
	if got, want := e.Text(loc, false), "GPU 3 on gpu01 is no longer idle-held by alice (it was for 5.2 h, since 2026-11-25 02:48 UTC)."; got != want {
		t.Errorf("resolved:\n got %s\nwant %s", got, want)
	}
}

// On a shared GPU the message names the idle holder and who uses it.
func TestEventTextShared(t *testing.T) {
	e := Event{Episode: Episode{Kind: idleHeld, Host: "gpu03", GPU: "2", Model: "NVIDIA H100 80GB HBM3",
		Users: []string{"alice"}, Working: []string{"bob"}, Since: at(-360), MemMiB: 30720}, State: Firing, At: at(0)}
	tests := []struct{ name, got, want string }{
		{"text", e.Text(time.UTC, false),
			"GPU 2 on gpu03 (NVIDIA H100 80GB HBM3) has been held idle by alice for 6.0 h (since 2026-11-25 02:00 UTC), 30.0 GiB in use, while bob uses it."},
		{"subject", digestSubject([]Event{e}), "[gpumon] GPU 2 on gpu03 idle-held by alice for 6.0 h, while bob uses it"},
		{"the holder's mail", func() string { s, _ := userMail("alice", []Event{e}, time.UTC, false); return s }(),
			"[gpumon] your processes on GPU 2 on gpu03 have been idle for 6.0 h"},
		{"two at work", func() string { e := e; e.Working = []string{"bob", "carol"}; return e.Text(time.UTC, false) }(),
			"GPU 2 on gpu03 (NVIDIA H100 80GB HBM3) has been held idle by alice for 6.0 h (since 2026-11-25 02:00 UTC), 30.0 GiB in use, while bob, carol use it."},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, tt.got, tt.want)
		}
	}
	var body struct{ Users, Working []string }
	if err := json.Unmarshal(WebhookBody(e, Targets{}, time.UTC), &body); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(struct{ Users, Working []string }{[]string{"alice"}, []string{"bob"}}, body); diff != "" {
		t.Errorf("webhook users (-want +got):\n%s", diff)
	}
}

// toldBy is told with the holders and, on a shared GPU, who works on it.
func toldBy(e Event) string {
	s := told(e) + " " + strings.Join(e.Users, ",")
	if len(e.Working) > 0 {
		s += " while " + strings.Join(e.Working, ",")
	}
	return s
}

// sharing is idle with the GPU's other holders who use it.
func sharing(g IdleGPU, working ...string) IdleGPU {
	g.Working = working
	return g
}

// On a shared GPU each holder's idleness is an episode of its own.
func TestStepPerHolder(t *testing.T) {
	p := Params{HostDownAfter: 15 * time.Minute, RemindAfter: 24 * time.Hour}
	aliceWhileBob := sharing(idle("gpu03", "2", -360, "alice"), "bob")
	tests := []struct {
		name string
		runs []run
		want []string
	}{
		{"alice idle-held while bob works: fired once, to alice, naming bob",
			[]run{
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{aliceWhileBob}},
				{min: 5, hosts: 1, up: 1, idle: []IdleGPU{aliceWhileBob}},
			},
			[]string{"0 idle_held firing gpu03/2 alice while bob"}},
		{"both idle: an episode each; bob starting to work resolves his only",
			[]run{
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu03", "2", -120, "alice"), idle("gpu03", "2", -120, "bob")}},
				{min: 5, hosts: 1, up: 1, idle: []IdleGPU{sharing(idle("gpu03", "2", -120, "alice"), "bob")}},
				{min: 10, hosts: 1, up: 1, idle: []IdleGPU{sharing(idle("gpu03", "2", -120, "alice"), "bob")}},
			},
			[]string{"0 idle_held firing gpu03/2 alice", "0 idle_held firing gpu03/2 bob", "5 idle_held resolved gpu03/2 bob"}},
		{"bob joining a GPU alice holds idle leaves her episode alone",
			[]run{
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{idle("gpu03", "2", -120, "alice")}},
				{min: 5, hosts: 1, up: 1, idle: []IdleGPU{aliceWhileBob}},
			},
			[]string{"0 idle_held firing gpu03/2 alice"}},
		{"alice leaving resolves hers while bob goes on working",
			[]run{
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{aliceWhileBob}},
				{min: 5, hosts: 1, up: 1},
			},
			[]string{"0 idle_held firing gpu03/2 alice while bob", "5 idle_held resolved gpu03/2 alice while bob"}},
		{"alice still idle in a spell begun again after the host was down: hers goes on",
			[]run{
				{min: 0, hosts: 2, up: 2, idle: []IdleGPU{aliceWhileBob}},
				{min: 5, hosts: 2, up: 1, down: []DownHost{down("gpu03", 5)}},
				{min: 10, hosts: 2, up: 2, held: []IdleGPU{sharing(idle("gpu03", "2", 10, "alice"), "bob")}},
				{min: 130, hosts: 2, up: 2, idle: []IdleGPU{sharing(idle("gpu03", "2", 10, "alice"), "bob")}},
			},
			[]string{"0 idle_held firing gpu03/2 alice while bob"}},
		{"reminded per holder",
			[]run{
				{min: 0, hosts: 1, up: 1, idle: []IdleGPU{aliceWhileBob}},
				{min: 24 * 60, hosts: 1, up: 1, idle: []IdleGPU{aliceWhileBob}},
			},
			[]string{"0 idle_held firing gpu03/2 alice while bob", "1440 idle_held firing again gpu03/2 alice while bob"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := stepRuns(tt.runs, p, toldBy)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// Episodes stored before they were per holder (one per GPU, keyed by host
// and GPU, for its whole holder set) go on as each holder's: nobody is
// told again, and each resolves on its own.
func TestStepOldEpisodes(t *testing.T) {
	p := Params{HostDownAfter: 15 * time.Minute, RemindAfter: 24 * time.Hour}
	oldKey := func(e Episode) string { return string(e.Kind) + "\x00" + e.Host + "\x00" + e.GPU }
	both := Episode{Kind: idleHeld, Host: "gpu03", GPU: "2", Users: []string{"alice", "bob"}, Since: at(-200), MemMiB: 4000, Notified: at(-80)}
	alone := Episode{Kind: idleHeld, Host: "gpu04", GPU: "0", Users: []string{"carol"}, Since: at(-200), MemMiB: 1000, Notified: at(-80)}
	open := map[string]Episode{oldKey(both): both, oldKey(alone): alone}
	var got []string
	for _, r := range []run{
		{min: 0, hosts: 2, up: 2, idle: []IdleGPU{idle("gpu03", "2", -200, "alice"), idle("gpu03", "2", -200, "bob"), idle("gpu04", "0", -200, "carol")}},
		{min: 5, hosts: 2, up: 2, idle: []IdleGPU{sharing(idle("gpu03", "2", -200, "alice"), "bob"), idle("gpu04", "0", -200, "carol")}},
	} {
		var events []Event
		open, events = step(open, r.obs(), p)
		for _, e := range events {
			got = append(got, toldBy(e))
		}
	}
	if diff := cmp.Diff([]string{"5 idle_held resolved gpu03/2 bob"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	for k, e := range open {
		if k != e.key() || len(e.Users) != 1 || !e.Notified.Equal(at(-80)) {
			t.Errorf("episode %q = %+v: want it under its holder's key, told at minute -80 as before", k, e)
		}
	}
	if len(open) != 2 {
		t.Errorf("%d episodes open, want alice's and carol's", len(open))
	}
}
