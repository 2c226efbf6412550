package hostrange

import (
	"slices"
	"testing"
)

func TestExpand(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"gpu1", []string{"gpu1"}},
		{"gpu[08-11]", []string{"gpu08", "gpu09", "gpu10", "gpu11"}},
		{"n[1-2,5]", []string{"n1", "n2", "n5"}},
		{"r[1-2]-g[1-2].lab", []string{"r1-g1.lab", "r1-g2.lab", "r2-g1.lab", "r2-g2.lab"}},
		{"x[7]", []string{"x7"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := expandChecked(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("expandChecked(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// fetch's config tests hold the rest of the syntax.
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
