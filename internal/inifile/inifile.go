// Package inifile is the one INI layer of fetch, render and idlemon. It
// reads the files users already have (config.ini of the older monitor,
// gpu_mon's config) the way Python's configparser reads them, checks every
// section and key name against a Layout, and reads values with typed
// getters that know their limits. Every mistake is an *Error naming the
// file, the line and the key, with a hint where the fix is known.
// gopkg.in/ini.v1 does the parsing but keeps no positions, so this package
// finds the lines itself.
package inifile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"gopkg.in/ini.v1"
)

// maxSize bounds what Read takes in: a config file is a few kilobytes, and
// -c /dev/zero must not fill the memory.
const maxSize = 16 << 20

// An Error points at the place in the file that is wrong. internal/cli
// prints Hint on a line of its own.
type Error struct {
	File     string
	Line     int    // 0 when unknown
	Section  string // "" when the error is about the whole file
	Key      string // "" when the error is about a section or the file
	Msg      string
	HintText string // a line telling the fix, when one is known
}

// Hint is the line that tells the fix, or "".
func (e *Error) Hint() string { return e.HintText }

// Error reads "file:line: key: message"; the section is left out, as the
// line already says where it is.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// File is a parsed INI file that knows where each section and key is.
type File struct {
	Name  string // as given to Read, for messages
	ini   *ini.File
	lines map[string]int // see lineIndex
}

// Open reads the file at path; see Read.
func Open(path string) (*File, error) {
	r, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return Read(r, path)
}

// Read parses r as configparser does: keys case-insensitive, '#' and ';'
// comment lines, no inline comments ('#' inside a value is kept), indented
// continuation lines. name is used in messages and to resolve relative
// paths (see Resolve).
func Read(r io.Reader, name string) (*File, error) {
	src, err := io.ReadAll(io.LimitReader(r, maxSize+1))
	if err != nil {
		return nil, err // os.File's errors name the file already
	}
	if len(src) > maxSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("larger than %d MiB: not a config file", maxSize>>20)}
	}
	f, err := ini.LoadSources(ini.LoadOptions{
		IgnoreInlineComment:        true,
		InsensitiveKeys:            true,
		AllowPythonMultilineValues: true,
		SpaceBeforeInlineComment:   true,
		// ini.v1 looks for continuation lines only as far as its buffer
		// reaches: with the default 4 KiB, a hosts list continued over more
		// lines than that broke into "key-value delimiter not found".
		ReaderBufferSize: len(src),
	}, src)
	text := skipBOM(src)
	if err != nil {
		return nil, &Error{File: name, Line: errorLine(text, err), Msg: strings.TrimSpace(err.Error())}
	}
	return &File{Name: name, ini: f, lines: lineIndex(text)}, nil
}

// skipBOM drops a byte order mark as ini.v1 does (Notepad writes one):
// UTF-8's, or the two bytes of UTF-16's, which ini.v1 skips and does not
// decode.
func skipBOM(src []byte) []byte {
	switch {
	case bytes.HasPrefix(src, []byte{0xef, 0xbb, 0xbf}):
		return src[3:]
	case bytes.HasPrefix(src, []byte{0xfe, 0xff}), bytes.HasPrefix(src, []byte{0xff, 0xfe}):
		return src[2:]
	}
	return src
}

// errorLine finds the line of ini.v1's syntax errors, which quote the line
// but do not number it; 0 when it cannot tell.
func errorLine(src []byte, err error) int {
	var quotedLine string
	var delim ini.ErrDelimiterNotFound
	var empty ini.ErrEmptyKeyName
	switch {
	case errors.As(err, &delim):
		quotedLine = delim.Line
	case errors.As(err, &empty):
		quotedLine = empty.Line
	case strings.HasPrefix(err.Error(), "unclosed section: "):
		quotedLine = strings.TrimPrefix(err.Error(), "unclosed section: ")
	default:
		return 0
	}
	quotedLine = strings.TrimSpace(quotedLine)
	for i, line := range bytes.Split(src, []byte("\n")) {
		if string(bytes.TrimSpace(line)) == quotedLine {
			return i + 1
		}
	}
	return 0
}

// Has reports whether the file has the section.
func (f *File) Has(section string) bool {
	_, err := f.ini.GetSection(section)
	return err == nil
}

// Section returns the named section; a missing one has no keys, so every
// getter leaves its default alone.
func (f *File) Section(name string) Section {
	sec, err := f.ini.GetSection(name)
	if err != nil {
		sec = nil
	}
	return Section{f: f, name: name, sec: sec}
}

// Sections returns every section in the file's order, without the implicit
// one that holds keys before the first header (Check refuses those).
func (f *File) Sections() []Section {
	var out []Section
	for _, sec := range f.ini.Sections() {
		if sec.Name() == ini.DefaultSection {
			continue
		}
		out = append(out, Section{f: f, name: sec.Name(), sec: sec})
	}
	return out
}

// ErrorAt returns an error pointing at section's key, or at the section's
// header when the key is not in the file (a key that is missing), or at no
// line when neither is. It is for problems found after reading too: a user
// that does not exist, a hosts_file that cannot be read.
func (f *File) ErrorAt(section, key, format string, args ...any) *Error {
	line := f.lines[section+"."+key]
	if line == 0 {
		line = f.lines[section+"."]
	}
	return &Error{File: f.Name, Line: line, Section: section, Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Resolve expands a leading ~ and makes a relative path relative to the
// file's folder, so that cron's working directory does not matter.
func (f *File) Resolve(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(f.Name), p)
	}
	return p
}

// lineIndex maps "section.key" (key lower-cased, as configparser and
// ini.v1's insensitive mode do) to the line of its last occurrence, the
// one whose value ini.v1 keeps, and "section." to the line of the section's
// first header. Keys before any header are under ini.DefaultSection.
//
// It follows ini.v1's parser (v1.67, with Read's options) line by line, so
// that a line that ini.v1 reads as part of a value is never taken for a
// key: indented lines after a value (configparser's continuation lines), a
// value ending in a backslash, a value in """ or ` quotes over several
// lines.
func lineIndex(src []byte) map[string]int {
	m := map[string]int{}
	section := ini.DefaultSection
	var cont continuation
	autoKeys := 0 // ini.v1 names a "-" key #1, #2, ... in each section
	lines := bytes.Split(src, []byte("\n"))
	for i, b := range lines {
		raw, n, last := string(b), i+1, i == len(lines)-1
		if cont.swallows(raw) {
			continue
		}
		line := strings.TrimLeftFunc(raw, unicode.IsSpace)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			if end := strings.LastIndexByte(line, ']'); end > 0 {
				section, autoKeys = line[1:end], 0
				if _, ok := m[section+"."]; !ok {
					m[section+"."] = n
				}
			}
		default:
			key, value, ok := splitKey(line)
			if !ok {
				continue
			}
			if key == "-" {
				autoKeys++
				key = "#" + strconv.Itoa(autoKeys)
			}
			m[section+"."+strings.ToLower(key)] = n
			cont = continuationAfter(value, !last)
		}
	}
	return m
}

// continuation is how the value of the last key goes on over the next
// lines, if it does.
type continuation struct {
	indented  bool   // while lines start with a space, tab or form feed
	backslash bool   // while lines end in a backslash
	quote     string // until a line holding this quote
}

// continuationAfter is what follows a key's value: what ini.v1's
// readValue does with it. hasNewline is false on the file's last line.
func continuationAfter(value string, hasNewline bool) continuation {
	if hasNewline {
		value += "\n"
	}
	v := strings.TrimLeftFunc(value, unicode.IsSpace)
	switch {
	case v == "":
		return continuation{indented: hasNewline}
	case len(v) > 3 && v[:3] == `"""`:
		if !strings.Contains(v[3:], `"""`) {
			return continuation{quote: `"""`}
		}
		return continuation{}
	case v[0] == '`':
		if !strings.Contains(v[1:], "`") {
			return continuation{quote: "`"}
		}
		return continuation{}
	}
	t := strings.TrimSpace(v)
	switch {
	case strings.HasSuffix(t, `\`):
		return continuation{backslash: true}
	case quoted(t, '\'') || quoted(t, '"'):
		return continuation{}
	}
	return continuation{indented: hasNewline}
}

// quoted is ini.v1's hasSurroundedQuote.
func quoted(v string, q byte) bool {
	return len(v) >= 2 && v[0] == q && v[len(v)-1] == q && strings.IndexByte(v[1:], q) == len(v)-2
}

// swallows reports whether raw is part of the value before it, and moves on.
func (c *continuation) swallows(raw string) bool {
	switch {
	case c.quote != "":
		if pos := strings.LastIndex(raw, c.quote); pos >= 0 && !strings.HasSuffix(strings.TrimSpace(raw[pos+len(c.quote):]), `\`) {
			*c = continuation{}
		}
		return true
	case c.backslash:
		if next := strings.TrimSpace(raw); next == "" || !strings.HasSuffix(next, `\`) {
			*c = continuation{}
		}
		return true
	case c.indented && raw != "" && strings.ContainsRune(" \t\f", rune(raw[0])):
		return true
	}
	*c = continuation{}
	return false
}

// splitKey splits a "key = value" or "key: value" line as ini.v1's
// readKeyName does: a key in quotes may hold '=' or ':' ("gpu02:2222" = x).
func splitKey(line string) (key, value string, ok bool) {
	quote := ""
	switch {
	case len(line) > 6 && line[:3] == `"""`:
		quote = `"""`
	case line[0] == '"' || line[0] == '`':
		quote = line[:1]
	}
	if quote != "" {
		end := strings.Index(line[len(quote):], quote)
		if end < 0 {
			return "", "", false
		}
		end += len(quote)
		rest := line[end+len(quote):]
		i := strings.IndexAny(rest, "=:")
		if i < 0 {
			return "", "", false
		}
		return strings.TrimSpace(line[len(quote):end]), rest[i+1:], true
	}
	i := strings.IndexAny(line, "=:")
	if i <= 0 {
		return "", "", false
	}
	return strings.TrimSpace(line[:i]), line[i+1:], true
}

// Decode reads the file at path and hands it to from, which checks it and
// makes a command's config: the one way fetch, render and idlemon load
// theirs.
func Decode[C any](path string, from func(*File) (C, error)) (C, error) {
	f, err := Open(path)
	if err != nil {
		var zero C
		return zero, err
	}
	return from(f)
}

// DecodeReader is Decode of a config held in r (tests need no files); name
// is used in messages and to resolve relative paths, as in Read.
func DecodeReader[C any](r io.Reader, name string, from func(*File) (C, error)) (C, error) {
	f, err := Read(r, name)
	if err != nil {
		var zero C
		return zero, err
	}
	return from(f)
}
