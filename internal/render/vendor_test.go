package render

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/loaddata"
)

func TestWithVendor(t *testing.T) {
	for _, tc := range []struct{ name, full, vendor, want string }{
		{"says it", "AMD Instinct MI300X", loaddata.VendorAMD, "AMD Instinct MI300X"},
		{"chip name", "Arcturus GL-XL [Instinct MI100]", loaddata.VendorAMD, "AMD Arcturus GL-XL [Instinct MI100]"},
		{"nvidia", "NVIDIA H100 80GB HBM3", loaddata.VendorNVIDIA, "NVIDIA H100 80GB HBM3"},
		{"tesla", "Tesla V100-SXM2-16GB", loaddata.VendorNVIDIA, "NVIDIA Tesla V100-SXM2-16GB"},
		{"another vendor", "Data Center GPU Max 1550", "intel", "intel Data Center GPU Max 1550"},
		{"no vendor", "X", "", "X"},
		{"no name", "", loaddata.VendorAMD, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := withVendor(tc.full, tc.vendor); got != tc.want {
				t.Errorf("withVendor(%q, %q) = %q, want %q", tc.full, tc.vendor, got, tc.want)
			}
		})
	}
}

// gpumon_gpu_state names an AMD GPU's vendor, and an NVIDIA GPU's series
// keeps the labels it had before AMD's came (the same series for
// Prometheus), on a host of both vendors too.
func TestPromVendorLabel(t *testing.T) {
	var b strings.Builder
	if err := writeProm(&b, testReport(t, readRows(t, "testdata/vendors.csv"), "")); err != nil {
		t.Fatal(err)
	}
	labels := regexp.MustCompile(`(?m)^gpumon_gpu_state\{host="(mixed01|h100a|mi300a)",gpu="(\d)".*state="\w+"(.*)\} 1$`)
	var got []string
	for _, m := range labels.FindAllStringSubmatch(b.String(), -1) {
		got = append(got, m[1]+"/"+m[2]+m[3])
	}
	want := []string{"h100a/0", "h100a/1", `mi300a/0,vendor="amd"`, `mi300a/1,vendor="amd"`, `mi300a/2,vendor="amd"`, `mi300a/3,vendor="amd"`,
		"mixed01/0", "mixed01/1", `mixed01/2,vendor="amd"`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gpumon_gpu_state's vendor labels (-want +got):\n%s", diff)
	}
}
