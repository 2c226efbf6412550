package hostrange

import (
	"slices"
	"testing"
)

// fetch's tests (TestExpandRange and its config tests) hold the syntax;
// this one the package's own names.
func TestSplit(t *testing.T) {
	got, err := Split("gpu[01-03], rack[1-2]-gpu[1-2]\n gpu02 solo")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"gpu01", "gpu02", "gpu03", "rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2", "solo"}
	if !slices.Equal(got, want) {
		t.Errorf("Split = %v, want %v", got, want)
	}
	for _, bad := range []string{"gpu[1-", "gpu]", "-x", "a;b", "gpu[1-200000]"} {
		if _, err := Split(bad); err == nil {
			t.Errorf("Split(%q): no error", bad)
		}
	}
}
