package rocm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/nvsmi"
)

// rocm-smi's keys, as printed by the releases at hand (4.3 to 6.x). Keys
// are matched without regard to case: "Card series" became "Card Series".
// The first key present with a usable value wins.
var (
	rsName     = []string{"Card Series", "Device Name", "Market Name"}
	rsUniqueID = []string{"Unique ID", "Serial Number"}
	rsBus      = []string{"PCI Bus"}
	rsUtil     = []string{"GPU use (%)"}
	// "GPU memory use (%)" (up to ROCm 6.0) is the memory controller's
	// activity, as nvidia-smi's utilization.memory; ROCm 6.1 renamed it.
	// "GPU Memory Allocated (VRAM%)" is how full VRAM is: not that.
	rsUtilMem  = []string{"GPU Memory Read/Write Activity (%)", "GPU memory use (%)"}
	rsMemTotal = []string{"VRAM Total Memory (B)"}
	rsMemUsed  = []string{"VRAM Total Used Memory (B)"}
	// Junction (hotspot) first, as for amd-smi.
	rsTemp = []string{"Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)"}
	// MI300 and APUs report the current socket power, the others an average.
	rsPower    = []string{"Current Socket Graphics Package Power (W)", "Average Graphics Package Power (W)"}
	rsPowerCap = []string{"Max Graphics Package Power (W)"}
	rsFan      = []string{"Fan speed (%)"}
)

// rsKeys are the keys read, as picked out of each card's hundred.
var rsKeys = slices.Concat(rsName, rsUniqueID, rsBus, rsUtil, rsUtilMem, rsMemTotal, rsMemUsed,
	rsTemp, rsPower, rsPowerCap, rsFan)

// rsLower is each of rsKeys lower-cased, as the cards' keys are folded
// (foldKeys) and as pickROCm looks them up.
var rsLower = func() map[string]string {
	m := map[string]string{}
	for _, k := range rsKeys {
		m[k] = strings.ToLower(k)
	}
	return m
}()

// rsRead is the set of rsLower's values.
var rsRead = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range rsLower {
		m[k] = true
	}
	return m
}()

// pickROCm builds the keys read of each "cardN" entry and checks the rest
// (a card has about a hundred: each is looked up once, lower-cased in a
// buffer of its own, without allocating).
func pickROCm(key []byte) mode {
	if bytes.HasPrefix(key, []byte("card")) { // "cardN", and what is not, to be named
		return filter
	}
	key = bytes.TrimSuffix(key, []byte(" sum"))
	var buf [64]byte
	if len(key) > len(buf) {
		return check // no key read is that long
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	if rsRead[string(buf[:len(key)])] {
		return build
	}
	return check
}

// ParseROCmSMI reads `rocm-smi ... --json`: an object with a "cardN" entry
// per GPU (N is the index) and a "system" entry, which is not a GPU.
func ParseROCmSMI(out []byte) (Report, error) {
	v, err := decodeJSON(out, pickROCm)
	if err != nil {
		return Report{}, err
	}
	top, ok := v.(map[string]any)
	if !ok {
		return Report{}, errors.New(`no GPU list: the JSON is not an object of "cardN" entries`)
	}
	cards, err := rocmCards(top)
	if err != nil {
		return Report{}, err
	}
	var n notes
	b := newBuilder(&n)
	for i, c := range cards {
		if i > 0 && cards[i-1].index == c.index {
			n.add("%s names card%d again, the first kept", clipKey(c.key), c.index)
			continue
		}
		readCard(b.gpu(c.index), c.fields, fmt.Sprintf("card%d", c.index), &n)
	}
	return b.report()
}

type card struct {
	index  int
	key    string
	fields map[string]any
}

// rocmCards lists the "cardN" entries by index. Go maps forget JSON's
// order, so they are sorted by index, then key: of two keys naming one
// index ("card1", "card01") the caller keeps the first.
func rocmCards(top map[string]any) ([]card, error) {
	var cards []card
	for key, v := range top {
		digits, isCard := strings.CutPrefix(key, "card")
		if !isCard {
			continue
		}
		i, err := strconv.Atoi(digits)
		fields, isObj := v.(map[string]any)
		if !allDigits(digits) || err != nil || i >= 1<<16 || !isObj {
			return nil, fmt.Errorf("a GPU entry %q without an index and fields (\"cardN\": {...})", clipKey(key))
		}
		if len(cards) >= nvsmi.MaxGPUs {
			return nil, fmt.Errorf("more than the %d GPUs fetch believes one host has", nvsmi.MaxGPUs)
		}
		cards = append(cards, card{i, key, foldKeys(fields)})
	}
	if len(cards) == 0 {
		return nil, errors.New(`no GPU list: no "cardN" entry`)
	}
	sort.Slice(cards, func(a, b int) bool {
		if cards[a].index != cards[b].index {
			return cards[a].index < cards[b].index
		}
		return cards[a].key < cards[b].key
	})
	return cards, nil
}

func clipKey(k string) string { return text(k) }

func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func readCard(g *nvsmi.GPU, f map[string]any, what string, n *notes) {
	for _, k := range rsName {
		if g.Name = marketingName(text(field(f, k))); g.Name != "" {
			break
		}
	}
	for _, k := range rsUniqueID {
		if g.UUID = serial(field(f, k)); g.UUID != "" {
			break
		}
	}
	g.BusID = busID(text(fieldOf(f, rsBus)), what, n)
	g.UtilGPU = first(n, what, percent, fieldsOf(f, rsUtil)...)
	g.UtilMem = first(n, what, percent, fieldsOf(f, rsUtilMem)...)
	g.MemTotalMiB = first(n, what, bytesToMiB, fieldsOf(f, rsMemTotal)...)
	g.MemUsedMiB = first(n, what, bytesToMiB, fieldsOf(f, rsMemUsed)...)
	g.TempC = first(n, what, celsius, fieldsOf(f, rsTemp)...)
	g.PowerW = first(n, what, watts, fieldsOf(f, rsPower)...)
	g.PowerLimitW = first(n, what, watts, fieldsOf(f, rsPowerCap)...)
	g.FanPct = first(n, what, percent, fieldsOf(f, rsFan)...)
}

// foldKeys indexes a card's fields by lower-case key, so that "Card
// series" (ROCm 5) and "Card Series" (ROCm 6) are one. The issue that asked
// for AMD support names a "GPU use (%) sum" variant; the trailing " sum" is
// dropped too. Where two keys fold together, the one that sorts first wins,
// so the result does not depend on map order.
func foldKeys(f map[string]any) map[string]any {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	folded := make(map[string]any, len(f))
	for _, k := range keys {
		fk := strings.TrimSuffix(strings.ToLower(k), " sum")
		if _, taken := folded[fk]; !taken {
			folded[fk] = f[k]
		}
	}
	return folded
}

func field(f map[string]any, key string) any {
	lk, ok := rsLower[key]
	if !ok {
		lk = strings.ToLower(key)
	}
	return f[lk]
}

func fieldOf(f map[string]any, keys []string) any {
	for _, k := range keys {
		if v := field(f, k); v != nil {
			return v
		}
	}
	return nil
}

func fieldsOf(f map[string]any, keys []string) []any {
	vs := make([]any, len(keys))
	for i, k := range keys {
		vs[i] = field(f, k)
	}
	return vs
}
