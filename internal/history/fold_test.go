package history

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var t0 = time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)

// at is t0 plus m minutes.
func at(m float64) time.Time { return t0.Add(time.Duration(m * float64(time.Minute))) }

func snapAt(m float64, hosts ...Host) *Snapshot { return &Snapshot{Time: at(m), Hosts: hosts} }

func up(name string, gpus ...GPU) Host { return Host{Name: name, Up: true, GPUs: gpus} }
func down(name string) Host            { return Host{Name: name} }

// held is GPU id at util % held by users (each with 1000 MiB); no users is
// a free GPU.
func held(id string, util float64, users ...string) GPU {
	g := GPU{ID: id, Name: "NVIDIA H100 80GB HBM3", State: Free, UtilPct: util, HasUtil: true, MemTotalMiB: 81559}
	for _, u := range users {
		g.Holders = append(g.Holders, Holder{User: u, MemMiB: 1000})
		g.MemUsedMiB += 1000
		g.State = Busy
	}
	return g
}

func TestStepSpans(t *testing.T) {
	p := DefaultParams
	tests := []struct {
		name  string
		snaps []*Snapshot
		// after the last snapshot
		users map[string]float64
		state map[string]float64
		job   float64
	}{
		{"the first snapshot counts nothing yet",
			[]*Snapshot{snapAt(0, up("a", held("0", 90, "alice")))},
			map[string]float64{}, map[string]float64{}, 0},
		{"a reading stands until the next",
			[]*Snapshot{snapAt(0, up("a", held("0", 90, "alice"), held("1", 0))), snapAt(5, up("a"))},
			map[string]float64{"alice": 300}, map[string]float64{Busy: 300, Free: 300}, 0},
		{"a GPU shared by two is half to each",
			[]*Snapshot{snapAt(0, up("a", held("0", 90, "alice", "bob"))), snapAt(5, up("a"))},
			map[string]float64{"alice": 150, "bob": 150}, map[string]float64{Busy: 300}, 0},
		{"a gap over max_gap counts max_gap only",
			[]*Snapshot{snapAt(0, up("a", held("0", 90, "alice"))), snapAt(60, up("a"))},
			map[string]float64{"alice": 900}, map[string]float64{Busy: 900}, 0},
		{"idlemon's job counts to its own account",
			[]*Snapshot{snapAt(0, up("a", GPU{ID: "0", State: Free, IdleJob: true})), snapAt(5, up("a"))},
			map[string]float64{}, map[string]float64{Free: 300}, 300},
		{"a down host's last known GPUs count as down",
			[]*Snapshot{snapAt(0, up("a", held("0", 0), held("1", 0))), snapAt(5, down("a")), snapAt(10, down("a"))},
			map[string]float64{}, map[string]float64{Free: 600, Down: 600}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFoldState()
			users, state := map[string]float64{}, map[string]float64{}
			var job float64
			for _, s := range tt.snaps {
				eff := step(st, s, p)
				for u, v := range eff.UserSeconds {
					users[u] += v
				}
				for k, v := range eff.StateSeconds {
					state[k] += v
				}
				job += eff.IdleJobSeconds
			}
			// the last span overlaps the second snapshot only when listed
			if diff := cmp.Diff(tt.users, users, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("user seconds (-want +got):\n%s", diff)
			}
			for k, v := range state {
				if v == 0 {
					delete(state, k)
				}
			}
			if diff := cmp.Diff(tt.state, state, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("state seconds (-want +got):\n%s", diff)
			}
			if job != tt.job {
				t.Errorf("idle job seconds = %v, want %v", job, tt.job)
			}
		})
	}
}

// every5 is snapshots from minute `from` to `to` (inclusive), 5 minutes
// apart, each made by f.
func every5(from, to float64, f func(m float64) *Snapshot) []*Snapshot {
	var out []*Snapshot
	for m := from; m <= to; m += 5 {
		out = append(out, f(m))
	}
	return out
}

func TestSpells(t *testing.T) {
	p := DefaultParams // idle at or under 5 %, for 2 h
	idleAlice := func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 3, "alice"))) }
	tests := []struct {
		name    string
		snaps   []*Snapshot
		ended   []Spell // every spell that ended, in order
		current []Spell // idle-held after the last snapshot
	}{
		{"under idle_after is not idle-held",
			every5(0, 115, idleAlice), nil, nil},
		{"idle_after reached: idle-held since the first idle reading",
			every5(0, 120, idleAlice), nil,
			[]Spell{{Host: "a", GPU: "0", Users: []string{"alice"}, Start: at(0).Unix(), Last: at(120).Unix(), MemMiB: 1000, Share: 1, Held: 7200}}},
		{"one busy reading ends it; its last reading stands until the busy one",
			append(every5(0, 150, idleAlice), snapAt(155, up("a", held("0", 50, "alice")))),
			[]Spell{{Host: "a", GPU: "0", Users: []string{"alice"}, Start: at(0).Unix(), Last: at(150).Unix(), End: at(155).Unix(), MemMiB: 1000, Share: 1, Held: 9300}},
			nil},
		{"a utilization of exactly idle_util_pct is idle",
			every5(0, 120, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 5, "alice"))) }), nil,
			[]Spell{{Host: "a", GPU: "0", Users: []string{"alice"}, Start: at(0).Unix(), Last: at(120).Unix(), MemMiB: 1000, Share: 1, Held: 7200}}},
		{"a gap over max_gap ends it: nobody knows what happened",
			append(every5(0, 100, idleAlice), every5(120, 200, idleAlice)...),
			nil, nil},
		{"another holder idle too starts a spell of their own; the first goes on",
			append(every5(0, 60, idleAlice), every5(65, 200, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 0, "alice", "bob"))) })...),
			nil,
			[]Spell{{Host: "a", GPU: "0", Users: []string{"alice"}, Start: at(0).Unix(), Last: at(200).Unix(), MemMiB: 1000, Share: 0.5, Held: 65*60 + 135*60/2},
				{Host: "a", GPU: "0", Users: []string{"bob"}, Start: at(65).Unix(), Last: at(200).Unix(), MemMiB: 1000, Share: 0.5, Held: 135 * 60 / 2}}},
		{"the host going down ends it",
			append(every5(0, 150, idleAlice), snapAt(155, down("a"))),
			[]Spell{{Host: "a", GPU: "0", Users: []string{"alice"}, Start: at(0).Unix(), Last: at(150).Unix(), End: at(155).Unix(), MemMiB: 1000, Share: 1, Held: 9300}},
			nil},
		{"utilization not known (MIG) is never idle",
			every5(0, 200, func(m float64) *Snapshot {
				g := held("0", 0, "alice")
				g.HasUtil = false
				return snapAt(m, up("a", g))
			}), nil, nil},
		{"a free GPU at 0 % is not idle-held",
			every5(0, 200, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 0))) }), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFoldState()
			var ended []Spell
			for _, s := range tt.snaps {
				ended = append(ended, step(st, s, p).Ended...)
			}
			if diff := cmp.Diff(tt.ended, ended, cmpopts.EquateEmpty(), spellBasics); diff != "" {
				t.Errorf("ended spells (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.current, idleHeldSpells(st, p), cmpopts.EquateEmpty(), spellBasics); diff != "" {
				t.Errorf("idle-held now (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHostsDownSince(t *testing.T) {
	st := newFoldState()
	step(st, snapAt(0, up("a", held("0", 0), held("1", 0)), up("b", held("0", 0))), DefaultParams)
	step(st, snapAt(5, down("a"), up("b", held("0", 0))), DefaultParams)
	eff := step(st, snapAt(10, down("a"), up("b", held("0", 0))), DefaultParams)
	a := st.Hosts["a"]
	if a.DownSince != at(5).Unix() || len(a.GPUs) != 2 || a.GPUs[1].ID != "1" {
		t.Errorf("host a = %+v, want down since minute 5 with its 2 GPUs as last seen", a)
	}
	if eff.Counts.States[Down] != 2 || eff.Counts.HostsDown != 1 || eff.Counts.States[Free] != 1 {
		t.Errorf("counts = %+v, want 2 down GPUs, 1 host down, 1 free", eff.Counts)
	}
	step(st, snapAt(15, up("a", held("0", 0)), up("b", held("0", 0))), DefaultParams)
	if a := st.Hosts["a"]; a.DownSince != 0 || len(a.GPUs) != 1 {
		t.Errorf("host a back = %+v, want up with the 1 GPU it has now", a)
	}
	step(st, snapAt(20, up("b", held("0", 0))), DefaultParams)
	if _, ok := st.Hosts["a"]; ok {
		t.Error("a host no longer in the data is still remembered")
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := snapAt(0, up("gpu01", sm(held("0", 42.5, "alice", "bob"), map[string]float64{"bob": 40.5}), GPU{ID: "00000000:3B:00.0", State: Failed}),
		down("gpu02"), up("gpu03", GPU{ID: "0", State: Free, IdleJob: true, MemUsedMiB: 20480.5}))
	blob, err := encodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSnapshot(blob)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for n := range len(blob) {
		if _, err := decodeSnapshot(blob[:n]); err == nil {
			t.Fatalf("a blob cut at %d of %d bytes decoded without error", n, len(blob))
		}
	}
}

// GPUs idle-held equally long are listed 2 before 10, as a person counts.
func TestIdleHeldOrder(t *testing.T) {
	st := newFoldState()
	for _, s := range every5(0, 120, func(m float64) *Snapshot {
		return snapAt(m, up("a", held("10", 0, "alice"), held("2", 0, "alice")))
	}) {
		step(st, s, DefaultParams)
	}
	got := idleHeldSpells(st, DefaultParams)
	if len(got) != 2 || got[0].GPU != "2" || got[1].GPU != "10" {
		t.Errorf("order: %+v, want GPU 2 then 10", got)
	}
}

// sm sets each holder's SM % (users not named keep theirs not known).
func sm(g GPU, pct map[string]float64) GPU {
	for i, h := range g.Holders {
		if v, ok := pct[h.User]; ok {
			g.Holders[i].SMPct, g.Holders[i].HasSM = v, true
		}
	}
	return g
}

func TestIdleHolders(t *testing.T) {
	tests := []struct {
		name string
		gpu  GPU
		want []string
	}{
		{"a GPU at or under the limit: every holder", held("0", 5, "alice", "bob"), []string{"alice", "bob"}},
		{"a busy GPU whose SM split is not known: nobody", held("0", 90, "alice", "bob"), nil},
		{"a busy GPU: the holder at 0 % SM", sm(held("0", 90, "alice", "bob"), map[string]float64{"alice": 0, "bob": 88}), []string{"alice"}},
		{"a holder at exactly the limit is idle", sm(held("0", 90, "alice", "bob"), map[string]float64{"alice": 5, "bob": 85}), []string{"alice"}},
		{"a holder just over the limit is not", sm(held("0", 90, "alice", "bob"), map[string]float64{"alice": 6, "bob": 84}), nil},
		{"one holder's SM not known: only the known idle one", sm(held("0", 90, "alice", "bob", "carol"), map[string]float64{"alice": 0}), []string{"alice"}},
		{"a single holder at 0 % SM on a GPU busy with others' processes", sm(held("0", 60, "alice"), map[string]float64{"alice": 0}), []string{"alice"}},
		{"GPU utilization not known (MIG), SM not known: nobody", func() GPU {
			g := held("0", 0, "alice")
			g.HasUtil = false
			return g
		}(), nil},
		{"a free GPU: nobody", held("0", 0), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.gpu.IdleHolders(DefaultParams.IdleUtilPct), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("idle holders (-want +got):\n%s", diff)
			}
		})
	}
}

// A shared GPU: each holder's idleness is their own, and so is each spell.
func TestSpellsPerHolder(t *testing.T) {
	p := DefaultParams
	// bob trains at 88 % while alice's notebook sits at 0 %
	shared := func(alice, bob float64) func(m float64) *Snapshot {
		return func(m float64) *Snapshot {
			return snapAt(m, up("a", sm(held("0", max(alice, bob), "alice", "bob"), map[string]float64{"alice": alice, "bob": bob})))
		}
	}
	spell := func(user string, start, last, end float64) Spell {
		// half the GPU each, all along: half the spell's seconds
		sp := Spell{Host: "a", GPU: "0", Users: []string{user}, Start: at(start).Unix(), Last: at(last).Unix(), MemMiB: 1000,
			Share: 0.5, Held: (last - start) * 60 / 2}
		if end != 0 {
			sp.End, sp.Held = at(end).Unix(), (end-start)*60/2
		}
		return sp
	}
	tests := []struct {
		name    string
		snaps   []*Snapshot
		ended   []Spell
		current []Spell
	}{
		{"alice idle-held while bob works",
			every5(0, 120, shared(0, 88)), nil,
			[]Spell{spell("alice", 0, 120, 0)}},
		{"both idle: a spell each, from the same reading",
			every5(0, 120, shared(0, 0)), nil,
			[]Spell{spell("alice", 0, 120, 0), spell("bob", 0, 120, 0)}},
		{"both idle, then bob works: alice's spell goes on, bob's ends",
			append(every5(0, 150, shared(0, 0)), every5(155, 200, shared(0, 90))...),
			[]Spell{spell("bob", 0, 150, 155)},
			[]Spell{spell("alice", 0, 200, 0)}},
		{"bob working on and off does not break alice's spell",
			append(append(every5(0, 60, shared(0, 90)), every5(65, 90, shared(0, 0))...), every5(95, 200, shared(0, 70))...),
			nil,
			[]Spell{spell("alice", 0, 200, 0)}},
		{"alice starting to work ends her spell",
			append(every5(0, 150, shared(0, 88)), snapAt(155, up("a", sm(held("0", 95, "alice", "bob"), map[string]float64{"alice": 40, "bob": 55})))),
			[]Spell{spell("alice", 0, 150, 155)}, nil},
		{"alice leaving ends her spell; bob's GPU is not idle-held",
			append(every5(0, 150, shared(0, 88)), snapAt(155, up("a", sm(held("0", 88, "bob"), map[string]float64{"bob": 88})))),
			[]Spell{spell("alice", 0, 150, 155)}, nil},
		{"SM not known (MIG, pmon off) on a busy GPU is never idle",
			every5(0, 200, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 88, "alice", "bob"))) }), nil, nil},
		{"SM known in some readings only: the unknown one ends the spell",
			append(append(every5(0, 60, shared(0, 88)), snapAt(65, up("a", held("0", 88, "alice", "bob")))), every5(70, 200, shared(0, 88))...),
			nil,
			[]Spell{spell("alice", 70, 200, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFoldState()
			var ended []Spell
			var eff effects
			for _, s := range tt.snaps {
				eff = step(st, s, p)
				ended = append(ended, eff.Ended...)
			}
			if diff := cmp.Diff(tt.ended, ended, cmpopts.EquateEmpty(), spellBasics); diff != "" {
				t.Errorf("ended spells (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.current, idleHeldSpells(st, p), cmpopts.EquateEmpty(), spellBasics); diff != "" {
				t.Errorf("idle-held now (-want +got):\n%s", diff)
			}
			want := 0
			if len(tt.current) > 0 {
				want = 1 // one GPU, however many of its holders
			}
			if eff.Counts.IdleHeld != want {
				t.Errorf("idle-held GPUs counted = %d, want %d", eff.Counts.IdleHeld, want)
			}
			if n := (&Summary{IdleHeld: idleHeldSpells(st, p)}).IdleHeldGPUs(); n != want {
				t.Errorf("summary's idle-held GPUs = %d, want %d", n, want)
			}
		})
	}
}

// spellBasics compares spells by what the tables of spells say: the hours
// they count to and the holder's job are TestLedger's.
var spellBasics = cmpopts.IgnoreFields(Spell{}, "Pending", "Counted", "Account", "Job", "Model")
