// Package render is the render command: load_data.csv in, a static status
// page (index.html), status.json and metrics.prom out, or a table on the
// terminal. See Main.
package render

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/renameio/v2"
	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
	"github.com/gpumon/gpumon/internal/version"
)

const usage = `usage: render [-c config.ini] [-i load_data.csv] [-o index.html]
       render -text [-free] [-color auto|always|never]
       render -usage SPAN [-format text|csv|json]
       render -import FILE...
       render -notify-test
       render -version

Reads load_data.csv (fetch's output), records it in the history database
([history] db) and writes a self-contained status page, status.json and
metrics.prom beside it, each replaced atomically. A CSV that is missing or
does not parse leaves every previous file as it was.

  -c FILE    config file (default config.ini; if missing, defaults are used)
  -i FILE    input CSV (default: [render] input, else [common] output,
             else load_data.csv)
  -o FILE    output page (default: [render] html, else index.html);
             status.json and metrics.prom go beside it unless [render]
             json and prom say otherwise
  -text      print a table to stdout instead of writing files (records nothing)
  -free      print only the free GPUs and their hosts (implies -text)
  -color W   colour in the table: auto (only on a terminal), always, never
  -usage SPAN
             print each user's GPU-hours, idle-held GPU-hours, peak GPUs
             and share of the fleet over the last SPAN (24h, 7d, 1d12h)
  -format F  -usage's format: text (default), csv or json
  -import    record the named load_data.csv files (a backfill, any order)
  -notify-test
             send a test message to every [notify] target and say what
             each answered
  -version   print the version and exit
`

// clock is the time of a run; tests that play many runs over hours set it.
var clock = time.Now

// Main is the render command.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	case opts.usage != "":
		return usageReport(ctx, cfg, opts.usage, opts.format, now, stdout)
	case opts.imports:
		return importFiles(ctx, cfg, opts.files, stdout, stderr)
	case opts.notifyTest:
		return notifyTest(ctx, cfg, now, stdout)
	}
	if !opts.text && !opts.free {
		return renderFiles(ctx, cfg, now, stderr)
	}
	// -text only looks: it records nothing (it may run as anyone)
	rep, problems, err := buildReport(cfg, now)
	if err != nil {
		return err
	}
	err = TextWith(stdout, rep, TextOptions{Color: opts.color == "always" || opts.color == "auto" && isTerminal(stdout),
		Free: opts.free, Width: terminalWidth(stdout)})
	if err != nil {
		return err
	}
	return reservationError(problems, stderr)
}

// renderFiles is one render: cfg.Input read, the history recorded, the
// page, status.json and metrics.prom replaced, notifications sent.
func renderFiles(ctx context.Context, cfg *Config, now time.Time, stderr io.Writer) error {
	rep, problems, err := buildReport(cfg, now)
	if err != nil {
		return err
	}
	histErr := recordHistory(ctx, rep)
	if err := writeFiles(rep, pathsOf(cfg)); err != nil {
		return err
	}
	notifyErr := notifyRun(ctx, rep, stderr)
	// every error is printed; the last one is returned, with its hint
	errs := []error{histErr, notifyErr, reservationError(problems, stderr)}
	var last error
	for _, e := range errs {
		if e == nil {
			continue
		}
		if last != nil {
			fmt.Fprintf(stderr, "render: error: %v\n", last)
		}
		last = e
	}
	return last
}

type options struct {
	configPath, input, output string
	text                      bool
	free                      bool
	usage, format             string // -usage SPAN, -format text|csv|json
	imports                   bool   // -import: the arguments are files to record
	notifyTest                bool
	files                     []string
	color                     string // auto, always or never
	version                   bool
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
	fs.StringVar(&o.format, "format", "text", "")
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
	for _, on := range []bool{o.text || o.free, o.usage != "", o.imports, o.notifyTest} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return nil, &cli.UsageError{Msg: "-text (or -free), -usage, -import and -notify-test do different things: use one of them"}
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

// buildReport reads cfg.Input and the reservations file into a report. The
// problems of the reservations file are not fatal: they become warnings on
// the page, and the caller's error once everything is written.
func buildReport(cfg *Config, now time.Time) (*Report, []error, error) {
	var resv []reservations.Reservation
	var problems []error
	if cfg.Reservations != "" {
		resv, problems = reservations.ReadFile(cfg.Reservations, time.Local)
	}
	// The rows go straight into the cluster: they are never all in memory.
	b := cluster.NewBuilder(cluster.Options{
		FreeMemMiB: cfg.FreeMemMiB, Ignore: cfg.Ignore, Reservations: resv,
		HostNames: cfg.HostNames, GPUNames: cfg.GPUNames, Now: now,
	})
	n, err := loaddata.StreamFile(cfg.Input, b.Add)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, cli.WithHint(err, "run fetch first, or name its output with -i or [common] output")
	}
	if err != nil {
		return nil, nil, cli.WithHint(err, "the previous page and files were left as they were")
	}
	if n == 0 {
		return nil, nil, cli.WithHint(fmt.Errorf("%s: no rows, only a header", cfg.Input), "the previous page and files were left as they were")
	}
	rep := &Report{Cluster: b.Cluster(), Config: cfg, Now: now, Loc: time.Local}
	for _, p := range problems {
		rep.Warnings = append(rep.Warnings, reservationWarning(p, cfg.Reservations))
	}
	return rep, problems, nil
}

// paths are the files render writes; "" is one not written.
type paths struct{ html, json, prom string }

// pathsOf says where the files go: status.json and metrics.prom beside the
// page unless the config names them.
func pathsOf(cfg *Config) paths {
	p := paths{html: cfg.HTML, json: cfg.JSON, prom: cfg.Prom}
	if !cfg.JSONSet {
		p.json = filepath.Join(filepath.Dir(cfg.HTML), DefaultJSON)
	}
	if !cfg.PromSet {
		p.prom = filepath.Join(filepath.Dir(cfg.HTML), DefaultProm)
	}
	return p
}

// writeFiles writes the page, status.json and metrics.prom; the page links
// to the other two where they sit beside it.
func writeFiles(rep *Report, p paths) error {
	if p.json != "" && filepath.Dir(p.json) == filepath.Dir(p.html) {
		rep.JSONLink = filepath.Base(p.json)
	}
	if p.prom != "" && filepath.Dir(p.prom) == filepath.Dir(p.html) {
		rep.PromLink = filepath.Base(p.prom)
	}
	// a big fleet's group pages (planPages), renamed before the index that
	// links to them; those of groups gone since the last run are removed
	plan := planPages(rep)
	groups := filepath.Join(filepath.Dir(p.html), GroupsDir)
	keep := map[string]bool{}
	var outs []output
	if plan.pages != nil {
		if err := os.MkdirAll(groups, 0o755); err != nil {
			return fmt.Errorf("cannot make %s: %w", groups, err)
		}
		for _, pg := range plan.pages {
			keep[pg.file+".html"] = true
			outs = append(outs, output{filepath.Join(groups, pg.file+".html"), writeBytes(pg.html)})
		}
		outs = append(outs, output{p.json, JSON}, output{p.prom, Prom}, output{p.html, writeBytes(plan.index)})
	} else {
		outs = []output{{p.json, JSON}, {p.prom, Prom}, {p.html, HTML}}
	}
	if err := replaceAll(rep, outs); err != nil {
		return err
	}
	return removeStalePages(groups, keep)
}

// output is one file to write; an empty path is skipped.
type output struct {
	path  string
	write func(io.Writer, *Report) error
}

// replaceAll writes every output straight into a temporary file beside its
// target, all at once; only when all are complete are they renamed over
// the old ones. A failure before that replaces nothing.
func replaceAll(rep *Report, outs []output) error {
	files := make([]*renameio.PendingFile, len(outs))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Cleanup()
			}
		}
	}()
	for i, o := range outs {
		if o.path == "" {
			continue
		}
		f, err := pendingFile(o.path)
		if err != nil {
			return err
		}
		files[i] = f
	}
	errs := make([]error, len(outs))
	var wg sync.WaitGroup
	for i, o := range outs {
		if files[i] != nil {
			wg.Go(func() { errs[i] = writeOne(files[i], o, rep) })
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, o := range outs {
		if files[i] == nil {
			continue
		}
		if err := files[i].CloseAtomicallyReplace(); err != nil {
			return fmt.Errorf("writing %s: %w", o.path, err)
		}
	}
	return nil
}

func writeOne(f *renameio.PendingFile, o output, rep *Report) error {
	w := bufio.NewWriterSize(f, 64<<10)
	if err := o.write(w, rep); err != nil {
		return fmt.Errorf("making %s: %w", o.path, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", o.path, err)
	}
	return nil
}

// pendingFile is a temporary file that CloseAtomicallyReplace renames over
// path (fsynced, mode 0644, as nginx must read it) and Cleanup removes. It
// is made in path's own folder: renameio would otherwise use $TMPDIR when
// that is on the same file system, leaving stray files there when render
// is killed.
func pendingFile(path string) (*renameio.PendingFile, error) {
	f, err := renameio.NewPendingFile(path, renameio.WithStaticPermissions(0o644), renameio.WithTempDir(filepath.Dir(path)))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot write %s: folder %s does not exist", path, filepath.Dir(path))
		}
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	return f, nil
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
// written, when the reservations file had problems: cron mails it.
func reservationError(problems []error, stderr io.Writer) error {
	if len(problems) == 0 {
		return nil
	}
	// in the file's order: the last one is the error returned, printed
	// last with its hint
	last := len(problems) - 1
	for _, p := range problems[:last] {
		fmt.Fprintf(stderr, "render: error: %v\n", p)
	}
	hint := "the page was written with a warning; the file's other reservations are shown"
	var pe *reservations.Error
	if errors.As(problems[0], &pe) && pe.Whole {
		hint = "the page was written with a warning and without reservations; fix the file"
	}
	if errors.Is(problems[0], os.ErrNotExist) {
		hint = "the page was written without reservations; create the file (an empty {} will do) or remove [render] reservations"
	}
	return cli.WithHint(problems[last], "%s", hint)
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

// Live is the render step of fetch's live mode: the config read once, then
// one render per round (see fetch.Live).
type Live struct {
	cfg    *Config
	stderr io.Writer
}

// NewLive reads render's part of the config file at configPath for a
// fetch -every that writes csvPath every interval.
func NewLive(configPath, csvPath string, every time.Duration, stderr io.Writer) (*Live, error) {
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
	return &Live{cfg: cfg, stderr: stderr}, nil
}

// Render renders the CSV as render would, at time now: same outputs, same
// atomic writes, history and notifications.
func (l *Live) Render(ctx context.Context, now time.Time) error {
	return renderFiles(ctx, l.cfg, now, l.stderr)
}
