package rocm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

// The shapes amd-smi printed across releases, as hand-made variants of the
// real RX 6600 capture (no capture of them was found; README.md says so):
// flat values as in ROCm 6.0, values as strings with their units, the list
// under "gpu_data" as in amd-smi 25 and later, and Python's warnings around
// the JSON as amd-smi prints them on Python 3.14 (quoted from a public
// issue thread, nathaninline/ajean#39).

// decode reads a capture for reshaping.
func decode(t testing.TB, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reshape rewrites every {"value": …, "unit": …} object with f.
func reshape(v any, f func(value any, unit string) any) any {
	switch x := v.(type) {
	case map[string]any:
		if val, ok := x["value"]; ok && len(x) == 2 {
			unit, _ := x["unit"].(string)
			return f(val, unit)
		}
		out := map[string]any{}
		for k, e := range x {
			out[k] = reshape(e, f)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = reshape(e, f)
		}
		return out
	}
	return v
}

func flat(value any, _ string) any { return value }

func withUnit(value any, unit string) any {
	if s, ok := value.(string); ok {
		return s
	}
	return fmt.Sprintf("%v %s", value, unit)
}

func gpuData(t testing.TB, b []byte) []byte {
	return encode(t, map[string]any{"gpu_data": decode(t, b)})
}

const pythonWarnings = `/usr/lib/python3.14/site-packages/amdsmi/amdsmi_interface.py:3569: SyntaxWarning: 'return' in a 'finally' block
  return return_dictionary
/usr/lib/python3.14/site-packages/amdsmi/amdsmi_interface.py:3603: SyntaxWarning: 'return' in a 'finally' block
  return return_dictionary
`

func TestParseAMDSMIShapes(t *testing.T) {
	tests := []struct {
		name           string
		static, metric func(testing.TB) []byte
	}{
		{"list, value and unit objects (ROCm 6.1 to 6.4)",
			func(testing.TB) []byte { return rx6600Static }, func(testing.TB) []byte { return rx6600Metric }},
		{"flat values (ROCm 6.0)",
			func(t testing.TB) []byte { return encode(t, reshape(decode(t, rx6600Static), flat)) },
			func(t testing.TB) []byte { return encode(t, reshape(decode(t, rx6600Metric), flat)) }},
		{"values as text with units",
			func(t testing.TB) []byte { return encode(t, reshape(decode(t, rx6600Static), withUnit)) },
			func(t testing.TB) []byte { return encode(t, reshape(decode(t, rx6600Metric), withUnit)) }},
		{"gpu_data (amd-smi 25 and later)",
			func(t testing.TB) []byte { return gpuData(t, rx6600Static) },
			func(t testing.TB) []byte { return gpuData(t, rx6600Metric) }},
		{"warnings before and after",
			func(testing.TB) []byte {
				return []byte(pythonWarnings + "\t" + string(rx6600Static) + "\nWARNING: done\n")
			},
			func(testing.TB) []byte {
				return []byte(pythonWarnings + "[WARN] a list-like line\n" + string(rx6600Metric))
			}},
		{"one GPU as one object",
			func(t testing.TB) []byte { return encode(t, decode(t, rx6600Static).([]any)[0]) },
			func(t testing.TB) []byte { return encode(t, decode(t, rx6600Metric).([]any)[0]) }},
		{"CRLF line ends",
			func(testing.TB) []byte { return bytes.ReplaceAll(rx6600Static, []byte("\n"), []byte("\r\n")) },
			func(testing.TB) []byte { return bytes.ReplaceAll(rx6600Metric, []byte("\n"), []byte("\r\n")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ParseAMDSMI(tt.static(t), tt.metric(t))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]nvsmi.GPU{rx6600}, rep.GPUs); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
			if len(rep.Notes) > 0 {
				t.Errorf("notes: %q", rep.Notes)
			}
		})
	}
}

// The older key names: amd-smi 6.0's fb_usage and average_socket_power,
// a metric power_limit; hand-made, as named in amd-smi's 6.0 sources.
func TestParseAMDSMIOlderKeys(t *testing.T) {
	metric := []byte(`[{"gpu": 0, "usage": {"gfx_activity": 7, "umc_activity": 2, "mm_activity": "N/A"},
		"fb_usage": {"vram_total": 65520, "vram_used": 10},
		"power": {"average_socket_power": 42, "power_limit": 300},
		"temperature": {"edge": 30, "hotspot": "N/A"},
		"ecc": {"uncorrectable_count": 3}}]`)
	want := with(gpu(0, "", ""), func(g *nvsmi.GPU) {
		g.UtilGPU, g.UtilMem, g.MemUsedMiB, g.MemTotalMiB = n(7), n(2), n(10), n(65520)
		g.TempC, g.PowerW, g.PowerLimitW, g.ECCUncorrected = n(30), n(42), n(300), n(3)
	})
	rep, err := ParseAMDSMI(nil, metric)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]nvsmi.GPU{want}, rep.GPUs); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
}

// A partitioned MI300X reports no utilization ("usage": "N/A"): missing,
// never 0. The fan of a passive card is "N/A" too.
func TestParseAMDSMIMissing(t *testing.T) {
	metric := []byte(`{"gpu_data": [{"gpu": 3, "usage": "N/A", "fan": {"speed": "N/A", "max": "N/A", "rpm": "N/A", "usage": "N/A"},
		"temperature": {"edge": {"value": "N/A", "unit": "C"}, "hotspot": {"value": 41, "unit": "C"}},
		"mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": "N/A"}}]}`)
	want := with(gpu(3, "", ""), func(g *nvsmi.GPU) { g.TempC, g.MemTotalMiB = n(41), n(196592) })
	rep, err := ParseAMDSMI(nil, metric)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]nvsmi.GPU{want}, rep.GPUs); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
}

func TestMarketingName(t *testing.T) {
	for in, want := range map[string]string{
		"AMD Instinct MI300X":                        "AMD Instinct MI300X",
		"Arcturus GL-XL [Instinct MI100]":            "AMD Instinct MI100",
		"Navi 23 [Radeon RX 6600/6600 XT":            "AMD Radeon RX 6600/6600 XT",
		"Radeon Instinct MI50 32GB":                  "AMD Radeon Instinct MI50 32GB",
		"AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2": "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2",
		"Advanced Micro Devices, Inc. [AMD/ATI]":     "Advanced Micro Devices, Inc. [AMD/ATI]",
		"0x1002":                                     "",
		"":                                           "",
		"[]":                                         "[]",
	} {
		if got := marketingName(in); got != want {
			t.Errorf("marketingName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBusID(t *testing.T) {
	for in, want := range map[string]string{
		"0000:A3:00.0":     "0000:a3:00.0",
		"0000:0b:00.0":     "0000:0b:00.0",
		"c1:00.0":          "0000:c1:00.0",
		"00000000:04:00.0": "0000:04:00.0",
		"10000:c1:1f.7":    "10000:c1:1f.7",
		"0000:c1:20.0":     "",
		"0000:c1:00.8":     "",
		"0000:c1:00":       "",
		"N/A":              "",
		"0000:c1:00.0x":    "",
		"0000:1c1:00.0":    "",
	} {
		var notes notes
		if got := busID(text(in), "gpu 0", &notes); got != want {
			t.Errorf("busID(%q) = %q, want %q", in, got, want)
		}
		if want == "" && in != "N/A" && len(notes.list) == 0 {
			t.Errorf("busID(%q): no note", in)
		}
	}
}

func TestReading(t *testing.T) {
	tests := []struct {
		in   string // JSON
		k    kind
		want nvsmi.Number
		note string // a substring of the note, "" for none
	}{
		{`42`, percent, n(42), ""},
		{`"42 %"`, percent, n(42), ""},
		{`{"value": 36, "unit": "C"}`, celsius, n(36), ""},
		{`"36 °C"`, celsius, n(36), ""},
		{`{"value": 8176, "unit": "MB"}`, mebibytes, n(8176), ""},
		{`{"value": 2, "unit": "GB"}`, mebibytes, n(2048), ""},
		{`"1572745216"`, bytesToMiB, n(1500), ""},
		{`{"value": 5, "unit": "F"}`, celsius, na, "unknown unit"},
		{`"N/A"`, percent, na, ""},
		{`"N/A (Secondary die)"`, watts, na, ""}, // rocm-smi on an MI250, ROCm/rocm_smi_lib#160
		{`{"value": "N/A", "unit": "W"}`, watts, na, ""},
		{`null`, watts, na, ""},
		{`[1, 2]`, watts, na, ""},
		{`18446744073709551615`, counter, na, "beyond any real count"},
		{`9007199254740993`, counter, na, "beyond any real count"},
		{`9007199254740992`, counter, n(1 << 53), ""},
		{`{"value": 18446744073709551615, "unit": "MB"}`, mebibytes, na, "out of range"},
		{`"18446744073709551615"`, bytesToMiB, na, "out of range"},
		{`-1`, watts, na, "out of range"},
		{`65535`, celsius, na, "out of range"},
		{`101`, percent, na, "out of range"},
		{`1e400`, watts, na, "not a number"},
		{`"0x10"`, percent, na, "not a number"},
		{`"NaN"`, percent, na, "not a number"},
		{`3.5`, counter, na, "not a number"},
		{`-0`, counter, na, "not a number"},
	}
	for _, tt := range tests {
		var notes notes
		got := reading(decode(t, []byte(tt.in)), tt.k, "gpu 0", &notes)
		if got != tt.want {
			t.Errorf("reading(%s, %s) = %v, want %v", tt.in, tt.k.name, got, tt.want)
		}
		joined := strings.Join(notes.list, "; ")
		if tt.note == "" && joined != "" || tt.note != "" && !strings.Contains(joined, tt.note) {
			t.Errorf("reading(%s): notes %q, want one with %q", tt.in, joined, tt.note)
		}
	}
}

// Only the sections read are built: a clock or cache section is checked
// to be JSON and dropped, in each shape, and a reading's {"value",
// "unit"} object is a valueUnit.
func TestDecodeJSONKeepsOnlyRead(t *testing.T) {
	entry := `{"gpu": 0, "clock": {"sys": {"current level": 1}}, "usage": {"gfx_activity": {"value": 3, "unit": "%"}}}`
	want := map[string]any{"gpu": json.Number("0"), "usage": map[string]any{
		"gfx_activity": valueUnit{value: json.Number("3"), unit: "%", hasValue: true, hasUnit: true}}}
	for _, out := range []string{"[" + entry + "]", `{"gpu_data": [` + entry + `], "clock": 1}`, entry} {
		entries, err := amdEntries([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]map[string]any{want}, entries, cmp.AllowUnexported(valueUnit{})); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", out, diff)
		}
	}
	if _, err := amdEntries([]byte(`[{"gpu": 0, "clock": {"sys": [1,]}}]`)); err == nil {
		t.Error("a section not read is still checked to be JSON: want an error")
	}
}

// A reading's object is a valueUnit only while it holds nothing but
// "value" and "unit"; any other member keeps it whole, as a map, and
// valueText reads both alike.
func TestReadingObjects(t *testing.T) {
	for _, tt := range []struct {
		in       string
		want     any
		wantText string
	}{
		{`{"value": 3, "unit": "W"}`, valueUnit{value: json.Number("3"), unit: "W", hasValue: true, hasUnit: true}, "3 W"},
		{`{"unit": "W", "value": 1, "value": 2}`, valueUnit{value: json.Number("2"), unit: "W", hasValue: true, hasUnit: true}, "2 W"},
		{`{"value": 3, "unit": "W", "max": 9}`, map[string]any{"value": json.Number("3"), "unit": "W", "max": json.Number("9")}, "3 W"},
		{`{"unit": "W"}`, valueUnit{unit: "W", hasUnit: true}, ""},
		{`{}`, map[string]any{}, ""},
		{`"N/A"`, "N/A", ""},
	} {
		p := parser{b: []byte(tt.in)}
		got := p.value(asReading)
		if p.err != nil {
			t.Fatalf("%s: %v", tt.in, p.err)
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(valueUnit{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.in, diff)
		}
		text, unit, _ := valueText(got)
		if s := strings.TrimSpace(text + " " + unit); s != tt.wantText {
			t.Errorf("%s: valueText %q, want %q", tt.in, s, tt.wantText)
		}
	}
}
