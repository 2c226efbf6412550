package render

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/notify"
)

func TestParseReportSpan(t *testing.T) {
	loc := time.FixedZone("CET", 3600)
	at := func(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, loc) }
	for _, tt := range []struct {
		name, span string
		now        time.Time
		from, to   time.Time
		label      string
	}{
		{"month at year end", "month", at(2027, 1, 15, 9), at(2026, 12, 1, 0), at(2027, 1, 1, 0), "December 2026"},
		{"month just after midnight", "month", at(2026, 12, 1, 0).Add(time.Minute), at(2026, 11, 1, 0), at(2026, 12, 1, 0), "November 2026"},
		{"month in UTC late on the last day is the local next month", "month", time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC),
			at(2026, 11, 1, 0), at(2026, 12, 1, 0), "November 2026"},
		{"week on a Wednesday", "week", at(2026, 11, 25, 15), at(2026, 11, 16, 0), at(2026, 11, 23, 0), "the week of 2026-11-16"},
		{"week on a Monday", "week", at(2026, 11, 23, 6), at(2026, 11, 16, 0), at(2026, 11, 23, 0), "the week of 2026-11-16"},
		{"week on a Sunday", "week", at(2026, 11, 29, 23), at(2026, 11, 16, 0), at(2026, 11, 23, 0), "the week of 2026-11-16"},
		{"week across a year", "week", at(2027, 1, 2, 12), at(2026, 12, 21, 0), at(2026, 12, 28, 0), "the week of 2026-12-21"},
		{"30 days", "30d", at(2026, 11, 26, 15), at(2026, 10, 27, 0), at(2026, 11, 26, 0), "2026-10-27 to 2026-11-25"},
		{"one day", "1d", at(2026, 3, 1, 8), at(2026, 2, 28, 0), at(2026, 3, 1, 0), "2026-02-28"},
		{"days as hours", "48h", at(2026, 11, 26, 15), at(2026, 11, 24, 0), at(2026, 11, 26, 0), "2026-11-24 to 2026-11-25"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseReportSpan(tt.span, tt.now, loc)
			if err != nil {
				t.Fatal(err)
			}
			want := mailSpan{From: tt.from, To: tt.to, Label: tt.label}
			if !got.From.Equal(want.From) || !got.To.Equal(want.To) || got.Label != want.Label {
				t.Errorf("-report %s at %s = %s .. %s %q, want %s .. %s %q", tt.span, tt.now,
					got.From, got.To, got.Label, want.From, want.To, want.Label)
			}
		})
	}
}

func TestParseReportSpanErrors(t *testing.T) {
	for _, span := range []string{"12h", "1d12h", "0d", "-7d", "fortnight", "Month", "99999d"} {
		t.Run(span, func(t *testing.T) {
			_, err := parseReportSpan(span, time.Now(), time.UTC)
			if _, ok := errors.AsType[*cli.UsageError](err); !ok {
				t.Errorf("-report %s: %v, want a usage error", span, err)
			}
		})
	}
}

// -report goes alone, as -usage and -health do.
func TestReportFlagAlone(t *testing.T) {
	for _, args := range [][]string{{"-report", "month", "-usage", "7d"}, {"-report", "week", "-health", "30d"},
		{"-report", "week", "-import", "a.csv"}, {"-report", "week", "-text"}} {
		_, err := parseFlags(args, &strings.Builder{})
		if _, ok := errors.AsType[*cli.UsageError](err); !ok {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

var reportSpanFixture = mailSpan{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Label: "November 2026"}

// reportLedger: carol on H100s at 12 % efficiency, 40 % of her power
// known, 3 h on others' reservations, in seven Slurm jobs; dave on an
// A100 at 80 %.
func reportLedger() *history.Ledger {
	carol := history.Figures{GPUSeconds: 100 * 3600, EffSeconds: 12 * 3600, EffKnownSeconds: 100 * 3600,
		EnergyJ: 20 * 3.6e6, EnergyKnownSeconds: 40 * 3600, IdleHeldSeconds: 50 * 3600, UnreservedSeconds: 3 * 3600}
	dave := history.Figures{GPUSeconds: 10 * 3600, EffSeconds: 8 * 3600, EffKnownSeconds: 10 * 3600,
		EnergyJ: 4 * 3.6e6, EnergyKnownSeconds: 10 * 3600}
	l := &history.Ledger{From: reportSpanFixture.From, To: reportSpanFixture.To, Users: []history.LedgerRow{
		{User: "carol", Account: "vis", Model: ledgerH100, Figures: carol},
		{User: "dave", Model: ledgerA100, Figures: dave},
		{User: history.IdleJobUser, Model: ledgerH100, Figures: dave},
	}}
	for i := 1; i <= 7; i++ {
		l.Jobs = append(l.Jobs, history.LedgerRow{User: "carol", Account: "vis", Job: fmt.Sprint(200 + i), Model: ledgerH100,
			Figures: history.Figures{GPUSeconds: float64(i) * 3600, EffSeconds: 360, EffKnownSeconds: float64(i) * 3600}})
	}
	return l
}

func TestUserReportText(t *testing.T) {
	noPrice := &accounting.Config{LowEfficiencyPct: 30}
	priced := ledgerConfig()
	for _, tt := range []struct {
		name          string
		user          string
		c             *accounting.Config
		want, notWant []string
	}{
		{"low efficiency, no prices", "carol", noPrice,
			[]string{"Your GPUs did work 12 % of the time you held them", "release GPUs you are not using",
				"  GPU-hours:            100.0\n", "  effective GPU-hours:  12.0 (efficiency 12 %)\n",
				"  idle-held GPU-hours:  50.0\n", "  energy:               20.00 kWh (power known for 40 % of the GPU-hours)\n",
				"Your top jobs by GPU-hours:"},
			[]string{"cost", "CO2", "EUR"}},
		{"prices and CO2", "dave", priced,
			[]string{"  energy:               4.00 kWh\n", "  cost:                 2.00 EUR (leaves out 10.0 GPU-hours on models without a price)\n",
				"  CO2:                  1.60 kg\n"},
			[]string{"did work", "top jobs", "reserved for someone else"}},
		{"unreserved hours", "carol", priced,
			[]string{"For 3.0 GPU-hours your processes used GPUs reserved for someone else (unreserved use).",
				"  cost:                 210.00 EUR\n", "Your top jobs by cost:"},
			nil},
		{"five top jobs, the largest first", "carol", priced,
			[]string{"  job 207 (account vis): 7.0 GPU-hours, efficiency 1 %, 14.00 EUR\n" +
				"  job 206 (account vis): 6.0 GPU-hours, efficiency 2 %, 12.00 EUR\n" +
				"  job 205 (account vis): 5.0 GPU-hours, efficiency 2 %, 10.00 EUR\n" +
				"  job 204 (account vis): 4.0 GPU-hours, efficiency 2 %, 8.00 EUR\n" +
				"  job 203 (account vis): 3.0 GPU-hours, efficiency 3 %, 6.00 EUR\n"},
			[]string{"job 202", "job 201"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mails := reportMails(reportLedger(), tt.c, notify.Targets{UserDomain: "example.org"}, reportSpanFixture)
			var body string
			for _, m := range mails {
				if m.Recipient == "user "+tt.user {
					body = m.Body
				}
			}
			if body == "" {
				t.Fatalf("no report for %s in %+v", tt.user, mails)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("report lacks %q:\n%s", w, body)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(body, w) {
					t.Errorf("report has %q:\n%s", w, body)
				}
			}
		})
	}
}

// Who gets what: users with GPU-hours but not idlemon's job; a user who
// cannot be mailed is skipped with why; leads by name or address; a team
// without GPU-hours or without a lead gets nothing.
func TestReportRecipients(t *testing.T) {
	l := reportLedger()
	odd := history.Figures{GPUSeconds: 3600}
	l.Users = append(l.Users, history.LedgerRow{User: "root", Figures: odd}, history.LedgerRow{User: "40012", Figures: odd},
		history.LedgerRow{User: "eve\r\nBcc: x@evil.example", Figures: odd})
	c := ledgerConfig()
	c.Teams = []accounting.Team{{Name: "vision", Members: []string{"carol", "dave"}, Lead: "lead@lab.example"},
		{Name: "nlp", Members: []string{"root"}, Lead: "carol"}, {Name: "idle", Members: []string{"nobody"}, Lead: "x@lab.example"},
		{Name: "leaderless", Members: []string{"40012"}}}
	var got []string
	for _, m := range reportMails(l, c, notify.Targets{UserDomain: "example.org"}, reportSpanFixture) {
		got = append(got, fmt.Sprintf("%q -> %q %s | %s", m.Recipient, m.To, m.Skip, m.Subject))
	}
	want := []string{
		`"user carol" -> "carol@example.org"  | [gpumon] Your GPU use, November 2026`,
		`"user dave" -> "dave@example.org"  | [gpumon] Your GPU use, November 2026`,
		`"user 40012" -> "" ps printed a uid, not a name | [gpumon] Your GPU use, November 2026`,
		`"user eve\r\nBcc: x@evil.example" -> "" the name is not a mail local part | [gpumon] Your GPU use, November 2026`,
		`"user root" -> "" root is not a person | [gpumon] Your GPU use, November 2026`,
		`"team vision" -> "lead@lab.example"  | [gpumon] Team vision's GPU use, November 2026`,
		`"team nlp" -> "carol@example.org"  | [gpumon] Team nlp's GPU use, November 2026`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mails (-want +got):\n%s", diff)
	}
	noDomain := reportMails(l, c, notify.Targets{}, reportSpanFixture)
	if noDomain[0].Skip != "[notify] mail_users is not set" {
		t.Errorf("without mail_users, carol's mail: %+v", noDomain[0])
	}
}

// The team's report: its totals, then a line per member.
func TestTeamReportText(t *testing.T) {
	c := ledgerConfig()
	c.Teams = []accounting.Team{{Name: "vision", Members: []string{"carol", "dave"}, Lead: "lead@lab.example"}}
	mails := reportMails(reportLedger(), c, notify.Targets{UserDomain: "example.org"}, reportSpanFixture)
	body := mails[len(mails)-1].Body
	for _, w := range []string{
		"the use of the GPUs by team vision from Sun 2026-11-01 00:00 to Tue 2026-12-01 00:00 (UTC):",
		"  GPU-hours:            110.0\n", "  effective GPU-hours:  20.0 (efficiency 18 %)\n",
		"For 3.0 GPU-hours its members used GPUs reserved for someone else",
		"\nPer member:\n", "\ncarol ", "\ndave ",
	} {
		if !strings.Contains(body, w) {
			t.Errorf("team report lacks %q:\n%s", w, body)
		}
	}
}

// fakeMail is a mail target that refuses the addresses in refuse.
type fakeMail struct {
	refuse   map[string]bool
	accepted []string
}

func (f *fakeMail) Send(_ context.Context, it notify.Item) error {
	msg, err := mail.ReadMessage(strings.NewReader(string(it.Body)))
	if err != nil {
		return err
	}
	to := msg.Header.Get("To")
	if f.refuse[to] {
		return errors.New("sendmail failed (exit status 75): try again later")
	}
	f.accepted = append(f.accepted, to+" "+msg.Header.Get("Subject"))
	return nil
}

// A span's reports go once: a second run sends nothing, and a run after
// a failure sends only what failed; another span is sent anew.
func TestReportOncePerSpan(t *testing.T) {
	cfg := DefaultConfig()
	cfg.History.DB = filepath.Join(t.TempDir(), "history.db")
	store, err := cfg.History.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	log, err := openSentLog(ctx, store.DB())
	if err != nil {
		t.Fatal(err)
	}
	c := ledgerConfig()
	c.Teams = []accounting.Team{{Name: "vision", Members: []string{"carol", "dave"}, Lead: "lead@lab.example"}}
	l := reportLedger()
	l.Users = append(l.Users, history.LedgerRow{User: "root", Figures: history.Figures{GPUSeconds: 3600}})
	mails := reportMails(l, c, notify.Targets{UserDomain: "example.org"}, reportSpanFixture)
	target := &fakeMail{refuse: map[string]bool{"dave@example.org": true}}
	run := func(span mailSpan) (string, error) {
		t.Helper()
		var out, errOut strings.Builder
		send := func(ctx context.Context, m reportMail) error {
			return target.Send(ctx, reportItem(m, notify.Targets{}, "", time.Now()))
		}
		err := sendReports(ctx, log, span, mails, send, time.Now(), &out, &errOut)
		if !strings.Contains(errOut.String(), "render: user root is not mailed a report: root is not a person\n") {
			t.Errorf("stderr lacks why root is skipped:\n%s", errOut.String())
		}
		return out.String(), err
	}
	out, err := run(reportSpanFixture)
	if err == nil || !strings.Contains(out, "failed        user dave <dave@example.org>: sendmail failed") ||
		!strings.HasSuffix(out, "render: 2 sent, 0 already sent, 1 skipped, 1 failed\n") {
		t.Errorf("first run, dave's mail refused: %v\n%s", err, out)
	}
	delete(target.refuse, "dave@example.org")
	for i, want := range []string{
		"already sent  user carol\nsent          user dave <dave@example.org>\nskipped       user root: root is not a person\n" +
			"already sent  team vision\nrender: 1 sent, 2 already sent, 1 skipped, 0 failed\n",
		"already sent  user carol\nalready sent  user dave\nskipped       user root: root is not a person\n" +
			"already sent  team vision\nrender: 0 sent, 3 already sent, 1 skipped, 0 failed\n",
	} {
		out, err := run(reportSpanFixture)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, out); diff != "" {
			t.Errorf("run %d (-want +got):\n%s", i+2, diff)
		}
	}
	next := reportSpanFixture
	next.From, next.To = next.To, next.To.AddDate(0, 1, 0)
	if out, err := run(next); err != nil || !strings.HasSuffix(out, "render: 3 sent, 0 already sent, 1 skipped, 0 failed\n") {
		t.Errorf("the next span: %v\n%s", err, out)
	}
	wantSent := []string{
		"carol@example.org [gpumon] Your GPU use, November 2026", "lead@lab.example [gpumon] Team vision's GPU use, November 2026",
		"dave@example.org [gpumon] Your GPU use, November 2026",
		"carol@example.org [gpumon] Your GPU use, November 2026", "dave@example.org [gpumon] Your GPU use, November 2026",
		"lead@lab.example [gpumon] Team vision's GPU use, November 2026",
	}
	if diff := cmp.Diff(wantSent, target.accepted); diff != "" {
		t.Errorf("mails accepted (-want +got):\n%s", diff)
	}
}

// A name from the config or a host adds no header: a team's name with a
// line break stays in the subject.
func TestReportHeaders(t *testing.T) {
	c := ledgerConfig()
	c.Teams = []accounting.Team{{Name: "ml\r\nBcc: spy@evil.example", Members: []string{"carol"}, Lead: "lead@lab.example"}}
	mails := reportMails(reportLedger(), c, notify.Targets{UserDomain: "example.org"}, reportSpanFixture)
	it := reportItem(mails[len(mails)-1], notify.Targets{MailFrom: "gpumon@lab.example"}, "gpu-admin", time.Now())
	msg, err := mail.ReadMessage(strings.NewReader(string(it.Body)))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get("Bcc") != "" || msg.Header.Get("To") != "lead@lab.example" || strings.Contains(string(it.Body), "\nBcc") {
		t.Errorf("the team's mail:\n%s", it.Body)
	}
	if got := msg.Header.Get("Subject"); got != "[gpumon] Team ml Bcc: spy@evil.example's GPU use, November 2026" {
		t.Errorf("subject %q", got)
	}
}

// render -report's errors: a bad span is a usage error; a history where
// nobody can be mailed is an error with the fix; an empty span says so.
func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n[teams]\nml = rptalice\n[team_leads]\nml = rptlead\n"), 0o644)
	csv := filepath.Join(dir, "load_data.csv")
	now := time.Now().In(time.Local)
	midnight := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.Local)
	for m := 0; m <= 70; m += 5 {
		at := midnight.Add(-3*time.Hour + time.Duration(m)*time.Minute)
		reportFleetAt(t, csv, at)
		if _, stderr, err := renderMainAt(t, func() time.Time { return at }, "-c", ini, "-i", csv); err != nil {
			t.Fatalf("minute %d: %v\n%s", m, err, stderr)
		}
	}
	morning := func() time.Time { return midnight.Add(7 * time.Hour) }
	_, stderr, err := renderMainAt(t, morning, "-c", ini, "-report", "12h")
	if _, ok := errors.AsType[*cli.UsageError](err); !ok {
		t.Errorf("-report 12h: %v, want a usage error\n%s", err, stderr)
	}
	_, stderr, err = renderMainAt(t, morning, "-c", ini, "-report", "1d")
	if err == nil || !strings.Contains(stderr, "no report can be mailed: [notify] mail_users is not set") {
		t.Errorf("-report 1d without mail_users: %v\n%s", err, stderr)
	}
	stdout, stderr, err := renderMainAt(t, func() time.Time { return midnight.AddDate(0, 0, 3) }, "-c", ini, "-report", "1d")
	if err != nil || !strings.HasPrefix(stdout, "render: no GPU-hours from ") {
		t.Errorf("-report 1d of a day without GPU-hours: %v\n%s%s", err, stdout, stderr)
	}
}

// Two -report runs at once (cron's and an admin's) send each mail once:
// a run claims a mail before sending it. Run B here runs whole while run
// A is handing its first mail over. A claim of a run that stopped goes
// stale and is taken over.
func TestReportTwoRunsAtOnce(t *testing.T) {
	db := filepath.Join(t.TempDir(), "history.db")
	ctx := context.Background()
	logOf := func() sentLog {
		t.Helper()
		store, err := history.Open(db, history.Params{}, 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		log, err := openSentLog(ctx, store.DB())
		if err != nil {
			t.Fatal(err)
		}
		return log
	}
	logA, logB := logOf(), logOf()
	c := ledgerConfig()
	c.Teams = []accounting.Team{{Name: "vision", Members: []string{"carol", "dave"}, Lead: "lead@lab.example"}}
	mails := reportMails(reportLedger(), c, notify.Targets{UserDomain: "example.org"}, reportSpanFixture)
	target := &fakeMail{}
	sendTo := func(ctx context.Context, m reportMail) error {
		return target.Send(ctx, reportItem(m, notify.Targets{}, "", time.Now()))
	}
	var outB strings.Builder
	runB := sync.OnceFunc(func() {
		if err := sendReports(ctx, logB, reportSpanFixture, mails, sendTo, time.Now(), &outB, io.Discard); err != nil {
			t.Errorf("run B: %v", err)
		}
	})
	sendA := func(ctx context.Context, m reportMail) error {
		runB()
		return sendTo(ctx, m)
	}
	var outA strings.Builder
	if err := sendReports(ctx, logA, reportSpanFixture, mails, sendA, time.Now(), &outA, io.Discard); err != nil {
		t.Fatal(err)
	}
	if len(target.accepted) != len(mails) {
		t.Errorf("%d mails for %d reports:\n%s\nrun A:\n%s\nrun B:\n%s",
			len(target.accepted), len(mails), strings.Join(target.accepted, "\n"), outA.String(), outB.String())
	}
	if !strings.Contains(outB.String(), "already sent  user carol (by another render -report)") {
		t.Errorf("run B does not say run A has carol's mail:\n%s", outB.String())
	}

	next := reportSpanFixture
	next.From, next.To = next.To, next.To.AddDate(0, 1, 0)
	for i, m := range mails {
		at := time.Now() // a run sending now
		if i == 0 {
			at = at.Add(-2 * claimStale) // a run that stopped
		}
		if ok, err := logA.claim(ctx, next, m, at); !ok || err != nil {
			t.Fatalf("claim %s: %v, %v", m.Recipient, ok, err)
		}
	}
	target.accepted = nil
	var out strings.Builder
	if err := sendReports(ctx, logB, next, mails, sendTo, time.Now(), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if len(target.accepted) != 1 || !strings.HasPrefix(out.String(), "sent          "+clean(mails[0].Recipient, 80)) {
		t.Errorf("with a stale claim and fresh ones, sent %q:\n%s", target.accepted, out.String())
	}
}
