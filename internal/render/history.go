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
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/inifile"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// HistoryConfig is [history].
type HistoryConfig struct {
	DB       string // "" turns history off
	Params   history.Params
	KeepDays int // whole snapshots are kept this many days; the hourly figures a year
}

// Defaults of [history], documented in config.example.ini.
const (
	DefaultHistoryDB = "history.db"
	DefaultKeepDays  = 14
)

func defaultHistory() HistoryConfig {
	return HistoryConfig{DB: DefaultHistoryDB, Params: history.DefaultParams, KeepDays: DefaultKeepDays}
}

// readHistory reads [history] into c; the database's default is beside the
// config file, so that a run from cron, `render -import` and
// `render -usage` all find the same one, and the web folder never holds it.
func readHistory(sec inifile.Section, c *HistoryConfig, f *inifile.File) error {
	c.DB = f.Resolve(DefaultHistoryDB)
	if v, ok := sec.Path("db"); ok {
		c.DB = v
	}
	day := 24 * time.Hour
	if err := sec.Duration("max_gap", inifile.Limits[time.Duration]{Min: time.Second, Max: day,
		Want: "a duration from 1s to 1d (e.g. 15m)"}, &c.Params.MaxGap); err != nil {
		return err
	}
	if err := sec.Float("idle_util_pct", inifile.Limits[float64]{Min: 0, Max: 100,
		Want: "a percentage from 0 to 100"}, &c.Params.IdleUtilPct); err != nil {
		return err
	}
	if err := sec.Duration("idle_after", inifile.Limits[time.Duration]{Min: time.Minute, Max: 30 * day,
		Want: "a duration from 1m to 30d (e.g. 2h)"}, &c.Params.IdleAfter); err != nil {
		return err
	}
	return sec.Int("keep_days", inifile.Limits[int]{Min: 1, Max: 366,
		Want: "a whole number of days from 1 to 366"}, &c.KeepDays)
}

func openHistory(c HistoryConfig) (*history.Store, error) {
	return history.Open(c.DB, c.Params, time.Duration(c.KeepDays)*24*time.Hour)
}

// recordHistory records the report's snapshot and reads the figures the
// outputs show. Whatever goes wrong, the page is still made: without
// history, with a warning, and render exits 1 (the returned error).
func recordHistory(ctx context.Context, rep *Report) error {
	hc := rep.Config.History
	if hc.DB == "" {
		return nil
	}
	fail := func(err error) error {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("History (%s) is not shown: %s", hc.DB, hosttext.Clip(hosttext.Printable(err.Error()), 300)))
		return cli.WithHint(fmt.Errorf("history %s: %w", hc.DB, err), "the page was written without history; %s", historyFix(err))
	}
	store, err := openHistory(hc)
	if err != nil {
		return fail(err)
	}
	defer store.Close()
	// a snapshot that cannot be recorded (dated ahead, too old, a database
	// that cannot be written) still leaves the history there is to show
	var notRecorded error
	snap := history.FromCluster(rep.Cluster)
	if snap.Time.Sub(rep.Now) > maxAhead {
		// a year-9999 snapshot would make every real one after it "out of
		// order", and the pruning, counted from the newest, would drop all
		notRecorded = fmt.Errorf("it is dated %s, ahead of this machine's clock", snap.Time.UTC().Format(time.RFC3339))
	} else if _, err := store.Record(ctx, snap); err != nil {
		notRecorded = err
	}
	sum, err := store.Summary(ctx, rep.Now)
	if err != nil {
		if notRecorded != nil {
			err = fmt.Errorf("%w (and this snapshot was not recorded: %v)", err, notRecorded)
		}
		return fail(err)
	}
	rep.History = sum
	if notRecorded == nil {
		return nil
	}
	rep.Warnings = append(rep.Warnings, fmt.Sprintf("History (%s): this snapshot was not recorded: %s", hc.DB,
		hosttext.Clip(hosttext.Printable(notRecorded.Error()), 300)))
	return cli.WithHint(fmt.Errorf("history %s: this snapshot was not recorded: %w", hc.DB, notRecorded),
		"the page was written with the history recorded before it; %s", historyFix(notRecorded))
}

// historyFix is the hint for what went wrong with the history: only a
// database that is damaged is worth moving aside; a lock passes, and a
// snapshot that cannot be placed says nothing about the database.
func historyFix(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, history.ErrTooOld):
		return "the history is unharmed; raise keep_days to place snapshots that old"
	case strings.Contains(msg, "ahead of this machine's clock"), strings.Contains(msg, "has no time"):
		return "the history is unharmed; check the clocks of this machine and of the hosts"
	case strings.Contains(msg, "database is locked"):
		return "another render or render -import held the database over 10 s; the history is unharmed, and the next run records its own snapshot"
	case strings.Contains(msg, "unable to open database file"), errors.Is(err, os.ErrNotExist), errors.Is(err, os.ErrPermission):
		return "check that the folder of [history] db exists and that this user may write there"
	case strings.Contains(msg, "readonly database"):
		return "this user cannot write the database (read-only or immutable file, or a read-only file system)"
	}
	return "if the file is damaged, move it aside: a new one is made, and render -import refills it from old load_data.csv files; or set [history] db = to turn history off"
}

// importFiles records old load_data.csv files, oldest first whatever order
// they are named in, so that a backfill replays nothing. A file that does
// not parse or cannot be recorded is an error naming it; the others are
// still recorded.
func importFiles(ctx context.Context, cfg *Config, files []string, stdout, stderr io.Writer) error {
	if cfg.History.DB == "" {
		return cli.WithHint(errors.New("history is off ([history] db is empty)"), "set [history] db to a file")
	}
	type dated struct {
		file string
		t    time.Time
	}
	var ok []dated
	failed := 0
	report := func(file string, err error) {
		failed++
		if msg := err.Error(); strings.HasPrefix(msg, file+":") { // it names the file already
			fmt.Fprintf(stderr, "render: error: %s\n", msg)
		} else {
			fmt.Fprintf(stderr, "render: error: %s: %s\n", file, msg)
		}
	}
	for _, f := range files {
		var newest time.Time
		_, err := loaddata.StreamFile(f, func(r *loaddata.Row) {
			if t, err := time.Parse(loaddata.TimeFormat, r.Timestamp); err == nil && t.After(newest) {
				newest = t
			}
		})
		switch {
		case err != nil:
			report(f, err)
		case newest.IsZero():
			report(f, errors.New("no row has a timestamp: not recorded"))
		case newest.Sub(clock()) > maxAhead:
			report(f, fmt.Errorf("dated %s, ahead of this machine's clock: not recorded", newest.UTC().Format(time.RFC3339)))
		default:
			ok = append(ok, dated{f, newest})
		}
	}
	slices.SortStableFunc(ok, func(a, b dated) int { return a.t.Compare(b.t) })
	store, err := openHistory(cfg.History)
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
	for _, d := range ok {
		c := *cfg
		c.Input = d.file
		rep, _, err := buildReport(&c, d.t)
		if err != nil {
			report(d.file, err)
			continue
		}
		did, err := im.Add(history.FromCluster(rep.Cluster))
		switch {
		case err != nil:
			report(d.file, err)
		case did:
			recorded++
		default:
			known++
		}
	}
	if err := im.Finish(ctx); err != nil {
		return fmt.Errorf("history %s: nothing was recorded: %w", cfg.History.DB, err)
	}
	fmt.Fprintf(stdout, "render: %d recorded, %d already recorded, %d failed\n", recorded, known, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d files not recorded", failed, len(files))
	}
	return nil
}

// usageReport prints every user's GPU-hours over the span back from now.
func usageReport(ctx context.Context, cfg *Config, span, format string, now time.Time, stdout io.Writer) error {
	d, ok := inifile.ParseDuration(span)
	if !ok || d <= 0 {
		return &cli.UsageError{Msg: fmt.Sprintf("-usage %q: want a span such as 24h, 7d or 1d12h", span)}
	}
	if cfg.History.DB == "" {
		return cli.WithHint(errors.New("history is off ([history] db is empty)"), "set [history] db to a file")
	}
	if _, err := os.Stat(cfg.History.DB); err != nil {
		return cli.WithHint(fmt.Errorf("no history at %s", cfg.History.DB), "render records one on every run; or name it in [history] db")
	}
	store, err := openHistory(cfg.History)
	if err != nil {
		return fmt.Errorf("history %s: %w", cfg.History.DB, err)
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
	return usageText(stdout, rows, from, to)
}

// UsageRow is one line of `render -usage -format json`.
type UsageRow struct {
	User          string  `json:"user"`
	GPUHours      float64 `json:"gpu_hours"`
	IdleHeldHours float64 `json:"idle_held_gpu_hours"`
	PeakGPUs      int     `json:"peak_gpus"`
	Share         float64 `json:"share"` // of the fleet's known GPU-hours, 0 to 1
}

func usageRows(rows []history.Usage) []UsageRow {
	out := make([]UsageRow, 0, len(rows))
	for _, u := range rows {
		out = append(out, UsageRow{User: u.User, GPUHours: round(u.GPUHours, 3), IdleHeldHours: round(u.IdleHeldHours, 3),
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
		Users []UsageRow `json:"users"`
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
	if len(rows) == 0 {
		_, err := fmt.Fprintf(w, "no GPU-hours recorded %s\n", span)
		return err
	}
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

// statusUserHours is a user's GPU-hours per window for status.json.
type StatusHours struct {
	H24 float64 `json:"24h"`
	D7  float64 `json:"7d"`
	D30 float64 `json:"30d"`
}

func hoursOf(m map[string]float64) *StatusHours {
	return &StatusHours{H24: round(m["24h"], 3), D7: round(m["7d"], 3), D30: round(m["30d"], 3)}
}

// StatusIdleHeld is one GPU idle-held now.
type StatusIdleHeld struct {
	Host       string   `json:"host"`
	GPU        string   `json:"gpu"`
	Users      []string `json:"users"`
	Since      string   `json:"since"`
	Hours      float64  `json:"hours"`
	MemUsedMiB float64  `json:"mem_used_mib"`
}

// StatusHistory says what history there is; null in status.json when
// history is off or could not be read.
type StatusHistory struct {
	First     *string `json:"first"`
	Snapshots int     `json:"snapshots"`
}

func statusIdleHeld(h *history.Summary) []StatusIdleHeld {
	out := []StatusIdleHeld{}
	if h == nil {
		return out
	}
	for _, sp := range h.IdleHeld {
		out = append(out, StatusIdleHeld{Host: sp.Host, GPU: sp.GPU, Users: append([]string{}, sp.Users...),
			Since: time.Unix(sp.Start, 0).UTC().Format(time.RFC3339), Hours: round(float64(sp.Seconds())/3600, 3), MemUsedMiB: sp.MemMiB})
	}
	return out
}

func statusHistory(h *history.Summary) *StatusHistory {
	if h == nil {
		return nil
	}
	s := &StatusHistory{Snapshots: h.Snapshots}
	if !h.First.IsZero() {
		t := h.First.UTC().Format(time.RFC3339)
		s.First = &t
	}
	return s
}

// withHistoryUsers adds to the current users everyone with GPU-hours in
// the last 30 days (holding no GPU now), and each one's hours.
func withHistoryUsers(users []StatusUser, h *history.Summary) []StatusUser {
	if h == nil {
		return users
	}
	idx := map[string]int{}
	for i, u := range users {
		idx[u.User] = i
	}
	for _, uh := range h.Users {
		i, ok := idx[uh.User]
		if !ok {
			if uh.GPUHours["30d"] == 0 && uh.IdleHours["30d"] == 0 {
				continue
			}
			users = append(users, StatusUser{User: uh.User, Hosts: []string{}})
			i = len(users) - 1
			idx[uh.User] = i
		}
		users[i].GPUHoursByWindow = hoursOf(uh.GPUHours)
		users[i].IdleGPUHours = hoursOf(uh.IdleHours)
	}
	for i := range users {
		if users[i].GPUHoursByWindow == nil {
			users[i].GPUHoursByWindow, users[i].IdleGPUHours = &StatusHours{}, &StatusHours{}
		}
	}
	return users
}

// promHistory writes the history's counters and the idle-held gauges.
func promHistory(family func(name, typ, help string), sample func(name string, labels []string, v float64), h *history.Summary) {
	if h == nil {
		return
	}
	t := h.Totals
	family("gpumon_user_gpu_seconds_total", "counter", "GPU-seconds the user held since history began (a GPU held by n users counts 1/n to each).")
	for _, u := range sortedKeys(t.User) {
		sample("gpumon_user_gpu_seconds_total", []string{"user", u}, t.User[u])
	}
	family("gpumon_user_idle_held_gpu_seconds_total", "counter", "GPU-seconds the user held a GPU idle (utilization at or under idle_util_pct for idle_after or longer).")
	for _, u := range sortedKeys(t.IdleHeld) {
		sample("gpumon_user_idle_held_gpu_seconds_total", []string{"user", u}, t.IdleHeld[u])
	}
	family("gpumon_gpu_state_seconds_total", "counter", "GPU-seconds in each state since history began (down: the last known GPUs of hosts that did not answer).")
	for _, s := range history.States {
		sample("gpumon_gpu_state_seconds_total", []string{"state", s}, t.State[s])
	}
	family("gpumon_idle_job_gpu_seconds_total", "counter", "GPU-seconds used by idlemon's idle-time job alone.")
	sample("gpumon_idle_job_gpu_seconds_total", nil, t.IdleJob)
	family("gpumon_idle_held_gpus", "gauge", "GPUs idle-held now.")
	sample("gpumon_idle_held_gpus", nil, float64(len(h.IdleHeld)))
	family("gpumon_gpu_idle_held_seconds", "gauge", "How long the GPU has been idle-held so far; present only while it is.")
	for _, sp := range h.IdleHeld {
		sample("gpumon_gpu_idle_held_seconds", []string{"host", sp.Host, "gpu", sp.GPU, "users", strings.Join(sp.Users, ",")}, float64(sp.Seconds()))
	}
	// one series per holder, so that an alert carries the user label an
	// Alertmanager route mails (dist/prometheus); only idle-held GPUs have one
	family("gpumon_gpu_idle_held_by_user_seconds", "gauge", "How long the GPU has been idle-held so far, once for each of its holders; present only while it is.")
	for _, sp := range h.IdleHeld {
		for _, u := range sp.Users {
			sample("gpumon_gpu_idle_held_by_user_seconds", []string{"host", sp.Host, "gpu", sp.GPU, "user", u}, float64(sp.Seconds()))
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
