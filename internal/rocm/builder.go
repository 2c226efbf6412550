package rocm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

// builder gathers GPUs by the tool's index, in the order first seen.
type builder struct {
	gpus  []*nvsmi.GPU
	index map[int]*nvsmi.GPU
	notes *notes
}

func newBuilder(n *notes) *builder {
	return &builder{index: map[int]*nvsmi.GPU{}, notes: n}
}

// gpu returns the GPU of that index, added if new.
func (b *builder) gpu(i int) *nvsmi.GPU {
	if g, ok := b.index[i]; ok {
		return g
	}
	g := &nvsmi.GPU{Index: i}
	b.index[i] = g
	b.gpus = append(b.gpus, g)
	return g
}

// report checks what was gathered: some GPU, not more than a host has, and
// each PCI address once (a second GPU claiming one is dropped: the bus id
// is what names a GPU exactly).
func (b *builder) report() (Report, error) {
	if len(b.gpus) == 0 {
		return Report{}, errors.New("no GPU listed")
	}
	if len(b.gpus) > nvsmi.MaxGPUs {
		return Report{}, fmt.Errorf("%d GPUs listed, more than the %d fetch believes one host has", len(b.gpus), nvsmi.MaxGPUs)
	}
	rep := Report{GPUs: make([]nvsmi.GPU, 0, len(b.gpus))}
	owner := map[string]int{}
	for _, g := range b.gpus {
		if g.BusID != "" {
			if first, dup := owner[g.BusID]; dup {
				b.notes.add("gpu %d has the bus id %s of gpu %d, the first kept", g.Index, g.BusID, first)
				continue
			}
			owner[g.BusID] = g.Index
		}
		rep.GPUs = append(rep.GPUs, *g)
	}
	rep.Notes = b.notes.done()
	return rep, nil
}

// busID normalises a PCI address to "0000:c1:00.0": lower case, a 4-digit
// domain (8 where the domain needs it), "0000:" added where the tool gave
// none. Anything else is no bus id.
func busID(s, what string, n *notes) string {
	if s == "" {
		return ""
	}
	parts := strings.Split(strings.ToLower(s), ":")
	if len(parts) == 2 {
		parts = append([]string{"0000"}, parts...)
	}
	if len(parts) == 3 {
		devfn := strings.Split(parts[2], ".")
		domain, errD := strconv.ParseUint(parts[0], 16, 32)
		bus, errB := strconv.ParseUint(parts[1], 16, 8)
		if len(devfn) == 2 && errD == nil && errB == nil && len(parts[0]) <= 8 && len(parts[1]) <= 2 {
			dev, errV := strconv.ParseUint(devfn[0], 16, 8)
			fn, errF := strconv.ParseUint(devfn[1], 16, 8)
			if errV == nil && errF == nil && dev < 32 && fn < 8 && len(devfn[0]) <= 2 && len(devfn[1]) == 1 {
				return pciAddress(domain, bus, dev, fn)
			}
		}
	}
	n.add("%s: bus id %q not understood", what, hosttext.Clip(s, 40))
	return ""
}

func pciAddress(domain, bus, dev, fn uint64) string {
	return fmt.Sprintf("%04x:%02x:%02x.%d", domain, bus, dev, fn)
}
