package fetch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/simfleet"
)

// The fleet benchmarks run the simulated fleet in a child process (this test
// binary, re-executed), so that the CPU time they report is fetch's alone.
const fleetChildEnv = "GPUMON_TEST_SIMFLEET"

func TestMain(m *testing.M) {
	if spec := os.Getenv(fleetChildEnv); spec != "" {
		if err := serveFleet(spec); err != nil {
			fmt.Fprintln(os.Stderr, "simfleet child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveFleet is the child: spec is "N DIR [faulty]". It prints the config
// path once every host listens and serves until its stdin closes.
func serveFleet(spec string) error {
	f := strings.Fields(spec)
	if len(f) < 2 {
		return fmt.Errorf("bad spec %q", spec)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return err
	}
	specs := simfleet.Generate(n, 1)
	if len(f) > 2 && f[2] == "faulty" {
		specs[n/3].Failure = simfleet.Silent        // accepts, never speaks
		specs[2*n/3].Failure = simfleet.HangForever // session opened, no answer
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
	fmt.Println(cf.ConfigINI)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // parent gone or done
	return nil
}

type fleetProcess struct {
	cmd *exec.Cmd
	ini string
}

// startFleetProcess starts n generated hosts in a child process and returns
// a config.ini that polls them with the given per-host timeout.
func startFleetProcess(b *testing.B, n int, faulty bool, timeoutS int) *fleetProcess {
	b.Helper()
	b.Setenv("HOME", b.TempDir())
	b.Setenv("SSH_AUTH_SOCK", "")
	spec := fmt.Sprintf("%d %s", n, b.TempDir())
	if faulty {
		spec += " faulty"
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fleetChildEnv+"="+spec)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("simulated fleet: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("simulated fleet did not start: %v", err)
	}
	ini := strings.TrimSpace(line)
	data, err := os.ReadFile(ini)
	if err != nil {
		b.Fatal(err)
	}
	data = bytes.Replace(data, []byte("timeout = 5\n"), fmt.Appendf(nil, "timeout = %d\n", timeoutS), 1)
	if err := os.WriteFile(ini, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return &fleetProcess{cmd: cmd, ini: ini}
}

// cpu is the CPU time the fleet's process has used so far.
func (fp *fleetProcess) cpu(b *testing.B) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", fp.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// fields after the command name, which is in parentheses: utime is the 14th field
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}

// BenchmarkFetch runs the fetch command (config, SSH to every host, parse,
// CSV written) over the simulated fleet: 8 GPUs a host, about half of them
// busy. ms/run is the wall time of one whole run; fetch-cpu-µs/host is the
// CPU fetch spends per host, fleet-cpu-µs/host what the simulated hosts spend
// (their SSH servers share this machine's cores with fetch).
//
// faulty-1000 has one host that accepts and never speaks, and one that opens
// the session and never answers, with timeout = 5: the run should take one
// timeout, not two, and not the sum of the others.
func BenchmarkFetch(b *testing.B) {
	for _, bc := range []struct {
		name     string
		hosts    int
		faulty   bool
		timeoutS int
		wantOK   string
	}{
		{"hosts=1", 1, false, 20, "1 host: 1 ok"},
		{"hosts=100", 100, false, 20, "100 hosts: 100 ok"},
		{"hosts=1000", 1000, false, 20, "1000 hosts: 1000 ok"},
		{"hosts=1000/dead+hung", 1000, true, 5, "1000 hosts: 998 ok, 2 failed"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fp := startFleetProcess(b, bc.hosts, bc.faulty, bc.timeoutS)
			out := b.TempDir() + "/load_data.csv"
			fleetBefore, selfBefore := fp.cpu(b), cpuTime(syscall.RUSAGE_SELF)
			for b.Loop() {
				var stderr bytes.Buffer
				if err := Main(context.Background(), []string{"-c", fp.ini, "-o", out}, &stderr, &stderr); err != nil {
					b.Fatal(err)
				}
				if !strings.Contains(stderr.String(), bc.wantOK) {
					b.Fatalf("want %q, got: %s", bc.wantOK, stderr.String())
				}
			}
			b.StopTimer()
			reportPerHost(b, bc.hosts, cpuTime(syscall.RUSAGE_SELF)-selfBefore, "fetch-cpu-µs/host")
			b.ReportMetric(float64((fp.cpu(b)-fleetBefore).Microseconds())/float64(b.N*bc.hosts), "fleet-cpu-µs/host")
		})
	}
}
