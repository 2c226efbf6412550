package fetch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
	if len(f) > 2 {
		switch f[2] {
		case "faulty":
			specs[n/3].Failure = simfleet.Silent        // accepts, never speaks
			specs[2*n/3].Failure = simfleet.HangForever // session opened, no answer
		case "flood":
			specs[n/2].Failure = simfleet.Flood // prints without end
		default: // floodN: N hosts spread over the fleet print without end
			if k, err := strconv.Atoi(strings.TrimPrefix(f[2], "flood")); err == nil && k > 0 {
				for i := range k {
					specs[i*n/k].Failure = simfleet.Flood
				}
			}
		}
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
// a config.ini that polls them with the given per-host timeout. fault is
// "", "faulty" (a silent and a hung host) or "flood" (one host that prints
// without end).
func startFleetProcess(b *testing.B, n int, fault string, timeoutS int) *fleetProcess {
	b.Helper()
	b.Setenv("HOME", b.TempDir())
	b.Setenv("SSH_AUTH_SOCK", "")
	spec := fmt.Sprintf("%d %s %s", n, b.TempDir(), fault)
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
// dead+hung has one host that accepts and never speaks, and one that opens
// the session and never answers, with timeout = 5: the run should take one
// timeout, not two, and not the sum of the others. flood has one host that
// answers with endless output, with timeout = 10: it is cut off at 4 MiB (remote.MaxOutput),
// long before the timeout; flood40 has 40 such hosts, and every other host
// must still be ok. peak-MB is fetch's peak resident memory during
// the runs (VmHWM, reset before them).
func BenchmarkFetch(b *testing.B) {
	for _, bc := range []struct {
		name     string
		hosts    int
		fault    string
		timeoutS int
		wantOK   string
	}{
		{"hosts=1", 1, "", 20, "1 host: 1 ok"},
		{"hosts=100", 100, "", 20, "100 hosts: 100 ok"},
		{"hosts=1000", 1000, "", 20, "1000 hosts: 1000 ok"},
		{"hosts=1000/dead+hung", 1000, "faulty", 5, "1000 hosts: 998 ok, 2 failed"},
		{"hosts=1000/flood", 1000, "flood", 10, "1000 hosts: 999 ok, 1 failed: gpu-0501 error"},
		{"hosts=1000/flood40", 1000, "flood40", 20, "1000 hosts: 960 ok, 40 failed"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fp := startFleetProcess(b, bc.hosts, bc.fault, bc.timeoutS)
			out := b.TempDir() + "/load_data.csv"
			runtime.GC()
			resetPeakRSS(b)
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
			b.ReportMetric(peakRSSMB(b), "peak-MB")
		})
	}
}

// resetPeakRSS starts a new peak-memory measurement for this process
// (proc(5): writing 5 to clear_refs resets VmHWM).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatalf("resetting the peak RSS: %v", err)
	}
}

// peakRSSMB is this process's peak resident memory since resetPeakRSS, in MB.
func peakRSSMB(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("VmHWM %q: %v", v, err)
			}
			return kib / 1000
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}
