package history

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ledgerSchema (schema 3) keeps the accounting per hour: per holder (user,
// Slurm account, GPU model), per Slurm job, and per host. A model is a
// number of the models table in the rows: its name, 20 bytes and more, in
// millions of rows was a sixth of a year's database. A snapshot's
// span_hour is the earliest hour its fold wrote to (a span after a gap,
// a spell that reached idle_after counting the hours before: see
// replayStart). ledger_days is ledger_users per UTC day, user and model,
// for the page's 30 days, which read 300,000 hourly rows at every run of
// a 1,000-host fleet.
const ledgerSchema = `
CREATE TABLE IF NOT EXISTS models (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS ledger_users (
	hour INTEGER NOT NULL, user TEXT NOT NULL, account TEXT NOT NULL, model INTEGER NOT NULL,
	gpu_s REAL NOT NULL, eff_s REAL NOT NULL, effk_s REAL NOT NULL, mem_s REAL NOT NULL, memk_s REAL NOT NULL,
	energy_j REAL NOT NULL, energyk_s REAL NOT NULL, unres_s REAL NOT NULL, idle_s REAL NOT NULL,
	PRIMARY KEY (hour, user, account, model)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledger_days (
	day INTEGER NOT NULL, user TEXT NOT NULL, model INTEGER NOT NULL,
	gpu_s REAL NOT NULL, eff_s REAL NOT NULL, effk_s REAL NOT NULL, energy_j REAL NOT NULL, energyk_s REAL NOT NULL,
	idle_s REAL NOT NULL,
	PRIMARY KEY (day, user, model)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledger_jobs (
	hour INTEGER NOT NULL, job TEXT NOT NULL, user TEXT NOT NULL, account TEXT NOT NULL, model INTEGER NOT NULL,
	gpu_s REAL NOT NULL, eff_s REAL NOT NULL, effk_s REAL NOT NULL, mem_s REAL NOT NULL, memk_s REAL NOT NULL,
	energy_j REAL NOT NULL, energyk_s REAL NOT NULL, unres_s REAL NOT NULL, idle_s REAL NOT NULL,
	PRIMARY KEY (hour, job, user, account, model)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledger_hosts (
	hour INTEGER NOT NULL, host TEXT NOT NULL, model INTEGER NOT NULL,
	gpu_s REAL NOT NULL, held_s REAL NOT NULL, eff_s REAL NOT NULL, effk_s REAL NOT NULL,
	energy_j REAL NOT NULL, energyk_s REAL NOT NULL, unheld_j REAL NOT NULL,
	PRIMARY KEY (hour, host, model)
) WITHOUT ROWID;
ALTER TABLE spells ADD COLUMN account TEXT;
ALTER TABLE spells ADD COLUMN job TEXT;
ALTER TABLE spells ADD COLUMN model TEXT;
ALTER TABLE spells ADD COLUMN counted INTEGER;
ALTER TABLE snapshots ADD COLUMN span_hour INTEGER;
`

// modelName is a ledger row's model's name, in a query of one of its
// tables.
const modelName = `coalesce((SELECT name FROM models WHERE id = model), '')`

// figureColumns are a holder row's figures, in Figures' order.
const figureColumns = `gpu_s, eff_s, effk_s, mem_s, memk_s, energy_j, energyk_s, unres_s, idle_s`

const addFigures = `gpu_s = gpu_s + excluded.gpu_s, eff_s = eff_s + excluded.eff_s, effk_s = effk_s + excluded.effk_s,
	mem_s = mem_s + excluded.mem_s, memk_s = memk_s + excluded.memk_s, energy_j = energy_j + excluded.energy_j,
	energyk_s = energyk_s + excluded.energyk_s, unres_s = unres_s + excluded.unres_s, idle_s = idle_s + excluded.idle_s`

func figureArgs(f Figures) []any {
	return []any{f.GPUSeconds, f.EffSeconds, f.EffKnownSeconds, f.MemSeconds, f.MemKnownSeconds, f.EnergyJ,
		f.EnergyKnownSeconds, f.UnreservedSeconds, f.IdleHeldSeconds}
}

// applyLedger adds a span's accounting to its hours (the idle-held
// GPU-seconds of spells that count, to theirs), and each user's energy to
// the counters.
func (w *writer) applyLedger(eff effects) error {
	users, jobs := map[idleKey]Figures{}, map[idleKey]Figures{}
	for key, f := range eff.Ledger.Users {
		user, account, _, model := splitKey(key)
		users[idleKey{eff.SpanHour, user, account, "", model}] = f
	}
	for key, f := range eff.Ledger.Jobs {
		user, account, job, model := splitKey(key)
		jobs[idleKey{eff.SpanHour, user, account, job, model}] = f
	}
	for k, sec := range eff.IdleHeld {
		uk := idleKey{k.Hour, k.User, k.Account, "", k.Model}
		f := users[uk]
		f.IdleHeldSeconds += sec
		users[uk] = f
		if k.Job != "" {
			f := jobs[k]
			f.IdleHeldSeconds += sec
			jobs[k] = f
		}
	}
	energy, byModel := map[string]float64{}, map[string]float64{}
	b := w.upserts(`INSERT INTO ledger_users VALUES `, 13, ` ON CONFLICT (hour, user, account, model) DO UPDATE SET `+addFigures)
	for k, f := range users {
		model, err := w.modelID(k.Model)
		if err != nil {
			return err
		}
		if err := b.add(append([]any{k.Hour, k.User, k.Account, model}, figureArgs(f)...)...); err != nil {
			return err
		}
		if k.User != IdleJobUser { // the users' counters; the job has its own (kindIdleJob)
			energy[k.User] += f.EnergyJ
			byModel[userModel(k.User, k.Model)] += f.GPUSeconds
		}
	}
	if err := b.flush(); err != nil {
		return err
	}
	if err := w.addDays(users); err != nil {
		return err
	}
	if err := w.addTotals(kindEnergy, energy); err != nil {
		return err
	}
	if err := w.addTotals(kindUserModel, byModel); err != nil {
		return err
	}
	b = w.upserts(`INSERT INTO ledger_jobs VALUES `, 14, ` ON CONFLICT (hour, job, user, account, model) DO UPDATE SET `+addFigures)
	for k, f := range jobs {
		model, err := w.modelID(k.Model)
		if err != nil {
			return err
		}
		if err := b.add(append([]any{k.Hour, k.Job, k.User, k.Account, model}, figureArgs(f)...)...); err != nil {
			return err
		}
	}
	if err := b.flush(); err != nil {
		return err
	}
	b = w.upserts(`INSERT INTO ledger_hosts VALUES `, 10, ` ON CONFLICT (hour, host, model) DO UPDATE SET
		gpu_s = gpu_s + excluded.gpu_s, held_s = held_s + excluded.held_s, eff_s = eff_s + excluded.eff_s,
		effk_s = effk_s + excluded.effk_s, energy_j = energy_j + excluded.energy_j,
		energyk_s = energyk_s + excluded.energyk_s, unheld_j = unheld_j + excluded.unheld_j`)
	for key, r := range eff.Ledger.Hosts {
		host, _, _, name := splitKey(key)
		model, err := w.modelID(name)
		if err != nil {
			return err
		}
		if err := b.add(eff.SpanHour, host, model, r.GPUSeconds, r.HeldSeconds, r.EffSeconds, r.EffKnownSeconds,
			r.EnergyJ, r.EnergyKnownSeconds, r.UnheldEnergyJ); err != nil {
			return err
		}
	}
	return b.flush()
}

// dayOf is the start of t's UTC day.
func dayOf(t int64) int64 { return t - ((t%86400)+86400)%86400 }

// dayColumns are ledger_days' figures.
const dayColumns = `gpu_s, eff_s, effk_s, energy_j, energyk_s, idle_s`

// addDays adds the holders' figures to their days.
func (w *writer) addDays(users map[idleKey]Figures) error {
	type dayKey struct {
		day         int64
		user, model string
	}
	days := map[dayKey]Figures{}
	for k, f := range users {
		d := dayKey{dayOf(k.Hour), k.User, k.Model}
		sum := days[d]
		sum.Add(f)
		days[d] = sum
	}
	b := w.upserts(`INSERT INTO ledger_days VALUES `, 9, ` ON CONFLICT (day, user, model) DO UPDATE SET
		gpu_s = gpu_s + excluded.gpu_s, eff_s = eff_s + excluded.eff_s, effk_s = effk_s + excluded.effk_s,
		energy_j = energy_j + excluded.energy_j, energyk_s = energyk_s + excluded.energyk_s, idle_s = idle_s + excluded.idle_s`)
	for d, f := range days {
		model, err := w.modelID(d.model)
		if err != nil {
			return err
		}
		if err := b.add(d.day, d.user, model, f.GPUSeconds, f.EffSeconds, f.EffKnownSeconds, f.EnergyJ,
			f.EnergyKnownSeconds, f.IdleHeldSeconds); err != nil {
			return err
		}
	}
	return b.flush()
}

// modelID is the number of a model's name in the models table, made if
// need be.
func (w *writer) modelID(name string) (int64, error) {
	if id, ok := w.models[name]; ok {
		return id, nil
	}
	if w.models == nil {
		w.models = map[string]int64{}
		rows, err := w.tx.Query(`SELECT id, name FROM models`)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			var id int64
			var n string
			if err := rows.Scan(&id, &n); err != nil {
				rows.Close()
				return 0, err
			}
			w.models[n] = id
		}
		rows.Close()
		if id, ok := w.models[name]; ok {
			return id, nil
		}
	}
	res, err := w.tx.Exec(`INSERT INTO models (name) VALUES (?)`, name)
	if err != nil {
		return 0, err
	}
	id, err := res.LastInsertId()
	w.models[name] = id
	return id, err
}

// upsertBatch writes many rows a statement: a statement a row cost three
// times as much, most of it outside SQLite, at the 7,000 rows a snapshot
// of 1,000 hosts in Slurm jobs adds.
type upsertBatch struct {
	w          *writer
	head, tail string
	cols, rows int
	args       []any
}

// batchRows is how many rows go in one statement: 200 × 14 values stay
// far under SQLite's limit of 32,766.
const batchRows = 200

// prepared is q prepared in w's transaction, once.
func (w *writer) prepared(q string) (*sql.Stmt, error) {
	if stmt := w.stmts[q]; stmt != nil {
		return stmt, nil
	}
	stmt, err := w.tx.Prepare(q)
	if err != nil {
		return nil, err
	}
	if w.stmts == nil {
		w.stmts = map[string]*sql.Stmt{}
	}
	w.stmts[q] = stmt
	return stmt, nil
}

func (w *writer) upserts(head string, cols int, tail string) *upsertBatch {
	return &upsertBatch{w: w, head: head, tail: tail, cols: cols}
}

func (b *upsertBatch) add(values ...any) error {
	b.args = append(b.args, values...)
	if b.rows++; b.rows == batchRows {
		return b.flush()
	}
	return nil
}

func (b *upsertBatch) flush() error {
	if b.rows == 0 {
		return nil
	}
	row := "(?" + strings.Repeat(", ?", b.cols-1) + ")"
	q := b.head + row + strings.Repeat(", "+row, b.rows-1) + b.tail
	var err error
	if b.rows == batchRows { // the same statement many times: parsed once
		var stmt *sql.Stmt
		if stmt, err = b.w.prepared(q); err == nil {
			_, err = stmt.Exec(b.args...)
		}
	} else {
		_, err = b.w.tx.Exec(q, b.args...)
	}
	b.rows, b.args = 0, b.args[:0]
	return err
}

// userModel names a user's GPU-seconds on a model in the totals.
func userModel(user, model string) string { return user + "\x00" + model }

// addTotals adds each of values to a total (addTotal), many a statement.
func (w *writer) addTotals(kind int, values map[string]float64) error {
	b := w.upserts(`INSERT INTO totals VALUES `, 4, ` ON CONFLICT (kind, name) DO UPDATE SET
		value = value + max(0, excluded.value - debt), debt = max(0, debt - excluded.value)`)
	for name, v := range values {
		if v < 0 {
			if err := w.addTotal(kind, name, v); err != nil {
				return err
			}
			continue
		}
		if v > 0 {
			if err := b.add(kind, name, v, 0); err != nil {
				return err
			}
		}
	}
	return b.flush()
}

// undoLedger takes out what the hours after from's added: from the
// counters, and the rows themselves.
func (w *writer) undoLedger(from int64) error {
	energy, byModel := map[string]float64{}, map[string]float64{}
	rows, err := w.tx.Query(`SELECT user, `+modelName+`, sum(energy_j), sum(gpu_s) FROM ledger_users WHERE hour > ?
		GROUP BY user, model`, hourOf(from))
	if err != nil {
		return err
	}
	for rows.Next() {
		var user, model string
		var j, sec float64
		if err := rows.Scan(&user, &model, &j, &sec); err != nil {
			rows.Close()
			return err
		}
		energy[user] -= j
		byModel[userModel(user, model)] -= sec
	}
	rows.Close()
	for kind, m := range map[int]map[string]float64{kindEnergy: energy, kindUserModel: byModel} {
		for name, v := range m {
			if v == 0 || name == IdleJobUser || strings.HasPrefix(name, IdleJobUser+"\x00") {
				continue
			}
			if err := w.addTotal(kind, name, v); err != nil {
				return err
			}
		}
	}
	// from's day keeps what its hours up to from's added: the rest of
	// it is taken out, the days after dropped
	if _, err := w.tx.Exec(`UPDATE ledger_days SET (gpu_s, eff_s, effk_s, energy_j, energyk_s, idle_s) = (
		SELECT ledger_days.gpu_s - sum(u.gpu_s), ledger_days.eff_s - sum(u.eff_s), ledger_days.effk_s - sum(u.effk_s),
			ledger_days.energy_j - sum(u.energy_j), ledger_days.energyk_s - sum(u.energyk_s), ledger_days.idle_s - sum(u.idle_s)
		FROM ledger_users u WHERE u.hour > ?1 AND u.hour < ?2 AND u.user = ledger_days.user AND u.model = ledger_days.model)
		WHERE day = ?3 AND EXISTS (SELECT 1 FROM ledger_users u WHERE u.hour > ?1 AND u.hour < ?2
			AND u.user = ledger_days.user AND u.model = ledger_days.model)`,
		hourOf(from), dayOf(from)+86400, dayOf(from)); err != nil {
		return err
	}
	if _, err := w.tx.Exec(`DELETE FROM ledger_days WHERE day > ?`, dayOf(from)); err != nil {
		return err
	}
	for _, table := range []string{"ledger_users", "ledger_jobs", "ledger_hosts"} {
		if _, err := w.tx.Exec(`DELETE FROM `+table+` WHERE hour > ?`, hourOf(from)); err != nil {
			return err
		}
	}
	return nil
}

// LedgerParts say which of a Ledger's lists to read: a month of a big
// fleet's jobs is millions of rows, which a report by team never needs.
type LedgerParts int

// The parts of a Ledger.
const (
	LedgerUsers LedgerParts = 1 << iota
	LedgerJobs
	LedgerHosts
	LedgerAll = LedgerUsers | LedgerJobs | LedgerHosts
)

// Ledger reads the whole accounting over [from, to) (whole hours: see
// UsageSpan).
func (s *Store) Ledger(ctx context.Context, from, to time.Time) (*Ledger, error) {
	return s.LedgerOf(ctx, from, to, LedgerAll)
}

// LedgerOf reads the parts of the accounting over [from, to); the lists
// of the others are empty.
func (s *Store) LedgerOf(ctx context.Context, from, to time.Time, parts LedgerParts) (*Ledger, error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	l := &Ledger{From: from, To: to, Users: []LedgerRow{}, Jobs: []LedgerRow{}, Hosts: []HostRow{}}
	lo, hi := hourOf(from.Unix()), to.Unix()
	users, jobs := map[string]*LedgerRow{}, map[string]*LedgerRow{}
	if parts&LedgerUsers != 0 {
		if err := scanLedger(tx, `SELECT user, account, '', `+modelName+`, `+sums(figureColumns)+` FROM ledger_users
			WHERE hour >= ? AND hour < ? GROUP BY user, account, model`, users, lo, hi); err != nil {
			return nil, err
		}
	}
	if parts&LedgerJobs != 0 {
		if err := scanLedger(tx, `SELECT user, account, job, `+modelName+`, `+sums(figureColumns)+` FROM ledger_jobs
			WHERE hour >= ? AND hour < ? GROUP BY job, user, account, model`, jobs, lo, hi); err != nil {
			return nil, err
		}
	}
	if parts&LedgerHosts != 0 {
		if l.Hosts, err = hostLedger(tx, lo, hi); err != nil {
			return nil, err
		}
	}
	// no idle-held spells of an older store (eachUncounted): the ledger
	// starts with schema 3, and a spell counted whole would stand beside
	// no GPU-hours
	l.Users, l.Jobs = sortedRows(users), sortedRows(jobs)
	return l, tx.Commit()
}

// sums is "sum(a), sum(b), ..." of columns.
func sums(columns string) string {
	cols := strings.Split(columns, ", ")
	for i, c := range cols {
		cols[i] = "sum(" + c + ")"
	}
	return strings.Join(cols, ", ")
}

func row(m map[string]*LedgerRow, key string) *LedgerRow {
	if m[key] == nil {
		user, account, job, model := splitKey(key)
		m[key] = &LedgerRow{User: user, Account: account, Job: job, Model: model}
	}
	return m[key]
}

func scanLedger(tx *sql.Tx, q string, into map[string]*LedgerRow, args ...any) error {
	rows, err := tx.Query(q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var user, account, job, model string
		var f Figures
		if err := rows.Scan(&user, &account, &job, &model, &f.GPUSeconds, &f.EffSeconds, &f.EffKnownSeconds,
			&f.MemSeconds, &f.MemKnownSeconds, &f.EnergyJ, &f.EnergyKnownSeconds, &f.UnreservedSeconds,
			&f.IdleHeldSeconds); err != nil {
			return err
		}
		row(into, ledgerKey(user, account, job, model)).Figures.Add(f)
	}
	return rows.Err()
}

func hostLedger(tx *sql.Tx, lo, hi int64) ([]HostRow, error) {
	rows, err := tx.Query(`SELECT host, `+modelName+` AS name, sum(gpu_s), sum(held_s), sum(eff_s), sum(effk_s), sum(energy_j),
		sum(energyk_s), sum(unheld_j) FROM ledger_hosts WHERE hour >= ? AND hour < ? GROUP BY host, model
		ORDER BY host, name`, lo, hi)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []HostRow{}
	for rows.Next() {
		var r HostRow
		if err := rows.Scan(&r.Host, &r.Model, &r.GPUSeconds, &r.HeldSeconds, &r.EffSeconds, &r.EffKnownSeconds,
			&r.EnergyJ, &r.EnergyKnownSeconds, &r.UnheldEnergyJ); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func sortedRows(m map[string]*LedgerRow) []LedgerRow {
	out := make([]LedgerRow, 0, len(m))
	for _, r := range m {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b LedgerRow) int {
		return strings.Compare(ledgerKey(a.User, a.Account, a.Job, a.Model), ledgerKey(b.User, b.Account, b.Job, b.Model))
	})
	return out
}

// newestState is the fold's state at the newest snapshot; nil when there
// is none.
func (s *Store) newestState(tx *sql.Tx) (*foldState, error) {
	var newest sql.NullInt64
	if err := tx.QueryRow(`SELECT max(t) FROM snapshots`).Scan(&newest); err != nil || !newest.Valid {
		return nil, err
	}
	return (&writer{tx: tx, p: s.params}).checkpoint(newest)
}

// eachUncounted calls f with each user's part in [from, to) of the
// idle-held spells whose hours are not in the ledger: spells of an older
// store, counted as a whole (see heldIn).
func (s *Store) eachUncounted(tx *sql.Tx, st *foldState, from, to time.Time, f func(user string, sec float64)) error {
	old, err := s.uncountedSpells(tx, st, from, to)
	if err != nil {
		return err
	}
	for _, sp := range old {
		if v := sp.heldIn(from, to); v > 0 {
			for _, u := range sp.Users {
				f(u, v/float64(len(sp.Users)))
			}
		}
	}
	return nil
}

// uncountedSpells are the idle-held spells with a part in [from, to)
// whose hours are not in the ledger (idle_s): spells of an older store, ended (the
// table) or going on at st, the newest snapshot, having lasted idle_after.
func (s *Store) uncountedSpells(tx *sql.Tx, st *foldState, from, to time.Time) ([]Spell, error) {
	rows, err := tx.Query(`SELECT users, start, "end", coalesce(gpu_seconds, "end" - start) FROM spells
		WHERE counted IS NULL AND "end" > ? AND start < ?`, from.Unix(), to.Unix())
	if err != nil {
		return nil, err
	}
	var out []Spell
	for rows.Next() {
		var users string
		var sp Spell
		if err := rows.Scan(&users, &sp.Start, &sp.End, &sp.Held); err != nil {
			rows.Close()
			return nil, err
		}
		if json.Unmarshal([]byte(users), &sp.Users) != nil || len(sp.Users) == 0 {
			continue
		}
		sp.Share = 1 // Held is the spell's own (GPUSeconds)
		out = append(out, sp)
	}
	rows.Close()
	if err := rows.Err(); err != nil || st == nil {
		return out, err
	}
	// as idleHeldSpells picks them, without copying and sorting the
	// fleet's spells at each of the page's windows: almost all count
	for _, sp := range st.Spells {
		if !sp.Counted && sp.Last == st.Time && sp.Seconds() >= int64(s.params.IdleAfter/time.Second) {
			out = append(out, *sp)
		}
	}
	return out, nil
}

// heldIn is the part of an uncounted spell's idle-held GPU-seconds within
// [from, to]: its time there, at its average share.
func (sp *Spell) heldIn(from, to time.Time) float64 {
	end := sp.End
	if end == 0 {
		end = sp.Last
	}
	a, b := max(sp.Start, from.Unix()), min(end, to.Unix())
	if b <= a || end <= sp.Start {
		return 0
	}
	return float64(b-a) * sp.GPUSeconds() / float64(end-sp.Start)
}

// userLedger adds to the users each window's kWh, efficiency and
// idle-held hours, and to sum the last 30 days' figures per model and per
// user and model.
func userLedger(tx *sql.Tx, users userTable, sum *Summary, now time.Time) error {
	sum.Models30d, sum.UserModels30d = map[string]Figures{}, map[string]map[string]Figures{}
	for _, w := range windows {
		from, to := UsageSpan(w.Span, now)
		figs, err := windowLedger(tx, from.Unix(), to.Unix())
		if err != nil {
			return err
		}
		type acc struct{ j, eff, known, idle float64 }
		per := map[string]*acc{}
		for k, f := range figs {
			user, model := k[0], k[1]
			if w.Name == "30d" {
				m := sum.Models30d[model]
				m.Add(f)
				sum.Models30d[model] = m
			}
			if user == IdleJobUser { // not a user: Usage and the counters keep it apart
				continue
			}
			if w.Name == "30d" {
				if sum.UserModels30d[user] == nil {
					sum.UserModels30d[user] = map[string]Figures{}
				}
				sum.UserModels30d[user][model] = f
			}
			a := per[user]
			if a == nil {
				a = &acc{}
				per[user] = a
			}
			a.j, a.eff, a.known, a.idle = a.j+f.EnergyJ, a.eff+f.EffSeconds, a.known+f.EffKnownSeconds, a.idle+f.IdleHeldSeconds
		}
		for user, a := range per {
			u := users.get(user)
			u.KWh[w.Name] = a.j / 3.6e6
			u.IdleHours[w.Name] += a.idle / 3600
			u.Efficiency[w.Name] = math.NaN()
			if a.known > 0 {
				u.Efficiency[w.Name] = a.eff / a.known
			}
		}
	}
	return nil
}

// windowLedger is the holders' figures over [from, to), whole hours, by
// user and model (GPU-seconds, effective, energy, idle-held): the whole
// UTC days in it from ledger_days, the hours of the days it cuts from
// ledger_users.
func windowLedger(tx *sql.Tx, from, to int64) (map[[2]string]Figures, error) {
	out := map[[2]string]Figures{}
	firstDay, endDays := dayOf(from), dayOf(to)
	if firstDay < from {
		firstDay += 86400
	}
	q := `SELECT user, ` + modelName + `, ` + sums(dayColumns) + ` FROM %s WHERE %s >= ? AND %s < ? GROUP BY user, model`
	parts := [][3]any{{"ledger_users", from, to}}
	if firstDay < endDays {
		parts = [][3]any{{"ledger_days", firstDay, endDays}, {"ledger_users", from, firstDay}, {"ledger_users", endDays, to}}
	}
	for _, p := range parts {
		table, lo, hi := p[0].(string), p[1].(int64), p[2].(int64)
		if lo >= hi {
			continue
		}
		col := "hour"
		if table == "ledger_days" {
			col = "day"
		}
		rows, err := tx.Query(fmt.Sprintf(q, table, col, col), lo, hi)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k [2]string
			var f Figures
			if err := rows.Scan(&k[0], &k[1], &f.GPUSeconds, &f.EffSeconds, &f.EffKnownSeconds, &f.EnergyJ,
				&f.EnergyKnownSeconds, &f.IdleHeldSeconds); err != nil {
				rows.Close()
				return nil, err
			}
			sum := out[k]
			sum.Add(f)
			out[k] = sum
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// errBeforeKept says how far back a refused snapshot was; it is
// ErrTooOld.
func errBeforeKept(t, newest int64, keepRaw time.Duration) error {
	day := func(v int64) string { return time.Unix(v, 0).UTC().Format("2006-01-02 15:04 UTC") }
	return beforeKept(fmt.Sprintf("dated %s, more than keep_days (%d) before the newest snapshot recorded (%s): not recorded",
		day(t), int(keepRaw/(24*time.Hour)), day(newest)))
}

type beforeKept string

func (e beforeKept) Error() string        { return string(e) }
func (e beforeKept) Is(target error) bool { return target == ErrTooOld }
