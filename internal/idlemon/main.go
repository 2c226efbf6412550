// Package idlemon is the idlemon command: a daemon that runs low-priority
// jobs on idle GPUs of the machine it runs on and stops them the moment
// anybody else opens one of those GPUs, plus the commands that read its
// state file (status, available) and check its config (check).
package idlemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/idlemon/textfile"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/version"
)

const usage = `usage: idlemon [-c FILE] [run]        run the daemon (what the systemd unit does)
       idlemon [-c FILE] check|-n        check the config and print what it would do
       idlemon [-c FILE | -s STATE] status
       idlemon [-c FILE | -s STATE] available [-l N]
       idlemon -version

idlemon runs the jobs of its config's [process-*] sections on idle GPUs and
stops them (SIGTERM to every process of the job, SIGKILL after grace_seconds)
as soon as anybody else opens one of their GPUs (NVIDIA: /dev/nvidiaN; AMD:
/dev/kfd, then the GPUs its KFD entry shows VRAM on, and /dev/dri/renderD*).

  -c FILE   config file (default /etc/idlemon.ini)
  -n        same as the check command
  -s FILE   state file to read (default: the config's state_file, else
            /run/idlemon/state.json)
  -l N      available: print at most N GPU indices
  -version  print the version and exit

Commands:
  run        the daemon; SIGTERM or SIGINT stops its jobs and exits
  check      validate the config against this machine and print the plan
  status     print the state file for people: each GPU, who holds it, the jobs
  available  print the free GPUs comma-separated, e.g.
             CUDA_VISIBLE_DEVICES=$(idlemon available -l 1) python train.py
             ROCR_VISIBLE_DEVICES=$(idlemon available -l 1) python train.py  (AMD)
`

// Main is idlemon's whole command line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	inv, err := parseArgs(args)
	switch {
	case err != nil:
		return err
	case inv.help:
		fmt.Fprint(stdout, usage)
		return nil
	case inv.version:
		fmt.Fprintln(stdout, version.Line("idlemon"))
		return nil
	}
	switch inv.cmd {
	case "run", "check":
		return runOrCheck(ctx, inv, stdout, stderr)
	case "status", "available":
		return readCommand(inv, stdout)
	default:
		return cli.WithHint(&cli.UsageError{Msg: fmt.Sprintf("unknown command %q", inv.cmd)}, "commands: run, check, status, available (idlemon -h)")
	}
}

// invocation is a command line, parsed.
type invocation struct {
	cmd       string // run (without a command), check, status, available
	cfgPath   string // -c
	statePath string // -s
	limit     int    // -l
	help      bool   // -h, -help: print the usage and nothing else
	version   bool
}

// parseArgs reads the flags before the command, the command, and the
// flags after it (available -l 1, status -s FILE).
func parseArgs(args []string) (invocation, error) {
	var inv invocation
	fs := flag.NewFlagSet("idlemon", flag.ContinueOnError)
	fs.StringVar(&inv.cfgPath, "c", "", "")
	checkOnly := fs.Bool("n", false, "")
	fs.StringVar(&inv.statePath, "s", "", "")
	fs.IntVar(&inv.limit, "l", 0, "")
	fs.BoolVar(&inv.help, "h", false, "")
	fs.BoolVar(&inv.version, "version", false, "")
	if err := parseFlags(fs, args, &inv); err != nil || inv.help || inv.version {
		return inv, err
	}
	inv.cmd = "run"
	rest := fs.Args()
	if len(rest) > 0 {
		inv.cmd, rest = rest[0], rest[1:]
	}
	if *checkOnly {
		if inv.cmd != "run" && inv.cmd != "check" {
			return inv, &cli.UsageError{Msg: "-n is the check command; it goes with no other command"}
		}
		inv.cmd = "check"
	}
	sub := flag.NewFlagSet("idlemon "+inv.cmd, flag.ContinueOnError)
	sub.StringVar(&inv.cfgPath, "c", inv.cfgPath, "")
	sub.StringVar(&inv.statePath, "s", inv.statePath, "")
	if inv.cmd == "available" {
		sub.IntVar(&inv.limit, "l", inv.limit, "")
	}
	if err := parseFlags(sub, rest, &inv); err != nil || inv.help {
		return inv, err
	}
	if sub.NArg() > 0 {
		return inv, &cli.UsageError{Msg: fmt.Sprintf("unexpected %q after %s", sub.Arg(0), inv.cmd)}
	}
	if inv.limit < 0 {
		return inv, &cli.UsageError{Msg: "-l needs a number of GPUs of at least 1"}
	}
	return inv, nil
}

// parseFlags parses args with fs: -help (which fs does not define) asks
// for the usage, any other error is a usage error.
func parseFlags(fs *flag.FlagSet, args []string, inv *invocation) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		inv.help = true
		return nil
	}
	if err != nil {
		return &cli.UsageError{Msg: err.Error()}
	}
	return nil
}

// runOrCheck resolves the config against this machine, then prints the
// plan (check) or runs the daemon until ctx ends (run).
func runOrCheck(ctx context.Context, inv invocation, stdout, stderr io.Writer) error {
	if inv.statePath != "" {
		return &cli.UsageError{Msg: "-s is for status and available; the daemon writes the config's state_file"}
	}
	cfg, err := loadConfig(inv.cfgPath)
	if err != nil {
		return err
	}
	plan, err := resolve(cfg)
	if err != nil {
		return err
	}
	if inv.cmd == "check" {
		plan.describe(stdout)
		return nil
	}
	return runDaemon(ctx, plan, options{Log: stderr})
}

// readCommand is status or available: both read the daemon's state file.
func readCommand(inv invocation, stdout io.Writer) error {
	path, err := stateFileOf(inv)
	if err != nil {
		return err
	}
	f, err := readState(path)
	if err != nil {
		return err
	}
	if inv.cmd == "status" {
		printStatus(stdout, f, time.Now())
		return nil
	}
	return printAvailable(stdout, f, inv.limit)
}

// stateFileOf is the state file to read: -s; else the state_file of the
// config named by -c, which must load; else that of the default config
// if it loads; else idlestate's default.
func stateFileOf(inv invocation) (string, error) {
	if inv.statePath != "" {
		return inv.statePath, nil
	}
	if inv.cfgPath != "" {
		cfg, err := loadConfig(inv.cfgPath)
		if err != nil {
			return "", err
		}
		return cfg.StateFile, nil
	}
	if cfg, err := config.Load(config.DefaultPath); err == nil {
		return cfg.StateFile, nil
	}
	return idlestate.DefaultPath, nil
}

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		path = config.DefaultPath
	}
	cfg, err := config.Load(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, cli.WithHint(err, "copy idlemon.example.ini to %s, or name the file with -c", config.DefaultPath)
	}
	return cfg, err
}

func readState(path string) (*idlestate.File, error) {
	// O_NONBLOCK: a fifo put in the file's place must not hang us (or
	// fetch's SSH round trip); only a regular file is read.
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, cli.WithHint(err, "is idlemon running (systemctl status idlemon)? the state file is named by state_file, or -s")
		}
		return nil, err
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	f, err := idlestate.Decode(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return f, nil
}

// alive says whether idlemon's pid in the file still runs.
func alive(f *idlestate.File) bool {
	if f.PID <= 0 {
		return false
	}
	err := syscall.Kill(f.PID, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// maxCommand is how much of a holder's command line status prints, in
// bytes: a GPU's row stays one terminal line.
const maxCommand = 60

// printStatus prints f for people. Everything in it came from a file
// another process wrote: it reaches the terminal through hosttext, so no
// control sequence, bidi override or broken character gets through.
func printStatus(w io.Writer, f *idlestate.File, now time.Time) {
	host := hosttext.Printable(f.Host)
	if host == "" {
		host = "this host"
	}
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmtDur(now.Sub(t).Truncate(time.Second)) + " ago"
	}
	running := "running"
	if !alive(f) {
		running = "NOT running: this is what it last saw"
	}
	fmt.Fprintf(w, "idlemon on %s: pid %d %s; updated %s\n", host, f.PID, running, ago(f.Updated))
	if f.Paused != "" {
		fmt.Fprintf(w, "jobs paused: %s\n", hosttext.Printable(f.Paused))
	}
	jobOf := map[int]idlestate.JobInfo{}
	for _, j := range f.Jobs {
		if j.Running {
			for _, g := range j.GPUs {
				jobOf[g] = j
			}
		}
	}
	fmt.Fprintf(w, "%-4s %-5s %-9s %s\n", "GPU", "STATE", "SINCE", "HELD BY")
	for _, g := range f.GPUs {
		var who []string
		for _, h := range g.Holders {
			who = append(who, fmt.Sprintf("%s pid %d %s", hosttext.Printable(h.User), h.PID, hosttext.Clip(hosttext.Printable(h.Command), maxCommand)))
		}
		if g.State == idlestate.Job {
			if j, ok := jobOf[g.Index]; ok {
				who = append(who, fmt.Sprintf("our job %s (pid %d, %d processes)", hosttext.Printable(j.Name), j.PGID, len(j.PIDs)))
			}
		}
		fmt.Fprintf(w, "%-4d %-5s %-9s %s\n", g.Index, g.State, ago(g.Since), strings.Join(who, "; "))
	}
	for _, j := range f.Jobs {
		if j.Running {
			group := ""
			if j.Cgroup != "" {
				group = ", cgroup " + hosttext.Printable(j.Cgroup)
			}
			procs := "processes " + joinInts(j.PIDs)
			if len(j.PIDs) == 0 {
				procs = "no process listed yet"
			}
			fmt.Fprintf(w, "job %s on gpu %s: running since %s, pid %d, %s%s\n", hosttext.Printable(j.Name), joinInts(j.GPUs), ago(j.Since), j.PGID, procs, group)
		} else {
			fmt.Fprintf(w, "job %s on gpu %s: not running%s\n", hosttext.Printable(j.Name), joinInts(j.GPUs), waitingWhy(j.Waiting))
		}
	}
}

func printAvailable(w io.Writer, f *idlestate.File, limit int) error {
	if !alive(f) {
		return cli.WithHint(fmt.Errorf("idlemon (pid %d) is not running: its state file is stale", f.PID), "systemctl start idlemon")
	}
	var free []int
	for _, g := range f.GPUs {
		if g.State == idlestate.Idle || g.State == idlestate.Job {
			free = append(free, g.Index)
		}
	}
	sort.Ints(free)
	if limit > 0 && len(free) > limit {
		free = free[:limit]
	}
	if len(free) == 0 {
		return fmt.Errorf("no free GPU: all %d are busy", len(f.GPUs))
	}
	fmt.Fprintln(w, joinInts(free))
	return nil
}

// waitingWhy says why a job waits, for status: ", " and a few words, or "".
func waitingWhy(reason string) string {
	why, ok := map[string]string{
		textfile.BusyGPU:      "somebody else holds one of its GPUs",
		textfile.TerminalUser: "a terminal user is active",
		textfile.OtherJob:     "another job of ours holds one of its GPUs",
		textfile.Backoff:      "it ended by itself and waits to restart",
		textfile.MinIdle:      "its GPUs have not been idle for min_idle_seconds yet",
	}[reason]
	if !ok {
		return ""
	}
	return " (" + why + ")"
}
