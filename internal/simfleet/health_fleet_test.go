package simfleet_test

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/simfleet"
	"github.com/gpumon/gpumon/internal/testenv"
)

// probeRaw runs req's script on the host over SSH and returns what it
// printed; it fails the test when the host has not answered in 10 s.
func (c *client) probeRaw(t *testing.T, name string, req probe.Request) []byte {
	t.Helper()
	conn, err := c.dial(name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := conn.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out bytes.Buffer
	s.Stdin = strings.NewReader(req.Script())
	s.Stdout = &out
	done := make(chan error, 1)
	go func() { done <- s.Run(probe.Command) }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		conn.Close()
		<-done // the session's copy goroutines are done with out
		err = errors.New("no answer in 10s")
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out.Bytes()
}

// sectionOrder lists the sections of an answer in the order they came.
func sectionOrder(nonce string, out []byte) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^@@gpumon:`+nonce+` begin (\S+)$`).FindAllSubmatch(out, -1) {
		names = append(names, string(m[1]))
	}
	return names
}

// With health asked for, a host answers what the probe's script would
// print, in its order: the health fields its driver takes, the driver's
// GPUs, the kernel log's XIDs (or why it cannot be read), and pmon where
// nvidia-smi listed a process.
func TestFleetHealth(t *testing.T) {
	shared := []simfleet.Process{
		{PID: 88001, User: "bob", Command: "python train.py", GPU: 0, MemMiB: 64000, SMPct: 90},
		{PID: 88050, User: "alice", Command: "python3 -m ipykernel_launcher", GPU: 0, MemMiB: 30720, Idle: true},
	}
	f := testenv.StartFleet(t, []simfleet.HostSpec{
		{Name: "shared", Capture: "h200", GPUs: 3, DriverOnlyGPUs: 1, Processes: shared,
			Health: []simfleet.GPUHealth{{GPU: 1, RemapFailure: true}, {GPU: 3, XIDs: []int{79}}}},
		{Name: "old", Capture: "465", GPUs: 1, KernelLog: simfleet.KernelLogUnreadable},
		{Name: "nodriver", Capture: "h200", GPUs: 2, Failure: simfleet.DriverNotLoaded},
	})
	c := newClient(t, f)
	req := probe.NewRequest(1)
	req.HealthFields, req.ProcessUtil, req.KernelLogSince = nvsmi.HealthFields, true, 120
	tests := []struct {
		host       string
		order      []string
		header     string // the gpus section's first line, after index
		driverGPUs string
		kernelLog  string
		kernelExit int
	}{
		{"shared", []string{"gpus", "apps", "ps", "cgroups", "host", "driver_gpus", "kernel_log", "pmon"},
			", pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, remapped_rows.pending, remapped_rows.failure, clocks_event_reasons.active, clocks_event_reasons.active, gpu_recovery_action",
			"0000:18:00.0\n0000:2a:00.0\n0000:3a:00.0\n0000:5d:00.0\n",
			`^source journal\n\d+\.\d{6} shared kernel: NVRM: Xid \(PCI:0000:5d:00\): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus\.\n$`, 0},
		{"old", []string{"gpus", "apps", "host", "driver_gpus", "kernel_log"},
			", pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, clocks_throttle_reasons.active",
			"0000:0c:00.0\n",
			`^not in group systemd-journal or adm; dmesg: read kernel buffer failed: Operation not permitted\n$`, 1},
		{"nodriver", []string{"gpus", "apps", "host", "driver_gpus", "kernel_log"},
			"",
			"/proc/driver/nvidia/gpus is not a folder: is the NVIDIA driver loaded?\n",
			`^source journal\n$`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			out := c.probeRaw(t, tt.host, req)
			if diff := cmp.Diff(tt.order, sectionOrder(req.Nonce, out)); diff != "" {
				t.Errorf("sections (-want +got):\n%s", diff)
			}
			o := probe.ParseOutput(req.Nonce, out)
			gpus := string(o.Sections["gpus"].Body)
			if first, _, _ := strings.Cut(gpus, "\n"); tt.header != "" && !strings.HasSuffix(first, tt.header) {
				t.Errorf("gpus header\n got %s\nwant ...%s", first, tt.header)
			}
			if d := o.Sections["driver_gpus"]; string(d.Body) != tt.driverGPUs || (d.ExitCode != 0) != strings.Contains(tt.driverGPUs, "not a folder") {
				t.Errorf("driver_gpus: exit %d\n%s", d.ExitCode, d.Body)
			}
			k := o.Sections["kernel_log"]
			if !regexp.MustCompile(tt.kernelLog).Match(k.Body) || k.ExitCode != tt.kernelExit {
				t.Errorf("kernel_log: exit %d, want %d\n%s\nwant it to match %s", k.ExitCode, tt.kernelExit, k.Body, tt.kernelLog)
			}
		})
	}
	t.Run("not asked", func(t *testing.T) {
		plain := probe.NewRequest(1)
		want := []string{"gpus", "apps", "ps", "cgroups", "host", "driver_gpus"}
		if diff := cmp.Diff(want, sectionOrder(plain.Nonce, c.probeRaw(t, "shared", plain))); diff != "" {
			t.Errorf("sections (-want +got):\n%s", diff)
		}
	})
}

// A host's pmon takes PmonDelay to sample: an answer with pmon comes no
// sooner, one without it (not asked, or no process) does not wait.
func TestPmonDelay(t *testing.T) {
	procs := []simfleet.Process{{PID: 7, User: "bob", Command: "python x.py", GPU: 0, MemMiB: 100}}
	f := testenv.StartFleet(t, []simfleet.HostSpec{
		{Name: "quick", GPUs: 1, PmonDelay: 300 * time.Millisecond, Processes: procs},
		{Name: "stuck", GPUs: 1, PmonDelay: time.Hour, Processes: procs},
		{Name: "idle", GPUs: 1, PmonDelay: time.Hour},
	})
	c := newClient(t, f)
	pmon := probe.NewRequest(1)
	pmon.ProcessUtil = true
	start := time.Now()
	if o := probe.ParseOutput(pmon.Nonce, c.probeRaw(t, "quick", pmon)); !o.Complete || !o.Has("pmon") {
		t.Errorf("quick: no pmon in the answer: %+v", o)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("the answer with pmon came after %v, before pmon's 300ms", d)
	}
	// an hour's wait would fail these: probeRaw gives up after 10 s
	plain := probe.NewRequest(1)
	for _, tt := range []struct {
		host string
		req  probe.Request
	}{{"stuck", plain}, {"idle", pmon}} {
		if o := probe.ParseOutput(tt.req.Nonce, c.probeRaw(t, tt.host, tt.req)); !o.Complete || o.Has("pmon") {
			t.Errorf("%s: %+v", tt.host, o)
		}
	}
}
