package captures

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAMDNames(t *testing.T) {
	tests := []struct {
		tool string
		want []string
	}{
		{AMDSMI, []string{"mi210__gpu-data", "rx6600__list"}},
		{ROCmSMI, []string{
			"mi100x4__rocm-6.0.2", "mi50__vega20", "rx6600__showallinfo-jq",
			"rx6700xt__rocm-4.3.0", "rx6700xt__rocm-5.7.1", "rx6700xt__rocm-6.1.2", "rx7800xt__rocm-6.2.4",
		}},
		{"xpu-smi", nil},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, AMDNames(tt.tool)); diff != "" {
				t.Errorf("AMDNames(%q) (-want +got):\n%s", tt.tool, diff)
			}
		})
	}
}

// Every AMD capture loads, holds valid JSON where it is JSON, and keeps
// the NVIDIA captures' listing untouched.
func TestLoadAMD(t *testing.T) {
	for _, tool := range []string{AMDSMI, ROCmSMI} {
		for _, name := range AMDNames(tool) {
			t.Run(tool+"/"+name, func(t *testing.T) {
				c, err := LoadAMD(tool, name)
				if err != nil {
					t.Fatal(err)
				}
				for _, out := range [][]byte{c.Static, c.Metric, c.Out} {
					if out != nil && !json.Valid(out) {
						t.Errorf("%s/%s: not valid JSON", tool, name)
					}
				}
				if tool == AMDSMI && c.Static == nil {
					t.Errorf("%s: no static output", name)
				}
			})
		}
	}
	for _, name := range Names() {
		if _, err := Load(name); err != nil {
			t.Errorf("NVIDIA capture %s: %v", name, err)
		}
	}
}

func TestLoadAMDErrors(t *testing.T) {
	for _, tc := range []struct{ tool, name string }{
		{AMDSMI, "nonexistent"}, {ROCmSMI, "nonexistent"}, {"nvidia-smi", "rx6600__list"}, {ROCmSMI, "../amd-smi/rx6600__list.static"},
	} {
		if _, err := LoadAMD(tc.tool, tc.name); err == nil {
			t.Errorf("LoadAMD(%q, %q) gave no error", tc.tool, tc.name)
		}
	}
}

func TestRocmRelease(t *testing.T) {
	for name, want := range map[string]string{
		"mi100x4__rocm-6.0.2": "6.0.2", "mi50__vega20": "", "rx6700xt__rocm-4.3.0": "4.3.0",
	} {
		if got := MustLoadAMD(ROCmSMI, name).ROCm; got != want {
			t.Errorf("%s: ROCm %q, want %q", name, got, want)
		}
	}
}
