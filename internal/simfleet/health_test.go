package simfleet

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
)

// newTestHost builds a host from spec without listening anywhere.
func newTestHost(t testing.TB, spec HostSpec) *host {
	t.Helper()
	f := &Fleet{byName: map[string]*host{}}
	h, err := f.newHost(0, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.ln.Close() })
	return h
}

func lines(b []byte) []string { return strings.Split(strings.TrimRight(string(b), "\n"), "\n") }

// pmon's lines are the driver's, column for column: the header and a
// process line of the H200 capture's own pmon come out the same.
func TestPmonAsTheDriverPrintsIt(t *testing.T) {
	c := captures.MustLoad("linux-x86_64__nvidia-h200__590.48.01")
	s, ok := c.Section("load", "pmon")
	if !ok {
		t.Fatal("the H200 capture has no pmon")
	}
	real := lines([]byte(s.Body))
	h := newTestHost(t, HostSpec{Name: "h", Capture: "h200", GPUs: 3, Processes: []Process{
		{PID: 10309, User: "u", Command: "./gpu_burn 60", GPU: 0, MemMiB: 1000, SMPct: 99},
		{PID: 88001, User: "bob", Command: "python train.py", GPU: 1, MemMiB: 64000, SMPct: 90},
		{PID: 88050, User: "alice", Command: "python3 -m ipykernel_launcher", GPU: 1, MemMiB: 30720, Idle: true},
	}})
	got := lines(h.renderPmon().body)
	want := []string{
		real[0], real[1],
		"    0      10309     C     99      7      -      -      -      -    gpu_burn       ", // as in the capture
		"    1      88001     C     90      6      -      -      -      -    python         ",
		"    1      88050     C      -      -      -      -      -      -    python3        ",
		"    2          -     -      -      -      -      -      -      -    -              ", // the capture's idle line
	}
	if !strings.Contains(s.Body, want[2]+"\n") {
		t.Fatalf("the capture lacks the line the test copies from it: %q", want[2])
	}
	idle, _ := c.Section("idle", "pmon")
	if !strings.Contains(idle.Body, want[5][5:]+"\n") {
		t.Fatalf("the capture lacks the idle line the test copies from it: %q", want[5])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pmon (-want +got):\n%s", diff)
	}
}

// Under MIG pmon has no utilization for any process; a busy process
// without SMPct gets an even share of its GPU's.
func TestPmonShares(t *testing.T) {
	tests := []struct {
		name, capture string
		wantSM        []string
	}{
		{"shared", "h200", []string{"50", "50"}},
		{"MIG", "h100-mig", []string{"-", "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHost(t, HostSpec{Name: "h", Capture: tt.capture, GPUs: 1, Processes: []Process{
				{PID: 1, User: "a", Command: "x", GPU: 0}, {PID: 2, User: "b", Command: "y", GPU: 0}}})
			var sm []string
			for _, l := range lines(h.renderPmon().body)[2:] {
				sm = append(sm, strings.Fields(l)[3])
			}
			if diff := cmp.Diff(tt.wantSM, sm); diff != "" {
				t.Errorf("sm (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKernelLog(t *testing.T) {
	now := time.Unix(1790428806, 570394000)
	health := []GPUHealth{{GPU: 1, XIDs: []int{48, 79}}}
	tests := []struct {
		name, log string
		want      []string
		code      int
	}{
		{"journal", KernelLogJournal, []string{
			"source journal",
			"1790428805.570394 h kernel: NVRM: Xid (PCI:0000:84:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1",
			"1790428805.570394 h kernel: NVRM: Xid (PCI:0000:84:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
		}, 0},
		{"dmesg", KernelLogDmesg, []string{
			"source dmesg",
			"uptime 3456000",
			"[3455999.000000] NVRM: Xid (PCI:0000:84:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1",
			"[3455999.000000] NVRM: Xid (PCI:0000:84:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
		}, 0},
		{"unreadable", KernelLogUnreadable, []string{msgKernelLogUnreadable}, exitKernelLogUnreadable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHost(t, HostSpec{Name: "h", GPUs: 2, Health: health, KernelLog: tt.log})
			h.started = now
			r := h.renderKernelLog(now)
			if diff := cmp.Diff(tt.want, lines(r.body)); diff != "" || r.code != tt.code {
				t.Errorf("exit %d, want %d; lines (-want +got):\n%s", r.code, tt.code, diff)
			}
		})
	}
}

// The driver lists every GPU, nvidia-smi's and those it leaves out.
func TestDriverGPUs(t *testing.T) {
	tests := []struct {
		name string
		spec HostSpec
		want []string
		code int
	}{
		{"7 of 8 reported", HostSpec{GPUs: 7, DriverOnlyGPUs: 1},
			[]string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}, 0},
		{"one lost with a message", HostSpec{GPUs: 2, Failure: GPULost}, []string{"0000:83:00.0", "0000:84:00.0"}, 0},
		{"no driver", HostSpec{GPUs: 2, Failure: DriverNotLoaded}, []string{"/proc/driver/nvidia/gpus is not a folder: is the NVIDIA driver loaded?"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Name, tt.spec.Capture = "h", "h200"
			h := newTestHost(t, tt.spec)
			r := h.renderDriverGPUs(probe.DriverGPUsFolder)
			if diff := cmp.Diff(tt.want, lines(r.body)); diff != "" || r.code != tt.code {
				t.Errorf("exit %d, want %d; lines (-want +got):\n%s", r.code, tt.code, diff)
			}
			if g := lines(h.renderGPUs(probe.GPUFields).body); tt.spec.Failure == None && len(g) != 1+tt.spec.GPUs {
				t.Errorf("nvidia-smi reports %d GPUs, want %d:\n%s", len(g)-1, tt.spec.GPUs, strings.Join(g, "\n"))
			}
		})
	}
}

// A host answers the health fields, with its GPUs' conditions; a driver
// 465 host refuses remapped_rows.* and clocks_event_reasons.*, and then
// answers what the probe keeps after --help-query-gpu: the others, and the
// clock reasons under their old name.
func TestHealthFields(t *testing.T) {
	tests := []struct {
		name string
		spec HostSpec
		want []string
	}{
		{"H200", HostSpec{Capture: "h200", GPUs: 2, State: "load", Health: []GPUHealth{{GPU: 1, RemapPending: true, RemapFailure: true, ECCUncorrected: 3, ClockEvents: ClockHWSlowdown | ClockHWPowerBrake}}},
			[]string{
				"index, pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, remapped_rows.pending, remapped_rows.failure, clocks_event_reasons.active, clocks_event_reasons.active, gpu_recovery_action",
				"0, P0, Enabled, 0, [N/A], No, No, 0x0000000000000000, 0x0000000000000000, None",
				"1, P0, Enabled, 3, [N/A], Yes, Yes, 0x0000000000000088, 0x0000000000000088, None",
			}},
		{"driver 465", HostSpec{Capture: "465", GPUs: 1, Health: []GPUHealth{{GPU: 0, ClockEvents: ClockHWThermal}}},
			[]string{
				"index, pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, clocks_throttle_reasons.active",
				"0, P8, [N/A], [N/A], [N/A], 0x0000000000000041",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Name = "h"
			h := newTestHost(t, tt.spec)
			fields := h.queryFields(probe.Request{GPUFields: []string{"index"}, HealthFields: nvsmi.HealthFields})
			if diff := cmp.Diff(tt.want, lines(h.renderGPUs(fields).body)); diff != "" {
				t.Errorf("--query-gpu (-want +got):\n%s", diff)
			}
		})
	}
}

// A scenario the host cannot show is refused, not shown as nothing.
func TestHealthRefused(t *testing.T) {
	tests := []struct {
		name string
		spec HostSpec
		want string
	}{
		{"no such GPU", HostSpec{GPUs: 2, Health: []GPUHealth{{GPU: 2, XIDs: []int{79}}}}, "health of GPU 2 of 2"},
		{"an XID without a message", HostSpec{GPUs: 2, Health: []GPUHealth{{GPU: 1, XIDs: []int{31}}}}, "no recorded message for XID 31"},
		{"no ECC on the card", HostSpec{Capture: "rtx-2080-super__595", GPUs: 1, Health: []GPUHealth{{ECCUncorrected: 1}}},
			"has no value for ecc.errors.uncorrected.volatile.total"},
		{"no remapped rows under MIG", HostSpec{Capture: "h100-mig", Health: []GPUHealth{{RemapPending: true}}}, "has no value for remapped_rows.pending"},
		{"readings of a GPU nvidia-smi leaves out", HostSpec{GPUs: 1, DriverOnlyGPUs: 1, Health: []GPUHealth{{GPU: 1, RemapFailure: true}}},
			"nvidia-smi does not report it"},
		{"a kernel log of another kind", HostSpec{KernelLog: "syslog"}, `kernel log "syslog"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Name = "h"
			f := &Fleet{byName: map[string]*host{}}
			_, err := f.newHost(0, tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// What the fleet answers reads as it should with the parsers fetch uses:
// bob's share, alice's idle holding (no sample), the degraded GPU's
// readings.
func TestHealthParses(t *testing.T) {
	h := newTestHost(t, HostSpec{Name: "h", Capture: "h200", GPUs: 2, Processes: []Process{
		{PID: 88001, User: "bob", Command: "python train.py", GPU: 0, MemMiB: 64000, SMPct: 90},
		{PID: 88050, User: "alice", Command: "python3 -m ipykernel_launcher", GPU: 0, MemMiB: 30720, Idle: true},
	}, Health: []GPUHealth{{GPU: 1, RemapPending: true, ECCUncorrected: 2, ClockEvents: ClockHWSlowdown}}})
	pm, err := nvsmi.ParsePmon(h.renderPmon().body)
	if err != nil || len(pm.Skipped) > 0 {
		t.Fatalf("ParsePmon: %v, skipped %v", err, pm.Skipped)
	}
	sm := map[int]nvsmi.Number{}
	for _, s := range pm.Samples {
		sm[s.PID] = s.SMPct
	}
	if sm[88001] != (nvsmi.Number{Value: 90, Valid: true}) || sm[88050].Valid {
		t.Errorf("pmon read as %+v, want bob 90 and alice without a sample", sm)
	}
	rep, err := nvsmi.ParseGPUs(h.renderGPUs(h.queryFields(probe.Request{GPUFields: probe.GPUFields, HealthFields: nvsmi.HealthFields})).body)
	if err != nil || len(rep.GPUs) != 2 || len(rep.Skipped) > 0 {
		t.Fatalf("ParseGPUs: %v %+v", err, rep)
	}
	g := rep.GPUs[1]
	if !g.RemapPending.Value || !g.RemapFailure.Valid || g.RemapFailure.Value || g.ECCUncorrected != (nvsmi.Number{Value: 2, Valid: true}) || g.ClockEventMask&ClockHWSlowdown == 0 {
		t.Errorf("GPU 1 read as %+v", g)
	}
}
