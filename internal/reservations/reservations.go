// Package reservations reads the JSON file in which labs note who reserved
// which GPUs until when. Two forms are read, mixed freely per host:
//
//	{"gpu01": [{"name": "alice", "date": "2026-12-01 18:00", "comment": "ICML", "gpus": [0, 1]}]}
//	{"gpu02": {"0": {"name": "bob", "date": "2026-12-01 18:00"}, "3": [{...}, {...}]}}
//
// In the list form an entry names its GPUs with "gpus" (a list, or a string
// like "0,1") or "gpu"; without either it reserves the whole host. In the
// object form the key is the GPU index ("all" or "*" for the whole host) and
// the value one entry or a list of them. "date" is when the reservation ends,
// in the local time of the machine that renders ("YYYY-MM-DD HH:MM", with
// seconds or a T, RFC 3339, or just "YYYY-MM-DD" for the end of that day); an
// entry without a date lasts until it is removed. "user" is read as "name".
// Other keys are ignored. An empty list, an empty object or null is fine.
//
// Every string kept from the file, and every one a problem quotes, is made
// printable (control characters, terminal escapes and invalid UTF-8 become
// '?') and cut: host names, user names and other short values to 80 bytes,
// comments to 256. They reach a terminal through render's error output and
// its -text table.
//
// The file is read only up to 16 MiB, and at most 20 of its problems are
// reported, then how many more there are: a broken or hostile file costs
// bounded memory and time, and a screenful of messages.
package reservations

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/hosttext"
)

const (
	// maxFileBytes bounds the file: a lab's reservations are kilobytes.
	maxFileBytes = 16 << 20
	// maxProblems is how many problems are reported one by one.
	maxProblems = 20
	// maxName bounds a host name, a user name and any other short value
	// kept or quoted from the file; maxComment bounds a comment.
	maxName    = 80
	maxComment = 256
)

// A Reservation holds GPUs of one host for someone until a time.
type Reservation struct {
	Host    string
	GPUs    []int // nil: the whole host
	Name    string
	Comment string
	Until   time.Time // zero: no end date
}

// Covers reports whether r holds GPU index gpu of its host.
func (r Reservation) Covers(gpu int) bool {
	if r.GPUs == nil {
		return true
	}
	for _, g := range r.GPUs {
		if g == gpu {
			return true
		}
	}
	return false
}

// Active reports whether r has not ended at now.
func (r Reservation) Active(now time.Time) bool {
	return r.Until.IsZero() || now.Before(r.Until)
}

// An Error is a problem at a place in the file.
type Error struct {
	File      string // "" when parsed from memory
	Line, Col int
	Msg       string
	Whole     bool // the file as a whole was unusable: no reservation was read
}

func (e *Error) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Col, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// MoreProblems stands for the problems past the first ones listed: a file
// with 50,000 bad dates is reported in a screenful, not 50,000 lines.
type MoreProblems struct {
	File string
	N    int
}

func (e *MoreProblems) Error() string {
	s := fmt.Sprintf("and %d more problem", e.N)
	if e.N != 1 {
		s += "s"
	}
	if e.File != "" {
		s += " in " + e.File
	}
	return s
}

// ReadFile reads and parses path; see parse. Problems carry the path. A
// file over 16 MiB is one *Error (Whole) at the place it passes the limit.
func ReadFile(path string, loc *time.Location) ([]Reservation, []error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, []error{err}
	}
	var list []Reservation
	var errs []error
	if len(data) > maxFileBytes {
		p := &parser{data: data}
		e := p.errAt(maxFileBytes, "the file goes on past %d MiB: no reservation was read from it", maxFileBytes>>20)
		e.Whole = true
		errs = []error{e}
	} else {
		list, errs = parse(data, loc)
	}
	for _, e := range errs {
		var pe *Error
		var more *MoreProblems
		switch {
		case errors.As(e, &pe):
			pe.File = path
		case errors.As(e, &more):
			more.File = path
		}
	}
	return list, errs
}

// readBounded reads path, up to one byte past maxFileBytes. A fifo or a
// device in the file's place is refused, not waited on.
func readBounded(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return io.ReadAll(io.LimitReader(f, maxFileBytes+1))
}

// parse reads the file's contents. A syntax error gives no reservations and
// one error; a bad entry (a date that does not parse, a GPU that is not a
// number) is left out with an error, and the others are kept. Every error is
// an *Error with the line and column, but for a last one that counts the
// problems past the first maxProblems.
func parse(data []byte, loc *time.Location) ([]Reservation, []error) {
	if loc == nil {
		loc = time.Local
	}
	p := &parser{data: data, loc: loc}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil // an empty file reserves nothing
	}
	// A syntax error first, from a full scan: its offset is exact (the
	// streaming decoder's offsets are not). Into a RawMessage: the scan
	// builds nothing from the values.
	if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			e := p.errAt(int(se.Offset)-1, "%s", se.Error())
			if strings.Contains(se.Error(), "unexpected end") {
				e = p.errAt(len(data), "unexpected end of file")
			}
			e.Whole = true
			return nil, []error{e}
		}
	}
	err := p.walkObject(data, 0, "the file must be a JSON object of host names", func(host string, val []byte, at int) error {
		return p.host(clean(host, maxName), val, at)
	})
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			pe.Whole = true
		}
		return nil, []error{err}
	}
	sort.SliceStable(p.out, func(i, j int) bool { return p.out[i].Host < p.out[j].Host })
	if p.more > 0 {
		p.errs = append(p.errs, &MoreProblems{N: p.more})
	}
	return p.out, p.errs
}

type parser struct {
	data []byte
	loc  *time.Location
	out  []Reservation
	errs []error // the first maxProblems problems
	more int     // how many came after those

	lineStarts []int // each line's offset; made for the first error
}

// problem notes a bad entry at byte offset off, unless maxProblems are
// noted already.
func (p *parser) problem(off int, format string, args ...any) {
	if len(p.errs) >= maxProblems {
		p.more++
		return
	}
	p.errs = append(p.errs, p.errAt(off, format, args...))
}

// errAt builds an error for byte offset off of the file.
func (p *parser) errAt(off int, format string, args ...any) *Error {
	off = max(0, min(off, len(p.data)))
	if p.lineStarts == nil {
		p.lineStarts = []int{0}
		for i := 0; ; {
			j := bytes.IndexByte(p.data[i:], '\n')
			if j < 0 {
				break
			}
			i += j + 1
			p.lineStarts = append(p.lineStarts, i)
		}
	}
	// the last line that starts at or before off
	line := sort.SearchInts(p.lineStarts, off+1)
	col := off - p.lineStarts[line-1] + 1
	// the arguments are clean already; this keeps any other text printable
	return &Error{Line: line, Col: col, Msg: hosttext.Printable(fmt.Sprintf(format, args...))}
}

// clean makes a string from the file printable and at most n bytes.
func clean(s string, n int) string {
	return hosttext.Clip(hosttext.Printable(s), n)
}

// syntaxErr turns a decoder error for the value starting at base into an
// error with a position.
func (p *parser) syntaxErr(err error, base int) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off := base + int(se.Offset) - 1
		if off < base {
			off = base
		}
		return p.errAt(off, "%s", se.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return p.errAt(len(p.data), "unexpected end of file")
	}
	return p.errAt(base, "%v", err)
}

// skip moves past white space and one separator (',' or ':').
func skip(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r' || data[i] == ',' || data[i] == ':') {
		i++
	}
	return i
}

// walkObject calls fn for each member of the object val (at offset base in
// the file) in order, with each value's raw bytes and offset.
func (p *parser) walkObject(val []byte, base int, notObject string, fn func(key string, v []byte, at int) error) error {
	dec := json.NewDecoder(bytes.NewReader(val))
	tok, err := dec.Token()
	if err != nil {
		return p.syntaxErr(err, base)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return p.errAt(base+skip(val, 0), "%s", notObject)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return p.syntaxErr(err, base)
		}
		key, _ := tok.(string)
		at := base + skip(val, int(dec.InputOffset()))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return p.syntaxErr(err, base)
		}
		if err := fn(key, raw, at); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return p.syntaxErr(err, base)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return p.syntaxErr(err, base)
		}
		return p.errAt(base+int(dec.InputOffset()), "more after the end of the object")
	}
	return nil
}

// walkArray calls fn for each element of the array val.
func (p *parser) walkArray(val []byte, base int, fn func(v []byte, at int)) error {
	dec := json.NewDecoder(bytes.NewReader(val))
	if _, err := dec.Token(); err != nil {
		return p.syntaxErr(err, base)
	}
	for dec.More() {
		at := base + skip(val, int(dec.InputOffset()))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return p.syntaxErr(err, base)
		}
		fn(raw, at)
	}
	return nil
}

func kind(v []byte) byte {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// host reads one host's value: a list of entries, or an object keyed by GPU.
func (p *parser) host(host string, val []byte, at int) error {
	switch kind(val) {
	case 'n': // null
		return nil
	case '[':
		return p.walkArray(val, at, func(v []byte, at int) {
			p.entry(host, nil, true, v, at)
		})
	case '{':
		return p.walkObject(val, at, "", func(key string, v []byte, vat int) error {
			var gpus []int
			k := strings.ToLower(strings.TrimSpace(key))
			if k != "all" && k != "*" && k != "" {
				n, err := strconv.Atoi(strings.TrimPrefix(k, "gpu"))
				if err != nil || n < 0 {
					p.problem(vat, "%s: %q is not a GPU index", host, clean(key, maxName))
					return nil
				}
				gpus = []int{n}
			}
			if kind(v) == '[' {
				return p.walkArray(v, vat, func(e []byte, eat int) { p.entry(host, gpus, false, e, eat) })
			}
			p.entry(host, gpus, false, v, vat)
			return nil
		})
	}
	p.problem(at, "%s: want a list of reservations or an object keyed by GPU index", host)
	return nil
}

// entry reads one reservation. In the list form (own) its GPUs come from the
// entry itself.
func (p *parser) entry(host string, gpus []int, own bool, val []byte, at int) {
	if kind(val) == 'n' {
		return
	}
	var e map[string]json.RawMessage
	if kind(val) != '{' || json.Unmarshal(val, &e) != nil {
		p.problem(at, "%s: a reservation must be an object like {\"name\": ..., \"date\": ...}", host)
		return
	}
	r := Reservation{Host: host, GPUs: gpus}
	r.Name = clean(text(e["name"]), maxName)
	if r.Name == "" {
		r.Name = clean(text(e["user"]), maxName)
	}
	r.Comment = clean(text(e["comment"]), maxComment)
	if own {
		for _, k := range []string{"gpus", "gpu"} {
			if raw, ok := e[k]; ok && kind(raw) != 'n' {
				list, err := indexes(raw)
				if err != nil {
					p.problem(at, "%s: %s: %v", host, k, err)
					return
				}
				r.GPUs = list
				break
			}
		}
	}
	if d := text(e["date"]); d != "" {
		t, err := parseDate(d, p.loc)
		if err != nil {
			p.problem(at, "%s: date %q is not YYYY-MM-DD HH:MM", host, clean(d, maxName))
			return
		}
		r.Until = t
	}
	p.out = append(p.out, r)
}

// text reads a JSON string, or writes any other scalar as text.
func text(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.TrimSpace(s)
	}
	if kind(raw) == 'n' || kind(raw) == '{' || kind(raw) == '[' {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// indexes reads 3, "3", "0,1", [0, 1] or ["0", "1"].
func indexes(raw json.RawMessage) ([]int, error) {
	var items []json.RawMessage
	if kind(raw) == '[' {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, err
		}
	} else {
		items = []json.RawMessage{raw}
	}
	out := []int{}
	for _, it := range items {
		for _, f := range strings.FieldsFunc(text(it), func(r rune) bool { return r == ',' || r == ' ' }) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%q is not a GPU index", clean(f, maxName))
			}
			out = append(out, n)
		}
	}
	return out, nil
}

var dateLayouts = []string{
	"2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02T15:04:05",
}

// parseDate reads an end date; a bare day ends at the next midnight.
func parseDate(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, l := range dateLayouts {
		if t, err := time.ParseInLocation(l, s, loc); err == nil {
			return t, nil
		}
	}
	t, err := time.ParseInLocation("2006-01-02", s, loc)
	if err != nil {
		return time.Time{}, err
	}
	return t.AddDate(0, 0, 1), nil
}
