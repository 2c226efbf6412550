package render

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/testenv"
)

// oneLine leaves nothing a terminal acts on: C0 and C1 controls (0x9b is
// CSI on some terminals, raw or encoded), invalid UTF-8, and other
// invisible runes that reorder or hide text.
func TestOneLine(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "torchrun train.py", "torchrun train.py"},
		{"unicode kept", "café 日本 ✓", "café 日本 ✓"},
		{"newlines and tabs", "a\nb\tc\r\n", "a b c"},
		{"ESC sequence", "\x1b[2Jgone", "[2Jgone"},
		{"raw C1 CSI byte", "\x9b31mred", "31mred"},
		{"encoded C1 CSI", "x\xc2\x9b31m", "x 31m"},
		{"other C1", "a\u0085b\u009dc", "a b c"},
		{"invalid byte", "a\xffb", "a b"},
		{"truncated rune", "ab\xe6\x97", "ab"},
		{"DEL", "a\x7fb", "a b"},
		{"bidi override", "user\u202efdp.exe", "user fdp.exe"},
		{"only controls", "\x1b\x9b\xff\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := oneLine(tt.in)
			if got != tt.want {
				t.Errorf("oneLine(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !utf8.ValidString(got) || strings.ContainsAny(got, "\x1b\u009b\ufffd") {
				t.Errorf("oneLine(%q) = %q: invalid UTF-8 or a control left", tt.in, got)
			}
		})
	}
}

// The warnings above the -text table (a reservations file's problems, say)
// are one clean line each, like the table's cells.
func TestTextWarningsAreOneLine(t *testing.T) {
	tests := []struct{ name, warning, want string }{
		{"ESC", "Reservations file r.json:\x1b[2J", "warning: Reservations file r.json: [2J\n"},
		{"raw CSI byte", "bad\x9b31mred", "warning: bad 31mred\n"},
		{"encoded CSI", "bad\xc2\x9b31mred", "warning: bad 31mred\n"},
		{"invalid byte and newline", "a\xff\nb", "warning: a b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := testReport(t, readRows(t, "testdata/load_data.csv"), "")
			rep.Warnings = []string{tt.warning}
			var b bytes.Buffer
			if err := writeText(&b, rep, false); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if !strings.Contains(out, "\n"+tt.want) {
				t.Errorf("no line %q in:\n%s", tt.want, out)
			}
			if !utf8.ValidString(out) || strings.ContainsAny(out, "\x1b\u009b") {
				t.Errorf("output has invalid UTF-8 or a control:\n%q", out)
			}
		})
	}
}

// The -text output of the golden fixture at the widths people have: a
// terminal of 80 and of 120 columns, and none (a pipe), with -free and
// colour. Every line fits the width, and colour is only ours.
func TestTextGolden(t *testing.T) {
	rep := testReport(t, readRows(t, "testdata/load_data.csv"), "testdata/reservations.json")
	tests := []struct {
		name   string
		o      textOptions
		golden string
	}{
		{"80 columns", textOptions{Width: 80}, "table-w80.txt.golden"},
		{"120 columns", textOptions{Width: 120}, "table-w120.txt.golden"},
		{"no limit", textOptions{}, "table.txt.golden"},
		{"no limit, colour", textOptions{Color: true}, "table-color.txt.golden"},
		{"40 columns", textOptions{Width: 40}, "table-w40.txt.golden"},
		{"free", textOptions{Free: true}, "table-free.txt.golden"},
		{"free, 80 columns, colour", textOptions{Free: true, Width: 80, Color: true}, "table-free-w80-color.txt.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeTextWith(&b, rep, tt.o); err != nil {
				t.Fatal(err)
			}
			testenv.Golden(t, filepath.Join("testdata", tt.golden), b.Bytes())
			checkText(t, b.String(), tt.o)
		})
	}
}

// sgr matches the colours Text writes itself.
var sgr = regexp.MustCompile(`\x1b\[(?:[0-9;]*)m`)

// checkText checks what every -text output must be: valid UTF-8 without
// controls but our colours (and those only with o.Color), every line no
// wider than o.Width.
func checkText(t *testing.T, out string, o textOptions) {
	t.Helper()
	plain := out
	if o.Color {
		plain = sgr.ReplaceAllString(out, "")
	} else if strings.Contains(out, "\x1b") {
		t.Errorf("colour without -color")
	}
	if !utf8.ValidString(plain) {
		t.Errorf("invalid UTF-8:\n%q", plain)
	}
	for _, line := range strings.Split(strings.TrimSuffix(plain, "\n"), "\n") {
		for _, r := range line {
			if r == utf8.RuneError || !unicode.IsPrint(r) {
				t.Errorf("rune %U in line %q", r, line)
				break
			}
		}
		if o.Width > 0 && strWidth(line) > o.Width {
			t.Errorf("line of %d columns, wider than %d: %q", strWidth(line), o.Width, line)
		}
	}
}

// What the lines say, whatever the width: a line per GPU and per host, the
// users with their memory, the idle-time job apart, ignored processes
// unnamed, the reservation's name, a failed GPU's reason, a down host's.
func TestTextLines(t *testing.T) {
	rep := testReport(t, readRows(t, "testdata/load_data.csv"), "testdata/reservations.json")
	tests := []struct {
		name string
		o    textOptions
		want []string // lines, as regular expressions
		not  []string
	}{
		{"all", textOptions{}, []string{
			`^gpu01 +H100 80GB HBM3 x4  load 3\.5  cpus 64  ram 117/503 GB$`,
			`^\[1\] H100 80GB HBM3 \| 31°C  98% \|  60/80 GB  \| alice\(39G\) bob\(21G\)$`,
			`^\[2\] .* \| reserved by carol until 2026-11-30 18:00: ICML deadline$`,
			`^\[3\] .* \| free · idle job: idlejob\(29G\)$`,
			`^\[0\] 2080S +\| 41°C   3% \| 0\.4/8\.0 GB \| free$`,
			`^gpu03 +down \(timeout\): no complete answer in 20s · reserved by frank: whole host$`,
			`^\[0\] .* \| alice\(7\.3G\) \(unknown\)\(2\.2G\)$`,
			`^\[\?\] .* \| failed \(0000:9a:00\.0\): GPU is lost; reboot the system to recover this GPU$`,
			`^users: alice 2 GPUs 46G · \(unknown\) 1 GPU 2\.2G · bob 1 GPU 21G$`,
		}, []string{`root`, `Xorg`}},
		{"free", textOptions{Free: true}, []string{
			`^gpu01 +H100`, `^\[0\] .* \| free$`, `^\[3\] .* \| free · idle job`, `^ws01 `,
			`^3 free of 8 GPUs · `,
		}, []string{`^\[[12]\]`, `gpu03`, `MIG box`, `^users:`, `reserved`, `failed`}},
		{"80 columns: no GPU name, the users cut", textOptions{Width: 80}, []string{
			`^\[1\] 38°C 100% \| 2\.0/8\.0 GB \| busy · memory in use but no process visible \(anoth…$`,
			`^  1 host down · data 4 min old$`,
		}, nil},
		{"40 columns", textOptions{Width: 40}, []string{
			`^\[1\] 31°C  98% \|  60/80 GB  \| alice\(39G\)…$`,
			`^gpu01 +H100 80GB HBM3 x4  load 3\.5$`,
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeTextWith(&b, rep, tt.o); err != nil {
				t.Fatal(err)
			}
			for _, re := range tt.want {
				if !regexp.MustCompile(`(?m)` + re).MatchString(b.String()) {
					t.Errorf("no line matches %s in:\n%s", re, b.String())
				}
			}
			for _, re := range tt.not {
				if regexp.MustCompile(`(?m)` + re).MatchString(b.String()) {
					t.Errorf("a line matches %s in:\n%s", re, b.String())
				}
			}
		})
	}
}

// -free with no free GPU says so rather than print nothing.
func TestTextFreeNone(t *testing.T) {
	rows := readRows(t, "testdata/load_data.csv")
	var busy []loaddata.Row
	for _, r := range rows {
		if r.Host == "gpu03" || r.Host == "mig01" {
			busy = append(busy, r)
		}
	}
	var b bytes.Buffer
	if err := writeTextWith(&b, testReport(t, busy, ""), textOptions{Free: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "\nno free GPU\n") {
		t.Errorf("output:\n%s", b.String())
	}
}

// Hostile hosts: what they send never reaches the terminal as a control,
// never widens a line past the width, and a huge name costs a few columns.
func TestTextHostile(t *testing.T) {
	huge := strings.Repeat("m", 1<<20)
	gpu := func(host string, i int64, user, cmd string) loaddata.Row {
		return loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: host, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(i), GPUName: "NVIDIA H100 80GB HBM3", MemUsedMiB: loaddata.Num(70000), MemTotalMiB: loaddata.Num(81559),
			TempC: loaddata.Num(40), GPUUtilPct: loaddata.Num(99), PID: loaddata.IntOf(100 + i), User: user, Command: cmd,
			ProcessMemMiB: loaddata.Num(69000)}
	}
	// root in a container is named by the container, as anyone chose it
	ctr := func(i int64, name string) loaddata.Row {
		r := gpu("c", i, "root", "x")
		r.Container, r.ContainerName = "3f2a9c1e4b7d", name
		return r
	}
	tests := []struct {
		name string
		rows []loaddata.Row
		want []string // substrings of the plain output
		max  int      // bytes the output may take
	}{
		{"container names", []loaddata.Row{
			ctr(0, "ev\x1b]0;pwned\x07il"), ctr(1, "bidi\u202eevil"), ctr(2, "new\nline"), ctr(3, "推論サーバー"),
			ctr(4, huge), ctr(5, strings.Repeat("王", 100)),
		}, []string{"ev ]0;pwned il(67G)", "bidi evil(67G)", "new line(67G)", "推論サーバー(67G)",
			strings.Repeat("m", userNameMax-1) + "…(67G)", strings.Repeat("王", userNameMax/2-1) + "…(67G)"}, 4096},
		{"escape sequences", []loaddata.Row{
			gpu("h\x1b[2J", 0, "ev\x1b]0;pwned\x07il", "x\x1b[31m"),
			gpu("h\x1b[2J", 1, "c1\u009b31mx\xc2\x9b", "y"),
			{Timestamp: "2026-11-23T14:05:00Z", Host: "down\x1b[1A", HostStatus: hoststatus.Error, HostError: "bad\x1b[2K\rline"},
		}, []string{"ev ]0;pwned il(67G)", "c1 31mx(67G)", "down [1A", "bad [2K line"}, 4096},
		{"newlines", []loaddata.Row{
			gpu("h\nfake", 0, "a\nb", "c\nd"),
			{Timestamp: "2026-11-23T14:05:00Z", Host: "gpu09", HostStatus: hoststatus.OK, GPUBusID: "0:1",
				GPUError: "lost\n[0] H100 | 30°C 0% | 0/80 GB | free"},
		}, []string{"h fake", "a b(67G)", "failed (0:1): lost [0] H100"}, 4096},
		{"very long command", []loaddata.Row{gpu("h", 0, "alice", "python "+strings.Repeat("--flag ", 100000))},
			[]string{"alice(67G)"}, 4096},
		{"1 MiB user name", []loaddata.Row{gpu("h", 0, huge, "x"), gpu("h", 1, "bob", "x")},
			[]string{strings.Repeat("m", userNameMax-1) + "…(67G)", "bob(67G)"}, 4096},
		{"1 MiB host, GPU name and error", []loaddata.Row{
			{Timestamp: "2026-11-23T14:05:00Z", Host: huge, HostStatus: hoststatus.OK, GPUIndex: loaddata.IntOf(0), GPUName: huge},
			{Timestamp: "2026-11-23T14:05:00Z", Host: "x" + huge, HostStatus: hoststatus.Error, HostError: huge},
		}, []string{strings.Repeat("m", hostNameMax-1) + "…", strings.Repeat("m", gpuNameMax-1) + "…"}, 8192},
		{"wide user names", []loaddata.Row{gpu("h", 0, "山田太郎", "x"), gpu("h", 1, "bob", "x"), gpu("h", 2, strings.Repeat("王", 100), "x")},
			[]string{"山田太郎(67G)", strings.Repeat("王", userNameMax/2-1) + "…(67G)"}, 4096},
	}
	for _, tt := range tests {
		for _, o := range []textOptions{{}, {Width: 80}, {Width: 120, Color: true}, {Width: 30, Free: true}} {
			t.Run(fmt.Sprintf("%s/%+v", tt.name, o), func(t *testing.T) {
				var b bytes.Buffer
				if err := writeTextWith(&b, testReport(t, tt.rows, ""), o); err != nil {
					t.Fatal(err)
				}
				checkText(t, b.String(), o)
				if b.Len() > tt.max {
					t.Errorf("%d bytes of output, want at most %d", b.Len(), tt.max)
				}
				if o.Width == 0 && !o.Free {
					for _, s := range tt.want {
						if !strings.Contains(b.String(), s) {
							t.Errorf("no %q in:\n%s", s, b.String())
						}
					}
				}
			})
		}
	}
}

// A wide name (CJK) takes two columns a rune: the columns after it stay
// in line, and the line is cut by columns, not runes.
func TestTextWideRunes(t *testing.T) {
	var rows []loaddata.Row
	for i, name := range []string{"H100", "加速器カード", "A100"} {
		rows = append(rows, loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: "ホスト", HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(int64(i)), GPUName: name, MemUsedMiB: loaddata.Num(70000), MemTotalMiB: loaddata.Num(81559),
			TempC: loaddata.Num(40), GPUUtilPct: loaddata.Num(99), PID: loaddata.IntOf(7), User: "山田太郎", ProcessMemMiB: loaddata.Num(69000)})
	}
	rows = append(rows, loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: "gpu01", HostStatus: hoststatus.Error, HostError: "x"})
	for _, width := range []int{0, 80, 41, 40} {
		t.Run(strconv.Itoa(width), func(t *testing.T) {
			o := textOptions{Width: width}
			var b bytes.Buffer
			if err := writeTextWith(&b, testReport(t, rows, ""), o); err != nil {
				t.Fatal(err)
			}
			checkText(t, b.String(), o)
			var bars []int // the columns of each GPU line's "|"
			for _, line := range strings.Split(b.String(), "\n") {
				if !strings.HasPrefix(line, "[") {
					continue
				}
				var cols []int
				for i, r := range line {
					if r == '|' {
						cols = append(cols, strWidth(line[:i]))
					}
				}
				if bars == nil {
					bars = cols
				} else if diff := cmp.Diff(bars, cols); diff != "" {
					t.Errorf("the columns of %q moved (-first +this):\n%s", line, diff)
				}
			}
			if bars == nil {
				t.Fatalf("no GPU line:\n%s", b.String())
			}
			if !regexp.MustCompile(`(?m)^ホスト  H100 x1 \+ 加速器カード x1 \+ A10`).MatchString(b.String()) {
				t.Errorf("no header for ホスト:\n%s", b.String())
			}
			if !regexp.MustCompile(`(?m)^gpu01   down`).MatchString(b.String()) {
				t.Errorf("the host names are not padded by columns:\n%s", b.String())
			}
		})
	}
}

// Widths are columns on a terminal, and a cut line ends with "…" that
// fits.
func TestTextWidth(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
		w    int
	}{
		{"ascii", "alice", 10, "alice", 5},
		{"ascii cut", "alice-and-bob", 6, "alice…", 6},
		{"CJK", "山田太郎", 10, "山田太郎", 8},
		{"CJK cut on a rune", "山田太郎", 6, "山田…", 5},
		{"full-width", "ＡＢ", 4, "ＡＢ", 4},
		{"hangul", "김철수", 6, "김철수", 6},
		{"combining mark", "e\u0301t\u0301e", 3, "e\u0301t\u0301e", 3},
		{"emoji", "🚀x", 3, "🚀x", 3},
		{"degree and dot", "30°C · 2", 8, "30°C · 2", 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := clip(tt.in, tt.n)
			if got != tt.want || strWidth(got) != tt.w {
				t.Errorf("clip(%q, %d) = %q (%d columns), want %q (%d)", tt.in, tt.n, got, strWidth(got), tt.want, tt.w)
			}
		})
	}
}

// -text fits the terminal: $COLUMNS first, then the terminal's size; a
// pipe without $COLUMNS gets whole lines.
func TestTerminalWidth(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name    string
		columns string // "unset": not in the environment
		w       io.Writer
		want    int
	}{
		{"COLUMNS", "132", f, 132},
		{"COLUMNS 0 is no limit", "0", f, 0},
		{"COLUMNS not a number", "wide", f, 0},
		{"a file, no COLUMNS", "unset", f, 0},
		{"a buffer, no COLUMNS", "unset", &bytes.Buffer{}, 0},
		{"a buffer, COLUMNS", "100", &bytes.Buffer{}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("COLUMNS", tt.columns)
			if tt.columns == "unset" {
				os.Unsetenv("COLUMNS")
			}
			if got := terminalWidth(tt.w); got != tt.want {
				t.Errorf("terminalWidth = %d, want %d", got, tt.want)
			}
		})
	}
}

// -free is a flag of its own, and prints the table.
func TestFreeFlag(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/load_data.csv", filepath.Join(dir, "load_data.csv"))
	t.Chdir(dir)
	t.Setenv("COLUMNS", "60")
	var stdout, stderr bytes.Buffer
	if err := Main(context.Background(), []string{"-free"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	checkText(t, stdout.String(), textOptions{Width: 60})
	if !regexp.MustCompile(`(?m)^\[0\] .*\| free$`).MatchString(stdout.String()) || strings.Contains(stdout.String(), "alice(") {
		t.Errorf("-free:\n%s", stdout.String())
	}
	if _, err := os.Stat("index.html"); err == nil {
		t.Error("-free wrote the page")
	}
}

// root's processes in containers are named by their containers, by name,
// else by short id, as on the page; a user's own container keeps the user.
func TestTextContainers(t *testing.T) {
	rep := testReport(t, readRows(t, "testdata/attrib.csv"), "")
	var b bytes.Buffer
	if err := writeTextWith(&b, rep, textOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`^\[0\] .* \| vllm-server\(68G\)$`,
		`^\[1\] .* \| 0f1e2d3c4b5a\(29G\) root\(20G\)$`,
		`^\[0\] 2080S .* \| dave\(5\.9G\)$`,
		`^\[1\] .* \| alice\(39G\) bob\(20G\)$`,
		`^users: alice 2 GPUs 78G · root 2 GPUs 117G · `, // the users are who ps says
	} {
		if !regexp.MustCompile(`(?m)` + re).MatchString(b.String()) {
			t.Errorf("no line matches %s in:\n%s", re, b.String())
		}
	}
}
