package hosttext

import (
	"strings"
	"testing"
)

func TestFirstLine(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", ""},
		{"blank lines first", "\n  \n\tsh: 1: nvidia-smi: not found\nmore\n", "sh: 1: nvidia-smi: not found"},
		{"CRLF", "Access denied\r\n", "Access denied"},
		{"terminal escape", "\x1b[31mred\x1b[0m", "?[31mred?[0m"},
		{"invalid UTF-8", "a\xffb", "a?b"},
		{"long", strings.Repeat("é", 150), strings.Repeat("é", 98) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FirstLine(tt.in); got != tt.want {
				t.Errorf("FirstLine(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if len(FirstLine(tt.in)) > MaxLine {
				t.Errorf("longer than %d bytes", MaxLine)
			}
		})
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven …"},
		{"ééééé", 6, "é…"}, // never half a rune
	}
	for _, tt := range tests {
		if got := Clip(tt.in, tt.n); got != tt.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
