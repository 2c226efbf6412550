package inifile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/ini.v1"
)

// Section is one section of a File. The getters leave their destination
// alone when the key is absent, so a config starts from its defaults; a
// value that does not parse or is out of limits is an *Error at its line
// reading `"VALUE" is not WANT`.
type Section struct {
	f    *File
	name string
	sec  *ini.Section // nil when the file has no such section
}

// Name is the section's name as written in its header.
func (s Section) Name() string { return s.name }

// Keys returns the section's keys (lower-cased) in the file's order.
func (s Section) Keys() []string {
	if s.sec == nil {
		return nil
	}
	return s.sec.KeyStrings()
}

// ErrorAt returns an error pointing at key (or at the header when the key
// is not in the file).
func (s Section) ErrorAt(key, format string, args ...any) *Error {
	return s.f.ErrorAt(s.name, key, format, args...)
}

// MissingKey is the error for a key a section must have: at the
// section's header, or at the key when it is there but empty.
func (s Section) MissingKey(key, hint string) *Error {
	e := s.f.ErrorAt(s.name, key, "missing in [%s]", s.name)
	e.HintText = hint
	return e
}

// String returns the key's value without surrounding white space, and
// whether the key is there at all (an empty value is there).
func (s Section) String(key string) (string, bool) {
	if s.sec == nil || !s.sec.HasKey(key) {
		return "", false
	}
	return strings.TrimSpace(s.sec.Key(key).String()), true
}

// Path returns the key's value resolved as File.Resolve does; "" when the
// value is empty, for the caller to decide what empty means.
func (s Section) Path(key string) (string, bool) {
	v, ok := s.String(key)
	if v == "" {
		return "", ok
	}
	return s.f.Resolve(v), ok
}

// List splits the key's value on commas and line breaks (a value continued
// over indented lines), dropping empty items.
func (s Section) List(key string) ([]string, bool) {
	v, ok := s.String(key)
	if !ok {
		return nil, false
	}
	return splitList(v), true
}

// Paths is List with each item resolved as File.Resolve does.
func (s Section) Paths(key string) ([]string, bool) {
	items, ok := s.List(key)
	for i, p := range items {
		items[i] = s.f.Resolve(p)
	}
	return items, ok
}

// splitList splits v on commas and line breaks, trims each item and drops
// the empty ones: "a, b,\n  c," is a, b, c.
func splitList(v string) []string {
	out := []string{}
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Bool reads a boolean in configparser's words: 1, yes, true, on and 0,
// no, false, off, in any case.
func (s Section) Bool(key string, dst *bool) error {
	v, ok := s.String(key)
	if !ok {
		return nil
	}
	switch strings.ToLower(v) {
	case "1", "yes", "true", "on":
		*dst = true
	case "0", "no", "false", "off":
		*dst = false
	default:
		return s.ErrorAt(key, "%q is not a boolean (true/false, yes/no, on/off, 1/0)", v)
	}
	return nil
}

// Limits bound a number: Min and Max are allowed, Max 0 means no upper
// limit. Want says what a good value is, for the error `"x" is not WANT`;
// left empty, it is made from the limits.
type Limits[T int | float64 | time.Duration] struct {
	Min, Max T
	Want     string
}

func (l Limits[T]) allow(n T) bool {
	return n >= l.Min && (l.Max == 0 || n <= l.Max)
}

func (l Limits[T]) want(kind string, show func(T) string) string {
	switch {
	case l.Want != "":
		return l.Want
	case l.Max == 0:
		return fmt.Sprintf("%s of at least %s", kind, show(l.Min))
	}
	return fmt.Sprintf("%s from %s to %s", kind, show(l.Min), show(l.Max))
}

// Int reads a whole number within lim.
func (s Section) Int(key string, lim Limits[int], dst *int) error {
	v, ok := s.String(key)
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || !lim.allow(n) {
		return s.ErrorAt(key, "%q is not %s", v, lim.want("a whole number", strconv.Itoa))
	}
	*dst = n
	return nil
}

// Float reads a number within lim (never NaN).
func (s Section) Float(key string, lim Limits[float64], dst *float64) error {
	v, ok := s.String(key)
	if !ok {
		return nil
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(n) || !lim.allow(n) {
		return s.ErrorAt(key, "%q is not %s", v, lim.want("a number", func(f float64) string {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}))
	}
	*dst = n
	return nil
}

// Seconds reads a number of seconds within lim: 10, 2.5, or 10s. This is
// the syntax of the older tools' *_seconds and timeout keys.
func (s Section) Seconds(key string, lim Limits[time.Duration], dst *time.Duration) error {
	return s.duration(key, lim, false, dst)
}

// Duration reads what Seconds reads, and Go durations too: 90s, 15m,
// 1h30m, 500ms.
func (s Section) Duration(key string, lim Limits[time.Duration], dst *time.Duration) error {
	return s.duration(key, lim, true, dst)
}

func (s Section) duration(key string, lim Limits[time.Duration], units bool, dst *time.Duration) error {
	v, ok := s.String(key)
	if !ok {
		return nil
	}
	d, ok := parseDuration(v, units)
	if !ok || !lim.allow(d) {
		kind := "a number of seconds"
		if units {
			kind = "a duration"
		}
		return s.ErrorAt(key, "%q is not %s", v, lim.want(kind, time.Duration.String))
	}
	*dst = d
	return nil
}

// maxSeconds keeps a number of seconds inside time.Duration (about 292
// years) with room for float rounding.
const maxSeconds = 9e9

// parseDuration is the one duration syntax of every config file: a number
// of seconds with or without a trailing "s" (10, 2.5, 1e3, 10s), and, when
// units is set, a Go duration (15m, 1h30m, 500ms). It reports false for
// anything else, NaN and values beyond time.Duration included.
func parseDuration(v string, units bool) (time.Duration, bool) {
	if secs, err := strconv.ParseFloat(strings.TrimSuffix(v, "s"), 64); err == nil {
		if math.IsNaN(secs) || math.Abs(secs) > maxSeconds {
			return 0, false
		}
		// rounded, not truncated: 0.001 s is 1ms, not 999.999µs
		return time.Duration(math.Round(secs * float64(time.Second))), true
	}
	if !units {
		return 0, false
	}
	return ParseDuration(v)
}

// ParseDuration reads a Go duration (15m, 1h30m, 500ms) that may start
// with whole days (7d, 1d12h): the spans of history are days long. A
// command line's durations (render -usage 7d) use it too, so a span reads
// the same in the file and on the command line.
func ParseDuration(v string) (time.Duration, bool) {
	var days int64
	if i := strings.IndexByte(v, 'd'); i > 0 {
		n, err := strconv.ParseInt(v[:i], 10, 64)
		if err != nil || n < 0 || n > 100*366 {
			return 0, false
		}
		days, v = n, v[i+1:]
		if v == "" {
			return time.Duration(days) * 24 * time.Hour, true
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 && days > 0 {
		return 0, false
	}
	return time.Duration(days)*24*time.Hour + d, true
}
