package fetch

import (
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
)

// nvidiaPart is what a host's nvidia-smi said; ran is false where the
// host has no nvidia-smi and an AMD tool instead.
type nvidiaPart struct {
	ran   bool
	gpus  nvsmi.GPUReport
	procs []nvsmi.Process
}

// noTool is a host with no GPU tool of any vendor on its PATH.
const noTool = "no GPU tool on the host: neither nvidia-smi nor amd-smi nor rocm-smi is on its PATH"

// readNVIDIA reads the host's nvidia-smi sections. The error is what
// makes its NVIDIA GPUs unknown.
func readNVIDIA(po probe.Output, t probe.Tools, w *warnings) (nvidiaPart, *nvsmi.HostError) {
	g, ok := po.Sections[probe.SectionGPUs]
	if !ok {
		return nvidiaPart{}, nil
	}
	if he := nvsmi.Diagnose(g.Body, g.ExitCode); he != nil {
		if t.Listed && t.NVIDIASMI == "" && !t.AMD() && g.ExitCode == 127 {
			he = &nvsmi.HostError{Status: hoststatus.Driver, Message: noTool}
		}
		return nvidiaPart{ran: true}, he
	}
	gpus, err := nvsmi.ParseGPUs(g.Body)
	if err != nil {
		return nvidiaPart{ran: true}, &nvsmi.HostError{Status: hoststatus.Error, Message: err.Error()}
	}
	w.skipped("nvidia-smi --query-gpu", gpus.Skipped, gpus.MoreSkipped)
	w.duplicateIndexes(gpus.GPUs)
	w.sharedUUIDs(gpus.GPUs)
	return nvidiaPart{ran: true, gpus: gpus, procs: readApps(po, w)}, nil
}

// vendorFailure is why a host has no usable GPU list, or nil where one of
// its vendors' tools answered: a host with both keeps the GPUs of the one
// that did, and says in w why the others are missing.
func vendorFailure(t probe.Tools, nvRan bool, nvErr, amdErr *nvsmi.HostError, w *warnings) *nvsmi.HostError {
	switch {
	case nvErr == nil && amdErr == nil:
		return nil
	case nvErr != nil && amdErr != nil:
		return &nvsmi.HostError{Status: nvErr.Status, Message: nvErr.Message + "; " + amdErr.Message}
	case nvErr != nil && !t.AMD():
		return nvErr
	case amdErr != nil && !nvRan:
		return amdErr
	case nvErr != nil:
		w.add("the NVIDIA GPUs are unknown: %s", nvErr.Message)
	default:
		w.add("the AMD GPUs are unknown: %s", amdErr.Message)
	}
	return nil
}

// nextIndex is the index after gpus' highest: where a host's AMD GPUs
// start, so that no two GPUs of a host with both vendors share one.
func nextIndex(gpus []nvsmi.GPU) int {
	next := 0
	for _, g := range gpus {
		next = max(next, g.Index+1)
	}
	return next
}

// renumber moves gpus' indexes up by from.
func renumber(gpus []nvsmi.GPU, from int) {
	for i := range gpus {
		gpus[i].Index += from
	}
}
