package nvsmi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumon/gpumon/internal/captures"
)

const pmonHeader590 = "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n# Idx           #    C/G      %      %      %      %      %      %    name "

func sample(gpu, pid int, sm Number) PmonSample { return PmonSample{GPU: gpu, PID: pid, SMPct: sm} }

// firstSample cuts the captures' `pmon -c 5` down to what `pmon -c 1`
// prints: the lines up to the first (gpu, pid) seen again.
func firstSample(t testing.TB, body string) string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && !strings.HasPrefix(l, "#") {
			key := f[0] + " " + f[1]
			if seen[key] {
				break
			}
			seen[key] = true
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n") + "\n"
}

func TestPmonCaptures(t *testing.T) {
	missing := func(pids ...int) []PmonSample {
		var s []PmonSample
		for _, p := range pids {
			s = append(s, sample(0, p, na))
		}
		return s
	}
	windowsIdle := missing(2140, 2164, 13092, 13160, 13264, 13504, 14808, 14872, 15964, 16760, 17648, 17840, 19052, 19956, 20440, 21912, 22412, 23480, 23988)
	tests := []struct {
		capture, state string
		want           []PmonSample
	}{
		// A GPU without processes prints a line of "-": no sample.
		{"linux-x86_64__nvidia-h200__590.48.01", "idle", nil},
		{"linux-x86_64__nvidia-h200__590.48.01", "load", []PmonSample{sample(0, 10291, na), sample(0, 10293, na), sample(0, 10309, n(99))}},
		// MIG: pmon lists the processes and gives "-" for every figure.
		{"linux-x86_64__nvidia-h100-mig__590.48.01", "idle", nil},
		{"linux-x86_64__nvidia-h100-mig__590.48.01", "load", missing(21180, 21181, 21198)},
		// Graphics processes are listed too; an idle one reads "-", not 0.
		{"linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05", "idle", missing(1696, 4584)},
		{"linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05", "load", []PmonSample{sample(0, 1696, na), sample(0, 4584, na), sample(0, 5267, n(7)), sample(0, 5268, na)}},
		// Names with spaces ("NVIDIA Overlay."); a process encoding on
		// NVENC (enc 99) with no SM sample reads missing.
		{"windows-x86_64__nvidia-geforce-rtx-2080-super__610.62", "idle", windowsIdle},
		{"windows-x86_64__nvidia-geforce-rtx-2080-super__610.62", "load", []PmonSample{
			sample(0, 2140, na), sample(0, 2164, na), sample(0, 12940, na), sample(0, 13092, na), sample(0, 13160, na),
			sample(0, 13264, na), sample(0, 13504, na), sample(0, 13820, n(7)), sample(0, 14808, na), sample(0, 14872, na),
			sample(0, 15964, na), sample(0, 16760, na), sample(0, 17648, na), sample(0, 17840, na), sample(0, 19052, na),
			sample(0, 19956, na), sample(0, 20440, na), sample(0, 21912, na), sample(0, 22412, na), sample(0, 23480, na), sample(0, 23988, na),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.capture+"/"+tt.state, func(t *testing.T) {
			body, ok := section(t, tt.capture, tt.state, "pmon")
			if !ok {
				t.Fatal("no pmon section")
			}
			got, err := ParsePmon([]byte(firstSample(t, body)))
			if err != nil {
				t.Fatalf("ParsePmon: %v", err)
			}
			if diff := cmp.Diff(PmonReport{Samples: tt.want}, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParsePmon (-want +got):\n%s", diff)
			}

			// The capture as recorded (-c 5) lists each process five
			// times: every figure is dropped, nothing is invented.
			whole, err := ParsePmon([]byte(body))
			if err != nil {
				t.Fatalf("ParsePmon(-c 5): %v", err)
			}
			if len(whole.Samples) != len(tt.want) {
				t.Errorf("-c 5: %d samples, want %d", len(whole.Samples), len(tt.want))
			}
			for _, s := range whole.Samples {
				if s.SMPct.Valid {
					t.Errorf("-c 5: pid %d has sm %v, want missing", s.PID, s.SMPct.Value)
				}
			}
		})
	}
}

// The captures' pmon sections are all there is to test with: each must be
// in the table above.
func TestPmonCapturesAllTested(t *testing.T) {
	count := 0
	for _, name := range captures.Names() {
		for _, state := range []string{"idle", "load"} {
			if s, ok := captures.MustLoad(name).Section(state, "pmon"); ok && s.State == state {
				count++
			}
		}
	}
	if count != 8 {
		t.Errorf("%d pmon sections in the captures, TestPmonCaptures knows 8", count)
	}
}

func TestParsePmon(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want PmonReport
	}{
		{
			name: "two GPUs, one without processes",
			in: lines(pmonHeader590,
				"    0      10309     C     99      7      -      -      -      -    gpu_burn       ",
				"    1          -     -      -      -      -      -      -      -    -              "),
			want: PmonReport{Samples: []PmonSample{sample(0, 10309, n(99))}},
		},
		{
			name: "an older driver's fewer columns",
			in: lines("# gpu        pid  type    sm   mem   enc   dec   command",
				"# Idx          #   C/G     %     %     %     %   name",
				"    0      14122     C    42    11     -     -   python3"),
			want: PmonReport{Samples: []PmonSample{sample(0, 14122, n(42))}},
		},
		{
			name: "with date and time columns first (-o DT)",
			in: lines("#Date       Time        gpu        pid  type    sm   mem   enc   dec   command",
				"#YYYYMMDD   HH:MM:SS    Idx          #   C/G     %     %     %     %   name",
				" 20260703   22:11:09      3      14122     C    42    11     -     -   python3"),
			want: PmonReport{Samples: []PmonSample{sample(3, 14122, n(42))}},
		},
		{
			name: "a command name with spaces and digits is never read",
			in:   lines(pmonHeader590, "    0       777     C      5      1      -      -      -      -    my 0 99 app"),
			want: PmonReport{Samples: []PmonSample{sample(0, 777, n(5))}},
		},
		{
			name: "an empty command name",
			in:   lines(pmonHeader590, "    0       777     C      5      1      -      -      -      -"),
			want: PmonReport{Samples: []PmonSample{sample(0, 777, n(5))}},
		},
		{
			// A process named "x\n    0   10309  C  0" prints a line of
			// its own that claims bob's pid is idle.
			name: "a forged line cannot change another process's figure",
			in: lines(pmonHeader590,
				"    0      10309     C     99      7      -      -      -      -    train          ",
				"    0        666     C      -      -      -      -      -      -    x",
				"    0      10309     C      0      0      -      -      -      -    y"),
			want: PmonReport{
				Samples: []PmonSample{sample(0, 10309, na), sample(0, 666, na)},
				Skipped: []LineError{{Line: 5, Text: "0      10309     C      0      0      -      -      -      -    y", Reason: "pid 10309 listed twice on GPU 0: its figure is not believed"}},
			},
		},
		{
			name: "a forged header later on changes no column",
			in: lines(pmonHeader590,
				"    0        666     C      -      -      -      -      -      -    x",
				"# sm pid gpu",
				"    0      10309     C     50      7      -      -      -      -    train"),
			want: PmonReport{Samples: []PmonSample{sample(0, 666, na), sample(0, 10309, n(50))}},
		},
		{
			name: "absurd figures are missing",
			in: lines(pmonHeader590,
				"    0       1     C    101      -      -      -      -      -    a",
				"    0       2     C     -1      -      -      -      -      -    b",
				"    0       3     C  [N/A]      -      -      -      -      -    c",
				"    0       4     C   ERR!      -      -      -      -      -    d",
				"    0       5     C    1.5      -      -      -      -      -    e",
				"    0       6     C 18446744073709551616 - -   -      -      -    f",
				"    0       7     C   0x10      -      -      -      -      -    g"),
			want: PmonReport{Samples: []PmonSample{sample(0, 1, na), sample(0, 2, na), sample(0, 3, na), sample(0, 4, na), sample(0, 5, na), sample(0, 6, na), sample(0, 7, na)}},
		},
		{
			name: "bad gpu and pid fields, short lines and lines before the header are skipped",
			in: lines("NVIDIA-SMI has a warning",
				pmonHeader590,
				"    -       1     C    10      -      -      -      -      -    a",
				"    0      -3     C    10      -      -      -      -      -    b",
				"    0       5     C",
				"garbage"),
			want: PmonReport{Skipped: []LineError{
				{Line: 1, Text: "NVIDIA-SMI has a warning", Reason: "not a pmon line (before the header)"},
				{Line: 4, Text: "-       1     C    10      -      -      -      -      -    a", Reason: `gpu "-" is not a GPU index`},
				{Line: 5, Text: "0      -3     C    10      -      -      -      -      -    b", Reason: `pid "-3" is not a process id`},
				{Line: 6, Text: "0       5     C", Reason: "3 fields where the header has 10"},
				{Line: 7, Text: "garbage", Reason: "1 fields where the header has 10"},
			}},
		},
		{
			name: "CRLF line ends",
			in:   []byte("# gpu pid type sm command\r\n    0  42  C  17  a\r\n"),
			want: PmonReport{Samples: []PmonSample{sample(0, 42, n(17))}},
		},
		{
			name: "a header only: no process",
			in:   lines(pmonHeader590),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePmon(tt.in)
			if err != nil {
				t.Fatalf("ParsePmon: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParsePmon (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePmonFails(t *testing.T) {
	flood := []string{pmonHeader590}
	for pid := range MaxProcesses + 1 {
		flood = append(flood, fmt.Sprintf("0 %d C 1 1 - - - - p", pid+1))
	}
	tests := []struct {
		name, in, want string
	}{
		{"nothing", "", "no pmon header with gpu, pid and sm columns in the nvidia-smi output"},
		{"driver down", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
			"no pmon header with gpu, pid and sm columns in the nvidia-smi output: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."},
		{"a header without sm (pmon -s m)", "# gpu pid type fb command\n0 1 C 100 a\n", "no pmon header with gpu, pid and sm columns in the nvidia-smi output: # gpu pid type fb command"},
		{"a header with sm after the command", "# gpu pid command sm\n", "no pmon header with gpu, pid and sm columns in the nvidia-smi output: # gpu pid command sm"},
		{"more processes than a host runs", strings.Join(flood, "\n"), fmt.Sprintf("nvidia-smi pmon listed more than %d processes, more than fetch believes one host runs", MaxProcesses)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePmon([]byte(tt.in))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func FuzzParsePmon(f *testing.F) {
	for _, name := range captures.Names() {
		for _, state := range []string{"idle", "load"} {
			if s, ok := captures.MustLoad(name).Section(state, "pmon"); ok {
				f.Add([]byte(firstSample(f, s.Body)), uint8(7))
			}
		}
	}
	f.Add(lines(pmonHeader590, "    0      10309     C     99      7      -      -      -      -    a b", "    1  -  -  -  -  -  -  -  -  -"), uint8(0))
	f.Add(h100(f, "pmon-load"), uint8(3))
	f.Add([]byte("# gpu pid type sm command\r\n0 42 C 17 a\r\n"), uint8(100))
	f.Add([]byte("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, forged uint8) {
		rep, err := ParsePmon(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		checkSkipped(t, data, rep.Skipped)
		if len(rep.Samples) > MaxProcesses {
			t.Fatalf("%d samples", len(rep.Samples))
		}
		seen := map[[2]int]bool{}
		for _, s := range rep.Samples {
			key := [2]int{s.GPU, s.PID}
			if seen[key] || s.GPU < 0 || s.PID < 0 {
				t.Fatalf("sample %+v listed twice or negative", s)
			}
			seen[key] = true
			checkNumbers(t, fmt.Sprintf("pid %d", s.PID), s.SMPct)
			if s.SMPct.Valid && (s.SMPct.Value < 0 || s.SMPct.Value > 100) {
				t.Fatalf("pid %d: sm %v", s.PID, s.SMPct.Value)
			}
		}
		// A line a process name forges after the output never gives an
		// earlier process a figure other than its own.
		for _, s := range rep.Samples {
			text := fmt.Sprintf("%s\n%d %d C %d 0 - - - - x\n", strings.TrimSuffix(string(data), "\n"), s.GPU, s.PID, forged)
			again, err := ParsePmon([]byte(text))
			if err != nil {
				continue // the forged line was one too many
			}
			for _, a := range again.Samples {
				if a.GPU == s.GPU && a.PID == s.PID && a.SMPct.Valid && a.SMPct != s.SMPct {
					t.Fatalf("forged line %d%% changed pid %d from %v to %v", forged, s.PID, s.SMPct, a.SMPct)
				}
			}
		}
	})
}

func BenchmarkParsePmon(b *testing.B) {
	rows := []string{pmonHeader590}
	for i := range 32 {
		rows = append(rows, fmt.Sprintf("    %d      %d     C     %d      7      -      -      -      -    python3", i/4, 10000+i, i*3))
	}
	out := lines(rows...)
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		rep, err := ParsePmon(out)
		if err != nil || len(rep.Samples) != 32 {
			b.Fatalf("err %v, %d samples", err, len(rep.Samples))
		}
	}
}
