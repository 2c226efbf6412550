package rocm

import (
	"bytes"
	"fmt"
	"math"

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
	if procs := bytes.Count(body, []byte("proc ")); procs > 0 {
		k.Procs = make([]KFDProc, 0, min(procs, MaxKFDProcs))
	}
	var n notes
	for lineNo := 1; len(body) > 0; lineNo++ {
		var line []byte
		line, body, _ = bytes.Cut(body, []byte("\n"))
		var f [5][]byte // one more than a line has, to see a line with too many
		nf := fields(line, f[:])
		switch word := string(f[0]); {
		case nf == 0:
		case word == "cut" && nf == 1:
			k.Cut = true
		case word == "node" && nf == 4:
			if err := k.addNode(f[1:4], lineNo, &n); err != nil {
				return KFD{}, err
			}
		case word == "proc" && nf == 4:
			if len(k.Procs) >= MaxKFDProcs {
				n.add("more than %d proc lines, the rest not read", MaxKFDProcs)
				k.Cut = true
				body = nil
				continue
			}
			if p, ok := parseProc(f[1:4], lineNo, &n); ok {
				k.Procs = append(k.Procs, p)
			}
		default:
			n.add("line %d not understood: %q", lineNo, hosttext.Clip(hosttext.Printable(string(line)), 60))
		}
	}
	unknownGPU := 0
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

// fields splits line at spaces, tabs and a final \r into at most len(f)
// fields, without allocating, and returns how many it found (len(f) where
// there were more).
func fields(line []byte, f [][]byte) int {
	nf := 0
	for i := 0; i < len(line) && nf < len(f); {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
			i++
		}
		start := i
		for i < len(line) && line[i] != ' ' && line[i] != '\t' && line[i] != '\r' {
			i++
		}
		if i > start {
			f[nf] = line[start:i]
			nf++
		}
	}
	return nf
}

// decimal reads an unsigned decimal of at most bits bits.
func decimal(b []byte, bits int) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, bits == 64 || v < 1<<bits
}

// addNode reads "GPU_ID DOMAIN LOCATION_ID". location_id is the PCI
// bus << 8 | device << 3 | function (the kernel's PCI_DEVID), so 0x8300 is
// 83:00.0. GPU partitions (MI300X in CPX mode) are nodes of their own,
// with their GPU's location_id and a domain of their own (as
// ROCm/k8s-gpu-dra-driver#21 reads them; not seen in a capture here).
func (k *KFD) addNode(f [][]byte, lineNo int, n *notes) error {
	id, okID := decimal(f[0], 32)
	domain, okD := decimal(f[1], 32)
	loc, okL := decimal(f[2], 32)
	switch {
	case !okID || !okD || !okL:
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
		k.Nodes = append(k.Nodes, uint32(id))
	}
	return nil
}

// parseProc reads "PID GPU_ID BYTES".
func parseProc(f [][]byte, lineNo int, n *notes) (KFDProc, bool) {
	pid, okP := decimal(f[0], 31)
	id, okID := decimal(f[1], 32)
	vram, okV := decimal(f[2], 64)
	switch {
	case !okP || pid == 0 || !okID:
		n.add("line %d: proc pid or gpu_id not understood", lineNo)
	case !okV || vram > maxVRAMBytes:
		n.add("line %d: VRAM %q of pid %d is not a size", lineNo, hosttext.Clip(hosttext.Printable(string(f[2])), 30), pid)
	default:
		return KFDProc{PID: int(pid), GPUID: uint32(id), VRAMBytes: vram}, true
	}
	return KFDProc{}, false
}
