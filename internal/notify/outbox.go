package notify

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Outbox keeps the open episodes and the messages not yet accepted, in
// tables of the history database, so that one file holds all that render
// remembers.
//
// Recording a snapshot (history's Store.Record) and Advance are two
// transactions, one after the other: a render killed between them has
// recorded its snapshot and told nothing of it. That loses nothing,
// because Advance works from the observations (the newest snapshot as
// history folded it) and the episodes it stored, not from the snapshots
// recorded since it last ran: the next run tells what is true by then, and
// a run on the same observations again tells nothing twice (reminders
// aside, which follow the clock).
type Outbox struct {
	db *sql.DB
}

const schema = `
CREATE TABLE IF NOT EXISTS notify_episodes (key TEXT PRIMARY KEY, episode TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notify_outbox (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	target TEXT NOT NULL,
	summary TEXT NOT NULL,
	body BLOB NOT NULL,
	created INTEGER NOT NULL,
	attempts INTEGER NOT NULL DEFAULT 0,
	last_error TEXT NOT NULL DEFAULT '',
	lease INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS notify_outbox_target ON notify_outbox (target, id);
`

// OpenOutbox makes the tables in db if need be. db must run its
// transactions IMMEDIATE (history's writing connection does): two renders
// at once then take turns.
func OpenOutbox(ctx context.Context, db *sql.DB) (*Outbox, error) {
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	return &Outbox{db: db}, nil
}

// Advance runs step on the stored episodes and queues what route makes of
// its events, in one transaction: a render killed at any point leaves the
// episodes and their messages both changed or both as they were, so a
// message is never lost and an episode never told twice for one change.
func (o *Outbox) Advance(ctx context.Context, obs Observations, p Params, route func([]Event) []Item) ([]Event, error) {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	open := map[string]Episode{}
	rows, err := tx.QueryContext(ctx, `SELECT key, episode FROM notify_episodes`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var key, js string
		if err := rows.Scan(&key, &js); err != nil {
			rows.Close()
			return nil, err
		}
		var e Episode
		if err := json.Unmarshal([]byte(js), &e); err != nil {
			rows.Close()
			return nil, fmt.Errorf("notifications: episode %q: %w", key, err)
		}
		open[key] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	next, events := step(open, obs, p)
	for k := range open {
		if _, ok := next[k]; !ok {
			if _, err := tx.ExecContext(ctx, `DELETE FROM notify_episodes WHERE key = ?`, k); err != nil {
				return nil, err
			}
		}
	}
	for k, e := range next {
		if old, ok := open[k]; ok && sameEpisode(old, e) {
			continue
		}
		js, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO notify_episodes (key, episode) VALUES (?, ?)`, k, string(js)); err != nil {
			return nil, err
		}
	}
	for _, it := range route(events) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO notify_outbox (target, summary, body, created) VALUES (?, ?, ?, ?)`,
			it.Target, it.Summary, it.Body, it.created.Unix()); err != nil {
			return nil, err
		}
	}
	return events, tx.Commit()
}

func sameEpisode(a, b Episode) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// maxClaim is the most messages one run takes to send; the rest wait.
const maxClaim = 500

// claim takes the messages due, oldest first, and leases them until
// now+lease: another render running at the same time does not send them
// too, and a render killed while sending leaves them to the run after the
// lease. A target with a message under lease is not claimed at all, so
// its messages keep their order.
func (o *Outbox) claim(ctx context.Context, now time.Time, lease time.Duration) ([]Item, error) {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	// a target with a message under lease (being sent, or left by a render
	// killed while sending it) waits: what is newer must not overtake it
	rows, err := tx.QueryContext(ctx, `SELECT id, target, summary, body, created, attempts, last_error FROM notify_outbox
		WHERE lease <= ? AND target NOT IN (SELECT target FROM notify_outbox WHERE lease > ?)
		ORDER BY id LIMIT ?`, now.Unix(), now.Unix(), maxClaim)
	if err != nil {
		return nil, err
	}
	var items []Item
	for rows.Next() {
		var it Item
		var created int64
		if err := rows.Scan(&it.ID, &it.Target, &it.Summary, &it.Body, &created, &it.attempts, &it.lastError); err != nil {
			rows.Close()
			return nil, err
		}
		it.created = time.Unix(created, 0)
		items = append(items, it)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, it := range items {
		if _, err := tx.ExecContext(ctx, `UPDATE notify_outbox SET lease = ? WHERE id = ?`, now.Add(lease).Unix(), it.ID); err != nil {
			return nil, err
		}
	}
	return items, tx.Commit()
}

// sent removes a message its target accepted.
func (o *Outbox) sent(ctx context.Context, id int64) error {
	_, err := o.db.ExecContext(ctx, `DELETE FROM notify_outbox WHERE id = ?`, id)
	return err
}

// failed keeps a message its target refused, for the next run.
func (o *Outbox) failed(ctx context.Context, id int64, why string) error {
	_, err := o.db.ExecContext(ctx, `UPDATE notify_outbox SET attempts = attempts + 1, last_error = ?, lease = 0 WHERE id = ?`, why, id)
	return err
}

// release gives back messages claimed but not tried.
func (o *Outbox) release(ctx context.Context, ids []int64) error {
	for _, id := range ids {
		if _, err := o.db.ExecContext(ctx, `UPDATE notify_outbox SET lease = 0 WHERE id = ?`, id); err != nil {
			return err
		}
	}
	return nil
}

// pending counts the messages waiting, by target.
func (o *Outbox) pending(ctx context.Context) (map[string]int, error) {
	rows, err := o.db.QueryContext(ctx, `SELECT target, count(*) FROM notify_outbox GROUP BY target`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var t string
		var n int
		if err := rows.Scan(&t, &n); err != nil {
			return nil, err
		}
		out[t] = n
	}
	return out, rows.Err()
}

// Drop removes what can no longer be sent: messages for a target that is
// no longer configured, and messages older than maxAge (a target down for
// that long). It returns how many it dropped, by target, for the report.
func (o *Outbox) Drop(ctx context.Context, configured func(target string) bool, now time.Time, maxAge time.Duration) (gone, old map[string]int, err error) {
	pending, err := o.pending(ctx)
	if err != nil {
		return nil, nil, err
	}
	gone, old = map[string]int{}, map[string]int{}
	for t, n := range pending {
		if configured(t) {
			continue
		}
		if _, err := o.db.ExecContext(ctx, `DELETE FROM notify_outbox WHERE target = ?`, t); err != nil {
			return nil, nil, err
		}
		gone[t] = n
	}
	rows, err := o.db.QueryContext(ctx, `SELECT target, count(*) FROM notify_outbox WHERE created < ? GROUP BY target`, now.Add(-maxAge).Unix())
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var t string
		var n int
		if err := rows.Scan(&t, &n); err != nil {
			rows.Close()
			return nil, nil, err
		}
		old[t] = n
	}
	rows.Close()
	if len(old) > 0 {
		if _, err := o.db.ExecContext(ctx, `DELETE FROM notify_outbox WHERE created < ?`, now.Add(-maxAge).Unix()); err != nil {
			return nil, nil, err
		}
	}
	return gone, old, nil
}
