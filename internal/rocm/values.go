package rocm

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

// A kind is what a reading measures: the units it may come in and the
// range a real GPU stays within. Outside the range a value is a sentinel
// (2^64-1, 0xFFFF) or a wrapped counter, never a reading.
type kind struct {
	name     string
	units    map[string]float64 // unit as printed -> factor to the kind's unit
	min, max float64
	count    bool // a counter: whole numbers up to 2^53
	// whole rounds to a whole number: memory in MiB, as nvidia-smi gives it
	// (rocm-smi counts bytes).
	whole bool
}

var (
	percent = kind{name: "percentage", units: map[string]float64{"": 1, "%": 1}, max: 100}
	celsius = kind{name: "temperature", units: map[string]float64{"": 1, "C": 1, "°C": 1, "c": 1},
		min: -50, max: 200}
	watts = kind{name: "power", units: map[string]float64{"": 1, "W": 1, "mW": 1e-3, "uW": 1e-6, "µW": 1e-6},
		max: 10000}
	// amd-smi prints VRAM in "MB" meaning MiB: 8176 MB on an 8 GiB card.
	mebibytes = kind{name: "memory", units: map[string]float64{"": 1, "MB": 1, "MiB": 1,
		"B": 1.0 / (1 << 20), "KB": 1.0 / 1024, "KiB": 1.0 / 1024, "GB": 1024, "GiB": 1024},
		max: 1 << 30, whole: true}
	bytesToMiB = kind{name: "memory", units: map[string]float64{"": 1.0 / (1 << 20), "B": 1.0 / (1 << 20)},
		max: 1 << 30, whole: true}
	counter = kind{name: "count", units: map[string]float64{"": 1}, max: 1 << 53, count: true}
)

// missingWords are what the tools print instead of a value they cannot read.
var missingWords = map[string]bool{
	"": true, "n/a": true, "na": true, "unknown": true, "unsupported": true,
	"not supported": true, "none": true, "-": true,
}

// reading reads one value of the given kind: a JSON number, a string such
// as "42", "42 %" or "36 °C", or an amd-smi {"value": …, "unit": …}
// object. What is missing stays missing; a value that cannot be a reading
// is missing too, with a note saying why.
func reading(v any, k kind, what string, n *notes) nvsmi.Number {
	text, unit, ok := valueText(v)
	if !ok {
		return nvsmi.Number{}
	}
	if u, ok := splitUnit(text); ok && unit == "" {
		text, unit = text[:len(text)-len(u)], u
		text = strings.TrimSpace(text)
	}
	factor, known := k.units[unit]
	if !known {
		n.add("%s: %s in unknown unit %q", what, k.name, hosttext.Clip(hosttext.Printable(unit), 20))
		return nvsmi.Number{}
	}
	x, ok := parseDecimal(text, k.count)
	if !ok {
		n.add("%s: %s %q is not a number", what, k.name, hosttext.Clip(hosttext.Printable(text), 30))
		return nvsmi.Number{}
	}
	if k.count && x > k.max {
		n.add("%s: %s %s is beyond any real count", what, k.name, hosttext.Clip(text, 30))
		return nvsmi.Number{}
	}
	x *= factor
	if x < k.min || x > k.max || math.IsNaN(x) {
		n.add("%s: %s %s%s is out of range", what, k.name, hosttext.Clip(text, 30), unit)
		return nvsmi.Number{}
	}
	if k.whole {
		x = math.Round(x)
	}
	return nvsmi.Number{Value: x, Valid: true}
}

// valueText unwraps a JSON value into its text and unit; ok is false for
// what says "missing" ("N/A", null, a list, an object without a value).
func valueText(v any) (text, unit string, ok bool) {
	if r, isReading := v.(valueUnit); isReading {
		if !r.hasValue {
			return "", "", false
		}
		u, _ := r.unit.(string)
		text, _, ok = valueText(r.value)
		return text, strings.TrimSpace(u), ok
	}
	if m, isObj := v.(map[string]any); isObj {
		val, has := m["value"]
		if !has {
			return "", "", false
		}
		u, _ := m["unit"].(string)
		text, _, ok = valueText(val)
		return text, strings.TrimSpace(u), ok
	}
	switch x := v.(type) {
	case json.Number:
		return string(x), "", true
	case string:
		s := strings.TrimSpace(x)
		// rocm-smi says "N/A (Secondary die)" for the second die of an
		// MI250, whose power the first one reports.
		if missingWords[strings.ToLower(s)] || len(s) > 64 || strings.HasPrefix(s, "N/A") {
			return "", "", false
		}
		return s, "", true
	}
	return "", "", false
}

// splitUnit returns the unit that ends s ("%", "W", "MB", "°C"), if any.
func splitUnit(s string) (string, bool) {
	i := strings.LastIndexAny(s, "0123456789.")
	if i < 0 || i == len(s)-1 {
		return "", false
	}
	return strings.TrimSpace(s[i+1:]), true
}

// parseDecimal reads [-+]digits[.digits] and, for a counter, digits only,
// as an integer so that 2^53+1 is not rounded into range.
func parseDecimal(s string, whole bool) (float64, bool) {
	if whole {
		if s == "" || strings.Trim(s, "0123456789") != "" {
			return 0, false
		}
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil || u > 1<<53 {
			return math.Inf(1), true // not exact in a float64: out of range
		}
		return float64(u), true
	}
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" || strings.Trim(body, "0123456789.") != "" ||
		strings.Count(body, ".") > 1 || body[0] == '.' || body[len(body)-1] == '.' {
		return 0, false
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.Inf(1), true // beyond float64: out of range
	}
	return x, true
}

// text reads a name or id: plain text, printable, cut at nvsmi.MaxCell.
// Markup stays as written; whoever shows it escapes it.
func text(v any) string {
	s, ok := v.(string)
	if !ok {
		if n, isNum := v.(json.Number); isNum {
			s = string(n)
		}
	}
	s = strings.TrimSpace(s)
	if missingWords[strings.ToLower(s)] {
		return ""
	}
	return hosttext.Clip(hosttext.Printable(s), nvsmi.MaxCell)
}

// serial reads a unique id or serial number; "0" and "0x0" are what the
// tools print for "none" (MI100 and MI210 boards print "0").
func serial(v any) string {
	s := text(v)
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		s = "0x" + strings.ToLower(s[2:])
	}
	if strings.Trim(s, "0x") == "" {
		return ""
	}
	return s
}

// notes collects what was not understood, at most maxNotes, then a count.
type notes struct {
	list []string
	more int
}

const maxNotes = 20

func (n *notes) add(format string, args ...any) {
	if len(n.list) >= maxNotes {
		n.more++
		return
	}
	n.list = append(n.list, fmt.Sprintf(format, args...))
}

func (n *notes) done() []string {
	if n.more > 0 {
		n.list[len(n.list)-1] = fmt.Sprintf("and %d more notes", n.more+1)
	}
	return n.list
}
