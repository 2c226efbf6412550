package render

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// oneLine leaves nothing a terminal acts on: C0 and C1 controls (0x9b is
// CSI on some terminals, raw or encoded), invalid UTF-8, and other
// invisible runes that reorder or hide text.
func TestOneLine(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "torchrun train.py", "torchrun train.py"},
		{"unicode kept", "café 日本 ✓", "café 日本 ✓"},
		{"newlines and tabs", "a\nb\tc\r\n", "a b c"},
		{"ESC sequence", "\x1b[2Jgone", "[2Jgone"},
		{"raw C1 CSI byte", "\x9b31mred", "31mred"},
		{"encoded C1 CSI", "x\xc2\x9b31m", "x 31m"},
		{"other C1", "a\u0085b\u009dc", "a b c"},
		{"invalid byte", "a\xffb", "a b"},
		{"truncated rune", "ab\xe6\x97", "ab"},
		{"DEL", "a\x7fb", "a b"},
		{"bidi override", "user\u202efdp.exe", "user fdp.exe"},
		{"only controls", "\x1b\x9b\xff\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := oneLine(tt.in)
			if got != tt.want {
				t.Errorf("oneLine(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !utf8.ValidString(got) || strings.ContainsAny(got, "\x1b\u009b\ufffd") {
				t.Errorf("oneLine(%q) = %q: invalid UTF-8 or a control left", tt.in, got)
			}
		})
	}
}

// The warnings above the -text table (a reservations file's problems, say)
// are one clean line each, like the table's cells.
func TestTextWarningsAreOneLine(t *testing.T) {
	tests := []struct{ name, warning, want string }{
		{"ESC", "Reservations file r.json:\x1b[2J", "warning: Reservations file r.json: [2J\n"},
		{"raw CSI byte", "bad\x9b31mred", "warning: bad 31mred\n"},
		{"encoded CSI", "bad\xc2\x9b31mred", "warning: bad 31mred\n"},
		{"invalid byte and newline", "a\xff\nb", "warning: a b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := testReport(t, readRows(t, "testdata/load_data.csv"), "")
			rep.Warnings = []string{tt.warning}
			var b bytes.Buffer
			if err := Text(&b, rep, false); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if !strings.Contains(out, "\n"+tt.want) {
				t.Errorf("no line %q in:\n%s", tt.want, out)
			}
			if !utf8.ValidString(out) || strings.ContainsAny(out, "\x1b\u009b") {
				t.Errorf("output has invalid UTF-8 or a control:\n%q", out)
			}
		})
	}
}
