package rocm

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

// MaxKFDProcs is how many "proc" lines ParseKFD keeps: a process has a
// vram_GPUID file for every GPU it opened, and ROCm opens them all, so a
// busy 8-GPU node has a few thousand. The probe should send at most this
// many (its maxKFDLines) and say "cut" past them.
const MaxKFDProcs = 16384

// maxVRAMBytes is 1 PiB: no GPU holds more, so a larger vram file is a
// sentinel or garbage, not a process's memory.
const maxVRAMBytes = 1 << 50

// ParseKFD reads the probe's kfd section (its format is in package probe,
// SectionKFD): "node GPU_ID DOMAIN LOCATION_ID" per GPU of the KFD
// topology, "proc PID GPU_ID BYTES" per vram_GPU_ID file of a process,
// and "cut" where the host had more than the probe sends. A line not
// understood costs that line, with a note; more GPUs than a host has is an
// error.
func ParseKFD(body []byte) (KFD, error) {
	k := KFD{BusIDs: map[uint32]string{}}
	var n notes
	unknownGPU := 0
	for lineNo := 1; len(body) > 0; lineNo++ {
		var line []byte
		line, body, _ = bytes.Cut(body, []byte("\n"))
		fields := strings.Fields(string(bytes.TrimSpace(line)))
		switch {
		case len(fields) == 0:
		case fields[0] == "cut" && len(fields) == 1:
			k.Cut = true
		case fields[0] == "node" && len(fields) == 4:
			if err := k.addNode(fields[1:], lineNo, &n); err != nil {
				return KFD{}, err
			}
		case fields[0] == "proc" && len(fields) == 4:
			if len(k.Procs) >= MaxKFDProcs {
				n.add("more than %d proc lines, the rest not read", MaxKFDProcs)
				k.Cut = true
				body = nil
				continue
			}
			if p, ok := parseProc(fields[1:], lineNo, &n); ok {
				k.Procs = append(k.Procs, p)
			}
		default:
			n.add("line %d not understood: %q", lineNo, hosttext.Clip(hosttext.Printable(string(line)), 60))
		}
	}
	for _, p := range k.Procs {
		if _, ok := k.BusIDs[p.GPUID]; !ok {
			unknownGPU++
		}
	}
	if unknownGPU > 0 {
		n.add("%d proc lines name a gpu_id no node line lists", unknownGPU)
	}
	k.Notes = n.done()
	return k, nil
}

// addNode reads "GPU_ID DOMAIN LOCATION_ID". location_id is the PCI
// bus << 8 | device << 3 | function (the kernel's PCI_DEVID), so 0x8300 is
// 83:00.0. GPU partitions (MI300X in CPX mode) are nodes of their own,
// with their GPU's location_id and a domain of their own (as
// ROCm/k8s-gpu-dra-driver#21 reads them; not seen in a capture here).
func (k *KFD) addNode(f []string, lineNo int, n *notes) error {
	id, errID := strconv.ParseUint(f[0], 10, 32)
	domain, errD := strconv.ParseUint(f[1], 10, 32)
	loc, errL := strconv.ParseUint(f[2], 10, 32)
	switch {
	case errID != nil || errD != nil || errL != nil:
		n.add("line %d: node numbers not understood", lineNo)
	case id == 0:
		n.add("line %d: node with gpu_id 0 (a CPU node) skipped", lineNo)
	case loc > 0xffff:
		n.add("line %d: location_id %d is not a PCI bus/device/function", lineNo, loc)
	default:
		if _, dup := k.BusIDs[uint32(id)]; dup {
			n.add("line %d: gpu_id %d listed twice, the first kept", lineNo, id)
			return nil
		}
		if len(k.BusIDs) >= nvsmi.MaxGPUs {
			return fmt.Errorf("more than %d KFD GPU nodes, more than fetch believes one host has", nvsmi.MaxGPUs)
		}
		k.BusIDs[uint32(id)] = pciAddress(domain, loc>>8, loc>>3&0x1f, loc&7)
	}
	return nil
}

// parseProc reads "PID GPU_ID BYTES".
func parseProc(f []string, lineNo int, n *notes) (KFDProc, bool) {
	pid, errP := strconv.ParseUint(f[0], 10, 31)
	id, errID := strconv.ParseUint(f[1], 10, 32)
	vram, errV := strconv.ParseUint(f[2], 10, 64)
	switch {
	case errP != nil || pid == 0 || errID != nil:
		n.add("line %d: proc pid or gpu_id not understood", lineNo)
	case errV != nil || vram > maxVRAMBytes:
		n.add("line %d: VRAM %q of pid %d is not a size", lineNo, hosttext.Clip(f[2], 30), pid)
	default:
		return KFDProc{PID: int(pid), GPUID: uint32(id), VRAMBytes: vram}, true
	}
	return KFDProc{}, false
}
