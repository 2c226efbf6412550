package pagetest

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/render"
)

// The history's part of the page: render's Summary comes from the store,
// which these tests leave out. They build one by hand and write the page
// with render.HTML, as the render command does after reading it.

// historyOf is a month of history for the fleet of fleet(now): alice's
// GPU idle-held for 26 hours, gpu03 down since 5 hours ago with its 8
// GPUs as last seen, the fleet over a day and a week, users (and users,
// the names to put in the plots) over 30 days, and utilization for gpu01's
// and gpu02's GPUs.
func historyOf(now time.Time, users []string) *history.Summary {
	s := &history.Summary{First: now.Add(-30 * 24 * time.Hour), Newest: now, Snapshots: 8640,
		Down:     map[string]*history.HostState{"gpu03": {DownSince: now.Add(-5 * time.Hour).Unix(), LastUp: now.Add(-5*time.Hour - 5*time.Minute).Unix()}},
		UserDays: map[string][]float64{}, Util: map[history.GPURef][]float64{}}
	for i := range 8 {
		s.Down["gpu03"].GPUs = append(s.Down["gpu03"].GPUs, history.KnownGPU{ID: fmt.Sprint(i), Name: "NVIDIA A100-SXM4-80GB"})
	}
	s.IdleHeld = []history.Spell{{Host: "gpu01", GPU: "1", Users: []string{"alice"}, Start: now.Unix() - 26*3600 - 600, Last: now.Unix(), MemMiB: 31220}}
	for i := 287; i >= 0; i-- {
		if i >= 100 && i < 112 {
			continue // render did not run for an hour
		}
		busy := math.Round(5 + 3*math.Sin(float64(i)/30))
		s.Fleet24h = append(s.Fleet24h, history.FleetPoint{Time: now.Add(-time.Duration(i) * 5 * time.Minute),
			Busy: busy, IdleHeld: 1, Reserved: 1, Failed: 1, Down: 8, Free: 12 - busy})
	}
	hour := now.Truncate(time.Hour)
	for i := 167; i >= 0; i-- {
		busy := 5 + 3*math.Sin(float64(i)/10)
		s.Fleet7d = append(s.Fleet7d, history.FleetPoint{Time: hour.Add(-time.Duration(i) * time.Hour),
			Busy: busy, IdleHeld: 0.5, Reserved: 1, Failed: 1, Down: float64(min(8, i/20)), Free: 12 - busy})
	}
	for i := 29; i >= 0; i-- {
		s.Days = append(s.Days, now.Truncate(24*time.Hour).Add(-time.Duration(i)*24*time.Hour))
	}
	names := append(slices.Clone(users), "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan")
	for u, name := range names {
		hs := make([]float64, 30)
		for i := range hs {
			hs[i] = float64((u*7+i*3)%24) * float64(len(names)-u) / 2
		}
		s.UserDays[name] = hs
	}
	s.Users = s.UsersFromDays(now)
	for i := 23; i >= 0; i-- {
		s.UtilHours = append(s.UtilHours, hour.Add(-time.Duration(i)*time.Hour))
	}
	for _, ref := range []history.GPURef{{Host: "gpu01", GPU: "0"}, {Host: "gpu01", GPU: "1"}, {Host: "gpu02", GPU: "0"}} {
		pts := make([]float64, 24)
		for i := range pts {
			switch {
			case i == 3:
				pts[i] = math.NaN()
			case ref.GPU == "1" && i < 21:
				pts[i] = 0 // idle-held
			default:
				pts[i] = float64((i*13 + len(ref.Host)*7) % 101)
			}
		}
		s.Util[ref] = pts
	}
	return s
}

// renderHistoryPage writes the page of rows with the history sum as the
// render command would, and returns the folder that holds index.html.
func renderHistoryPage(t *testing.T, rows []loaddata.Row, sum *history.Summary, now time.Time) string {
	t.Helper()
	cfg := render.DefaultConfig()
	b := cluster.NewBuilder(cluster.Options{FreeMemMiB: cfg.FreeMemMiB, Ignore: cfg.Ignore, HostNames: cfg.HostNames, GPUNames: cfg.GPUNames, Now: now})
	for i := range rows {
		b.Add(&rows[i])
	}
	rep := &render.Report{Cluster: b.Cluster(), Config: cfg, Now: now, Loc: time.UTC, History: sum}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := render.HTML(bufio.NewWriter(f), rep); err != nil {
		t.Fatal(err)
	}
	return dir
}

func openHistory(t *testing.T, o tabOptions, users []string) *tab {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	url := serve(t, renderHistoryPage(t, fleet(now), historyOf(now, users), now))
	tb := newTab(t, o)
	tb.load(url)
	return tb
}

func TestHistoryIsShown(t *testing.T) {
	tb := openHistory(t, tabOptions{}, nil)
	tb.noProblems("loading the page with history")
	type shown struct {
		Plots, Bands, Labels, Bars, IdleRows, Unknown int
		IdleCell, Since                               string
	}
	got := eval[shown](tb, `({
		Plots: document.querySelectorAll("figure.plot svg").length,
		Bands: document.querySelectorAll("figure.plot path:not(.grid)").length,
		Labels: document.querySelectorAll("figure.plot text.lb").length,
		Bars: document.querySelectorAll("figure.plot rect.bar").length,
		IdleRows: document.querySelectorAll("#idleheld tbody tr").length,
		Unknown: document.querySelectorAll('.host[data-host="gpu03"] .gpu[data-state="unknown"]').length,
		IdleCell: (document.querySelector('.host[data-host="gpu01"] .gpu[data-gpu="1"] > .idle') || {}).textContent || "",
		Since: (document.querySelector('.host[data-host="gpu03"] .since') || {}).textContent || "",
	})`)
	if got.Plots != 4 || got.Bands != 10 || got.Labels == 0 || got.Bars != 18 || got.IdleRows != 1 || got.Unknown != 8 {
		t.Errorf("shown: %+v; want 4 plots, 10 bands, some labels, 18 bars, 1 idle-held row, 8 unknown cells", got)
	}
	if got.IdleCell != "idle 26 h" {
		t.Errorf("the idle-held cell says %q, want %q", got.IdleCell, "idle 26 h")
	}
	if !strings.HasPrefix(got.Since, "down since ") || !strings.HasSuffix(got.Since, "(5 h)") {
		t.Errorf("the down host says %q, want down since … (5 h)", got.Since)
	}
	// the idle-held cell's mark is not a colour alone: a dashed frame
	if st := eval[string](tb, `getComputedStyle(document.querySelector('.host[data-host="gpu01"] .gpu[data-gpu="1"]')).outlineStyle`); st != "dashed" {
		t.Errorf("the idle-held cell's outline is %q, want dashed", st)
	}
	// a plot's bands are filled: with a colour or a pattern, none empty
	fills := eval[[]string](tb, `[...document.querySelectorAll("figure.plot path:not(.grid)")].map(e => getComputedStyle(e).fill)`)
	for _, f := range fills {
		if f == "none" || f == "" || f == "rgba(0, 0, 0, 0)" {
			t.Errorf("a band is not filled (%q): %q", f, fills)
		}
	}
	// The sparkline: page.js draws the GPU's 24 hours into its detail.
	sel := `.host[data-host="gpu01"] .gpu[data-gpu="0"]`
	tb.hover(sel)
	tb.waitVisible(sel + aside + " svg.spark")
	if n := eval[int](tb, `document.querySelectorAll(`+jsString(sel+aside+" svg.spark rect")+`).length`); n != 24 {
		t.Errorf("the sparkline has %d bars, want 24", n)
	}
	if n := eval[int](tb, `document.querySelectorAll(`+jsString(sel+aside+" svg.spark rect.q")+`).length`); n != 1 {
		t.Errorf("the sparkline marks %d hours unknown, want 1", n)
	}
	tb.screenshot("history-hover.png", false)
	tb.unhover()
	tb.screenshot("history.png", true)
	tb.noProblems("hovering")
}

func TestHistoryLayouts(t *testing.T) {
	for _, o := range []struct {
		name string
		opt  tabOptions
	}{
		{"history-phone.png", tabOptions{width: 390, height: 844, mobile: true}},
		{"history-dark.png", tabOptions{colorScheme: "dark"}},
		{"history-nojs.png", tabOptions{noScript: true}},
	} {
		t.Run(o.name, func(t *testing.T) {
			tb := openHistory(t, o.opt, nil)
			if sw, iw := eval[int](tb, `document.documentElement.scrollWidth`), eval[int](tb, `innerWidth`); sw > iw+1 {
				t.Errorf("the page scrolls sideways: scrollWidth %d > innerWidth %d", sw, iw)
			}
			if !tb.isVisible("figure.plot svg") || !tb.isVisible("#idleheld") {
				t.Errorf("the plots or the idle-held table are hidden")
			}
			tb.screenshot(o.name, true)
			tb.noProblems(o.name)
		})
	}
}

// User names go into the plots' SVG: as text, whole in the bars' titles,
// running nothing.
func TestHistoryNamesRunNothing(t *testing.T) {
	evil := append(slices.Clone(userPayloads), `]]><script>alert(11)</script>`, `</text></svg><img src=x onerror=alert(12)>`, `<![CDATA[<svg onload=alert(13)>]]>`)
	tb := openHistory(t, tabOptions{xssDetector: true}, evil)
	if hits := eval[[]string](tb, `window.__xss || []`); len(hits) > 0 {
		t.Errorf("a payload ran: %v", hits)
	}
	if n := eval[int](tb, `[...document.querySelectorAll("*")].filter(e => [...e.attributes].some(a => /^on/i.test(a.name))).length + document.querySelectorAll('img, svg script, script:not(:last-of-type)').length`); n != 0 {
		t.Errorf("%d elements or handlers from the names", n)
	}
	titles := eval[string](tb, `[...document.querySelectorAll("figure.plot g > title")].map(e => e.textContent).join("\n")`)
	for _, u := range evil {
		if !strings.Contains(titles, u+": ") {
			t.Errorf("the name %q is not a bar's title, as text", u)
		}
	}
	tb.noProblems("names in the plots")
}
