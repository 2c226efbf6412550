package accounting

import (
	"cmp"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumon/gpumon/internal/inifile"
)

// The sections Read reads (configini.Layout lists their keys).
const (
	SectionAccounting = "accounting"
	SectionPrices     = "gpu_hour_prices"
	SectionTeams      = "teams"
	SectionLeads      = "team_leads"
)

// defaultKey is the key of [gpu_hour_prices] for the models no other key
// matches.
const defaultKey = "default"

// Bounds of the figures: no lab pays a million per GPU-hour, and a bound
// keeps out inf.
const (
	maxPrice    = 1e6
	maxCO2      = 1e5 // grams per kWh; the dirtiest grid emits about 1,200
	maxCurrency = 8   // runes
	maxName     = 256 // bytes of a user, group, team or lead
)

// GroupLookup returns the members of a unix group; an error when the group
// does not exist or cannot be read. SystemGroups is the system's.
type GroupLookup func(group string) (members []string, err error)

// Read reads [accounting], [gpu_hour_prices], [teams] and [team_leads] of
// f. groups resolves the @group members of [teams] (nil: SystemGroups).
// Every mistake is an *inifile.Error naming the file, line and key.
func Read(f *inifile.File, groups GroupLookup) (Config, error) {
	if groups == nil {
		groups = SystemGroups
	}
	c := DefaultConfig()
	if err := readAccounting(f.Section(SectionAccounting), &c); err != nil {
		return Config{}, err
	}
	if err := readPrices(f.Section(SectionPrices), &c); err != nil {
		return Config{}, err
	}
	if err := checkCurrency(f, &c); err != nil {
		return Config{}, err
	}
	if err := readTeams(f.Section(SectionTeams), groups, &c); err != nil {
		return Config{}, err
	}
	if err := readLeads(f.Section(SectionLeads), &c); err != nil {
		return Config{}, err
	}
	return c, nil
}

func readAccounting(sec inifile.Section, c *Config) error {
	c.Currency, _ = sec.String("currency")
	_, c.HasKWhPrice = sec.String("kwh_price")
	err := sec.Float("kwh_price", inifile.Limits[float64]{Max: maxPrice,
		Want: "a price (a number from 0 to 1e6) per kWh"}, &c.KWhPrice)
	if err != nil {
		return err
	}
	_, c.HasCO2 = sec.String("co2_g_per_kwh")
	err = sec.Float("co2_g_per_kwh", inifile.Limits[float64]{Max: maxCO2,
		Want: "a number of grams of CO2 per kWh from 0 to 1e5 (e.g. 350)"}, &c.CO2GPerKWh)
	if err != nil {
		return err
	}
	return sec.Float("low_efficiency_pct", inifile.Limits[float64]{Max: 100,
		Want: "a percentage from 0 to 100"}, &c.LowEfficiencyPct)
}

// readPrices reads [gpu_hour_prices]: model = price per GPU-hour, and
// default = the price of any other model.
func readPrices(sec inifile.Section, c *Config) error {
	lim := inifile.Limits[float64]{Max: maxPrice, Want: "a price per GPU-hour (a number from 0 to 1e6)"}
	keyOf := map[string]string{} // model words -> the key that gave them
	for _, k := range sec.Keys() {
		var price float64
		if err := sec.Float(k, lim, &price); err != nil {
			if v, _ := sec.String(k); v == "" {
				return sec.ErrorAt(k, "no price after = in [%s]", SectionPrices)
			}
			return err
		}
		if k == defaultKey {
			c.DefaultPrice, c.HasDefaultPrice = price, true
			continue
		}
		w := words(k)
		if len(w) == 0 {
			return sec.ErrorAt(k, "%q in [%s] is not a GPU model: want its name or part of it (e.g. H100)", k, SectionPrices)
		}
		model := strings.Join(w, " ")
		if first, ok := keyOf[model]; ok {
			// which price wins would depend on the order of the lines
			return sec.ErrorAt(k, "%q in [%s] names the same models as %q: give each model one price", k, SectionPrices, first)
		}
		keyOf[model] = k
		c.GPUHourPrices = append(c.GPUHourPrices, ModelPrice{Model: model, PerHour: price})
	}
	// the longest key wins: "h100 nvl" is tried before "h100"; keys of
	// the same length keep the file's order
	slices.SortStableFunc(c.GPUHourPrices, func(a, b ModelPrice) int {
		return cmp.Compare(len(b.Model), len(a.Model))
	})
	return nil
}

// checkCurrency checks the currency's name, and that a price has one.
func checkCurrency(f *inifile.File, c *Config) error {
	acc := f.Section(SectionAccounting)
	if c.Currency != "" {
		n := utf8.RuneCountInString(c.Currency)
		if n > maxCurrency || !currencyName(c.Currency) {
			e := acc.ErrorAt("currency", "%q is not a currency's name: want up to %d letters or a currency sign (EUR, USD, €)", c.Currency, maxCurrency)
			return e
		}
		return nil
	}
	if !c.Priced() {
		return nil
	}
	e := acc.ErrorAt("kwh_price", "a price without a currency")
	if !c.HasKWhPrice {
		sec := f.Section(SectionPrices)
		e = sec.ErrorAt(sec.Keys()[0], "a price in [%s] without a currency", SectionPrices)
	}
	e.HintText = "name it in [accounting] currency (e.g. currency = EUR)"
	return e
}

// currencyName allows letters, currency signs and dots ("kr.").
func currencyName(s string) bool {
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.Is(unicode.Sc, r) && r != '.' {
			return false
		}
	}
	return true
}

// readTeams reads [teams]: team = users and @unix-groups. A user already
// in an earlier team stays there: the first team in the file wins.
func readTeams(sec inifile.Section, groups GroupLookup, c *Config) error {
	teamOf := map[string]string{} // user -> team
	for _, team := range sec.Keys() {
		if !plainName(team) || strings.HasPrefix(team, "@") {
			return sec.ErrorAt(team, "%q in [%s] is not a team's name: want printable characters without spaces, not starting with @", team, SectionTeams)
		}
		items, _ := sec.List(team)
		if len(items) == 0 {
			return sec.ErrorAt(team, "team %s has no members: want user names or @unix-groups after =", team)
		}
		t := Team{Name: team}
		for _, item := range items {
			users, err := members(sec, team, item, groups)
			if err != nil {
				return err
			}
			for _, u := range users {
				if _, taken := teamOf[u]; !taken {
					teamOf[u] = team
					t.Members = append(t.Members, u)
				}
			}
		}
		c.Teams = append(c.Teams, t)
	}
	return nil
}

// members is one item of a team's list: a user, or a unix group's users.
func members(sec inifile.Section, team, item string, groups GroupLookup) ([]string, error) {
	group, isGroup := strings.CutPrefix(item, "@")
	switch {
	case isGroup && !plainName(group):
		return nil, sec.ErrorAt(team, "%q is not a unix group's name", item)
	case isGroup:
		users, err := groups(group)
		if err != nil {
			return nil, sec.ErrorAt(team, "team %s: unix group %s: %v", team, group, err)
		}
		return users, nil
	case !plainName(item):
		e := sec.ErrorAt(team, "%q is not a user's name", item)
		e.HintText = "separate the members with commas: " + team + " = alice, dave, @unix-group"
		return nil, e
	case item == team:
		e := sec.ErrorAt(team, "team %s names itself as a member", team)
		e.HintText = "list its users and @unix-groups; a team cannot hold teams"
		return nil, e
	}
	return []string{item}, nil
}

// readLeads reads [team_leads]: team = the user or mail address that
// receives the team's report.
func readLeads(sec inifile.Section, c *Config) error {
	for _, team := range sec.Keys() {
		i := slices.IndexFunc(c.Teams, func(t Team) bool { return t.Name == team })
		if i < 0 {
			e := sec.ErrorAt(team, "%s in [%s] is not a team of [%s]", team, SectionLeads, SectionTeams)
			e.HintText = "add the team to [" + SectionTeams + "], or fix the name"
			return e
		}
		lead, _ := sec.String(team)
		if err := checkLead(lead); err != "" {
			return sec.ErrorAt(team, "lead of team %s: %s", team, err)
		}
		c.Teams[i].Lead = lead
	}
	return nil
}

// checkLead says what is wrong with a lead, "" when nothing.
func checkLead(lead string) string {
	if lead == "" {
		return "empty: want a user name or a mail address"
	}
	if !plainName(lead) || strings.Contains(lead, ",") {
		return fmt.Sprintf("%q is not one user name or mail address", lead)
	}
	if strings.Contains(lead, "@") {
		a, err := mail.ParseAddress(lead)
		if err != nil || a.Address != lead {
			return fmt.Sprintf("%q is not a mail address", lead)
		}
	}
	return ""
}

// plainName is a user, group or team name: printable, no spaces, bounded.
func plainName(s string) bool {
	if s == "" || len(s) > maxName || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}
