package render

import (
	"context"
	"fmt"
	"io"
	"mime/quotedprintable"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// reportFleetAt is the CSV of one host at time at: GPU 0 busy under
// rptalice, GPU 1 nearly idle under rptbob, each drawing 200 W.
func reportFleetAt(t testing.TB, path string, at time.Time) {
	t.Helper()
	ts := at.UTC().Format(loaddata.TimeFormat)
	var rows []loaddata.Row
	for i, holder := range []struct {
		user string
		util float64
	}{{"rptalice", 90}, {"rptbob", 5}} {
		rows = append(rows, loaddata.Row{Timestamp: ts, Host: "gpu01", HostStatus: hoststatus.OK, GPUIndex: loaddata.IntOf(int64(i)),
			GPUUUID: fmt.Sprintf("GPU-rpt-%d", i), GPUName: "NVIDIA H100 80GB HBM3", GPUBusID: fmt.Sprintf("00000000:%02d:00.0", i+1),
			GPUUtilPct: loaddata.Num(holder.util), MemUtilPct: loaddata.Num(holder.util), MemUsedMiB: loaddata.Num(40000),
			MemTotalMiB: loaddata.Num(81559), PowerW: loaddata.Num(200), PowerLimitW: loaddata.Num(700),
			PID: loaddata.IntOf(int64(4000 + i)), User: holder.user, Command: "python train.py", ProcessMemMiB: loaddata.Num(40000)})
	}
	if err := loaddata.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
}

// mailText is a message's body, quoted-printable decoded.
func mailText(t testing.TB, box string) (subject, body string) {
	t.Helper()
	msgs := readMails(t, box)
	if len(msgs) != 1 {
		t.Fatalf("%s holds %d messages %q, want one report", box, len(msgs), subjects(msgs))
	}
	text, err := io.ReadAll(quotedprintable.NewReader(msgs[0].Body))
	if err != nil {
		t.Fatal(err)
	}
	return msgs[0].Header.Get("Subject"), string(text)
}

// Two hours of cron in the middle of last month recorded, then on the
// 1st render -report month twice through exim into local mailboxes: each
// user and the team lead get one monthly report, with the figures the
// accounting gives; the second run sends nothing.
func TestReportThroughExim(t *testing.T) {
	needExim(t)
	boxes := map[string]string{}
	for _, u := range []string{"rptalice", "rptbob", "rptlead"} {
		boxes[u] = mailbox(t, u)
	}
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte(`[render]
html = index.html
[notify]
mail_users = @localhost
sendmail = /usr/sbin/sendmail -t -i -odi
[accounting]
currency = EUR
co2_g_per_kwh = 400
low_efficiency_pct = 30
[gpu_hour_prices]
default = 2
[teams]
ml = rptalice, rptbob
[team_leads]
ml = rptlead
`), 0o644)
	csv := filepath.Join(dir, "load_data.csv")
	now := time.Now().In(time.Local)
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.Local) // of this month
	lastMonth := first.AddDate(0, -1, 0)
	start := lastMonth.AddDate(0, 0, 14).Add(10 * time.Hour)
	for m := 0; m <= 120; m += 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		reportFleetAt(t, csv, at)
		if _, stderr, err := renderMainAt(t, func() time.Time { return at.Add(20 * time.Second) }, "-c", ini, "-i", csv); err != nil {
			t.Fatalf("minute %d: %v\n%s", m, err, stderr)
		}
	}
	for u := range boxes {
		mailbox(t, u) // rptbob was told of his idle GPU: only the reports from here
	}
	morning := func() time.Time { return first.Add(7 * time.Hour) }
	for run, want := range []string{"render: 3 sent, 0 already sent, 0 skipped, 0 failed\n", "render: 0 sent, 3 already sent, 0 skipped, 0 failed\n"} {
		stdout, stderr, err := renderMainAt(t, morning, "-c", ini, "-report", "month")
		if err != nil || !strings.HasSuffix(stdout, want) {
			t.Fatalf("run %d: %v\n%s%s", run+1, err, stdout, stderr)
		}
	}
	users := reportFigures(t, ini, lastMonth, first)
	for _, u := range []string{"rptalice", "rptbob"} {
		subject, body := mailText(t, boxes[u])
		line := users[u]
		if line.GPUHours < 1.5 || subject != "[gpumon] Your GPU use, "+lastMonth.Format("January 2006") {
			t.Errorf("%s: %q, %.2f GPU-hours", u, subject, line.GPUHours)
		}
		for _, w := range []string{fmt.Sprintf("  GPU-hours:            %.1f\n", line.GPUHours),
			fmt.Sprintf("efficiency %.0f %%", line.Efficiency*100), fmt.Sprintf("  cost:                 %.2f EUR\n", line.Cost),
			fmt.Sprintf("  CO2:                  %.2f kg\n", line.CO2Kg)} {
			if !strings.Contains(body, w) {
				t.Errorf("%s's report lacks %q:\n%s", u, w, body)
			}
		}
		if low := strings.Contains(body, "Your GPUs did work"); low != (u == "rptbob") {
			t.Errorf("%s's report says low efficiency: %v:\n%s", u, low, body)
		}
	}
	subject, body := mailText(t, boxes["rptlead"])
	total := users["rptalice"].GPUHours + users["rptbob"].GPUHours
	if !strings.Contains(subject, "Team ml's GPU use") || !strings.Contains(body, fmt.Sprintf("  GPU-hours:            %.1f\n", total)) ||
		!strings.Contains(body, "\nrptalice ") || !strings.Contains(body, "\nrptbob ") {
		t.Errorf("the lead's report, %q:\n%s", subject, body)
	}
}

// reportFigures are the accounting's lines per user over [from, to), as
// the history holds them.
func reportFigures(t testing.TB, ini string, from, to time.Time) map[string]accounting.Line {
	t.Helper()
	cfg, err := LoadConfig(ini)
	if err != nil {
		t.Fatal(err)
	}
	store, err := cfg.History.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := store.Ledger(context.Background(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]accounting.Line{}
	for _, line := range accounting.Aggregate(l, accounting.ByUser, &cfg.Accounting) {
		out[line.Key] = line
	}
	return out
}
