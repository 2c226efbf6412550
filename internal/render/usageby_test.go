package render

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/testenv"
)

const (
	ledgerH100 = "NVIDIA H100 80GB HBM3"
	ledgerA100 = "NVIDIA A100-SXM4-80GB" // no price in ledgerConfig
)

// ledgerFixture is a hand-made week: alice on an H100 and an A100 (MIG:
// utilization unknown, power half known), bob sharing an H100 with her,
// two users whose names attack a terminal and a spreadsheet, idlemon's
// job; two Slurm jobs; two hosts.
func ledgerFixture() *history.Ledger {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	fig := func(gpuS, effS, effKnown, energyJ, energyKnown, idleS float64) history.Figures {
		return history.Figures{GPUSeconds: gpuS, EffSeconds: effS, EffKnownSeconds: effKnown,
			EnergyJ: energyJ, EnergyKnownSeconds: energyKnown, IdleHeldSeconds: idleS}
	}
	alice := fig(7200, 3600, 7200, 3.6e6, 7200, 1800)
	alice.MemSeconds, alice.MemKnownSeconds, alice.UnreservedSeconds = 1800, 7200, 900
	return &history.Ledger{
		From: t0, To: t0.Add(7 * 24 * time.Hour),
		Users: []history.LedgerRow{
			{User: "alice", Account: "proj1", Model: ledgerH100, Figures: alice},
			{User: "alice", Account: "proj2", Model: ledgerA100, Figures: fig(3600, 0, 0, 1.8e6, 1800, 0)},
			{User: "bob", Account: "proj1", Model: ledgerH100, Figures: fig(1800, 900, 1800, 0.9e6, 1800, 0)},
			{User: "=HYPERLINK(\"http://x\")", Account: "-1+1", Model: ledgerH100, Figures: fig(360, 36, 360, 0, 0, 0)},
			{User: "mal\x1b[31mlory", Model: ledgerH100, Figures: fig(720, 720, 720, 0.72e6, 720, 0)},
			{User: history.IdleJobUser, Model: ledgerH100, Figures: fig(3600, 3600, 3600, 3.6e6, 3600, 0)},
		},
		Jobs: []history.LedgerRow{
			{User: "alice", Account: "proj1", Job: "101", Model: ledgerH100, Figures: fig(3600, 1800, 3600, 1.8e6, 3600, 0)},
			{User: "alice", Account: "proj1", Job: "101", Model: ledgerA100, Figures: fig(3600, 0, 0, 0, 0, 0)},
			{User: "=cmd|' /C calc'!A0", Account: "@evil", Job: "102", Model: ledgerH100, Figures: fig(1800, 900, 1800, 0.9e6, 1800, 0)},
		},
		Hosts: []history.HostRow{
			{Host: "gpu1", Model: ledgerH100, GPUSeconds: 8 * 3600, HeldSeconds: 4 * 3600, EffSeconds: 7200, EffKnownSeconds: 8 * 3600,
				EnergyJ: 3.6e7, EnergyKnownSeconds: 8 * 3600, UnheldEnergyJ: 1.44e7},
			{Host: "gpu2\x07", Model: ledgerA100, GPUSeconds: 7200, HeldSeconds: 3600},
		},
	}
}

// ledgerConfig: 2 EUR per H100-hour, none for other models, 0.5 EUR per
// kWh, 400 g of CO2 per kWh; alice in vision, bob in nlp.
func ledgerConfig() *accounting.Config {
	return &accounting.Config{
		Currency: "EUR", KWhPrice: 0.5, HasKWhPrice: true, CO2GPerKWh: 400, HasCO2: true, LowEfficiencyPct: 30,
		GPUHourPrices: []accounting.ModelPrice{{Model: "h100", PerHour: 2}},
		Teams:         []accounting.Team{{Name: "vision", Members: []string{"alice"}}, {Name: "nlp", Members: []string{"bob"}}},
	}
}

// render -usage -by in each format, golden files (go test -update rewrites
// them): nothing from a host runs in a terminal or a spreadsheet.
func TestUsageBy(t *testing.T) {
	for _, by := range []accounting.By{accounting.ByUser, accounting.ByTeam, accounting.ByJob, accounting.ByHost} {
		for _, format := range []string{"text", "csv", "json"} {
			t.Run(string(by)+"/"+format, func(t *testing.T) {
				l, c := ledgerFixture(), ledgerConfig()
				var b bytes.Buffer
				if err := writeLedger(&b, l, accounting.Aggregate(l, by, c), by, c, format); err != nil {
					t.Fatal(err)
				}
				if bytes.ContainsAny(b.Bytes(), "\x1b\x07") {
					t.Errorf("a terminal escape in the output:\n%q", b.String())
				}
				ext := map[string]string{"text": "txt", "csv": "csv", "json": "json"}[format]
				testenv.Golden(t, filepath.Join("testdata", fmt.Sprintf("usage-by-%s.%s.golden", by, ext)), b.Bytes())
			})
		}
	}
}

// No cell of the CSV starts a formula, and each line has the header's
// cells.
func TestUsageByCSVSafe(t *testing.T) {
	for _, by := range accounting.Bys {
		l, c := ledgerFixture(), ledgerConfig()
		var b bytes.Buffer
		if err := ledgerCSV(&b, accounting.Aggregate(l, by, c), by, c); err != nil {
			t.Fatal(err)
		}
		records, err := csv.NewReader(&b).ReadAll()
		if err != nil {
			t.Fatalf("by %s: %v", by, err)
		}
		for _, rec := range records[1:] {
			for i, cell := range rec {
				if cell != "" && strings.ContainsRune("=+-@", rune(cell[0])) {
					t.Errorf("by %s: %s %q starts a formula", by, records[0][i], cell)
				}
			}
		}
	}
}

// Without prices or CO2 the reports have no such columns; an efficiency
// that is unknown is null in JSON.
func TestUsageByUnpriced(t *testing.T) {
	l, c := ledgerFixture(), &accounting.Config{LowEfficiencyPct: 30}
	var text, js bytes.Buffer
	lines := accounting.Aggregate(l, accounting.ByAccount, c)
	if err := ledgerText(&text, l, lines, accounting.ByAccount, c); err != nil {
		t.Fatal(err)
	}
	if s := text.String(); strings.Contains(s, "cost") || strings.Contains(s, "CO2") || strings.Contains(s, "*") {
		t.Errorf("a cost or CO2 without prices:\n%s", s)
	}
	if err := ledgerJSON(&js, l, lines, accounting.ByAccount, c); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Currency string
		Lines    []map[string]any
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, line := range got.Lines {
		if _, ok := line["cost"]; ok {
			t.Errorf("a cost without prices: %v", line)
		}
		if eff, ok := line["efficiency"]; !ok || line["key"] == "proj2" && eff != nil {
			t.Errorf("%v: efficiency %v; want it there, null for proj2 (MIG only)", line["key"], eff)
		}
	}
}

// An empty span prints headers only, and JSON's lines are [], not null.
func TestUsageByEmpty(t *testing.T) {
	l, c := &history.Ledger{}, ledgerConfig()
	var b bytes.Buffer
	if err := writeLedger(&b, l, accounting.Aggregate(l, accounting.ByTeam, c), accounting.ByTeam, c, "json"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"lines": []`) {
		t.Errorf("json of no lines:\n%s", b.String())
	}
}

func TestUsageByFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-by", "team"}, "-by goes with -usage"},
		{[]string{"-health", "7d", "-by", "team"}, "-by goes with -usage"},
		{[]string{"-usage", "7d", "-by", "group"}, `-by "group": want user, team, job, account, model, host`},
		{[]string{"-report", "month", "-format", "json"}, "-format goes with -usage or -health"},
		{[]string{"-format", "csv"}, "-format goes with -usage or -health"},
		{[]string{"-text", "-format", "text"}, "-format goes with -usage or -health"},
	} {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			_, err := parseFlags(tt.args, &bytes.Buffer{})
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v (%T); want a usage error with %q", err, err, tt.want)
			}
		})
	}
	o, err := parseFlags([]string{"-usage", "7d", "-by", "account", "-format", "csv"}, &bytes.Buffer{})
	if err != nil || o.by != accounting.ByAccount {
		t.Errorf("-usage 7d -by account: %+v, %v", o, err)
	}
	if o, err := parseFlags([]string{"-usage", "7d"}, &bytes.Buffer{}); err != nil || o.by != "" {
		t.Errorf("-usage without -by: %+v, %v; want the lines per user of before", o, err)
	}
	if _, err := parseFlags([]string{"-h"}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// A report of a history another account owns is refused by history; the
// hint names that account, in a form a shell takes as it is.
func TestOtherOwner(t *testing.T) {
	db := filepath.Join(t.TempDir(), "history.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	me := os.Geteuid()
	want := "'#" + strconv.Itoa(me) + "'"
	if u, err := user.LookupId(strconv.Itoa(me)); err == nil && shellSafe(u.Username) {
		want = u.Username
	}
	for _, tt := range []struct {
		name, path string
		euid       int
		want       string
	}{
		{"own file", db, me, ""},
		{"another account's", db, me + 1, want},
		{"no file", db + ".nope", me + 1, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := otherOwner(tt.path, tt.euid); got != tt.want {
				t.Errorf("otherOwner(%s, %d) = %q; want %q", tt.path, tt.euid, got, tt.want)
			}
		})
	}
	for name, want := range map[string]bool{"gpumon": true, "svc.gpu-1": true, "": false, "-oQ": false, "a b": false, "x;rm": false, "é": false} {
		if got := shellSafe(name); got != want {
			t.Errorf("shellSafe(%q) = %v; want %v", name, got, want)
		}
	}
}
