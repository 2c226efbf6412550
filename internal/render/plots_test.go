package render

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/testenv"
)

// testSummary is a small history for the fixture at testNow, with user
// as one user's name (for the markup tests): gpu01's busy GPU 1 idle-held
// for 26 hours, gpu03 down since 09:10 with its two GPUs as last seen, a
// day of the fleet every 5 minutes (an hour missing) and a week hourly,
// 12 users over 30 days, and gpu01's GPUs' utilization.
func testSummary(user string) *history.Summary {
	now := testNow.Add(-5 * time.Minute)
	s := &history.Summary{First: now.Add(-30 * 24 * time.Hour), Newest: now, Snapshots: 8640,
		Down: map[string]*history.HostState{"gpu03": {DownSince: time.Date(2026, 11, 23, 9, 10, 0, 0, time.UTC).Unix(), LastUp: time.Date(2026, 11, 23, 9, 5, 0, 0, time.UTC).Unix(),
			GPUs: []history.KnownGPU{{ID: "0", Name: "NVIDIA A100-SXM4-80GB"}, {ID: "1", Name: "n" + user}}}},
		UserDays: map[string][]float64{}, Util: map[history.GPURef][]float64{}}
	s.IdleHeld = []history.Spell{{Host: "gpu01", GPU: "1", Users: []string{"alice", user}, Start: now.Unix() - 26*3600 - 300, Last: now.Unix(), MemMiB: 40000}}
	for i := 287; i >= 0; i-- {
		if i >= 100 && i < 112 { // render did not run for an hour
			continue
		}
		k := float64(i)
		busy := math.Round(4 + 2*math.Sin(k/30))
		s.Fleet24h = append(s.Fleet24h, history.FleetPoint{Time: now.Add(-time.Duration(i) * 5 * time.Minute),
			Busy: busy, IdleHeld: 1, Reserved: 1, Failed: 1, Down: 2, Free: 11 - busy})
	}
	hour := now.Truncate(time.Hour)
	for i := 167; i >= 0; i-- {
		busy := 4 + 2*math.Sin(float64(i)/10)
		s.Fleet7d = append(s.Fleet7d, history.FleetPoint{Time: hour.Add(-time.Duration(i) * time.Hour),
			Busy: busy, IdleHeld: 0.5, Reserved: 1, Failed: 1, Down: 1, Free: 12 - busy})
	}
	for i := 29; i >= 0; i-- {
		s.Days = append(s.Days, now.Truncate(24*time.Hour).Add(-time.Duration(i)*24*time.Hour))
	}
	for u := 0; u < 12; u++ {
		name := fmt.Sprintf("user%02d", u)
		if u == 3 {
			name = user
		}
		hs := make([]float64, 30)
		for i := range hs {
			hs[i] = float64((u*7+i*3)%24) * float64(12-u) / 4
		}
		s.UserDays[name] = hs
	}
	s.Users = s.UsersFromDays(now)
	for i := range s.Users { // 0.35 kWh a GPU-hour; efficiency 0, 25, 50, 75 %, unknown for every fifth
		u := &s.Users[i]
		u.KWh, u.Efficiency = map[string]float64{}, map[string]float64{}
		for w, h := range u.GPUHours {
			u.KWh[w] = h * 0.35
			u.Efficiency[w] = float64(i%4) / 4
			if i%5 == 4 {
				u.Efficiency[w] = math.NaN()
			}
		}
	}
	var held float64 // the users' GPU-hours, 50 of them on a model of unknown power
	for _, u := range s.Users {
		held += u.GPUHours["30d"]
	}
	s.Models30d = map[string]history.Figures{
		"NVIDIA A100-SXM4-80GB": {GPUSeconds: (held - 50) * 3600, EnergyJ: (held - 50) * 0.35 * 3.6e6, EnergyKnownSeconds: (held - 50) * 3600},
		"n" + user:              {GPUSeconds: 50 * 3600},
	}
	// per user and model as Models30d: the 50 GPU-hours of unknown power
	// are the user's, the rest A100s at 0.35 kWh a GPU-hour
	s.UserModels30d = map[string]map[string]history.Figures{}
	for _, u := range s.Users {
		h, unknown := u.GPUHours["30d"], 0.0
		if u.User == user {
			unknown = min(h, 50)
		}
		s.UserModels30d[u.User] = map[string]history.Figures{
			"NVIDIA A100-SXM4-80GB": {GPUSeconds: (h - unknown) * 3600, EnergyJ: (h - unknown) * 0.35 * 3.6e6, EnergyKnownSeconds: (h - unknown) * 3600},
		}
		if unknown > 0 {
			s.UserModels30d[u.User]["n"+user] = history.Figures{GPUSeconds: unknown * 3600}
		}
	}
	for i := 23; i >= 0; i-- {
		s.UtilHours = append(s.UtilHours, hour.Add(-time.Duration(i)*time.Hour))
	}
	nan := math.NaN()
	s.Util[history.GPURef{Host: "gpu01", GPU: "0"}] = make([]float64, 24) // all 0: no string
	busy := make([]float64, 24)
	for i := range busy {
		busy[i] = float64(i * 4)
	}
	busy[5] = nan
	s.Util[history.GPURef{Host: "gpu01", GPU: "1"}] = busy
	s.Util[history.GPURef{Host: "gpu01", GPU: "2"}] = slices.Repeat([]float64{97}, 24)
	return s
}

func TestGoldenHistory(t *testing.T) {
	rep := testReport(t, readRows(t, "testdata/load_data.csv"), "testdata/reservations.json")
	rep.History = testSummary("bob")
	rep.Config.Accounting = testAccounting(t, "[accounting]\ncurrency = EUR\nnvidia a100-sxm4-80gb = 2.10\nkwh = 0.30\n[teams]\nvision = user00, bob\nnlp = user01, user02\n")
	var b bytes.Buffer
	if err := HTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, filepath.Join("testdata", "page-history.html.golden"), markupOf(t, b.Bytes()))
	page := b.String()
	for _, s := range []string{
		` data-host=gpu01 data-util=.IJOQYxZgxoxp.w7>`,                                                   // GPU 0 all zero: empty; GPU 3 none: left out
		`<p class=since>down since 2026-11-23 09:10 UTC (5 h)`,                                           // a down host says since when
		`<li class=gpu data-state=unknown data-gpu=1 tabindex=0><p class=why>host down<aside>nbob`,       // and keeps its GPUs
		`<p class=u><b>alice, bob</b> 60G<p class=idle>idle 26 h<aside>`,                                 // the idle-held cell says so
		`<tr><td>gpu01<td>1<td>alice, bob<td>2026-11-22 12:00 UTC<td>26 h 5 min<td>39G`,                  // and the table
		`<span class="down">1 host down</span> (2 GPUs unknown)`,                                         // counted apart
		`<a href="#idle">1 idle-held</a>`,                                                                // the summary links the table
		`data-util-from="2026-11-22 15:00 UTC" data-util-to="2026-11-23 14:00 UTC" data-util-hours="24"`, // the sparklines' span
		`>2026-11-22 14:05 UTC</text>`,                                                                   // the plots' time axis in the page's format
		`<p id="cost">Last 30 days: <b>`,                                                                 // the cost line (TestCostLine checks its figures)
		`<figcaption>GPU-hours per team, last 30 days</figcaption>`,
	} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// Without history the page says so in one line when it is off, and
// nothing when it failed (the page's warning says why).
func TestPageWithoutHistory(t *testing.T) {
	rep := testReport(t, readRows(t, "testdata/load_data.csv"), "")
	for _, tt := range []struct {
		db   string
		want bool
	}{{"", true}, {"history.db", false}} {
		rep.Config.History.DB = tt.db
		var b bytes.Buffer
		if err := HTML(&b, rep); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "History is off"); got != tt.want {
			t.Errorf("db %q: says history is off: %v, want %v", tt.db, got, tt.want)
		}
		for _, s := range []string{"<svg", " data-util=", "<table id=idleheld", "<li class=gpu data-state=unknown"} {
			if strings.Contains(b.String(), s) {
				t.Errorf("db %q: a page without history has %q", tt.db, s)
			}
		}
	}
}

// decodeUtil is page.js's reading of a GPU's utilization string: the
// states of its hours.
func decodeUtil(s string, hours int) []int {
	var pts []int
	last := -1
	for _, ch := range []byte(s) {
		c := strings.IndexByte(utilAlphabet, ch)
		n := 1
		if c >= utilRun {
			n, c = c-utilRun+1, last
		}
		for range n {
			pts = append(pts, c/utilStates, c%utilStates)
		}
		last = c
	}
	for len(pts) < hours {
		pts = append(pts, 0)
	}
	return pts[:hours]
}

func TestUtilString(t *testing.T) {
	nan := math.NaN()
	steady := slices.Repeat([]float64{97}, 24)
	ramp := make([]float64, 24)
	for i := range ramp {
		ramp[i] = float64(i * 5)
	}
	for _, tt := range []struct {
		name string
		pts  []float64
		want string
	}{
		{"all 0: left out", make([]float64, 24), ""},
		{"all unknown: left out", slices.Repeat([]float64{nan}, 24), ""},
		{"busy all day: a character and its repeats", steady, "w7"},
		{"a ramp", ramp, "IQxYxgxoxwy"},
		{"an odd number of hours", []float64{100, 50, 0}, "uH"},
		{"unknown hours", []float64{nan, 100, 100, nan}, "Gq"},
		{"over 100 and negative", []float64{250, -1}, "q"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := string(appendUtil(nil, tt.pts))
			if got != tt.want {
				t.Errorf("appendUtil = %q, want %q", got, tt.want)
			}
			if got == "" {
				return
			}
			want := make([]int, len(tt.pts))
			for i, v := range tt.pts {
				want[i] = utilState(v)
			}
			if back := decodeUtil(got, len(tt.pts)); !slices.Equal(back, want) {
				t.Errorf("read back as %v, want %v", back, want)
			}
		})
	}
}

func TestUserBars(t *testing.T) {
	s := testSummary("bob")
	for _, tt := range []struct {
		days   int
		bars   int
		others int
	}{{7, 11, 2}, {30, 11, 2}} {
		bars, others := userBars(s, tt.days)
		if len(bars) != tt.bars || others != tt.others {
			t.Errorf("%d days: %d bars, %d others; want %d, %d", tt.days, len(bars), others, tt.bars, tt.others)
		}
		for i := 1; i < len(bars)-1; i++ {
			if bars[i].hours > bars[i-1].hours {
				t.Errorf("%d days: bar %d (%v) over bar %d (%v)", tt.days, i, bars[i], i-1, bars[i-1])
			}
		}
		total := 0.0
		for _, b := range bars {
			total += b.hours
		}
		want := 0.0
		for _, hs := range s.UserDays {
			for _, h := range hs[30-tt.days:] {
				want += h
			}
		}
		if math.Abs(total-want) > 1e-9 {
			t.Errorf("%d days: the bars add up to %v, want %v", tt.days, total, want)
		}
	}
}

func TestNiceCeilAndHours(t *testing.T) {
	for _, tt := range []struct{ v, want float64 }{{0, 1}, {1, 1}, {3, 5}, {11, 20}, {8000, 10000}, {7999, 10000}, {2400, 2500}} {
		if got := niceCeil(tt.v); got != tt.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
	for _, tt := range []struct {
		h    float64
		want string
	}{{0.44, "0.4 GPU-h"}, {12.4, "12 GPU-h"}, {1234.5, "1,235 GPU-h"}, {1234567, "1,234,567 GPU-h"}} {
		if got := hoursText(tt.h); got != tt.want {
			t.Errorf("hoursText(%v) = %q, want %q", tt.h, got, tt.want)
		}
	}
}
