package nvsmi

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// fuzzSeeds are real outputs: every capture's section of the given kind,
// with and without units, and the failures nvidia-smi is known to print.
func fuzzSeeds(prefix string) [][]byte {
	var seeds [][]byte
	for _, name := range captures.Names() {
		c := captures.MustLoad(name)
		for _, state := range []string{"idle", "load"} {
			if s, ok := c.Section(state, prefix); ok {
				small := project(s.Body, fetchColumns[prefix])
				seeds = append(seeds, []byte(small), []byte(stripUnits(small)))
				if !fuzzing() {
					seeds = append(seeds, []byte(s.Body))
				}
			}
		}
	}
	seeds = append(seeds,
		lines(notLoaded, notLoaded),
		lines("Failed to initialize NVML: Driver/library version mismatch"),
		lines("No devices were found"),
		lines(`Field "x" is not a valid field to query.`),
		lines(fetchHeader,
			"0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:04:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]",
			"Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU",
			"2, GPU-c, ERR!, 00000000:06:00.0, ERR!, ERR!, 1234, 81559, ERR!, ERR!, 700.00, ERR!"),
		lines(appsHeader, "4242, GPU-a, python train.py --tags a, b, c, 1000 MiB", "900, GPU-b, C:\\Program Files\\x y.exe, [N/A]"),
		nil,
	)
	return seeds
}

// The columns fetch asks for. The captures hold ~200; cut to these, the
// seeds are what fetch really receives, and small enough for the fuzzer to
// mutate and minimize quickly.
var fetchColumns = map[string][]string{
	"query-gpu":          strings.Split(strings.ReplaceAll(fetchHeader, " ", ""), ","),
	"query-compute-apps": strings.Split(strings.ReplaceAll(appsHeader, " ", ""), ","),
}

// project keeps the named columns (names without units) of a capture's CSV,
// in the given order.
func project(body string, cols []string) string {
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	pos := map[string]int{}
	for i, h := range strings.Split(lines[0], ", ") {
		name, _, _ := strings.Cut(h, " [")
		pos[name] = i
	}
	var out strings.Builder
	for _, l := range lines {
		fields := strings.Split(l, ", ")
		for j, c := range cols {
			c, _, _ = strings.Cut(c, "[")
			if j > 0 {
				out.WriteString(", ")
			}
			if i, ok := pos[c]; ok && i < len(fields) {
				out.WriteString(fields[i])
			}
		}
		out.WriteString("\n")
	}
	return out.String()
}

// fuzzing reports whether this run is `go test -fuzz`. Whole captures (200
// columns, ~10 kB) are seeds only under plain `go test`, where the seeds run
// once as tests; while fuzzing, each new coverage found in one of them
// started a minimization that used up a 20 s run on its own.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

var fuzzTokens = []string{"[N/A]", "[Not Supported]", "ERR!", "", "[Unknown Error]", " MiB", "%", "NaN", "-Inf", "0x", ", "}

// noDigits makes a fuzzed string into a field with no digit and no line
// break, so that nothing in it can honestly be read as a number.
func noDigits(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r == '\n' {
			return -1
		}
		return r
	}, s)
}

func checkNumbers(t *testing.T, what string, nums ...Number) {
	t.Helper()
	for i, x := range nums {
		if x.Valid && (math.IsNaN(x.Value) || math.IsInf(x.Value, 0)) {
			t.Fatalf("%s: number %d is %v", what, i, x.Value)
		}
		if !x.Valid && x.Value != 0 {
			t.Fatalf("%s: number %d is missing but carries %v", what, i, x.Value)
		}
	}
}

func gpuNumbers(g GPU) []Number {
	return []Number{g.UtilGPU, g.UtilMem, g.MemUsedMiB, g.MemTotalMiB, g.TempC, g.PowerW, g.PowerLimitW, g.FanPct}
}

func checkSkipped(t *testing.T, data []byte, skipped []LineError) {
	t.Helper()
	nlines := len(splitLines(data))
	last := 0
	for _, s := range skipped {
		if s.Line < 1 || s.Line > nlines || s.Line < last {
			t.Fatalf("skipped line %d out of order or range (1..%d, previous %d)", s.Line, nlines, last)
		}
		last = s.Line
		if len(skipped) > MaxSkipped {
			t.Fatalf("%d skipped lines kept, more than %d", len(skipped), MaxSkipped)
		}
		if len(s.Text) > maxLineText || s.Reason == "" {
			t.Fatalf("skipped line %d: text %d bytes, reason %q", s.Line, len(s.Text), s.Reason)
		}
	}
}

// checkCell: a text field the parser keeps is printable and bounded.
func checkCell(t *testing.T, s string) {
	t.Helper()
	if len(s) > MaxCell || hosttext.Printable(s) != s {
		t.Fatalf("field %q (%d bytes) not printable or over %d bytes", s, len(s), MaxCell)
	}
}

func checkParseErr(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var he *HostError
	if !errors.As(err, &he) || he.Status != hoststatus.Error || he.Message == "" {
		t.Fatalf("error %v (%T): want a *HostError of kind error", err, err)
	}
}

func checkDiagnose(t *testing.T, data []byte) {
	t.Helper()
	for _, exit := range []int{0, 1, 6, 9, 15, 18, 124, 127} {
		he := Diagnose(data, exit)
		if he == nil {
			continue
		}
		if he.Status != hoststatus.Driver && he.Status != hoststatus.Timeout && he.Status != hoststatus.Error || he.Message == "" {
			t.Fatalf("Diagnose(_, %d) = %+v", exit, he)
		}
	}
}

// healthSeeds are the captures' health columns, as the probe asks them.
func healthSeeds() [][]byte {
	var seeds [][]byte
	cols := append([]string{"index"}, HealthFields...)
	for _, name := range captures.Names() {
		for _, state := range []string{"idle", "load"} {
			if s, ok := captures.MustLoad(name).Section(state, "query-gpu"); ok {
				seeds = append(seeds, []byte(project(s.Body, cols)))
			}
		}
	}
	return seeds
}

// checkHealth: a health reading the parser keeps is in its range.
func checkHealth(t *testing.T, g GPU) {
	t.Helper()
	checkNumbers(t, fmt.Sprintf("GPU %d health", g.Index), g.PState, g.ECCUncorrected)
	switch {
	case g.PState.Valid && (g.PState.Value < 0 || g.PState.Value > 15 || g.PState.Value != math.Trunc(g.PState.Value)):
		t.Fatalf("pstate %v", g.PState.Value)
	case g.ECCUncorrected.Valid && (g.ECCUncorrected.Value < 0 || g.ECCUncorrected.Value > maxExact || g.ECCUncorrected.Value != math.Trunc(g.ECCUncorrected.Value)):
		t.Fatalf("ECC errors %v", g.ECCUncorrected.Value)
	case g.ECCMode != "" && g.ECCMode != "enabled" && g.ECCMode != "disabled":
		t.Fatalf("ECC mode %q", g.ECCMode)
	case g.ClockEventMask > maxExact || !g.ClockEventValid && g.ClockEventMask != 0:
		t.Fatalf("clock mask %#x valid %v", g.ClockEventMask, g.ClockEventValid)
	}
	for _, fl := range []Flag{g.RetiredPagesPending, g.RemapPending, g.RemapFailure} {
		if fl.Value && !fl.Valid {
			t.Fatalf("flag %+v: yes but missing", fl)
		}
	}
}

func FuzzParseGPUs(f *testing.F) {
	for i, s := range fuzzSeeds("query-gpu") {
		f.Add(s, fuzzTokens[i%len(fuzzTokens)], "NVIDIA H200")
	}
	for _, s := range healthSeeds() {
		f.Add(s, "0xFFFFFFFFFFFFFFFF", "P0")
	}
	f.Add(h100(f, "query-health"), "Yes", "P15")
	f.Fuzz(func(t *testing.T, data []byte, tok, name string) {
		rep, err := ParseGPUs(data)
		checkParseErr(t, err)
		checkSkipped(t, data, rep.Skipped)
		for _, g := range rep.GPUs {
			checkNumbers(t, fmt.Sprintf("GPU %d", g.Index), gpuNumbers(g)...)
			checkHealth(t, g)
			if g.Index < 0 {
				t.Fatalf("index %d", g.Index)
			}
			for _, text := range []string{g.UUID, g.Name, g.BusID} {
				checkCell(t, text)
			}
		}
		checkDiagnose(t, data)

		// No invented zero: a field with no digit in it is never a reading.
		if ParseNumber(tok).Valid && noDigits(tok) == tok {
			t.Fatalf("ParseNumber(%q) is valid without a digit", tok)
		}
		tok, name = noDigits(tok), noDigits(name)
		row := "0, GPU-x, " + name + ", bus"
		for range 8 {
			row += ", " + tok
		}
		rep, err = ParseGPUs(lines(fetchHeader, row))
		if err != nil || len(rep.GPUs) != 1 {
			t.Fatalf("one row %q: err %v, %d GPUs, skipped %v", row, err, len(rep.GPUs), rep.Skipped)
		}
		for i, x := range gpuNumbers(rep.GPUs[0]) {
			if x.Valid {
				t.Fatalf("row %q: number %d is %v, read from no digit", row, i, x.Value)
			}
		}
	})
}

func FuzzParseProcesses(f *testing.F) {
	for i, s := range fuzzSeeds("query-compute-apps") {
		f.Add(s, fuzzTokens[i%len(fuzzTokens)], "python train.py, --x")
	}
	f.Fuzz(func(t *testing.T, data []byte, tok, name string) {
		rep, err := ParseProcesses(data)
		checkParseErr(t, err)
		checkSkipped(t, data, rep.Skipped)
		for _, p := range rep.Processes {
			checkNumbers(t, fmt.Sprintf("pid %d", p.PID), p.UsedMemMiB)
			if p.PID < 0 {
				t.Fatalf("pid %d", p.PID)
			}
			checkCell(t, p.GPUUUID)
			checkCell(t, p.Name)
		}
		checkDiagnose(t, data)

		tok, name = noDigits(tok), noDigits(name)
		row := "7, GPU-x, " + name + ", " + tok
		rep, err = ParseProcesses(lines(appsHeader, row))
		if err != nil || len(rep.Processes) != 1 {
			t.Fatalf("one row %q: err %v, %d processes, skipped %v", row, err, len(rep.Processes), rep.Skipped)
		}
		if x := rep.Processes[0].UsedMemMiB; x.Valid {
			t.Fatalf("row %q: used memory %v, read from no digit", row, x.Value)
		}
	})
}

func BenchmarkParseGPUs(b *testing.B) {
	rows := []string{fetchHeader}
	for i := range 8 {
		rows = append(rows, fmt.Sprintf("%d, GPU-%08d-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3, 00000000:%02X:00.0, %d, 12, 40123, 81559, 61, 512.34, 700.00, [N/A]", i, i, 0x18+i, 90+i))
	}
	out := lines(rows...)
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		rep, err := ParseGPUs(out)
		if err != nil || len(rep.GPUs) != 8 {
			b.Fatalf("err %v, %d GPUs", err, len(rep.GPUs))
		}
	}
}
