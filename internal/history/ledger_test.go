package history

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
)

// watts gives g a power reading.
func watts(g GPU, w float64) GPU {
	g.PowerW, g.HasPower = w, true
	return g
}

// inJob puts g's holder user in a Slurm job and account.
func inJob(g GPU, user, job, account string) GPU {
	for i := range g.Holders {
		if g.Holders[i].User == user {
			g.Holders[i].Job, g.Holders[i].Account = job, account
		}
	}
	return g
}

func ledgerOver(t testing.TB, s *Store, from, to time.Time) *Ledger {
	t.Helper()
	l, err := s.Ledger(context.Background(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mem is the memory share of a holder of 1000 MiB of an H100 (held's),
// per second of a share of one.
const mem = 1000.0 / 81559

// The accounting of a hand-computed hour: a GPU shared by alice (in job 11
// of account vision, at 60 % SM) and bob (20 %) drawing 400 W, a free A100
// at 50 W, carol on a GPU reserved for dave on host b, which is down for
// one snapshot; then a gap of 45 minutes, of which 15 count, to the hour
// of the reading before it.
func TestLedgerExact(t *testing.T) {
	reading := func(m float64, bUp bool) *Snapshot {
		shared := watts(inJob(sm(held("0", 80, "alice", "bob"), map[string]float64{"alice": 60, "bob": 20}), "alice", "11", "vision"), 400)
		a100 := watts(held("1", 0), 50)
		a100.Name = "NVIDIA A100-SXM4-80GB"
		b := down("b")
		if bUp {
			carol := watts(held("0", 50, "carol"), 300)
			carol.ReservedFor = "dave"
			b = up("b", carol)
		}
		return snapAt(m, up("a", shared, a100), b)
	}
	s := openStore(t, "")
	record(t, s, reading(0, true), reading(5, true), reading(10, false), reading(15, true),
		snapAt(60, up("a", held("0", 0), held("1", 0)), up("b", held("0", 0))))

	const h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
	// a's readings stand 300 + 300 + 300 + 900 s; b's 300 + 300 + 900
	want := &Ledger{From: at(0), To: at(60),
		Users: []LedgerRow{
			{User: "alice", Account: "vision", Model: h100, Figures: Figures{GPUSeconds: 900, EffSeconds: 900, EffKnownSeconds: 900,
				MemSeconds: mem * 900, MemKnownSeconds: 900, EnergyJ: 300 * 1800, EnergyKnownSeconds: 900}}, // 60 of 80 SM %: 300 W
			{User: "bob", Model: h100, Figures: Figures{GPUSeconds: 900, EffSeconds: 0.2 * 1800, EffKnownSeconds: 900,
				MemSeconds: mem * 900, MemKnownSeconds: 900, EnergyJ: 100 * 1800, EnergyKnownSeconds: 900}},
			{User: "carol", Model: h100, Figures: Figures{GPUSeconds: 1500, EffSeconds: 750, EffKnownSeconds: 1500,
				MemSeconds: mem * 1500, MemKnownSeconds: 1500, EnergyJ: 300 * 1500, EnergyKnownSeconds: 1500, UnreservedSeconds: 1500}},
		},
		Jobs: []LedgerRow{{User: "alice", Account: "vision", Job: "11", Model: h100, Figures: Figures{GPUSeconds: 900, EffSeconds: 900,
			EffKnownSeconds: 900, MemSeconds: mem * 900, MemKnownSeconds: 900, EnergyJ: 300 * 1800, EnergyKnownSeconds: 900}}},
		Hosts: []HostRow{
			{Host: "a", Model: a100, GPUSeconds: 1800, EffKnownSeconds: 1800, EnergyJ: 50 * 1800, EnergyKnownSeconds: 1800, UnheldEnergyJ: 50 * 1800},
			{Host: "a", Model: h100, GPUSeconds: 1800, HeldSeconds: 1800, EffSeconds: 0.8 * 1800, EffKnownSeconds: 1800,
				EnergyJ: 400 * 1800, EnergyKnownSeconds: 1800},
			{Host: "b", Model: h100, GPUSeconds: 1500, HeldSeconds: 1500, EffSeconds: 750, EffKnownSeconds: 1500,
				EnergyJ: 300 * 1500, EnergyKnownSeconds: 1500},
		},
	}
	if diff := cmp.Diff(want, ledgerOver(t, s, at(0), at(60)), approx); diff != "" {
		t.Errorf("ledger of 08:00 to 09:00 (-want +got):\n%s", diff)
	}
	// the hour after holds the readings of 09:00 on, which nobody holds
	next := ledgerOver(t, s, at(60), at(120))
	if len(next.Users)+len(next.Jobs)+len(next.Hosts) != 0 {
		t.Errorf("the gap's span reached into 09:00: %+v", next)
	}
}

// A span after a gap counts to the hour of the reading before it, never
// to the hour of the snapshot that ended it: a snapshot dated hours back
// adds nothing to the hours of now.
func TestSpanNotAcrossGap(t *testing.T) {
	s := openStore(t, "")
	record(t, s, snapAt(170, up("a", watts(held("0", 90, "alice"), 500))), // 10:50
		snapAt(380, up("a", held("0", 90, "bob")))) // 14:20
	u, err := s.Usage(context.Background(), at(120), at(240)) // 10:00 to 12:00
	if err != nil {
		t.Fatal(err)
	}
	if len(u) != 1 || u[0].User != "alice" || u[0].GPUHours != 0.25 {
		t.Errorf("usage of 10:00 to 12:00 = %+v, want alice's 15 minutes", u)
	}
	if u, _ := s.Usage(context.Background(), at(360), at(420)); len(u) != 0 {
		t.Errorf("usage of 14:00 to 15:00 = %+v, want none: alice's span is 10:50's", u)
	}
	if l := ledgerOver(t, s, at(360), at(420)); len(l.Users) != 0 {
		t.Errorf("ledger of 14:00 to 15:00 = %+v, want none", l.Users)
	}
}

// Idle-held GPU-seconds go to the hours their readings stood in, as
// GPU-hours do, once the spell has lasted idle_after: dave idle from 08:00
// to 10:30, busy from 10:35.
func TestLedgerIdleHeld(t *testing.T) {
	s := openStore(t, "")
	record(t, s, every5(0, 150, func(m float64) *Snapshot {
		return snapAt(m, up("c", inJob(held("0", 0, "dave"), "dave", "7", "nlp")))
	})...)
	record(t, s, every5(155, 180, func(m float64) *Snapshot {
		return snapAt(m, up("c", inJob(held("0", 90, "dave"), "dave", "7", "nlp")))
	})...)
	for _, tt := range []struct {
		name          string
		from, to      float64
		gpu, idleHeld float64
	}{
		{"08:00 to 11:00", 0, 180, 3300 + 3600 + 3600, 3300 + 3600 + 2400},
		{"09:00 to 10:00", 60, 120, 3600, 3600},
		{"10:00 to 11:00", 120, 180, 3600, 2400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := ledgerOver(t, s, at(tt.from), at(tt.to))
			if len(l.Users) != 1 || len(l.Jobs) != 1 {
				t.Fatalf("users %+v, jobs %+v; want dave's, in job 7", l.Users, l.Jobs)
			}
			for _, r := range []LedgerRow{l.Users[0], l.Jobs[0]} {
				if r.GPUSeconds != tt.gpu || r.IdleHeldSeconds != tt.idleHeld || r.Account != "nlp" {
					t.Errorf("%+v: want %v GPU-seconds, %v idle-held, account nlp", r, tt.gpu, tt.idleHeld)
				}
			}
			u, err := s.Usage(context.Background(), at(tt.from), at(tt.to))
			if err != nil || len(u) != 1 || u[0].IdleHeldHours*3600 != tt.idleHeld {
				t.Errorf("Usage = %+v, %v; want %v idle-held seconds", u, err, tt.idleHeld)
			}
		})
	}
}

// Over any timeline, whatever its shares, gaps, hosts going down and
// idle holders, each user's idle-held GPU-seconds of an hour never exceed
// their GPU-seconds of that hour, and effective GPU-seconds never exceed
// GPU-seconds.
func TestIdleNeverAboveGPUHours(t *testing.T) {
	p := Params{MaxGap: 15 * time.Minute, IdleUtilPct: 5, IdleAfter: 20 * time.Minute}
	users := []string{"alice", "bob", "carol"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 22))
		st := newFoldState()
		type hu struct {
			hour int64
			user string
		}
		gpu, idle := map[hu]float64{}, map[hu]float64{}
		m := 0.0
		for range 150 {
			m += []float64{1, 5, 5, 5, 10, 14, 15, 16, 40, 90}[rng.IntN(10)]
			var hosts []Host
			for h := range 2 {
				name := []string{"a", "b"}[h]
				if rng.IntN(10) == 0 {
					hosts = append(hosts, down(name))
					continue
				}
				var gpus []GPU
				for g := range 2 {
					var holders []string
					for _, u := range users {
						if rng.IntN(3) == 0 {
							holders = append(holders, u)
						}
					}
					util := []float64{0, 0, 3, 50, 100}[rng.IntN(5)]
					gp := held([]string{"0", "1"}[g], util, holders...)
					if rng.IntN(2) == 0 {
						pct := map[string]float64{}
						for _, u := range holders {
							pct[u] = []float64{0, 2, 30, 90}[rng.IntN(4)]
						}
						gp = sm(gp, pct)
					}
					gp.HasUtil = rng.IntN(8) != 0
					gpus = append(gpus, gp)
				}
				hosts = append(hosts, up(name, gpus...))
			}
			eff := step(st, snapAt(m, hosts...), p)
			for u, sec := range eff.UserSeconds {
				gpu[hu{eff.SpanHour, u}] += sec
			}
			for k, sec := range eff.IdleHeld {
				idle[hu{k.Hour, k.User}] += sec
			}
			for k, f := range eff.Ledger.Users {
				if f.EffSeconds > f.GPUSeconds+1e-9 {
					t.Fatalf("seed %d: %q: effective %v over GPU-seconds %v", seed, k, f.EffSeconds, f.GPUSeconds)
				}
			}
		}
		for k, v := range idle {
			if v > gpu[k]+1e-6 {
				t.Fatalf("seed %d: %s in the hour of %s: %v idle-held GPU-seconds, over %v GPU-seconds",
					seed, k.user, time.Unix(k.hour, 0).UTC().Format("15:04"), v, gpu[k])
			}
		}
	}
}

// A snapshot older than the kept span before the newest is refused with
// the dates and keep_days, by Record and by an import, and changes
// nothing: a clock a year back, and corrected, leaves no trace.
func TestSnapshotBeforeKeptRefused(t *testing.T) {
	s := openStore(t, "") // keep_days 14
	now := snapAt(24*60*20, up("a", held("0", 90, "alice")))
	record(t, s, now, snapAt(24*60*20+5, up("a", held("0", 90, "alice"))))
	want := outcomeOf(t, s)
	yearBack := snapAt(24*60*20-365*24*60, up("a", held("0", 90, "mallory")))
	ok, err := s.Record(context.Background(), yearBack)
	if ok || !errors.Is(err, ErrTooOld) || !strings.Contains(err.Error(), "more than keep_days (14) before the newest snapshot") {
		t.Errorf("Record of a year back = %v, %v; want refused, naming keep_days", ok, err)
	}
	im, err := s.Import(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := im.Add(yearBack); ok || !errors.Is(err, ErrTooOld) {
		t.Errorf("import of a year back = %v, %v; want refused", ok, err)
	}
	if err := im.Finish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, outcomeOf(t, s), approx); diff != "" {
		t.Errorf("figures changed (-before +after):\n%s", diff)
	}
	// 13 days back is still placed among the others
	if ok, err := s.Record(context.Background(), snapAt(24*60*7, up("a", held("0", 90, "bob")))); !ok || err != nil {
		t.Errorf("Record of 13 days back = %v, %v; want recorded", ok, err)
	}
}

func TestSaneWatts(t *testing.T) {
	num := func(v float64) loaddata.Number { return loaddata.Number{Value: v, Valid: true} }
	for _, tt := range []struct {
		name       string
		power, cap loaddata.Number
		want       float64
		ok         bool
	}{
		{"a reading under its cap", num(350), num(700), 350, true},
		{"over the cap, within 10 times (a spike, a cap lowered)", num(900), num(700), 900, true},
		{"over 10 times the cap", num(7001), num(700), 0, false},
		{"a 2^64 counter", num(18446744073709551615), loaddata.Number{}, 0, false},
		{"negative", num(-5), num(700), 0, false},
		{"[N/A]", loaddata.Number{}, num(700), 0, false},
		{"no cap, under 10 kW", num(2500), loaddata.Number{}, 2500, true},
		{"no cap, over 10 kW", num(10001), loaddata.Number{}, 0, false},
		{"NaN", num(math.NaN()), num(700), 0, false},
		{"infinite", num(math.Inf(1)), num(700), 0, false},
		{"an infinite cap", num(500), num(math.Inf(1)), 500, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if w, ok := saneWatts(tt.power, tt.cap); w != tt.want || ok != tt.ok {
				t.Errorf("saneWatts = %v, %v; want %v, %v", w, ok, tt.want, tt.ok)
			}
		})
	}
}

// What history keeps of the page's model for the accounting: the power
// (an absurd one not known), the reservation's owner, and each holder's
// job and account: of their process with the most memory.
func TestFromClusterAccounting(t *testing.T) {
	proc := func(user, job, account string, mib float64) *cluster.Proc {
		return &cluster.Proc{User: user, SlurmJob: job, SlurmAccount: account,
			MemMiB: loaddata.Number{Value: mib, Valid: true}}
	}
	g := &cluster.GPU{Index: 0, HasIndex: true, Name: "NVIDIA H100 80GB HBM3", State: cluster.Busy,
		Power: loaddata.Number{Value: 1e19, Valid: true}, PowerLimit: loaddata.Number{Value: 700, Valid: true},
		Reservation: &reservations.Reservation{Name: "dave"},
		Procs:       []*cluster.Proc{proc("alice", "11", "vision", 100), proc("alice", "12", "nlp", 5000), proc("bob", "", "", 10)}}
	c := &cluster.Cluster{DataTime: at(0), Hosts: []*cluster.Host{{Name: "a", Status: "ok", GPUs: []*cluster.GPU{g}}}}
	got := FromCluster(c).Hosts[0].GPUs[0]
	want := GPU{ID: "0", Name: "NVIDIA H100 80GB HBM3", State: cluster.Busy, ReservedFor: "dave",
		Holders: []Holder{{User: "alice", MemMiB: 5100, HasSM: false, Job: "12", Account: "nlp"}, {User: "bob", MemMiB: 10}}}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The page's windows read whole days from ledger_days and the rest from
// the hours: the same figures as the hours alone, whatever the window's
// edges, also after snapshots came out of order.
func TestWindowLedgerDays(t *testing.T) {
	snaps := days(3)
	s := openStore(t, "")
	late := []int{300, 301, 500} // day 2's morning and noon: replays take days back
	for i, snap := range snaps {
		if !slices.Contains(late, i) {
			record(t, s, snap)
		}
	}
	for _, i := range late {
		record(t, s, snaps[i])
	}
	tx, err := s.rdb.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, w := range []struct{ from, to float64 }{
		{0, 3 * 24 * 60}, {-600, 3 * 24 * 60}, {16 * 60, 40 * 60}, {16 * 60, 64 * 60}, {60, 120}, {22 * 60, 47 * 60},
	} {
		from, to := at(w.from).Unix(), at(w.to).Unix()
		got, err := windowLedger(tx, from, to)
		if err != nil {
			t.Fatal(err)
		}
		want := map[[2]string]Figures{}
		rows, err := tx.Query(`SELECT user, `+modelName+`, `+sums(dayColumns)+` FROM ledger_users
			WHERE hour >= ? AND hour < ? GROUP BY user, model`, from, to)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k [2]string
			var f Figures
			if err := rows.Scan(&k[0], &k[1], &f.GPUSeconds, &f.EffSeconds, &f.EffKnownSeconds, &f.EnergyJ,
				&f.EnergyKnownSeconds, &f.IdleHeldSeconds); err != nil {
				t.Fatal(err)
			}
			want[k] = f
		}
		rows.Close()
		if len(want) == 0 {
			t.Fatalf("no hours from %v to %v", w.from, w.to)
		}
		if diff := cmp.Diff(want, got, approx); diff != "" {
			t.Errorf("minutes %v to %v (-hours +days and hours):\n%s", w.from, w.to, diff)
		}
	}
}
