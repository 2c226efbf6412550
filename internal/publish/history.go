package publish

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// MaxAhead is how far ahead of this machine's clock data may be dated
// (clocks a little apart) before it is refused: a year-9999 snapshot would
// make every real one after it "out of order", and the pruning, counted
// from the newest, would drop them all.
const MaxAhead = 5 * time.Minute

// recording is the history part of a run: the store, open for the
// notifications that read and write the same file, and what it says.
type recording struct {
	store    *history.Store    // nil: history off, or it could not be opened
	snap     *history.Snapshot // nil: history off
	summary  *history.Summary  // nil: nothing to show
	warnings []string
	err      error
}

// record records the run's snapshot and reads the figures the files show.
// Whatever goes wrong, the files are still made: without history or with
// the history recorded before, with a warning, and the error says which.
func record(ctx context.Context, c history.Config, run Run) *recording {
	rec := &recording{}
	if c.DB == "" {
		return rec // no snapshot: nothing records it, and notify needs the store
	}
	rec.snap = history.FromCluster(run.Cluster)
	fail := func(err error) *recording {
		rec.warnings = append(rec.warnings, fmt.Sprintf("History (%s) is not shown: %s", c.DB, clip(err)))
		rec.err = cli.WithHint(fmt.Errorf("history %s: %w", c.DB, err), "the other outputs show no history, and no notification goes out, until this is fixed; %s", historyFix(c.DB, err))
		return rec
	}
	store, err := c.Open()
	if err != nil {
		return fail(withFolder(c.DB, err))
	}
	rec.store = store
	var notRecorded error
	if rec.snap.Time.Sub(run.Now) > MaxAhead {
		notRecorded = fmt.Errorf("it is dated %s, ahead of this machine's clock", rec.snap.Time.UTC().Format(time.RFC3339))
	} else if _, err := store.Record(ctx, rec.snap); err != nil {
		notRecorded = withFolder(c.DB, err)
	}
	sum, err := store.Summary(ctx, run.Now)
	if err != nil {
		if notRecorded != nil {
			err = fmt.Errorf("%w (and this snapshot was not recorded: %v)", err, notRecorded)
		}
		return fail(err)
	}
	rec.summary = sum
	if notRecorded != nil {
		rec.warnings = append(rec.warnings, fmt.Sprintf("History (%s): this snapshot was not recorded: %s", c.DB, clip(notRecorded)))
		rec.err = cli.WithHint(fmt.Errorf("history %s: this snapshot was not recorded: %w", c.DB, notRecorded),
			"the other outputs show the history recorded before it; %s", historyFix(c.DB, notRecorded))
	}
	return rec
}

// withFolder says what is wrong with the database's folder, where
// something is: SQLite says only "unable to open database file".
func withFolder(db string, err error) error {
	dir := filepath.Dir(db)
	if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
		return fmt.Errorf("%w: folder %s does not exist", err, dir)
	}
	switch werr := syscall.Access(dir, 2 /* W_OK */); {
	case errors.Is(werr, syscall.EROFS):
		return fmt.Errorf("%w: %s is on a read-only file system", err, dir)
	case errors.Is(werr, syscall.EACCES):
		return fmt.Errorf("%w: this user may not write in %s", err, dir)
	}
	return err
}

func clip(err error) string { return hosttext.Clip(hosttext.Printable(err.Error()), 300) }

// historyFix is the hint for what went wrong with the history at db: only
// a database that is damaged is worth moving aside; a lock passes, a full
// disk wants space, and a snapshot that cannot be placed says nothing
// about the database.
func historyFix(db string, err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, history.ErrTooOld):
		return "the history is unharmed; raise keep_days to place snapshots that old"
	case strings.Contains(msg, "ahead of this machine's clock"), strings.Contains(msg, "has no time"):
		return "the history is unharmed; check the clocks of this machine and of the hosts"
	case strings.Contains(msg, "database is locked"):
		return "another render or render -import held the database over 10 s; the history is unharmed, and the next run records its own snapshot"
	case strings.Contains(msg, "disk is full"), strings.Contains(msg, "disk I/O error") && fileSystemFull(filepath.Dir(db)):
		return fmt.Sprintf("the file system of %s is full: free some space there; the history is unharmed (SQLite wrote nothing half), and the next run records its own snapshot", filepath.Dir(db))
	case strings.Contains(msg, "does not exist"), strings.Contains(msg, "may not write"),
		strings.Contains(msg, "unable to open database file"), errors.Is(err, os.ErrNotExist), errors.Is(err, os.ErrPermission):
		return "check that the folder of [history] db exists and that this user may write there"
	// the files history refuses to open: moving one aside would throw a
	// sound history away
	case strings.Contains(msg, "not by this account"):
		return "the history is unharmed: run render as the account that owns it (the one cron runs render as), or chown the database and its -wal and -shm files to this account"
	case strings.Contains(msg, "others may read who used what"):
		return "the history is unharmed: chmod 600 it (and its -wal and -shm files), as the error says"
	case strings.Contains(msg, "not a regular file (a symbolic link)"):
		return "history follows no link: name the file itself in [history] db, or remove the link"
	case strings.Contains(msg, "not a regular file"):
		return "[history] db must name a regular file: move what is there away, or name another path"
	case strings.Contains(msg, "readonly database"), strings.Contains(msg, "read-only file system"):
		return "this user cannot write the database (read-only or immutable file, or a read-only file system)"
	}
	return "if the file is damaged, move it aside: a new one is made, and render -import refills it from old load_data.csv files; or set [history] db = to turn history off"
}

// fileSystemFull reports whether the file system holding dir has no room
// left for this user: SQLite says only "disk I/O error" when a write to
// its journal fails for want of space.
func fileSystemFull(dir string) bool {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) < 1<<20
}
