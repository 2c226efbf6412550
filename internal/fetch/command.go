package fetch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/remote"
	"github.com/gpumon/gpumon/internal/version"
)

const usage = `usage: fetch [-c config.ini] [-o load_data.csv] [-q] [-v] [-every 15s]
       fetch -version

Polls every GPU host in config.ini over SSH (one connection each, all at
once) and writes load_data.csv. Exits 0 when the file was written, even if
some hosts failed (their rows say why); non-zero, leaving the previous file
untouched, when nothing could be written.

  -c FILE   config file (default config.ini)
  -o FILE   output CSV (default: [common] output, else load_data.csv)
  -q        no summary line on stderr (for cron, which mails any output)
  -v        one line per failed host on stderr
  -every D  live mode: stay running, keep one SSH connection per host, poll
            every D (at least 5s), and after each round write the CSV and
            run the render step (page, status.json, metrics.prom, history,
            notifications) in this process; SIGINT or SIGTERM stops it,
            SIGHUP is ignored (restart it to read the config again)
  -version  print the version and exit
`

// Main is the fetch command, without live mode (see MainWith).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return MainWith(ctx, args, stdout, stderr, nil)
}

// PublishRound is live mode's last step: a round's rows made into the
// page, its history and its notifications, as render would make them of
// the CSV the round wrote.
type PublishRound func(ctx context.Context, r *Round) error

// Publishing sets up live mode's PublishRound from the config file at
// configPath, once, for a fetch -every that writes csvPath. cmd/fetch
// gives package render's (package fetch does not import render).
type Publishing func(configPath, csvPath string, every time.Duration, stderr io.Writer) (PublishRound, error)

// MainWith is the fetch command; publishing, when not nil, makes -every
// (live mode) available.
func MainWith(ctx context.Context, args []string, stdout, stderr io.Writer, publishing Publishing) error {
	limitMemory()
	opts, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	cfg, err := LoadConfig(opts.configPath)
	if errors.Is(err, os.ErrNotExist) {
		return cli.WithHint(err, "copy config.example.ini to %s and list your hosts", opts.configPath)
	}
	if err != nil {
		return err
	}
	if opts.output != "" {
		cfg.Output = opts.output
	}
	if opts.every != 0 {
		if publishing == nil {
			return errors.New("-every: this build of fetch has no live mode")
		}
		return runLive(ctx, cfg, opts, publishing, stderr)
	}
	results, err := pollAndWrite(ctx, cfg)
	if err != nil {
		return err
	}
	if opts.verbose {
		for _, r := range results {
			if r.Status != hoststatus.OK {
				fmt.Fprintf(stderr, "fetch: %s: %s: %s\n", r.Host, r.Status, r.Error)
			}
		}
	}
	if !opts.quiet {
		fmt.Fprintf(stderr, "fetch: %s\n", Summary(results))
	}
	return nil
}

type options struct {
	configPath, output string
	quiet, verbose     bool
	version            bool
	every              time.Duration
}

func parseFlags(args []string, stdout io.Writer) (*options, error) {
	var o options
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.configPath, "c", "config.ini", "")
	fs.StringVar(&o.output, "o", "", "")
	fs.BoolVar(&o.quiet, "q", false, "")
	fs.BoolVar(&o.verbose, "v", false, "")
	fs.BoolVar(&o.version, "version", false, "")
	fs.DurationVar(&o.every, "every", 0, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return nil, err
		}
		return nil, &cli.UsageError{Msg: err.Error() + "\n" + strings.TrimRight(usage, "\n")}
	}
	if o.version {
		fmt.Fprintln(stdout, version.Line("fetch"))
		return nil, flag.ErrHelp // exit 0, do nothing else
	}
	if fs.NArg() > 0 {
		return nil, &cli.UsageError{Msg: fmt.Sprintf("unexpected argument %q\n%s", fs.Arg(0), strings.TrimRight(usage, "\n"))}
	}
	if o.every != 0 && o.every < MinEvery {
		return nil, &cli.UsageError{Msg: fmt.Sprintf("-every %s: live mode polls at most every %s", o.every, MinEvery)}
	}
	return &o, nil
}

// pollAndWrite polls every host of cfg once and replaces cfg.Output with the
// result. An error means the file was left as it was.
func pollAndWrite(ctx context.Context, cfg *Config) ([]Result, error) {
	hosts, err := cfg.ResolveHosts(ctx)
	if err != nil {
		return nil, err
	}
	// Two runs at once (a slow run meeting the next cron tick) would race
	// to replace the file with data of different ages: the second one leaves.
	unlock, err := lockFile(cfg.Output + ".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	// A run killed while writing (cron's timeout, a reboot) left its
	// temporary file; under the lock, nobody else is writing one. One that
	// cannot be removed costs disk space, not this run.
	_ = loaddata.RemoveLeftovers(cfg.Output)
	client, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	// idlemon's state file, where a host has one, says which processes are
	// its idle-time job (read in the same round trip; absent is fine).
	p := &Poller{Runner: client, Timeout: cfg.Timeout, Concurrency: cfg.Concurrency, StateFile: cfg.IdlemonState, Containers: cfg.Containers,
		ProcessUtil: cfg.ProcessUtil, KernelLogWindow: cfg.KernelLogWindow(cfg.PollInterval), RecordsOnly: true}
	results := p.Poll(ctx, hosts)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted; %s left as it was", cfg.Output)
	}
	if err := WriteResults(cfg.Output, results); err != nil {
		return nil, fmt.Errorf("writing %s: %w", cfg.Output, err)
	}
	return results, nil
}

// newClient is the SSH side of cfg: ssh_config, host keys, keys.
func newClient(cfg *Config) (*remote.Client, error) {
	home := remote.HomeDir()
	userSSH := cfg.SSHConfig
	if userSSH == "" {
		userSSH = filepath.Join(home, ".ssh", "config")
	}
	sshCfg, err := remote.LoadSSHConfig(userSSH, cfg.SystemSSHConfig)
	if err != nil {
		return nil, err
	}
	return &remote.Client{
		SSHConfig:  sshCfg,
		HostKeys:   remote.NewHostKeys(cfg.StrictHostKeyChecking == StrictAcceptNew),
		Keys:       remote.NewKeys(os.Getenv("SSH_AUTH_SOCK")),
		User:       cfg.User,
		KeyFiles:   cfg.KeyFiles,
		KnownHosts: cfg.KnownHosts,
		Home:       home,
		Timeout:    cfg.Timeout,
		Budget:     remote.NewBudget(remote.DefaultBudget),
	}, nil
}

// lockFile takes an exclusive, non-blocking flock on path for a cron run.
// The lock goes with the process, so a killed run never leaves a stale
// lock behind.
func lockFile(path string) (func(), error) { return lockAs(path, "") }

// lockAs is lockFile for a holder of the given kind: "live" for fetch
// -every, whose lock a cron run meeting it names, since the fix is then
// not to run cron less often but not at all.
func lockAs(path, kind string) (func(), error) {
	// O_NOFOLLOW: a link planted in a folder others can write must not
	// make fetch truncate the file it points to
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		out := strings.TrimSuffix(path, ".lock")
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot write %s: folder %s does not exist", out, filepath.Dir(out))
		}
		if errors.Is(err, syscall.ELOOP) {
			return nil, cli.WithHint(fmt.Errorf("cannot write %s: %s is a symbolic link", out, path), "remove the link; fetch makes the lock file itself")
		}
		return nil, fmt.Errorf("cannot write %s: %w", out, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := io.ReadAll(io.LimitReader(f, 64))
		f.Close()
		return nil, lockedError(strings.TrimSuffix(path, ".lock"), strings.Fields(string(holder)), kind)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strings.TrimSpace(strconv.Itoa(os.Getpid())+" "+kind)+"\n"), 0)
	return func() { f.Close() }, nil
}

// lockedError says who holds the lock of out, from what it wrote there
// (its pid, and "live" for fetch -every), and the fix for a caller of the
// given kind ("" for cron's fetch, "live").
func lockedError(out string, holder []string, kind string) error {
	pid := "?"
	if len(holder) > 0 {
		if _, err := strconv.Atoi(holder[0]); err == nil {
			pid = holder[0]
		}
	}
	holderLive := len(holder) > 1 && holder[1] == "live"
	switch {
	case holderLive && kind == "live":
		return cli.WithHint(fmt.Errorf("another fetch -every (pid %s) is writing %s", pid, out),
			"stop it first (systemctl stop gpumon-live), or give this one another output")
	case holderLive:
		return cli.WithHint(fmt.Errorf("fetch -every (live mode, pid %s) is writing %s", pid, out),
			"live mode polls and renders every round itself: remove this cron line (or stop gpumon-live)")
	case kind == "live":
		return cli.WithHint(fmt.Errorf("a fetch run from cron (pid %s) is writing %s", pid, out),
			"live mode polls and renders every round itself: remove fetch's cron line (crontab -e), then start live mode again")
	}
	return cli.WithHint(fmt.Errorf("another fetch is writing %s (pid %s)", out, pid),
		"this run left the file to it; if runs overlap often, lower timeout or run cron less often")
}

// MemoryLimit is the soft limit on fetch's memory (Go's GOMEMLIMIT, which
// wins when set). What hosts may send is bounded by the output budget, but
// the garbage collector lets the heap grow to twice what is live: with 40
// hosts flooding among 1,000 that was 377 MB. Near the limit it collects
// sooner instead.
const MemoryLimit = 192 << 20

func limitMemory() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(MemoryLimit)
	}
}

// runLive is live mode: SetupLive, then rounds until ctx ends.
func runLive(ctx context.Context, cfg *Config, opts *options, publishing Publishing, stderr io.Writer) error {
	// before anything else: a hang-up while the hosts are resolved must
	// not end the service without a word either
	stopHangups := ignoreHangups(stderr)
	defer stopHangups()
	l, closeAll, err := SetupLive(ctx, cfg, opts.every, publishing, stderr)
	if err != nil {
		return err
	}
	defer closeAll()
	l.Summaries = !opts.quiet
	if opts.verbose {
		publish := l.Publish
		l.Publish = func(ctx context.Context, r *Round) error {
			for _, res := range r.Results {
				if res.Status != hoststatus.OK {
					fmt.Fprintf(stderr, "fetch: %s: %s: %s\n", res.Host, res.Status, res.Error)
				}
			}
			return publish(ctx, r)
		}
	}
	if !opts.quiet {
		fmt.Fprintf(stderr, "fetch: live: %d hosts every %s, writing %s\n", len(l.Hosts), opts.every, cfg.Output)
	}
	return l.Run(ctx)
}

// ignoreHangups keeps live mode running on SIGHUP (a closed terminal, or a
// reload asked out of habit), saying what it does instead: the hosts and
// settings are read once, so a changed config wants a restart, while
// known_hosts is read again whenever it changes.
func ignoreHangups(stderr io.Writer) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				fmt.Fprintln(stderr, "fetch: SIGHUP ignored: live mode reads its config only when it starts; restart it to apply a change (systemctl restart gpumon-live); known_hosts is read again whenever it changes")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// SetupLive prepares live mode over cfg, polling every interval: the
// hosts resolved (once), the lock on cfg.Output taken for the whole life
// of the returned Live (a cron fetch meanwhile fails, saying so), the
// publishing set up, and a remote.Keeper as the Poller's Runner, whose
// back-off starts at one interval, counted from the round that failed.
// closeAll closes the connections and releases the lock, once Run returned.
func SetupLive(ctx context.Context, cfg *Config, every time.Duration, publishing Publishing, stderr io.Writer) (l *Live, closeAll func(), err error) {
	hosts, err := cfg.ResolveHosts(ctx)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := lockAs(cfg.Output+".lock", "live")
	if err != nil {
		return nil, nil, err
	}
	_ = loaddata.RemoveLeftovers(cfg.Output)
	publish, err := publishing(cfg.Path, cfg.Output, every, stderr)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	client, err := newClient(cfg)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	keeper := &remote.Keeper{Client: client, Backoff: every}
	p := &Poller{Runner: keeper, Timeout: cfg.Timeout, Concurrency: cfg.Concurrency, StateFile: cfg.IdlemonState, Containers: cfg.Containers,
		ProcessUtil: cfg.ProcessUtil, KernelLogWindow: cfg.KernelLogWindow(every)}
	l = &Live{Poller: p, Hosts: hosts, Output: cfg.Output, Every: every, Log: stderr, Summaries: true, Publish: publish}
	keeper.Now = l.RoundStart
	closeAll = func() {
		keeper.Close()
		client.Close()
		unlock()
	}
	return l, closeAll, nil
}
