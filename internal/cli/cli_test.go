package cli

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExitPrintsEachErrorWithItsHint(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
		want string
	}{
		{"nil", Join(nil, nil), 0, ""},
		{"one", Join(nil, WithHint(errors.New("cannot write a"), "make it")), 1,
			"render: error: cannot write a\nrender: hint: make it\n"},
		{"several, nested flattened", Join(WithHint(errors.New("cannot write a."), "make it"),
			Join(errors.New("history x: locked"), WithHint(errors.New("notify: webhook refused"), "try -notify-test"))), 1,
			"render: error: cannot write a\nrender: hint: make it\n" +
				"render: error: history x: locked\n" +
				"render: error: notify: webhook refused\nrender: hint: try -notify-test\n"},
		{"usage", &UsageError{Msg: "bad flag"}, 2, "render: error: bad flag\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := Exit("render", tt.err, &out); code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			if d := cmp.Diff(tt.want, out.String()); d != "" {
				t.Errorf("stderr (-want +got):\n%s", d)
			}
		})
	}
}
