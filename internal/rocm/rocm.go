// Package rocm reads what AMD's tools print about a host's GPUs: the JSON
// of amd-smi (ROCm 6 and later: `amd-smi static --json` and `amd-smi
// metric --json`), the JSON of the older rocm-smi (`rocm-smi ... --json`),
// and the KFD section the probe makes from /sys/class/kfd (which process
// holds how much VRAM on which GPU, world-readable without root).
//
// Both tools change shape between releases: amd-smi's values are flat in
// ROCm 6.0, {"value": …, "unit": …} objects from 6.1, and the list sits
// under "gpu_data" from amd-smi 25 (ROCm 7); rocm-smi renamed its keys
// between ROCm 5 and 6 ("Card series" became "Card Series", "GPU memory
// use (%)" became "GPU Memory Read/Write Activity (%)"). So readings are
// found by meaning, a value may carry its unit or be "N/A" (missing, never
// 0), and an answer whose shape is not understood is an error that says
// what was not understood, never a GPU with zeros. Tool output may have
// warnings around the JSON; the first whole JSON object or list that
// starts a line is read.
//
// Readings chosen where a tool gives several: temperature is the hotspot
// (junction) sensor, else the edge one (MI300-series GPUs have no edge
// sensor); power is the current socket power, else the average; the power
// cap is the current one (amd-smi limit.socket_power, rocm-smi "Max
// Graphics Package Power (W)"); memory is VRAM in MiB (amd-smi's "MB" are
// MiB). Names are made marketing names: "Arcturus GL-XL [Instinct
// MI100]" becomes "AMD Instinct MI100".
package rocm

import "github.com/gpumon/gpumon/internal/nvsmi"

// Report is the GPUs one tool's answer names, as nvsmi.GPU so that fetch
// turns them into rows as it does NVIDIA's: Index is the tool's own
// index, UUID its unique id or serial ("" where it gives none), BusID the
// PCI address as "0000:c1:00.0" (lower case, 4-digit domain), Name the
// marketing name where the tool gives one ("AMD Instinct MI300X"), and
// the readings (UtilGPU, UtilMem, MemUsedMiB, MemTotalMiB, TempC, PowerW,
// PowerLimitW, FanPct, ECCUncorrected) missing where the tool gives none.
type Report struct {
	GPUs []nvsmi.GPU
	// Notes are what was not understood about some values or GPUs (a
	// value in an unknown unit or out of range, a GPU listed twice); the
	// rest counts. At most maxNotes, each a short phrase. What makes the
	// whole answer unusable (no GPU list, a GPU without an index) is an
	// error instead.
	Notes []string
}

// KFD is the probe's kfd section: the GPUs the KFD driver lists, by their
// gpu_id, and each process's VRAM on each.
type KFD struct {
	// BusIDs maps a KFD gpu_id to its GPU's PCI address ("0000:c1:00.0").
	BusIDs map[uint32]string
	// Nodes is the gpu_ids in the topology's order, which is the order
	// of ROCm's device indexes (ROCR_VISIBLE_DEVICES counts them).
	Nodes []uint32
	Procs []KFDProc
	// Cut is true when the host listed more entries than the probe sends.
	Cut   bool
	Notes []string
}

// KFDProc is one process's VRAM on one GPU.
type KFDProc struct {
	PID       int
	GPUID     uint32
	VRAMBytes uint64
}
