package fetch

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/kernlog"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/rocm"
)

// amdPart is what a host's AMD tool and its KFD folder said: the GPUs,
// numbered after the host's NVIDIA ones, and a process for each (pid,
// GPU) that holds VRAM there, its GPUUUID the GPU's amdKey (an AMD GPU
// may have no unique id, and partitions share a PCI address), or the
// PCI address KFD gives a GPU the tool did not list.
type amdPart struct {
	gpus  []nvsmi.GPU
	procs []nvsmi.Process
}

// toolName is how a message names the host's AMD tool: "amd-smi (ROCm
// 6.2.4)", "rocm-smi (ROCm version unknown)".
func toolName(t probe.Tools) string {
	name := "amd-smi"
	if t.AMDSMI == "" {
		name = "rocm-smi"
	}
	v := t.ROCmVersion
	if v == "" {
		v = "version unknown"
	}
	return fmt.Sprintf("%s (ROCm %s)", name, v)
}

// readAMD reads the AMD sections of a host that has amd-smi or rocm-smi,
// its GPUs' indexes moved up by from. The error is what makes its AMD
// GPUs unknown; the KFD folder failing costs their processes only, said
// in w.
func readAMD(po probe.Output, t probe.Tools, from int, w *warnings) (amdPart, *nvsmi.HostError) {
	tool := toolName(t)
	var rep rocm.Report
	var err error
	if t.AMDSMI != "" {
		static, he := amdSection(po, probe.SectionAMDSMIStatic, "amd-smi static", tool)
		if he != nil {
			return amdPart{}, he
		}
		metric, he := amdSection(po, probe.SectionAMDSMIMetric, "amd-smi metric", tool)
		if he == nil && len(bytes.TrimSpace(metric)) == 0 {
			he = &nvsmi.HostError{Message: "amd-smi metric printed nothing"}
		}
		if he != nil {
			w.add("%s; the AMD GPUs' readings are unknown", he.Message)
			metric = nil
		}
		rep, err = rocm.ParseAMDSMI(static, metric)
	} else {
		out, he := amdSection(po, probe.SectionROCmSMI, "rocm-smi", tool)
		if he != nil {
			return amdPart{}, he
		}
		rep, err = rocm.ParseROCmSMI(out)
	}
	if err != nil {
		return amdPart{}, &nvsmi.HostError{Status: hoststatus.Error, Message: fmt.Sprintf("%s answered in a shape fetch does not read: %v", tool, err)}
	}
	for _, n := range rep.Notes {
		w.add("%s: %s", tool, n)
	}
	if len(rep.GPUs) == 0 {
		return amdPart{}, &nvsmi.HostError{Status: hoststatus.Driver, Message: tool + " listed no GPU"}
	}
	gpus := rep.GPUs
	slices.SortStableFunc(gpus, func(a, b nvsmi.GPU) int { return a.Index - b.Index })
	renumber(gpus, from)
	return amdPart{gpus: gpus, procs: readKFD(po, gpus, w)}, nil
}

// amdKey is what gpuRows joins an AMD GPU and its processes by.
func amdKey(index int) string { return "gpu " + strconv.Itoa(index) }

// amdSection is one AMD tool run's output, or why it is of no use.
func amdSection(po probe.Output, name, what, tool string) ([]byte, *nvsmi.HostError) {
	sec, ok := po.Sections[name]
	switch {
	case !ok:
		return nil, &nvsmi.HostError{Status: hoststatus.Error, Message: fmt.Sprintf("%s did not run (%s)", what, tool)}
	case sec.ExitCode == 124 || sec.ExitCode == 137:
		return nil, &nvsmi.HostError{Status: hoststatus.Timeout, Message: fmt.Sprintf("%s did not answer in time (killed by timeout; %s)", what, tool)}
	case sec.ExitCode != 0:
		return nil, &nvsmi.HostError{Status: amdStatus(sec.Body), Message: fmt.Sprintf("%s failed (exit %d, %s): %s", what, sec.ExitCode, tool, firstWords(sec.Body))}
	case len(bytes.TrimSpace(sec.Body)) > 0 && !bytes.ContainsAny(sec.Body, "{["):
		// amd-smi has exited 0 on its own errors: no JSON is a failure
		return nil, &nvsmi.HostError{Status: amdStatus(sec.Body), Message: fmt.Sprintf("%s printed no JSON (%s): %s", what, tool, firstWords(sec.Body))}
	}
	return sec.Body, nil
}

// firstWords is what a message quotes of a failed tool's out: its first
// line that says "error" (rocm-smi's own comes after a cat's complaint),
// else its first line.
func firstWords(out []byte) string {
	text := string(out[:min(len(out), 4096)])
	for _, l := range strings.SplitN(text, "\n", 20) {
		if strings.Contains(strings.ToLower(l), "error") {
			text = l
			break
		}
	}
	if first := strings.TrimSuffix(hosttext.FirstLine(text), "."); first != "" {
		return first
	}
	return "no output"
}

// amdStatus tells a driver that is not there from any other failure of
// AMD's tools.
func amdStatus(out []byte) hoststatus.Status {
	lower := strings.ToLower(string(out[:min(len(out), 4096)]))
	for _, s := range []string{"amdgpu driver", "driver not loaded", "driver is not loaded", "driver not initialized",
		"amdgpu not found in modules", "no gpus", "no amd gpu", "unable to detect any gpu", "unable to get devices",
		"modprobe amdgpu", "amdsmi_status_driver_not_loaded", "amdsmi_status_not_init"} {
		if strings.Contains(lower, s) {
			return hoststatus.Driver
		}
	}
	return hoststatus.Error
}

// readKFD reads which process holds VRAM on which of gpus. A process with
// no VRAM on a GPU (a ROCm process has an entry on every GPU it can see)
// is not on it; one with none anywhere (it has opened the device and not
// yet allocated) is on none.
func readKFD(po probe.Output, gpus []nvsmi.GPU, w *warnings) []nvsmi.Process {
	sec, ok := po.Sections[probe.SectionKFD]
	if !ok {
		w.add("the KFD process list did not arrive; the AMD GPUs' processes are unknown")
		return nil
	}
	if sec.ExitCode != 0 {
		w.add("the KFD process list is unreadable (%s); the AMD GPUs' processes are unknown", hosttext.FirstLine(string(sec.Body)))
		return nil
	}
	kfd, err := rocm.ParseKFD(sec.Body)
	if err != nil {
		w.add("the KFD process list is unreadable (%v); the AMD GPUs' processes are unknown", err)
		return nil
	}
	for _, n := range kfd.Notes {
		w.add("KFD: %s", n)
	}
	if kfd.Cut {
		w.add("the KFD process list was cut on the host; some AMD GPU processes are missing")
	}
	onGPU := matchNodes(gpus, kfd, w)
	var procs []nvsmi.Process
	for _, p := range kfd.Procs {
		if p.VRAMBytes == 0 {
			continue
		}
		key := ""
		if i, ok := onGPU[p.GPUID]; ok {
			key = amdKey(gpus[i].Index)
		} else if bus, ok := kfd.BusIDs[p.GPUID]; ok {
			key = bus
		} else {
			continue // ParseKFD's note says so
		}
		procs = append(procs, nvsmi.Process{PID: p.PID, GPUUUID: key,
			UsedMemMiB: nvsmi.Number{Value: math.Round(float64(p.VRAMBytes) / (1 << 20)), Valid: true}})
	}
	return procs
}

// matchNodes pairs KFD's GPU nodes with the tool's GPUs (by their
// position in gpus): by PCI address where each side gives every GPU one
// of its own; else by order, the topology's being ROCm's index order,
// where both list as many (a GPU the tool gave no address then takes its
// node's); else not at all, and w says so.
func matchNodes(gpus []nvsmi.GPU, kfd rocm.KFD, w *warnings) map[uint32]int {
	m := map[uint32]int{}
	byBus := map[string]int{}
	for i, g := range gpus {
		byBus[busKey(g.BusID)] = i
	}
	nodeBus := map[string]bool{}
	for _, id := range kfd.Nodes {
		nodeBus[busKey(kfd.BusIDs[id])] = true
	}
	if _, blank := byBus[""]; !blank && len(byBus) == len(gpus) && len(nodeBus) == len(kfd.Nodes) {
		for _, id := range kfd.Nodes {
			if i, ok := byBus[busKey(kfd.BusIDs[id])]; ok {
				m[id] = i
			}
		}
		return m
	}
	if len(kfd.Nodes) != len(gpus) {
		w.add("KFD lists %d GPUs, the tool %d, and PCI addresses do not tell them apart; the AMD GPUs' processes are unknown", len(kfd.Nodes), len(gpus))
		return m
	}
	for i, id := range kfd.Nodes {
		m[id] = i
		if gpus[i].BusID == "" {
			gpus[i].BusID = kfd.BusIDs[id]
		}
	}
	return m
}

// busKey is a bus id in the one spelling both tools and KFD can be
// compared by: "0000:c1:00.0".
func busKey(bus string) string {
	if c, ok := kernlog.CanonicalBusID(bus); ok {
		return c
	}
	return strings.ToLower(bus)
}
