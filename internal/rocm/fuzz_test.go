package rocm

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"reflect"
	"testing"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

// fuzzing reports whether this run is `go test -fuzz`: whole captures are
// seeds only under plain `go test`, as in package nvsmi (a 12 kB seed
// spends a short fuzz run minimizing).
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// Small real-shaped seeds: one GPU of each shape, as fetch receives them.
var (
	seedStatic = `[{"gpu": 0, "asic": {"market_name": "Navi 23 [Radeon RX 6600/6600 XT", "asic_serial": "0x4162405E51BB99B0"},
 "bus": {"bdf": "0000:0b:00.0"}, "vram": {"size": {"value": 8176, "unit": "MB"}}, "limit": {"socket_power": {"value": 100, "unit": "W"}}}]`
	seedMetric = `{"gpu_data": [{"gpu": 0, "usage": {"gfx_activity": {"value": 1, "unit": "%"}, "umc_activity": 0},
 "power": {"socket_power": "6 W"}, "temperature": {"edge": 36, "hotspot": {"value": "N/A", "unit": "C"}},
 "mem_usage": {"total_vram": {"value": 8176, "unit": "MB"}, "used_vram": {"value": 202, "unit": "MB"}},
 "ecc": {"total_uncorrectable_count": 0}, "fan": {"speed": 0, "max": 255, "usage": "N/A"}}]}`
	seedROCm = `{"card0": {"Card Series": "Arcturus GL-XL [Instinct MI100]", "Unique ID": "0x79ccd55167a2124a",
 "PCI Bus": "0000:83:00.0", "GPU use (%)": "0", "VRAM Total Memory (B)": "34342961152",
 "VRAM Total Used Memory (B)": "6750208", "Temperature (Sensor junction) (C)": "55.0",
 "Average Graphics Package Power (W)": "36.0", "Max Graphics Package Power (W)": "290.0", "Fan speed (%)": "N/A"},
 "system": {"Driver version": "6.3.6"}}`
)

func FuzzParseAMDSMI(f *testing.F) {
	f.Add([]byte(seedStatic), []byte(seedMetric))
	f.Add([]byte(pythonWarnings+seedStatic), []byte("[]"))
	f.Add([]byte(`[{"gpu": 0}, {"gpu": 0}]`), []byte(`[{"gpu": 1, "bus": {"bdf": "0000:0b:00.0"}}]`))
	f.Add([]byte(deep(40)), []byte(nil))
	if !fuzzing() {
		for _, name := range captures.AMDNames(captures.AMDSMI) {
			c := captures.MustLoadAMD(captures.AMDSMI, name)
			f.Add(c.Static, c.Metric)
		}
	}
	f.Fuzz(func(t *testing.T, static, metric []byte) {
		rep, err := ParseAMDSMI(static, metric)
		checkReport(t, rep, err)
	})
}

func FuzzParseROCmSMI(f *testing.F) {
	f.Add([]byte(seedROCm))
	f.Add([]byte("WARNING: No JSON data to report\n"))
	f.Add([]byte(`{"card1": {}, "card01": {"PCI Bus": "c1:00.0"}, "card2": {"PCI Bus": "0000:C1:00.0"}}`))
	if !fuzzing() {
		for _, name := range captures.AMDNames(captures.ROCmSMI) {
			f.Add(captures.MustLoadAMD(captures.ROCmSMI, name).Out)
		}
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		rep, err := ParseROCmSMI(out)
		checkReport(t, rep, err)
	})
}

func FuzzParseKFD(f *testing.F) {
	f.Add([]byte("node 53907 0 33536\nnode 14036 0 41728\nproc 4242 53907 1073741824\nproc 977 14036 0\ncut\n"))
	f.Add([]byte("node 1 3 49663\nproc 0 1 5\nproc 10 1 18446744073709551615\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		k, err := ParseKFD(body)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(k.BusIDs) > nvsmi.MaxGPUs || len(k.Procs) > MaxKFDProcs || len(k.Notes) > maxNotes {
			t.Fatalf("%d nodes, %d procs, %d notes: over the bounds", len(k.BusIDs), len(k.Procs), len(k.Notes))
		}
		for id, bus := range k.BusIDs {
			if id == 0 || busID(bus, "", &notes{}) != bus {
				t.Fatalf("node %d: bus id %q not normal", id, bus)
			}
		}
		for _, p := range k.Procs {
			if p.PID <= 0 || p.VRAMBytes > maxVRAMBytes {
				t.Fatalf("proc %+v out of range", p)
			}
		}
	})
}

// checkReport holds what every answer must give: an error with words, or
// at most nvsmi.MaxGPUs GPUs with distinct indexes and bus ids, printable
// bounded text, readings that are in range or missing (never NaN, never
// a missing reading carrying a value), and bounded notes.
func checkReport(t *testing.T, rep Report, err error) {
	t.Helper()
	if err != nil {
		if err.Error() == "" || len(rep.GPUs) > 0 {
			t.Fatalf("error %q with %d GPUs", err, len(rep.GPUs))
		}
		return
	}
	if len(rep.GPUs) == 0 || len(rep.GPUs) > nvsmi.MaxGPUs || len(rep.Notes) > maxNotes {
		t.Fatalf("%d GPUs, %d notes", len(rep.GPUs), len(rep.Notes))
	}
	index, bus := map[int]bool{}, map[string]bool{}
	for _, g := range rep.GPUs {
		if index[g.Index] || g.BusID != "" && bus[g.BusID] {
			t.Fatalf("GPU %d (%s) listed twice", g.Index, g.BusID)
		}
		index[g.Index], bus[g.BusID] = true, true
		for _, s := range []string{g.Name, g.UUID, g.BusID} {
			if len(s) > nvsmi.MaxCell || hosttext.Printable(s) != s {
				t.Fatalf("text %q not printable or over %d bytes", s, nvsmi.MaxCell)
			}
		}
		checkRange(t, g.UtilGPU, 0, 100)
		checkRange(t, g.UtilMem, 0, 100)
		checkRange(t, g.FanPct, 0, 100)
		checkRange(t, g.MemUsedMiB, 0, 1<<30)
		checkRange(t, g.MemTotalMiB, 0, 1<<30)
		checkRange(t, g.TempC, -50, 200)
		checkRange(t, g.PowerW, 0, 10000)
		checkRange(t, g.PowerLimitW, 0, 10000)
		checkRange(t, g.ECCUncorrected, 0, 1<<53)
	}
}

func checkRange(t *testing.T, x nvsmi.Number, lo, hi float64) {
	t.Helper()
	if !x.Valid && x.Value != 0 || x.Valid && (math.IsNaN(x.Value) || x.Value < lo || x.Value > hi) {
		t.Fatalf("reading %+v outside [%v, %v]", x, lo, hi)
	}
}

// FuzzDecodeJSON holds the parser to encoding/json: the same JSON values
// accepted, decoded alike (numbers as json.Number), within the depth bound.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{seedStatic, seedMetric, seedROCm, `[1, -0.5e+3, "a\u00e9\n", true, null, {}]`,
		`{"a": [1, 2,]}`, `[01]`, `["\x01"]`, `{"a" 1}`, `[1e]`, `[-]`, `["\ud800"]`, "[\"\xff\"]", `{"":"0","":"1" }`, "[\"\x01\"]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '{' && b[0] != '[' {
			return
		}
		p := parser{b: b}
		got := p.value(build)
		want, err := decodeStd(b)
		if errors.Is(p.err, errTooDeep) {
			return
		}
		if (p.err == nil) != (err == nil) {
			t.Fatalf("%q: parser error %v, encoding/json error %v", b, p.err, err)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: parser %#v, encoding/json %#v", b, got, want)
		}
	})
}

// decodeStd decodes the first JSON value of b as encoding/json does.
func decodeStd(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}
