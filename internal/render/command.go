// Package render is the render command: load_data.csv in, a static status
// page (index.html), status.json, metrics.prom and their text twin for
// curl (index.txt, free.txt) out, or a table on the terminal. See Main.
package render

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/notify"
	"github.com/gpumon/gpumon/internal/publish"
	"github.com/gpumon/gpumon/internal/reservations"
	"github.com/gpumon/gpumon/internal/sitefiles"
	"github.com/gpumon/gpumon/internal/version"
)

const usage = `usage: render [-c config.ini] [-i load_data.csv] [-o index.html]
       render -text [-free] [-color auto|always|never]
       render -usage SPAN [-by user|team|job|account|model|host] [-format text|csv|json]
       render -health SPAN [-format text|csv|json]
       render -report month|week|DAYS
       render -import FILE...
       render -notify-test
       render -version

Reads load_data.csv (fetch's output), records it in the history database
([history] db) and writes a self-contained status page, status.json,
metrics.prom, index.txt (the -text table) and free.txt (the free GPUs, a
line per host) beside it, each replaced atomically. A CSV that is missing
or does not parse leaves every previous file as it was.

  -c FILE    config file (default config.ini; if missing, defaults are used)
  -i FILE    input CSV (default: [render] input, else [common] output,
             else load_data.csv)
  -o FILE    output page (default: [render] html, else index.html);
             status.json, metrics.prom, index.txt and free.txt go
             beside it unless [render] json, prom, text and free_text
             say otherwise
  -text      print a table to stdout instead of writing files (records nothing)
  -free      print only the free GPUs and their hosts (implies -text)
  -color W   colour in the table: auto (only on a terminal), always, never
  -usage SPAN
             print each user's GPU-hours, idle-held GPU-hours, peak GPUs
             and share of the fleet over the last SPAN (24h, 7d, 1d12h)
  -by B      with -usage: a line per user, team, job, account, model or
             host, with effective and idle-held GPU-hours, kWh, and cost
             and CO2 where [accounting] sets them
  -health SPAN
             print each GPU with health problems over the last SPAN (30d):
             its conditions, how often, how long, first and last seen,
             the latest detail
  -report SPAN
             mail each user their report over SPAN (month: the last
             calendar month; week: the last Monday-to-Sunday week; 30d:
             the last 30 whole days), and each [team_leads] lead their
             team's, through [notify]'s sendmail; each once per span
  -format F  -usage's and -health's format: text (default), csv or json
  -import    record the named load_data.csv files (a backfill, any order)
  -notify-test
             send a test message to every [notify] target and say what
             each answered
  -version   print the version and exit
`

// Main is the render command.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return mainAt(ctx, args, stdout, stderr, time.Now)
}

// mainAt is Main with the clock of a run: tests play many runs over hours.
func mainAt(ctx context.Context, args []string, stdout, stderr io.Writer, clock func() time.Time) error {
	opts, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(opts.configPath)
	if err != nil {
		return err
	}
	if opts.input != "" {
		cfg.Input = opts.input
	}
	if opts.output != "" {
		cfg.HTML = opts.output
	}
	now := clock()
	switch {
	case opts.usage != "" && opts.by != "":
		return usageByReport(ctx, cfg, opts.usage, opts.by, opts.format, now, stdout)
	case opts.usage != "":
		return usageReport(ctx, cfg, opts.usage, opts.format, now, stdout)
	case opts.health != "":
		return healthReport(ctx, cfg, opts.health, opts.format, now, stdout)
	case opts.report != "":
		return mailReports(ctx, cfg, opts.report, now, stdout, stderr, &notify.Sendmail{Argv: cfg.Notify.Sendmail})
	case opts.imports:
		return importFiles(ctx, cfg, opts.files, now, stdout)
	case opts.notifyTest:
		return notifyTest(ctx, cfg, now, stdout)
	}
	if !opts.text && !opts.free {
		return renderFiles(ctx, cfg, now, stderr)
	}
	// -text only looks: it records nothing (it may run as anyone)
	rep, problems, err := buildReport(cfg, csvRows(cfg.Input), now, time.Local)
	if err != nil {
		return err
	}
	err = writeTextWith(stdout, rep, textOptions{Color: opts.color == "always" || opts.color == "auto" && isTerminal(stdout),
		Free: opts.free, Width: terminalWidth(stdout)})
	if err != nil {
		return err
	}
	return cli.Join(reservationError(problems), teamError(cfg))
}

// renderFiles is one cron run: cfg.Input read, then published.
func renderFiles(ctx context.Context, cfg *Config, now time.Time, stderr io.Writer) error {
	rep, problems, err := buildReport(cfg, csvRows(cfg.Input), now, time.Local)
	if err != nil {
		return err
	}
	return publishReport(ctx, rep, problems, "render", stderr)
}

// publishReport is the run over rep (package publish): the history
// recorded, the page with its group pages, status.json and metrics.prom
// written each on its own, the notifications sent. The reservations
// file's problems come last: everything was written with a warning. The
// files show rep as [render] commands and users allow (privacy.go).
func publishReport(ctx context.Context, rep *Report, problems []error, prog string, log io.Writer) error {
	cfg := rep.Config
	priv, err := privacyOf(cfg)
	if err != nil {
		return err // nothing written: no file may show what is hidden
	}
	err = publish.Publish(ctx, publish.Config{History: cfg.History, Notify: cfg.Notify}, publish.Run{
		Cluster: rep.Cluster, Now: rep.Now, Loc: rep.Loc, Log: log, Prog: prog,
		Files: func(h publish.History) []publish.File {
			rep.History = h.Summary
			rep.Warnings = append(rep.Warnings, h.Warnings...)
			return siteFiles(priv.apply(rep), pathsOf(cfg))
		},
	})
	return cli.Join(err, reservationError(problems), teamError(rep.Config))
}

// teamError makes render exit non-zero, after everything was written,
// when a [teams] unix group could not be read: cron mails it.
func teamError(cfg *Config) error {
	if len(cfg.TeamProblems) == 0 {
		return nil
	}
	return cli.WithHint(errors.Join(cfg.TeamProblems...), "the page was written with a warning, those users in no team; check the name service (getent group), or list the users in [teams]")
}

// Publisher is render's part of fetch's live mode (fetch -every): the
// config read once, then each round's rows published as a render of the
// CSV the round wrote would publish them, without reading it back.
type Publisher struct {
	cfg    *Config
	stderr io.Writer
}

// NewPublisher reads render's part of the config file at configPath for a
// fetch -every that writes csvPath every interval.
func NewPublisher(configPath, csvPath string, every time.Duration, stderr io.Writer) (*Publisher, error) {
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return nil, err
	}
	cfg.Input = csvPath
	cfg.LiveEvery = every
	if !cfg.RefreshSet && every < cfg.Refresh {
		// the page is rewritten every interval: reload it as often
		cfg.Refresh = every
	}
	return &Publisher{cfg: cfg, stderr: stderr}, nil
}

// Publish publishes a round's rows, read at now: the same files, history
// and notifications as render makes of the CSV.
func (p *Publisher) Publish(ctx context.Context, rows Rows, now time.Time) error {
	rep, problems, err := buildReport(p.cfg, rows, now, time.Local)
	if err != nil {
		return err
	}
	return publishReport(ctx, rep, problems, "fetch", p.stderr)
}

type options struct {
	configPath, input, output string
	text                      bool
	free                      bool
	usage, format             string // -usage SPAN, -format text|csv|json
	health                    string // -health SPAN
	report                    string // -report SPAN
	imports                   bool   // -import: the arguments are files to record
	notifyTest                bool
	files                     []string
	color                     string // auto, always or never
	version                   bool

	// -by, with -usage: "" for the lines per user -usage always printed
	by accounting.By
}

func parseFlags(args []string, stdout io.Writer) (*options, error) {
	var o options
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.configPath, "c", "", "")
	fs.StringVar(&o.input, "i", "", "")
	fs.StringVar(&o.output, "o", "", "")
	fs.BoolVar(&o.text, "text", false, "")
	fs.BoolVar(&o.free, "free", false, "")
	fs.StringVar(&o.usage, "usage", "", "")
	fs.StringVar(&o.health, "health", "", "")
	fs.StringVar(&o.report, "report", "", "")
	fs.StringVar(&o.format, "format", "text", "")
	by := fs.String("by", "", "")
	fs.BoolVar(&o.imports, "import", false, "")
	fs.BoolVar(&o.notifyTest, "notify-test", false, "")
	fs.StringVar(&o.color, "color", "auto", "")
	fs.BoolVar(&o.version, "version", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return nil, err
		}
		return nil, &cli.UsageError{Msg: err.Error() + "\n" + strings.TrimRight(usage, "\n")}
	}
	if o.version {
		fmt.Fprintln(stdout, version.Line("render"))
		return nil, flag.ErrHelp // exit 0, do nothing else
	}
	if o.imports {
		o.files = fs.Args()
		if len(o.files) == 0 {
			return nil, &cli.UsageError{Msg: "-import: name the load_data.csv files to record"}
		}
	} else if fs.NArg() > 0 {
		return nil, &cli.UsageError{Msg: fmt.Sprintf("unexpected argument %q\n%s", fs.Arg(0), strings.TrimRight(usage, "\n"))}
	}
	modes := 0
	for _, on := range []bool{o.text || o.free, o.usage != "", o.health != "", o.report != "", o.imports, o.notifyTest} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return nil, &cli.UsageError{Msg: "-text (or -free), -usage, -health, -report, -import and -notify-test do different things: use one of them"}
	}
	if err := o.parseBy(*by); err != nil {
		return nil, err
	}
	if err := o.checkFormat(fs); err != nil {
		return nil, err
	}
	switch o.format {
	case "text", "csv", "json":
	default:
		return nil, &cli.UsageError{Msg: fmt.Sprintf("-format %q: want text, csv or json", o.format)}
	}
	switch o.color {
	case "auto", "always", "never":
	default:
		return nil, &cli.UsageError{Msg: fmt.Sprintf("-color %q: want auto, always or never", o.color)}
	}
	return &o, nil
}

// parseBy reads -by, which goes with -usage only.
func (o *options) parseBy(by string) error {
	if by == "" {
		return nil
	}
	if o.usage == "" {
		return &cli.UsageError{Msg: "-by goes with -usage: render -usage SPAN -by " + by}
	}
	var err error
	if o.by, err = accounting.ParseBy(by); err != nil {
		return &cli.UsageError{Msg: "-by " + err.Error()}
	}
	return nil
}

// checkFormat refuses -format where it is not read: render -report month
// -format json would mail every user instead of printing anything.
func (o *options) checkFormat(fs *flag.FlagSet) error {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "format" })
	if set && o.usage == "" && o.health == "" {
		return &cli.UsageError{Msg: "-format goes with -usage or -health: render -usage SPAN -format " + o.format}
	}
	return nil
}

// loadConfig reads the config; without -c a missing config.ini means
// defaults, as render needs no settings to work.
func loadConfig(path string) (*Config, error) {
	if path == "" {
		cfg, err := LoadConfig("config.ini")
		if errors.Is(err, os.ErrNotExist) {
			return DefaultConfig(), nil
		}
		return cfg, err
	}
	cfg, err := LoadConfig(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, cli.WithHint(err, "copy config.example.ini to %s, or leave -c out to use the defaults", path)
	}
	return cfg, err
}

// Rows hands every row of a run to add, and says how many there were;
// an error names what could not be read.
type Rows func(add func(*loaddata.Row)) (int, error)

// csvRows are the rows of the CSV at path (fetch's output), streamed.
func csvRows(path string) Rows {
	return func(add func(*loaddata.Row)) (int, error) {
		n, err := loaddata.StreamFile(path, add)
		if errors.Is(err, os.ErrNotExist) {
			return n, cli.WithHint(err, "run fetch first, or name its output with -i or [common] output")
		}
		return n, err
	}
}

// buildReport makes the report of rows and the reservations file, with
// times shown in loc. The problems of the reservations file are not fatal:
// they become warnings on the page, and the caller's error once everything
// is written.
func buildReport(cfg *Config, rows Rows, now time.Time, loc *time.Location) (*Report, []error, error) {
	var resv []reservations.Reservation
	var problems []error
	if cfg.Reservations != "" {
		resv, problems = reservations.ReadFile(cfg.Reservations, loc)
	}
	// The rows go straight into the cluster: they are never all in memory.
	b := cluster.NewBuilder(cluster.Options{
		FreeMemMiB: cfg.FreeMemMiB, Ignore: cfg.Ignore, Reservations: resv,
		HostNames: cfg.HostNames, GPUNames: cfg.GPUNames, Now: now, Health: cfg.Health,
	})
	n, err := rows(b.Add)
	if _, hinted := errors.AsType[cli.Hinted](err); err != nil && !hinted {
		err = cli.WithHint(err, "the previous page and files were left as they were")
	}
	if err != nil {
		return nil, nil, err
	}
	if n == 0 {
		return nil, nil, cli.WithHint(fmt.Errorf("%s: no rows, only a header", cfg.Input), "the previous page and files were left as they were")
	}
	rep := &Report{Cluster: b.Cluster(), Config: cfg, Now: now, Loc: loc}
	for _, p := range problems {
		rep.Warnings = append(rep.Warnings, reservationWarning(p, cfg.Reservations))
	}
	for _, p := range cfg.TeamProblems {
		rep.Warnings = append(rep.Warnings, "Teams: "+p.Error())
	}
	return rep, problems, nil
}

// paths are the files render writes; "" is one not written.
type paths struct{ html, json, prom, text, freeText string }

// pathsOf says where the files go: status.json, metrics.prom, index.txt
// and free.txt beside the page unless the config names them.
func pathsOf(cfg *Config) paths {
	p := paths{html: cfg.HTML, json: cfg.JSON, prom: cfg.Prom, text: cfg.Text, freeText: cfg.FreeText}
	if !cfg.JSONSet {
		p.json = filepath.Join(filepath.Dir(cfg.HTML), DefaultJSON)
	}
	if !cfg.PromSet {
		p.prom = filepath.Join(filepath.Dir(cfg.HTML), DefaultProm)
	}
	if !cfg.TextSet {
		p.text = filepath.Join(filepath.Dir(cfg.HTML), DefaultText)
	}
	if !cfg.FreeTextSet {
		p.freeText = filepath.Join(filepath.Dir(cfg.HTML), DefaultFreeText)
	}
	return p
}

// linkFiles has the page link to status.json, metrics.prom, index.txt
// and free.txt where they sit beside it.
func (rep *Report) linkFiles(p paths) {
	if p.text != "" && filepath.Dir(p.text) == filepath.Dir(p.html) {
		rep.TextLink = filepath.Base(p.text)
	}
	if p.freeText != "" && filepath.Dir(p.freeText) == filepath.Dir(p.html) {
		rep.FreeLink = filepath.Base(p.freeText)
	}
	if p.json != "" && filepath.Dir(p.json) == filepath.Dir(p.html) {
		rep.JSONLink = filepath.Base(p.json)
	}
	if p.prom != "" && filepath.Dir(p.prom) == filepath.Dir(p.html) {
		rep.PromLink = filepath.Base(p.prom)
	}
}

// siteFiles are the files of rep: status.json, metrics.prom, index.txt,
// free.txt and the page with, for a big fleet, its group pages
// (planPages) in GroupsDir beside it. The plan comes first: its warnings
// are in every file.
func siteFiles(rep *Report, p paths) []publish.File {
	rep.linkFiles(p)
	plan := planPages(rep)
	page := publish.File{Path: p.html, Key: "[render] html (or -o)", Write: func(w io.Writer) error { return HTML(w, rep) },
		PagesDir: filepath.Join(filepath.Dir(p.html), groupsDir)}
	if plan.pages != nil {
		page.Write = func(w io.Writer) error { _, err := w.Write(plan.index); return err }
		for _, pg := range plan.pages {
			page.Pages = append(page.Pages, sitefiles.Page{Name: pg.file + ".html", Body: pg.html})
		}
	}
	return []publish.File{
		{Path: p.json, Key: "[render] json", Write: func(w io.Writer) error { return writeJSON(w, rep) }},
		{Path: p.prom, Key: "[render] prom", Write: func(w io.Writer) error { return writeProm(w, rep) }},
		{Path: p.text, Key: "[render] text", Write: func(w io.Writer) error { return writeIndexText(w, rep) }},
		{Path: p.freeText, Key: "[render] free_text", Write: func(w io.Writer) error { return writeFreeText(w, rep) }},
		page,
		{Path: pageStatePath(p.html), Key: "[render] html (or -o)", Write: func(w io.Writer) error { return writePageState(w, rep, plan) }},
	}
}

// reservationWarning is the page's line for a problem with the file.
func reservationWarning(err error, path string) string {
	var pe *reservations.Error
	var more *reservations.MoreProblems
	if errors.As(err, &more) {
		return fmt.Sprintf("Reservations file %s: %s (render's error output lists the first ones)", filepath.Base(path), strings.TrimSuffix(more.Error(), " in "+more.File))
	}
	if errors.As(err, &pe) {
		return fmt.Sprintf("Reservations file %s:%d:%d: %s", filepath.Base(path), pe.Line, pe.Col, pe.Msg)
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("Reservations file %s is missing: reservations are not shown", filepath.Base(path))
	}
	return fmt.Sprintf("Reservations file %s: %v", filepath.Base(path), err)
}

// reservationError makes render exit non-zero, after everything was
// written, when the reservations file had problems: cron mails them, in
// the file's order, the hint after the last.
func reservationError(problems []error) error {
	if len(problems) == 0 {
		return nil
	}
	hint := "the page was written with a warning; the file's other reservations are shown"
	var pe *reservations.Error
	if errors.As(problems[0], &pe) && pe.Whole {
		hint = "the page was written with a warning and without reservations; fix the file"
	}
	if errors.Is(problems[0], os.ErrNotExist) {
		hint = "the page was written without reservations; create the file (an empty {} will do) or remove [render] reservations"
	}
	errs := slices.Clone(problems)
	errs[len(errs)-1] = cli.WithHint(errs[len(errs)-1], "%s", hint)
	return cli.Join(errs...)
}

// isTerminal reports whether w is a character device (a terminal), unless
// NO_COLOR is set or TERM is dumb.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
