// Package inifile reads the INI files users already have (config.ini of the
// older monitor, gpu_mon's config) the way Python's configparser reads them,
// and finds where sections and keys are, so that config errors can name the
// line: gopkg.in/ini.v1 keeps no positions.
package inifile

import (
	"bufio"
	"bytes"
	"strings"

	"gopkg.in/ini.v1"
)

// Parse reads src as configparser does (keys case-insensitive, no inline
// comments, indented continuation lines) and returns the file with Lines(src).
func Parse(src []byte) (*ini.File, map[string]int, error) {
	f, err := ini.LoadSources(ini.LoadOptions{
		IgnoreInlineComment:        true,
		InsensitiveKeys:            true,
		AllowPythonMultilineValues: true,
		SpaceBeforeInlineComment:   true,
	}, src)
	if err != nil {
		return nil, nil, err
	}
	return f, Lines(src), nil
}

// Lines maps "section.key" (key lower-cased, as configparser and ini.v1's
// Insensitive mode do) to the line of its first occurrence, and "section."
// to the line of the section's header. Keys before any header are under
// ini.DefaultSection.
func Lines(src []byte) map[string]int {
	m := map[string]int{}
	section := ini.DefaultSection
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
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
			i := strings.IndexAny(line, "=:")
			if i < 0 {
				continue
			}
			key := strings.ToLower(strings.TrimSpace(line[:i]))
			if _, ok := m[section+"."+key]; !ok {
				m[section+"."+key] = n
			}
		}
	}
	return m
}
