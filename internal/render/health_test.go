package render

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/testenv"
)

// healthT0 is the start of healthHistory's snapshots.
var healthT0 = time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)

// healthHistory records 200 minutes of snapshots, one every 5, into a
// history at db: gpu01's GPU 3 with a remap pending from minute 10 that
// fails at 40, both repaired at 90; its GPU 10 slowed down by hardware
// three times; gpu02's lost GPU from minute 100 on, still lost at the end;
// a host whose name, model and detail are hostile (a terminal escape, a
// spreadsheet formula, a line break) with an XID warning once.
func healthHistory(t testing.TB, db string) {
	t.Helper()
	store, err := history.Open(db, history.DefaultParams, 14*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for m := 0; m <= 200; m += 5 {
		var r3, r10, lost health.Readings
		r3.RemapPending = m >= 10 && m < 90
		r3.RemapFailure = m >= 40 && m < 90
		if m >= 20 && m < 30 || m >= 60 && m < 75 || m == 150 {
			r10.ClockEvents = "sw_power_cap " + health.HWSlowdown
		}
		gpu02 := []history.GPU{snapGPU("0", "NVIDIA H200", health.Readings{})}
		if m >= 100 {
			lost.Lost = "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error"
			gpu02 = append(gpu02, snapGPU("00000000:3B:00.0", "", lost))
		}
		evil := health.Readings{}
		if m == 120 {
			evil.XIDs = []int{92}
		}
		evilGPU := snapGPU("0", "=HYPERLINK(\"x\")", evil)
		if len(evilGPU.Findings) > 0 {
			evilGPU.Findings[0].Detail += "\nforged line\x1b[31m"
		}
		snap := &history.Snapshot{Time: healthT0.Add(time.Duration(m) * time.Minute), Hosts: []history.Host{
			{Name: "gpu01", Up: true, GPUs: []history.GPU{snapGPU("3", "NVIDIA H100 80GB HBM3", r3), snapGPU("10", "NVIDIA H100 80GB HBM3", r10)}},
			{Name: "gpu02", Up: true, GPUs: gpu02},
			{Name: "gpu03\x1b[2J", Up: true, GPUs: []history.GPU{evilGPU}},
		}}
		if _, err := store.Record(context.Background(), snap); err != nil {
			t.Fatal(err)
		}
	}
}

// snapGPU is a GPU whose findings are what the default policy makes of r.
func snapGPU(id, model string, r health.Readings) history.GPU {
	g := history.GPU{ID: id, Name: model, State: history.Free, HasUtil: true, MemTotalMiB: 81559}
	if h := health.Assess(r, health.DefaultPolicy()); len(h.Findings) > 0 {
		g.Findings, g.UUID = h.Findings, "GPU-"+strings.ReplaceAll(id, ":", "")
	}
	return g
}

// render -health in each format, golden files (go test -update rewrites
// them): the GPUs with problems, each condition's episodes, time, first
// and last seen and latest detail; nothing from a host runs in a terminal
// or a spreadsheet.
func TestHealthReport(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "history.db")
	healthHistory(t, db)
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[history]\ndb = "+db+"\n"), 0o644)
	clock := func() time.Time { return healthT0.Add(205 * time.Minute) }
	for _, tt := range []struct{ format, golden string }{
		{"text", "health.txt.golden"},
		{"csv", "health.csv.golden"},
		{"json", "health.json.golden"},
	} {
		t.Run(tt.format, func(t *testing.T) {
			out, stderr, err := renderMainAt(t, clock, "-c", ini, "-health", "30d", "-format", tt.format)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			if strings.ContainsAny(out, "\x1b") {
				t.Errorf("a terminal escape in the output:\n%q", out)
			}
			testenv.Golden(t, filepath.Join("testdata", tt.golden), []byte(out))
		})
	}
}

// A span counts only the time inside it; one with no episode says so.
func TestHealthReportSpan(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "history.db")
	healthHistory(t, db)
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[history]\ndb = "+db+"\n"), 0o644)
	tests := []struct {
		name     string
		now, arg string
		want     []string
	}{
		{"the last hour: GPU 10's last slowdown, 55 minutes of the lost GPU", "205m", "1h", []string{
			"gpu01,10,NVIDIA H100 80GB HBM3,GPU-10,ok,hw_slowdown,degraded,1,0.083,",
			"gpu02,00000000:3B:00.0,,GPU-000000003B00.0,failed,lost,failed,1,0.917,"}},
		{"an hour past the end: the lost GPU's time ends at its last sighting", "260m", "1h",
			[]string{"gpu02,00000000:3B:00.0,,GPU-000000003B00.0,failed,lost,failed,1,0.000,"}},
		{"minutes 50 to 70: GPU 3's two conditions and GPU 10's second slowdown", "70m", "20m", []string{
			"gpu01,3,NVIDIA H100 80GB HBM3,GPU-3,ok,remap_failure,failed,1,0.333,",
			"gpu01,3,NVIDIA H100 80GB HBM3,GPU-3,ok,remap_pending,degraded,1,0.333,",
			"gpu01,10,NVIDIA H100 80GB HBM3,GPU-10,ok,hw_slowdown,degraded,1,0.167,"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := time.ParseDuration(tt.now)
			out, stderr, err := renderMainAt(t, func() time.Time { return healthT0.Add(d) }, "-c", ini, "-health", tt.arg, "-format", "csv")
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")[1:]
			if len(lines) != len(tt.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(tt.want), out)
			}
			for i, want := range tt.want {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("line %d:\n%s\nwant it to start with\n%s", i+1, lines[i], want)
				}
			}
		})
	}
	out, _, err := renderMainAt(t, func() time.Time { return healthT0.Add(-time.Hour) }, "-c", ini, "-health", "7d")
	if want := "no GPU health problem recorded from 2026-10-26 07:00 to 2026-11-02 07:00 UTC\n"; err != nil || out != want {
		t.Errorf("a span before the history: %q, %v; want %q", out, err, want)
	}
}

// -health's mistakes are usage errors or hinted ones: a span that is no
// span, no history, another mode besides.
func TestHealthReportErrors(t *testing.T) {
	dir := t.TempDir()
	none := filepath.Join(dir, "none.ini")
	os.WriteFile(none, []byte("[history]\ndb = "+filepath.Join(dir, "missing.db")+"\n"), 0o644)
	off := filepath.Join(dir, "off.ini")
	os.WriteFile(off, []byte("[history]\ndb =\n"), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-health", "soon"}, `-health "soon": want a span such as 24h, 30d or 1d12h`},
		{[]string{"-health", "-3d"}, `-health "-3d": want a span`},
		{[]string{"-c", none, "-health", "30d"}, "no history at " + filepath.Join(dir, "missing.db")},
		{[]string{"-c", off, "-health", "30d"}, "history is off ([history] db is empty)"},
		{[]string{"-health", "30d", "-usage", "7d"}, "use one of them"},
		{[]string{"-health", "30d", "-format", "xml"}, `-format "xml": want text, csv or json`},
	} {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			_, _, err := renderMain(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// healthCSVAt writes the CSV of minute m of TestHealthThroughRender: gpu01's
// GPU 1 with a row remap pending from minute 10, failed from 30, both
// repaired at 60; gpu02's GPU 0 with uncorrectable ECC errors all along.
func healthCSVAt(t testing.TB, path string, at time.Time, m int) {
	t.Helper()
	ts := at.UTC().Format(loaddata.TimeFormat)
	gpu := func(host string, idx int64) loaddata.Row {
		return loaddata.Row{Timestamp: ts, Host: host, HostStatus: hoststatus.OK, GPUIndex: loaddata.IntOf(idx),
			GPUUUID: fmt.Sprintf("GPU-%s-%d", host, idx), GPUName: "NVIDIA H100 80GB HBM3", GPUBusID: fmt.Sprintf("00000000:%02d:00.0", idx+1),
			GPUUtilPct: loaddata.Num(0), MemUtilPct: loaddata.Num(0), MemUsedMiB: loaddata.Num(1), MemTotalMiB: loaddata.Num(81559),
			ECCMode: "enabled", ECCUncorrected: loaddata.Num(0), RetiredPagesPending: loaddata.TriOf(false),
			RemappedRowsPending: loaddata.TriOf(false), RemappedRowsFailure: loaddata.TriOf(false), ClockEvents: "none"}
	}
	sick := gpu("gpu01", 1)
	sick.RemappedRowsPending = loaddata.TriOf(m >= 10 && m < 60)
	sick.RemappedRowsFailure = loaddata.TriOf(m >= 30 && m < 60)
	ecc := gpu("gpu02", 0)
	ecc.ECCUncorrected = loaddata.Num(3)
	if err := loaddata.WriteFile(path, []loaddata.Row{gpu("gpu01", 0), sick, ecc}); err != nil {
		t.Fatal(err)
	}
}

// fetch's CSV with health columns, rendered every 5 minutes with a real
// webhook receiver and mail delivered by exim: render's [health]
// classification, the history's episodes and the notifications agree, and
// -health lists what happened.
func TestHealthThroughRender(t *testing.T) {
	needExim(t)
	adminBox := mailbox(t, "hltadmin2")
	hook := &webhookLog{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte(fmt.Sprintf(`[render]
html = index.html
[notify]
webhook = %s/hook
mail_to = hltadmin2@localhost
sendmail = /usr/sbin/sendmail -t -i -odi
`, srv.URL)), 0o644)
	csv := filepath.Join(dir, "load_data.csv")
	start := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	var clock func() time.Time
	for m := 0; m <= 70; m += 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		clock = func() time.Time { return at.Add(20 * time.Second) }
		healthCSVAt(t, csv, at, m)
		if _, stderr, err := renderMainAt(t, clock, "-c", ini, "-i", csv); err != nil {
			t.Fatalf("minute %d: %v\n%s", m, err, stderr)
		}
	}
	// gpu01's GPU 1, degraded for 20 minutes (under degraded_after's
	// hour), is told once it fails; gpu02's, degraded all along, after an
	// hour
	wantHook := []string{
		"gpu_failed firing gpu01/1",
		"gpu_failed resolved gpu01/1", "gpu_degraded firing gpu02/0",
	}
	if diff := cmp.Diff(wantHook, hook.events()); diff != "" {
		t.Errorf("webhook received (-want +got):\n%s", diff)
	}
	wantAdmin := []string{
		"[gpumon] GPU 1 on gpu01 failed",
		"[gpumon] 1 GPU no longer failed, 1 GPU degraded",
	}
	if diff := cmp.Diff(wantAdmin, subjects(readMails(t, adminBox))); diff != "" {
		t.Errorf("admin's mailbox (-want +got):\n%s", diff)
	}
	out, stderr, err := renderMainAt(t, clock, "-c", ini, "-health", "1d", "-format", "csv")
	if err != nil {
		t.Fatalf("-health: %v\n%s", err, stderr)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Split(line, ",")
		got = append(got, strings.Join(append(f[:2:2], f[4:9]...), ","))
	}
	want := []string{
		"gpu01,1,ok,remap_failure,failed,1,0.500",
		"gpu01,1,ok,remap_pending,degraded,1,0.833",
		"gpu02,0,degraded,ecc_uncorrected,degraded,1,1.167",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-health (host, gpu, state, condition, severity, episodes, hours; -want +got):\n%s\n%s", diff, out)
	}
}
