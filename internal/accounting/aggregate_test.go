package accounting

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpumon/gpumon/internal/history"
)

const (
	h100 = "NVIDIA H100 80GB HBM3"
	a100 = "NVIDIA A100-SXM4-80GB" // no price: unpriced GPU-hours
)

// testLedger is a hand-made span: alice on an H100 and an A100 (a MIG
// instance: no utilization; power known for half of it), bob sharing an
// H100 with her half an hour (1/2 of the GPU to each), carol in no team,
// idlemon's job.
func testLedger() *history.Ledger {
	return &history.Ledger{
		Users: []history.LedgerRow{
			{User: "alice", Account: "proj1", Model: h100, Figures: history.Figures{GPUSeconds: 7200,
				EffSeconds: 3600, EffKnownSeconds: 7200, MemSeconds: 1800, MemKnownSeconds: 7200,
				EnergyJ: 3.6e6, EnergyKnownSeconds: 7200, IdleHeldSeconds: 1800, UnreservedSeconds: 900}},
			{User: "alice", Account: "proj2", Model: a100, Figures: history.Figures{GPUSeconds: 3600,
				EnergyJ: 1.8e6, EnergyKnownSeconds: 1800}},
			{User: "bob", Account: "proj1", Model: h100, Figures: history.Figures{GPUSeconds: 1800,
				EffSeconds: 900, EffKnownSeconds: 1800, EnergyJ: 0.9e6, EnergyKnownSeconds: 1800}},
			{User: "carol", Model: h100, Figures: history.Figures{GPUSeconds: 3600,
				EffSeconds: 3600, EffKnownSeconds: 3600, EnergyJ: 7.2e6, EnergyKnownSeconds: 3600}},
			{User: history.IdleJobUser, Model: h100, Figures: history.Figures{GPUSeconds: 3600,
				EffSeconds: 3600, EffKnownSeconds: 3600, EnergyJ: 3.6e6, EnergyKnownSeconds: 3600}},
		},
		Jobs: []history.LedgerRow{
			{User: "alice", Account: "proj1", Job: "101", Model: h100, Figures: history.Figures{GPUSeconds: 3600,
				EffSeconds: 1800, EffKnownSeconds: 3600, EnergyJ: 1.8e6, EnergyKnownSeconds: 3600}},
			{User: "alice", Account: "proj1", Job: "101", Model: a100, Figures: history.Figures{GPUSeconds: 3600}},
			{User: "bob", Account: "proj1", Job: "102", Model: h100, Figures: history.Figures{GPUSeconds: 1800,
				EffSeconds: 900, EffKnownSeconds: 1800, EnergyJ: 0.9e6, EnergyKnownSeconds: 1800}},
		},
		Hosts: []history.HostRow{
			{Host: "gpu1", Model: h100, GPUSeconds: 8 * 3600, HeldSeconds: 4 * 3600, EffSeconds: 7200, EffKnownSeconds: 8 * 3600,
				EnergyJ: 3.6e7, EnergyKnownSeconds: 8 * 3600, UnheldEnergyJ: 1.44e7},
			{Host: "gpu2", Model: a100, GPUSeconds: 7200, HeldSeconds: 3600},
		},
	}
}

// pricedConfig: 2 per H100-hour, nothing for other models, 0.5 per kWh,
// 400 g of CO2 per kWh; vision and nlp teams.
func pricedConfig() *Config {
	return &Config{
		Currency: "EUR", KWhPrice: 0.5, HasKWhPrice: true, CO2GPerKWh: 400, HasCO2: true,
		GPUHourPrices: []ModelPrice{{Model: "h100", PerHour: 2}},
		Teams:         []Team{{Name: "vision", Members: []string{"alice", "dave"}}, {Name: "nlp", Members: []string{"bob"}}},
	}
}

var nan = math.NaN()

// line is a Line priced by pricedConfig: HasCost, HasCO2 and HeldHours
// (= GPUHours) filled in.
func line(l Line) Line {
	l.HasCost, l.HasCO2 = true, true
	if l.HeldHours == 0 {
		l.HeldHours = l.GPUHours
	}
	return l
}

// The figures by hand: cost = GPU-hours × 2 on H100s + kWh × 0.5; CO2 =
// kWh × 0.4 kg; efficiency = effective / known seconds; coverage = known
// energy seconds / GPU-seconds.
func TestAggregate(t *testing.T) {
	alice := line(Line{Key: "alice", GPUHours: 3, EffHours: 1, Efficiency: 0.5, IdleHeldHours: 0.5, UnreservedHours: 0.25,
		MemShare: 0.25, KWh: 1.5, KWhCoverage: 9000.0 / 10800, Cost: 2*2 + 1.5*0.5, UnpricedGPUHours: 1, CO2Kg: 0.6})
	bob := line(Line{Key: "bob", GPUHours: 0.5, EffHours: 0.25, Efficiency: 0.5, MemShare: nan, KWh: 0.25, KWhCoverage: 1,
		Cost: 0.5*2 + 0.25*0.5, CO2Kg: 0.1})
	carol := line(Line{Key: "carol", GPUHours: 1, EffHours: 1, Efficiency: 1, MemShare: nan, KWh: 2, KWhCoverage: 1,
		Cost: 2 + 1, CO2Kg: 0.8})
	idle := line(Line{Key: history.IdleJobUser, GPUHours: 1, EffHours: 1, Efficiency: 1, MemShare: nan, KWh: 1, KWhCoverage: 1,
		Cost: 2 + 0.5, CO2Kg: 0.4})
	rekey := func(l Line, key string) Line { l.Key = key; return l }
	for _, tt := range []struct {
		by   By
		want []Line
	}{
		{ByUser, []Line{alice, carol, idle, bob}},
		// carol is in no team; idlemon's job in none either, under its name
		{ByTeam, []Line{rekey(alice, "vision"), rekey(carol, ""), idle, rekey(bob, "nlp")}},
		// carol's account is none; idlemon's job is no account's either
		{ByAccount, []Line{
			line(Line{Key: "proj1", GPUHours: 2.5, EffHours: 1.25, Efficiency: 0.5, IdleHeldHours: 0.5, UnreservedHours: 0.25,
				MemShare: 0.25, KWh: 1.25, KWhCoverage: 1, Cost: 2.5*2 + 1.25*0.5, CO2Kg: 0.5}),
			rekey(carol, ""),
			idle, // no account's
			line(Line{Key: "proj2", GPUHours: 1, Efficiency: nan, MemShare: nan, KWh: 0.5, KWhCoverage: 0.5,
				Cost: 0.25, UnpricedGPUHours: 1, CO2Kg: 0.2}),
		}},
		{ByModel, []Line{
			line(Line{Key: h100, GPUHours: 4.5, EffHours: 3.25, Efficiency: 3.25 / 4.5, IdleHeldHours: 0.5, UnreservedHours: 0.25,
				MemShare: 0.25, KWh: 4.25, KWhCoverage: 1, Cost: 4.5*2 + 4.25*0.5, CO2Kg: 1.7}),
			line(Line{Key: a100, GPUHours: 1, Efficiency: nan, MemShare: nan, KWh: 0.5, KWhCoverage: 0.5,
				Cost: 0.25, UnpricedGPUHours: 1, CO2Kg: 0.2}),
		}},
		// job 101 ran on an H100 and an A100: one line, its user's
		{ByJob, []Line{
			line(Line{Key: "101", User: "alice", Account: "proj1", GPUHours: 2, EffHours: 0.5, Efficiency: 0.5, MemShare: nan,
				KWh: 0.5, KWhCoverage: 0.5, Cost: 2 + 0.25, UnpricedGPUHours: 1, CO2Kg: 0.2}),
			line(Line{Key: "102", User: "bob", Account: "proj1", GPUHours: 0.5, EffHours: 0.25, Efficiency: 0.5, MemShare: nan,
				KWh: 0.25, KWhCoverage: 1, Cost: 1 + 0.125, CO2Kg: 0.1}),
		}},
		{ByHost, []Line{
			line(Line{Key: "gpu1", GPUHours: 8, HeldHours: 4, EffHours: 2, Efficiency: 0.25, MemShare: nan, KWh: 10, KWhCoverage: 1,
				UnheldKWh: 4, Cost: 8*2 + 10*0.5, CO2Kg: 4}),
			line(Line{Key: "gpu2", GPUHours: 2, HeldHours: 1, Efficiency: nan, MemShare: nan, KWhCoverage: 0,
				UnpricedGPUHours: 2}),
		}},
	} {
		t.Run(string(tt.by), func(t *testing.T) {
			got := Aggregate(testLedger(), tt.by, pricedConfig())
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateNaNs(), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
		})
	}
}

// Without prices the lines go by GPU-hours, then key, and say no cost;
// without a CO2 figure, no CO2.
func TestAggregateUnpriced(t *testing.T) {
	c := &Config{}
	got := Aggregate(testLedger(), ByUser, c)
	var keys []string
	for _, l := range got {
		keys = append(keys, l.Key)
		if l.HasCost || l.Cost != 0 || l.UnpricedGPUHours != 0 || l.HasCO2 || l.CO2Kg != 0 {
			t.Errorf("%s: cost %v (%v), unpriced %v, CO2 %v (%v); want none", l.Key, l.Cost, l.HasCost, l.UnpricedGPUHours, l.CO2Kg, l.HasCO2)
		}
	}
	// carol and the idle-time job tie at 1 GPU-hour: by key
	if want := []string{"alice", history.IdleJobUser, "carol", "bob"}; !cmp.Equal(keys, want) {
		t.Errorf("order %q, want %q", keys, want)
	}
	// without teams, everyone is in none; idlemon's job keeps its name
	byTeam := Aggregate(testLedger(), ByTeam, c)
	if len(byTeam) != 2 || byTeam[0].Key != "" || byTeam[0].GPUHours != 4.5 || byTeam[1].Key != history.IdleJobUser {
		t.Errorf("by team without teams: %+v; want (no team) with 4.5 GPU-hours, then the idle-time job", byTeam)
	}
}

func TestAggregateEmpty(t *testing.T) {
	for _, by := range Bys {
		got := Aggregate(&history.Ledger{}, by, pricedConfig())
		if got == nil || len(got) != 0 {
			t.Errorf("by %s over an empty ledger: %#v; want no lines (and not nil: JSON's [])", by, got)
		}
	}
}

func TestParseBy(t *testing.T) {
	for _, b := range Bys {
		if got, err := ParseBy(string(b)); got != b || err != nil {
			t.Errorf("ParseBy(%s) = %q, %v", b, got, err)
		}
	}
	_, err := ParseBy("users")
	if err == nil || !strings.Contains(err.Error(), "want user, team, job, account, model, host") {
		t.Errorf("ParseBy(users): %v; want the choices", err)
	}
}

// A month of a big lab's ledger: 2,000 users in 50 teams on 3 models, and
// 100,000 jobs. Aggregate's part of -usage 30d -by team must be small
// beside the database's.
func BenchmarkAggregate(b *testing.B) {
	l := &history.Ledger{}
	c := pricedConfig()
	c.Teams = nil
	models := []string{h100, a100, "AMD Instinct MI300X"}
	for u := range 2000 {
		user := fmt.Sprintf("user%04d", u)
		if u%40 == 0 {
			c.Teams = append(c.Teams, Team{Name: fmt.Sprintf("team%02d", u/40)})
		}
		c.Teams[len(c.Teams)-1].Members = append(c.Teams[len(c.Teams)-1].Members, user)
		for _, m := range models {
			l.Users = append(l.Users, history.LedgerRow{User: user, Account: fmt.Sprintf("acct%d", u%30), Model: m,
				Figures: history.Figures{GPUSeconds: 3600, EffSeconds: 1800, EffKnownSeconds: 3600, EnergyJ: 1e6, EnergyKnownSeconds: 3600}})
		}
	}
	for j := range 100000 {
		l.Jobs = append(l.Jobs, history.LedgerRow{User: fmt.Sprintf("user%04d", j%2000), Job: strconv.Itoa(j), Model: models[j%3],
			Figures: history.Figures{GPUSeconds: 3600, EnergyJ: 1e6, EnergyKnownSeconds: 3600}})
	}
	for _, by := range []By{ByTeam, ByJob} {
		b.Run(string(by), func(b *testing.B) {
			for b.Loop() {
				Aggregate(l, by, c)
			}
		})
	}
}
