package fetch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpumon/gpumon/internal/simfleet/fleetproc"
)

func TestMain(m *testing.M) {
	fleetproc.ServeIfChild() // the fleet benchmarks' simulated fleet, in a process of its own
	os.Exit(m.Run())
}

// startFleetProcess starts n generated hosts in a child process (so that
// the CPU a benchmark reports is fetch's alone) and returns it with its
// config.ini set to the given per-host timeout. fault is "", "faulty" (a
// silent and a hung host), "flood" or "floodN" (hosts that print without end).
func startFleetProcess(b *testing.B, n int, fault string, timeoutS int) *fleetproc.Proc {
	b.Helper()
	fp := fleetproc.Start(b, n, b.TempDir(), fault)
	fp.SetINI(b, func(ini []byte) []byte {
		return bytes.Replace(ini, []byte("timeout = 5\n"), fmt.Appendf(nil, "timeout = %d\n", timeoutS), 1)
	})
	return fp
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
// answers with endless output, with timeout = 10: it is cut off at 6 MiB (remote.MaxOutput),
// long before the timeout; flood40 has 40 such hosts, and every other host
// must still be ok. amd has every host an AMD one (simfleet.GenerateAMD:
// amd-smi's and rocm-smi's captures in turn). peak-MB is fetch's peak resident memory during
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
		{"hosts=1000/amd", 1000, "amd", 20, "1000 hosts: 1000 ok"},
		{"hosts=10000", 10000, "", 60, "10000 hosts: 10000 ok"},
		{"hosts=1000/dead+hung", 1000, "faulty", 5, "1000 hosts: 998 ok, 2 failed"},
		{"hosts=1000/flood", 1000, "flood", 10, "1000 hosts: 999 ok, 1 failed: gpu-0501 error"},
		{"hosts=1000/flood40", 1000, "flood40", 20, "1000 hosts: 960 ok, 40 failed"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fp := startFleetProcess(b, bc.hosts, bc.fault, bc.timeoutS)
			out := b.TempDir() + "/load_data.csv"
			runtime.GC()
			resetPeakRSS(b)
			fleetBefore, selfBefore := fp.CPU(b), cpuTime(syscall.RUSAGE_SELF)
			for b.Loop() {
				var stderr bytes.Buffer
				if err := Main(context.Background(), []string{"-c", fp.INI, "-o", out}, &stderr, &stderr); err != nil {
					b.Fatal(err)
				}
				if !strings.Contains(stderr.String(), bc.wantOK) {
					b.Fatalf("want %q, got: %s", bc.wantOK, stderr.String())
				}
			}
			b.StopTimer()
			reportPerHost(b, bc.hosts, cpuTime(syscall.RUSAGE_SELF)-selfBefore, "fetch-cpu-µs/host")
			b.ReportMetric(float64((fp.CPU(b)-fleetBefore).Microseconds())/float64(b.N*bc.hosts), "fleet-cpu-µs/host")
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
