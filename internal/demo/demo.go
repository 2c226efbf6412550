// Package demo is `make demo`: a simulated fleet of GPU hosts (in-process
// SSH servers replaying real nvidia-smi captures), fetch and render run over
// it as cron would run them, and the page served on localhost. Nothing here
// touches the user's ~/.ssh or agent.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/fetch"
	"github.com/gpumon/gpumon/internal/render"
	"github.com/gpumon/gpumon/internal/simfleet"
)

const usage = `usage: demo [-addr HOST:PORT] [-dir DIR] [-every DURATION] [-once]

Starts a simulated fleet of GPU hosts, runs fetch and render over it, and
serves the page until Ctrl-C. Everything it writes goes under -dir.

  -addr HOST:PORT   where to serve the page (default 127.0.0.1:8080)
  -dir DIR          working folder (default demo)
  -every DURATION   run fetch and render again this often (default 1m, as cron would)
  -once             fetch and render once, then exit without serving
`

// options are demo's flags.
type options struct {
	addr, dir string
	every     time.Duration
	once      bool
}

func parseFlags(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "")
	fs.StringVar(&o.dir, "dir", "demo", "")
	fs.DurationVar(&o.every, "every", time.Minute, "")
	fs.BoolVar(&o.once, "once", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return o, err
		}
		return o, &cli.UsageError{Msg: err.Error() + "\n" + strings.TrimRight(usage, "\n")}
	}
	if fs.NArg() > 0 {
		return o, &cli.UsageError{Msg: fmt.Sprintf("unexpected argument %q\n%s", fs.Arg(0), strings.TrimRight(usage, "\n"))}
	}
	if o.every < time.Second {
		return o, &cli.UsageError{Msg: "-every must be at least 1s"}
	}
	return o, nil
}

// Main is the demo command.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	// fetch would offer the user's agent keys to the simulated hosts: keep
	// the demo to its own key.
	os.Unsetenv("SSH_AUTH_SOCK")
	var ln net.Listener
	if !o.once {
		// before the fleet starts: an address in use is said at once
		if ln, err = listen(o.addr); err != nil {
			return err
		}
		defer ln.Close()
	}
	site, err := setUp(o.dir)
	if err != nil {
		return err
	}
	stop, err := site.start(stdout)
	if err != nil {
		return err
	}
	defer stop()
	if err := site.firstRun(ctx, stdout, stderr); err != nil {
		return err
	}
	if o.once {
		return nil
	}
	return site.serve(ctx, ln, o.every, stdout, stderr)
}

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, cli.WithHint(fmt.Errorf("%s is in use", addr), "pick another address: make demo ADDR=127.0.0.1:8081")
	}
	return ln, err
}

// start launches the simulated fleet and the webhook receiver, and writes
// the site's config.ini; stop ends both.
func (s *site) start(stdout io.Writer) (stop func(), err error) {
	fleet, err := simfleet.Launch(simfleet.Demo())
	if err != nil {
		return nil, err
	}
	if _, err := fleet.WriteClientFiles(s.fleetDir); err != nil {
		fleet.Close()
		return nil, err
	}
	// a webhook receiver that prints what render tells: the notifications
	// of docs/notify.md, as a chat channel would get them
	hook, err := startHook(stdout)
	if err != nil {
		fleet.Close()
		return nil, err
	}
	stop = func() { hook.Close(); fleet.Close() }
	if err := s.writeConfig(time.Now(), "http://"+hook.Addr().String()+"/hook"); err != nil {
		stop()
		return nil, err
	}
	fmt.Fprintf(stdout, "demo: %d simulated GPU hosts on 127.0.1.x (their files: %s)\n", len(fleet.Hosts()), s.fleetDir)
	return stop, nil
}

// firstRun is the first cron tick, shown as the commands it runs; a new
// demo folder then gets a week of history, and the page is made again
// with it.
func (s *site) firstRun(ctx context.Context, stdout, stderr io.Writer) error {
	_, err := os.Stat(filepath.Join(s.fleetDir, "history.db"))
	fresh := errors.Is(err, os.ErrNotExist)
	if err := s.cycle(ctx, stdout, stderr, true); err != nil {
		return err
	}
	if !fresh {
		return nil
	}
	if err := s.seedHistory(ctx, time.Now(), stdout, stderr); err != nil {
		return fmt.Errorf("seeding the history: %w", err)
	}
	return s.cycle(ctx, io.Discard, stderr, false) // the page, with the week
}

// serve serves the page on ln and runs a cron tick every interval, until
// ctx ends.
func (s *site) serve(ctx context.Context, ln net.Listener, every time.Duration, stdout, stderr io.Writer) error {
	srv := &http.Server{Handler: http.FileServer(http.Dir(s.www)), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "\ndemo: the page is at http://%s/ (also status.json, metrics.prom, index.txt and free.txt: curl -s http://%[1]s/free.txt); refreshed every %s; Ctrl-C to stop\n", ln.Addr(), every)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv.Shutdown(shutdown)
			fmt.Fprintln(stdout, "\ndemo: stopped")
			return nil
		case err := <-served:
			return err
		case <-tick.C:
			if err := s.cycle(ctx, stdout, stderr, false); err != nil && ctx.Err() == nil {
				fmt.Fprintf(stderr, "demo: %v\n", err)
			}
		}
	}
}

type site struct {
	dir, fleetDir, www, csv, config, reservations string
}

func setUp(dir string) (*site, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &site{
		dir:          abs,
		fleetDir:     filepath.Join(abs, "fleet"),
		www:          filepath.Join(abs, "www"),
		csv:          filepath.Join(abs, "load_data.csv"),
		reservations: filepath.Join(abs, "reservations.json"),
	}
	s.config = filepath.Join(s.fleetDir, "config.ini")
	for _, d := range []string{s.fleetDir, s.www} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// writeConfig adds the page's settings and a reservations file, in the format
// labs keep, to the config.ini the fleet wrote.
func (s *site) writeConfig(now time.Time, webhook string) error {
	date := func(d time.Duration) string { return now.Add(d).Format("2006-01-02 15:04") }
	res := map[string]any{
		// per GPU index, and a whole host, as labs write them
		"h200-b03": map[string]any{
			"2": map[string]string{"name": "alice", "date": date(72 * time.Hour), "comment": "NeurIPS rebuttal runs"},
			"3": map[string]string{"name": "bob", "date": date(-24 * time.Hour), "comment": "ended yesterday: ignored"},
		},
		"ws-c02": []map[string]string{{"name": "judy", "date": date(6 * time.Hour), "comment": "course demo this afternoon"}},
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.reservations, append(data, '\n'), 0o644); err != nil {
		return err
	}
	ini, err := os.ReadFile(s.config)
	if err != nil {
		return err
	}
	// The simulated hosts run Docker: ask its ps for the names of the
	// containers GPU processes run in. (A real site sets this only where
	// fetch's account may use the engine's socket, which is root.) The
	// fleet's config.ini ends in [common].
	ini = append(ini, fmt.Sprintf(`containers = docker

[render]
title = gpumon demo cluster
reservations = %s

[host_names]
ws-c01 = ws-c01 (Ivan's workstation)

[notify]
webhook = %s

[accounting]
currency = EUR
kwh_price = 0.25
co2_g_per_kwh = 350

[gpu_hour_prices]
H100 = 2.10
A100 = 1.20
default = 0.50

[teams]
vision = alice, carol
nlp = bob, dave, erin
`, s.reservations, webhook)...)
	return os.WriteFile(s.config, ini, 0o644)
}

// cycle is one cron tick: fetch, then render.
func (s *site) cycle(ctx context.Context, stdout, stderr io.Writer, first bool) error {
	if first {
		fmt.Fprintf(stdout, "\n== fetch -c %s -o %s -v\n", s.rel(s.config), s.rel(s.csv))
	}
	fetchOut := io.Discard
	if first {
		fetchOut = stderr
	}
	if err := fetch.Main(ctx, []string{"-c", s.config, "-o", s.csv, "-v"}, stdout, fetchOut); err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	index := filepath.Join(s.www, "index.html")
	if first {
		fmt.Fprintf(stdout, "\n== render -c %s -i %s -o %s\n", s.rel(s.config), s.rel(s.csv), s.rel(index))
	}
	if err := render.Main(ctx, []string{"-c", s.config, "-i", s.csv, "-o", index}, stdout, stderr); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if first {
		fmt.Fprintf(stdout, "\n== render -text -c %s -i %s\n", s.rel(s.config), s.rel(s.csv))
		if err := render.Main(ctx, []string{"-text", "-c", s.config, "-i", s.csv}, stdout, stderr); err != nil {
			return fmt.Errorf("render -text: %w", err)
		}
	}
	return nil
}

// startHook serves a webhook on 127.0.0.1 that prints each message's
// text as "demo: webhook: ...".
func startHook(stdout io.Writer) (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct{ Text string }
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&msg); err != nil {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(msg.Text, "\n") {
			fmt.Fprintf(stdout, "demo: webhook: %s\n", html.UnescapeString(line))
		}
	})}
	go srv.Serve(ln)
	return ln, nil
}

// rel shows paths as the user typed them: relative to where make runs.
func (s *site) rel(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
