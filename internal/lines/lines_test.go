package lines

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type line struct {
	Text        string
	Start, Next int
}

func TestAll(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	tests := []struct {
		name, text string
		want       []line
	}{
		{"empty", "", nil},
		{"one line", "a\n", []line{{"a", 0, 2}}},
		{"no final newline", "a\nb", []line{{"a", 0, 2}, {"b", 2, 3}}},
		{"blank lines", "\n\na\n", []line{{"", 0, 1}, {"", 1, 2}, {"a", 2, 4}}},
		{"carriage return before newline", "a\r\nb\r\n", []line{{"a", 0, 3}, {"b", 3, 6}}},
		{"carriage return elsewhere", "a\rb\n\r", []line{{"a\rb", 0, 4}, {"", 4, 5}}},
		{"a line longer than bufio's limit", long + "\nb\n", []line{{long, 0, len(long) + 1}, {"b", len(long) + 1, len(long) + 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []line
			for l := range All([]byte(tt.text)) {
				got = append(got, line{string(l.Text), l.Start, l.Next})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A loop that stops early stops the iteration.
func TestAllStops(t *testing.T) {
	n := 0
	for range All([]byte("a\nb\nc\n")) {
		if n++; n == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("%d lines seen, want 2", n)
	}
}
