package rocm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/nvsmi"
)

// What the parser builds of an amd-smi answer: the sections read
// (amdSections) are picked in turn, and of their members only the
// readings read (amdReadings: a number, a string, or a {"value", "unit"}
// object) are built; the rest (clocks, caches, NUMA, the dozens of
// activity counters and limits nobody reads) is only checked to be JSON,
// which makes an answer several times cheaper to read. readStatic and
// readMetric read nothing else.
var (
	amdSections = map[string]bool{"gpu_data": true, "asic": true, "bus": true, "vram": true, "limit": true,
		"ppt0": true, "board": true, "usage": true, "mem_usage": true, "fb_usage": true, "temperature": true,
		"power": true, "ecc": true, "fan": true}
	amdReadings = map[string]bool{"gpu": true, "bdf": true, "value": true, "unit": true,
		"market_name": true, "asic_serial": true, "product_name": true, "product_serial": true,
		"size": true, "vram_size": true, "socket_power": true, "power_cap": true, "socket_power_limit": true,
		"gfx_activity": true, "umc_activity": true, "used_vram": true, "total_vram": true,
		"vram_used": true, "vram_total": true, "fb_used": true, "fb_total": true, "hotspot": true, "edge": true,
		"current_socket_power": true, "average_socket_power": true, "power_limit": true,
		"total_uncorrectable_count": true, "uncorrectable_count": true, "uncorrectable": true,
		"speed": true, "max": true}
)

// pickAMD is how a member of an object the parser picks in is read. A
// name that is a section at one level and a reading at another (fan's
// "usage") is picked: a reading's value object's members are readings.
func pickAMD(key []byte) mode {
	switch {
	case amdSections[string(key)]:
		return filter
	case amdReadings[string(key)]:
		return asReading
	}
	return check
}

// amdEntries finds the per-GPU objects of an amd-smi answer in the three
// shapes seen: a list (ROCm 6.0 to 6.4), {"gpu_data": [...]} (amd-smi 25
// and later, ROCm 7), or one object for one GPU.
func amdEntries(out []byte) ([]map[string]any, error) {
	v, err := decodeJSON(out, pickAMD)
	if err != nil {
		return nil, err
	}
	var list []any
	switch x := v.(type) {
	case []any:
		list = x
	case map[string]any:
		if data, ok := x["gpu_data"]; ok {
			if list, ok = data.([]any); !ok {
				return nil, errors.New(`"gpu_data" is not a list`)
			}
		} else if _, ok := x["gpu"]; ok {
			list = []any{x}
		} else {
			return nil, errors.New(`no GPU list: neither a JSON list nor an object with "gpu_data"`)
		}
	}
	if len(list) > nvsmi.MaxGPUs {
		return nil, fmt.Errorf("%d GPUs listed, more than the %d fetch believes one host has", len(list), nvsmi.MaxGPUs)
	}
	entries := make([]map[string]any, 0, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("entry %d of the GPU list is not an object", i)
		}
		entries = append(entries, m)
	}
	return entries, nil
}

// gpuIndex reads an entry's "gpu": the tool's index of the GPU.
func gpuIndex(e map[string]any) (int, error) {
	v, ok := e["gpu"]
	if !ok {
		return 0, errors.New(`a GPU without an index (no "gpu" key)`)
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf(`a GPU whose index %q is not a number`, text(v))
	}
	i, err := strconv.Atoi(string(n))
	if err != nil || i < 0 || i >= 1<<16 {
		return 0, fmt.Errorf("a GPU whose index %s is not an index", text(v))
	}
	return i, nil
}

// ParseAMDSMI reads `amd-smi static --json` and `amd-smi metric --json`
// (either may be nil: a GPU then lacks what it would have given). The GPUs
// are those either names, matched by their "gpu" index, in the order
// static lists them. The error says what in the answer's shape was not
// understood.
func ParseAMDSMI(static, metric []byte) (Report, error) {
	var n notes
	b := newBuilder(&n)
	for _, part := range []struct {
		name string
		out  []byte
		read func(*nvsmi.GPU, map[string]any, string, *notes)
	}{{"static", static, readStatic}, {"metric", metric, readMetric}} {
		if part.out == nil {
			continue
		}
		entries, err := amdEntries(part.out)
		if err != nil {
			return Report{}, fmt.Errorf("%s: %w", part.name, err)
		}
		if len(entries) == 0 {
			return Report{}, fmt.Errorf("%s: no GPU listed", part.name)
		}
		seen := map[int]bool{}
		for _, e := range entries {
			i, err := gpuIndex(e)
			if err != nil {
				return Report{}, fmt.Errorf("%s: %w", part.name, err)
			}
			what := fmt.Sprintf("gpu %d", i)
			if seen[i] {
				n.add("%s: %s listed twice, the first kept", part.name, what)
				continue
			}
			seen[i] = true
			part.read(b.gpu(i), e, what, &n)
		}
	}
	return b.report()
}

// readStatic reads what `amd-smi static` says of one GPU: name, serial,
// bus id, VRAM size and power cap.
func readStatic(g *nvsmi.GPU, e map[string]any, what string, n *notes) {
	g.Name = marketingName(text(path(e, "asic", "market_name")))
	if g.Name == "" {
		g.Name = marketingName(text(path(e, "board", "product_name")))
	}
	g.UUID = firstSerial(path(e, "asic", "asic_serial"), path(e, "board", "product_serial"))
	bus := path(e, "bus", "bdf")
	if bus == nil {
		bus = e["bdf"]
	}
	g.BusID = busID(text(bus), what, n)
	if !g.MemTotalMiB.Valid {
		g.MemTotalMiB = first(n, what, mebibytes, path(e, "vram", "size"), path(e, "vram", "vram_size"))
	}
	g.PowerLimitW = first(n, what, watts, path(e, "limit", "socket_power"), path(e, "limit", "power_cap"),
		path(e, "limit", "ppt0", "socket_power_limit"))
}

// readMetric reads what `amd-smi metric` says of one GPU. Temperature is
// the hotspot (junction) sensor, else the edge one: MI300-series GPUs have
// no edge sensor, and hotspot is what the GPU throttles on.
func readMetric(g *nvsmi.GPU, e map[string]any, what string, n *notes) {
	g.UtilGPU = first(n, what, percent, path(e, "usage", "gfx_activity"))
	g.UtilMem = first(n, what, percent, path(e, "usage", "umc_activity"))
	used := first(n, what, mebibytes, path(e, "mem_usage", "used_vram"),
		path(e, "fb_usage", "vram_used"), path(e, "fb_usage", "fb_used"))
	total := first(n, what, mebibytes, path(e, "mem_usage", "total_vram"),
		path(e, "fb_usage", "vram_total"), path(e, "fb_usage", "fb_total"))
	if used.Valid {
		g.MemUsedMiB = used
	}
	if total.Valid {
		g.MemTotalMiB = total
	}
	g.TempC = first(n, what, celsius, path(e, "temperature", "hotspot"), path(e, "temperature", "edge"))
	g.PowerW = first(n, what, watts, path(e, "power", "socket_power"),
		path(e, "power", "current_socket_power"), path(e, "power", "average_socket_power"))
	if !g.PowerLimitW.Valid {
		g.PowerLimitW = first(n, what, watts, path(e, "power", "power_limit"))
	}
	g.FanPct = fanPercent(e, what, n)
	g.ECCUncorrected = first(n, what, counter, path(e, "ecc", "total_uncorrectable_count"),
		path(e, "ecc", "uncorrectable_count"), path(e, "ecc", "uncorrectable"))
}

// fanPercent reads fan.usage, else fan.speed out of fan.max (0 to 255 on
// Radeon cards). A passive card says "N/A".
func fanPercent(e map[string]any, what string, n *notes) nvsmi.Number {
	if pct := first(n, what, percent, path(e, "fan", "usage")); pct.Valid {
		return pct
	}
	speed := first(n, what, counter, path(e, "fan", "speed"))
	max := first(n, what, counter, path(e, "fan", "max"))
	if !speed.Valid || !max.Valid || max.Value == 0 || speed.Value > max.Value {
		return nvsmi.Number{}
	}
	return nvsmi.Number{Value: 100 * speed.Value / max.Value, Valid: true}
}

// path follows keys through nested objects; nil where one is missing.
func path(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// first reads the first of the candidates that holds a valid reading.
func first(n *notes, what string, k kind, candidates ...any) nvsmi.Number {
	for _, c := range candidates {
		if c == nil {
			continue
		}
		if r := reading(c, k, what, n); r.Valid {
			return r
		}
	}
	return nvsmi.Number{}
}

func firstSerial(candidates ...any) string {
	for _, c := range candidates {
		if s := serial(c); s != "" {
			return s
		}
	}
	return ""
}

// marketingName turns the PCI-database names the tools print into the
// marketing name: "Arcturus GL-XL [Instinct MI100]" -> "AMD Instinct
// MI100", "Navi 23 [Radeon RX 6600/6600 XT" (amd-smi cuts it) -> "AMD
// Radeon RX 6600/6600 XT". A bare id such as "0x1002" (rocm-smi 4.3) is
// no name.
func marketingName(s string) string {
	if strings.HasPrefix(s, "0x") {
		return ""
	}
	if i := strings.IndexByte(s, '['); i >= 0 {
		inner := s[i+1:]
		if j := strings.IndexByte(inner, ']'); j >= 0 {
			inner = inner[:j]
		}
		if inner = strings.TrimSpace(inner); hasFamily(inner) || strings.HasPrefix(inner, "AMD ") {
			s = inner
		}
	}
	if hasFamily(s) {
		return "AMD " + s
	}
	return s
}

// hasFamily says whether s starts with one of AMD's GPU brands.
func hasFamily(s string) bool {
	for _, family := range []string{"Radeon", "Instinct", "FirePro"} {
		if strings.HasPrefix(s, family) {
			return true
		}
	}
	return false
}
