package rocm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/gpumon/gpumon/internal/hosttext"
)

// Bounds on what one tool answer can make the parser hold. A 64-GPU
// `amd-smi metric --json` is about 1.5 MB and nests 5 deep; past these the
// answer is not a GPU tool's and is refused.
const (
	maxInput = 8 << 20 // bytes looked at
	maxDepth = 32      // nesting of objects and lists
	// maxStarts is how many lines that open with '{' or '[' are tried
	// before giving up: warnings before the JSON are a few lines, not
	// thousands.
	maxStarts = 64
)

var errTooDeep = errors.New("JSON nested more than 32 deep")

// decodeJSON decodes the first JSON object or list that starts a line of
// out and is whole; what comes before it (warnings: the probe merges
// stderr) and after it is ignored. Numbers stay json.Number, so that 2^64
// is seen for what it is rather than rounded.
//
// pick says, for each member of an object read with filter, how its value
// is read: built (and everything under it), filtered again (its objects'
// members picked too: "gpu_data", "card0"), or only checked to be JSON,
// so that what nobody reads (clocks, caches) costs one pass over its
// bytes. The answer's top is read with filter; a nil pick builds
// everything.
func decodeJSON(out []byte, pick func(key []byte) mode) (any, error) {
	if len(out) > maxInput {
		return nil, fmt.Errorf("answer of %d bytes, more than the %d read", len(out), maxInput)
	}
	starts := 0
	for line := 0; line < len(out) && starts < maxStarts; {
		next := bytes.IndexByte(out[line:], '\n')
		if next < 0 {
			next = len(out)
		} else {
			next += line + 1
		}
		start := skipSpace(out[:next], line)
		if start < next && (out[start] == '{' || out[start] == '[') {
			starts++
			p := parser{b: out, i: start, pick: pick}
			v := p.value(p.mode())
			if p.err == nil {
				return v, nil
			}
			if errors.Is(p.err, errTooDeep) {
				return nil, p.err
			}
		}
		line = next
	}
	if first := hosttext.FirstLine(string(out)); first != "" {
		return nil, fmt.Errorf("no JSON in the answer, which begins %q", first)
	}
	return nil, errors.New("empty answer")
}

// A parser reads one JSON value in a single pass, checking it as
// encoding/json would and building only what is kept.
type parser struct {
	b     []byte
	i     int
	depth int
	err   error
	pick  func(key []byte) mode
}

// How a value is read: built whole, built with its objects' members
// picked, or only checked.
type mode int

const (
	build mode = iota
	filter
	check
	// asReading builds a value as build does, except that an object of
	// "value" and "unit" only (amd-smi's readings from ROCm 6.1 on) is
	// a valueUnit, not a map: a GPU has dozens, and the maps were most of
	// what reading an answer cost.
	asReading
)

// A valueUnit is an object {"value": …, "unit": …} read in mode asReading.
type valueUnit struct {
	value, unit       any
	hasValue, hasUnit bool
}

func (p *parser) mode() mode {
	if p.pick == nil {
		return build
	}
	return filter
}

var errSyntax = errors.New("not JSON")

func (p *parser) fail(err error) any {
	if p.err == nil {
		p.err = err
	}
	return nil
}

func (p *parser) value(m mode) any {
	p.i = skipSpace(p.b, p.i)
	if p.i >= len(p.b) || p.err != nil {
		return p.fail(errSyntax)
	}
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		if p.depth++; p.depth > maxDepth {
			return p.fail(errTooDeep)
		}
		var v any
		if c == '{' {
			v = p.object(m)
		} else {
			v = p.list(m)
		}
		p.depth--
		return v
	case c == '"':
		s, ok := p.str(m != check)
		if !ok {
			return p.fail(errSyntax)
		}
		return s
	case c == '-' || c >= '0' && c <= '9':
		return p.number(m != check)
	}
	return p.literal()
}

func (p *parser) object(m mode) any {
	if m == asReading {
		return p.readingObject()
	}
	p.i++ // '{'
	var obj map[string]any
	if m != check {
		obj = make(map[string]any, 8)
	}
	if p.i = skipSpace(p.b, p.i); p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return obj
	}
	for p.err == nil {
		p.i = skipSpace(p.b, p.i)
		key, ok := p.text()
		if p.i = skipSpace(p.b, p.i); !ok || p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.fail(errSyntax)
		}
		p.i++
		sub := m
		if m == filter {
			sub = p.pick(key)
		}
		v := p.value(sub)
		if sub != check {
			obj[intern(key).(string)] = v // of a key given twice the last counts, as for encoding/json
		}
		if !p.next('}') {
			break
		}
	}
	return obj
}

// readingObject reads an object in mode asReading: a valueUnit while its
// members are "value" and "unit" only, else a map of them all.
func (p *parser) readingObject() any {
	p.i++ // '{'
	var r valueUnit
	var obj map[string]any
	if p.i = skipSpace(p.b, p.i); p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return map[string]any{}
	}
	for p.err == nil {
		p.i = skipSpace(p.b, p.i)
		key, ok := p.text()
		if p.i = skipSpace(p.b, p.i); !ok || p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.fail(errSyntax)
		}
		p.i++
		v := p.value(build)
		switch {
		case obj == nil && string(key) == "value":
			r.value, r.hasValue = v, true
		case obj == nil && string(key) == "unit":
			r.unit, r.hasUnit = v, true
		default:
			if obj == nil {
				obj = make(map[string]any, 4)
				if r.hasValue {
					obj["value"] = r.value
				}
				if r.hasUnit {
					obj["unit"] = r.unit
				}
			}
			obj[intern(key).(string)] = v
		}
		if !p.next('}') {
			break
		}
	}
	if obj != nil {
		return obj
	}
	return r
}

func (p *parser) list(m mode) any {
	p.i++ // '['
	var list []any
	if p.i = skipSpace(p.b, p.i); p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		if m != check {
			return []any{}
		}
		return nil
	}
	for p.err == nil {
		v := p.value(m)
		if m != check {
			list = append(list, v)
		}
		if !p.next(']') {
			break
		}
	}
	return list
}

// next reads the ',' between members or elements (true), or the closing
// bracket (false).
func (p *parser) next(closing byte) bool {
	p.i = skipSpace(p.b, p.i)
	switch {
	case p.err != nil:
		return false
	case p.i < len(p.b) && p.b[p.i] == ',':
		p.i++
		return true
	case p.i < len(p.b) && p.b[p.i] == closing:
		p.i++
		return false
	}
	p.fail(errSyntax)
	return false
}

// str reads a string value, built only when kept.
func (p *parser) str(keep bool) (any, bool) {
	t, ok := p.text()
	if !ok || !keep {
		return nil, ok
	}
	return intern(t), true
}

// text reads a string at p.i and returns its text, without allocating
// where it holds no escape and is valid UTF-8; escapes and invalid UTF-8
// (made U+FFFD) are rare and left to encoding/json.
func (p *parser) text() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start, escaped := p.i, false
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '\\':
			escaped = true
			j++
		case c == '"':
			p.i = j + 1
			raw := p.b[start:p.i]
			if !escaped && utf8.Valid(raw) {
				return raw[1 : len(raw)-1], true
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return nil, false
			}
			return []byte(s), true
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// intern returns text as a boxed string, shared for the common ones.
func intern(text []byte) any {
	if v, ok := common[string(text)]; ok {
		return v
	}
	return string(text)
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *parser) number(keep bool) any {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.digits() == 0:
		return p.fail(errSyntax)
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return p.fail(errSyntax)
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return p.fail(errSyntax)
		}
	}
	if !keep {
		return nil
	}
	if v, ok := commonNumbers[string(p.b[start:p.i])]; ok {
		return v
	}
	return json.Number(p.b[start:p.i])
}

func (p *parser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

func (p *parser) literal() any {
	for _, lit := range []struct {
		text string
		v    any
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if bytes.HasPrefix(p.b[p.i:], []byte(lit.text)) {
			p.i += len(lit.text)
			return lit.v
		}
	}
	return p.fail(errSyntax)
}

// common holds, boxed once, the strings amd-smi repeats in every answer
// (keys, units, "N/A" thirty times per GPU): building an answer is mostly
// allocating, and these need none.
var common, commonNumbers = func() (map[string]any, map[string]any) {
	strs := map[string]any{}
	for _, s := range []string{"N/A", "%", "W", "C", "MB", "mV", "MHz", "GT/s", "J", "B", "KB",
		"ENABLED", "DISABLED", "UNTHROTTLED", "value", "unit", "gpu", "gfx_activity", "umc_activity",
		"mm_activity", "vcn_activity", "jpeg_activity", "socket_power", "gfx_voltage", "soc_voltage",
		"mem_voltage", "power_management", "throttle_status", "edge", "hotspot", "mem", "total_vram",
		"used_vram", "free_vram", "total_visible_vram", "used_visible_vram", "free_visible_vram",
		"total_gtt", "used_gtt", "free_gtt", "market_name", "bdf", "size", "speed", "max", "rpm", "usage"} {
		strs[s] = s
	}
	nums := map[string]any{}
	for i := range 101 {
		s := fmt.Sprint(i)
		nums[s] = json.Number(s)
	}
	return strs, nums
}()

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
