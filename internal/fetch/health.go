package fetch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/kernlog"
	"github.com/gpumon/gpumon/internal/lines"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
)

// lostGPU is the gpu_error of a GPU the driver lists and nvidia-smi leaves
// out without a word (a GPU it names in a fault has the fault's message).
const lostGPU = "the driver lists this GPU but nvidia-smi does not report it"

// healthCells are a GPU row's health readings, as nvidia-smi gave them:
// render's [health] policy decides what they mean.
func healthCells(r *loaddata.Row, gpu nvsmi.GPU) {
	if gpu.PState.Valid {
		r.PState = loaddata.IntOf(int64(gpu.PState.Value))
	}
	r.ECCMode = gpu.ECCMode
	r.ECCUncorrected = loaddata.Number(gpu.ECCUncorrected)
	r.RetiredPagesPending = loaddata.Tri(gpu.RetiredPagesPending)
	r.RemappedRowsPending = loaddata.Tri(gpu.RemapPending)
	r.RemappedRowsFailure = loaddata.Tri(gpu.RemapFailure)
	if gpu.ClockEventValid {
		r.ClockEvents = health.ClockEvents(gpu.ClockEventMask)
	}
	r.RecoveryAction = gpu.RecoveryAction // one of nvsmi's own words
}

// pmonKey is a process on a GPU, as pmon names it: the GPU's index.
type pmonKey struct{ gpu, pid int }

// readPmon reads each process's own SM utilization, where the host ran
// pmon (there was a process, and process_util is on). A failed pmon costs
// the figures, said once in the host's warnings.
//
// pmon prints "-" for a process it has no sample of (NoSample): one that
// ran no kernel in the interval, so 0 % on a GPU that reports its
// utilization, and unknown under MIG (utilization.gpu [N/A]), where every
// process reads "-". A (GPU, pid) listed twice (a forged line) has
// neither a figure nor NoSample: it stays unknown.
func readPmon(po probe.Output, gpus []nvsmi.GPU, w *warnings) map[pmonKey]loaddata.Number {
	sec, ok := po.Sections[probe.SectionPmon]
	if !ok {
		return nil
	}
	if sec.ExitCode != 0 {
		why := hosttext.FirstLine(string(sec.Body))
		switch {
		case sec.ExitCode == 124 || sec.ExitCode == 137:
			why = "nvidia-smi pmon did not answer in time (killed by timeout)"
		case why == "":
			why = fmt.Sprintf("nvidia-smi pmon failed (exit %d)", sec.ExitCode)
		}
		w.add("per-process utilization unknown: %s", why)
		return nil
	}
	rep, err := nvsmi.ParsePmon(sec.Body)
	if err != nil {
		w.add("per-process utilization unknown: %s", err.Error())
		return nil
	}
	w.skipped("nvidia-smi pmon", rep.Skipped, rep.MoreSkipped)
	sampled := map[int]bool{} // GPU index -> it reports utilization (no MIG)
	for _, g := range gpus {
		sampled[g.Index] = g.UtilGPU.Valid
	}
	sm := make(map[pmonKey]loaddata.Number, len(rep.Samples))
	for _, s := range rep.Samples {
		v := loaddata.Number(s.SMPct)
		if s.NoSample && sampled[s.GPU] {
			v = loaddata.Num(0)
		}
		sm[pmonKey{s.GPU, s.PID}] = v
	}
	return sm
}

// maxKernelLogWhy bounds the kernel_log cell, which every row of a host
// repeats.
const maxKernelLogWhy = 200

// readKernelLog reads the host's XIDs: the kernel_log cell (where they were
// read, or why not) and the events. "" when the log was not asked for.
func readKernelLog(po probe.Output) (string, []kernlog.Event) {
	sec, ok := po.Sections[probe.SectionKernelLog]
	if !ok {
		return "", nil
	}
	if sec.ExitCode != 0 {
		why := hosttext.FirstLine(string(sec.Body))
		if why == "" {
			why = fmt.Sprintf("the probe's kernel log exited %d", sec.ExitCode)
		}
		return hosttext.Clip("unreadable: "+why, maxKernelLogWhy), nil
	}
	rep, err := kernlog.Parse(sec.Body)
	if err != nil {
		return hosttext.Clip("unreadable: "+err.Error(), maxKernelLogWhy), nil
	}
	return rep.Source, rep.Events
}

// readDriverGPUs is the bus ids of the GPUs the driver lists, canonical
// (kernlog.CanonicalBusID); nil where the host could not say. Names that
// are no bus id are not GPUs.
func readDriverGPUs(po probe.Output) []string {
	sec, ok := po.Sections[probe.SectionDriverGPUs]
	if !ok || sec.ExitCode != 0 {
		return nil
	}
	var ids []string
	for l := range lines.All(sec.Body) {
		if id, ok := kernlog.CanonicalBusID(strings.TrimSpace(string(l.Text))); ok && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		if len(ids) == nvsmi.MaxGPUs {
			break
		}
	}
	return ids
}

// lostGPURows is a row for each GPU the driver lists that nvidia-smi
// neither reported nor named in a fault. Where nvidia-smi printed a bus id
// that is none, which GPU it meant is unknown: none is called lost then,
// and the warning says the counts.
func lostGPURows(base loaddata.Row, gpus nvsmi.GPUReport, driver []string, w *warnings) []loaddata.Row {
	if len(driver) == 0 {
		return nil
	}
	reported := map[string]bool{}
	unreadable := 0
	note := func(bus string) {
		if id, ok := kernlog.CanonicalBusID(bus); ok {
			reported[id] = true
		} else {
			unreadable++
		}
	}
	for _, g := range gpus.GPUs {
		note(g.BusID)
	}
	for _, f := range gpus.Faults {
		note(f.BusID)
	}
	var lost []string
	for _, id := range driver {
		if !reported[id] {
			lost = append(lost, id)
		}
	}
	if unreadable > 0 {
		if len(lost) > unreadable {
			w.add("the driver lists %d GPUs, nvidia-smi reports %d; which are missing is unknown (nvidia-smi printed a bus id that is none)",
				len(driver), len(gpus.GPUs)+len(gpus.Faults))
		}
		return nil
	}
	rows := make([]loaddata.Row, len(lost))
	for i, id := range lost {
		rows[i] = base
		rows[i].GPUBusID, rows[i].GPUError = id, lostGPU
	}
	return rows
}

// markXIDs fills each GPU's xids cell from the kernel's events, by the
// GPU's bus id; an XID for a bus id no row has is a warning.
func markXIDs(rows []loaddata.Row, events []kernlog.Event, w *warnings) {
	if len(events) == 0 {
		return
	}
	byBus := map[string][]int{}
	var buses []string
	for _, e := range events {
		if _, ok := byBus[e.BusID]; !ok {
			buses = append(buses, e.BusID)
		}
		byBus[e.BusID] = append(byBus[e.BusID], e.Code)
	}
	cells := map[string]string{}
	for bus, codes := range byBus {
		cells[bus] = xidCell(codes)
	}
	matched := map[string]bool{}
	for i := range rows {
		id, ok := kernlog.CanonicalBusID(rows[i].GPUBusID)
		if !ok {
			continue
		}
		if cell, ok := cells[id]; ok {
			rows[i].XIDs = cell
			matched[id] = true
		}
	}
	slices.Sort(buses)
	for _, bus := range buses {
		if !matched[bus] {
			w.add("the kernel logged XID %s for %s, a GPU that neither nvidia-smi nor the driver lists", cells[bus], bus)
		}
	}
}

// xidCell is codes ascending, each once, comma-separated.
func xidCell(codes []int) string {
	codes = slices.Clone(codes)
	slices.Sort(codes)
	codes = slices.Compact(codes)
	s := make([]string, len(codes))
	for i, c := range codes {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}
