package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func openStore(t testing.TB, path string) *Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "history.db")
	}
	s, err := Open(path, DefaultParams, 14*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func record(t testing.TB, s *Store, snaps ...*Snapshot) {
	t.Helper()
	for _, snap := range snaps {
		if _, err := s.Record(context.Background(), snap); err != nil {
			t.Fatalf("record %s: %v", snap.Time.Format(time.RFC3339), err)
		}
	}
}

// days is snapshots every 5 minutes over n days, with a bit of everything:
// alice trains on gpu01 in the day and holds a GPU idle at night, bob
// shares a GPU with her for a while, gpu02 goes down for an afternoon and
// comes back, idlemon's job fills gpu03, carol's notebook holds gpu04 idle
// while dave trains on it, then alone, and fetch misses a run now and then
// (gaps of 10 minutes) and once for an hour.
func days(n int) []*Snapshot {
	var out []*Snapshot
	for m := 0.0; m < float64(n)*24*60; m += 5 {
		if math.Mod(m, 97*5) == 0 || m >= 1500 && m < 1560 {
			continue // fetch missed a run
		}
		hour := math.Mod(m/60, 24)
		day := hour >= 9 && hour < 18
		var g0, g1 GPU
		if day {
			g0 = watts(inJob(held("0", 95, "alice"), "alice", "41", "vision"), 600)
		} else {
			g0 = watts(held("0", 1, "alice"), 90) // left holding it at night
		}
		if math.Mod(m/60, 48) < 6 {
			g1 = held("1", 40, "alice", "bob")
		} else {
			g1 = held("1", 0)
		}
		h2 := up("gpu02", held("0", 70, "bob"), held("1", 2, "carol"))
		if m >= 2000 && m < 2300 {
			h2 = down("gpu02")
		}
		var g4 GPU
		switch h := math.Mod(m/60, 24); {
		case h < 12:
			g4 = sm(held("0", 85, "carol", "dave"), map[string]float64{"carol": 0, "dave": 85})
		case h < 15:
			g4 = held("0", 1, "carol")
		default:
			g4 = held("0", 0)
		}
		out = append(out, snapAt(m, up("gpu01", g0, g1), h2,
			up("gpu03", GPU{ID: "0", State: Free, IdleJob: true, HasUtil: true, UtilPct: 99}), up("gpu04", g4)))
	}
	return out
}

type outcome struct {
	Usage   []Usage
	Summary *Summary
	Ledger  *Ledger
}

func outcomeOf(t testing.TB, s *Store) outcome {
	t.Helper()
	ctx := context.Background()
	now := at(2*24*60 + 1)
	u, err := s.Usage(ctx, now.Add(-30*24*time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := s.Summary(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	from, to := UsageSpan(30*24*time.Hour, now)
	return outcome{u, sum, ledgerOver(t, s, from, to)}
}

var approx = cmp.Options{cmpopts.EquateApprox(0, 1e-6), cmpopts.EquateNaNs()}

// The same snapshots give the same figures whatever order they come in,
// and recording one twice changes nothing.
func TestOrderDoesNotMatter(t *testing.T) {
	snaps := days(2)
	inOrder := openStore(t, "")
	record(t, inOrder, snaps...)
	want := outcomeOf(t, inOrder)

	shuffled := openStore(t, "")
	rng := rand.New(rand.NewPCG(1, 2))
	// the last snapshot first (a clock that jumps back), then the rest in
	// batches out of order, with every tenth recorded twice
	mixed := append([]*Snapshot{snaps[len(snaps)-1]}, snaps[:len(snaps)-1]...)
	rng.Shuffle(len(mixed)-1, func(i, j int) {
		if i/40 == j/40 { // within runs of 40: an import sorts its files, so long replays are rare
			mixed[i+1], mixed[j+1] = mixed[j+1], mixed[i+1]
		}
	})
	for i, s := range mixed {
		record(t, shuffled, s)
		if i%10 == 0 {
			if ok, err := shuffled.Record(context.Background(), s); err != nil || ok {
				t.Fatalf("recording %s again: recorded %v, %v; want false, nil", s.Time, ok, err)
			}
		}
	}
	got := outcomeOf(t, shuffled)
	noTotals := cmpopts.IgnoreFields(Summary{}, "Totals")
	if diff := cmp.Diff(want, got, approx, noTotals, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("out of order (-in order +shuffled):\n%s", diff)
	}
	// the counters: the true totals are the same; what Prometheus sees
	// never went down, so it may stand above them until they catch up
	if diff := cmp.Diff(trueTotals(t, inOrder), trueTotals(t, shuffled), approx); diff != "" {
		t.Errorf("true totals (-in order +shuffled):\n%s", diff)
	}
	for u, v := range want.Summary.Totals.User {
		if g := got.Summary.Totals.User[u]; g < v-1e-6 {
			t.Errorf("%s's counter %v is under the true %v", u, g, v)
		}
	}
}

// trueTotals are the totals less what replays took back.
func trueTotals(t testing.TB, s *Store) map[string]float64 {
	t.Helper()
	rows, err := s.db.Query(`SELECT kind, name, value - debt FROM totals`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var kind int
		var name string
		var v float64
		if err := rows.Scan(&kind, &name, &v); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprint(kind, "/", name)] = v
	}
	return out
}

// A counter never goes down, whatever order snapshots come in: a drop is
// a reset to Prometheus.
func TestCountersNeverGoDown(t *testing.T) {
	s := openStore(t, "")
	snaps := every5(0, 120, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 90, "alice"))) })
	late := snaps[10]
	snaps = append(snaps[:10:10], snaps[11:]...)
	record(t, s, snaps...)
	before, _ := s.Summary(context.Background(), at(121))
	record(t, s, late) // it cuts a 10-minute span in two: no change in truth
	after, _ := s.Summary(context.Background(), at(121))
	if a, b := after.Totals.User["alice"], before.Totals.User["alice"]; a < b {
		t.Errorf("alice's counter went from %v down to %v", b, a)
	}
}

// GPU-hours and idle-held spells, counted by hand.
func TestAccountingExact(t *testing.T) {
	s := openStore(t, "")
	// 08:00-11:00: alice holds gpu0 at 2 % (idle), bob holds gpu1 busy
	// with alice from 09:00; readings every 5 minutes, but 10:00-10:10 was
	// missed (a 15-minute gap: still within max_gap).
	var snaps []*Snapshot
	for m := 0.0; m <= 180; m += 5 {
		if m == 120 || m == 125 {
			continue
		}
		g1 := held("1", 80, "bob")
		if m >= 60 {
			g1 = held("1", 80, "alice", "bob")
		}
		snaps = append(snaps, snapAt(m, up("a", held("0", 2, "alice"), g1)))
	}
	// 11:05: gpu0 busy: the spell ends, having stood 08:00-11:05
	snaps = append(snaps, snapAt(185, up("a", held("0", 60, "alice"), held("1", 0))))
	record(t, s, snaps...)

	u, err := s.Usage(context.Background(), at(-60), at(300))
	if err != nil {
		t.Fatal(err)
	}
	// alice: gpu0 08:00-11:05 = 3.0833 h; gpu1 09:00-11:05 half = 1.0417 h
	// bob: gpu1 08:00-09:00 whole = 1 h, 09:00-11:05 half = 1.0417 h
	want := []Usage{
		{User: "alice", GPUHours: 185.0/60 + 125.0/60/2, IdleHeldHours: 185.0 / 60, PeakGPUs: 2},
		{User: "bob", GPUHours: 1 + 125.0/60/2, PeakGPUs: 1},
	}
	fleet := 2 * 185.0 / 60
	want[0].Share = want[0].GPUHours / fleet
	want[1].Share = want[1].GPUHours / fleet
	if diff := cmp.Diff(want, u, approx); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	sum, err := s.Summary(context.Background(), at(240)) // 12:00: the windows are whole hours before it
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.IdleHeld) != 0 {
		t.Errorf("idle-held now = %+v, want none: gpu0 is busy", sum.IdleHeld)
	}
	if got := sum.Totals.IdleHeld["alice"]; got != 185*60 {
		t.Errorf("alice's idle-held total = %v s, want %v", got, 185*60)
	}
	if got := sum.Users[0].IdleHours["24h"]; math.Abs(got-185.0/60) > 1e-9 {
		t.Errorf("alice's idle-held hours in 24h = %v, want %v", got, 185.0/60)
	}
	if sum.Snapshots != len(snaps) || !sum.First.Equal(at(0)) {
		t.Errorf("history: %d snapshots from %s, want %d from %s", sum.Snapshots, sum.First, len(snaps), at(0))
	}
}

func TestTooOldForRawSamples(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "h.db"), DefaultParams, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	record(t, s, every5(0, 300, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 90, "alice"))) })...)
	_, err = s.Record(context.Background(), snapAt(2.5, up("a", held("0", 90, "bob"))))
	if !errors.Is(err, ErrTooOld) {
		t.Fatalf("a snapshot among pruned ones: %v, want ErrTooOld", err)
	}
	// the refused snapshot left nothing behind
	u, err := s.Usage(context.Background(), at(-60), at(400))
	if err != nil || len(u) != 1 || u[0].User != "alice" || math.Abs(u[0].GPUHours-5) > 1e-9 {
		t.Errorf("usage after a refused snapshot = %+v, %v; want alice's 5 h alone", u, err)
	}
}

// Two renders at once on one database: both record, neither fails, and
// each snapshot is counted once.
func TestConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	a, b := openStore(t, path), openStore(t, path)
	snaps := every5(0, 240, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 90, "alice"))) })
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(snaps))
	for _, s := range []*Store{a, b} {
		wg.Go(func() {
			for _, snap := range snaps {
				if _, err := s.Record(context.Background(), snap); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	u, err := a.Usage(context.Background(), at(-60), at(400))
	if err != nil || len(u) != 1 || math.Abs(u[0].GPUHours-4) > 1e-9 {
		t.Errorf("usage = %+v, %v; want alice's 4 h counted once", u, err)
	}
}

func TestDamagedDatabase(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte("this is not a database, just text that is long enough to be read as a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(garbage, DefaultParams, time.Hour); err == nil {
		s.Close()
		t.Error("a file that is not a database opened")
	}
	if _, err := Open(dir, DefaultParams, time.Hour); err == nil {
		t.Error("a folder opened as a database")
	}
	made := filepath.Join(dir, "new.db")
	s := openStore(t, made)
	s.Close()
	st, err := os.Stat(made)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("a new database's mode = %v, %v; want 0600", st.Mode().Perm(), err)
	}
}

// The plots' series: the fleet per snapshot and per hour, each user's
// GPU-hours per day, each GPU's utilization at each hour's last reading.
func TestPlotSeries(t *testing.T) {
	s := openStore(t, "")
	var snaps []*Snapshot
	for m := 0.0; m <= 120; m += 5 {
		util := 2.0
		if m >= 60 {
			util = 80 // 09:00 on: alice works
		}
		snaps = append(snaps, snapAt(m, up("a", held("0", util, "alice"), held("1", 0)), down("b")))
	}
	record(t, s, snaps...)
	sum, err := s.Summary(context.Background(), at(121))
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Fleet24h) != len(snaps) || sum.Fleet24h[0].Busy != 1 || sum.Fleet24h[0].Free != 1 {
		t.Errorf("Fleet24h: %d points, first %+v; want %d, one busy, one free", len(sum.Fleet24h), sum.Fleet24h[0], len(snaps))
	}
	if n := len(sum.Fleet7d); n != 3 { // 08:00, 09:00, 10:00
		t.Errorf("Fleet7d has %d hours, want 3", n)
	}
	u := sum.Util[GPURef{"a", "0"}]
	if len(u) != 24 || u[21] != 2 || u[22] != 80 || u[23] != 80 || !math.IsNaN(u[0]) {
		t.Errorf("gpu a/0's utilization by hour = %v; want unknown, then 2 (08:55), 80, 80", u)
	}
	if days := sum.UserDays["alice"]; len(days) != 30 || days[29] != 2 || !sum.Days[29].Equal(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("alice's days = %v (last day %s); want 2 GPU-hours on 2026-11-02", days, sum.Days[29])
	}
}

// Synthesize makes a history render can go on from: the month's figures
// are there, and the next snapshot records and folds as usual.
func TestSynthesize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	end := at(0)
	if err := Synthesize(context.Background(), path, DefaultParams, 2*24*time.Hour, 20, 3, end); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path)
	record(t, s, fleetAt(20, end.Add(5*time.Minute)))
	sum, err := s.Summary(context.Background(), end.Add(6*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Snapshots != 3*288+2 || len(sum.IdleHeld) == 0 || len(sum.UserDays) == 0 || len(sum.Fleet7d) < 72 {
		t.Errorf("synthesized history: %d snapshots, %d idle-held, %d users by day, %d hours of fleet",
			sum.Snapshots, len(sum.IdleHeld), len(sum.UserDays), len(sum.Fleet7d))
	}
}

// The database deleted while a render has it open: that run records into
// the unlinked file without error, and the next run makes a new one.
func TestDeletedWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	s := openStore(t, path)
	record(t, s, snapAt(0, up("a", held("0", 90, "alice"))))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
	record(t, s, snapAt(5, up("a", held("0", 90, "alice"))))
	if _, err := s.Summary(context.Background(), at(6)); err != nil {
		t.Errorf("summary of a deleted database: %v", err)
	}
	s.Close()
	fresh := openStore(t, path)
	record(t, fresh, snapAt(10, up("a", held("0", 90, "alice"))))
	if sum, err := fresh.Summary(context.Background(), at(11)); err != nil || sum.Snapshots != 1 {
		t.Errorf("the new database: %v, %+v", err, sum)
	}
}

// An import of older snapshots into a history that goes on after them, in
// any order, replays once and counts as if all had come in order.
func TestImporterBackfill(t *testing.T) {
	snaps := days(2)
	inOrder := openStore(t, "")
	record(t, inOrder, snaps...)
	want := outcomeOf(t, inOrder)

	s := openStore(t, "")
	half := len(snaps) / 2
	record(t, s, snaps[half:]...) // the monitor ran; now the older files come
	old := append([]*Snapshot{}, snaps[:half]...)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(old), func(i, j int) { old[i], old[j] = old[j], old[i] })
	im, err := s.Import(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, snap := range append(old, snaps[half]) { // the last one is there already
		if _, err := im.Add(snap); err != nil {
			t.Fatal(err)
		}
	}
	if err := im.Finish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, outcomeOf(t, s), approx, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("backfill (-in order +imported):\n%s", diff)
	}
}

// A long import holds the write lock; another render can still read the
// history (WAL): its page keeps the figures.
func TestReadWhileImporting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	a := openStore(t, path)
	record(t, a, every5(0, 60, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 90, "alice"))) })...)
	im, err := a.Import(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer im.Abort()
	if _, err := im.Add(snapAt(65, up("a", held("0", 90, "alice")))); err != nil {
		t.Fatal(err)
	}
	b := openStore(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // well under the 10 s busy timeout
	defer cancel()
	sum, err := b.Summary(ctx, at(61))
	if err != nil || sum.Snapshots != 13 {
		t.Errorf("summary during an import: %v, %+v; want the 13 snapshots committed", err, sum)
	}
}

// One GPU held idle from 08:00 to 10:35: the last hour asked at 10:35:55
// is 09:00-10:00, one GPU-hour of which one idle-held, not 1.67 and 0.98.
func TestUsageSpanIsWholeHours(t *testing.T) {
	s := openStore(t, "")
	record(t, s, every5(0, 155, func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 0, "alice"))) })...)
	from, to := UsageSpan(time.Hour, at(155.9))
	if !from.Equal(at(60)) || !to.Equal(at(120)) {
		t.Fatalf("span %s to %s, want 09:00 to 10:00", from, to)
	}
	u, err := s.Usage(context.Background(), from, to)
	if err != nil || len(u) != 1 || math.Abs(u[0].GPUHours-1) > 1e-9 || math.Abs(u[0].IdleHeldHours-1) > 1e-9 {
		t.Errorf("usage = %+v, %v; want alice with 1 GPU-hour, 1 idle-held", u, err)
	}
}

// The database is opened only as this account's own regular file, mode
// 0600: never through a link (to someone's file, or made at a dangling
// link's target), never a file others can read or another account owns.
func TestOpenOnlyOwnFile(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, db, other string)
		want    string
	}{
		{"a link to another file", func(t *testing.T, db, other string) {
			writeFile(t, other, 0o600)
			must(t, os.Symlink(other, db))
		}, "symbolic link"},
		{"a dangling link", func(t *testing.T, db, other string) {
			must(t, os.Symlink(other, db))
		}, "symbolic link"},
		{"a link in place of its log", func(t *testing.T, db, other string) {
			must(t, os.Symlink(other, db+"-wal"))
		}, "-wal is not a regular file"},
		{"another account's file", func(t *testing.T, db, other string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a file away") // CI runs as root
			}
			writeFile(t, db, 0o600)
			must(t, os.Chown(db, 65534, 65534))
		}, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			db, other := filepath.Join(dir, "history.db"), filepath.Join(dir, "someone-elses.db")
			tt.prepare(t, db, other)
			s, err := Open(db, DefaultParams, time.Hour)
			if err == nil {
				s.Close()
				t.Fatalf("opened; want an error with %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q; want %q in it", err, tt.want)
			}
			// nothing made at a link's target, nothing written to it
			if fi, err := os.Lstat(other); err == nil && fi.Size() != 0 {
				t.Errorf("%s was written to", other)
			} else if err == nil && tt.name == "a dangling link" {
				t.Errorf("%s was made at the link's target", other)
			}
		})
	}
}

// A database of this account's that others may read (an older render's,
// made with its umask) is made 0600, and opened.
func TestOpenTightensOwnFile(t *testing.T) {
	db := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, db)
	record(t, s, snapAt(0, up("a", held("0", 90, "alice"))))
	s.Close()
	must(t, os.Chmod(db, 0o644))
	s = openStore(t, db)
	if fi, err := os.Stat(db); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after opening = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if sum, err := s.Summary(context.Background(), at(5)); err != nil || sum.Snapshots != 1 {
		t.Errorf("Summary = %+v, %v; want the snapshot recorded before", sum, err)
	}
}

func writeFile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	must(t, os.WriteFile(path, nil, mode))
	must(t, os.Chmod(path, mode))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
