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
	"github.com/gpumon/gpumon/internal/config"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
)

const usage = `usage: render [-c config.ini] [-i load_data.csv] [-o index.html] [-text] [-color auto|always|never]

Reads load_data.csv (fetch's output) and writes a self-contained status page,
status.json and metrics.prom beside it, each replaced atomically. With -text
it prints the cluster as a table instead and writes nothing. A CSV that is
missing or does not parse leaves every previous file as it was.

  -c FILE    config file (default config.ini; if missing, defaults are used)
  -i FILE    input CSV (default: [render] input, else [common] output,
             else load_data.csv)
  -o FILE    output page (default: [render] html, else index.html);
             status.json and metrics.prom go beside it unless [render]
             json and prom say otherwise
  -text      print a table to stdout instead of writing files
  -color W   colour in the table: auto (only on a terminal), always, never
`

// Main is the render command.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("c", "", "")
	inPath := fs.String("i", "", "")
	outPath := fs.String("o", "", "")
	textMode := fs.Bool("text", false, "")
	colorMode := fs.String("color", "auto", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return err
		}
		return &cli.UsageError{Msg: err.Error() + "\n" + strings.TrimRight(usage, "\n")}
	}
	if fs.NArg() > 0 {
		return &cli.UsageError{Msg: fmt.Sprintf("unexpected argument %q\n%s", fs.Arg(0), strings.TrimRight(usage, "\n"))}
	}
	switch *colorMode {
	case "auto", "always", "never":
	default:
		return &cli.UsageError{Msg: fmt.Sprintf("-color %q: want auto, always or never", *colorMode)}
	}

	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	in := cfg.Input
	if *inPath != "" {
		in = *inPath
	}
	now := time.Now()
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
	n, err := loaddata.StreamFile(in, b.Add)
	if errors.Is(err, os.ErrNotExist) {
		return cli.WithHint(err, "run fetch first, or name its output with -i or [common] output")
	}
	if err != nil {
		return cli.WithHint(err, "the previous page and files were left as they were")
	}
	if n == 0 {
		return cli.WithHint(fmt.Errorf("%s: no rows, only a header", in), "the previous page and files were left as they were")
	}
	cl := b.Cluster()
	rep := &Report{Cluster: cl, Config: cfg, Now: now, Loc: time.Local}
	for _, p := range problems {
		rep.Warnings = append(rep.Warnings, reservationWarning(p, cfg.Reservations))
	}

	if *textMode {
		color := *colorMode == "always" || *colorMode == "auto" && isTerminal(stdout)
		if err := Text(stdout, rep, color); err != nil {
			return err
		}
		return reservationError(problems, stderr)
	}

	html := cfg.HTML
	if *outPath != "" {
		html = *outPath
	}
	jsonPath, promPath := cfg.JSON, cfg.Prom
	if !cfg.JSONSet {
		jsonPath = filepath.Join(filepath.Dir(html), config.DefaultJSON)
	}
	if !cfg.PromSet {
		promPath = filepath.Join(filepath.Dir(html), config.DefaultProm)
	}
	if jsonPath != "" && filepath.Dir(jsonPath) == filepath.Dir(html) {
		rep.JSONLink = filepath.Base(jsonPath)
	}
	if promPath != "" && filepath.Dir(promPath) == filepath.Dir(html) {
		rep.PromLink = filepath.Base(promPath)
	}

	// Each output is written straight into a temporary file beside its
	// target, all three at once; only when all three are complete are they
	// renamed over the old ones. A failure before that replaces nothing.
	outputs := []struct {
		path  string
		write func(io.Writer, *Report) error
	}{{jsonPath, JSON}, {promPath, Prom}, {html, HTML}}
	files := make([]*renameio.PendingFile, len(outputs))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Cleanup()
			}
		}
	}()
	for i, o := range outputs {
		if o.path == "" {
			continue
		}
		f, err := pendingFile(o.path)
		if err != nil {
			return err
		}
		files[i] = f
	}
	errs := make([]error, len(outputs))
	var wg sync.WaitGroup
	for i, o := range outputs {
		if files[i] == nil {
			continue
		}
		wg.Go(func() {
			w := bufio.NewWriterSize(files[i], 64<<10)
			if err := o.write(w, rep); err != nil {
				errs[i] = fmt.Errorf("making %s: %w", o.path, err)
				return
			}
			if err := w.Flush(); err != nil {
				errs[i] = fmt.Errorf("writing %s: %w", o.path, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, o := range outputs {
		if files[i] == nil {
			continue
		}
		if err := files[i].CloseAtomicallyReplace(); err != nil {
			return fmt.Errorf("writing %s: %w", o.path, err)
		}
	}
	return reservationError(problems, stderr)
}

// loadConfig reads the config; without -c a missing config.ini means
// defaults, as render needs no settings to work.
func loadConfig(path string) (*config.Render, error) {
	if path == "" {
		cfg, err := config.LoadRender("config.ini")
		if errors.Is(err, os.ErrNotExist) {
			return config.DefaultRender(), nil
		}
		return cfg, err
	}
	cfg, err := config.LoadRender(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, cli.WithHint(err, "copy config.example.ini to %s, or leave -c out to use the defaults", path)
	}
	return cfg, err
}

// WriteFile replaces path with data atomically: a temporary file in the
// same folder, fsync, mode 0644 (nginx must read it), rename. A reader sees
// the old file or the new one, never a part.
func WriteFile(path string, data []byte) error {
	f, err := pendingFile(path)
	if err != nil {
		return err
	}
	defer f.Cleanup()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// pendingFile is a temporary file that CloseAtomicallyReplace renames over
// path (fsynced, mode 0644) and Cleanup removes.
func pendingFile(path string) (*renameio.PendingFile, error) {
	f, err := renameio.NewPendingFile(path, renameio.WithStaticPermissions(0o644))
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
	for _, p := range problems[1:] {
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
	return cli.WithHint(problems[0], "%s", hint)
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
