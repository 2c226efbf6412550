package history

import (
	"bytes"
	"compress/flate"
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// encodeSnapshotV1 is encodeSnapshot as it was before holders had an SM %.
func encodeSnapshotV1(t testing.TB, s *Snapshot) []byte {
	t.Helper()
	var raw bytes.Buffer
	raw.WriteByte(1)
	w := &blobWriter{b: &raw}
	w.int(s.Time.Unix())
	w.uint(uint64(len(s.Hosts)))
	for _, h := range s.Hosts {
		w.str(h.Name)
		w.bool(h.Up)
		w.uint(uint64(len(h.GPUs)))
		for _, g := range h.GPUs {
			w.str(g.ID)
			w.str(g.Name)
			w.str(g.State)
			w.optFloat(g.UtilPct, g.HasUtil)
			w.float(g.MemUsedMiB)
			w.float(g.MemTotalMiB)
			w.bool(g.IdleJob)
			w.uint(uint64(len(g.Holders)))
			for _, hd := range g.Holders {
				w.str(hd.User)
				w.float(hd.MemMiB)
			}
		}
	}
	var out bytes.Buffer
	zw, _ := flate.NewWriter(&out, flate.BestSpeed)
	zw.Write(raw.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A blob written before holders had an SM % still decodes: their SM is
// not known.
func TestSnapshotV1Decodes(t *testing.T) {
	s := snapAt(0, up("gpu01", held("0", 42.5, "alice", "bob")), down("gpu02"))
	got, err := decodeSnapshot(encodeSnapshotV1(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("version 1 blob (-want +got):\n%s", diff)
	}
}

// oldState is a checkpoint as saved before spells were per holder: no
// version, one spell per GPU keyed by host and GPU, for all its holders.
func oldState(t testing.TB, st *foldState) []byte {
	t.Helper()
	st.Version = 0
	old := map[string]*Spell{}
	for _, sp := range st.Spells {
		k := gpuKey(sp.Host, sp.GPU)
		if o := old[k]; o != nil {
			o.Users = append(o.Users, sp.Users...)
			o.MemMiB += sp.MemMiB
			continue
		}
		one := *sp
		old[k] = &one
	}
	st.Spells = old
	blob, err := encodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(blob, []byte(`"v":`)) {
		t.Fatal("the old state has a version")
	}
	return blob
}

// A checkpoint saved before spells were per holder decodes into one spell
// per holder, each going on from the spell's start.
func TestOldCheckpointSpellsPerHolder(t *testing.T) {
	shared := &Spell{Host: "a", GPU: "0", Users: []string{"alice", "bob"}, Start: at(0).Unix(), Last: at(60).Unix(), MemMiB: 3000}
	st, err := decodeState(oldState(t, &foldState{Time: at(60).Unix(), Spells: map[string]*Spell{"": shared}}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*Spell{
		spellKey("a", "0", "alice"): {Host: "a", GPU: "0", Users: []string{"alice"}, Start: at(0).Unix(), Last: at(60).Unix(), MemMiB: 1500, Share: 0.5, Held: 1800},
		spellKey("a", "0", "bob"):   {Host: "a", GPU: "0", Users: []string{"bob"}, Start: at(0).Unix(), Last: at(60).Unix(), MemMiB: 1500, Share: 0.5, Held: 1800},
	}
	if diff := cmp.Diff(want, st.Spells); diff != "" {
		t.Errorf("spells (-want +got):\n%s", diff)
	}
	if st.Version != foldVersion {
		t.Errorf("version = %d, want %d", st.Version, foldVersion)
	}
	// going on: bob starts working at minute 65; alice's spell does not
	// begin again
	step(st, snapAt(65, up("a", sm(held("0", 90, "alice", "bob"), map[string]float64{"alice": 0, "bob": 90}))), DefaultParams)
	if sp := st.Spells[spellKey("a", "0", "alice")]; sp == nil || sp.Start != at(0).Unix() || sp.Last != at(65).Unix() {
		t.Errorf("alice's spell after the upgrade = %+v, want it going on from minute 0", sp)
	}
	if sp := st.Spells[spellKey("a", "0", "bob")]; sp != nil {
		t.Errorf("bob's spell goes on while he works: %+v", sp)
	}
}

// oldSchema is the database as made before spells were per holder: the
// spells table keyed by (host, gpu, start).
func makeOldStore(t testing.TB, path string) {
	t.Helper()
	s := openStore(t, path)
	for _, q := range []string{
		`DROP TABLE spells`,
		`CREATE TABLE spells (
	host TEXT NOT NULL, gpu TEXT NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
	users TEXT NOT NULL, mem_mib REAL NOT NULL, ended_at INTEGER NOT NULL,
	PRIMARY KEY (host, gpu, start)
) WITHOUT ROWID`,
		`CREATE INDEX spells_end ON spells ("end")`,
	} {
		if _, err := s.DB().Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A store made before spells were per holder: its snapshots (version 1
// blobs), checkpoints (one spell per GPU) and spells table (keyed without
// the holder) upgrade on open and on the next record; the spells going on
// go on, each holder's own, and two holders' spells that start together
// are both kept.
func TestStoreUpgrade(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	makeOldStore(t, path)
	// two hours and a half of alice and bob both idle on gpu0 of host a,
	// written as the old code wrote them
	old := newFoldState()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	bothIdle := func(m float64) *Snapshot { return snapAt(m, up("a", held("0", 0, "alice", "bob"))) }
	for _, s := range every5(0, 150, bothIdle) {
		eff := step(old, s, DefaultParams)
		c := eff.Counts
		if _, err := db.Exec(`INSERT INTO snapshots (t, hosts, hosts_down, free, busy, reserved, failed, down, idle_held, data) VALUES (?, ?, 0, 0, ?, 0, 0, 0, ?, ?)`,
			s.Time.Unix(), c.Hosts, c.States[Busy], c.IdleHeld, encodeSnapshotV1(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO checkpoints VALUES (?, ?)`, at(150).Unix(), oldState(t, old)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openStore(t, path)
	var ddl string
	if err := s.DB().QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'spells'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if ok, _ := spellsUpToDate(s.DB().QueryRow); !ok {
		t.Fatalf("spells table not upgraded on open: %s", ddl)
	}
	// both start working: both spells end, from the same start
	record(t, s, snapAt(155, up("a", sm(held("0", 90, "alice", "bob"), map[string]float64{"alice": 45, "bob": 45}))))
	rows, err := s.DB().Query(`SELECT users, start, "end" FROM spells ORDER BY users`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Users      []string
		Start, End int64
	}
	var got []row
	for rows.Next() {
		var users string
		var r row
		if err := rows.Scan(&users, &r.Start, &r.End); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(users), &r.Users); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	rows.Close()
	want := []row{{[]string{"alice"}, at(0).Unix(), at(155).Unix()}, {[]string{"bob"}, at(0).Unix(), at(155).Unix()}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spells kept (-want +got):\n%s", diff)
	}
	sum, err := s.Summary(ctx, at(160))
	if err != nil {
		t.Fatal(err)
	}
	// half the GPU each, as before the upgrade
	if a, b := sum.Totals.IdleHeld["alice"], sum.Totals.IdleHeld["bob"]; a != 155*60/2 || b != 155*60/2 {
		t.Errorf("idle-held seconds: alice %v, bob %v, want %v each", a, b, 155*60/2)
	}
	// an out-of-order snapshot replays the old blobs from the start: the
	// figures are those of a store that recorded the same snapshots anew
	late := snapAt(2.5, up("a", held("0", 0, "alice", "bob")))
	record(t, s, late)
	replayed, err := s.Summary(ctx, at(160))
	if err != nil {
		t.Fatal(err)
	}
	fresh := openStore(t, filepath.Join(t.TempDir(), "fresh.db"))
	record(t, fresh, append(every5(0, 150, bothIdle), late, snapAt(155, up("a", sm(held("0", 90, "alice", "bob"), map[string]float64{"alice": 45, "bob": 45}))))...)
	fromFresh, err := fresh.Summary(ctx, at(160))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromFresh.Totals, replayed.Totals, approx); diff != "" {
		t.Errorf("totals after a replay over the old snapshots (-fresh store +upgraded):\n%s", diff)
	}
}

// A spell an older store ended, for a GPU's whole holder set, keeps its
// row through the upgrade and counts as it did: shared among its users.
func TestStoreUpgradeKeepsOldSpells(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	makeOldStore(t, path)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO spells VALUES ('b', '1', ?, ?, '["carol","dave"]', 2000, ?)`,
		at(-300).Unix(), at(-100).Unix(), at(-95).Unix()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := openStore(t, path)
	record(t, s, snapAt(0, up("a", held("0", 90, "alice"))))
	sum, err := s.Summary(ctx, at(5))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, u := range sum.Users {
		got[u.User] = u.IdleHours["24h"] * 60
	}
	if diff := cmp.Diff(map[string]float64{"carol": 100, "dave": 100}, got, approx); diff != "" {
		t.Errorf("idle-held minutes in 24 h (-want +got):\n%s", diff)
	}
}

// Idle-held GPU-hours are a share of GPU-hours, never more: alice idle
// while bob trains holds half the GPU, idle.
func TestIdleHeldWithinGPUHours(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "")
	for _, snap := range every5(0, 180, func(m float64) *Snapshot {
		return snapAt(m, up("a", sm(held("0", 88, "alice", "bob"), map[string]float64{"alice": 0, "bob": 88})))
	}) {
		record(t, s, snap)
	}
	// her spell going on: the counter holds her share so far
	going, err := s.Summary(ctx, at(181))
	if err != nil {
		t.Fatal(err)
	}
	if idle, held := going.Totals.IdleHeld["alice"], going.Totals.User["alice"]; idle != 180*60/2 || idle > held {
		t.Errorf("alice's counters while idle: %v idle-held of %v GPU-seconds, want %v of as many", idle, held, 180*60/2)
	}
	record(t, s, snapAt(185, up("a", sm(held("0", 88, "bob"), map[string]float64{"bob": 88}))))
	now := at(190)
	usage, err := s.Usage(ctx, now.Add(-24*time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range usage {
		if u.User == "alice" && (u.IdleHeldHours > u.GPUHours+1e-9 || u.IdleHeldHours != 185.0/60/2) {
			t.Errorf("alice: %.4f idle-held of %.4f GPU-hours, want %.4f of as many", u.IdleHeldHours, u.GPUHours, 185.0/60/2)
		}
		if u.User == "bob" && u.IdleHeldHours != 0 {
			t.Errorf("bob, who trains, has %.4f idle-held hours", u.IdleHeldHours)
		}
	}
}
