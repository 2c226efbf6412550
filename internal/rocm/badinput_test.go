package rocm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

// amdList is a hand-made amd-smi static answer of n GPUs.
func amdList(n int, entry func(i int) string) []byte {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = entry(i)
	}
	return []byte("[" + strings.Join(parts, ",") + "]")
}

func plainGPU(i int) string {
	return fmt.Sprintf(`{"gpu": %d, "asic": {"market_name": "AMD Instinct MI300X"}, "bus": {"bdf": "0000:%02x:00.0"}}`, i, i+1)
}

func deep(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// Answers that are not a GPU list are errors that say what was wrong.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name      string
		amdStatic string // "" for none
		rocm      string // "" for none
		want      string // substring of the error
	}{
		{"nested a thousand deep", deep(1000), deep(1000), "nested more than 32"},
		{"deep inside a GPU", `{"gpu_data": [{"gpu": 0, "x": ` + deep(1000) + `}]}`,
			`{"card0": {"x": ` + deep(1000) + `}}`, "nested more than 32"},
		{"no JSON", "amd-smi: command not found", "WARNING: No JSON data to report", "no JSON in the answer"},
		{"empty", " \n", "\n", "empty answer"},
		{"cut JSON", `[{"gpu": 0, "asic": {`, `{"card0": {"GPU use (%)": "1"`, "no JSON"},
		{"no GPU list", `{"version": "26.2.1"}`, `{"system": {"Driver version": "6.3.6"}}`, "no GPU list"},
		{"empty list", `[]`, `{}`, "no GPU"},
		{"GPU without an index", `[{"asic": {"market_name": "x"}}]`, `{"cardX": {}}`, "index"},
		{"index not a number", `[{"gpu": "0"}]`, `{"card-1": {}}`, "index"},
		{"GPU entry not an object", `[1]`, `{"card0": "N/A"}`, "entry"},
		{"gpu_data not a list", `{"gpu_data": {"gpu": 0}}`, "", "not a list"},
		{"JSON a scalar list", `["a"]`, `["a"]`, "not"},
		{"more GPUs than a host has", string(amdList(nvsmi.MaxGPUs+1, plainGPU)),
			rocmCards65(), "more than"},
		{"huge", "[" + strings.Repeat(" ", maxInput) + "]", "{" + strings.Repeat(" ", maxInput) + "}", "more than the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.amdStatic != "" {
				_, err := ParseAMDSMI([]byte(tt.amdStatic), nil)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("ParseAMDSMI: error %v, want one with %q", err, tt.want)
				}
				_, err = ParseAMDSMI(nil, []byte(tt.amdStatic))
				if err == nil || !strings.HasPrefix(err.Error(), "metric: ") {
					t.Errorf("ParseAMDSMI metric: error %v, want one naming metric", err)
				}
			}
			if tt.rocm != "" {
				_, err := ParseROCmSMI([]byte(tt.rocm))
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("ParseROCmSMI: error %v, want one with %q", err, tt.want)
				}
			}
		})
	}
}

func rocmCards65() string {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i <= nvsmi.MaxGPUs; i++ {
		fmt.Fprintf(&b, `"card%d": {"GPU use (%%)": "1"},`, i)
	}
	b.WriteString(`"system": {}}`)
	return b.String()
}

func TestParseAMDSMINoInput(t *testing.T) {
	if _, err := ParseAMDSMI(nil, nil); err == nil {
		t.Error("no output at all gave no error")
	}
}

// A GPU listed twice, or two GPUs claiming one PCI address: the first
// counts, and a note says so.
func TestDuplicates(t *testing.T) {
	twice := []byte(`[{"gpu": 0, "bus": {"bdf": "0000:c1:00.0"}, "asic": {"market_name": "AMD Instinct MI300X"}},
		{"gpu": 0, "bus": {"bdf": "0000:c2:00.0"}, "asic": {"market_name": "forged"}},
		{"gpu": 1, "bus": {"bdf": "0000:C1:00.0"}, "asic": {"market_name": "forged too"}},
		{"gpu": 2, "bus": {"bdf": "0000:c3:00.0"}, "asic": {"market_name": "AMD Instinct MI300X"}}]`)
	rep, err := ParseAMDSMI(twice, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []nvsmi.GPU{gpu(0, "AMD Instinct MI300X", "0000:c1:00.0"), gpu(2, "AMD Instinct MI300X", "0000:c3:00.0")}
	if diff := cmp.Diff(want, rep.GPUs); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	if len(rep.Notes) != 2 {
		t.Errorf("notes %q, want one per duplicate", rep.Notes)
	}

	rocm := []byte(`{"card1": {"PCI Bus": "0000:c1:00.0", "GPU use (%)": "5"}, "card01": {"PCI Bus": "0000:c9:00.0", "GPU use (%)": "9"},
		"card2": {"PCI Bus": "0000:C1:00.0", "GPU use (%)": "7"}}`)
	rrep, err := ParseROCmSMI(rocm)
	if err != nil {
		t.Fatal(err)
	}
	// "card01" sorts before "card1": it is the one kept.
	wantR := []nvsmi.GPU{with(gpu(1, "", "0000:c9:00.0"), func(g *nvsmi.GPU) { g.UtilGPU = n(9) }),
		with(gpu(2, "", "0000:c1:00.0"), func(g *nvsmi.GPU) { g.UtilGPU = n(7) })}
	if diff := cmp.Diff(wantR, rrep.GPUs); diff != "" {
		t.Errorf("rocm-smi GPUs (-want +got):\n%s", diff)
	}
	if len(rrep.Notes) != 1 {
		t.Errorf("rocm-smi notes %q, want one", rrep.Notes)
	}
}

// 2^64 and other sentinels are missing readings with a note, never a
// wrapped or rounded number.
func TestAbsurdValues(t *testing.T) {
	metric := []byte(`[{"gpu": 0, "usage": {"gfx_activity": {"value": 65535, "unit": "%"}},
		"mem_usage": {"used_vram": {"value": 18446744073709551615, "unit": "MB"}, "total_vram": {"value": -1, "unit": "MB"}},
		"temperature": {"hotspot": {"value": 65535, "unit": "C"}, "edge": 40},
		"power": {"socket_power": {"value": 18446744073709551615, "unit": "W"}},
		"ecc": {"total_uncorrectable_count": 18446744073709551615},
		"fan": {"speed": 300, "max": 255}}]`)
	rep, err := ParseAMDSMI(nil, metric)
	if err != nil {
		t.Fatal(err)
	}
	// The edge sensor stands in for the absurd hotspot one.
	want := []nvsmi.GPU{with(gpu(0, "", ""), func(g *nvsmi.GPU) { g.TempC = n(40) })}
	if diff := cmp.Diff(want, rep.GPUs); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	if len(rep.Notes) != 6 {
		t.Errorf("notes %q, want 6 (one per absurd value)", rep.Notes)
	}

	rocm := []byte(`{"card0": {"VRAM Total Memory (B)": "18446744073709551615", "VRAM Total Used Memory (B)": "-5",
		"Average Graphics Package Power (W)": "1e309", "Temperature (Sensor edge) (C)": "511.0"}}`)
	rrep, err := ParseROCmSMI(rocm)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]nvsmi.GPU{gpu(0, "", "")}, rrep.GPUs); diff != "" {
		t.Errorf("rocm-smi GPUs (-want +got):\n%s", diff)
	}
	if len(rrep.Notes) != 4 {
		t.Errorf("rocm-smi notes %q, want 4", rrep.Notes)
	}
}

// A name is plain text: markup stays as written (the page escapes it),
// control characters become '?', and it is cut at nvsmi.MaxCell.
func TestNames(t *testing.T) {
	long := strings.Repeat("MI300X ", 1000)
	static := []byte(`[{"gpu": 0, "asic": {"market_name": "<script>alert(1)</script>\u001b[31mred\u0000", "asic_serial": "0xABC\n"}},
		{"gpu": 1, "asic": {"market_name": "` + long + `"}, "bus": {"bdf": "<b>0000:c1:00.0</b>"}}]`)
	rep, err := ParseAMDSMI(static, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rep.GPUs[0].Name, "<script>alert(1)</script>?[31mred?"; got != want {
		t.Errorf("name %q, want %q", got, want)
	}
	if got := rep.GPUs[0].UUID; got != "0xabc" {
		t.Errorf("serial %q, want 0xabc", got)
	}
	if got := rep.GPUs[1].Name; len(got) > nvsmi.MaxCell || !strings.HasPrefix(got, "MI300X MI300X") {
		t.Errorf("long name: %d bytes %q", len(got), got[:20])
	}
	if rep.GPUs[1].BusID != "" || len(rep.Notes) != 1 {
		t.Errorf("bus id %q with notes %q: want none, and a note", rep.GPUs[1].BusID, rep.Notes)
	}
}

// Notes stop at maxNotes, the last one counting the rest.
func TestNotesBounded(t *testing.T) {
	rep, err := ParseAMDSMI(nil, amdList(nvsmi.MaxGPUs, func(i int) string {
		return fmt.Sprintf(`{"gpu": %d, "usage": {"gfx_activity": 1000, "umc_activity": 1000}}`, i)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Notes) != maxNotes || rep.Notes[maxNotes-1] != fmt.Sprintf("and %d more notes", 2*nvsmi.MaxGPUs-maxNotes+1) {
		t.Errorf("%d notes, the last %q", len(rep.Notes), rep.Notes[len(rep.Notes)-1])
	}
}

// A big answer within the bound parses, and quickly: 64 GPUs each with a
// 64 kB field nobody reads.
func TestBigAnswer(t *testing.T) {
	filler := strings.Repeat("x", 64<<10)
	static := amdList(nvsmi.MaxGPUs, func(i int) string {
		return fmt.Sprintf(`{"gpu": %d, "cache_info": ["%s"], "asic": {"market_name": "AMD Instinct MI300X"}}`, i, filler)
	})
	start := time.Now()
	rep, err := ParseAMDSMI(static, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.GPUs) != nvsmi.MaxGPUs {
		t.Errorf("%d GPUs, want %d", len(rep.GPUs), nvsmi.MaxGPUs)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a %d kB answer took %v", len(static)>>10, d)
	}
}

// The RX 6600 capture: one GPU, 12 kB of static and metric JSON.
func BenchmarkParseAMDSMI(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseAMDSMI(rx6600Static, rx6600Metric); err != nil {
			b.Fatal(err)
		}
	}
}

// The MI100 capture: four GPUs, 12 kB.
func BenchmarkParseROCmSMI(b *testing.B) {
	out := captures.MustLoadAMD(captures.ROCmSMI, "mi100x4__rocm-6.0.2").Out
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseROCmSMI(out); err != nil {
			b.Fatal(err)
		}
	}
}

// A busy 8-GPU node's kfd section: 8 nodes, 2000 processes on each GPU.
func BenchmarkParseKFD(b *testing.B) {
	var body strings.Builder
	for g := 1; g <= 8; g++ {
		fmt.Fprintf(&body, "node %d 0 %d\n", 1000+g, g<<8)
	}
	for pid := 1; pid <= 2000; pid++ {
		for g := 1; g <= 8; g++ {
			fmt.Fprintf(&body, "proc %d %d %d\n", pid, 1000+g, pid<<20)
		}
	}
	in := []byte(body.String())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseKFD(in); err != nil {
			b.Fatal(err)
		}
	}
}
