// Package publish is one run of the monitor, a cron render or a round of
// fetch's live mode: a cluster in; its snapshot recorded in the history;
// the page with its group pages, status.json and metrics.prom written; and
// what changed told by webhook and mail.
//
// Each of those succeeds or fails on its own, as node_exporter's
// collectors do: a folder that cannot be written costs its own file, not
// the page, not the history and not the notifications; the last good file
// stays in its place. Every failure comes back in one cli.Errors, each
// with the fix.
//
// What the files hold is package render's business; how a run gets them
// out is this package's.
package publish

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/notify"
)

// Config is what a run needs besides its files: the history ([history],
// DB "" for none) and whom to tell ([notify]).
type Config struct {
	History history.Config
	Notify  notify.Config
}

// Run is one run.
type Run struct {
	Cluster *cluster.Cluster
	Now     time.Time
	Loc     *time.Location // of times in messages
	// Files makes the run's files once the history is read. h.Summary is
	// nil when there is no history to show; h.Warnings say why, for the
	// page.
	Files func(h History) []File
	// Log gets the lines that are not errors (a message dropped), each
	// starting "Prog: notify: ".
	Log  io.Writer
	Prog string
}

// History is what a run's files show of the history.
type History struct {
	Summary  *history.Summary
	Warnings []string
}

// Publish does the run: the history recorded, every file written and the
// notifications sent, each whatever became of the others. The error is
// nil or joins (cli.Join) each part that failed.
func Publish(ctx context.Context, cfg Config, run Run) error {
	rec := record(ctx, cfg.History, run)
	if rec.store != nil {
		defer rec.store.Close()
	}
	files := run.Files(History{Summary: rec.summary, Warnings: rec.warnings})
	// all at once: each is made and written apart, and a slow disk under
	// one does not hold up the others
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { errs[i] = write(f, run.Now) })
	}
	wg.Wait()
	return cli.Join(append(append([]error{rec.err}, errs...), tell(ctx, cfg, rec, run))...)
}
