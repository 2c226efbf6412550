// Package accounting is a STUB standing in for the accounting package of
// issue 22 while it is written on another branch: only the names render's
// page and metrics use, with the contract's meaning. Drop this file at the
// merge; nothing else in it is meant to survive.
package accounting

import (
	"math"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/inifile"
)

// GroupLookup names a unix group's members (stub: unused).
type GroupLookup func(group string) ([]string, error)

// Team is a [teams] entry.
type Team struct {
	Name    string
	Members []string
	Lead    string
}

// Config is [accounting] and [teams] of config.ini.
type Config struct {
	Currency string
	Teams    []Team

	// exported only so that cmp.Diff can compare a render.Config
	GPUHourPrice map[string]float64 // by lower-case model
	DefaultPrice float64
	KWhPrice     float64
	HasDefault   bool
	HasKWh       bool
}

// Read reads [accounting] (currency, default, kwh, a price per GPU-hour
// per model) and [teams] (name = members).
func Read(f *inifile.File, _ GroupLookup) (Config, error) {
	var c Config
	acc := f.Section("accounting")
	for _, k := range acc.Keys() {
		v, _ := acc.String(k)
		switch k {
		case "currency":
			c.Currency = v
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 0 || math.IsNaN(n) {
			return c, acc.ErrorAt(k, "%q is not a price", v)
		}
		switch k {
		case "default":
			c.DefaultPrice, c.HasDefault = n, true
		case "kwh":
			c.KWhPrice, c.HasKWh = n, true
		default:
			if c.GPUHourPrice == nil {
				c.GPUHourPrice = map[string]float64{}
			}
			c.GPUHourPrice[strings.ToLower(k)] = n
		}
	}
	teams := f.Section("teams")
	for _, k := range teams.Keys() {
		members, _ := teams.List(k)
		c.Teams = append(c.Teams, Team{Name: k, Members: members})
	}
	return c, nil
}

// TeamOf is the user's team, "" when in none.
func (c *Config) TeamOf(user string) string {
	for _, t := range c.Teams {
		for _, m := range t.Members {
			if m == user {
				return t.Name
			}
		}
	}
	return ""
}

// LeadOf is the team's lead, "" when none.
func (c *Config) LeadOf(team string) string {
	for _, t := range c.Teams {
		if t.Name == team {
			return t.Lead
		}
	}
	return ""
}

// Priced reports whether any price is set.
func (c *Config) Priced() bool {
	return c.HasDefault || c.HasKWh || len(c.GPUHourPrice) > 0
}

// CostOf is the cost of gpuHours on model and kwh; ok is false when no
// price applies.
func (c *Config) CostOf(model string, gpuHours, kwh float64) (cost float64, ok bool) {
	p, priced := c.GPUHourPrice[strings.ToLower(model)]
	if !priced && c.HasDefault {
		p, priced = c.DefaultPrice, true
	}
	if priced {
		cost += p * gpuHours
	}
	if c.HasKWh {
		cost += c.KWhPrice * kwh
	}
	return cost, priced || c.HasKWh
}
