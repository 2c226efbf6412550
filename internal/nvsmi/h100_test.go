package nvsmi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// h100 reads one file of the H100 capture (testdata/h100-580.159.04).
func h100(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "h100-580.159.04", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestH100Health(t *testing.T) {
	healthy := func(mask uint64) GPU {
		return GPU{Index: 0, BusID: "00000000:00:06.0", PState: n(0), ECCMode: "enabled", ECCUncorrected: n(0),
			RemapPending: Flag{Valid: true}, RemapFailure: Flag{Valid: true}, ClockEventMask: mask, ClockEventValid: true}
	}
	tests := []struct {
		file string
		want GPU
	}{
		// Idle: clocks held down because the GPU is idle (bit 0x1).
		{"query-health", healthy(0x1)},
		{"query-health-load", healthy(0)},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			out := h100(t, tt.file)
			if he := Diagnose(out, 0); he != nil {
				t.Errorf("Diagnose = %v", he)
			}
			got, err := ParseGPUs(out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(GPUReport{GPUs: []GPU{tt.want}}, got); diff != "" {
				t.Errorf("ParseGPUs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestH100UnknownField(t *testing.T) {
	he := Diagnose(h100(t, "query-unknown-field"), 2)
	if he == nil {
		t.Fatal("Diagnose = nil for a refused field")
	}
	if want := "no.such.field"; !strings.Contains(he.Message, want) {
		t.Errorf("Diagnose = %q, want it to name %q", he.Message, want)
	}
}

func TestH100Pmon(t *testing.T) {
	tests := []struct {
		file string
		want []PmonSample
	}{
		{"pmon-idle", nil},
		{"pmon-load", []PmonSample{sample(0, 534, n(98))}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParsePmon(h100(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(PmonReport{Samples: tt.want}, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParsePmon (-want +got):\n%s", diff)
			}
		})
	}
	// The process pmon saw is the one --query-compute-apps lists.
	apps, err := ParseProcesses(h100(t, "compute-apps-load"))
	if err != nil || len(apps.Processes) != 1 || apps.Processes[0].PID != 534 {
		t.Errorf("compute apps %+v, %v: want pid 534", apps, err)
	}
}

func TestH100KnownFields(t *testing.T) {
	known := KnownFields(h100(t, "help-query-gpu"))
	for _, f := range HealthFields {
		if !known[f] {
			t.Errorf("%s unknown to driver 580", f)
		}
	}
}
