// Package lines splits what a host printed into lines: at each "\n", with
// a "\r" before it dropped (as bufio.ScanLines does), and with no limit on
// a line's length, so that one long line cannot end the reading of those
// after it. Each line says where it lies in the text, for parsers that
// keep a part of the text as it is.
package lines

import (
	"bytes"
	"iter"
)

// Line is one line of a text.
type Line struct {
	Text  []byte // without its "\n" and a "\r" before it; part of the text
	Start int    // where the line starts in the text
	Next  int    // where the line after it starts (the text's length after the last)
}

// All yields the lines of text in order. A last line without "\n" is a
// line; an empty text has none, and "a\n" has one.
func All(text []byte) iter.Seq[Line] {
	return func(yield func(Line) bool) {
		for pos := 0; pos < len(text); {
			l := Line{Start: pos}
			rest := text[pos:]
			if i := bytes.IndexByte(rest, '\n'); i >= 0 {
				l.Text, pos = rest[:i], pos+i+1
			} else {
				l.Text, pos = rest, len(text)
			}
			l.Text = bytes.TrimSuffix(l.Text, []byte{'\r'})
			l.Next = pos
			if !yield(l) {
				return
			}
		}
	}
}
