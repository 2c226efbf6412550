package render

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/ignore"
	"github.com/gpumon/gpumon/internal/notify"
)

func TestRenderDefaults(t *testing.T) {
	c, err := ParseConfig(strings.NewReader("[common]\nhosts = gpu01\n"), "/etc/gpumon/config.ini")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Path = "/etc/gpumon/config.ini"
	want.Input = "/etc/gpumon/load_data.csv"
	want.HTML = "/etc/gpumon/index.html"
	want.History.DB = "/etc/gpumon/history.db"
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRenderKeys(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(`[common]
hosts = gpu[01-02]
output = /srv/www/load_data.csv

[render]
title = Lab <b>GPUs</b>
html = /srv/www/index.html
json =
prom = /var/lib/node_exporter/gpumon.prom
stale_after = 10m
refresh = 30
free_memory_mib = 512.5
ignore_processes = nvidia-persistenced,
    gnome-shell
reservations = reservations.json
prom_detail = host
text = gpus.txt
free_text =
commands = program
users = hide
pseudonym_key = /var/lib/gpumon/pseudonym.key

[groups]
lab a = gpu[01-02]

[host_names]
gpu01 = GPU 1 (rack A)
"gpu02:2222" = GPU 2

[gpu_names]
NVIDIA H100 80GB HBM3 = H100
Navi 22 [Radeon RX 6700/6700 XT/6750 XT / 6800M/6850M XT] = RX 6700 XT

[history]
db = /var/lib/gpumon/history.db
max_gap = 20m
idle_util_pct = 2.5
idle_after = 1d
keep_days = 30

[notify]
webhook = https://hooks.slack.com/services/T0/B0/secret, http://127.0.0.1:9000/hook,
    https://hooks.slack.com/services/T0/B0/secret
mail_to = gpu-admins@example.org, Ops <ops@example.org>
mail_users = @example.org
mail_from = gpumon <gpumon@example.org>
sendmail = /usr/lib/sendmail -t -i -odi
host_down_after = 30m
remind_after = 2d
commands = yes
page_url = https://gpus.example.org/
`), "/etc/gpumon/config.ini")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Path: "/etc/gpumon/config.ini", Title: "Lab <b>GPUs</b>", Input: "/srv/www/load_data.csv",
		HTML: "/srv/www/index.html", JSON: "", JSONSet: true, Prom: "/var/lib/node_exporter/gpumon.prom", PromSet: true,
		StaleAfter: 10 * time.Minute, Refresh: 30 * time.Second, RefreshSet: true, FreeMemMiB: 512.5,
		Ignore:       []string{"nvidia-smi", "nvidia-persistenced", "nv-hostengine", "dcgm-exporter", "Xorg", "Xwayland", "gnome-shell"},
		Reservations: "/etc/gpumon/reservations.json",
		PromDetail:   promHost,
		Text:         "/etc/gpumon/gpus.txt", TextSet: true, FreeText: "", FreeTextSet: true,
		Commands: CommandsProgram, Users: UsersHide, PseudonymKey: "/var/lib/gpumon/pseudonym.key",
		Health:     health.DefaultPolicy(),
		Accounting: accounting.DefaultConfig(),
		Groups:     []groupRule{{Name: "lab a", Hosts: []string{"gpu01", "gpu02"}}},
		HostNames:  map[string]string{"gpu01": "GPU 1 (rack A)", "gpu02:2222": "GPU 2"},
		GPUNames: map[string]string{"nvidia h100 80gb hbm3": "H100",
			"navi 22 [radeon rx 6700/6700 xt/6750 xt / 6800m/6850m xt]": "RX 6700 XT"},
		History: history.Config{DB: "/var/lib/gpumon/history.db", KeepDays: 30,
			Params: history.Params{MaxGap: 20 * time.Minute, IdleUtilPct: 2.5, IdleAfter: 24 * time.Hour}},
		Notify: notify.Config{
			Targets: notify.Targets{
				Webhooks:   []string{"https://hooks.slack.com/services/T0/B0/secret", "http://127.0.0.1:9000/hook"},
				MailTo:     []string{"gpu-admins@example.org", "ops@example.org"},
				UserDomain: "example.org", MailFrom: "gpumon <gpumon@example.org>",
				Commands: true, PageURL: "https://gpus.example.org/",
			},
			Params:   notify.Params{HostDownAfter: 30 * time.Minute, RemindAfter: 48 * time.Hour, DegradedAfter: time.Hour},
			Sendmail: []string{"/usr/lib/sendmail", "-t", "-i", "-odi"},
		},
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// ignore_processes adds to ignore.Default, the list idlemon uses too; it
// cannot take a default name out.
func TestRenderIgnoreExtendsDefault(t *testing.T) {
	for _, tc := range []struct {
		name, ini string
		want      []string
	}{
		{"no key", "[render]\n", ignore.Default},
		{"empty", "[render]\nignore_processes =\n", ignore.Default},
		{"defaults only", "[render]\nignore_processes = Xorg, nvidia-persistenced\n", ignore.Default},
		{"new names", "[render]\nignore_processes = gnome-shell, Xorg,\n  /opt/viz/bin/viz --serve\n",
			append(slices.Clone(ignore.Default), "gnome-shell", "/opt/viz/bin/viz --serve")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(strings.NewReader(tc.ini), "c.ini")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Ignore, tc.want) {
				t.Errorf("Ignore = %q, want %q", c.Ignore, tc.want)
			}
		})
	}
	// the default config's list is a copy: changing it leaves ignore.Default alone
	c := DefaultConfig()
	c.Ignore[0] = "changed"
	if ignore.Default[0] != "nvidia-smi" {
		t.Errorf("DefaultRender shares ignore.Default: %q", ignore.Default)
	}
}

func TestBadRenderConfig(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"unknown key", "[render]\ntitle = x\nstale = 5\n", "c.ini:3: stale: unknown key in [render]"},
		{"bad stale_after", "[render]\nstale_after = soon\n", `c.ini:2: stale_after: "soon" is not a duration`},
		{"zero stale_after", "[render]\nstale_after = 0\n", `c.ini:2: stale_after: "0" is not a duration`},
		{"bad refresh", "[render]\nrefresh = -1\n", `c.ini:2: refresh: "-1" is not a duration`},
		{"tiny refresh", "[render]\nrefresh = 1ms\n", `c.ini:2: refresh: "1ms" is under a second`},
		{"bad threshold", "\n[render]\nfree_memory_mib = 1 GiB\n", `c.ini:3: free_memory_mib: "1 GiB" is not a number of MiB`},
		{"empty html", "[render]\nhtml =\n", `c.ini:2: html: empty`},
		{"bad commands setting", "[render]\ncommands = yes\n", `c.ini:2: commands: "yes": want show, program or hide`},
		{"bad users setting", "[render]\n\nusers = anonymous\n", `c.ini:3: users: "anonymous": want show or hide`},
		{"empty short name", "[gpu_names]\nNVIDIA H100 =\n", `c.ini:2: nvidia h100: no name after =`},
		{"unknown section", "[rendr]\ntitle = x\n", "c.ini:1: unknown section [rendr]"},
		{"unknown key in common", "[common]\nhost = a\n", "c.ini:2: host: unknown key in [common]"},
		{"webhook not http", "[notify]\nwebhook = ftp://x/y\n", `c.ini:2: webhook: "ftp://x/…": want an http:// or https:// URL`},
		// the URL's path is its secret: never in a message
		{"webhook no host", "[notify]\nwebhook = hooks.slack.com/services/T0/B0/secret\n", `c.ini:2: webhook: "(an unreadable URL)": want an http`},
		{"mail_to not an address", "[notify]\nmail_to = admins at example\n", `c.ini:2: mail_to: "admins at example" is not a mail address`},
		{"mail_users without @", "[notify]\nmail_users = example.org\n", `c.ini:2: mail_users: "example.org": want @ and a mail domain`},
		{"mail_users bad domain", "[notify]\nmail_users = @exa mple.org\n", `c.ini:2: mail_users: "@exa mple.org": want @`},
		{"remind too often", "[notify]\nremind_after = 1m\n", `c.ini:2: remind_after: 1m0s is a reminder every few runs`},
		{"bad host_down_after", "[notify]\nhost_down_after = soon\n", `c.ini:2: host_down_after: "soon" is not a duration`},
		{"bad commands", "[notify]\ncommands = maybe\n", `c.ini:2: commands: "maybe" is not a boolean`},
		{"empty sendmail", "[notify]\nsendmail =\n", `c.ini:2: sendmail: empty`},
		{"notify without history", "[history]\ndb =\n[notify]\nmail_to = a@example.org\n", `c.ini:4: mail_to: notifications come from the history`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(tt.src), "c.ini")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v\nwant %q", err, tt.want)
			}
		})
	}
}

func TestLoadRenderExample(t *testing.T) {
	// the shipped example, whatever [render] keys it shows, must load
	if _, err := LoadConfig("../../config.example.ini"); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "none.ini")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

// fakeGroupLookup makes [teams]' @groups those of table while t runs.
func fakeGroupLookup(t testing.TB, table map[string][]string) {
	t.Helper()
	old := groupLookup
	t.Cleanup(func() { groupLookup = old })
	groupLookup = func(group string) ([]string, error) {
		if m, ok := table[group]; ok {
			return m, nil
		}
		return nil, errors.New("no such group")
	}
}

// render reads the accounting's sections (package accounting tests the
// rules): the layout takes them, and their errors name the file and line.
func TestRenderAccounting(t *testing.T) {
	fakeGroupLookup(t, map[string][]string{"nlp-lab": {"erin"}})
	c, err := ParseConfig(strings.NewReader(`[accounting]
currency = EUR
kwh_price = 0.25
[gpu_hour_prices]
H100 = 2.10
[teams]
nlp = @nlp-lab
[team_leads]
nlp = carol
`), "c.ini")
	if err != nil {
		t.Fatal(err)
	}
	want := accounting.Config{Currency: "EUR", KWhPrice: 0.25, HasKWhPrice: true, LowEfficiencyPct: 30,
		GPUHourPrices: []accounting.ModelPrice{{Model: "h100", PerHour: 2.1}},
		Teams:         []accounting.Team{{Name: "nlp", Members: []string{"erin"}, Lead: "carol"}}}
	if diff := cmp.Diff(want, c.Accounting); diff != "" {
		t.Errorf("-want +got:\n%s", diff)
	}
	for _, tt := range []struct{ name, src, want string }{
		{"unknown key", "[accounting]\ncurrency = EUR\nprice = 1\n", "c.ini:3: price: unknown key in [accounting]"},
		{"a negative price", "[accounting]\ncurrency = EUR\n[gpu_hour_prices]\nA100 = -1\n", `c.ini:4: a100: "-1" is not a price`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(tt.src), "c.ini")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v\nwant %q", err, tt.want)
			}
		})
	}
}

// exampleKey is a commented key in config.example.ini.
var exampleKey = regexp.MustCompile(`^# [A-Za-z0-9_ ]+ = \S`)

// config.example.ini's accounting sections, uncommented, load: every key
// it shows is one render reads.
func TestRenderExampleAccounting(t *testing.T) {
	fakeGroupLookup(t, map[string][]string{"nlp-lab": {"erin", "frank"}})
	b, err := os.ReadFile("../../config.example.ini")
	if err != nil {
		t.Fatal(err)
	}
	_, tail, ok := strings.Cut(string(b), "\n[accounting]\n")
	if !ok {
		t.Fatal("config.example.ini has no [accounting]")
	}
	var src strings.Builder
	src.WriteString("[accounting]\n")
	for _, line := range strings.Split(tail, "\n") {
		if exampleKey.MatchString(line) {
			line = strings.TrimPrefix(line, "# ")
		}
		src.WriteString(line + "\n")
	}
	c, err := ParseConfig(strings.NewReader(src.String()), "example.ini")
	if err != nil {
		t.Fatalf("%v\n%s", err, src.String())
	}
	if !c.Accounting.Priced() || !c.Accounting.HasCO2 || len(c.Accounting.Teams) != 2 || c.Accounting.LeadOf("vision") != "carol" {
		t.Errorf("the example's accounting: %+v", c.Accounting)
	}
}

// Every key config.example.ini shows in [notify] is one render takes: the
// layout lists them all (a key it lacked stopped fetch and render both).
func TestRenderExampleNotify(t *testing.T) {
	b, err := os.ReadFile("../../config.example.ini")
	if err != nil {
		t.Fatal(err)
	}
	_, tail, ok := strings.Cut(string(b), "\n[notify]\n")
	if !ok {
		t.Fatal("config.example.ini has no [notify]")
	}
	section, _, _ := strings.Cut(tail, "\n[")
	var src strings.Builder
	src.WriteString("[notify]\n")
	seen := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !exampleKey.MatchString(line) {
			continue
		}
		key, _, _ := strings.Cut(strings.TrimPrefix(line, "# "), " =")
		if !seen[key] { // the example shows some keys more than one way
			seen[key] = true
			src.WriteString(strings.TrimPrefix(line, "# ") + "\n")
		}
	}
	if !seen["unreserved_after"] || len(seen) < 8 {
		t.Fatalf("the example's [notify] keys: %v", seen)
	}
	if _, err := ParseConfig(strings.NewReader(src.String()), "example.ini"); err != nil {
		t.Errorf("%v\n%s", err, src.String())
	}
}
