package history

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Synthesize fills the database at path with a made-up history of `days`
// days before end: hosts × 8 GPUs, a snapshot every 5 minutes, 200 users
// holding a third of the GPUs, some of them idle for hours. It writes the
// tables directly, as a replay of the whole fold would take the benchmark
// minutes per day; the newest state is folded for real, so that render
// can go on recording after it. For benchmarks (render with a month of
// history) and the demo's plots; never for a real database.
func Synthesize(ctx context.Context, path string, p Params, keepRaw time.Duration, hosts, days int, end time.Time) error {
	s, err := Open(path, p, keepRaw)
	if err != nil {
		return err
	}
	defer s.Close()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	last := end.Unix() - end.Unix()%synthInterval
	first := last - int64(days)*24*3600
	sample := fleetAt(hosts, time.Unix(first, 0))
	st := newFoldState()
	step(st, sample, p) // the state every checkpoint stands for, at its time
	if err := synthSnapshots(tx, sample, st, p, first, last, last-int64(keepRaw/time.Second)); err != nil {
		return err
	}
	w := &writer{tx: tx, p: p}
	for h := hourOf(first) + 3600; h <= hourOf(last); h += 3600 {
		if err := w.apply(synthHour(st.Prev, st.ledger, h, hosts), h); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	// the newest snapshot, folded for real: its checkpoint is the state
	// render goes on from
	_, err = s.Record(ctx, fleetAt(hosts, time.Unix(last, 0)))
	return err
}

// synthInterval is the seconds between Synthesize's snapshots.
const synthInterval = 300

// synthSnapshots writes a snapshot like sample every synthInterval from
// first to last (whole ones from rawCut on), and st as each hour's
// checkpoint.
func synthSnapshots(tx *sql.Tx, sample *Snapshot, st *foldState, p Params, first, last, rawCut int64) error {
	blob, err := encodeSnapshot(sample)
	if err != nil {
		return err
	}
	c := step(newFoldState(), sample, p).Counts
	for t := first; t < last; t += synthInterval {
		var data any
		if t >= rawCut {
			data = blob
		}
		if _, err := tx.Exec(`INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, t,
			c.Hosts, c.HostsDown, c.States[Free], c.States[Busy], c.States[Reserved],
			c.States[Failed], c.States[Down], (t/synthInterval)%97, data, hourOf(t)); err != nil {
			return err
		}
		if (t%3600 != 3600-synthInterval && t+synthInterval != last) || t < rawCut {
			continue
		}
		st.Time = t
		for _, sp := range st.Spells { // idle since a day before
			sp.Start, sp.Last = t-26*3600, t
		}
		state, err := encodeState(st)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT OR REPLACE INTO checkpoints VALUES (?, ?)`, t, state); err != nil {
			return err
		}
	}
	return nil
}

// synthHour is what an hour of Synthesize's history adds: the readings of
// agg held all hour, and every 6 hours some idle-held spells ending.
func synthHour(agg readings, rates *ledgerRates, h int64, hosts int) effects {
	eff := effects{Hour: h, SpanHour: h, UserSeconds: map[string]float64{}, StateSeconds: map[string]float64{}, UserGPUs: agg.UserGPUs,
		Ledger: rates.times(3600)}
	for u, share := range agg.UserShare {
		eff.UserSeconds[u] = share * 3600
	}
	for state, n := range agg.States {
		eff.StateSeconds[state] = float64(n) * 3600
	}
	eff.IdleJobSeconds = float64(agg.IdleJob) * 3600
	if (h/3600)%6 == 0 {
		for i := range hosts / 20 {
			u := fmt.Sprintf("user%03d", i%200)
			eff.Ended = append(eff.Ended, Spell{Host: fmt.Sprintf("gpu%04d", i), GPU: "1", Users: []string{u},
				Start: h - 5*3600, Last: h - 300, End: h, MemMiB: 1000})
		}
	}
	return eff
}

// fleetAt is a made-up snapshot of hosts × 8 GPUs at t: two thirds held
// by 200 users in 20 Slurm accounts (one GPU in 24 idle; on half the
// hosts, each GPU a job of its own), a third free; a host in a hundred
// down.
func fleetAt(hosts int, t time.Time) *Snapshot {
	s := &Snapshot{Time: t.UTC()}
	for h := range hosts {
		name := fmt.Sprintf("gpu%04d", h)
		if h%100 == 99 {
			s.Hosts = append(s.Hosts, Host{Name: name})
			continue
		}
		host := Host{Name: name, Up: true}
		for g := range 8 {
			gpu := GPU{ID: fmt.Sprint(g), Name: "NVIDIA H100 80GB HBM3", State: Free, HasUtil: true, MemTotalMiB: 81559,
				PowerW: 70, HasPower: true}
			if k := (h + g) % 3; k < 2 {
				gpu.State = Busy
				user := (h*8 + g) % 200
				hd := Holder{User: fmt.Sprintf("user%03d", user), MemMiB: 30000}
				if h%2 == 0 {
					hd.Job, hd.Account = fmt.Sprint(100000+h*8+g), fmt.Sprintf("lab%02d", user%20)
				}
				gpu.Holders = []Holder{hd}
				gpu.MemUsedMiB = 30000
				gpu.UtilPct, gpu.PowerW = 97, 650
				if (h*8+g)%24 == 1 { // one in 24 held idle: 330 at 1,000 hosts
					gpu.UtilPct, gpu.PowerW = 0, 120
				}
			}
			host.GPUs = append(host.GPUs, gpu)
		}
		s.Hosts = append(s.Hosts, host)
	}
	return s
}
