package history

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"math"
	"slices"
	"strings"
	"time"
)

// windows are the spans the page and status.json give GPU-hours for.
var windows = []window{{"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"30d", 30 * 24 * time.Hour}}

// window is a span back from now, with its name in status.json.
type window struct {
	Name string
	Span time.Duration
}

// Summary is what render shows of the history.
type Summary struct {
	First     time.Time // the oldest snapshot kept; zero when there is none
	Newest    time.Time
	Snapshots int
	// Users: everyone with GPU-hours in the longest window, by name.
	Users []UserHours
	// IdleHeld: the holders idle-held at the newest snapshot, a spell
	// each (a shared GPU may have several), longest first.
	IdleHeld []Spell
	// Hosts that are down at the newest snapshot: since when, and their
	// GPUs as last seen.
	Down map[string]*HostState
	// Health: the health episodes going on at the newest snapshot, by
	// host, GPU and condition.
	Health []HealthEpisode
	// Totals since the history began, for Prometheus's counters.
	Totals Totals

	// For the page's plots. Fleet24h: each snapshot of the last 24 hours;
	// Fleet7d: each hour of the last 7 days (the snapshots' average).
	Fleet24h, Fleet7d []FleetPoint
	// Days are the starts (UTC) of the last 30 days, oldest first;
	// UserDays[user][i] is the user's GPU-hours on Days[i].
	Days     []time.Time
	UserDays map[string][]float64
	// Util is each GPU's utilization over the last 24 hours, one point an
	// hour (UtilHours, oldest first), by host and GPU id; NaN where it was
	// not known (host down, MIG, no snapshot that hour).
	UtilHours []time.Time
	Util      map[GPURef][]float64
	// Models30d are the last 30 days' figures per GPU model (whole hours,
	// as UsageSpan), every holder together: for the page's cost line;
	// UserModels30d the same per user and model (idlemon's job left out).
	// Of Figures they hold the GPU-seconds, effective ones, energy and
	// idle-held GPU-seconds, not the memory and unreserved ones (a month
	// of a big fleet's hours is read on every run).
	Models30d     map[string]Figures
	UserModels30d map[string]map[string]Figures
}

// GPURef names a GPU: its host and the page's id.
type GPURef struct{ Host, GPU string }

// FleetPoint is the fleet's GPUs per state at a time (or averaged over
// the hour that starts then).
type FleetPoint struct {
	Time                                         time.Time
	Free, Busy, Reserved, Failed, Down, IdleHeld float64
}

// UserHours is one user's GPU-hours and idle-held GPU-hours per window
// (keyed by window.Name).
type UserHours struct {
	User      string
	GPUHours  map[string]float64
	IdleHours map[string]float64
	// KWh is the user's energy per window; Efficiency their effective
	// GPU-hours over the GPU-hours whose utilization was known, 0 to 1,
	// NaN where none was (see Figures).
	KWh        map[string]float64
	Efficiency map[string]float64
}

// Totals are GPU-seconds since the history began. They never go down
// while snapshots come in order.
type Totals struct {
	User     map[string]float64 // GPU-seconds held
	IdleHeld map[string]float64 // idle-held GPU-seconds, the spells going on included
	State    map[string]float64
	IdleJob  float64
	// UserEnergyJ: the joules each user's share of their GPUs drew;
	// UserModelGPU the GPU-seconds each user held of each model, by user
	// then model (for prices per model).
	UserEnergyJ  map[string]float64
	UserModelGPU map[string]map[string]float64
}

// Summary reads the figures for the page at now.
func (s *Store) Summary(ctx context.Context, now time.Time) (*Summary, error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	sum := &Summary{Down: map[string]*HostState{}}
	var first, newest sql.NullInt64
	if err := tx.QueryRow(`SELECT min(t), max(t), count(*) FROM snapshots`).Scan(&first, &newest, &sum.Snapshots); err != nil {
		return nil, err
	}
	if !newest.Valid {
		sum.Totals = Totals{User: map[string]float64{}, IdleHeld: map[string]float64{}, State: map[string]float64{}, UserEnergyJ: map[string]float64{},
			UserModelGPU: map[string]map[string]float64{}}
		return sum, nil
	}
	sum.First, sum.Newest = time.Unix(first.Int64, 0).UTC(), time.Unix(newest.Int64, 0).UTC()
	st, err := (&writer{tx: tx, p: s.params}).checkpoint(newest)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errors.New("no saved state for the newest snapshot: record a snapshot to rebuild it")
	}
	sum.IdleHeld = idleHeldSpells(st, s.params)
	sum.Health = openHealth(st)
	for name, h := range st.Hosts {
		if h.DownSince != 0 {
			sum.Down[name] = h
		}
	}
	if sum.Users, err = s.userHours(tx, st, sum, now); err != nil {
		return nil, err
	}
	if sum.Totals, err = s.totals(tx, st); err != nil {
		return nil, err
	}
	if err := plotSeries(tx, sum, now); err != nil {
		return nil, err
	}
	return sum, nil
}

// IdleHeldGPUs is how many GPUs the idle-held holders hold: a GPU two of
// them hold idle is one.
func (s *Summary) IdleHeldGPUs() int { return idleHeldGPUs(s.IdleHeld) }

// plotSeries reads the page's plots: the fleet per snapshot (24 h) and
// per hour (7 d), each user's GPU-hours per day (30 d), and each GPU's
// utilization at each hour's last snapshot (24 h; the hour's average
// would mean reading every snapshot of the day, 1 s at 1,000 hosts).
func plotSeries(tx *sql.Tx, sum *Summary, now time.Time) error {
	var err error
	day, n := int64(24*3600), now.Unix()
	if sum.Fleet24h, err = fleetSeries(tx, `SELECT t, free, busy, reserved, failed, down, idle_held
		FROM snapshots WHERE t > ? AND t <= ? ORDER BY t`, n-day, n); err != nil {
		return err
	}
	if sum.Fleet7d, err = fleetSeries(tx, `SELECT t - ((t % 3600) + 3600) % 3600 AS h, avg(free), avg(busy),
		avg(reserved), avg(failed), avg(down), avg(idle_held)
		FROM snapshots WHERE t > ? AND t <= ? GROUP BY h ORDER BY h`, n-7*day, n); err != nil {
		return err
	}
	if err := userDays(tx, sum, now); err != nil {
		return err
	}
	return utilSeries(tx, sum, now)
}

func fleetSeries(tx *sql.Tx, q string, args ...any) ([]FleetPoint, error) {
	rows, err := tx.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []FleetPoint
	for rows.Next() {
		var t int64
		var p FleetPoint
		if err := rows.Scan(&t, &p.Free, &p.Busy, &p.Reserved, &p.Failed, &p.Down, &p.IdleHeld); err != nil {
			return nil, err
		}
		p.Time = time.Unix(t, 0).UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

func userDays(tx *sql.Tx, sum *Summary, now time.Time) error {
	const days = 30
	day := int64(24 * 3600)
	first := (now.Unix()/day - days + 1) * day
	for i := range days {
		sum.Days = append(sum.Days, time.Unix(first+int64(i)*day, 0).UTC())
	}
	sum.UserDays = map[string][]float64{}
	rows, err := tx.Query(`SELECT hour / ? AS d, name, sum(value) FROM usage
		WHERE kind = ? AND hour >= ? AND hour <= ? GROUP BY d, name`, day, kindUser, first, now.Unix())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var d int64
		var name string
		var v float64
		if err := rows.Scan(&d, &name, &v); err != nil {
			return err
		}
		i := int((d*day - first) / day)
		if i < 0 || i >= days {
			continue
		}
		if sum.UserDays[name] == nil {
			sum.UserDays[name] = make([]float64, days)
		}
		sum.UserDays[name][i] = v / 3600
	}
	return rows.Err()
}

func utilSeries(tx *sql.Tx, sum *Summary, now time.Time) error {
	const hours = 24
	last := hourOf(now.Unix())
	first := last - (hours-1)*3600
	for i := range hours {
		sum.UtilHours = append(sum.UtilHours, time.Unix(first+int64(i)*3600, 0).UTC())
	}
	sum.Util = map[GPURef][]float64{}
	times, err := queryTimes(tx, `SELECT max(t) FROM snapshots WHERE t >= ? AND t < ? AND data IS NOT NULL
		GROUP BY t - ((t % 3600) + 3600) % 3600`, first, last+3600)
	if err != nil {
		return err
	}
	for _, t := range times {
		var blob []byte
		if err := tx.QueryRow(`SELECT data FROM snapshots WHERE t = ?`, t).Scan(&blob); err != nil {
			return err
		}
		snap, err := decodeSnapshot(blob)
		if err != nil {
			continue // a damaged snapshot leaves its hour unknown
		}
		i := int((hourOf(t) - first) / 3600)
		for _, h := range snap.Hosts {
			for _, g := range h.GPUs {
				if !g.HasUtil {
					continue
				}
				ref := GPURef{h.Name, g.ID}
				if sum.Util[ref] == nil {
					sum.Util[ref] = make([]float64, hours)
					for k := range sum.Util[ref] {
						sum.Util[ref][k] = math.NaN()
					}
				}
				sum.Util[ref][i] = g.UtilPct
			}
		}
	}
	return nil
}

func (s *Store) userHours(tx *sql.Tx, st *foldState, sum *Summary, now time.Time) ([]UserHours, error) {
	users := userTable{}
	// whole hours, up to the start of this one: the hourly figures and the
	// idle-held spells then cover one and the same span
	for _, w := range windows {
		from, to := UsageSpan(w.Span, now)
		gpu, err := sumUsage(tx, kindUser, from, to)
		if err != nil {
			return nil, err
		}
		for u, sec := range gpu {
			users.get(u).GPUHours[w.Name] = sec / 3600
		}
		// idle-held spells of an older store; the ledger's are userLedger's
		err = s.eachUncounted(tx, st, from, to, func(u string, sec float64) { users.get(u).IdleHours[w.Name] += sec / 3600 })
		if err != nil {
			return nil, err
		}
	}
	if err := userLedger(tx, users, sum, now); err != nil {
		return nil, err
	}
	return users.sorted(), nil
}

// userTable is Summary's Users as they are gathered, by name.
type userTable map[string]*UserHours

// get is u's figures, each window's at 0 until they are set.
func (t userTable) get(u string) *UserHours {
	if t[u] == nil {
		t[u] = &UserHours{User: u, GPUHours: map[string]float64{}, IdleHours: map[string]float64{},
			KWh: map[string]float64{}, Efficiency: map[string]float64{}}
		for _, w := range windows {
			t[u].GPUHours[w.Name], t[u].IdleHours[w.Name] = 0, 0
			t[u].KWh[w.Name], t[u].Efficiency[w.Name] = 0, math.NaN()
		}
	}
	return t[u]
}

func (t userTable) sorted() []UserHours {
	out := make([]UserHours, 0, len(t))
	for _, u := range t {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b UserHours) int { return strings.Compare(a.User, b.User) })
	return out
}

// UsersFromDays is the Users that Summary would read at now from a history
// whose only GPU-hours are s.UserDays, each day's held in the first hour of
// its day (s.Days), and which has no idle-held spells. It is for tests that
// build a Summary by hand: their Users then agree with their UserDays as a
// real Summary's do (TestUsersFromDays holds it to Summary's query).
func (s *Summary) UsersFromDays(now time.Time) []UserHours {
	users := userTable{}
	for _, w := range windows {
		from, to := UsageSpan(w.Span, now)
		for name, hours := range s.UserDays {
			for i, h := range hours {
				if i < len(s.Days) && h != 0 && !s.Days[i].Before(from) && s.Days[i].Before(to) {
					users.get(name).GPUHours[w.Name] += h
				}
			}
		}
	}
	return users.sorted()
}

// sumUsage sums one kind of the hourly figures per name over the hours
// that start in [from, to).
func sumUsage(tx *sql.Tx, kind int, from, to time.Time) (map[string]float64, error) {
	return usageBy(tx, "sum", kind, from, to)
}

// maxUsage is the largest of one kind of the hourly figures per name over
// the hours that start in [from, to).
func maxUsage(tx *sql.Tx, kind int, from, to time.Time) (map[string]float64, error) {
	return usageBy(tx, "max", kind, from, to)
}

// usageBy is agg (an SQL aggregate: sum or max, never user input) of one
// kind of the hourly figures per name.
func usageBy(tx *sql.Tx, agg string, kind int, from, to time.Time) (map[string]float64, error) {
	return namedSums(tx, `SELECT name, `+agg+`(value) FROM usage WHERE kind = ? AND hour >= ? AND hour < ? GROUP BY name`,
		kind, hourOf(from.Unix()), to.Unix())
}

// idleByUser is each user's idle-held GPU-seconds counted to the hours
// that start in [from, to).
func idleByUser(tx *sql.Tx, from, to time.Time) (map[string]float64, error) {
	return namedSums(tx, `SELECT user, sum(idle_s) FROM ledger_users WHERE hour >= ? AND hour < ?
		GROUP BY user HAVING sum(idle_s) > 0`, hourOf(from.Unix()), to.Unix())
}

// namedSums is the rows of q: a name and a number.
func namedSums(tx *sql.Tx, q string, args ...any) (map[string]float64, error) {
	rows, err := tx.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var name string
		var v float64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, rows.Err()
}

// idleSeconds is each user's idle-held GPU-seconds within [from, to]: the
// part of each spell inside it, at the spell's average share of the GPU
// (GPUSeconds over Seconds), shared among the users of a spell an older
// store kept for a GPU's whole holder set. Spells going on count once
// they have lasted idle_after.
func (s *Store) idleSeconds(tx *sql.Tx, st *foldState, from, to time.Time) (map[string]float64, error) {
	out, err := idleByUser(tx, from, to)
	if err != nil {
		return nil, err
	}
	err = s.eachUncounted(tx, st, from, to, func(user string, sec float64) { out[user] += sec })
	return out, err
}

func (s *Store) totals(tx *sql.Tx, st *foldState) (Totals, error) {
	t := Totals{User: map[string]float64{}, IdleHeld: map[string]float64{}, State: map[string]float64{}, UserEnergyJ: map[string]float64{},
		UserModelGPU: map[string]map[string]float64{}}
	for _, state := range States {
		t.State[state] = 0
	}
	rows, err := tx.Query(`SELECT kind, name, value FROM totals`)
	if err != nil {
		return t, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind int
		var name string
		var v float64
		if err := rows.Scan(&kind, &name, &v); err != nil {
			return t, err
		}
		v = max(v, 0) // float sums taken back out by a replay may leave -1e-9
		switch kind {
		case kindUser:
			t.User[name] = v
		case kindState:
			t.State[name] = v
		case kindIdleJob:
			t.IdleJob = v
		case kindIdleHeld:
			t.IdleHeld[name] = v
		case kindEnergy:
			t.UserEnergyJ[name] = v
		case kindUserModel:
			user, model, _ := strings.Cut(name, "\x00")
			if t.UserModelGPU[user] == nil {
				t.UserModelGPU[user] = map[string]float64{}
			}
			t.UserModelGPU[user][model] = v
		}
	}
	if err := rows.Err(); err != nil {
		return t, err
	}
	for _, sp := range idleHeldSpells(st, s.params) {
		for _, u := range sp.Users {
			t.IdleHeld[u] += sp.GPUSeconds() / float64(len(sp.Users))
		}
	}
	return t, nil
}

// Usage is one user's figures over a span: `render -usage`.
type Usage struct {
	User          string
	GPUHours      float64
	IdleHeldHours float64
	PeakGPUs      int     // the most GPUs held at once (a shared GPU counts whole)
	Share         float64 // of the fleet's GPU-hours known in the span (down hosts' not counted), 0 to 1
}

// IdleJobUser is the name the idle-time job's GPU-hours go under in Usage:
// not a possible user name, so it never merges with a user's.
const IdleJobUser = "(idle-time job)"

// UsageSpan is the span Usage counts for the last d before now: whole
// hours, up to the start of now's hour (the hourly figures' grain).
func UsageSpan(d time.Duration, now time.Time) (from, to time.Time) {
	to = now.Truncate(time.Hour)
	return to.Add(-d).Truncate(time.Hour), to
}

// Usage is every user's figures over [from, to) (whole hours: see
// UsageSpan), most GPU-hours first; the idle-time job last, under
// IdleJobUser, when it ran.
func (s *Store) Usage(ctx context.Context, from, to time.Time) ([]Usage, error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var newest sql.NullInt64
	if err := tx.QueryRow(`SELECT max(t) FROM snapshots`).Scan(&newest); err != nil {
		return nil, err
	}
	if !newest.Valid {
		return []Usage{}, nil
	}
	st, err := (&writer{tx: tx, p: s.params}).checkpoint(newest)
	if err != nil {
		return nil, err
	}
	if st == nil {
		st = newFoldState()
	}
	f, err := s.spanFigures(tx, st, from, to)
	if err != nil {
		return nil, err
	}
	return f.usage(), nil
}

// spanSeconds are the figures Usage reads for a span, in GPU-seconds by
// name (peaks: in GPUs).
type spanSeconds struct {
	gpu, states, job, idle, peaks map[string]float64
}

func (s *Store) spanFigures(tx *sql.Tx, st *foldState, from, to time.Time) (f spanSeconds, err error) {
	if f.gpu, err = sumUsage(tx, kindUser, from, to); err != nil {
		return f, err
	}
	if f.states, err = sumUsage(tx, kindState, from, to); err != nil {
		return f, err
	}
	if f.job, err = sumUsage(tx, kindIdleJob, from, to); err != nil {
		return f, err
	}
	if f.idle, err = s.idleSeconds(tx, st, from, to); err != nil {
		return f, err
	}
	f.peaks, err = maxUsage(tx, kindUserPeak, from, to)
	return f, err
}

// usage is Usage's list from the span's figures.
func (f spanSeconds) usage() []Usage {
	var fleet float64
	for state, v := range f.states {
		if state != Down {
			fleet += v
		}
	}
	share := func(v float64) float64 {
		if fleet > 0 {
			return v / fleet
		}
		return 0
	}
	names := map[string]bool{}
	for u := range f.gpu {
		names[u] = true
	}
	for u := range f.idle {
		names[u] = true
	}
	out := make([]Usage, 0, len(names)+1)
	for u := range names {
		out = append(out, Usage{User: u, GPUHours: f.gpu[u] / 3600, IdleHeldHours: f.idle[u] / 3600,
			PeakGPUs: int(f.peaks[u]), Share: share(f.gpu[u])})
	}
	slices.SortFunc(out, func(a, b Usage) int {
		return cmp.Or(cmp.Compare(b.GPUHours, a.GPUHours), strings.Compare(a.User, b.User))
	})
	if v := f.job[""]; v > 0 {
		out = append(out, Usage{User: IdleJobUser, GPUHours: v / 3600, Share: share(v)})
	}
	return out
}
