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
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/accounting"
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
		// each file is read twice, for its date and to record it: a pipe
		// would be empty the second time, and opening a FIFO nobody
		// writes would wait for ever, SIGTERM or not
		if fi, err := os.Stat(f); err == nil && !fi.Mode().IsRegular() {
			errs = append(errs, fileError(f, errors.New("not a regular file: -import reads only files")))
			continue
		}
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
	store, err := openHistory(cfg)
	return d, store, err
}

// openHistory opens the history a report reads, which must exist; the
// caller closes it.
func openHistory(cfg *Config) (*history.Store, error) {
	if cfg.History.DB == "" {
		return nil, cli.WithHint(errors.New("history is off ([history] db is empty)"), "set [history] db to a file")
	}
	if _, err := os.Stat(cfg.History.DB); err != nil {
		return nil, cli.WithHint(fmt.Errorf("no history at %s", cfg.History.DB), "render records one on every run; or name it in [history] db")
	}
	store, err := cfg.History.Open()
	if err != nil {
		err = fmt.Errorf("history %s: %w", cfg.History.DB, err)
		if owner := otherOwner(cfg.History.DB, os.Geteuid()); owner != "" {
			return nil, cli.WithHint(err, "run it as the account that records the history: sudo -u %s render ...", owner)
		}
		return nil, err
	}
	return store, nil
}

// otherOwner is the name of the account owning path when that is not
// euid: root asking for a report of gpumon's history is refused (history
// opens only its own file), and should be told whose it is. "" when the
// file is euid's or cannot be read.
func otherOwner(path string, euid int) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == euid {
		return ""
	}
	uid := strconv.FormatUint(uint64(st.Uid), 10)
	if u, err := user.LookupId(uid); err == nil && shellSafe(u.Username) {
		return u.Username
	}
	return "'#" + uid + "'" // sudo's -u #uid
}

// shellSafe is a name that can be pasted into a shell as it is.
func shellSafe(name string) bool {
	return name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == "" && name[0] != '-'
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

// usageByReport prints the accounting over the span back from now, a line
// per by (render -usage SPAN -by ...).
func usageByReport(ctx context.Context, cfg *Config, span string, by accounting.By, format string, now time.Time, stdout io.Writer) error {
	if by == accounting.ByTeam {
		if err := cfg.teamsUnread(); err != nil {
			return err
		}
	}
	d, store, err := spanHistory(cfg, "-usage", span, "24h, 7d or 1d12h")
	if err != nil {
		return err
	}
	defer store.Close()
	from, to := history.UsageSpan(d, now)
	l, err := store.LedgerOf(ctx, from, to, ledgerParts(by))
	if err != nil {
		return fmt.Errorf("history %s: %w", cfg.History.DB, err)
	}
	lines := accounting.Aggregate(l, by, &cfg.Accounting)
	if format == "text" && len(lines) == 0 {
		return noUsage(ctx, stdout, store, from, to, now)
	}
	return writeLedger(stdout, l, lines, by, &cfg.Accounting, format)
}

// ledgerParts is the part of the ledger a report by by reads: a month of
// a big fleet's jobs is millions of rows that a report by team never needs.
func ledgerParts(by accounting.By) history.LedgerParts {
	switch by {
	case accounting.ByJob:
		return history.LedgerJobs
	case accounting.ByHost:
		return history.LedgerHosts
	}
	return history.LedgerUsers
}

// writeLedger writes the lines of l per by in format (text, csv or json).
func writeLedger(w io.Writer, l *history.Ledger, lines []accounting.Line, by accounting.By, c *accounting.Config, format string) error {
	switch format {
	case "csv":
		return ledgerCSV(w, lines, by, c)
	case "json":
		return ledgerJSON(w, l, lines, by, c)
	}
	return ledgerText(w, l, lines, by, c)
}

// ledgerColumn is a column of -usage -by's csv and text: its name in each
// and its cell of a line; text "" leaves it out of the text.
type ledgerColumn struct {
	csv, text string
	number    bool // right-aligned in the text
	cell      func(accounting.Line) (csv, text string)
}

// ledgerColumns are the columns of a report per by: the key, a job's user
// and account, the figures, a host's held hours and unheld energy, the
// cost when a price is set and CO2 when its figure is.
func ledgerColumns(lines []accounting.Line, by accounting.By, c *accounting.Config) []ledgerColumn {
	cols := []ledgerColumn{{csv: string(by), text: string(by), cell: func(l accounting.Line) (string, string) {
		return csvCell(l.Key), shownKey(l.Key, by)
	}}}
	if by == accounting.ByJob {
		cols = append(cols,
			ledgerColumn{csv: "user", text: "user", cell: func(l accounting.Line) (string, string) {
				return csvCell(l.User), shownKey(l.User, accounting.ByUser)
			}},
			ledgerColumn{csv: "account", text: "account", cell: func(l accounting.Line) (string, string) {
				return csvCell(l.Account), shownKey(l.Account, accounting.ByAccount)
			}})
	}
	hours := func(csvName, textName string, v func(accounting.Line) float64) ledgerColumn {
		return ledgerColumn{csv: csvName, text: textName, number: true, cell: func(l accounting.Line) (string, string) {
			return csvNumber(v(l)), fmt.Sprintf("%.2f", v(l))
		}}
	}
	cols = append(cols, hours("gpu_hours", "GPU-hours", func(l accounting.Line) float64 { return l.GPUHours }))
	if by == accounting.ByHost {
		cols = append(cols, hours("held_gpu_hours", "held", func(l accounting.Line) float64 { return l.HeldHours }))
	}
	cols = append(cols,
		hours("effective_gpu_hours", "effective", func(l accounting.Line) float64 { return l.EffHours }),
		ledgerColumn{csv: "efficiency", text: "eff.", number: true, cell: func(l accounting.Line) (string, string) {
			return csvNumber(l.Efficiency), efficiencyCell(l.Efficiency) + markSpace(lines, lowEfficiency(c), l, "!")
		}})
	// a host's line has no holder's figures (history.HostRow): a column
	// of zeros would say nobody held its GPUs idle
	if by != accounting.ByHost {
		cols = append(cols, hours("idle_held_gpu_hours", "idle-held", func(l accounting.Line) float64 { return l.IdleHeldHours }))
		unreserved := hours("unreserved_gpu_hours", "", func(l accounting.Line) float64 { return l.UnreservedHours })
		if slices.ContainsFunc(lines, func(l accounting.Line) bool { return l.UnreservedHours > 0 }) {
			unreserved.text = "unreserved"
		}
		cols = append(cols, unreserved, ledgerColumn{csv: "mem_share", cell: func(l accounting.Line) (string, string) {
			return csvNumber(l.MemShare), ""
		}})
	}
	cols = append(cols,
		ledgerColumn{csv: "kwh", text: "kWh", number: true, cell: func(l accounting.Line) (string, string) {
			return csvNumber(l.KWh), kwhCell(l)
		}},
		ledgerColumn{csv: "kwh_coverage", cell: func(l accounting.Line) (string, string) { return csvNumber(l.KWhCoverage), "" }})
	if by == accounting.ByHost {
		cols = append(cols, hours("unheld_kwh", "", func(l accounting.Line) float64 { return l.UnheldKWh }))
	}
	return append(cols, costColumns(lines, c)...)
}

// markSpace is mark when marked(l), else, when some line is marked, a
// space, so that the figures stay aligned; "" when no line is.
func markSpace(lines []accounting.Line, marked func(accounting.Line) bool, l accounting.Line, mark string) string {
	switch {
	case marked(l):
		return mark
	case slices.ContainsFunc(lines, marked):
		return " "
	}
	return ""
}

// lowEfficiency tells a line whose efficiency is under low_efficiency_pct.
func lowEfficiency(c *accounting.Config) func(accounting.Line) bool {
	return func(l accounting.Line) bool { return l.Efficiency*100 < c.LowEfficiencyPct }
}

// unpriced tells a line whose cost leaves GPU-hours out.
func unpriced(l accounting.Line) bool { return l.HasCost && l.UnpricedGPUHours > 0 }

// costColumns are the cost's and CO2's columns, when their figures are set.
func costColumns(lines []accounting.Line, c *accounting.Config) []ledgerColumn {
	var cols []ledgerColumn
	if c.Priced() {
		cols = append(cols,
			ledgerColumn{csv: "cost", text: "cost " + c.Currency, number: true, cell: func(l accounting.Line) (string, string) {
				return csvNumber(l.Cost), fmt.Sprintf("%.2f", l.Cost) + markSpace(lines, unpriced, l, "*")
			}},
			ledgerColumn{csv: "currency", cell: func(accounting.Line) (string, string) { return csvCell(c.Currency), "" }},
			ledgerColumn{csv: "unpriced_gpu_hours", cell: func(l accounting.Line) (string, string) {
				return csvNumber(l.UnpricedGPUHours), ""
			}})
	}
	if c.HasCO2 {
		cols = append(cols, ledgerColumn{csv: "co2_kg", text: "CO2 kg", number: true, cell: func(l accounting.Line) (string, string) {
			return csvNumber(l.CO2Kg), fmt.Sprintf("%.2f", l.CO2Kg)
		}})
	}
	return cols
}

// shownKey is a key as the text shows it: terminal-safe, an empty one
// said in words.
func shownKey(key string, by accounting.By) string {
	if key != "" {
		return clean(key, 40)
	}
	switch by {
	case accounting.ByTeam:
		return "(no team)"
	case accounting.ByAccount:
		return "(no account)"
	}
	return "(unknown)"
}

// efficiencyCell is a percentage, "-" when unknown.
func efficiencyCell(eff float64) string {
	if math.IsNaN(eff) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", eff*100)
}

// kwhCell is the energy, with the share of the GPU-hours it covers when
// under 100 % (rounded down: 99.9 % is not all).
func kwhCell(l accounting.Line) string {
	if l.KWhCoverage < 1 {
		return fmt.Sprintf("%.2f (%d%% known)", l.KWh, int(l.KWhCoverage*100))
	}
	return fmt.Sprintf("%.2f", l.KWh)
}

// csvNumber is a figure as a spreadsheet reads it: plain, to 6 places; ""
// when unknown.
func csvNumber(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(round(v, 6), 'f', -1, 64)
}

// ledgerCSV writes a header line and a line per key.
func ledgerCSV(w io.Writer, lines []accounting.Line, by accounting.By, c *accounting.Config) error {
	cols := ledgerColumns(lines, by, c)
	cw := csv.NewWriter(w)
	row := make([]string, len(cols))
	for i, col := range cols {
		row[i] = col.csv
	}
	cw.Write(row)
	for _, l := range lines {
		for i, col := range cols {
			row[i], _ = col.cell(l)
		}
		cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

// ledgerText is a table: names to the left, figures to the right, and the
// notes its marks call for.
func ledgerText(w io.Writer, l *history.Ledger, lines []accounting.Line, by accounting.By, c *accounting.Config) error {
	var cols []ledgerColumn
	for _, col := range ledgerColumns(lines, by, c) {
		if col.text != "" {
			cols = append(cols, col)
		}
	}
	table := make([][]string, 0, len(lines)+1)
	head := make([]string, len(cols))
	for i, col := range cols {
		head[i] = col.text
	}
	table = append(table, head)
	for _, line := range lines {
		row := make([]string, len(cols))
		for i, col := range cols {
			_, row[i] = col.cell(line)
		}
		table = append(table, row)
	}
	widths := make([]int, len(cols))
	for _, row := range table {
		for i, cell := range row {
			widths[i] = max(widths[i], strWidth(cell))
		}
	}
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "GPU-hours by %s from %s to %s UTC (whole hours)\n", by,
		l.From.UTC().Format("2006-01-02 15:04"), l.To.UTC().Format("2006-01-02 15:04"))
	for _, row := range table {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			if cols[i].number {
				line.WriteString(lpad(cell, widths[i]))
			} else {
				line.WriteString(pad(cell, widths[i]))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	ledgerNotes(b, lines, c)
	return b.Flush()
}

// ledgerNotes explain the text's marks: GPU-hours without a price, low
// efficiency.
func ledgerNotes(w io.Writer, lines []accounting.Line, c *accounting.Config) {
	hours := 0.0
	for _, l := range lines {
		if unpriced(l) {
			hours += l.UnpricedGPUHours
		}
	}
	if hours > 0 {
		fmt.Fprintf(w, "* the cost leaves out %.2f GPU-hours of models without a price ([gpu_hour_prices] has no default)\n", hours)
	}
	if slices.ContainsFunc(lines, lowEfficiency(c)) {
		fmt.Fprintf(w, "! efficiency under %g %% ([accounting] low_efficiency_pct)\n", c.LowEfficiencyPct)
	}
}

// ledgerLine is one line of -usage -by's json; figures that are not
// always there are pointers (null when unknown, left out when not set).
type ledgerLine struct {
	Key              string   `json:"key"`
	User             *string  `json:"user,omitempty"`
	Account          *string  `json:"account,omitempty"`
	GPUHours         float64  `json:"gpu_hours"`
	HeldHours        *float64 `json:"held_gpu_hours,omitempty"`
	EffHours         float64  `json:"effective_gpu_hours"`
	Efficiency       *float64 `json:"efficiency"`
	IdleHeldHours    *float64 `json:"idle_held_gpu_hours,omitempty"`
	UnreservedHours  *float64 `json:"unreserved_gpu_hours,omitempty"`
	MemShare         *float64 `json:"mem_share"`
	KWh              float64  `json:"kwh"`
	KWhCoverage      float64  `json:"kwh_coverage"`
	UnheldKWh        *float64 `json:"unheld_kwh,omitempty"`
	Cost             *float64 `json:"cost,omitempty"`
	UnpricedGPUHours *float64 `json:"unpriced_gpu_hours,omitempty"`
	CO2Kg            *float64 `json:"co2_kg,omitempty"`
}

func ledgerJSON(w io.Writer, l *history.Ledger, lines []accounting.Line, by accounting.By, c *accounting.Config) error {
	known := func(v float64) *float64 {
		if math.IsNaN(v) {
			return nil
		}
		v = round(v, 6)
		return &v
	}
	out := make([]ledgerLine, 0, len(lines))
	for _, line := range lines {
		j := ledgerLine{Key: line.Key, GPUHours: round(line.GPUHours, 6), EffHours: round(line.EffHours, 6),
			Efficiency: known(line.Efficiency), MemShare: known(line.MemShare),
			KWh: round(line.KWh, 6), KWhCoverage: round(line.KWhCoverage, 6)}
		if by != accounting.ByHost { // see ledgerColumns
			j.IdleHeldHours, j.UnreservedHours = known(line.IdleHeldHours), known(line.UnreservedHours)
		}
		if by == accounting.ByJob {
			j.User, j.Account = &line.User, &line.Account
		}
		if by == accounting.ByHost {
			j.HeldHours, j.UnheldKWh = known(line.HeldHours), known(line.UnheldKWh)
		}
		if line.HasCost {
			j.Cost, j.UnpricedGPUHours = known(line.Cost), known(line.UnpricedGPUHours)
		}
		if line.HasCO2 {
			j.CO2Kg = known(line.CO2Kg)
		}
		out = append(out, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		From     string       `json:"from"`
		To       string       `json:"to"`
		By       string       `json:"by"`
		Currency string       `json:"currency"`
		Lines    []ledgerLine `json:"lines"`
	}{l.From.UTC().Format(time.RFC3339), l.To.UTC().Format(time.RFC3339), string(by), c.Currency, out})
}
