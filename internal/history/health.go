package history

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// healthSchema is the table of health episodes that ended (schema 2); the
// ones going on are in the fold's state, as idle spells are.
const healthSchema = `
CREATE TABLE IF NOT EXISTS health_episodes (
	host TEXT NOT NULL, gpu TEXT NOT NULL, condition TEXT NOT NULL,
	start INTEGER NOT NULL, last INTEGER NOT NULL, "end" INTEGER NOT NULL,
	severity TEXT NOT NULL, model TEXT NOT NULL, uuid TEXT NOT NULL, detail TEXT NOT NULL,
	ended_at INTEGER NOT NULL,
	PRIMARY KEY (host, gpu, condition, start)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS health_episodes_end ON health_episodes ("end");
`

// maxDetail bounds a finding's detail as history keeps it: a lost GPU's
// detail is the host's own error text.
const maxDetail = 300

// HealthEpisode is one condition (health.Conditions) on one GPU: from the
// first snapshot that showed it to the first that did not. A snapshot
// where the host did not answer, or without the GPU, or further than
// MaxGap from the last sighting, ends it, as it ends an idle spell: one
// condition is one episode until it clears, never one per poll.
type HealthEpisode struct {
	Host      string `json:"h"`
	GPU       string `json:"g"`
	Condition string `json:"c"`
	Start     int64  `json:"s"`           // the first sighting
	Last      int64  `json:"l"`           // the newest sighting
	End       int64  `json:"e,omitempty"` // once over: Last plus the span its reading stood for
	// as at the newest sighting
	Severity string `json:"v"`
	Model    string `json:"m,omitempty"`
	UUID     string `json:"u,omitempty"`
	Detail   string `json:"d,omitempty"`
}

func healthKey(host, gpu, condition string) string { return host + "\x00" + gpu + "\x00" + condition }

// addHealth copies each GPU's findings (and, for a GPU with findings, its
// UUID: the name a vendor knows it by) from c into s, which FromCluster
// made from c: the same hosts and GPUs in the same order.
func addHealth(s *Snapshot, c *cluster.Cluster) {
	for i, h := range c.Hosts {
		for j, g := range h.GPUs {
			if len(g.Health.Findings) == 0 {
				continue
			}
			sg := &s.Hosts[i].GPUs[j]
			sg.UUID = g.UUID
			for _, f := range g.Health.Findings {
				f.Detail = hosttext.Clip(f.Detail, maxDetail)
				sg.Findings = append(sg.Findings, f)
			}
		}
	}
}

// stepHealth extends, starts and ends the health episodes at snapshot s
// (time t); it returns those that ended, in order.
func stepHealth(st *foldState, s *Snapshot, t, gap int64) []HealthEpisode {
	if st.Health == nil {
		st.Health = map[string]*HealthEpisode{}
	}
	var ended []HealthEpisode
	end := func(ep *HealthEpisode) {
		ep.End = ep.Last + min(t-ep.Last, gap)
		ended = append(ended, *ep)
	}
	var seen map[string]bool // made at the first finding: most snapshots have none
	for _, h := range s.Hosts {
		if !h.Up {
			continue
		}
		for i := range h.GPUs {
			g := &h.GPUs[i]
			for _, f := range g.Findings {
				key := healthKey(h.Name, g.ID, f.Condition)
				if seen == nil {
					seen = map[string]bool{}
				}
				if seen[key] {
					continue
				}
				seen[key] = true
				ep, ok := st.Health[key]
				if ok && t-ep.Last <= gap {
					ep.Last = t
				} else {
					if ok {
						end(ep)
					}
					ep = &HealthEpisode{Host: h.Name, GPU: g.ID, Condition: f.Condition, Start: t, Last: t}
					st.Health[key] = ep
				}
				ep.Severity, ep.Model, ep.UUID, ep.Detail = f.Severity, g.Name, g.UUID, f.Detail
			}
		}
	}
	for key, ep := range st.Health {
		if ep == nil || !seen[key] {
			if ep != nil {
				end(ep)
			}
			delete(st.Health, key)
		}
	}
	slices.SortFunc(ended, compareEpisodes)
	return ended
}

// compareEpisodes orders episodes by host, GPU (2 before 10), condition
// (health.Conditions' order) and start.
func compareEpisodes(a, b HealthEpisode) int {
	return cmp.Or(cmp.Compare(a.Host, b.Host), compareIDs(a.GPU, b.GPU),
		cmp.Compare(conditionRank(a.Condition), conditionRank(b.Condition)), cmp.Compare(a.Condition, b.Condition),
		cmp.Compare(a.Start, b.Start))
}

// conditionRank is c's place in health.Conditions; one not listed (a
// history written by a later version) goes last.
func conditionRank(c string) int {
	if i := slices.Index(health.Conditions, c); i >= 0 {
		return i
	}
	return len(health.Conditions)
}

// openHealth is the health episodes going on at st's newest snapshot, in
// order.
func openHealth(st *foldState) []HealthEpisode {
	out := make([]HealthEpisode, 0, len(st.Health))
	for _, ep := range st.Health {
		if ep != nil { // a damaged checkpoint's
			out = append(out, *ep)
		}
	}
	slices.SortFunc(out, compareEpisodes)
	return out
}

// recordHealth keeps the episodes that ended at the snapshot of time t.
func (w *writer) recordHealth(ended []HealthEpisode, t int64) error {
	for _, ep := range ended {
		if _, err := w.tx.Exec(`INSERT OR REPLACE INTO health_episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			ep.Host, ep.GPU, ep.Condition, ep.Start, ep.Last, ep.End, ep.Severity, ep.Model, ep.UUID, ep.Detail, t); err != nil {
			return err
		}
	}
	return nil
}

// healthTag starts the snapshot blob's health section: after the hosts,
// the GPUs with findings (most have none, so they are listed apart). A
// blob written before there was one simply ends after the hosts.
const healthTag = 'H'

func encodeHealth(w *blobWriter, s *Snapshot) {
	type at struct{ host, gpu int }
	var with []at
	for i, h := range s.Hosts {
		for j, g := range h.GPUs {
			if len(g.Findings) > 0 {
				with = append(with, at{i, j})
			}
		}
	}
	w.b.WriteByte(healthTag)
	w.uint(uint64(len(with)))
	for _, a := range with {
		g := &s.Hosts[a.host].GPUs[a.gpu]
		w.uint(uint64(a.host))
		w.uint(uint64(a.gpu))
		w.str(g.UUID)
		w.uint(uint64(len(g.Findings)))
		for _, f := range g.Findings {
			w.str(f.Condition)
			w.str(f.Severity)
			w.str(f.Detail)
		}
	}
}

// decodeHealth reads what encodeHealth wrote into s, whose hosts are read.
func decodeHealth(r *blobReader, s *Snapshot) {
	if len(r.b) == 0 {
		return // a blob of before the health section
	}
	if r.b[0] != healthTag {
		r.fail()
		return
	}
	r.b = r.b[1:]
	n := r.count()
	for range n {
		hi, gi := r.uint(), r.uint()
		if hi >= uint64(len(s.Hosts)) || gi >= uint64(len(s.Hosts[hi].GPUs)) {
			r.fail()
			return
		}
		g := &s.Hosts[hi].GPUs[gi]
		g.UUID = r.str()
		g.Findings = make([]health.Finding, r.count())
		for k := range g.Findings {
			g.Findings[k] = health.Finding{Condition: r.str(), Severity: r.str(), Detail: r.str()}
		}
	}
}

// GPUHealth is one GPU's health over a span: `render -health`.
type GPUHealth struct {
	Host, GPU   string
	Model, UUID string // at the latest sighting
	Conditions  []ConditionHealth
}

// ConditionHealth is one condition of a GPU over a span.
type ConditionHealth struct {
	Condition string
	Severity  string // at the latest sighting
	Episodes  int
	Seconds   float64   // within the span; an episode going on counts to its latest sighting
	First     time.Time // the start of the earliest episode (it may have begun before the span)
	Last      time.Time // the latest sighting
	Ongoing   bool      // going on at the newest snapshot
	Detail    string    // at the latest sighting
}

// Health is every GPU with a health episode within [from, to], by host
// and GPU, each one's conditions in health.Conditions' order.
func (s *Store) Health(ctx context.Context, from, to time.Time) ([]GPUHealth, error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	eps, err := endedHealth(tx, from.Unix(), to.Unix())
	if err != nil {
		return nil, err
	}
	var newest sql.NullInt64
	if err := tx.QueryRow(`SELECT max(t) FROM snapshots`).Scan(&newest); err != nil {
		return nil, err
	}
	if newest.Valid {
		st, err := (&writer{tx: tx, p: s.params}).checkpoint(newest)
		if err != nil {
			return nil, err
		}
		if st != nil {
			for _, ep := range openHealth(st) {
				if ep.Start <= to.Unix() && ep.Last >= from.Unix() {
					eps = append(eps, ep)
				}
			}
		}
	}
	return gpuHealth(eps, from.Unix(), to.Unix()), nil
}

// endedHealth reads the ended episodes that overlap [from, to].
func endedHealth(tx *sql.Tx, from, to int64) ([]HealthEpisode, error) {
	rows, err := tx.Query(`SELECT host, gpu, condition, start, last, "end", severity, model, uuid, detail
		FROM health_episodes WHERE "end" >= ? AND start <= ?`, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []HealthEpisode
	for rows.Next() {
		var ep HealthEpisode
		if err := rows.Scan(&ep.Host, &ep.GPU, &ep.Condition, &ep.Start, &ep.Last, &ep.End,
			&ep.Severity, &ep.Model, &ep.UUID, &ep.Detail); err != nil {
			return nil, err
		}
		out = append(out, ep)
	}
	return out, rows.Err()
}

// gpuHealth sums episodes per GPU and condition; an episode going on has
// no End.
func gpuHealth(eps []HealthEpisode, from, to int64) []GPUHealth {
	slices.SortFunc(eps, compareEpisodes)
	var out []GPUHealth
	for _, ep := range eps {
		if n := len(out); n == 0 || out[n-1].Host != ep.Host || out[n-1].GPU != ep.GPU {
			out = append(out, GPUHealth{Host: ep.Host, GPU: ep.GPU})
		}
		g := &out[len(out)-1]
		if n := len(g.Conditions); n == 0 || g.Conditions[n-1].Condition != ep.Condition {
			g.Conditions = append(g.Conditions, ConditionHealth{Condition: ep.Condition, First: time.Unix(ep.Start, 0).UTC()})
		}
		c := &g.Conditions[len(g.Conditions)-1]
		c.Episodes++
		end := ep.End
		if end == 0 {
			end = ep.Last
		}
		c.Seconds += float64(max(0, min(end, to)-max(ep.Start, from)))
		if last := time.Unix(ep.Last, 0).UTC(); !last.Before(c.Last) {
			c.Last, c.Severity, c.Detail, c.Ongoing = last, ep.Severity, ep.Detail, ep.End == 0
			if !last.Before(latest(g)) {
				g.Model, g.UUID = ep.Model, ep.UUID
			}
		}
	}
	return out
}

// latest is the latest sighting of any of g's conditions.
func latest(g *GPUHealth) time.Time {
	var t time.Time
	for _, c := range g.Conditions {
		if c.Last.After(t) {
			t = c.Last
		}
	}
	return t
}
