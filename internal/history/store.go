package history

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver: pure Go, no cgo
)

// schemaVersion is the database layout this code reads and writes.
const schemaVersion = 3

// upgrades take a database from one schema to the next: upgrades[0] from 1
// to 2, and so on. A database older than this code is upgraded when it is
// opened, in one transaction; one newer is refused.
var upgrades = []string{
	healthSchema, // 2: the GPUs' health episodes
	ledgerSchema, // 3: the accounting's figures per holder, job and host
}

// year is how long the hourly figures, the fleet's counts per snapshot, the
// idle-held spells and the health episodes are kept.
const year = 366 * 24 * time.Hour

// Kinds of the usage and totals tables' rows.
const (
	kindUser      = 0 // a user's GPU-seconds; name: the user
	kindState     = 1 // GPU-seconds in a state; name: the state
	kindIdleJob   = 2 // idlemon's job's GPU-seconds; name ""
	kindUserPeak  = 3 // the most GPUs the user held at once in the hour (usage only)
	kindIdleHeld  = 4 // a user's idle-held GPU-seconds of ended spells (totals only)
	kindEnergy    = 5 // the joules of a user's share of their GPUs (totals only; the hours' are in ledger_users)
	kindUserModel = 6 // a user's GPU-seconds on a model; name: userModel (totals only)
)

const schema = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
	t INTEGER PRIMARY KEY,
	hosts INTEGER NOT NULL, hosts_down INTEGER NOT NULL,
	free INTEGER NOT NULL, busy INTEGER NOT NULL, reserved INTEGER NOT NULL,
	failed INTEGER NOT NULL, down INTEGER NOT NULL, idle_held INTEGER NOT NULL,
	data BLOB
);
CREATE TABLE IF NOT EXISTS usage (
	hour INTEGER NOT NULL, kind INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL,
	PRIMARY KEY (hour, kind, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS spells (
	host TEXT NOT NULL, gpu TEXT NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
	users TEXT NOT NULL, mem_mib REAL NOT NULL, ended_at INTEGER NOT NULL,
	gpu_seconds REAL, -- Spell.GPUSeconds; NULL in rows of older stores: "end" - start
	PRIMARY KEY (host, gpu, start, users)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS spells_end ON spells ("end");
CREATE TABLE IF NOT EXISTS checkpoints (t INTEGER PRIMARY KEY, state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS totals (
	kind INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL,
	debt REAL NOT NULL DEFAULT 0,
	PRIMARY KEY (kind, name)
) WITHOUT ROWID;
`

// Store is the history database.
type Store struct {
	db      *sql.DB // writes: one connection, IMMEDIATE transactions
	rdb     *sql.DB // reads
	path    string
	params  Params
	keepRaw time.Duration
}

// Open opens (creating it if need be, mode 0600) the database at path.
// keepRaw is how long whole snapshots are kept (keep_days); the hourly
// figures are kept a year.
func Open(path string, p Params, keepRaw time.Duration) (*Store, error) {
	if err := openableFile(path); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path) // a relative path in a file: URI would be its authority
	if err != nil {
		return nil, err
	}
	// busy_timeout first: switching to WAL can itself meet a lock. The
	// transactions are IMMEDIATE: two renders at once take turns instead of
	// failing on a lock upgrade.
	file := (&url.URL{Scheme: "file", Path: abs}).String() + "?_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", file+"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	// reads on a connection of their own, in deferred transactions: under
	// WAL they see the last commit while a long import writes. It sets no
	// journal mode (the writer's WAL is kept in the file): a mode change
	// wants a lock that SQLITE_BUSY refuses at once, busy_timeout or not.
	rdb, err := sql.Open("sqlite", file+"&_pragma=query_only(1)")
	if err != nil {
		db.Close()
		return nil, err
	}
	rdb.SetMaxOpenConns(1)
	s := &Store{db: db, rdb: rdb, path: path, params: p, keepRaw: keepRaw}
	// the reading connection is opened now, on the same file: one opened
	// later, after the file was deleted, would read a new, empty one
	for _, c := range []*sql.DB{db, rdb} {
		if err := pingBusy(c); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.init(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// openableFile makes sure path is this account's own regular file, mode
// 0600, making it if there is none. render often runs as root from cron:
// a link planted in a writable folder would make it adopt, or create,
// somebody else's file, and a database others can read holds who used
// what. SQLite's -wal and -shm files beside it take its mode; a link in
// their place is refused as well.
func openableFile(path string) error {
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if fi, err := os.Lstat(side); err == nil && !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file (%s): history opens only its own files", side, fileKind(fi))
		}
	}
	fi, err := os.Lstat(path)
	// made in between by another render (O_EXCL fails), it is checked as
	// any file found; gone again in between, it is made
	for try := 0; errors.Is(err, fs.ErrNotExist) && try < 3; try++ {
		// O_EXCL|O_NOFOLLOW: never through a link, never someone's file
		// made in between
		f, cerr := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if cerr == nil {
			return f.Close()
		}
		if !errors.Is(cerr, fs.ErrExist) {
			return cerr
		}
		fi, err = os.Lstat(path)
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s): history opens only a regular file it owns", fileKind(fi))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d, not by this account (uid %d): history opens only its own file", st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return tighten(path, fi)
	}
	return nil
}

// tighten makes this account's own database mode 0600, as render makes
// it: one an older render left readable by others (its umask) would
// otherwise stop the history at the upgrade. Through a descriptor opened
// without following a link, and only if it is still the file checked.
func tighten(path string, checked fs.FileInfo) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !os.SameFile(fi, checked) {
		return fmt.Errorf("replaced while it was checked: history opens only its own file")
	}
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("mode %04o: others may read who used what, and it cannot be made 0600: %w", fi.Mode().Perm(), err)
	}
	return nil
}

// fileKind says what a file that is not a regular one is.
func fileKind(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	default:
		return m.Type().String()
	}
}

// pingBusy opens c's connection, waiting as busy_timeout would: its
// pragmas (journal_mode=WAL on a new database, while another render makes
// it) can meet SQLITE_BUSY at once, without the busy handler being asked
// (seen with two renders on a new file).
func pingBusy(c *sql.DB) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping()
		if err == nil || !strings.Contains(err.Error(), "database is locked") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Store) init() error {
	// a database made already is only read: taking the write lock here
	// would make every render wait for a long import
	var v string
	if err := s.rdb.QueryRow(`SELECT value FROM meta WHERE key = 'schema'`).Scan(&v); err == nil && v == strconv.Itoa(schemaVersion) {
		return s.upgradeSpells()
	}
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(schema); err != nil {
		return err
	}
	version := 1 // what schema makes
	err = tx.QueryRow(`SELECT value FROM meta WHERE key = 'schema'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > schemaVersion {
			return fmt.Errorf("database schema %s; this render reads schema %d and older", v, schemaVersion)
		}
		version = n
	}
	for ; version < schemaVersion; version++ {
		if _, err := tx.Exec(upgrades[version-1]); err != nil {
			return fmt.Errorf("upgrading the database from schema %d: %w", version, err)
		}
	}
	if _, err := tx.Exec(`INSERT OR REPLACE INTO meta VALUES ('schema', ?)`, strconv.Itoa(schemaVersion)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return s.upgradeSpells()
}

// Close closes the database.
func (s *Store) Close() error { return errors.Join(s.rdb.Close(), s.db.Close()) }

// DB is the writing connection (IMMEDIATE transactions), for what else
// render keeps in the same file: the notifications' episodes and outbox,
// changed in transactions of their own (not Record's).
func (s *Store) DB() *sql.DB { return s.db }

// Path is the database's file.
func (s *Store) Path() string { return s.path }

// ErrTooOld is a snapshot that falls among snapshots whose whole readings
// are no longer kept: it cannot be placed among them.
var ErrTooOld = errors.New("older than the whole snapshots kept (keep_days): it cannot be placed among them")

// Record adds a snapshot, in one transaction of its own: killed at any
// point, it has recorded the snapshot and all that follows from it, or
// nothing. A snapshot of a time already recorded is not recorded again
// (recorded is false). One that is older than the newest is placed among
// the others and what follows it is counted again from the last hour's end
// before it, so nothing is counted twice.
func (s *Store) Record(ctx context.Context, snap *Snapshot) (recorded bool, err error) {
	if snap.Time.IsZero() {
		return false, errors.New("the data has no time: not recorded")
	}
	blob, err := encodeSnapshot(snap)
	if err != nil {
		return false, err
	}
	t := snap.Time.Unix()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM snapshots WHERE t = ?`, t).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		return false, nil
	}
	var newest sql.NullInt64
	if err := tx.QueryRow(`SELECT max(t) FROM snapshots`).Scan(&newest); err != nil {
		return false, err
	}
	if newest.Valid && time.Duration(newest.Int64-t)*time.Second > s.keepRaw {
		return false, errBeforeKept(t, newest.Int64, s.keepRaw)
	}
	if _, err := tx.Exec(`INSERT INTO snapshots (t, hosts, hosts_down, free, busy, reserved, failed, down, idle_held, data) VALUES (?, 0, 0, 0, 0, 0, 0, 0, 0, ?)`, t, blob); err != nil {
		return false, err
	}
	w := &writer{tx: tx, p: s.params}
	st, err := w.checkpoint(newest)
	switch {
	case err != nil:
		return false, err
	case st != nil && t > newest.Int64:
		err = w.fold(st, snap, true)
	default:
		err = w.replay(ctx, t)
	}
	if err != nil {
		return false, err
	}
	if err := w.prune(max(t, newest.Int64), s.keepRaw); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// writer does the work of one Record, in its transaction.
type writer struct {
	tx    *sql.Tx
	p     Params
	stmts map[string]*sql.Stmt // prepared: closed with the transaction
	// models are the models table's numbers by name, once read
	models map[string]int64
}

// checkpoint is the state saved at time t, or nil if there is none.
func (w *writer) checkpoint(t sql.NullInt64) (*foldState, error) {
	if !t.Valid {
		return newFoldState(), nil
	}
	var blob []byte
	err := w.tx.QueryRow(`SELECT state FROM checkpoints WHERE t = ?`, t.Int64).Scan(&blob)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeState(blob)
}

// fold steps st by snap and writes what that adds; save keeps the new
// state as a checkpoint (a replay saves only each hour's last).
func (w *writer) fold(st *foldState, snap *Snapshot, save bool) error {
	if st.Time != 0 && st.ledger == nil {
		rates, err := w.ratesAt(st.Time)
		if err != nil {
			return err
		}
		st.ledger = rates
	}
	eff := step(st, snap, w.p)
	if err := w.apply(eff, st.Time); err != nil {
		return err
	}
	if err := w.recordHealth(eff.HealthEnded, st.Time); err != nil {
		return err
	}
	c := eff.Counts
	// span_hour: the earliest hour this snapshot's fold wrote to, for a
	// replay to know how far back it must start (replayStart)
	if _, err := w.tx.Exec(`UPDATE snapshots SET hosts = ?, hosts_down = ?, free = ?, busy = ?, reserved = ?,
		failed = ?, down = ?, idle_held = ?, span_hour = ? WHERE t = ?`, c.Hosts, c.HostsDown, c.States[Free], c.States[Busy],
		c.States[Reserved], c.States[Failed], c.States[Down], c.IdleHeld, eff.earliest(), st.Time); err != nil {
		return err
	}
	if !save {
		return nil
	}
	return w.saveCheckpoint(st)
}

// ratesAt are the accounting's rates of the snapshot at t, made again
// from it (foldState.ledger); nil when it is no longer kept whole or is
// damaged: its span then adds nothing to the accounting.
func (w *writer) ratesAt(t int64) (*ledgerRates, error) {
	var blob []byte
	err := w.tx.QueryRow(`SELECT data FROM snapshots WHERE t = ?`, t).Scan(&blob)
	if errors.Is(err, sql.ErrNoRows) || err == nil && blob == nil {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	snap, err := decodeSnapshot(blob)
	if err != nil {
		return nil, nil
	}
	rates := ledgerOf(snap)
	return &rates, nil
}

// saveCheckpoint keeps st as the state at its time, and drops the one of an
// earlier snapshot of the same hour: what is kept is each hour's last state,
// from which a replay can start without touching that hour's figures.
func (w *writer) saveCheckpoint(st *foldState) error {
	blob, err := encodeState(st)
	if err != nil {
		return err
	}
	if _, err := w.tx.Exec(`DELETE FROM checkpoints WHERE t >= ? AND t < ?`, hourOf(st.Time), st.Time); err != nil {
		return err
	}
	_, err = w.tx.Exec(`INSERT OR REPLACE INTO checkpoints VALUES (?, ?)`, st.Time, blob)
	return err
}

func (w *writer) apply(eff effects, t int64) error {
	add := func(kind int, name string, v float64) error {
		if v == 0 {
			return nil
		}
		if _, err := w.tx.Exec(`INSERT INTO usage VALUES (?, ?, ?, ?)
			ON CONFLICT (hour, kind, name) DO UPDATE SET value = value + excluded.value`, eff.SpanHour, kind, name, v); err != nil {
			return err
		}
		return w.addTotal(kind, name, v)
	}
	for u, v := range eff.UserSeconds {
		if err := add(kindUser, u, v); err != nil {
			return err
		}
	}
	for state, v := range eff.StateSeconds {
		if err := add(kindState, state, v); err != nil {
			return err
		}
	}
	if err := add(kindIdleJob, "", eff.IdleJobSeconds); err != nil {
		return err
	}
	for u, n := range eff.UserGPUs {
		if _, err := w.tx.Exec(`INSERT INTO usage VALUES (?, ?, ?, ?)
			ON CONFLICT (hour, kind, name) DO UPDATE SET value = max(value, excluded.value)`, eff.Hour, kindUserPeak, u, n); err != nil {
			return err
		}
	}
	if err := w.applyLedger(eff); err != nil {
		return err
	}
	for _, sp := range eff.Ended {
		users, _ := json.Marshal(sp.Users)
		var counted any // NULL: its hours are not in the ledger (a spell going on when schema 3 came)
		if sp.Counted {
			counted = 1
		}
		if _, err := w.tx.Exec(`INSERT OR REPLACE INTO spells (host, gpu, start, "end", users, mem_mib, ended_at,
			gpu_seconds, account, job, model, counted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			sp.Host, sp.GPU, sp.Start, sp.End, string(users), sp.MemMiB, t, sp.GPUSeconds(),
			sp.Account, sp.Job, sp.Model, counted); err != nil {
			return err
		}
		for _, u := range sp.Users {
			if err := w.addTotal(kindIdleHeld, u, sp.GPUSeconds()/float64(len(sp.Users))); err != nil {
				return err
			}
		}
	}
	return nil
}

// addTotal adds v to a total. The totals are Prometheus's counters, which
// must never go down (a drop reads as a reset, and rate() spikes): what a
// replay takes back (v < 0) becomes a debt, paid from what is added next,
// so a counter stands still until the corrected count catches up with it.
func (w *writer) addTotal(kind int, name string, v float64) error {
	var err error
	if v < 0 {
		_, err = w.tx.Exec(`INSERT INTO totals VALUES (?, ?, 0, ?)
			ON CONFLICT (kind, name) DO UPDATE SET debt = debt + excluded.debt`, kind, name, -v)
	} else {
		_, err = w.tx.Exec(`INSERT INTO totals VALUES (?, ?, ?, 0)
			ON CONFLICT (kind, name) DO UPDATE SET value = value + max(0, excluded.value - debt),
				debt = max(0, debt - excluded.value)`, kind, name, v)
	}
	return err
}

// replay counts again everything after the last checkpoint before t's
// hour: a snapshot arrived out of order (a backfill, or a clock that went
// back), and the spans and spells around it change. What the replay will
// count again is first taken out of the hours, the spells and the totals.
func (w *writer) replay(ctx context.Context, t int64) error {
	from, ok, err := w.replayStart(t)
	if err != nil {
		return err
	}
	if !ok {
		return ErrTooOld
	}
	st := newFoldState()
	if from.Valid {
		if st, err = w.checkpoint(from); err != nil {
			return err
		}
	} else {
		from.Int64 = -1 << 62
	}
	if err := w.undo(from.Int64); err != nil {
		return err
	}
	// the times first: the one connection cannot read rows and write at once
	times, err := queryTimes(w.tx, `SELECT t FROM snapshots WHERE t > ? ORDER BY t`, from.Int64)
	if err != nil {
		return err
	}
	for i, ts := range times {
		if err := ctx.Err(); err != nil {
			return err
		}
		var blob []byte
		if err := w.tx.QueryRow(`SELECT data FROM snapshots WHERE t = ?`, ts).Scan(&blob); err != nil {
			return err
		}
		snap, err := decodeSnapshot(blob)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", time.Unix(ts, 0).UTC().Format(time.RFC3339), err)
		}
		last := i == len(times)-1 || hourOf(times[i+1]) != hourOf(ts)
		if err := w.fold(st, snap, last); err != nil {
			return err
		}
	}
	return nil
}

// queryTimes is the one column of Unix times q selects.
func queryTimes(tx *sql.Tx, q string, args ...any) ([]int64, error) {
	rows, err := tx.Query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var times []int64
	for rows.Next() {
		var t int64
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		times = append(times, t)
	}
	return times, rows.Err()
}

// replayStart is the checkpoint a replay for a snapshot at t starts from:
// the last one before t's hour (not Valid: from the very start). ok is
// false when the whole snapshots after it are no longer all kept.
func (w *writer) replayStart(t int64) (from sql.NullInt64, ok bool, err error) {
	before := hourOf(t)
	for {
		if err := w.tx.QueryRow(`SELECT max(t) FROM checkpoints WHERE t < ?`, before).Scan(&from); err != nil {
			return from, false, err
		}
		if !from.Valid {
			break
		}
		// a snapshot after from that wrote to from's hour or before (a
		// span after a gap, a spell reaching idle_after): the replay must
		// count those hours again too
		var first sql.NullInt64
		if err := w.tx.QueryRow(`SELECT min(span_hour) FROM snapshots WHERE t > ?`, from.Int64).Scan(&first); err != nil {
			return from, false, err
		}
		if !first.Valid || first.Int64 > hourOf(from.Int64) {
			break
		}
		before = hourOf(from.Int64)
	}
	after := int64(-1 << 62)
	if from.Valid {
		after = from.Int64
	}
	var gone int
	if err := w.tx.QueryRow(`SELECT count(*) FROM snapshots WHERE t > ? AND data IS NULL`, after).Scan(&gone); err != nil {
		return from, false, err
	}
	return from, gone == 0 && (from.Valid || !w.rawPruned()), nil
}

// Importer records many snapshots in one transaction (render -import): each
// is stored as it comes, and the counting is replayed once, at Finish, from
// the earliest of them; one at a time, each snapshot older than the newest
// would replay all that follows it.
type Importer struct {
	s        *Store
	w        *writer
	earliest int64
	newest   int64
	added    bool
}

// Import starts an import; Finish (or Abort) ends it.
func (s *Store) Import(ctx context.Context) (*Importer, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &Importer{s: s, w: &writer{tx: tx, p: s.params}, earliest: 1<<62 - 1}, nil
}

// Add stores snap: false if its time is recorded already, ErrTooOld if it
// falls among snapshots no longer kept whole (nothing is stored then).
func (im *Importer) Add(snap *Snapshot) (bool, error) {
	if snap.Time.IsZero() {
		return false, errors.New("the data has no time: not recorded")
	}
	t := snap.Time.Unix()
	var n int
	if err := im.w.tx.QueryRow(`SELECT count(*) FROM snapshots WHERE t = ?`, t).Scan(&n); err != nil || n > 0 {
		return false, err
	}
	var newest sql.NullInt64
	if err := im.w.tx.QueryRow(`SELECT max(t) FROM snapshots`).Scan(&newest); err != nil {
		return false, err
	}
	if newest.Valid && time.Duration(newest.Int64-t)*time.Second > im.s.keepRaw {
		return false, errBeforeKept(t, newest.Int64, im.s.keepRaw)
	}
	if _, ok, err := im.w.replayStart(t); err != nil || !ok {
		if err == nil {
			err = ErrTooOld
		}
		return false, err
	}
	blob, err := encodeSnapshot(snap)
	if err != nil {
		return false, err
	}
	if _, err := im.w.tx.Exec(`INSERT INTO snapshots (t, hosts, hosts_down, free, busy, reserved, failed, down, idle_held, data) VALUES (?, 0, 0, 0, 0, 0, 0, 0, 0, ?)`, t, blob); err != nil {
		return false, err
	}
	im.earliest, im.newest, im.added = min(im.earliest, t), max(im.newest, t), true
	return true, nil
}

// Finish counts what was added and commits.
func (im *Importer) Finish(ctx context.Context) error {
	defer im.w.tx.Rollback()
	if im.added {
		if err := im.w.replay(ctx, im.earliest); err != nil {
			return err
		}
		var newest int64
		if err := im.w.tx.QueryRow(`SELECT max(t) FROM snapshots`).Scan(&newest); err != nil {
			return err
		}
		if err := im.w.prune(newest, im.s.keepRaw); err != nil {
			return err
		}
	}
	return im.w.tx.Commit()
}

// Abort drops what was added.
func (im *Importer) Abort() { im.w.tx.Rollback() }

// undo takes out of the figures what snapshots after from added: the
// hours after from's (each snapshot adds to its own hour, and from is its
// hour's last), the spells that ended after it, and the checkpoints.
func (w *writer) undo(from int64) error {
	type row struct {
		kind int
		name string
		v    float64
	}
	var sub []row
	rows, err := w.tx.Query(`SELECT kind, name, sum(value) FROM usage WHERE hour > ? AND kind IN (?, ?, ?) GROUP BY kind, name`,
		hourOf(from), kindUser, kindState, kindIdleJob)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.kind, &r.name, &r.v); err != nil {
			rows.Close()
			return err
		}
		sub = append(sub, r)
	}
	rows.Close()
	rows, err = w.tx.Query(`SELECT users, coalesce(gpu_seconds, "end" - start) FROM spells WHERE ended_at > ?`, from)
	if err != nil {
		return err
	}
	for rows.Next() {
		var users string
		var held float64
		if err := rows.Scan(&users, &held); err != nil {
			rows.Close()
			return err
		}
		var us []string
		if json.Unmarshal([]byte(users), &us) == nil && len(us) > 0 {
			for _, u := range us {
				sub = append(sub, row{kindIdleHeld, u, held / float64(len(us))})
			}
		}
	}
	rows.Close()
	for _, r := range sub {
		if err := w.addTotal(r.kind, r.name, -r.v); err != nil {
			return err
		}
	}
	if err := w.undoLedger(from); err != nil {
		return err
	}
	for _, q := range []string{
		`DELETE FROM usage WHERE hour > ?`,
		`DELETE FROM spells WHERE ended_at > ?`,
		`DELETE FROM health_episodes WHERE ended_at > ?`,
		`DELETE FROM checkpoints WHERE t > ?`,
	} {
		arg := from
		if q == `DELETE FROM usage WHERE hour > ?` {
			arg = hourOf(from)
		}
		if _, err := w.tx.Exec(q, arg); err != nil {
			return err
		}
	}
	return nil
}

// rawPruned reports whether whole snapshots were ever dropped for age.
func (w *writer) rawPruned() bool {
	var v string
	return w.tx.QueryRow(`SELECT value FROM meta WHERE key = 'raw_pruned'`).Scan(&v) == nil
}

// prune drops what is past keeping, counted back from the newest
// snapshot (not from the clock: a monitor that stopped for a month keeps
// its history). The totals stay: Prometheus's counters never go down.
func (w *writer) prune(newest int64, keepRaw time.Duration) error {
	rawCut := newest - int64(keepRaw/time.Second)
	res, err := w.tx.Exec(`UPDATE snapshots SET data = NULL WHERE t < ? AND data IS NOT NULL`, rawCut)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		if _, err := w.tx.Exec(`INSERT OR REPLACE INTO meta VALUES ('raw_pruned', '1')`); err != nil {
			return err
		}
	}
	// a checkpoint is of use only while the snapshots after it are whole;
	// the newest one (the current state) always stays
	if _, err := w.tx.Exec(`DELETE FROM checkpoints WHERE t < ? AND t < ?`, rawCut, newest); err != nil {
		return err
	}
	yearCut := newest - int64(year/time.Second)
	for _, q := range []string{
		`DELETE FROM usage WHERE hour < ?`,
		`DELETE FROM snapshots WHERE t < ?`,
		`DELETE FROM spells WHERE "end" < ?`,
		`DELETE FROM ledger_users WHERE hour < ?`,
		`DELETE FROM ledger_days WHERE day < ?`,
		`DELETE FROM ledger_jobs WHERE hour < ?`,
		`DELETE FROM ledger_hosts WHERE hour < ?`,
		`DELETE FROM health_episodes WHERE "end" < ?`,
	} {
		if _, err := w.tx.Exec(q, yearCut); err != nil {
			return err
		}
	}
	return nil
}
