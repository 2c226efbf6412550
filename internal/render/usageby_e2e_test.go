package render

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// accountingCSV is a load_data.csv at t: alice's job 11 (account vision) on an
// H100 at 90 % drawing 500 W, bob on an A100 at 40 % whose power reading
// is a driver's 2^64 (not known), and a free H100 at 60 W.
func accountingCSV(t testing.TB, dir string, at time.Time) string {
	t.Helper()
	num := func(v float64) loaddata.Number { return loaddata.Number{Value: v, Valid: true} }
	gpu := func(host string, i int, name string, util, watts, limit float64) loaddata.Row {
		return loaddata.Row{Timestamp: at.Format(loaddata.TimeFormat), Host: host, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.Int{Value: int64(i), Valid: true}, GPUName: name, GPUUUID: fmt.Sprintf("GPU-%s-%d", host, i),
			GPUUtilPct: num(util), MemUsedMiB: num(4000), MemTotalMiB: num(81559), PowerW: num(watts), PowerLimitW: num(limit)}
	}
	alice := gpu("gpu1", 0, "NVIDIA H100 80GB HBM3", 90, 500, 700)
	alice.PID, alice.User, alice.Command, alice.ProcessMemMiB = loaddata.Int{Value: 100, Valid: true}, "alice", "python train.py", num(4000)
	alice.SlurmJob, alice.SlurmAccount = "11", "vision"
	bob := gpu("gpu1", 1, "NVIDIA A100-SXM4-80GB", 40, 18446744073709551615, 400)
	bob.PID, bob.User, bob.Command, bob.ProcessMemMiB = loaddata.Int{Value: 200, Valid: true}, "bob", "python eval.py", num(2000)
	path := filepath.Join(dir, at.Format("150405")+".csv")
	if err := loaddata.WriteFile(path, []loaddata.Row{alice, bob, gpu("gpu2", 0, "NVIDIA H100 80GB HBM3", 0, 60, 700)}); err != nil {
		t.Fatal(err)
	}
	return path
}

// cron's render every 5 minutes from 13:00 to 14:00, then `render -usage
// 1h -by team` at 14:30: the hour's 11 spans of 5 minutes ending in it,
// priced and split by team as config.ini says, the absurd power not
// counted as energy.
func TestUsageByTeamThroughRender(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte(`[render]
html = index.html
[accounting]
currency = EUR
kwh_price = 0.30
[gpu_hour_prices]
H100 = 2.00
A100 = 1.00
[teams]
vision = alice
nlp = bob
`), 0o644)
	base := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)
	for m := 0; m <= 60; m += 5 {
		at := base.Add(time.Duration(m) * time.Minute)
		clock := func() time.Time { return at.Add(10 * time.Second) }
		if _, stderr, err := renderMainAt(t, clock, "-c", ini, "-i", accountingCSV(t, dir, at)); err != nil {
			t.Fatalf("render at %s: %v\n%s", at.Format("15:04"), err, stderr)
		}
	}
	clock := func() time.Time { return base.Add(90 * time.Minute) }
	stdout, stderr, err := renderMainAt(t, clock, "-c", ini, "-usage", "1h", "-by", "team", "-format", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var got struct {
		From, To, By, Currency string
		Lines                  []struct {
			Key         string
			GPUHours    float64 `json:"gpu_hours"`
			EffHours    float64 `json:"effective_gpu_hours"`
			KWh         float64 `json:"kwh"`
			KWhCoverage float64 `json:"kwh_coverage"`
			Cost        *float64
		}
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	h := 3300.0 / 3600 // 11 spans of 300 s
	cost := func(v float64) *float64 { return &v }
	want := []struct {
		Key         string
		GPUHours    float64 `json:"gpu_hours"`
		EffHours    float64 `json:"effective_gpu_hours"`
		KWh         float64 `json:"kwh"`
		KWhCoverage float64 `json:"kwh_coverage"`
		Cost        *float64
	}{
		{"vision", h, 0.9 * h, 500 * 3300 / 3.6e6, 1, cost(2*h + 0.30*500*3300/3.6e6)},
		{"nlp", h, 0.4 * h, 0, 0, cost(1 * h)},
	}
	if got.From != "2026-11-23T13:00:00Z" || got.To != "2026-11-23T14:00:00Z" || got.By != "team" || got.Currency != "EUR" {
		t.Errorf("span %s to %s by %s in %s; want 13:00 to 14:00 by team in EUR", got.From, got.To, got.By, got.Currency)
	}
	if diff := cmp.Diff(want, got.Lines, cmpopts.EquateApprox(0, 0.001)); diff != "" {
		t.Errorf("-usage 1h -by team (-want +got):\n%s\n%s", diff, stdout)
	}
	// by host and by job, each from its own part of the ledger
	for _, tt := range []struct {
		by   string
		want map[string]float64 // GPU-hours by key
	}{
		{"host", map[string]float64{"gpu1": 2 * h, "gpu2": h}}, // every GPU while the host answered
		{"job", map[string]float64{"11": h}},
	} {
		out, stderr, err := renderMainAt(t, clock, "-c", ini, "-usage", "1h", "-by", tt.by, "-format", "json")
		var doc struct {
			Lines []struct {
				Key      string
				GPUHours float64 `json:"gpu_hours"`
			}
		}
		if err != nil || json.Unmarshal([]byte(out), &doc) != nil {
			t.Fatalf("-by %s: %v\n%s%s", tt.by, err, out, stderr)
		}
		got := map[string]float64{}
		for _, l := range doc.Lines {
			got[l.Key] = l.GPUHours
		}
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 0.001)); diff != "" {
			t.Errorf("-usage 1h -by %s (-want +got):\n%s", tt.by, diff)
		}
	}
	// the text names the teams and says the energy is partly known
	text, _, err := renderMainAt(t, clock, "-c", ini, "-usage", "1h", "-by", "team")
	if err != nil || !strings.Contains(text, "vision") || !strings.Contains(text, "nlp") || !strings.Contains(text, "EUR") {
		t.Errorf("-usage 1h -by team: %v\n%s", err, text)
	}
}

// A [teams] unix group the name service does not give (it is down, or
// answers "no such group") does not stop the page: render makes it with a
// warning naming the file and group, and exits 1 so that cron mails it;
// only a report by team, whose figures would be wrong, refuses to run.
func TestTeamGroupUnread(t *testing.T) {
	fakeGroupLookup(t, map[string][]string{"vision-lab": {"alice"}})
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n[teams]\nvision = @vision-lab\nnlp = @nlp-lab, bob\n"), 0o644)
	base := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)
	var stderr string
	var err error
	for m := 0; m <= 60; m += 5 {
		at := base.Add(time.Duration(m) * time.Minute)
		_, stderr, err = renderMainAt(t, func() time.Time { return at }, "-c", ini, "-i", accountingCSV(t, dir, at))
	}
	const problem = "config.ini: [teams] @nlp-lab: no such group: its users are in no team this run"
	if err == nil || !strings.Contains(stderr, problem) {
		t.Errorf("render: %v\n%s\nwant an error naming %q", err, stderr, problem)
	}
	page, rerr := os.ReadFile(filepath.Join(dir, "index.html"))
	if rerr != nil || !strings.Contains(string(page), "@nlp-lab") {
		t.Errorf("the page was not made, or does not warn: %v", rerr)
	}
	clock := func() time.Time { return base.Add(90 * time.Minute) }
	if _, stderr, err := renderMainAt(t, clock, "-c", ini, "-usage", "1h", "-by", "team"); err == nil || !strings.Contains(stderr, problem) {
		t.Errorf("-usage -by team with a team unread: %v\n%s", err, stderr)
	}
	if out, stderr, err := renderMainAt(t, clock, "-c", ini, "-usage", "1h", "-by", "user"); err != nil || !strings.Contains(out, "bob") {
		t.Errorf("-usage -by user: %v\n%s%s", err, out, stderr)
	}
}
