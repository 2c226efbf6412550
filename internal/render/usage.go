package render

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/inifile"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/publish"
)

// importFiles records old load_data.csv files, oldest first whatever order
// they are named in, so that a backfill replays nothing. A file that does
// not parse or cannot be recorded is an error naming it; the others are
// still recorded.
func importFiles(ctx context.Context, cfg *Config, files []string, now time.Time, stdout io.Writer) error {
	if cfg.History.DB == "" {
		return cli.WithHint(errors.New("history is off ([history] db is empty)"), "set [history] db to a file")
	}
	dated, errs := dateFiles(files, now)
	store, err := cfg.History.Open()
	if err != nil {
		return fmt.Errorf("history %s: %w", cfg.History.DB, err)
	}
	defer store.Close()
	// one transaction, counted once at the end: files older than what is
	// recorded would each replay everything after them
	im, err := store.Import(ctx)
	if err != nil {
		return fmt.Errorf("history %s: %w", cfg.History.DB, err)
	}
	defer im.Abort()
	recorded, known := 0, 0
	for _, d := range dated {
		rep, _, err := buildReport(cfg, csvRows(d.file), d.t, time.Local)
		var did bool
		if err == nil {
			did, err = im.Add(history.FromCluster(rep.Cluster))
		}
		switch {
		case err != nil:
			errs = append(errs, fileError(d.file, err))
		case did:
			recorded++
		default:
			known++
		}
	}
	if err := im.Finish(ctx); err != nil {
		return fmt.Errorf("history %s: nothing was recorded: %w", cfg.History.DB, err)
	}
	fmt.Fprintf(stdout, "render: %d recorded, %d already recorded, %d failed\n", recorded, known, len(errs))
	if len(errs) > 0 {
		errs = append(errs, fmt.Errorf("%d of %d files not recorded", len(errs), len(files)))
	}
	return cli.Join(errs...)
}

type datedFile struct {
	file string
	t    time.Time // of its newest row
}

// dateFiles reads each file's newest time and sorts them by it; a file
// without one, or dated ahead of now, is an error.
func dateFiles(files []string, now time.Time) ([]datedFile, []error) {
	var ok []datedFile
	var errs []error
	for _, f := range files {
		var newest time.Time
		_, err := loaddata.StreamFile(f, func(r *loaddata.Row) {
			if t, err := time.Parse(loaddata.TimeFormat, r.Timestamp); err == nil && t.After(newest) {
				newest = t
			}
		})
		switch {
		case err != nil:
			errs = append(errs, fileError(f, err))
		case newest.IsZero():
			errs = append(errs, fileError(f, errors.New("no row has a timestamp: not recorded")))
		case newest.Sub(now) > publish.MaxAhead:
			errs = append(errs, fileError(f, fmt.Errorf("dated %s, ahead of this machine's clock: not recorded", newest.UTC().Format(time.RFC3339))))
		default:
			ok = append(ok, datedFile{f, newest})
		}
	}
	slices.SortStableFunc(ok, func(a, b datedFile) int { return a.t.Compare(b.t) })
	return ok, errs
}

// fileError names file in err unless err does already.
func fileError(file string, err error) error {
	if strings.HasPrefix(err.Error(), file+":") {
		return err
	}
	return fmt.Errorf("%s: %w", file, err)
}

// spanHistory reads the SPAN of a report over the history (-usage,
// -health) and opens the history; the caller closes it.
func spanHistory(cfg *Config, flag, span, examples string) (time.Duration, *history.Store, error) {
	d, ok := inifile.ParseDuration(span)
	if !ok || d <= 0 {
		return 0, nil, &cli.UsageError{Msg: fmt.Sprintf("%s %q: want a span such as %s", flag, span, examples)}
	}
	if cfg.History.DB == "" {
		return 0, nil, cli.WithHint(errors.New("history is off ([history] db is empty)"), "set [history] db to a file")
	}
	if _, err := os.Stat(cfg.History.DB); err != nil {
		return 0, nil, cli.WithHint(fmt.Errorf("no history at %s", cfg.History.DB), "render records one on every run; or name it in [history] db")
	}
	store, err := cfg.History.Open()
	if err != nil {
		return 0, nil, fmt.Errorf("history %s: %w", cfg.History.DB, err)
	}
	return d, store, nil
}

// usageReport prints every user's GPU-hours over the span back from now.
func usageReport(ctx context.Context, cfg *Config, span, format string, now time.Time, stdout io.Writer) error {
	d, store, err := spanHistory(cfg, "-usage", span, "24h, 7d or 1d12h")
	if err != nil {
		return err
	}
	defer store.Close()
	from, to := history.UsageSpan(d, now)
	rows, err := store.Usage(ctx, from, to)
	if err != nil {
		return fmt.Errorf("history %s: %w", cfg.History.DB, err)
	}
	switch format {
	case "csv":
		return usageCSV(stdout, rows)
	case "json":
		return usageJSON(stdout, rows, from, to)
	}
	if len(rows) == 0 {
		return noUsage(ctx, stdout, store, from, to, now)
	}
	return usageText(stdout, rows, from, to)
}

// noUsage says why a span has no GPU-hours: on a history's first day, the
// hour under way is not counted yet.
func noUsage(ctx context.Context, w io.Writer, store *history.Store, from, to, now time.Time) error {
	fmt.Fprintf(w, "no GPU-hours recorded from %s to %s UTC\n", from.UTC().Format("2006-01-02 15:04"), to.UTC().Format("2006-01-02 15:04"))
	sum, err := store.Summary(ctx, now)
	switch {
	case err != nil:
		return err
	case sum.Snapshots == 0:
		_, err = fmt.Fprintln(w, "the history holds no snapshot yet: render records one on every run")
	case !sum.First.Before(to):
		_, err = fmt.Fprintf(w, "the history began at %s UTC, and -usage counts whole hours only: its first hour shows from %s UTC\n",
			sum.First.UTC().Format("15:04"), sum.First.UTC().Truncate(time.Hour).Add(time.Hour).Format("15:04"))
	}
	return err
}

// usageRow is one line of `render -usage -format json`.
type usageRow struct {
	User          string  `json:"user"`
	GPUHours      float64 `json:"gpu_hours"`
	IdleHeldHours float64 `json:"idle_held_gpu_hours"`
	PeakGPUs      int     `json:"peak_gpus"`
	Share         float64 `json:"share"` // of the fleet's known GPU-hours, 0 to 1
}

func usageRows(rows []history.Usage) []usageRow {
	out := make([]usageRow, 0, len(rows))
	for _, u := range rows {
		out = append(out, usageRow{User: u.User, GPUHours: round(u.GPUHours, 3), IdleHeldHours: round(u.IdleHeldHours, 3),
			PeakGPUs: u.PeakGPUs, Share: round(u.Share, 4)})
	}
	return out
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

func usageJSON(w io.Writer, rows []history.Usage, from, to time.Time) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		From  string     `json:"from"`
		To    string     `json:"to"`
		Users []usageRow `json:"users"`
	}{from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), usageRows(rows)})
}

// usageCSV writes the user first and a header line; a user name that a
// spreadsheet would run as a formula is quoted with a leading '.
func usageCSV(w io.Writer, rows []history.Usage) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"user", "gpu_hours", "idle_held_gpu_hours", "peak_gpus", "share"})
	for _, u := range usageRows(rows) {
		name := u.User
		if name != "" && strings.ContainsRune("=+-@\t\r", rune(name[0])) {
			name = "'" + name
		}
		cw.Write([]string{name, strconv.FormatFloat(u.GPUHours, 'f', 3, 64), strconv.FormatFloat(u.IdleHeldHours, 'f', 3, 64),
			strconv.Itoa(u.PeakGPUs), strconv.FormatFloat(u.Share, 'f', 4, 64)})
	}
	cw.Flush()
	return cw.Error()
}

func usageText(w io.Writer, rows []history.Usage, from, to time.Time) error {
	span := fmt.Sprintf("from %s to %s UTC", from.UTC().Format("2006-01-02 15:04"), to.UTC().Format("2006-01-02 15:04"))
	names := make([]string, len(rows))
	width := len("user")
	for i, u := range rows {
		names[i] = clean(u.User, 40) // as -text shows names: terminal-safe, by display width
		if u.User == "" {
			names[i] = "(unknown)"
		}
		width = max(width, strWidth(names[i]))
	}
	// names to the left, figures to the right
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "GPU-hours %s (whole hours)\n", span)
	fmt.Fprintf(b, "%s  %9s  %9s  %9s  %6s\n", pad("user", width), "GPU-hours", "idle-held", "peak GPUs", "share")
	for i, u := range rows {
		peak := strconv.Itoa(u.PeakGPUs)
		if u.User == history.IdleJobUser {
			peak = "-"
		}
		share := fmt.Sprintf("%5.1f%%", u.Share*100)
		if u.Share > 0 && u.Share < 0.0005 {
			share = " <0.1%"
		}
		fmt.Fprintf(b, "%s  %9.2f  %9.2f  %9s  %6s\n", pad(names[i], width), u.GPUHours, u.IdleHeldHours, peak, share)
	}
	return b.Flush()
}
