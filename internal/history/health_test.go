package history

import (
	"bytes"
	"compress/flate"
	"context"
	"database/sql"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumon/gpumon/internal/health"
)

// sick is g with findings, each a condition of the default policy's
// severity, and a UUID.
func sick(g GPU, conditions ...string) GPU {
	g.UUID = "GPU-" + g.ID
	for _, c := range conditions {
		sev := health.Degraded
		for _, f := range health.DefaultPolicy().Failed {
			if f == c {
				sev = health.Failed
			}
		}
		g.Findings = append(g.Findings, health.Finding{Condition: c, Severity: sev, Detail: c + " seen"})
	}
	return g
}

// ep is an episode of condition on host a's GPU 0, from minute start to
// minute last, ended at minute end (-1: going on).
func ep(condition string, start, last, end float64) HealthEpisode {
	e := HealthEpisode{Host: "a", GPU: "0", Condition: condition, Start: at(start).Unix(), Last: at(last).Unix(),
		Severity: health.Degraded, Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-0", Detail: condition + " seen"}
	if condition == health.RemapFailure || condition == health.Lost {
		e.Severity = health.Failed
	}
	if end >= 0 {
		e.End = at(end).Unix()
	}
	return e
}

func TestHealthEpisodes(t *testing.T) {
	remap, slow := health.RemapPending, health.HWSlowdown
	tests := []struct {
		name  string
		snaps []*Snapshot
		ended []HealthEpisode // over all the snapshots
		open  []HealthEpisode // after the last
	}{
		{"a condition over many polls is one episode, going on",
			every5(0, 30, func(m float64) *Snapshot { return snapAt(m, up("a", sick(held("0", 0), remap))) }),
			nil, []HealthEpisode{ep(remap, 0, 30, -1)}},
		{"it ends at the first snapshot without it",
			[]*Snapshot{snapAt(0, up("a", sick(held("0", 0), remap))), snapAt(5, up("a", sick(held("0", 0), remap))),
				snapAt(10, up("a", held("0", 0)))},
			[]HealthEpisode{ep(remap, 0, 5, 10)}, nil},
		{"cleared and back is a second episode",
			[]*Snapshot{snapAt(0, up("a", sick(held("0", 0), slow))), snapAt(5, up("a", held("0", 0))),
				snapAt(10, up("a", sick(held("0", 0), slow)))},
			[]HealthEpisode{ep(slow, 0, 0, 5)}, []HealthEpisode{ep(slow, 10, 10, -1)}},
		{"the host down ends it at its last sighting's span",
			[]*Snapshot{snapAt(0, up("a", sick(held("0", 0), remap))), snapAt(5, down("a")),
				snapAt(10, up("a", sick(held("0", 0), remap)))},
			[]HealthEpisode{ep(remap, 0, 0, 5)}, []HealthEpisode{ep(remap, 10, 10, -1)}},
		{"the GPU missing ends it",
			[]*Snapshot{snapAt(0, up("a", sick(held("0", 0), remap))), snapAt(5, up("a"))},
			[]HealthEpisode{ep(remap, 0, 0, 5)}, nil},
		{"a gap over max_gap ends it after max_gap",
			[]*Snapshot{snapAt(0, up("a", sick(held("0", 0), remap))), snapAt(60, up("a", sick(held("0", 0), remap)))},
			[]HealthEpisode{ep(remap, 0, 0, 15)}, []HealthEpisode{ep(remap, 60, 60, -1)}},
		{"two conditions are two episodes, each its own length",
			[]*Snapshot{snapAt(0, up("a", sick(held("0", 0), remap, slow))), snapAt(5, up("a", sick(held("0", 0), remap)))},
			[]HealthEpisode{ep(slow, 0, 0, 5)}, []HealthEpisode{ep(remap, 0, 5, -1)}},
		{"a finding listed twice is one",
			[]*Snapshot{snapAt(0, up("a", sick(held("0", 0), remap, remap)))},
			nil, []HealthEpisode{ep(remap, 0, 0, -1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFoldState()
			var ended []HealthEpisode
			for _, s := range tt.snaps {
				ended = append(ended, step(st, s, DefaultParams).HealthEnded...)
			}
			if diff := cmp.Diff(tt.ended, ended, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ended (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.open, openHealth(st), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("going on (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSnapshotHealthRoundTrip(t *testing.T) {
	s := snapAt(0, up("gpu01", held("0", 1), sick(held("1", 2, "alice"), health.RemapPending, health.HWSlowdown)),
		down("gpu02"), up("gpu03", sick(GPU{ID: "00000000:3B:00.0", State: Failed}, health.Lost)))
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
}

// A blob whose health section names a GPU it does not have, or that goes
// on with something unknown, is damaged, not read into another GPU.
func TestSnapshotHealthDamaged(t *testing.T) {
	s := snapAt(0, up("gpu01", held("0", 1)))
	for _, tt := range []struct {
		name string
		tail func(w *blobWriter)
	}{
		{"a host it does not have", func(w *blobWriter) { w.b.WriteByte(healthTag); w.uint(1); w.uint(1); w.uint(0) }},
		{"a GPU it does not have", func(w *blobWriter) { w.b.WriteByte(healthTag); w.uint(1); w.uint(0); w.uint(1) }},
		{"an unknown section", func(w *blobWriter) { w.b.WriteByte('Z') }},
		{"more findings than bytes", func(w *blobWriter) {
			w.b.WriteByte(healthTag)
			w.uint(1)
			w.uint(0)
			w.uint(0)
			w.str("GPU-0")
			w.uint(1 << 19)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			blob := blobWithTail(t, s, tt.tail)
			if got, err := decodeSnapshot(blob); err == nil {
				t.Errorf("decoded without error: %+v", got.Hosts)
			}
		})
	}
}

// A blob written before the health section (it ends after the hosts)
// reads as a snapshot without findings.
func TestSnapshotBeforeHealth(t *testing.T) {
	s := snapAt(0, up("gpu01", held("0", 1, "alice")), down("gpu02"))
	got, err := decodeSnapshot(blobWithTail(t, s, func(*blobWriter) {}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// blobWithTail is s's blob (s has no findings) with tail in place of its
// health section.
func blobWithTail(t testing.TB, s *Snapshot, tail func(w *blobWriter)) []byte {
	t.Helper()
	blob, err := encodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(flate.NewReader(bytes.NewReader(blob)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(raw, []byte{healthTag, 0}) {
		t.Fatalf("the blob does not end in an empty health section: % x", raw[len(raw)-2:])
	}
	b := bytes.NewBuffer(raw[:len(raw)-2])
	tail(&blobWriter{b: b})
	var out bytes.Buffer
	zw, _ := flate.NewWriter(&out, flate.BestSpeed)
	zw.Write(b.Bytes())
	zw.Close()
	return out.Bytes()
}

// Health lists each GPU with problems in the span: how many episodes of
// each condition, how long in all, first and last seen, the latest detail;
// the same whatever order the snapshots were recorded in.
func TestHealthQuery(t *testing.T) {
	var snaps []*Snapshot
	for m := 0.0; m <= 600; m += 5 {
		g0, g1 := held("0", 90, "alice"), held("1", 0)
		if m >= 100 && m < 200 || m >= 300 && m < 330 {
			g0 = sick(g0, health.HWSlowdown)
		}
		if m >= 400 {
			g1 = sick(g1, health.RemapPending)
			g1.Findings[0].Detail = "pending at minute " + time.Duration(m*float64(time.Minute)).String()
		}
		snaps = append(snaps, snapAt(m, up("gpu01", g0, g1), up("gpu02", held("0", 50, "bob"))))
	}
	inOrder := openStore(t, "")
	record(t, inOrder, snaps...)
	from, to := at(0), at(600)
	want := []GPUHealth{
		{Host: "gpu01", GPU: "0", Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-0", Conditions: []ConditionHealth{{
			Condition: health.HWSlowdown, Severity: health.Degraded, Episodes: 2, Seconds: (100 + 30) * 60,
			First: at(100), Last: at(325), Detail: "hw_slowdown seen"}}},
		{Host: "gpu01", GPU: "1", Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-1", Conditions: []ConditionHealth{{
			Condition: health.RemapPending, Severity: health.Degraded, Episodes: 1, Seconds: 200 * 60,
			First: at(400), Last: at(600), Ongoing: true, Detail: "pending at minute 10h0m0s"}}},
	}
	got, err := inOrder.Health(context.Background(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Health (-want +got):\n%s", diff)
	}

	shuffled := openStore(t, "")
	rng := rand.New(rand.NewPCG(3, 4))
	mixed := append([]*Snapshot(nil), snaps...)
	rng.Shuffle(len(mixed), func(i, j int) {
		if i/30 == j/30 {
			mixed[i], mixed[j] = mixed[j], mixed[i]
		}
	})
	record(t, shuffled, mixed...)
	if got, err := shuffled.Health(context.Background(), from, to); err != nil || !cmp.Equal(want, got) {
		t.Errorf("recorded out of order (-want +got): %v\n%s", err, cmp.Diff(want, got))
	}

	// a span that cuts the second slowdown counts its part in the span
	got, err = inOrder.Health(context.Background(), at(310), at(350))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GPU != "0" || got[0].Conditions[0].Seconds != 20*60 || got[0].Conditions[0].Episodes != 1 {
		t.Errorf("Health of minutes 310 to 350: %+v, want GPU 0's slowdown, 20 minutes of one episode", got)
	}
}

// A database of schema 1 (before the health episodes) is upgraded when
// opened, its history intact; one of a later schema is refused.
func TestUpgradeFromSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	record(t, s, days(1)...)
	want := outcomeOf(t, s)
	s.Close()
	downgrade(t, path, undoSchema3+`DROP TABLE health_episodes; UPDATE meta SET value = '1' WHERE key = 'schema'`)

	s = openStore(t, path)
	// the accounting of schema 3 starts with the upgrade
	noLedger := cmp.Options{cmpopts.IgnoreFields(UserHours{}, "KWh", "Efficiency"), cmpopts.IgnoreFields(Summary{}, "Models30d", "UserModels30d"), cmpopts.IgnoreFields(outcome{}, "Ledger"),
		cmpopts.IgnoreFields(Spell{}, "Counted", "Pending")}
	if diff := cmp.Diff(want, outcomeOf(t, s), approx, noLedger); diff != "" {
		t.Errorf("figures after the upgrade (-want +got):\n%s", diff)
	}
	next := snapAt(24*60+5, up("gpu01", sick(held("0", 0), health.RemapFailure)))
	record(t, s, next, snapAt(24*60+10, up("gpu01", held("0", 0))))
	got, err := s.Health(context.Background(), at(0), at(24*60+10))
	if err != nil || len(got) != 1 || got[0].Conditions[0].Condition != health.RemapFailure {
		t.Errorf("Health after the upgrade: %+v, %v", got, err)
	}
	s.Close()

	downgrade(t, path, `UPDATE meta SET value = '4' WHERE key = 'schema'`)
	if s, err := Open(path, DefaultParams, 14*24*time.Hour); err == nil {
		s.Close()
		t.Fatal("a database of schema 4 was opened")
	} else if !strings.Contains(err.Error(), "database schema 4; this render reads schema 3 and older") {
		t.Errorf("error %q", err)
	}
}

// undoSchema3 takes a database back to schema 2: no accounting.
const undoSchema3 = `DROP TABLE models; DROP TABLE ledger_users; DROP TABLE ledger_days; DROP TABLE ledger_jobs; DROP TABLE ledger_hosts;
	ALTER TABLE spells DROP COLUMN account; ALTER TABLE spells DROP COLUMN job; ALTER TABLE spells DROP COLUMN model;
	ALTER TABLE spells DROP COLUMN counted; ALTER TABLE snapshots DROP COLUMN span_hour;`

// downgrade runs q on the database at path, and leaves its checkpoints'
// spells as an older render did: none of them counted hour by hour.
func downgrade(t testing.TB, path, q string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q); err != nil {
		t.Fatal(err)
	}
	times := map[int64][]byte{}
	rows, err := db.Query(`SELECT t, state FROM checkpoints`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ts int64
		var blob []byte
		if err := rows.Scan(&ts, &blob); err != nil {
			t.Fatal(err)
		}
		times[ts] = blob
	}
	rows.Close()
	for ts, blob := range times {
		st, err := decodeState(blob)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range st.Spells {
			sp.Counted, sp.Pending = false, nil
		}
		if blob, err = encodeState(st); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`UPDATE checkpoints SET state = ? WHERE t = ?`, blob, ts); err != nil {
			t.Fatal(err)
		}
	}
}
