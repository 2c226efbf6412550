package simfleet

import (
	"bytes"
	"cmp"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/probe"
)

// GPUHealth is what is wrong with one GPU of a host, as its driver and its
// kernel log tell it: nvidia-smi's health fields read so (where the
// capture has a value for them), and the kernel logs the XIDs.
type GPUHealth struct {
	GPU          int // its index; for an XID, one of DriverOnlyGPUs too
	RemapPending bool
	RemapFailure bool
	// ECCUncorrected is the volatile uncorrectable ECC error count.
	ECCUncorrected int
	// ClockEvents are bits of clocks_event_reasons.active set besides
	// the capture's (0x8 hardware slowdown, 0x40 thermal, 0x80 power brake).
	ClockEvents uint64
	// XIDs are logged by the kernel just before each poll: a GPU that
	// keeps failing, so that every poll sees them (states stay put).
	XIDs []int
	// RecoveryAction is gpu_recovery_action as nvidia-smi prints it
	// ("Reset", "Node Reboot"): what the driver asks after an
	// uncorrectable error, until the GPU is reset; "" keeps the capture's.
	RecoveryAction string
}

// How a host's kernel log reads for the monitor account (HostSpec.KernelLog).
const (
	KernelLogJournal    = ""           // a member of systemd-journal or adm: journalctl -k
	KernelLogDmesg      = "dmesg"      // kernel.dmesg_restrict=0: dmesg -k
	KernelLogUnreadable = "unreadable" // neither
)

// msgKernelLogUnreadable is what the probe says where neither can be read;
// exitKernelLogUnreadable is its exit status.
const (
	msgKernelLogUnreadable  = "not in group systemd-journal or adm; dmesg: read kernel buffer failed: Operation not permitted"
	exitKernelLogUnreadable = 1
)

// xidText is what the NVIDIA driver prints after "NVRM: Xid (PCI:...): N, "
// for the XIDs the fleet logs, as seen in public reports:
//   - 13: leptonai/gpud pull request 46 (a dmesg of an H100 host)
//   - 48: NVIDIA/gpu-operator issue 1146 (syslog of a worker node)
//   - 79: NVIDIA/open-gpu-kernel-modules issue threads and gpud's tests
//     ("pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
//   - 94: leptonai/gpud pull request 1174 (kmsg input)
var xidText = map[int]string{
	13: "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
	48: "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1",
	79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
	94: "pid=1234, name=python3, Contained ECC error",
}

// Bits of clocks_event_reasons.active (health.ClockEventNames).
const (
	ClockHWSlowdown   = 0x8
	ClockHWThermal    = 0x40
	ClockHWPowerBrake = 0x80
)

// checkHealth refuses a GPUHealth the host cannot show: a GPU it does not
// have, an XID without a recorded message, a reading its capture has no
// value for (the RTX captures have no ECC, the H100 with MIG no remapped
// rows), so that a scenario never silently shows nothing.
func (h *host) checkHealth() error {
	all := h.spec.GPUs + h.spec.DriverOnlyGPUs
	for _, gh := range h.spec.Health {
		if gh.GPU < 0 || gh.GPU >= all {
			return fmt.Errorf("health of GPU %d of %d", gh.GPU, all)
		}
		for _, x := range gh.XIDs {
			if _, ok := xidText[x]; !ok {
				return fmt.Errorf("GPU %d: no recorded message for XID %d", gh.GPU, x)
			}
		}
		readings := gh.RemapPending || gh.RemapFailure || gh.ECCUncorrected > 0 || gh.ClockEvents != 0 || gh.RecoveryAction != ""
		if readings && gh.GPU >= h.spec.GPUs {
			return fmt.Errorf("GPU %d: nvidia-smi does not report it, so it has no readings", gh.GPU)
		}
		for _, need := range []struct {
			set   bool
			field string
		}{
			{gh.RemapPending, "remapped_rows.pending"},
			{gh.RemapFailure, "remapped_rows.failure"},
			{gh.ECCUncorrected > 0, "ecc.errors.uncorrected.volatile.total"},
			{gh.ClockEvents != 0, clockField(h.model)},
			{gh.RecoveryAction != "", "gpu_recovery_action"},
		} {
			if need.set && !h.model.hasValue(need.field) {
				return fmt.Errorf("GPU %d: capture %s has no value for %s", gh.GPU, h.model.name, need.field)
			}
		}
	}
	return nil
}

// clockField is the capture's name of the active clock reasons: drivers
// before 530 call them throttle reasons.
func clockField(m *capModel) string {
	if _, ok := m.cols["clocks_event_reasons.active"]; ok {
		return "clocks_event_reasons.active"
	}
	return "clocks_throttle_reasons.active"
}

// hasValue reports whether the capture has a value for field in both
// states: a column that is not a token such as [N/A].
func (m *capModel) hasValue(field string) bool {
	i, _, ok := m.col(field)
	if !ok {
		return false
	}
	for _, row := range m.rows {
		if strings.HasPrefix(row[i], "[") {
			return false
		}
	}
	return true
}

// healthValue is what a GPU with health gh prints for a canonical health
// field whose capture value is v; ok is false for any other field.
func healthValue(gh *GPUHealth, field, v string) (string, bool) {
	yesNo := func(b bool) string {
		if b {
			return "Yes"
		}
		return "No"
	}
	switch field {
	case "remapped_rows.pending":
		return yesNo(gh.RemapPending), gh.RemapPending
	case "remapped_rows.failure":
		return yesNo(gh.RemapFailure), gh.RemapFailure
	case "ecc.errors.uncorrected.volatile.total":
		return strconv.Itoa(gh.ECCUncorrected), gh.ECCUncorrected > 0
	case "gpu_recovery_action":
		return gh.RecoveryAction, gh.RecoveryAction != ""
	case "clocks_event_reasons.active", "clocks_throttle_reasons.active":
		mask, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
		if err != nil || gh.ClockEvents == 0 {
			return v, false
		}
		return fmt.Sprintf("0x%016X", mask|gh.ClockEvents), true
	}
	return v, false
}

// renderDriverGPUs answers the driver_gpus section: the names in the
// driver's folder (/proc/driver/nvidia/gpus), the PCI addresses of every
// GPU the driver lists, nvidia-smi's and those it leaves out, as the
// shell's glob sorts them; where the driver is not loaded there is no
// folder.
func (h *host) renderDriverGPUs(folder string) rendered {
	switch h.spec.Failure {
	case DriverNotLoaded:
		return rendered{[]byte(folder + " is not a folder: is the NVIDIA driver loaded?\n"), 1}
	case NoDevices:
		return rendered{}
	}
	return rendered{h.driverNames, 0}
}

// listDriverGPUs is the names in the driver's folder, one a line.
func (h *host) listDriverGPUs() []byte {
	var b bytes.Buffer
	for _, g := range h.driverGPUs() {
		b.WriteString(g.driverAddr())
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// driverGPUs are the GPUs the driver lists, by PCI address (the buses are
// ascending by index, so that is index order).
func (h *host) driverGPUs() []simGPU {
	return append(append([]simGPU(nil), h.gpus...), h.hidden...)
}

// driverAddr is the GPU's name in /proc/driver/nvidia/gpus.
func (g *simGPU) driverAddr() string { return fmt.Sprintf("0000:%02x:00.0", g.bus) }

// renderKernelLog answers the kernel_log section as the probe's
// journalctl -k -o short-unix (or dmesg -k) and grep would at now: the
// XIDs of the host's GPUs, each logged a second before now, so in the
// window of any poll.
func (h *host) renderKernelLog(now time.Time) rendered {
	if h.spec.KernelLog == KernelLogUnreadable {
		return rendered{[]byte(msgKernelLogUnreadable + "\n"), exitKernelLogUnreadable}
	}
	var b bytes.Buffer
	xids := h.xidLines()
	if h.spec.KernelLog == KernelLogDmesg {
		uptime := h.uptime(now)
		fmt.Fprintf(&b, "source dmesg\nuptime %d\n", int64(uptime.Seconds()))
		for _, l := range xids {
			fmt.Fprintf(&b, "[%12.6f] %s\n", (uptime - time.Second).Seconds(), l)
		}
		return rendered{b.Bytes(), 0}
	}
	at := now.Add(-time.Second)
	b.WriteString("source journal\n")
	for _, l := range xids {
		fmt.Fprintf(&b, "%d.%06d %s kernel: %s\n", at.Unix(), at.Nanosecond()/1000, h.spec.Name, l)
	}
	return rendered{b.Bytes(), 0}
}

// uptime is how long the host has run: since 40 days before Launch.
func (h *host) uptime(now time.Time) time.Duration {
	return now.Sub(h.started) + 40*24*time.Hour
}

// xidLines are the kernel's lines for the host's XIDs, in the order of
// Health and of each GPU's XIDs.
func (h *host) xidLines() []string {
	all := h.driverGPUs()
	var out []string
	for _, gh := range h.spec.Health {
		g := &all[gh.GPU]
		for _, x := range gh.XIDs {
			out = append(out, fmt.Sprintf("NVRM: Xid (PCI:0000:%02x:00): %d, %s", g.bus, x, xidText[x]))
		}
	}
	return out
}

// pmonHeader is what `nvidia-smi pmon -s u` prints first (driver 590).
const pmonHeader = "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n" +
	"# Idx           #    C/G      %      %      %      %      %      %    name \n"

// renderPmon answers `nvidia-smi pmon -c 1 -s u`: a line per process per
// GPU, a line of "-" for a GPU without one. A busy process's sm is its
// SMPct, else an even share of the GPU's utilization; an idle one had no
// sample in the interval ("-"), and under MIG every process reads "-".
func (h *host) renderPmon() rendered {
	var b bytes.Buffer
	b.WriteString(pmonHeader)
	line := func(gpu int, pid, sm, mem, name string) {
		fmt.Fprintf(&b, "%5d %10s %5s %6s %6s %6s %6s %6s %6s    %-15s\n", gpu, pid, typeOf(pid), sm, mem, "-", "-", "-", "-", name)
	}
	for gi := range h.gpus {
		g := &h.gpus[gi]
		if h.spec.Failure == GPULost && gi == h.lostGPU {
			continue
		}
		procs := h.procsByGPU[gi]
		if len(procs) == 0 {
			line(gi, "-", "-", "-", "-")
			continue
		}
		busy := 0
		for _, p := range procs {
			if !p.Idle {
				busy++
			}
		}
		util, utilOK := h.model.intValue(g.state, "utilization.gpu")
		memUtil, memOK := h.model.intValue(g.state, "utilization.memory")
		for _, p := range procs {
			sm, mem := "-", "-"
			if !p.Idle && utilOK && !h.model.mig() {
				n := p.SMPct
				if n == 0 {
					n = util / busy
				}
				sm = strconv.Itoa(n)
				if memOK && util > 0 {
					mem = strconv.Itoa((memUtil*n + util/2) / util)
				}
			}
			line(gi, strconv.Itoa(p.PID), sm, mem, path.Base(p.processName()))
		}
	}
	return rendered{b.Bytes(), 0}
}

func typeOf(pid string) string {
	if pid == "-" {
		return "-"
	}
	return "C"
}

// mig reports whether the capture's GPU runs in MIG mode: pmon then has
// no utilization for any process.
func (m *capModel) mig() bool {
	i, ok := m.cols["mig.mode.current"]
	return ok && m.rows["idle"][i] == "Enabled"
}

// queryFields is what nvidia-smi --query-gpu answers on this host as the
// probe asks it: the GPU fields and the health fields at once; where the
// driver refuses one of them, the health fields its --help-query-gpu
// lists, the clock reasons under one name only, the first the driver
// knows (590 knows both, 465 only the old one).
func (h *host) queryFields(req probe.Request) []string {
	if len(req.HealthFields) == 0 {
		return req.GPUFields
	}
	m := h.model
	fields := append(make([]string, 0, len(req.GPUFields)+len(req.HealthFields)), req.GPUFields...)
	refused := false
	for _, f := range req.HealthFields {
		if _, _, ok := m.col(f); !ok {
			refused = true
		}
	}
	if !refused {
		return append(fields, req.HealthFields...)
	}
	clock := false
	for _, f := range req.HealthFields {
		if _, _, ok := m.col(f); !ok || (m.known != nil && !m.known[f]) {
			continue
		}
		if f == "clocks_event_reasons.active" || f == "clocks_throttle_reasons.active" {
			if clock {
				continue
			}
			clock = true
		}
		fields = append(fields, f)
	}
	return fields
}

// writeHealth writes what the probe prints after the host's sections:
// driver_gpus, kernel_log where asked, and pmon where asked and nvidia-smi
// listed a process.
func (h *host) writeHealth(w probe.Writer, req probe.Request, hasPIDs bool) {
	d := h.renderDriverGPUs(cmp.Or(req.DriverGPUs, probe.DriverGPUsFolder))
	_ = w.Section(probe.SectionDriverGPUs, d.body, d.code)
	if req.KernelLogSince > 0 {
		k := h.renderKernelLog(time.Now())
		_ = w.Section(probe.SectionKernelLog, k.body, k.code)
	}
	if req.ProcessUtil && hasPIDs {
		_ = w.Section(probe.SectionPmon, h.pmon.body, h.pmon.code)
	}
}
