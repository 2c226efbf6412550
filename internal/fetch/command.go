package fetch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/config"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/remote"
)

const usage = `usage: fetch [-c config.ini] [-o load_data.csv] [-q] [-v]

Polls every GPU host in config.ini over SSH (one connection each, all at
once) and writes load_data.csv. Exits 0 when the file was written, even if
some hosts failed (their rows say why); non-zero, leaving the previous file
untouched, when nothing could be written.

  -c FILE   config file (default config.ini)
  -o FILE   output CSV (default: [common] output, else load_data.csv)
  -q        no summary line on stderr (for cron, which mails any output)
  -v        one line per failed host on stderr
`

// Main is the fetch command.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("c", "config.ini", "")
	outPath := fs.String("o", "", "")
	quiet := fs.Bool("q", false, "")
	verbose := fs.Bool("v", false, "")
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

	cfg, err := config.Load(*configPath)
	if errors.Is(err, os.ErrNotExist) {
		return cli.WithHint(err, "copy config.example.ini to %s and list your hosts", *configPath)
	}
	if err != nil {
		return err
	}
	out := cfg.Output
	if *outPath != "" {
		out = *outPath
	}
	hosts, err := cfg.ResolveHosts(ctx)
	if err != nil {
		return err
	}

	// Two runs at once (a slow run meeting the next cron tick) would race
	// to replace the file with data of different ages: the second one leaves.
	unlock, err := lockFile(out + ".lock")
	if err != nil {
		return err
	}
	defer unlock()

	home := remote.HomeDir()
	userSSH := cfg.SSHConfig
	if userSSH == "" {
		userSSH = filepath.Join(home, ".ssh", "config")
	}
	sshCfg, err := remote.LoadSSHConfig(userSSH, systemSSHConfig)
	if err != nil {
		return err
	}
	client := &remote.Client{
		SSHConfig:  sshCfg,
		HostKeys:   remote.NewHostKeys(cfg.StrictHostKeyChecking == config.StrictAcceptNew),
		Keys:       remote.NewKeys(os.Getenv("SSH_AUTH_SOCK")),
		User:       cfg.User,
		KeyFiles:   cfg.KeyFiles,
		KnownHosts: cfg.KnownHosts,
		Home:       home,
		Timeout:    cfg.Timeout,
		Budget:     remote.NewBudget(remote.DefaultBudget),
	}
	defer client.Close()
	// idlemon's state file, where a host has one, says which processes are
	// its idle-time job (read in the same round trip; absent is fine).
	p := &Poller{Runner: client, Timeout: cfg.Timeout, Concurrency: cfg.Concurrency, StateFile: cfg.IdlemonState}
	results := p.Poll(ctx, hosts)
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted; %s left as it was", out)
	}
	if err := loaddata.WriteFile(out, Rows(results)); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if *verbose {
		for _, r := range results {
			if r.Status != hoststatus.OK {
				fmt.Fprintf(stderr, "fetch: %s: %s: %s\n", r.Host, r.Status, r.Error)
			}
		}
	}
	if !*quiet {
		fmt.Fprintf(stderr, "fetch: %s\n", Summary(results))
	}
	return nil
}

// systemSSHConfig is read after the user's file, as ssh does.
var systemSSHConfig = "/etc/ssh/ssh_config"

// lockFile takes an exclusive, non-blocking flock on path. The lock goes
// with the process, so a killed run never leaves a stale lock behind.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		out := strings.TrimSuffix(path, ".lock")
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot write %s: folder %s does not exist", out, filepath.Dir(out))
		}
		return nil, fmt.Errorf("cannot write %s: %w", out, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		msg := fmt.Sprintf("another fetch is writing %s", strings.TrimSuffix(path, ".lock"))
		if pid := strings.TrimSpace(string(holder)); pid != "" {
			msg += " (pid " + pid + ")"
		}
		return nil, cli.WithHint(errors.New(msg), "this run left the file to it; if runs overlap often, lower timeout or run cron less often")
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}
