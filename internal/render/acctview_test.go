package render

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/inifile"
)

// testAccounting is [accounting] and [teams] as config.ini would give
// them, from a short form: in [accounting], `kwh` is kwh_price and any key
// but currency a GPU-hour price ([gpu_hour_prices]); a price without a
// currency is in EUR.
func testAccounting(t testing.TB, short string) accounting.Config {
	t.Helper()
	var acc, prices, rest []string
	section := ""
	for _, line := range strings.Split(short, "\n") {
		if strings.HasPrefix(line, "[") {
			section = line
			if section != "[accounting]" {
				rest = append(rest, line)
			}
			continue
		}
		key, value, ok := strings.Cut(line, " = ")
		switch {
		case section != "[accounting]":
			rest = append(rest, line)
		case !ok:
		case key == "currency":
			acc = append(acc, line)
		case key == "kwh":
			acc = append(acc, "kwh_price = "+value)
		default:
			prices = append(prices, line)
		}
	}
	if len(acc)+len(prices) > 0 && !strings.Contains(short, "currency = ") {
		acc = append(acc, "currency = EUR")
	}
	ini := "[accounting]\n" + strings.Join(acc, "\n") + "\n[gpu_hour_prices]\n" + strings.Join(prices, "\n") + "\n" + strings.Join(rest, "\n") + "\n"
	f, err := inifile.Read(strings.NewReader(ini), "config.ini")
	if err != nil {
		t.Fatal(err)
	}
	c, err := accounting.Read(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// costSummary is 30 days of three users and two models, by hand: alice
// (vision) 100 GPU-h and 35 kWh, bob (nlp) 50 and 10, carol (no team) 10
// GPU-h of unknown energy; A100 120 GPU-h and 40 kWh, every hour's power
// known; T4 40 GPU-h, 5 kWh over the 20 of them whose power was known.
// Per user and model: alice's are all A100; bob's 20 GPU-h and 5 kWh of
// A100, 30 GPU-h (20 of known power) and 5 kWh of T4; carol's all T4.
func costSummary() *history.Summary {
	fig := func(hours, kwh, knownHours float64) history.Figures {
		return history.Figures{GPUSeconds: hours * 3600, EnergyJ: kwh * 3.6e6, EnergyKnownSeconds: knownHours * 3600}
	}
	user := func(name string, hours, kwh float64) history.UserHours {
		return history.UserHours{User: name, GPUHours: map[string]float64{"30d": hours, "7d": hours / 2}, IdleHours: map[string]float64{"30d": 0},
			KWh: map[string]float64{"30d": kwh, "7d": kwh / 2}, Efficiency: map[string]float64{"30d": math.NaN()}}
	}
	return &history.Summary{
		Users: []history.UserHours{user("alice", 100, 35), user("bob", 50, 10), user("carol", 10, math.NaN())},
		Models30d: map[string]history.Figures{
			"A100": {GPUSeconds: 120 * 3600, EnergyJ: 40 * 3.6e6, EnergyKnownSeconds: 120 * 3600},
			"T4":   {GPUSeconds: 40 * 3600, EnergyJ: 5 * 3.6e6, EnergyKnownSeconds: 20 * 3600},
		},
		UserModels30d: map[string]map[string]history.Figures{
			"alice": {"A100": fig(100, 35, 100)},
			"bob":   {"A100": fig(20, 5, 20), "T4": fig(30, 5, 20)},
			"carol": {"T4": fig(10, 0, 0)},
		},
	}
}

// The cost line: every model's cost over 30 days from the prices, the
// GPU-hours no price covers named (their energy still counted), how much
// of the energy is known, and each team's GPU-hours, kWh and cost, the
// sum over its members and their models; none without a price.
func TestCostLine(t *testing.T) {
	const teams = "[teams]\nvision = alice\nnlp = bob\n"
	for _, tt := range []struct {
		name, ini string
		want      *costView
	}{
		{"no price", teams, nil},
		{"a GPU-hour price for one model", "[accounting]\ncurrency = EUR\na100 = 2.10\n" + teams, &costView{
			// 120 × 2.10; T4 has no price
			Total: "252.00 EUR", GPUHours: "160", KWh: "45", EnergyShare: "energy known for 87% of them", // (120 + 20) / 160
			Unpriced: "not counting 40 GPU-hours of T4, without a price", Teams: []teamView{
				{Name: "vision", GPUHours: "100", KWh: "35", Cost: "210.00 EUR"}, // 100 × 2.10
				{Name: "nlp", GPUHours: "50", KWh: "10", Cost: "42.00 EUR", Unpriced: "30 GPU-h without a price"},
				{Name: "(no team)", GPUHours: "10", KWh: "–", Cost: "0.00 EUR", Unpriced: "10 GPU-h without a price"},
			}}},
		{"a default and a kWh price", "[accounting]\ncurrency = EUR\ndefault = 1\na100 = 2.10\nkwh = 0.30\n" + teams, &costView{
			// 120 × 2.10 + 40 × 0.30 + 40 × 1 + 5 × 0.30
			Total: "305.50 EUR", GPUHours: "160", KWh: "45", EnergyShare: "energy known for 87% of them", Teams: []teamView{
				{Name: "vision", GPUHours: "100", KWh: "35", Cost: "220.50 EUR"}, // 100 × 2.10 + 35 × 0.30
				{Name: "nlp", GPUHours: "50", KWh: "10", Cost: "75.00 EUR"},      // 20 × 2.10 + 5 × 0.30 + 30 × 1 + 5 × 0.30
				{Name: "(no team)", GPUHours: "10", KWh: "–", Cost: "10.00 EUR"}, // 10 × 1
			}}},
		{"a kWh price and a GPU-hour price for one model", "[accounting]\ncurrency = EUR\na100 = 2.10\nkwh = 0.30\n" + teams, &costView{
			// 120 × 2.10 + 40 × 0.30, and T4's energy: 5 × 0.30
			Total: "265.50 EUR", GPUHours: "160", KWh: "45", EnergyShare: "energy known for 87% of them",
			Unpriced: "not counting 40 GPU-hours of T4, without a price", Teams: []teamView{
				{Name: "vision", GPUHours: "100", KWh: "35", Cost: "220.50 EUR"},
				// 20 × 2.10 + 5 × 0.30, and T4's energy: 5 × 0.30
				{Name: "nlp", GPUHours: "50", KWh: "10", Cost: "45.00 EUR", Unpriced: "30 GPU-h without a price"},
				{Name: "(no team)", GPUHours: "10", KWh: "–", Cost: "0.00 EUR", Unpriced: "10 GPU-h without a price"},
			}}},
		{"a kWh price alone, no teams", "[accounting]\nkwh = 0.5\n", &costView{
			Total: "22.50 EUR", GPUHours: "160", KWh: "45", EnergyShare: "energy known for 87% of them"}},
		{"a user in no team, and a team with no use", "[accounting]\ncurrency = EUR\ndefault = 1\n[teams]\nvision = alice, bob\nidle = dora\n", &costView{
			Total: "160.00 EUR", GPUHours: "160", KWh: "45", EnergyShare: "energy known for 87% of them", Teams: []teamView{
				{Name: "vision", GPUHours: "150", KWh: "45", Cost: "150.00 EUR"},
				{Name: "idle", GPUHours: "0.0", KWh: "–", Cost: "0.00 EUR"},
				{Name: "(no team)", GPUHours: "10", KWh: "–", Cost: "10.00 EUR"},
			}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			acc := testAccounting(t, tt.ini)
			if diff := cmp.Diff(tt.want, costViewOf(costSummary(), &acc)); diff != "" {
				t.Errorf("cost line (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("without history", func(t *testing.T) {
		acc := testAccounting(t, "[accounting]\nkwh = 0.5\n")
		if v := costViewOf(nil, &acc); v != nil {
			t.Errorf("cost line without history: %+v", v)
		}
	})
}

// The plots by team: each team's GPU-hours, its members' summed, the
// users in no team one bar.
func TestTeamBars(t *testing.T) {
	acc := testAccounting(t, "[teams]\nvision = alice, carol\nnlp = bob\n")
	for _, tt := range []struct {
		days int
		want []userBar
	}{
		{30, []userBar{{"vision", 110}, {"nlp", 50}}},
		{7, []userBar{{"vision", 55}, {"nlp", 25}}},
	} {
		t.Run(strconv.Itoa(tt.days)+"d", func(t *testing.T) {
			bars, others := teamBars(costSummary(), &acc, tt.days)
			if diff := cmp.Diff(tt.want, bars, cmp.AllowUnexported(userBar{})); diff != "" || others != 0 {
				t.Errorf("bars (-want +got), others %d:\n%s", others, diff)
			}
		})
	}
	acc = testAccounting(t, "[teams]\nvision = alice\n")
	bars, _ := teamBars(costSummary(), &acc, 30)
	if want := []userBar{{"vision", 100}, {"(no team)", 60}}; !slices.Equal(bars, want) {
		t.Errorf("bars %v, want %v: those in no team together", bars, want)
	}
}

// The users table's 30-day columns: the history's figures, "–" for an
// efficiency or energy that is not known (never NaN), and after the users
// holding a GPU now, those who did in the last 30 days, the most first,
// at most pastUsersMax.
func TestUsersTableHistory(t *testing.T) {
	s := &history.Summary{Users: []history.UserHours{
		{User: "alice", GPUHours: map[string]float64{"30d": 12345.4}, IdleHours: map[string]float64{"30d": 2.26},
			KWh: map[string]float64{"30d": 4321.6}, Efficiency: map[string]float64{"30d": 0.425}},
		{User: "bob", GPUHours: map[string]float64{"30d": 3}, IdleHours: map[string]float64{"30d": 0},
			KWh: map[string]float64{"30d": math.NaN()}, Efficiency: map[string]float64{"30d": math.NaN()}},
		{User: "carol", GPUHours: map[string]float64{"30d": 5}, Efficiency: map[string]float64{"30d": 1.5}},
		{User: "<b>", GPUHours: map[string]float64{"30d": 9}, KWh: map[string]float64{"30d": 1}},
		{User: "gone", GPUHours: map[string]float64{"7d": 0, "30d": 0}}, // nothing in 30 days
	}}
	now := []*cluster.User{{Name: "bob", GPUs: 1}, {Name: "dave", GPUs: 2}}
	users, _, hist := usersWithHistory(now, s, 0)
	if !hist {
		t.Fatal("no 30-day columns with a history")
	}
	type row struct {
		Name                            string
		Past                            bool
		GPUHours, Idle, KWh, Efficiency string
	}
	var got []row
	for _, u := range users {
		got = append(got, row{u.Name, u.Past, u.GPUHours30d, u.IdleHours30d, u.KWh30d, u.Efficiency30d})
	}
	want := []row{
		{"bob", false, "3.0", "0.0", "–", "–"},
		{"dave", false, "0.0", "0.0", "0.0", "–"}, // new: in no window yet
		{"alice", true, "12,345", "2.3", "4,322", "43%"},
		{"<b>", true, "9.0", "0.0", "1.0", "–"},    // no idle-held hours: none; no efficiency: unknown
		{"carol", true, "5.0", "0.0", "–", "100%"}, // no kWh: unknown
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if _, _, hist := usersWithHistory(now, nil, 0); hist {
		t.Error("30-day columns without history")
	}

	for i := range pastUsersMax + 5 {
		s.Users = append(s.Users, history.UserHours{User: fmt.Sprintf("u%03d", i), GPUHours: map[string]float64{"30d": float64(i + 1)}})
	}
	users, _, _ = usersWithHistory(now, s, 0)
	if n := len(users) - len(now); n != pastUsersMax {
		t.Errorf("%d past users listed, want %d", n, pastUsersMax)
	}
	if last := users[len(users)-1].Name; last == "u000" {
		t.Errorf("the last past user listed is %s, one of the fewest GPU-hours: the most should be kept", last)
	}
}

// The page escapes what the users table and the cost line show: a user's
// name from a host, a model's name from its tool.
func TestAccountingEscaped(t *testing.T) {
	const evil = `<img src=x onerror=alert(1)>`
	rep := testReport(t, readRows(t, "testdata/load_data.csv"), "")
	rep.History = costSummary()
	rep.History.Users = append(rep.History.Users, history.UserHours{User: evil, GPUHours: map[string]float64{"30d": 1}})
	rep.History.Models30d[evil] = history.Figures{GPUSeconds: 3600}
	rep.Config.Accounting = testAccounting(t, "[accounting]\na100 = 1\n[teams]\nvision = alice\n")
	var b strings.Builder
	if err := HTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), evil) {
		t.Error("a name from the data is markup on the page")
	}
	if !strings.Contains(b.String(), "not counting 41 GPU-hours of &lt;img src=x onerror=alert(1)&gt;, T4, without a price") {
		t.Error("the cost line does not name the unpriced models, escaped")
	}
}
