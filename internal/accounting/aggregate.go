package accounting

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpumon/gpumon/internal/history"
)

// By is what a report's lines are per.
type By string

// The lines of a report: per user, team, Slurm job, Slurm account, GPU
// model or host.
const (
	ByUser    By = "user"
	ByTeam    By = "team"
	ByJob     By = "job"
	ByAccount By = "account"
	ByModel   By = "model"
	ByHost    By = "host"
)

// Bys are every By, in the order a usage message lists them.
var Bys = []By{ByUser, ByTeam, ByJob, ByAccount, ByModel, ByHost}

// ParseBy reads a By; an error lists the choices.
func ParseBy(s string) (By, error) {
	if i := slices.Index(Bys, By(s)); i >= 0 {
		return Bys[i], nil
	}
	names := make([]string, len(Bys))
	for i, b := range Bys {
		names[i] = string(b)
	}
	return "", fmt.Errorf("%q: want %s", s, strings.Join(names, ", "))
}

// Line is one line of a report: the figures of a user, team, job, account,
// model or host over the ledger's span.
type Line struct {
	// Key is the user, team, job id, account, model or host; "" for
	// no team or no account. history.IdleJobUser's rows keep that name
	// by user, team and account.
	Key string
	// User and Account of a job (ByJob only).
	User, Account string

	GPUHours float64
	// HeldHours is what someone held of a host's GPU-hours (ByHost); else
	// GPUHours.
	HeldHours float64
	// EffHours are the utilization-weighted GPU-hours; Efficiency is
	// EffHours over the GPU-hours whose utilization was known, 0..1, NaN
	// when none was.
	EffHours, Efficiency float64
	IdleHeldHours        float64
	UnreservedHours      float64
	// MemShare is the share of the GPUs' memory used, 0..1, NaN when
	// unknown (always, ByHost).
	MemShare float64
	// KWh is the energy where power was known; KWhCoverage the share of
	// the GPU-hours it covers, 0..1 (1 for a line of no GPU-hours).
	KWh, KWhCoverage float64
	// UnheldKWh is the energy of a host's GPUs nobody held (ByHost).
	UnheldKWh float64

	// Cost, when HasCost (a price is set): CostOf's over each model.
	// UnpricedGPUHours are the GPU-hours on models without a price, which
	// Cost leaves out.
	Cost             float64
	HasCost          bool
	UnpricedGPUHours float64
	// CO2Kg is KWh's CO2, when HasCO2 ([accounting] co2_g_per_kwh is set).
	CO2Kg  float64
	HasCO2 bool
}

// sums are a line's figures being added up.
type sums struct {
	line                 Line
	fig                  history.Figures
	cost, unpriced, held float64
	unheldJ              float64
	named                bool // User and Account are set
}

// Aggregate adds the ledger's figures up per by, sorted by cost (when a
// price is set), else GPU-hours, the largest first, then by key. Users
// in no team are under the team "". A By that is none of Bys is ByUser.
func Aggregate(l *history.Ledger, by By, c *Config) []Line {
	acc := map[string]*sums{}
	cost := c.costCache()
	var keys []string
	get := func(key string) *sums {
		s := acc[key]
		if s == nil {
			s = &sums{line: Line{Key: key}}
			acc[key] = s
			keys = append(keys, key)
		}
		return s
	}
	switch by {
	case ByHost:
		for _, h := range l.Hosts {
			get(h.Host).addHost(h, cost)
		}
	case ByJob:
		for _, r := range l.Jobs {
			s := get(r.Job)
			if !s.named { // a job has one user and account: its first row's
				s.line.User, s.line.Account, s.named = r.User, r.Account, true
			}
			s.addRow(r, cost)
		}
	default:
		teams := c.teamIndex()
		for _, r := range l.Users {
			get(keyOf(r, by, teams)).addRow(r, cost)
		}
	}
	out := make([]Line, 0, len(keys))
	for _, k := range keys {
		out = append(out, acc[k].finish(c, by))
	}
	priced := c.Priced()
	slices.SortFunc(out, func(a, b Line) int {
		if priced {
			if n := cmp.Compare(b.Cost, a.Cost); n != 0 {
				return n
			}
		}
		if n := cmp.Compare(b.GPUHours, a.GPUHours); n != 0 {
			return n
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// keyOf is the line a row of l.Users goes to.
func keyOf(r history.LedgerRow, by By, teams map[string]string) string {
	if r.User == history.IdleJobUser && (by == ByTeam || by == ByAccount) {
		return r.User // the lab's own job: no team's, no account's
	}
	switch by {
	case ByTeam:
		return teams[r.User]
	case ByAccount:
		return r.Account
	case ByModel:
		return r.Model
	}
	return r.User
}

// costFunc is Config.CostOf.
type costFunc func(model string, gpuHours, kwh float64) (float64, bool)

func (s *sums) addRow(r history.LedgerRow, cost costFunc) {
	s.fig.Add(r.Figures)
	s.held += r.GPUSeconds
	s.price(cost, r.Model, r.GPUSeconds, r.EnergyJ)
}

func (s *sums) addHost(h history.HostRow, cost costFunc) {
	s.fig.Add(history.Figures{GPUSeconds: h.GPUSeconds, EffSeconds: h.EffSeconds, EffKnownSeconds: h.EffKnownSeconds,
		EnergyJ: h.EnergyJ, EnergyKnownSeconds: h.EnergyKnownSeconds})
	s.held += h.HeldSeconds
	s.unheldJ += h.UnheldEnergyJ
	s.price(cost, h.Model, h.GPUSeconds, h.EnergyJ)
}

// price adds the cost of gpuSeconds of the model that drew joules.
// (Without any price every GPU-second is unpriced: finish says no cost.)
func (s *sums) price(cost costFunc, model string, gpuSeconds, joules float64) {
	v, ok := cost(model, gpuSeconds/3600, joules/joulesPerKWh)
	s.cost += v
	if !ok {
		s.unpriced += gpuSeconds
	}
}

const joulesPerKWh = 3.6e6

func (s *sums) finish(c *Config, by By) Line {
	f, l := s.fig, s.line
	l.GPUHours = f.GPUSeconds / 3600
	l.HeldHours = s.held / 3600
	l.EffHours = f.EffSeconds / 3600
	l.Efficiency = ratio(f.EffSeconds, f.EffKnownSeconds)
	l.IdleHeldHours = f.IdleHeldSeconds / 3600
	l.UnreservedHours = f.UnreservedSeconds / 3600
	l.MemShare = ratio(f.MemSeconds, f.MemKnownSeconds)
	l.KWh = f.EnergyJ / joulesPerKWh
	l.KWhCoverage = 1
	if f.GPUSeconds > 0 {
		l.KWhCoverage = min(1, f.EnergyKnownSeconds/f.GPUSeconds)
	}
	if by == ByHost {
		l.UnheldKWh = s.unheldJ / joulesPerKWh
	}
	l.Cost, l.HasCost = s.cost, c.Priced()
	if l.HasCost {
		l.UnpricedGPUHours = s.unpriced / 3600
	}
	if c.HasCO2 {
		l.CO2Kg, l.HasCO2 = l.KWh*c.CO2GPerKWh/1000, true
	}
	return l
}

// ratio is a/b, NaN when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}
