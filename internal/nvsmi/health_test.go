package nvsmi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// healthHeader is what the probe asks on a driver that knows every health
// field (590+), after its usual fields, cut to index for brevity; without
// the clock reasons' old name (the probe keeps one) and the recovery action
// (TestParseRecoveryAction).
var healthHeader = "index, " + strings.Join(HealthFields[:len(HealthFields)-2], ", ")

func healthRow(pstate, eccMode, eccUncorr, retired, remapPending, remapFailure, clocks string) string {
	return strings.Join([]string{"0", pstate, eccMode, eccUncorr, retired, remapPending, remapFailure, clocks}, ", ")
}

func TestParseGPUsHealth(t *testing.T) {
	yes, no := Flag{Value: true, Valid: true}, Flag{Valid: true}
	tests := []struct {
		name string
		in   []byte
		want GPU
	}{
		{
			name: "a healthy H200",
			in:   lines(healthHeader, healthRow("P0", "Enabled", "0", "[N/A]", "No", "No", "0x0000000000000000")),
			want: GPU{PState: n(0), ECCMode: "enabled", ECCUncorrected: n(0), RemapPending: no, RemapFailure: no, ClockEventValid: true},
		},
		{
			name: "a failing GPU: remap failed and pending, pages pending, errors, hw slowdown",
			in:   lines(healthHeader, healthRow("P2", "Enabled", "12", "Yes", "Yes", "Yes", "0x0000000000000008")),
			want: GPU{PState: n(2), ECCMode: "enabled", ECCUncorrected: n(12),
				RetiredPagesPending: yes, RemapPending: yes, RemapFailure: yes, ClockEventMask: 0x8, ClockEventValid: true},
		},
		{
			name: "ECC disabled, lowest pstate, upper-case hex",
			in:   lines(healthHeader, healthRow("P15", "Disabled", "[N/A]", "No", "[N/A]", "[N/A]", "0X00000000000000A0")),
			want: GPU{PState: n(15), ECCMode: "disabled", RetiredPagesPending: no, ClockEventMask: 0xa0, ClockEventValid: true},
		},
		{
			name: "every token nvidia-smi prints for no value is missing",
			in: lines(healthHeader,
				healthRow("[N/A]", "[N/A]", "[N/A]", "[N/A]", "[N/A]", "[N/A]", "[N/A]"),
				healthRow("[Unknown Error]", "[Unknown Error]", "[Unknown Error]", "[Unknown Error]", "[Unknown Error]", "[Unknown Error]", "[Unknown Error]"),
				healthRow("ERR!", "ERR!", "ERR!", "ERR!", "ERR!", "ERR!", "ERR!"),
				healthRow("[Not Supported]", "[Not Supported]", "[Not Supported]", "[Not Supported]", "[Not Supported]", "[Not Supported]", "[Not Supported]"),
				healthRow("", "", "", "", "", "", "")),
		},
		{
			name: "absurd values are missing, never a condition",
			in: lines(healthHeader,
				healthRow("P16", "enabledish", "-1", "1", "0", "true", "0xFFFFFFFFFFFFFFFF"),
				healthRow("P32", "Enabled Disabled", "18446744073709551615", "Yes!", "no way", "Y", "0x8000000000000000"),
				healthRow("P-1", "", "9007199254740993", "", "", "", "0x10000000000000000"),
				healthRow("p0", "", "1.5", "", "", "", "0xZZ"),
				healthRow("P", "", "1e9", "", "", "", "0x"),
				healthRow("P00000", "", "0x10", "", "", "", "-0x1"),
				healthRow("P1x", "", "NaN", "", "", "", "12")),
		},
		{
			name: "the old name of the clock reasons, as driver 465 prints it",
			in:   lines("index, pstate, clocks_throttle_reasons.active", "0, P8, 0x0000000000000001"),
			want: GPU{PState: n(8), ClockEventMask: 1, ClockEventValid: true},
		},
		{
			name: "columns not asked for are missing",
			in:   lines("index", "0"),
		},
		{
			name: "CRLF line ends",
			in:   []byte("index, pstate, remapped_rows.failure\r\n0, P3, Yes\r\n"),
			want: GPU{PState: n(3), RemapFailure: yes},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseGPUs(tt.in)
			if err != nil {
				t.Fatalf("ParseGPUs: %v", err)
			}
			if len(got.Skipped) > 0 {
				t.Errorf("skipped %v", got.Skipped)
			}
			if len(got.GPUs) == 0 {
				t.Fatal("no GPU")
			}
			// Every row of a case must read the same.
			for i, g := range got.GPUs {
				if diff := cmp.Diff(tt.want, g); diff != "" {
					t.Errorf("row %d (-want +got):\n%s", i+1, diff)
				}
			}
		})
	}
}

func TestHealthFieldsAreKnownTo590(t *testing.T) {
	for _, name := range []string{"linux-x86_64__nvidia-h200__590.48.01", "windows-x86_64__nvidia-geforce-rtx-2080-super__610.62"} {
		help, ok := section(t, name, "capabilities", "help-query-gpu")
		if !ok {
			t.Fatalf("%s: no help-query-gpu section", name)
		}
		known := KnownFields([]byte(help))
		for _, f := range HealthFields {
			if !known[f] {
				t.Errorf("%s: %s unknown", name, f)
			}
		}
	}
}

func TestKnownFields(t *testing.T) {
	tests := []struct {
		name         string
		capture      string
		want, absent []string
		atLeast      int
	}{
		{
			name:    "driver 465 lacks remapped rows and the new clock names",
			capture: "rtx-2080-super__465.27__query-gpu-all",
			want:    []string{"index", "gpu_name", "name", "pstate", "ecc.mode.current", "retired_pages.pending", "clocks_throttle_reasons.active", "ecc.errors.uncorrected.volatile.total"},
			absent:  []string{"remapped_rows.pending", "remapped_rows.failure", "clocks_event_reasons.active", "0: Default", "List of valid properties"},
			atLeast: 100,
		},
		{
			name:    "driver 590 knows both clock names, as aliases",
			capture: "linux-x86_64__nvidia-h100-mig__590.48.01",
			want:    []string{"remapped_rows.pending", "remapped_rows.failure", "clocks_event_reasons.active", "clocks_throttle_reasons.active", "retired_pages.sbe"},
			absent:  []string{"1: Exclusive_Thread"},
			atLeast: 250,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			help, ok := section(t, tt.capture, "capabilities", "help-query-gpu")
			if !ok {
				t.Fatal("no help-query-gpu section")
			}
			known := KnownFields([]byte(help))
			if len(known) < tt.atLeast {
				t.Errorf("%d fields, want at least %d", len(known), tt.atLeast)
			}
			for _, f := range tt.want {
				if !known[f] {
					t.Errorf("%s unknown", f)
				}
			}
			for _, f := range tt.absent {
				if known[f] {
					t.Errorf("%s known", f)
				}
			}
		})
	}
}

func TestKnownFieldsBadInput(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]bool
	}{
		{"empty", "", map[string]bool{}},
		{"CRLF", "\"pstate\"\r\n\"name\" or \"gpu_name\"\r\n", map[string]bool{"pstate": true, "name": true, "gpu_name": true}},
		{"quoted prose", "\"0: Default\" means many\n\"a b\"\n\"\"\n\"x\" or\n\"<b>\"\n", map[string]bool{}},
		{"a unit in the name is not a field", "\"memory.used [MiB]\"\n", map[string]bool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, KnownFields([]byte(tt.in))); diff != "" {
				t.Errorf("KnownFields (-want +got):\n%s", diff)
			}
		})
	}
	var flood strings.Builder
	for i := range 2 * maxKnownFields {
		fmt.Fprintf(&flood, "\"f%d\" or \"g%d\"\n", i, i)
	}
	if got := len(KnownFields([]byte(flood.String()))); got != maxKnownFields {
		t.Errorf("a flood of names kept %d, more than %d", got, maxKnownFields)
	}
}

func BenchmarkParseGPUsHealth(b *testing.B) {
	rows := []string{fetchHeader + ", " + strings.Join(HealthFields[:len(HealthFields)-1], ", ")}
	for i := range 8 {
		rows = append(rows, fmt.Sprintf("%d, GPU-%08d-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, 00000000:%02X:00.0, %d, 12, 40123, 81559, 61, 512.34, 700.00, [N/A], P0, Enabled, 0, [N/A], No, No, 0x0000000000000000", i, i, 0x18+i, 90+i))
	}
	out := lines(rows...)
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		rep, err := ParseGPUs(out)
		if err != nil || len(rep.GPUs) != 8 || !rep.GPUs[7].RemapFailure.Valid {
			b.Fatalf("err %v, %d GPUs", err, len(rep.GPUs))
		}
	}
}

// gpu_recovery_action: NVML's words for each action, "None" for none, and a
// token or an unknown word (a newer driver's action) kept apart.
func TestParseRecoveryAction(t *testing.T) {
	for in, want := range map[string]string{
		"None": "none", "Reset": "reset", "GPU Reset": "reset", "Node Reboot": "reboot",
		"Drain P2P": "drain_p2p", "Drain and Reset": "drain_and_reset", "Bus Reset": "bus_reset",
		"System Reboot": "system_reboot", "Recover IMEX Domain": "recover_imex_domain",
		"[N/A]": "", "[Unknown Error]": "", "ERR!": "", "": "",
		"Call the vendor": "unknown", "<b>reset</b>": "unknown",
	} {
		got, err := ParseGPUs(lines("index, gpu_recovery_action", "0, "+in))
		if err != nil || len(got.GPUs) != 1 {
			t.Fatalf("%q: %v, %+v", in, err, got)
		}
		if got.GPUs[0].RecoveryAction != want {
			t.Errorf("gpu_recovery_action %q read as %q, want %q", in, got.GPUs[0].RecoveryAction, want)
		}
	}
}
