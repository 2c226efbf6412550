package accounting

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpumon/gpumon/internal/inifile"
	"github.com/gpumon/gpumon/internal/testenv"
)

// fakeGroups is a GroupLookup over a fixed table.
func fakeGroups(table map[string][]string) GroupLookup {
	return func(group string) ([]string, error) {
		if m, ok := table[group]; ok {
			return m, nil
		}
		return nil, errNoGroup
	}
}

var labGroups = fakeGroups(map[string][]string{"nlp-lab": {"erin", "frank", "alice"}})

func readConfig(t testing.TB, src string) (Config, error) {
	t.Helper()
	f, err := inifile.Read(strings.NewReader(src), "/etc/gpumon/config.ini")
	if err != nil {
		t.Fatal(err)
	}
	return Read(f, labGroups)
}

func TestRead(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		want      Config
	}{
		{"nothing", "", Config{LowEfficiencyPct: 30}},
		{"everything", `
[accounting]
currency = EUR
kwh_price = 0.25
co2_g_per_kwh = 350
low_efficiency_pct = 40
[gpu_hour_prices]
H100 = 2.10
default = 0.50
H100 NVL = 2.50
A100 = 1.2
[teams]
vision = alice, dave
nlp = @nlp-lab, gina
[team_leads]
nlp = lead@example.org
vision = carol
`, Config{
			Currency: "EUR", KWhPrice: 0.25, HasKWhPrice: true, CO2GPerKWh: 350, HasCO2: true, LowEfficiencyPct: 40,
			GPUHourPrices: []ModelPrice{
				{Model: "h100 nvl", PerHour: 2.5},
				{Model: "h100", PerHour: 2.1},
				{Model: "a100", PerHour: 1.2},
			},
			DefaultPrice: 0.5, HasDefaultPrice: true,
			Teams: []Team{
				{Name: "vision", Members: []string{"alice", "dave"}, Lead: "carol"},
				// alice is vision's: the first team in the file wins
				{Name: "nlp", Members: []string{"erin", "frank", "gina"}, Lead: "lead@example.org"},
			},
		}},
		{"a price per kWh only", "[accounting]\ncurrency = €\nkwh_price = 0\n", Config{
			Currency: "€", HasKWhPrice: true, LowEfficiencyPct: 30,
		}},
		{"CO2 without a price", "[accounting]\nco2_g_per_kwh = 0\n", Config{HasCO2: true, LowEfficiencyPct: 30}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readConfig(t, tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
		})
	}
}

// Every mistake names the file, the line, the key, and what is wrong.
func TestReadErrors(t *testing.T) {
	const file = "/etc/gpumon/config.ini"
	for _, tt := range []struct {
		name, src, want string
	}{
		{"a price that is not a number", "[accounting]\ncurrency = EUR\n[gpu_hour_prices]\nH100 = two\n",
			file + `:4: h100: "two" is not a price per GPU-hour (a number from 0 to 1e6)`},
		{"a negative price", "[accounting]\ncurrency = EUR\n[gpu_hour_prices]\nH100 = -2\n",
			file + `:4: h100: "-2" is not a price per GPU-hour`},
		{"an infinite price", "[accounting]\ncurrency = EUR\nkwh_price = inf\n",
			file + `:3: kwh_price: "inf" is not a price (a number from 0 to 1e6) per kWh`},
		{"an empty price", "[accounting]\ncurrency = EUR\n[gpu_hour_prices]\ndefault =\n",
			file + `:4: default: no price after = in [gpu_hour_prices]`},
		{"a model of no words", "[accounting]\ncurrency = EUR\n[gpu_hour_prices]\n-- = 1\n",
			file + `:4: --: "--" in [gpu_hour_prices] is not a GPU model`},
		{"one model priced twice", "[accounting]\ncurrency = EUR\n[gpu_hour_prices]\nH100 NVL = 2\nh100-nvl = 3\n",
			file + `:5: h100-nvl: "h100-nvl" in [gpu_hour_prices] names the same models as "h100 nvl"`},
		{"a negative CO2", "[accounting]\nco2_g_per_kwh = -1\n", file + `:2: co2_g_per_kwh: "-1" is not a number of grams`},
		{"low efficiency above 100", "[accounting]\nlow_efficiency_pct = 101\n", file + `:2: low_efficiency_pct: "101" is not a percentage`},
		{"a currency with odd characters", "[accounting]\ncurrency = <b>EUR\n",
			file + `:2: currency: "<b>EUR" is not a currency's name`},
		{"a currency too long", "[accounting]\ncurrency = EUROSEUROS\n", file + `:2: currency: "EUROSEUROS" is not a currency's name`},
		{"a kWh price without a currency", "[accounting]\nkwh_price = 0.3\n", file + `:2: kwh_price: a price without a currency`},
		{"a GPU-hour price without a currency", "[gpu_hour_prices]\nA100 = 1\n",
			file + `:2: a100: a price in [gpu_hour_prices] without a currency`},
		{"a team that names itself", "[teams]\nvision = alice, vision\n", file + `:2: vision: team vision names itself as a member`},
		{"a team without members", "[teams]\nvision = ,\n", file + `:2: vision: team vision has no members`},
		{"members without commas", "[teams]\nvision = alice dave\n", file + `:2: vision: "alice dave" is not a user's name`},
		{"a unix group that does not exist", "[teams]\nnlp = gina, @nlp-lba\n",
			file + `:2: nlp: team nlp: unix group nlp-lba: no such group on this machine`},
		{"an empty group", "[teams]\nnlp = @\n", file + `:2: nlp: "@" is not a unix group's name`},
		{"a team named like a group", "[teams]\n@nlp = gina\n", file + `:2: @nlp: "@nlp" in [teams] is not a team's name`},
		{"a lead of no team", "[teams]\nvision = alice\n[team_leads]\nvison = carol\n",
			file + `:4: vison: vison in [team_leads] is not a team of [teams]`},
		{"two leads", "[teams]\nvision = alice\n[team_leads]\nvision = carol, dave\n",
			file + `:4: vision: lead of team vision: "carol, dave" is not one user name or mail address`},
		{"a bad mail address", "[teams]\nvision = alice\n[team_leads]\nvision = carol@\n",
			file + `:4: vision: lead of team vision: "carol@" is not a mail address`},
		{"an empty lead", "[teams]\nvision = alice\n[team_leads]\nvision =\n", file + `:4: vision: lead of team vision: empty`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readConfig(t, tt.src)
			var ie *inifile.Error
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T); want an *inifile.Error", err, err)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error\n%s\nwant it to start with\n%s", err, tt.want)
			}
		})
	}
}

// A price without a currency tells where to name it.
func TestReadCurrencyHint(t *testing.T) {
	_, err := readConfig(t, "[gpu_hour_prices]\ndefault = 1\n")
	var ie *inifile.Error
	if !errors.As(err, &ie) || !strings.Contains(ie.Hint(), "currency = EUR") {
		t.Fatalf("error %v, hint %q; want a hint naming [accounting] currency", err, ie.Hint())
	}
}

// A user in two teams is in the first one only, whichever way they got in.
func TestUserInTwoTeams(t *testing.T) {
	c, err := readConfig(t, "[teams]\nnlp = @nlp-lab\nvision = alice, dave\nall = dave, erin, henry\n")
	if err != nil {
		t.Fatal(err)
	}
	for user, team := range map[string]string{"alice": "nlp", "dave": "vision", "erin": "nlp", "henry": "all", "ivan": ""} {
		if got := c.TeamOf(user); got != team {
			t.Errorf("TeamOf(%s) = %q, want %q", user, got, team)
		}
	}
	if got := c.Teams[2].Members; !slices.Equal(got, []string{"henry"}) {
		t.Errorf("team all's members: %q; want only henry, who is in no earlier team", got)
	}
	if c.LeadOf("nlp") != "" || c.LeadOf("none") != "" {
		t.Errorf("a lead where none is set")
	}
}

func TestPriceOf(t *testing.T) {
	c, err := readConfig(t, "[accounting]\ncurrency = USD\n[gpu_hour_prices]\nH100 = 2.10\nh100 nvl = 2.5\nA100 = 1.20\nMI300X = 3\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		model string
		price float64
		ok    bool
	}{
		{"NVIDIA H100 80GB HBM3", 2.1, true},
		{"NVIDIA H100 NVL", 2.5, true}, // the longest key wins
		{"nvidia h100 nvl", 2.5, true},
		{"NVIDIA A100-SXM4-80GB", 1.2, true},
		{"AMD Instinct MI300X", 3, true},
		{"NVIDIA GH100", 0, false},     // a whole word, not part of one
		{"NVIDIA H1000", 0, false},     // not a prefix either
		{"NVIDIA NVL H100", 2.1, true}, // words in a row: this is only H100's
		{"NVIDIA GeForce RTX 4090", 0, false},
		{"", 0, false},
	} {
		price, ok := c.PriceOf(tt.model)
		if price != tt.price || ok != tt.ok {
			t.Errorf("PriceOf(%q) = %v, %v; want %v, %v", tt.model, price, ok, tt.price, tt.ok)
		}
	}
	c.DefaultPrice, c.HasDefaultPrice = 0.5, true
	if price, ok := c.PriceOf("NVIDIA GeForce RTX 4090"); price != 0.5 || !ok {
		t.Errorf("an unlisted model with a default: %v, %v; want 0.5, true", price, ok)
	}
}

func TestCostOf(t *testing.T) {
	h100 := []ModelPrice{{Model: "h100", PerHour: 2}}
	for _, tt := range []struct {
		name  string
		c     Config
		model string
		cost  float64
		ok    bool
	}{
		{"no price", Config{}, "NVIDIA H100", 0, false},
		{"per GPU-hour", Config{GPUHourPrices: h100}, "NVIDIA H100", 20, true},
		{"per GPU-hour and kWh", Config{GPUHourPrices: h100, KWhPrice: 0.5, HasKWhPrice: true}, "NVIDIA H100", 21, true},
		{"per kWh only", Config{KWhPrice: 0.5, HasKWhPrice: true}, "NVIDIA A100", 1, true},
		{"an unpriced model", Config{GPUHourPrices: h100, KWhPrice: 0.5, HasKWhPrice: true}, "NVIDIA A100", 1, false},
		{"a default", Config{GPUHourPrices: h100, DefaultPrice: 0.25, HasDefaultPrice: true}, "NVIDIA A100", 2.5, true},
		{"free", Config{DefaultPrice: 0, HasDefaultPrice: true}, "NVIDIA A100", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cost, ok := tt.c.CostOf(tt.model, 10, 2)
			if cost != tt.cost || ok != tt.ok {
				t.Errorf("CostOf(%q, 10 h, 2 kWh) = %v, %v; want %v, %v", tt.model, cost, ok, tt.cost, tt.ok)
			}
		})
	}
}

// SystemGroups reads this machine's groups: root is root's primary group
// (the passwd part) on any Linux; a group that does not exist is an error.
func TestSystemGroups(t *testing.T) {
	if _, err := exec.LookPath("getent"); err != nil {
		testenv.Need(t, "needs getent (glibc's)")
	}
	users, err := SystemGroups("root")
	if err != nil || !slices.Contains(users, "root") {
		t.Errorf("SystemGroups(root) = %q, %v; want root among them", users, err)
	}
	if _, err := SystemGroups("no-such-group-gpumon"); !errors.Is(err, errNoGroup) {
		t.Errorf("a group that does not exist: %v; want %v", err, errNoGroup)
	}
	if _, err := SystemGroups("-x"); err == nil {
		t.Errorf("a group named like an option: no error")
	}
}

func TestParseGetent(t *testing.T) {
	gid, members, err := parseGroup([]byte("nlp-lab:x:1234:erin,frank,\n"), "nlp-lab")
	if err != nil || gid != "1234" || !slices.Equal(members, []string{"erin", "frank"}) {
		t.Errorf("parseGroup = %q, %q, %v", gid, members, err)
	}
	if _, _, err := parseGroup([]byte("other:x:1:\n"), "nlp-lab"); !errors.Is(err, errNoGroup) {
		t.Errorf("another group's line: %v; want %v", err, errNoGroup)
	}
	passwd := []byte("erin:x:1001:1234:Erin:/home/erin:/bin/sh\ngina:x:1002:1234::/home/gina:/bin/sh\nroot:x:0:0:root:/root:/bin/sh\nbad\n")
	if got := union(members, primaryMembers(passwd, gid)); !slices.Equal(got, []string{"erin", "frank", "gina"}) {
		t.Errorf("members with the primary ones: %q", got)
	}
}
