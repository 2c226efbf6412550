// Package accounting turns the history's ledger (history.Ledger) into what
// people bill and act on: GPU-hours, effective hours, energy, cost and CO2
// per user, team, job, Slurm account, GPU model or host. Its settings are
// config.ini's [accounting], [gpu_hour_prices], [teams] and [team_leads]
// (Read); docs/configuration.md describes each key and each figure.
package accounting

import (
	"slices"
	"strings"
	"unicode"
)

// DefaultLowEfficiencyPct is low_efficiency_pct when the file leaves it out.
const DefaultLowEfficiencyPct = 30

// Config is [accounting], [gpu_hour_prices], [teams] and [team_leads].
type Config struct {
	// Currency names the prices' currency (EUR, USD); "" when no price is
	// set.
	Currency string
	// KWhPrice is the price of a kWh, when HasKWhPrice.
	KWhPrice    float64
	HasKWhPrice bool
	// CO2GPerKWh is the grams of CO2 a kWh emits, when HasCO2.
	CO2GPerKWh float64
	HasCO2     bool
	// LowEfficiencyPct: a report on efficiency below it says so.
	LowEfficiencyPct float64
	// GPUHourPrices are [gpu_hour_prices] without default, longest model
	// key first (the order a GPU's name is matched in).
	GPUHourPrices []ModelPrice
	// DefaultPrice is the price of a GPU-hour of a model no key matches,
	// when HasDefaultPrice.
	DefaultPrice    float64
	HasDefaultPrice bool
	// Teams in the file's order; a user is in one team at most.
	Teams []Team
}

// ModelPrice is one line of [gpu_hour_prices]: the price of a GPU-hour
// on GPUs whose name holds Model's words.
type ModelPrice struct {
	Model   string // its words, lower-case, one space between
	PerHour float64
}

// Team is one line of [teams] with its lead from [team_leads].
type Team struct {
	Name    string
	Members []string // unix groups resolved; a user already in an earlier team is left out
	Lead    string   // a user name or a mail address; "" for none
}

// DefaultConfig is the accounting when the file has none of its sections:
// no prices, no teams.
func DefaultConfig() Config {
	return Config{LowEfficiencyPct: DefaultLowEfficiencyPct}
}

// TeamOf is the team user is in, "" when in none.
func (c *Config) TeamOf(user string) string {
	for _, t := range c.Teams {
		if slices.Contains(t.Members, user) {
			return t.Name
		}
	}
	return ""
}

// teamIndex is TeamOf of every member, for a loop over many users.
func (c *Config) teamIndex() map[string]string {
	m := map[string]string{}
	for _, t := range c.Teams {
		for _, u := range t.Members {
			if _, ok := m[u]; !ok { // as TeamOf: the first team wins
				m[u] = t.Name
			}
		}
	}
	return m
}

// LeadOf is the lead of the named team, "" when it has none.
func (c *Config) LeadOf(team string) string {
	for _, t := range c.Teams {
		if t.Name == team {
			return t.Lead
		}
	}
	return ""
}

// Priced reports whether any price is set: per GPU-hour or per kWh.
func (c *Config) Priced() bool {
	return c.HasKWhPrice || c.HasDefaultPrice || len(c.GPUHourPrices) > 0
}

// PriceOf is the price of a GPU-hour on a GPU of the model (its full name,
// e.g. "NVIDIA H100 80GB HBM3"): the longest key of [gpu_hour_prices]
// whose words are words of the name, in a row and in any case ("H100 NVL"
// before "H100"), else default. ok is false when neither is set.
func (c *Config) PriceOf(model string) (price float64, ok bool) {
	name := words(model)
	for _, p := range c.GPUHourPrices {
		if containsRun(name, words(p.Model)) {
			return p.PerHour, true
		}
	}
	return c.DefaultPrice, c.HasDefaultPrice
}

// CostOf is the cost of gpuHours on GPUs of the model that drew kwh: the
// GPU-hours at the model's price (PriceOf) plus the kWh at kwh_price.
// ok is false when GPU-hour prices are set but none is the model's: cost
// then holds the energy's part only, and a report says how many
// GPU-hours it leaves out. Without any price, cost is 0 and ok false.
func (c *Config) CostOf(model string, gpuHours, kwh float64) (cost float64, ok bool) {
	price, priced := c.PriceOf(model)
	return c.cost(price, priced, gpuHours, kwh)
}

// cost is CostOf of a model whose price PriceOf gave.
func (c *Config) cost(price float64, priced bool, gpuHours, kwh float64) (cost float64, ok bool) {
	if !c.Priced() {
		return 0, false
	}
	if c.HasKWhPrice {
		cost = kwh * c.KWhPrice
	}
	if !c.HasDefaultPrice && len(c.GPUHourPrices) == 0 {
		return cost, true // priced by energy only
	}
	return cost + gpuHours*price, priced
}

// costCache is CostOf with each model's price looked up once: a month's
// ledger has a row per job, on a few models.
func (c *Config) costCache() func(model string, gpuHours, kwh float64) (float64, bool) {
	type modelPrice struct {
		price float64
		ok    bool
	}
	seen := map[string]modelPrice{}
	return func(model string, gpuHours, kwh float64) (float64, bool) {
		p, found := seen[model]
		if !found {
			p.price, p.ok = c.PriceOf(model)
			seen[model] = p
		}
		return c.cost(p.price, p.ok, gpuHours, kwh)
	}
}

// words splits a GPU name into lower-case words: runs of letters and
// digits ("NVIDIA A100-SXM4-80GB" is nvidia, a100, sxm4, 80gb).
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// containsRun reports whether run occurs in list as consecutive items.
func containsRun(list, run []string) bool {
	if len(run) == 0 {
		return false
	}
	for i := 0; i+len(run) <= len(list); i++ {
		match := true
		for j, w := range run {
			if list[i+j] != w {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
