package render

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpumon/gpumon/internal/cli"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/testenv"
)

// The fixed clock of the golden files: 5 minutes after the fixture's data.
var testNow = time.Date(2026, 11, 23, 14, 10, 0, 0, time.UTC)

// testReport is the report Main makes of rows (and of the reservations
// file resvFile, if any), at testNow, with times in UTC.
func testReport(t testing.TB, rows []loaddata.Row, resvFile string) *Report {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HostNames["mig01"] = "MIG box"
	cfg.GPUNames["nvidia geforce rtx 2080 super"] = "2080S"
	cfg.Reservations = resvFile
	rep, _, err := buildReport(cfg, rowsOf(rows), testNow, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	rep.linkFiles(pathsOf(cfg))
	return rep
}

// rowsOf hands rows to a report as a CSV's would be.
func rowsOf(rows []loaddata.Row) Rows {
	return func(add func(*loaddata.Row)) (int, error) {
		for i := range rows {
			add(&rows[i])
		}
		return len(rows), nil
	}
}

func readRows(t testing.TB, path string) []loaddata.Row {
	t.Helper()
	rows, err := loaddata.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestGolden renders three fixtures: load_data.csv, as an older fetch
// wrote it (without the Slurm and container columns, nor the health ones),
// attrib.csv, whose processes run in Slurm jobs, Docker containers and
// Kubernetes pods (root in a container named by its container, a user's
// own container, a job squeue did not name), and health.csv: a GPU of
// each health (ok, a pending remap, a fatal XID with a process on it, a
// hardware slowdown on a GPU shared by a worker and an idle holder,
// uncorrected ECC, a lost GPU), a host whose kernel log is unreadable and
// one of an old driver without the health fields; and vendors.csv, a lab
// of both vendors: an H100 host, an MI300X host (a GPU shared by two
// users, a partition without utilization, one with uncorrected ECC), two
// Radeon workstations (one named by an older rocm-smi's chip name) and a
// host with both (its AMD GPU numbered after its NVIDIA ones).
func TestGolden(t *testing.T) {
	rep := testReport(t, readRows(t, "testdata/load_data.csv"), "testdata/reservations.json")
	attrib := testReport(t, readRows(t, "testdata/attrib.csv"), "")
	sick := testReport(t, readRows(t, "testdata/health.csv"), "")
	vendors := testReport(t, readRows(t, "testdata/vendors.csv"), "")
	for _, o := range []struct {
		name  string
		write func(w *bytes.Buffer) error
	}{
		{"status.json.golden", func(w *bytes.Buffer) error { return writeJSON(w, rep) }},
		{"metrics.prom.golden", func(w *bytes.Buffer) error { return writeProm(w, rep) }},
		{"table.txt.golden", func(w *bytes.Buffer) error { return writeText(w, rep, false) }},
		{"table-color.txt.golden", func(w *bytes.Buffer) error { return writeText(w, rep, true) }},
		{"status-attrib.json.golden", func(w *bytes.Buffer) error { return writeJSON(w, attrib) }},
		{"table-attrib.txt.golden", func(w *bytes.Buffer) error { return writeText(w, attrib, false) }},
		{"status-health.json.golden", func(w *bytes.Buffer) error { return writeJSON(w, sick) }},
		{"metrics-health.prom.golden", func(w *bytes.Buffer) error { return writeProm(w, sick) }},
		{"table-health.txt.golden", func(w *bytes.Buffer) error { return writeText(w, sick, false) }},
		{"table-health-free.txt.golden", func(w *bytes.Buffer) error {
			return writeTextWith(w, sick, textOptions{Free: true})
		}},
		{"status-vendors.json.golden", func(w *bytes.Buffer) error { return writeJSON(w, vendors) }},
		{"metrics-vendors.prom.golden", func(w *bytes.Buffer) error { return writeProm(w, vendors) }},
		{"table-vendors.txt.golden", func(w *bytes.Buffer) error { return writeText(w, vendors, false) }},
	} {
		t.Run(o.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := o.write(&b); err != nil {
				t.Fatal(err)
			}
			testenv.Golden(t, filepath.Join("testdata", o.name), b.Bytes())
		})
	}
}

// The DOM the browser tests rely on, checked at the HTML level.
func TestPageStructure(t *testing.T) {
	rep := testReport(t, readRows(t, "testdata/load_data.csv"), "testdata/reservations.json")
	var b bytes.Buffer
	if err := HTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	// each cell's host is its card's
	tags := regexp.MustCompile(`<section class=host data-h=[\w-]{8} data-host=([\w-]+)>|<li class=(?:gpu|"gpu w") data-state=(\w+)(?: data-gpu=([\w:.]+))? tabindex=0>`).FindAllStringSubmatch(page, -1)
	var got []string
	host := ""
	for _, c := range tags {
		if c[1] != "" {
			host = c[1]
			continue
		}
		got = append(got, host+"/"+c[3]+"="+c[2])
	}
	want := []string{
		"gpu01/0=free", "gpu01/1=busy", "gpu01/2=reserved", "gpu01/3=free",
		"ws01/0=free", "ws01/1=busy",
		"gpu03/=failed", // the down host's one row
		"mig01/0=busy", "mig01/0000:9a:00.0=failed",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPU cells (-want +got):\n%s", diff)
	}
	for _, s := range []string{
		`<p id="summary"><b>3 free</b> of 8 GPUs`,
		`H100 80GB HBM3: 2 free of 6`, // the lost GPU counts under its host's model
		`<p class=u><span class=tag>idle job</span><aside>`,
		`<p class=why>no complete answer in 20s<p>`, // a down host's reason, on its card
		`<p class=why>GPU is lost<aside>`,           // a lost GPU's, in its cell
		`<span class="down">1 host down</span>`,
		`<p id="stale" role="alert" hidden>`,
		`<table id="users" tabindex="0">`,
		`data-h=`, // each card's hash, by which the script swaps the cards that changed
		`<section class=host data-h=`,
		` data-host=gpu01>`,
		`<h2>MIG box <small>mig01 · 2× NVIDIA H100 80GB HBM3</small></h2><p class=hs>64 CPUs · load 3.5 · RAM 117/503G` + "\n<ul>",
		`<meta http-equiv="refresh" content="60">`,
		`<link rel="icon" href="data:,">`,
		`<meta name="viewport"`,
		// who holds a GPU, on the cell: the biggest holder first
		`<p class=u><b>alice, bob</b> 60G<aside>`,
		`<p class=u><b>carol: ICML deadline</b><aside>`, // for whom it is reserved
		`<p class=u>no process visible<aside>`,
		// MIG: why there is no utilization
		`<p style=--m:14%>11/80G<span class=mig>no util (MIG)</span>`,
		`<p class=n>utilization not reported under MIG</p>`,
		// one time format: the zone on every time, durations as "26 h 3 min"
		`reserved by carol until 2026-11-30 18:00 UTC: ICML deadline`,
		`reserved by erin until 2026-11-25 00:00 UTC`,
		`<p>reserved by frank: whole host` + "\n</ul>",
		`idle-time job running`,
		`GPU is lost; reboot the system to recover this GPU`,
		`no complete answer in 20s`,
		// user, pid, memory, elapsed, command; the program by base name
		`<tr><td>alice<td>4101<td>39G<td>26 h 3 min<td>python -u train.py --config`,
		`data <span id="age">4 min</span> old`, // the newest reading, 14:05:20, at 14:10
	} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	if strings.Contains(page, "dave") {
		t.Error("a reservation that ended is shown")
	}
	// nothing is fetched: no src=, no external href, no @import or url()
	// but the plots' patterns, which are in the page (url(#id))
	for _, re := range []string{`src=`, `href="(https?:)?//`, `@import`, `url\([^#]`} {
		if regexp.MustCompile(re).MatchString(page) {
			t.Errorf("page fetches something: %s", re)
		}
	}

	// stale: older than stale_after, the banner shows (no hidden attribute)
	rep.Now = testNow.Add(time.Hour)
	b.Reset()
	HTML(&b, rep)
	if !strings.Contains(b.String(), `<p id="stale" role="alert">⚠ Stale data: the newest reading is <span class="age">1 h 4 min</span> old`) {
		t.Errorf("no stale banner an hour later")
	}
}

// Everything a host or the reservations file says is text, never markup.
func TestXSS(t *testing.T) {
	evil := []string{`<script>alert(1)</script>`, `"><img src=x onerror=alert(1)>`, `</style><h1>x`, `'--></script><svg onload=alert(1)>`}
	var rows []loaddata.Row
	for i, e := range evil {
		rows = append(rows, loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: "h" + e, HostStatus: hoststatus.OK,
			HostError: e, GPUIndex: loaddata.IntOf(int64(i)), GPUName: e, GPUUUID: e, GPUBusID: e,
			MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(8000), PID: loaddata.IntOf(1), User: e, Command: e})
		rows = append(rows, loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: "down" + e, HostStatus: hoststatus.Error, HostError: e})
		rows = append(rows, loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: "lost" + e, HostStatus: hoststatus.OK,
			GPUBusID: "0:1", GPUError: e})
	}
	dir := t.TempDir()
	resv := filepath.Join(dir, "r.json")
	var rj bytes.Buffer
	rj.WriteString("{")
	for i, e := range evil {
		q, _ := json.Marshal(e)
		if i > 0 {
			rj.WriteString(",")
		}
		rj.WriteString(`"h` + string(q[1:len(q)-1]) + `": [{"name": ` + string(q) + `, "comment": ` + string(q) + `}]`)
	}
	rj.WriteString(`, "bad": [{"date": "` + strings.ReplaceAll(evil[0], `"`, `\"`) + `"}]}`)
	os.WriteFile(resv, rj.Bytes(), 0o644)
	rep := testReport(t, rows, resv)
	rep.Config.Title = evil[0]
	var b bytes.Buffer
	if err := HTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, e := range evil {
		if strings.Contains(page, e) {
			t.Errorf("page holds %q unescaped", e)
		}
	}
	for _, bad := range []string{"<img", "<h1>x", "<svg"} {
		if strings.Contains(page, bad) {
			t.Errorf("page holds %q", bad)
		}
	}
	if n := strings.Count(page, "<script"); n != 1 {
		t.Errorf("%d <script> tags, want only the page's own", n)
	}
	if n := strings.Count(page, "</style>"); n != 1 {
		t.Errorf("%d </style>, want 1", n)
	}
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the escaped text is not on the page")
	}
	// the text table keeps escape sequences off the terminal
	rows[0].Command = "x\x1b]0;pwned\x07\x1b[2J"
	b.Reset()
	writeText(&b, testReport(t, rows, ""), false)
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Errorf("control characters reach the terminal: %q", b.String())
	}
}

// promtool is Prometheus's own checker; CI installs it (Debian's prometheus).
func TestPromtool(t *testing.T) {
	promtool := testenv.Promtool(t)
	rows := readRows(t, "testdata/load_data.csv")
	// label values that need escaping
	rows = append(rows, loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: `we"ird\host` + "\n", HostStatus: hoststatus.OK,
		GPUIndex: loaddata.IntOf(0), GPUName: `A "quoted" \ name`, MemUsedMiB: loaddata.Num(10), MemTotalMiB: loaddata.Num(100),
		PID: loaddata.IntOf(9), User: `us"er\`, Command: "x"})
	for _, detail := range []string{promGPU, promHost, promFleet} {
		var b bytes.Buffer
		rep := testReport(t, rows, "testdata/reservations.json")
		rep.Config.PromDetail = detail
		if err := writeProm(&b, rep); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = &b
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("prom_detail = %s: promtool check metrics: %v\n%s", detail, err, out)
		}
	}
}

// run runs the command in dir and returns its error and stderr.
func run(t testing.TB, dir string, args ...string) (error, string) {
	t.Helper()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	var stdout, stderr bytes.Buffer
	err := Main(context.Background(), args, &stdout, &stderr)
	if err != nil {
		cli.Print("render", err, &stderr) // as the command prints it
	}
	return err, stderr.String()
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMainWritesAtomically(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/load_data.csv", filepath.Join(dir, "load_data.csv"))
	if err, stderr := run(t, dir); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		want := os.FileMode(0o644) // nginx must read it
		if strings.HasPrefix(e.Name(), "history.db") {
			want = 0o600 // the history is for render alone
		}
		if info, _ := e.Info(); e.Name() != "load_data.csv" && info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", e.Name(), info.Mode(), want)
		}
	}
	// no config: the history in the current folder (dir); WAL's
	// files are gone once the database is closed
	if diff := cmp.Diff([]string{"free.txt", "history.db", "index.html", "index.txt", "load_data.csv", "metrics.prom", "page-state.json", "status.json"}, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	var st status
	data, _ := os.ReadFile(filepath.Join(dir, "status.json"))
	if err := json.Unmarshal(data, &st); err != nil || st.Version != StatusVersion || st.Summary.GPUs != 8 {
		t.Errorf("status.json: %v %+v", err, st.Summary)
	}
}

// A CSV that is missing, empty or broken writes nothing: the last good page
// stays, and the error names the line.
func TestBadCSVWritesNothing(t *testing.T) {
	var head bytes.Buffer
	if err := loaddata.Encode(&head, nil); err != nil {
		t.Fatal(err)
	}
	header := head.String()
	good, _ := os.ReadFile("testdata/load_data.csv")
	tests := []struct {
		name, csv, want string
	}{
		{"missing", "", "open load_data.csv: no such file or directory"},
		{"empty", "-", "load_data.csv: the file is empty"},
		{"header only", header, "load_data.csv: no rows, only a header"},
		{"not our header", "a,b,c\n1,2,3\n", "load_data.csv: line 1: not a load_data.csv header"},
		{"bad number", string(good) + strings.Replace(strings.SplitN(string(good), "\n", 3)[1], ",3,81559,", ",lots,81559,", 1) + "\n",
			"load_data.csv: line 13 (column mem_used_mib)"},
		{"short line", string(good) + "2026-11-23T14:05:00Z,gpu09,ok\n", "load_data.csv: line 13"},
		{"huge cell", string(good) + strings.Repeat("x", 2<<20) + "\n", "load_data.csv: line 13: a record longer than 1 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			switch tt.csv {
			case "":
			case "-":
				os.WriteFile(filepath.Join(dir, "load_data.csv"), nil, 0o644)
			default:
				os.WriteFile(filepath.Join(dir, "load_data.csv"), []byte(tt.csv), 0o644)
			}
			os.WriteFile(filepath.Join(dir, "index.html"), []byte("the last good page"), 0o644)
			err, _ := run(t, dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v\nwant %q", err, tt.want)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "index.html")); string(got) != "the last good page" {
				t.Errorf("index.html changed")
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.Name() != "index.html" && e.Name() != "load_data.csv" {
					t.Errorf("%s written", e.Name())
				}
			}
		})
	}
}

// A broken reservations file: everything is written, with a warning on the
// page, and the command fails with the position.
func TestBadReservations(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/load_data.csv", filepath.Join(dir, "load_data.csv"))
	os.WriteFile(filepath.Join(dir, "config.ini"), []byte("[render]\nreservations = r.json\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "r.json"), []byte("{\n  \"gpu01\": [\n    {\"name\": \"carol\",}\n  ]\n}\n"), 0o644)
	err, _ := run(t, dir)
	if err == nil || !strings.Contains(err.Error(), "r.json:3:22: invalid character '}'") {
		t.Fatalf("error %v", err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if !strings.Contains(string(page), `<p class="warning" role="alert">⚠ Reservations file r.json:3:22: invalid character`) {
		t.Errorf("no warning on the page")
	}
	for _, f := range []string{"status.json", "metrics.prom"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	os.Remove(filepath.Join(dir, "r.json"))
	err, _ = run(t, dir)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing reservations file: %v", err)
	}
}

func TestTextMode(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/load_data.csv", filepath.Join(dir, "load_data.csv"))
	wd, _ := os.Getwd()
	os.Chdir(dir)
	defer os.Chdir(wd)
	t.Setenv("COLUMNS", "") // not a number: no width limit, as in a pipe
	var stdout, stderr bytes.Buffer
	if err := Main(context.Background(), []string{"-text"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "\x1b[") {
		t.Error("colour when stdout is not a terminal")
	}
	if !regexp.MustCompile(`(?m)^\[0\] H100 80GB HBM3 \| 30°C +0% \| +0/80 GB +\| free$`).MatchString(stdout.String()) {
		t.Errorf("table:\n%s", stdout.String())
	}
	if _, err := os.Stat("index.html"); err == nil {
		t.Error("-text wrote the page")
	}
	stdout.Reset()
	Main(context.Background(), []string{"-text", "-color=always"}, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "\x1b[32mfree\x1b[0m") {
		t.Error("no colour with -color=always")
	}
}

// One process on 8 GPUs of a host is one process in every output: alice
// runs pid 401233 on 8 GPUs of h100-a01 and 4 processes on h200-b01.
func TestUserProcessesCountOnce(t *testing.T) {
	var rows []loaddata.Row
	gpu := func(host string, i int64, pid int64) loaddata.Row {
		return loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: host, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(i), GPUName: "NVIDIA H100 80GB HBM3", MemUsedMiB: loaddata.Num(70000), MemTotalMiB: loaddata.Num(81559),
			PID: loaddata.IntOf(pid), User: "alice", Command: "torchrun train.py", ProcessMemMiB: loaddata.Num(69000)}
	}
	for i := int64(0); i < 8; i++ {
		rows = append(rows, gpu("h100-a01", i, 401233))
	}
	for i := int64(0); i < 4; i++ {
		rows = append(rows, gpu("h200-b01", i, 7000+i))
	}
	rep := testReport(t, rows, "")
	var page, js, prom bytes.Buffer
	if err := HTML(&page, rep); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	if err := writeProm(&prom, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "<tr><td>alice</td><td>12</td><td>809 GiB</td><td>5</td>") {
		t.Errorf("the users table does not show alice with 12 GPUs and 5 processes:\n%s", page.String()[strings.Index(page.String(), `<table id="users" tabindex="0">`):])
	}
	var st status
	if err := json.Unmarshal(js.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Users) != 1 || st.Users[0].Processes != 5 || st.Users[0].GPUs != 12 {
		t.Errorf("status.json users: %+v, want alice with 5 processes on 12 GPUs", st.Users)
	}
	if !strings.Contains(prom.String(), "\ngpumon_user_processes{user=\"alice\"} 5\n") {
		t.Errorf("metrics.prom lacks gpumon_user_processes{user=\"alice\"} 5")
	}
}

// The summary names the 6 biggest models, then the rest together, and its
// numbers add up.
func TestSummaryModelsCapped(t *testing.T) {
	var rows []loaddata.Row
	for m := 0; m < 8; m++ {
		for i := 0; i <= m; i++ {
			rows = append(rows, loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: fmt.Sprintf("h%d", m), HostStatus: hoststatus.OK,
				GPUIndex: loaddata.IntOf(int64(i)), GPUName: fmt.Sprintf("Model %c", 'A'+m), MemUsedMiB: loaddata.Num(0), MemTotalMiB: loaddata.Num(1000)})
		}
	}
	rows = append(rows, loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: "h7", HostStatus: hoststatus.OK,
		GPUBusID: "0000:9a:00.0", GPUError: "GPU is lost; reboot the system to recover this GPU"})
	rep := testReport(t, rows, "")
	var b bytes.Buffer
	if err := HTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := `<b>36 free</b> of 37 GPUs · <span class="model">Model H: 8 free of 9</span> · <span class="model">Model G: 7 free of 7</span> · ` +
		`<span class="model">Model F: 6 free of 6</span> · <span class="model">Model E: 5 free of 5</span> · <span class="model">Model D: 4 free of 4</span> · ` +
		`<span class="model">Model C: 3 free of 3</span> · <span class="model">+2 more: 3 free of 3</span> · 1 failed`
	if !strings.Contains(b.String(), want) {
		t.Errorf("summary:\n%s\nwant:\n%s", regexp.MustCompile(`(?s)<p id="summary">.*?</p>`).FindString(b.String()), want)
	}
	b.Reset()
	writeText(&b, rep, false)
	if !strings.Contains(b.String(), "Model C: 3 free of 3 · +2 more: 3 free of 3 ·") {
		t.Errorf("table summary: %s", strings.SplitN(b.String(), "\n", 2)[0])
	}
}

// statusOf is status.json's content built whole: what JSON streams.
func statusOf(r *Report) *status {
	c := r.Cluster
	s := statusHead(r)
	st := &status{Version: s.Version, Generated: s.Generated, DataTime: s.DataTime, AgeSeconds: s.AgeSeconds,
		Stale: s.Stale, StaleAfterS: s.StaleAfterS, Summary: s.Summary,
		Hosts: make([]statusHost, 0, len(c.Hosts)), Users: statusUsers(c),
		Warnings: append([]string{}, r.Warnings...), States: cluster.States,
		IdleHeld: statusIdleHeld(r.History), History: statusHistory(r.History)}
	st.Users = withHistoryUsers(st.Users, r.History)
	for _, h := range c.Hosts {
		st.Hosts = append(st.Hosts, statusHostOf(h, r.History))
	}
	return st
}

// status.json is written one host at a time; the bytes are encoding/json's
// for the whole Status.
func TestJSONStreamedIsEncodingJSON(t *testing.T) {
	for _, rep := range []*Report{
		testReport(t, readRows(t, "testdata/load_data.csv"), "testdata/reservations.json"),
		testReport(t, fleetRows(30, 8), ""),
		testReport(t, attributedFleetRows(30, 8), ""),
		testReport(t, readRows(t, "testdata/attrib.csv"), ""),
		testReport(t, markupRows(`<"&'>`), ""),
		testReport(t, readRows(t, "testdata/health.csv"), ""),
	} {
		var got, want bytes.Buffer
		if err := writeJSON(&got, rep); err != nil {
			t.Fatal(err)
		}
		if err := json.NewEncoder(&want).Encode(statusOf(rep)); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("streamed status.json differs:\n%s", cmp.Diff(want.String(), got.String()))
		}
	}
}

// Rows whose timestamps do not parse: the page and the table say the time
// is unknown in a sentence that reads, and show the stale warning.
func TestUnknownDataTime(t *testing.T) {
	rows := readRows(t, "testdata/load_data.csv")
	for i := range rows {
		rows[i].Timestamp = "yesterday"
	}
	rep := testReport(t, rows, "")
	var page, text bytes.Buffer
	if err := HTML(&page, rep); err != nil {
		t.Fatal(err)
	}
	if err := writeText(&text, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, out, want string }{
		{"page summary", page.String(), " · data time unknown</p>"},
		{"page banner", page.String(), `<p id="stale" role="alert">⚠ Stale data: no reading has a timestamp that could be read, so the data&#39;s age is unknown (the first that could not: gpu01: &#34;yesterday&#34;).</p>`},
		{"table summary", text.String(), " · data time unknown\n"},
		{"table banner", text.String(), "\nSTALE: no reading has a timestamp that could be read, so the data's age is unknown (the first that could not: gpu01: \"yesterday\")\n"},
	} {
		if !strings.Contains(tt.out, tt.want) {
			t.Errorf("%s: no %q in\n%s", tt.name, tt.want, tt.out)
		}
		if strings.Contains(tt.out, "unknown age") || strings.Contains(tt.out, "unknown old") {
			t.Errorf("%s says %q", tt.name, "unknown age old")
		}
	}
}

// A reservations file full of mistakes is reported in a screenful, in the
// file's order (the first problem first, the count of the rest last), and
// the page says how many more there are.
func TestManyBadReservations(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, "testdata/load_data.csv", filepath.Join(dir, "load_data.csv"))
	os.WriteFile(filepath.Join(dir, "config.ini"), []byte("[render]\nreservations = r.json\n"), 0o644)
	var b strings.Builder
	b.WriteString("{\n")
	for i := 1; i <= 25; i++ {
		fmt.Fprintf(&b, "  \"gpu%02d\": [{\"name\": \"x\", \"date\": \"not a date\"}],\n", i)
	}
	b.WriteString("  \"last\": [{\"name\": \"x\"}]\n}\n")
	os.WriteFile(filepath.Join(dir, "r.json"), []byte(b.String()), 0o644)

	err, stderr := run(t, dir)
	if err == nil {
		t.Fatal("render succeeded with 25 bad dates")
	}
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "render: error: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 21 {
		t.Fatalf("%d errors on stderr, want the first 20 problems and the count of the rest:\n%s", len(lines), stderr)
	}
	if !strings.Contains(lines[0], "r.json:2:") {
		t.Errorf("first line is not the file's first problem: %s", lines[0])
	}
	if want := "and 5 more problems in r.json"; !strings.HasSuffix(lines[20], want) {
		t.Errorf("the last error is %q, want it to end with %q", lines[20], want)
	}
	if !strings.HasSuffix(strings.TrimSpace(stderr), "the file's other reservations are shown") {
		t.Errorf("stderr does not end with the hint:\n%s", stderr)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if !strings.Contains(string(page), "Reservations file r.json: and 5 more problems (render&#39;s error output lists the first ones)") &&
		!strings.Contains(string(page), "Reservations file r.json: and 5 more problems (render's error output lists the first ones)") {
		t.Errorf("the page does not say how many more problems there are")
	}
}

// A load_data.csv written by an older fetch, without the six Slurm and
// container columns (testdata/load_data.csv is one), renders exactly as
// the same rows written today with those columns empty: no job column on
// the page, none of the six keys in status.json (left out when empty),
// nothing new in the terminal.
func TestOlderCSVRenders(t *testing.T) {
	const older = "testdata/load_data.csv"
	header := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.SplitN(string(data), "\n", 2)[0]
	}
	if strings.Contains(header(older), "slurm_job") {
		t.Fatalf("%s has the attribution columns: keep it as an older fetch wrote it", older)
	}
	rows := readRows(t, older)
	current := filepath.Join(t.TempDir(), "load_data.csv")
	if err := loaddata.WriteFile(current, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(header(current), ",slurm_job,slurm_job_name,slurm_partition,slurm_account,container,container_name,pod,") {
		t.Fatalf("today's header lacks the attribution columns: %s", header(current))
	}
	a := testReport(t, readRows(t, older), "testdata/reservations.json")
	b := testReport(t, readRows(t, current), "testdata/reservations.json")
	for _, o := range []struct {
		name  string
		write func(w *bytes.Buffer, r *Report) error
	}{
		{"page", func(w *bytes.Buffer, r *Report) error { return HTML(w, r) }},
		{"status.json", func(w *bytes.Buffer, r *Report) error { return writeJSON(w, r) }},
		{"metrics.prom", func(w *bytes.Buffer, r *Report) error { return writeProm(w, r) }},
		{"text", func(w *bytes.Buffer, r *Report) error { return writeText(w, r, false) }},
	} {
		var got, want bytes.Buffer
		if err := o.write(&got, a); err != nil {
			t.Fatal(err)
		}
		if err := o.write(&want, b); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%s of the older CSV differs (-today's +older):\n%s", o.name, cmp.Diff(want.String(), got.String()))
		}
		if o.name == "page" {
			if strings.Contains(got.String(), "jobs / containers</th>") {
				t.Errorf("the users table of the older CSV has a jobs column")
			}
			rows := 0
			for _, table := range regexp.MustCompile(`<aside>[^\n]*?<table>(.*?)</table>`).FindAllStringSubmatch(got.String(), -1) {
				for _, row := range strings.Split(table[1], "<tr")[1:] {
					rows++
					if n := strings.Count(row, "<td>"); n != 5 {
						t.Errorf("a process row of the older CSV has %d cells, want 5 (no job column): %s", n, row)
					}
				}
			}
			if rows != 6 {
				t.Errorf("%d process rows on the page, want the fixture's 6", rows)
			}
		}
	}
	var js bytes.Buffer
	writeJSON(&js, a)
	procs := statusProcesses(t, js.Bytes())
	for _, p := range procs {
		for _, k := range []string{"slurm_job", "slurm_job_name", "slurm_partition", "container", "container_name", "pod"} {
			if v, ok := p[k]; ok {
				t.Errorf("process %v: %s is %#v, want it left out (empty)", p["pid"], k, v)
			}
		}
	}
	if len(procs) == 0 {
		t.Fatal("no process in status.json")
	}
}

// metrics.prom says nothing of Slurm jobs and containers (docs/render.md
// says why): the same rows without them give the same file.
func TestMetricsHaveNoJobs(t *testing.T) {
	rows := readRows(t, "testdata/attrib.csv")
	bare := slices.Clone(rows)
	for i := range bare {
		r := &bare[i]
		r.SlurmJob, r.SlurmJobName, r.SlurmPartition, r.SlurmAccount, r.Container, r.ContainerName, r.Pod = "", "", "", "", "", "", ""
	}
	var got, want bytes.Buffer
	if err := writeProm(&got, testReport(t, rows, "")); err != nil {
		t.Fatal(err)
	}
	if err := writeProm(&want, testReport(t, bare, "")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.String(), got.String()); diff != "" {
		t.Errorf("metrics.prom changes with the jobs and containers (-without +with):\n%s", diff)
	}
	for _, s := range []string{"1233_5", "llama-7b", "vllm-server", "3f2a9c1e4b7d", "6a3f0a43"} {
		if strings.Contains(got.String(), s) {
			t.Errorf("metrics.prom names %q", s)
		}
	}
}
