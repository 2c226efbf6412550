package render

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// The accounting's part of the page: the users table's 30-day columns,
// the summary's cost line and the plots by team. Every figure is the
// history's (Summary.Users, Summary.Models30d); the page adds nothing up
// that the history has not counted.

// window30d is the history's window the users table and the cost line show.
const window30d = "30d"

// pastUsersMax is how many users who hold no GPU now, but did in the last
// 30 days, the users table lists, the most GPU-hours first; status.json
// lists them all.
const pastUsersMax = 100

// noFigure is a cell whose figure is not known: never "NaN".
const noFigure = "–"

// usersWithHistory is usersView with each user's last 30 days from the
// history (GPU-hours, idle-held hours, kWh, efficiency), and after the
// users holding a GPU now those who held one in the last 30 days; hist
// says whether the table has those columns (not without history).
func usersWithHistory(us []*cluster.User, s *history.Summary, hostsMax int) (users []userView, jobs, hist bool) {
	users, jobs = usersView(us, hostsMax)
	if s == nil {
		return users, jobs, false
	}
	byName := make(map[string]*history.UserHours, len(s.Users))
	for i := range s.Users {
		byName[s.Users[i].User] = &s.Users[i]
	}
	holding := make(map[string]bool, len(us))
	for i, u := range us {
		holding[u.Name] = true
		setUserFigures(&users[i], byName[u.Name])
	}
	var past []*history.UserHours
	for i := range s.Users {
		uh := &s.Users[i]
		if !holding[uh.User] && (uh.GPUHours[window30d] > 0 || uh.IdleHours[window30d] > 0) {
			past = append(past, uh)
		}
	}
	slices.SortStableFunc(past, func(a, b *history.UserHours) int {
		return cmp.Compare(b.GPUHours[window30d], a.GPUHours[window30d])
	})
	for _, uh := range past[:min(len(past), pastUsersMax)] {
		v := userView{Name: userName(uh.User), Mem: noFigure, Past: true}
		setUserFigures(&v, uh)
		users = append(users, v)
	}
	return users, jobs, true
}

// setUserFigures fills a users table row's 30-day figures; a user the
// history has none for held nothing in the window.
func setUserFigures(v *userView, uh *history.UserHours) {
	if uh == nil { // in no window of the history: nothing held, nothing drawn
		zero := map[string]float64{window30d: 0}
		uh = &history.UserHours{GPUHours: zero, IdleHours: zero, KWh: zero}
	}
	v.GPUHours30d = figureText(uh.GPUHours, 0)
	v.IdleHours30d = figureText(uh.IdleHours, 0)
	v.KWh30d = figureText(uh.KWh, math.NaN())
	v.Efficiency30d = noFigure
	if e, ok := uh.Efficiency[window30d]; ok && !math.IsNaN(e) && !math.IsInf(e, 0) {
		v.Efficiency30d = strconv.Itoa(int(math.Round(max(0, min(1, e))*100))) + "%"
	}
}

// figureText is a window's figure as a number for the page; missing is
// what a window not in the map stands for (0 for hours held, unknown
// for energy an older history did not count).
func figureText(m map[string]float64, missing float64) string {
	v, ok := m[window30d]
	if !ok {
		v = missing
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return noFigure
	}
	return groupedText(v)
}

// groupedText is a figure for the page: "0.4", "12", "1,234".
func groupedText(v float64) string {
	if math.Abs(v) < 9.95 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return groupThousands(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
}

// groupThousands puts commas between the thousands of an integer's digits.
func groupThousands(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return sign + s
}

// moneyText is an amount with two decimals and its currency: "1,234.56 EUR".
func moneyText(v float64, currency string) string {
	whole, frac, _ := strings.Cut(strconv.FormatFloat(v, 'f', 2, 64), ".")
	s := groupThousands(whole) + "." + frac
	if currency != "" {
		s += " " + currency
	}
	return s
}

// costView is the summary's cost line: the last 30 days' cost of every
// model together, and each team's GPU-hours, kWh and cost.
type costView struct {
	Total    string // "1,234.56 EUR"
	GPUHours string
	KWh      string // "" when no energy is known
	// Unpriced: the GPU-hours of models that no price covers, left out
	// of Total ("12 GPU-h of A100 without a price"); "" when none.
	Unpriced string
	// EnergyShare: how much of the GPU-hours' energy is known, when not
	// all of it and a kWh price counts it ("energy known for 80%").
	EnergyShare string
	Teams       []teamView
}

// teamView is a team's part of the cost line. Cost is its members'
// (their GPU-hours per model at the model's price, plus their kWh);
// Unpriced, as the total's, the GPU-hours it leaves out for want of a
// price ("30 GPU-h without a price"), "" when none.
type teamView struct {
	Name, GPUHours, KWh string
	Cost, Unpriced      string
}

// noTeam names the users in no team, in the cost line and the plots.
const noTeam = "(no team)"

// costViewOf is the cost line, or nil: only where prices are set and the
// history has the last 30 days' figures.
func costViewOf(s *history.Summary, acc *accounting.Config) *costView {
	if s == nil || !acc.Priced() || len(s.Models30d) == 0 {
		return nil
	}
	var total float64
	var all history.Figures
	var unpricedHours float64
	var unpriced []string
	for _, model := range slices.Sorted(maps.Keys(s.Models30d)) {
		f := s.Models30d[model]
		all.Add(f)
		// without a GPU-hour price, cost is the energy's part alone (as
		// in render -usage and the Prometheus rules)
		cost, ok := acc.CostOf(model, f.GPUSeconds/3600, f.EnergyJ/3.6e6)
		total += cost
		if !ok {
			unpricedHours += f.GPUSeconds / 3600
			unpriced = append(unpriced, hosttext.Clip(model, 64))
		}
	}
	v := &costView{Total: moneyText(total, acc.Currency), GPUHours: groupedText(all.GPUSeconds / 3600)}
	if all.EnergyKnownSeconds > 0 {
		v.KWh = groupedText(all.EnergyJ / 3.6e6)
		if share := all.EnergyKnownSeconds / all.GPUSeconds; share < 0.995 {
			v.EnergyShare = "energy known for " + strconv.Itoa(int(math.Floor(share*100))) + "% of them"
		}
	}
	if len(unpriced) > 0 {
		v.Unpriced = "not counting " + groupedText(unpricedHours) + " GPU-hours of " + strings.Join(unpriced, ", ") + ", without a price"
	}
	v.Teams = teamsView(s, acc)
	return v
}

// teamsView is each team's GPU-hours, kWh and cost over the last 30
// days, the sum of its members', in the order of [teams]; the users in no
// team last. None where no team is configured.
func teamsView(s *history.Summary, acc *accounting.Config) []teamView {
	if len(acc.Teams) == 0 {
		return nil
	}
	hours, kwh := teamSums(s, acc, window30d)
	cost, unpriced := teamCosts(s, acc)
	var out []teamView
	for _, name := range append(teamNames(acc), noTeam) {
		if _, ok := hours[name]; !ok && name == noTeam {
			continue
		}
		v := teamView{Name: name, GPUHours: groupedText(hours[name]), KWh: noFigure, Cost: moneyText(cost[name], acc.Currency)}
		if e, ok := kwh[name]; ok {
			v.KWh = groupedText(e)
		}
		if h := unpriced[name]; h > 0 {
			v.Unpriced = groupedText(h) + " GPU-h without a price"
		}
		out = append(out, v)
	}
	return out
}

// teamCosts adds the users' costs of the last 30 days up by team (noTeam
// for the users in none): each user's GPU-hours and kWh on each model at
// that model's prices. unpricedHours are the GPU-hours on models no price
// covers, whose cost is their energy's alone, as in the total. Users and
// models are taken in order, so that the sums do not change from one
// render to the next in their last digit.
func teamCosts(s *history.Summary, acc *accounting.Config) (cost, unpricedHours map[string]float64) {
	cost, unpricedHours = map[string]float64{}, map[string]float64{}
	for _, user := range slices.Sorted(maps.Keys(s.UserModels30d)) {
		team := acc.TeamOf(user)
		if team == "" {
			team = noTeam
		}
		models := s.UserModels30d[user]
		for _, model := range slices.Sorted(maps.Keys(models)) {
			f := models[model]
			c, ok := acc.CostOf(model, f.GPUSeconds/3600, f.EnergyJ/3.6e6)
			cost[team] += c
			if !ok {
				unpricedHours[team] += f.GPUSeconds / 3600
			}
		}
	}
	return cost, unpricedHours
}

// teamNames are the configured teams' names, in the file's order.
func teamNames(acc *accounting.Config) []string {
	names := make([]string, len(acc.Teams))
	for i, t := range acc.Teams {
		names[i] = t.Name
	}
	return names
}

// teamSums adds the users' GPU-hours and kWh of a window up by team
// (noTeam for the users in none); a team none of whose members' energy
// is known has no kWh.
func teamSums(s *history.Summary, acc *accounting.Config, window string) (hours, kwh map[string]float64) {
	hours, kwh = map[string]float64{}, map[string]float64{}
	for _, u := range s.Users {
		h := u.GPUHours[window]
		if h <= 0 || math.IsNaN(h) {
			continue
		}
		team := acc.TeamOf(u.User)
		if team == "" {
			team = noTeam
		}
		hours[team] += h
		if e, ok := u.KWh[window]; ok && !math.IsNaN(e) {
			kwh[team] += e
		}
	}
	return hours, kwh
}

// teamBars is each team's GPU-hours over the last `days` days, ranked as
// userBars ranks users; the users in no team are one bar of their own.
func teamBars(s *history.Summary, acc *accounting.Config, days int) (bars []userBar, others int) {
	hours, _ := teamSums(s, acc, strconv.Itoa(days)+"d")
	for name, h := range hours {
		bars = append(bars, userBar{name, h})
	}
	return rankBars(bars)
}
