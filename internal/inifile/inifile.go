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
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(src) > maxSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("larger than %d MiB: not a config file", maxSize>>20)}
	}
	f, err := ini.LoadSources(ini.LoadOptions{
		IgnoreInlineComment:        true,
		InsensitiveKeys:            true,
		AllowPythonMultilineValues: true,
		SpaceBeforeInlineComment:   true,
	}, src)
	if err != nil {
		return nil, &Error{File: name, Msg: err.Error()}
	}
	return &File{Name: name, ini: f, lines: lineIndex(src)}, nil
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
func lineIndex(src []byte) map[string]int {
	m := map[string]int{}
	section := ini.DefaultSection
	for i, rawBytes := range bytes.Split(src, []byte("\n")) {
		n := i + 1
		raw := string(rawBytes)
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && strings.HasSuffix(line, "]"):
			section = strings.TrimSpace(line[1 : len(line)-1])
			if _, ok := m[section+"."]; !ok {
				m[section+"."] = n
			}
		case raw[0] == ' ' || raw[0] == '\t':
			// a continuation line
		default:
			if key, ok := keyOf(line); ok {
				m[section+"."+strings.ToLower(key)] = n
			}
		}
	}
	return m
}

// keyOf returns the key of a "key = value" or "key: value" line. A key in
// quotes may hold '=' or ':' ("gpu02:2222" = GPU 2), as ini.v1 allows.
func keyOf(line string) (string, bool) {
	if q := line[0]; q == '"' || q == '`' {
		if end := strings.IndexByte(line[1:], q); end >= 0 {
			return line[1 : end+1], true
		}
	}
	i := strings.IndexAny(line, "=:")
	if i < 0 {
		return "", false
	}
	return strings.TrimSpace(line[:i]), true
}
