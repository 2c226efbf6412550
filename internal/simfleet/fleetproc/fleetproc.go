// Package fleetproc runs a simulated fleet (package simfleet) in a child
// process, the test binary re-executed, for benchmarks whose CPU and
// memory figures must be their own: the fleet's SSH servers would
// otherwise count as the code measured.
//
// A test binary that uses it calls ServeIfChild first thing in TestMain.
package fleetproc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/simfleet"
)

const childEnv = "GPUMON_TEST_SIMFLEET"

// ServeIfChild serves the fleet and exits when this process is the
// child Start made; otherwise it returns at once.
func ServeIfChild() {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	if err := serve(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "simfleet child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serve is the child: spec is "N DIR [FAULT]". It prints the config path
// once every host listens, then the fleet's Stats as JSON for each line on
// its stdin, until stdin closes (the parent done or gone).
func serve(spec string, in io.Reader, out io.Writer) error {
	f := strings.Fields(spec)
	if len(f) < 2 {
		return fmt.Errorf("bad spec %q", spec)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return err
	}
	fault := ""
	if len(f) > 2 {
		fault = f[2]
	}
	specs, err := Specs(n, fault)
	if err != nil {
		return err
	}
	fleet, err := simfleet.Launch(specs)
	if err != nil {
		return err
	}
	defer fleet.Close()
	cf, err := fleet.WriteClientFiles(f[1])
	if err != nil {
		return err
	}
	fmt.Fprintln(out, cf.ConfigINI)
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		js, _ := json.Marshal(fleet.Stats())
		fmt.Fprintln(out, string(js))
	}
	return nil
}

// Specs is the fleet Start launches for n and fault: simfleet.Generate(n,
// 1) with fault's failures (see Start). The parent calls it too, to know
// which hosts fail and how.
func Specs(n int, fault string) ([]simfleet.HostSpec, error) {
	specs := simfleet.Generate(n, 1)
	switch fault {
	case "":
	case "amd":
		// every host an AMD one, answering as amd-smi or rocm-smi does
		specs = simfleet.GenerateAMD(n, 1)
	case "faulty":
		specs[n/3].Failure = simfleet.Silent        // accepts, never speaks
		specs[2*n/3].Failure = simfleet.HangForever // session opened, no answer
	case "flood":
		specs[n/2].Failure = simfleet.Flood // prints without end
	case "pmon1s":
		// every host's pmon samples for a second, as a real one does
		for i := range specs {
			specs[i].PmonDelay = time.Second
		}
	case "tenth":
		// every tenth host, spread over the fleet, in turn refusing
		// connections (down), accepting and never speaking SSH (wedged
		// sshd) and opening the session without ever answering (hung
		// nvidia-smi and its timeout never firing)
		for i := 9; i < n; i += 10 {
			specs[i].Failure = []simfleet.Failure{simfleet.Refuse, simfleet.Silent, simfleet.HangForever}[i/10%3]
		}
	default: // floodN: N hosts spread over the fleet print without end
		k, err := strconv.Atoi(strings.TrimPrefix(fault, "flood"))
		if err != nil || k <= 0 {
			return nil, fmt.Errorf("unknown fault %q", fault)
		}
		for i := range k {
			specs[i*n/k].Failure = simfleet.Flood
		}
	}
	return specs, nil
}

// Proc is a fleet in a child process.
type Proc struct {
	// INI is the config.ini that polls it (its [common] section last, with
	// timeout = 5), in the folder given to Start with the fleet's keys.
	INI    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

// Start launches n generated hosts (simfleet.Generate(n, 1)) in a child
// process writing its client files to dir. fault is "", "faulty" (one
// silent and one hung host), "flood" (one host printing without end),
// "floodN" (N such hosts), "tenth" (every tenth host refusing, silent
// or hung, a third each), "pmon1s" (every host's pmon takes a second,
// as a real one does) or "amd" (every host an AMD one: GenerateAMD).
// HOME and SSH_AUTH_SOCK are cleared for the test, so that fetch uses
// the fleet's files only.
func Start(tb testing.TB, n int, dir, fault string) *Proc {
	tb.Helper()
	tb.Setenv("HOME", tb.TempDir())
	tb.Setenv("SSH_AUTH_SOCK", "")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s %s", childEnv, n, dir, fault))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("simulated fleet: %v", err)
		}
	})
	p := &Proc{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		tb.Fatalf("simulated fleet did not start: %v", err)
	}
	p.INI = strings.TrimSpace(line)
	return p
}

// Stats is what the fleet has served so far.
func (p *Proc) Stats(tb testing.TB) simfleet.Stats {
	tb.Helper()
	if _, err := io.WriteString(p.stdin, "stats\n"); err != nil {
		tb.Fatal(err)
	}
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	var s simfleet.Stats
	if err := json.Unmarshal([]byte(line), &s); err != nil {
		tb.Fatal(err)
	}
	return s
}

// CPU is the CPU time (user and system) the fleet's process has used.
func (p *Proc) CPU(tb testing.TB) time.Duration {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	// the fields after the command name, which is in parentheses: utime
	// and stime are the 14th and 15th of the line
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}

// SetINI rewrites the config file with edit applied to its text.
func (p *Proc) SetINI(tb testing.TB, edit func([]byte) []byte) {
	tb.Helper()
	data, err := os.ReadFile(p.INI)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p.INI, edit(data), 0o644); err != nil {
		tb.Fatal(err)
	}
}
