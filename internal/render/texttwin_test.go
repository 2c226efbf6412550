package render

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/testenv"
)

// textFiles are the text twin's writers, by file.
var textFiles = []struct {
	name  string
	write func(*bytes.Buffer, *Report) error
}{
	{"index.txt", func(b *bytes.Buffer, r *Report) error { return writeIndexText(b, r) }},
	{"free.txt", func(b *bytes.Buffer, r *Report) error { return writeFreeText(b, r) }},
}

// writeTwin is the file name of r, as render writes it.
func writeTwin(t testing.TB, name string, r *Report) string {
	t.Helper()
	for _, f := range textFiles {
		if f.name == name {
			var b bytes.Buffer
			if err := f.write(&b, r); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
	}
	t.Fatalf("no text file %s", name)
	return ""
}

// index.txt and free.txt of the fixtures: the table plain at 100 columns,
// dated; the free GPUs a line per host.
func TestTextTwinGolden(t *testing.T) {
	for _, fixture := range []string{"load_data", "health", "vendors", "attrib"} {
		resv := ""
		if fixture == "load_data" {
			resv = "testdata/reservations.json"
		}
		rep := testReport(t, readRows(t, "testdata/"+fixture+".csv"), resv)
		for _, f := range textFiles {
			t.Run(fixture+"/"+f.name, func(t *testing.T) {
				got := writeTwin(t, f.name, rep)
				testenv.Golden(t, filepath.Join("testdata", "twin", fixture+"."+f.name+".golden"), []byte(got))
				checkText(t, got, textOptions{Width: textFileWidth})
			})
		}
	}
}

// free.txt's columns are for scripts: blank-separated, in a fixed order,
// the models last; the comment lines first. Degraded GPUs come after the
// healthy ones and are named in their column; a lost GPU, a reserved one
// (gpu01's 2) or one held (ws01's 1) is not free; one running the
// idle-time job is (gpu01's 3, its free memory less the job's).
func TestFreeTextColumns(t *testing.T) {
	tests := []struct {
		fixture string
		rows    []loaddata.Row // else the fixture's
		want    [][]string     // each host line's fields: host, free, gpus, free_gib, degraded, models
	}{
		{"degraded first", degradedFirst(), [][]string{
			{"b", "3", "1,0,2", "39,39,39", "0,2", "A100-SXM4-40GB x3"},
			{"a", "1", "0", "39", "0", "A100-SXM4-40GB x1"},
		}},
		{"load_data", nil, [][]string{
			{"gpu01", "2", "0,3", "80,50", "-", "H100 80GB HBM3 x2"},
			{"ws01", "1", "0", "7.6", "-", "2080S x1"},
		}},
		{"health", nil, [][]string{
			{"h100a", "2", "0,1", "80,80", "1", "H100 80GB HBM3 x2"},
			{"h100b", "2", "0,1", "80,80", "1", "H100 80GB HBM3 x2"},
			{"ws02", "1", "0", "7.6", "-", "2080S x1"},
		}},
		{"vendors", nil, [][]string{
			{"h100a", "1", "1", "80", "-", "NVIDIA H100 80GB HBM3 x1"},
			{"mi300a", "2", "2,3", "192,192", "3", "AMD MI300X x2"},
			{"ws04", "1", "0", "12", "-", "AMD RX 6700/6700 XT/675… x1"},
			{"mixed01", "1", "1", "48", "-", "NVIDIA RTX A6000 x1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			resv := ""
			if tt.fixture == "load_data" {
				resv = "testdata/reservations.json"
			}
			rows := tt.rows
			if rows == nil {
				rows = readRows(t, "testdata/"+tt.fixture+".csv")
			}
			out := writeTwin(t, "free.txt", testReport(t, rows, resv))
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if !strings.HasPrefix(lines[0], "# data 2026-11-23T14:05:") || len(lines) < 3 {
				t.Errorf("first line %q, want the data's time", lines[0])
			}
			if diff := cmp.Diff([]string{"#", "host", "free", "gpus", "free_gib", "degraded", "models"}, strings.Fields(lines[1])); diff != "" {
				t.Errorf("column names (-want +got):\n%s", diff)
			}
			var got [][]string
			for _, line := range lines[2:] {
				f := strings.Fields(line)
				if len(f) < 6 {
					t.Fatalf("line %q has %d fields, want 6 or more", line, len(f))
				}
				got = append(got, append(f[:5:5], strings.Join(f[5:], " ")))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("host lines (-want +got):\n%s", diff)
			}
		})
	}
}

// degradedFirst is a host whose free GPUs 0 and 2 are degraded (a remap
// pending) and 1 is not, after a host with only a degraded one.
func degradedFirst() []loaddata.Row {
	gpu := func(host string, i int64, pending bool) loaddata.Row {
		return loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: host, HostStatus: hoststatus.OK, GPUIndex: loaddata.IntOf(i),
			GPUName: "NVIDIA A100-SXM4-40GB", MemUsedMiB: loaddata.Num(1000), MemTotalMiB: loaddata.Num(40960),
			RemappedRowsPending: loaddata.TriOf(pending), RemappedRowsFailure: loaddata.TriOf(false)}
	}
	return []loaddata.Row{gpu("a", 0, true), gpu("b", 0, true), gpu("b", 1, false), gpu("b", 2, true)}
}

// The first line gives the time and totals; "no GPU is free" when none
// is; a STALE line when the data is old, for whoever reads the file.
func TestFreeTextSummary(t *testing.T) {
	rows := readRows(t, "testdata/load_data.csv")
	var busy []loaddata.Row
	for _, r := range rows {
		if r.Host == "gpu03" || r.Host == "mig01" {
			busy = append(busy, r)
		}
	}
	old := testReport(t, rows, "testdata/reservations.json")
	old.Now = old.Cluster.DataTime.Add(2 * time.Hour)
	tests := []struct {
		name string
		rep  *Report
		want string
	}{
		{"some free", testReport(t, rows, "testdata/reservations.json"),
			"# data 2026-11-23T14:05:20Z · 3 of 8 GPUs free · on 2 of 4 hosts · 1 host down\n" +
				"# host  free  gpus  free_gib  degraded  models\n"},
		{"none free", testReport(t, busy, ""),
			"# data 2026-11-23T14:05:20Z · 0 of 2 GPUs free · on 0 of 2 hosts · 1 host down\n# no GPU is free\n"},
		{"stale", old,
			"# data 2026-11-23T14:05:20Z · 3 of 8 GPUs free · on 2 of 4 hosts · 1 host down\n" +
				"# STALE: the newest reading is 2 h 0 min old (more than 15 min)\n# host "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := writeTwin(t, "free.txt", tt.rep)
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("free.txt starts\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	if got := writeTwin(t, "index.txt", old); !strings.Contains(got, "\nSTALE: the newest reading is 2 h 0 min old") ||
		!strings.Contains(got, "data from 2026-11-23 14:05 UTC") {
		t.Errorf("index.txt of old data does not say when it is from and that it is stale:\n%s", got)
	}
}

// hostileFleet is what a broken or hostile fleet sends: escapes, newlines
// and bidi controls in host, user, container and GPU names and errors,
// names of 1 MiB and wide runes, long command lines, a host name with
// blanks; every GPU of host "f…" free.
func hostileFleet() []loaddata.Row {
	huge := strings.Repeat("m", 1<<20)
	gpu := func(host string, i int64, name, user, cmd string) loaddata.Row {
		r := loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: host, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(i), GPUName: name, MemUsedMiB: loaddata.Num(3), MemTotalMiB: loaddata.Num(81559),
			TempC: loaddata.Num(40), GPUUtilPct: loaddata.Num(0), CPUs: loaddata.IntOf(64), Load1: loaddata.Num(1)}
		if user != "" {
			r.MemUsedMiB, r.GPUUtilPct = loaddata.Num(70000), loaddata.Num(99)
			r.PID, r.User, r.Command, r.ProcessMemMiB = loaddata.IntOf(100+i), user, cmd, loaddata.Num(69000)
		}
		return r
	}
	longCmd := "/opt/conda/envs/x/bin/python -u train.py " + strings.Repeat("--flag value ", 5000)
	rows := []loaddata.Row{
		gpu("f\x1b[2J\x1b]0;pwned\x07", 0, "NVIDIA A100\x1b[31m-SXM4", "", ""),
		gpu("f\x1b[2J\x1b]0;pwned\x07", 1, "NVIDIA A100\x1b[31m-SXM4", "ev\x1b]8;;http://x\x07il", longCmd+"\x1b[2J"),
		gpu("lab box\tone", 0, "加速器カード"+strings.Repeat("王", 40), "", ""),
		gpu("lab box\tone", 1, "加速器カード", "山田太郎"+strings.Repeat("王", 40), longCmd),
		gpu("ホスト"+strings.Repeat("長", 60), 0, "H100\u202egnp.exe", "", ""),
		gpu("ホスト"+strings.Repeat("長", 60), 1, "H100", "c1\u009b31m\xc2\x9bx", "y\x9b2J"),
		gpu(huge, 0, huge, "", ""),
		gpu(huge, 1, huge, huge, huge),
		gpu("gpu-with-a-very-long-name-that-goes-on-and-on-and-on.cluster.example.org", 0, "NVIDIA H100 80GB HBM3", "", ""),
		gpu("\x1b\x9b\u202e", 0, "NVIDIA H100 80GB HBM3", "", ""), // nothing left of its name once cleaned
		{Timestamp: "2026-11-23T14:05:00Z", Host: "down\x1b[1A\n", HostStatus: hoststatus.Error, HostError: "bad\x1b[2K\rline" + huge},
		{Timestamp: "2026-11-23T14:05:00Z", Host: "lost\x1b[1A", HostStatus: hoststatus.OK, GPUBusID: "0:1\x1b[2J, 2",
			GPUError: "lost\n[0] H100 | 30°C 0% | 0/80 GB | free\x1b[0m"},
	}
	for i := range rows {
		rows[i].GPUUUID = fmt.Sprintf("GPU-%d\x1b[2J", i)
	}
	return rows
}

// Nothing a host sends reaches the files as a control or an escape, and
// no line of index.txt is wider than 100 columns (wide runes count two);
// free.txt keeps its columns: its host and GPU cells have no blanks.
func TestTextTwinHostile(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HostNames["gpu-with-a-very-long-name-that-goes-on-and-on-and-on.cluster.example.org"] = "long name\x1b[2J with blanks"
	rep, _, err := buildReport(cfg, rowsOf(hostileFleet()), testNow, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range textFiles {
		t.Run(f.name, func(t *testing.T) {
			out := writeTwin(t, f.name, rep)
			checkText(t, out, textOptions{Width: textFileWidth})
			if strings.ContainsAny(out, "\x1b\x07\r\u009b\u202e\t") {
				t.Errorf("a control reached %s:\n%q", f.name, out)
			}
			if len(out) > 16<<10 {
				t.Errorf("%s is %d bytes: a 1 MiB name was not cut", f.name, len(out))
			}
		})
	}
	free := writeTwin(t, "free.txt", rep)
	var hosts []string
	for _, line := range strings.Split(strings.TrimSpace(free), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("line %q has %d fields, want 6 or more", line, len(f))
		}
		hosts = append(hosts, f[0])
		if n := strings.Count(f[2], ",") + 1; n != strings.Count(f[3], ",")+1 || strconv.Itoa(n) != f[1] {
			t.Errorf("line %q: %s free, %q GPUs and %q free GiB do not agree", line, f[1], f[2], f[3])
		}
	}
	want := []string{"f_[2J_]0;pwned", "lab_box_one", "ホスト" + strings.Repeat("長", hostNameMax/2-4) + "…",
		strings.Repeat("m", hostNameMax-1) + "…", "gpu-with-a-very-long-name-that-…", "?"} // the host fetch logs in to, not its display name
	if diff := cmp.Diff(want, hosts); diff != "" {
		t.Errorf("free.txt's hosts (-want +got):\n%s\n%s", diff, free)
	}
}

// The text twin goes beside the page, and -o moves it with the page; a
// path in the config puts it there; an empty one writes none. Both are
// written with the page, readable by the web server.
func TestTextTwinWhere(t *testing.T) {
	tests := []struct {
		name, ini string
		args      []string
		want      map[string]string // file -> its first bytes
		absent    []string
	}{
		{"beside the page", "", nil,
			map[string]string{"www/index.txt": "4 free of 8 GPUs", "www/free.txt": "# data "}, nil},
		{"-o moves them", "", []string{"-o", "moved/page.html"},
			map[string]string{"moved/index.txt": "4 free", "moved/free.txt": "# data "}, []string{"www/index.txt", "www/free.txt"}},
		{"paths of their own", "text = txt/table.txt\nfree_text = txt/gpus.txt\n", nil,
			map[string]string{"txt/table.txt": "4 free", "txt/gpus.txt": "# data "}, []string{"www/index.txt", "www/free.txt"}},
		{"empty: not written", "text =\nfree_text =\n", nil,
			map[string]string{"www/index.html": "<!DOCTYPE html>"}, []string{"www/index.txt", "www/free.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"www", "moved", "txt"} {
				os.Mkdir(filepath.Join(dir, d), 0o755)
			}
			ini := filepath.Join(dir, "config.ini")
			os.WriteFile(ini, []byte("[render]\nhtml = www/index.html\n"+tt.ini+"[history]\ndb =\n"), 0o644)
			args := []string{"-c", ini, "-i", "testdata/load_data.csv"}
			for i := 0; i < len(tt.args); i += 2 {
				args = append(args, tt.args[i], filepath.Join(dir, tt.args[i+1]))
			}
			if _, stderr, err := renderMainAt(t, func() time.Time { return testNow }, args...); err != nil {
				t.Fatalf("render: %v\n%s", err, stderr)
			}
			for rel, start := range tt.want {
				path := filepath.Join(dir, rel)
				b, err := os.ReadFile(path)
				if err != nil || !strings.HasPrefix(string(b), start) {
					t.Errorf("%s: %v, starts %.40q, want %q", rel, err, b, start)
					continue
				}
				if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
					t.Errorf("%s has mode %v, want 0644", rel, st.Mode().Perm())
				}
			}
			for _, rel := range tt.absent {
				if _, err := os.Stat(filepath.Join(dir, rel)); !os.IsNotExist(err) {
					t.Errorf("%s was written (%v)", rel, err)
				}
			}
		})
	}
}

// BenchmarkTextTwin: index.txt and free.txt of 1,000 hosts × 8 GPUs, each
// alone, with its size and CPU time.
func BenchmarkTextTwin(b *testing.B) {
	rep := testReport(b, fleetRows(1000, 8), "")
	for _, f := range textFiles {
		b.Run(f.name, func(b *testing.B) {
			var buf bytes.Buffer
			cpu := cpuTime(b)
			for b.Loop() {
				buf.Reset()
				if err := f.write(&buf, rep); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(buf.Len()), "bytes")
		})
	}
}
