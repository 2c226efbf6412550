// Package hosttext turns text that a host, a command or a file printed into
// one short, printable line for a status column, a log line or a terminal:
// the first line that says something, control characters (terminal escapes
// included) made visible as '?', cut on a rune boundary.
package hosttext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLine is the length FirstLine cuts to: room for a sentence, not a log.
const MaxLine = 200

// FirstLine returns the first non-blank line of s, trimmed, printable and at
// most MaxLine bytes.
func FirstLine(s string) string {
	for len(s) > 0 {
		line, rest, _ := strings.Cut(s, "\n")
		if line = strings.TrimSpace(line); line != "" {
			return Clip(Printable(line), MaxLine)
		}
		s = rest
	}
	return ""
}

// Printable replaces every rune that is not printable (control characters,
// invalid UTF-8) by '?'; spaces stay.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' {
			return '?'
		}
		return r
	}, s)
}

// Clip cuts s to at most n bytes on a rune boundary, the last ones being an
// ellipsis when something was cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)] + "…"
}
