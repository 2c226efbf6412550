package fetch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/probe"
)

// healthGPUs is --query-gpu with the health fields as driver 580 prints
// them (internal/nvsmi/testdata/h100-580.159.04): GPU 0 with 3
// uncorrectable errors, a remap pending and clocks held by hardware
// slowdown and the power cap; GPU 1 idle with a failed remap.
const healthGPUs = `index, uuid, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%], pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, remapped_rows.pending, remapped_rows.failure, clocks_event_reasons.active, clocks_event_reasons.active, gpu_recovery_action
0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 98, 10, 30342, 81559, 51, 412.50, 700.00, [N/A], P0, Enabled, 3, [N/A], Yes, No, 0x000000000000000C, 0x000000000000000C, None
1, GPU-bbbb, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0, 0, 0, 81559, 30, 75.10, 700.00, [N/A], P8, Disabled, 0, No, No, Yes, 0x0000000000000001, 0x0000000000000001, None
`

// pmonLines is `nvidia-smi pmon -c 1 -s u` as driver 580 prints it.
const pmonLines = "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n" +
	"# Idx           #    C/G      %      %      %      %      %      %    name \n"

func pmonLine(gpu, pid int, sm, comm string) string {
	return fmt.Sprintf("    %d     %6d     C     %2s     10      -      -      -      -    %-15s\n", gpu, pid, sm, comm)
}

// healthCellsOf are a row's GPU health cells and process and host cells
// of issue 20.
type healthCellsOf struct {
	GPU, PID                  int64
	BusID, GPUError           string
	PState                    loaddata.Int
	ECCMode                   string
	ECCUncorrected            loaddata.Number
	RetiredPending            loaddata.Tri
	RemapPending, RemapFailed loaddata.Tri
	ClockEvents, XIDs         string
	SMPct                     loaddata.Number
	KernelLog                 string
}

func healthOf(r loaddata.Row) healthCellsOf {
	return healthCellsOf{r.GPUIndex.Value, r.PID.Value, r.GPUBusID, r.GPUError, r.PState, r.ECCMode, r.ECCUncorrected,
		r.RetiredPagesPending, r.RemappedRowsPending, r.RemappedRowsFailure, r.ClockEvents, r.XIDs, r.ProcessSMPct, r.KernelLog}
}

// gpuHealth is the health cells healthGPUs gives each GPU.
func gpuHealth(gpu, pid int64) healthCellsOf {
	if gpu == 0 {
		return healthCellsOf{GPU: 0, PID: pid, BusID: "00000000:18:00.0", PState: loaddata.IntOf(0), ECCMode: "enabled",
			ECCUncorrected: loaddata.Num(3), RemapPending: loaddata.TriOf(true), RemapFailed: loaddata.TriOf(false),
			ClockEvents: "sw_power_cap hw_slowdown"}
	}
	return healthCellsOf{GPU: 1, PID: pid, BusID: "00000000:2A:00.0", PState: loaddata.IntOf(8), ECCMode: "disabled",
		ECCUncorrected: loaddata.Num(0), RetiredPending: loaddata.TriOf(false), RemapPending: loaddata.TriOf(false),
		RemapFailed: loaddata.TriOf(true), ClockEvents: "gpu_idle"}
}

// with returns c with changes applied.
func (c healthCellsOf) with(change func(*healthCellsOf)) healthCellsOf {
	change(&c)
	return c
}

func TestBuildHealth(t *testing.T) {
	threeProcs := appsHeader + "4242, GPU-aaaa, 30000\n5151, GPU-aaaa, 242\n4242, GPU-bbbb, 100\n"
	ps := shellLine + " 4242 alice      7260 python train.py\n 5151 bob         600 python serve.py\n"
	journal := func(lines ...string) section {
		return section{probe.SectionKernelLog, "source journal\n" + strings.Join(lines, "\n"), 0}
	}
	xid := func(bus string, code int, text string) string {
		return fmt.Sprintf("1764165900.123456 gpu01 kernel: NVRM: Xid (PCI:%s): %d, pid=1234, name=python, %s", bus, code, text)
	}
	driver := func(ids ...string) section { return section{probe.SectionDriverGPUs, strings.Join(ids, "\n"), 0} }
	idle := func(sections ...section) hostOutput {
		return hostOutput{gpus: healthGPUs, apps: appsHeader, noPS: true, attrib: sections}
	}
	busy := func(sections ...section) hostOutput {
		return hostOutput{gpus: healthGPUs, apps: threeProcs, ps: ps, attrib: sections}
	}
	procRows := func(change func(gpu, pid int64, c *healthCellsOf)) []healthCellsOf {
		var rows []healthCellsOf
		for _, p := range [][2]int64{{0, 4242}, {0, 5151}, {1, 4242}} {
			rows = append(rows, gpuHealth(p[0], p[1]).with(func(c *healthCellsOf) { change(p[0], p[1], c) }))
		}
		return rows
	}
	noChange := func(int64, int64, *healthCellsOf) {}
	withLog := func(log string) func(*healthCellsOf) { return func(c *healthCellsOf) { c.KernelLog = log } }
	tests := []struct {
		name     string
		out      hostOutput
		want     []healthCellsOf
		wantWarn string // host_error; "" for none
	}{
		{
			name: "readings, nothing else asked",
			out:  idle(),
			want: []healthCellsOf{gpuHealth(0, 0), gpuHealth(1, 0)},
		},
		{
			name: "each process's own SM % by GPU and pid; '-' (no sample: no kernel ran) is 0",
			out:  busy(section{probe.SectionPmon, pmonLines + pmonLine(0, 4242, "98", "python") + pmonLine(0, 5151, "-", "python") + pmonLine(1, 4242, "3", "python"), 0}),
			want: procRows(func(gpu, pid int64, c *healthCellsOf) {
				switch {
				case gpu == 0 && pid == 4242:
					c.SMPct = loaddata.Num(98)
				case gpu == 0:
					c.SMPct = loaddata.Num(0)
				case gpu == 1:
					c.SMPct = loaddata.Num(3)
				}
			}),
		},
		{
			name: "MIG: utilization [N/A], pmon's '-' everywhere is unknown",
			out: hostOutput{gpus: strings.Replace(healthGPUs, "00000000:18:00.0, 98, 10,", "00000000:18:00.0, [N/A], [N/A],", 1), apps: threeProcs, ps: ps,
				attrib: []section{{probe.SectionPmon, pmonLines + pmonLine(0, 4242, "-", "python") + pmonLine(0, 5151, "-", "python") + pmonLine(1, 4242, "3", "python"), 0}}},
			want: procRows(func(gpu, pid int64, c *healthCellsOf) {
				if gpu == 1 {
					c.SMPct = loaddata.Num(3)
				}
			}),
		},
		{
			name: "a forged pmon line (a command named with a newline) loses both lines' figure; the forger's own '-' is its own",
			out: busy(section{probe.SectionPmon, pmonLines + pmonLine(0, 4242, "0", "x") + pmonLine(0, 5151, "-", "evil\n    0       4242     C     99     10      -      -      -      -    x") +
				pmonLine(1, 4242, "3", "python"), 0}),
			want: procRows(func(gpu, pid int64, c *healthCellsOf) {
				switch {
				case gpu == 0 && pid == 5151:
					c.SMPct = loaddata.Num(0)
				case gpu == 1:
					c.SMPct = loaddata.Num(3)
				}
			}),
			wantWarn: "nvidia-smi pmon line 5 skipped: pid 4242 listed twice on GPU 0: its figure is not believed",
		},
		{
			name:     "a pmon that hung",
			out:      busy(section{probe.SectionPmon, "", 124}),
			want:     procRows(noChange),
			wantWarn: "per-process utilization unknown: nvidia-smi pmon did not answer in time (killed by timeout)",
		},
		{
			name:     "a pmon that flooded",
			out:      busy(section{probe.SectionPmon, fmt.Sprintf("gpumon probe: nvidia-smi pmon printed more than %d bytes (cut off on the host)", probe.MaxPmonOutput), 3}),
			want:     procRows(noChange),
			wantWarn: "per-process utilization unknown: gpumon probe: nvidia-smi pmon printed more than 262144 bytes (cut off on the host)",
		},
		{
			name:     "a pmon that printed garbage",
			out:      busy(section{probe.SectionPmon, "\x1b[31mSegmentation fault\n\x00\xff 0 4242 99", 0}),
			want:     procRows(noChange),
			wantWarn: "per-process utilization unknown: no pmon header with gpu, pid and sm columns in the nvidia-smi output: ?[31mSegmentation fault",
		},
		{
			name: "XIDs by bus id, on every row of their GPU, ascending, each once; one for a GPU nobody lists is a warning",
			out: busy(journal(xid("0000:18:00", 79, "GPU has fallen off the bus."), xid("0000:2a:00", 13, "Graphics SM Warp Exception"),
				xid("0000:18:00", 48, "An uncorrectable double bit error"), xid("0000:18:00", 79, "GPU has fallen off the bus."),
				xid("0000:99:00", 79, "GPU has fallen off the bus."))),
			want: procRows(func(gpu, pid int64, c *healthCellsOf) {
				c.KernelLog = "journal"
				c.XIDs = map[int64]string{0: "48,79", 1: "13"}[gpu]
			}),
			wantWarn: "the kernel logged XID 79 for 0000:99:00.0, a GPU that neither nvidia-smi nor the driver lists",
		},
		{
			name: "a user's forged XID (logger's line, a quoted one) is no XID",
			out: idle(journal("1764165900.1 gpu01 alice[4242]: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
				"1764165900.2 gpu01 kernel: usb 1-1: said NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.")),
			want: []healthCellsOf{gpuHealth(0, 0).with(withLog("journal")), gpuHealth(1, 0).with(withLog("journal"))},
		},
		{
			name: "a flood of XID lines is one XID",
			out:  idle(journal(strings.Repeat(xid("0000:2a:00", 13, "Graphics Exception")+"\n", 5000))),
			want: []healthCellsOf{gpuHealth(0, 0).with(withLog("journal")),
				gpuHealth(1, 0).with(func(c *healthCellsOf) { c.KernelLog, c.XIDs = "journal", "13" })},
		},
		{
			name: "dmesg's XIDs",
			out:  idle(section{probe.SectionKernelLog, "source dmesg\nuptime 93310\n[93297.027938] NVRM: Xid (PCI:0000:2a:00): 94, pid=1, name=x, Contained ECC error", 0}),
			want: []healthCellsOf{gpuHealth(0, 0).with(withLog("dmesg")),
				gpuHealth(1, 0).with(func(c *healthCellsOf) { c.KernelLog, c.XIDs = "dmesg", "94" })},
		},
		{
			name: "an unreadable kernel log is said once, in its cell, not as a warning",
			out:  idle(section{probe.SectionKernelLog, "not in group systemd-journal or adm; dmesg: read kernel buffer failed: Operation not permitted", 1}),
			want: []healthCellsOf{
				gpuHealth(0, 0).with(withLog("unreadable: not in group systemd-journal or adm; dmesg: read kernel buffer failed: Operation not permitted")),
				gpuHealth(1, 0).with(withLog("unreadable: not in group systemd-journal or adm; dmesg: read kernel buffer failed: Operation not permitted")),
			},
		},
		{
			name: "a kernel log the probe did not frame as its own",
			out:  idle(section{probe.SectionKernelLog, "\x1b]0;hi\x07 hello", 0}),
			want: []healthCellsOf{
				gpuHealth(0, 0).with(withLog(`unreadable: kernel_log section: "?]0;hi? hello" names no source (journal or dmesg)`)),
				gpuHealth(1, 0).with(withLog(`unreadable: kernel_log section: "?]0;hi? hello" names no source (journal or dmesg)`)),
			},
		},
		{
			name: "a GPU the driver lists and nvidia-smi leaves out is lost, with its XIDs; names that are no bus id are not GPUs",
			out: idle(driver("0000:18:00.0", "0000:2a:00.0", "0000:3b:00.0", "../../etc", "power"),
				journal(xid("0000:3b:00", 79, "GPU has fallen off the bus."))),
			want: []healthCellsOf{gpuHealth(0, 0).with(withLog("journal")), gpuHealth(1, 0).with(withLog("journal")),
				{BusID: "0000:3b:00.0", GPUError: lostGPU, XIDs: "79", KernelLog: "journal"}},
		},
		{
			name: "a GPU nvidia-smi names in a fault is its fault's row only",
			out: hostOutput{gpus: strings.Replace(healthGPUs, "\n1, ", "\nUnable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU\n1, ", 1),
				gpusRC: 15, apps: appsHeader, noPS: true, attrib: []section{driver("0000:05:00.0", "0000:18:00.0", "0000:2a:00.0")}},
			want: []healthCellsOf{gpuHealth(0, 0), gpuHealth(1, 0), {BusID: "0000:05:00.0", GPUError: "GPU is lost; reboot the system to recover this GPU"}},
		},
		{
			name: "a bus id nvidia-smi printed is none: which GPU is lost is unknown",
			out: hostOutput{gpus: strings.Replace(healthGPUs, "00000000:2A:00.0", "[N/A]", 1), apps: appsHeader, noPS: true,
				attrib: []section{driver("0000:18:00.0", "0000:2a:00.0", "0000:3b:00.0")}},
			want:     []healthCellsOf{gpuHealth(0, 0), gpuHealth(1, 0).with(func(c *healthCellsOf) { c.BusID = "[N/A]" })},
			wantWarn: "the driver lists 3 GPUs, nvidia-smi reports 2; which are missing is unknown (nvidia-smi printed a bus id that is none)",
		},
		{
			name: "the driver's folder unreadable: no GPU called lost",
			out:  idle(section{probe.SectionDriverGPUs, "/proc/driver/nvidia/gpus is not a folder: is the NVIDIA driver loaded?", 1}),
			want: []healthCellsOf{gpuHealth(0, 0), gpuHealth(1, 0)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := buildResult("gpu01", "n0nce", tt.out.bytes("n0nce"), nil, at)
			if r.Status != hoststatus.OK || r.Error != tt.wantWarn {
				t.Errorf("status %q, host_error %q, want ok and %q", r.Status, r.Error, tt.wantWarn)
			}
			got := make([]healthCellsOf, len(r.Rows))
			for i, row := range r.Rows {
				got[i] = healthOf(row)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
		})
	}
}

// Readings a broken or confused driver prints are missing, never a
// reading: no cell that render could take for a condition.
func TestBuildHealthBadReadings(t *testing.T) {
	for _, bad := range []string{"[N/A]", "[Unknown Error]", "ERR!", "-1", "0xFFFFFFFFFFFFFFFF", "18446744073709551616", "0xZZ", ""} {
		t.Run(bad, func(t *testing.T) {
			gpus := strings.Replace(healthGPUs, "P0, Enabled, 3, [N/A], Yes, No, 0x000000000000000C, 0x000000000000000C",
				strings.Repeat(bad+", ", 7)+bad, 1)
			r := buildResult("gpu01", "n", hostOutput{gpus: gpus, apps: appsHeader, noPS: true}.bytes("n"), nil, at)
			if r.Status != hoststatus.OK || len(r.Rows) != 2 {
				t.Fatalf("status %q %q, %d rows", r.Status, r.Error, len(r.Rows))
			}
			want := healthCellsOf{BusID: "00000000:18:00.0"}
			if diff := cmp.Diff(want, healthOf(r.Rows[0])); diff != "" {
				t.Errorf("GPU 0 (-want +got):\n%s", diff)
			}
		})
	}
}

// The probe's answers on a real H100 (driver 580, testdata/h100-580):
// health cells, the process's own SM %, the kernel log's cell.
func TestBuildRealH100(t *testing.T) {
	idle := healthCellsOf{BusID: "00000000:00:06.0", PState: loaddata.IntOf(0), ECCMode: "enabled", ECCUncorrected: loaddata.Num(0),
		RemapPending: loaddata.TriOf(false), RemapFailed: loaddata.TriOf(false), ClockEvents: "gpu_idle", KernelLog: "dmesg"}
	for _, tc := range []struct {
		file string
		want healthCellsOf
	}{
		{"probe-idle.txt", idle},
		{"probe-load.txt", idle.with(func(c *healthCellsOf) { c.PID, c.SMPct, c.ClockEvents = 1514, loaddata.Num(99), "none" })},
		{"probe-nonroot.txt", idle.with(func(c *healthCellsOf) {
			c.KernelLog = "unreadable: no journalctl; dmesg: read kernel buffer failed: Operation not permitted"
		})},
	} {
		t.Run(tc.file, func(t *testing.T) {
			out, err := os.ReadFile(filepath.Join("testdata", "h100-580", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			r := buildResult("gpu01", "devcheck", out, nil, at)
			if r.Status != hoststatus.OK || r.Error != "" || len(r.Rows) != 1 {
				t.Fatalf("status %q %q, %d rows", r.Status, r.Error, len(r.Rows))
			}
			if diff := cmp.Diff(tc.want, healthOf(r.Rows[0])); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
