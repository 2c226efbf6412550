package pagetest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/render"
)

// liveSite is a served folder that render writes again and again, as cron
// does, with refresh = 1 s: an open page updates itself in place.
type liveSite struct {
	dir, www string
}

func newLiveSite(t *testing.T) *liveSite {
	t.Helper()
	s := &liveSite{dir: t.TempDir()}
	s.www = filepath.Join(s.dir, "www")
	if err := os.Mkdir(s.www, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "config.ini"), []byte("[render]\nrefresh = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// render writes the site of rows, as render's cron run does.
func (s *liveSite) render(t *testing.T, rows []loaddata.Row) {
	t.Helper()
	csv := filepath.Join(s.dir, "load_data.csv")
	if err := loaddata.WriteFile(csv, rows); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	args := []string{"-i", csv, "-o", filepath.Join(s.www, "index.html"), "-c", filepath.Join(s.dir, "config.ini")}
	if err := render.Main(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("render: %v\n%s", err, &stderr)
	}
}

// moveTo moves the site's files into to's, the state last, as render
// writes them.
func (s *liveSite) moveTo(t *testing.T, to *liveSite) {
	t.Helper()
	pages, _ := filepath.Glob(filepath.Join(s.www, "groups", "*.html"))
	for _, rel := range append(pages, filepath.Join(s.www, "index.html"), filepath.Join(s.www, render.PageState)) {
		rel, _ = filepath.Rel(s.www, rel)
		if err := os.Rename(filepath.Join(s.www, rel), filepath.Join(to.www, rel)); err != nil {
			t.Fatal(err)
		}
	}
}

// A page left open across three renders updates in place, with a filter
// set and a GPU's detail open: a GPU turns busy, a host goes down, a new
// host and user appear. The cards that did not change keep their nodes,
// the focused GPU keeps the focus and its detail, the page never reloads.
func TestPageUpdatesInPlace(t *testing.T) {
	s := newLiveSite(t)
	now := time.Now()
	rows := fleet(now)
	s.render(t, rows)
	tb := newTab(t, tabOptions{})
	tb.load(serve(t, s.www) + "#user=alice")
	tb.waitVisible("#filters")
	if v := eval[string](tb, `document.querySelector("#only-user").value`); v != "alice" {
		t.Fatalf("the fragment #user=alice selected %q", v)
	}
	tb.waitHidden(bobGPU)
	if n := eval[int](tb, `document.querySelectorAll('meta[http-equiv="refresh"]').length`); n != 0 {
		t.Errorf("with scripts on, the page has %d meta refresh elements", n)
	}
	eval[bool](tb, `(window.__same = true, document.querySelector('.host[data-host="gpu02"]').__kept = true,
		document.querySelector('.host[data-host="gpu01"]').__kept = true)`)
	tb.tabTo(busyGPU, 10)
	tb.waitVisible(busyGPU + aside)

	// 1: gpu01's free GPU turns busy (alice's second)
	rows = fleet(now.Add(time.Minute))
	rows[0] = withProcess(rows[0], 5151, "alice", "python eval.py", 1000, 60)
	s.render(t, rows)
	tb.waitJS(`document.querySelector(`+jsString(freeGPU)+`).getAttribute("data-state") === "busy"`, "gpu01's GPU 0 to turn busy in place")
	tb.waitJS(`document.querySelector("#summary b").textContent === "0 free"`, "the summary to be swapped")
	if !eval[bool](tb, `document.querySelector('.host[data-host="gpu02"]').__kept === true`) {
		t.Errorf("gpu02's card, unchanged, was replaced")
	}
	if eval[bool](tb, `document.querySelector('.host[data-host="gpu01"]').__kept === true`) {
		t.Errorf("gpu01's card changed but kept its old node")
	}
	if !tb.isVisible(freeGPU) || tb.isVisible(bobGPU) {
		t.Errorf("after the update the filter user=alice is not applied")
	}
	if !eval[bool](tb, `document.activeElement.matches(`+jsString(busyGPU)+`)`) {
		t.Errorf("the focused GPU lost the focus when its card was swapped: %s", eval[string](tb, `document.activeElement.outerHTML.slice(0, 80)`))
	}
	tb.waitVisible(busyGPU + aside)

	// 2: gpu02 goes down
	rows = fleet(now.Add(2 * time.Minute))
	rows[0] = withProcess(rows[0], 5151, "alice", "python eval.py", 1000, 120)
	rows[2] = loaddata.Row{Timestamp: rows[2].Timestamp, Host: "gpu02", HostStatus: hoststatus.Unreachable, HostError: "ssh: connect: no route to host"}
	rows = append(rows[:3], rows[4:]...)
	s.render(t, rows)
	tb.waitJS(`document.querySelector('.host[data-host="gpu02"] .gpu.w') !== null`, "gpu02 to be shown down")

	// 3: a new host, with a new user, after the others
	rows = append(rows, withProcess(gpuRow(rows[0].Timestamp, "gpu04", 0), 99, "carol", "python carol.py", 2000, 30))
	s.render(t, rows)
	tb.waitJS(`[...document.querySelectorAll("#hosts > .host")].map(h => h.dataset.host).join() === "gpu01,gpu02,gpu03,gpu04"`, "gpu04's card to be added last")
	tb.waitJS(`[...document.querySelector("#only-user").options].some(o => o.value === "carol")`, "carol in the user filter")
	if tb.isVisible(`.host[data-host="gpu04"]`) {
		t.Errorf("gpu04 (carol's) is shown under the filter user=alice")
	}
	if !eval[bool](tb, `window.__same === true`) {
		t.Errorf("the page reloaded")
	}
	if txt := eval[string](tb, `document.querySelector("#updated").textContent`); !strings.Contains(txt, "updates in place every 1 s") {
		t.Errorf("after the updates the page says %q", txt)
	}
	if h := eval[string](tb, `location.hash`); h != "#user=alice" {
		t.Errorf("the fragment is %q after the updates, want #user=alice", h)
	}
	tb.screenshot("page-live.png", false)
	tb.noProblems("three updates in place")
}

// Without scripts the page still reloads itself (its <meta refresh> is in
// <noscript>, which a page without scripts reads).
func TestPageWithoutScriptsReloads(t *testing.T) {
	s := newLiveSite(t)
	rows := fleet(time.Now())
	s.render(t, rows)
	tb := newTab(t, tabOptions{noScript: true})
	tb.load(serve(t, s.www))
	rows[0] = withProcess(rows[0], 5151, "alice", "python eval.py", 1000, 60)
	s.render(t, rows)
	// a reload interrupts an evaluation: each try is its own
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		busy, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`(document.querySelector(`+jsString(freeGPU)+`) || {}).getAttribute?.("data-state") === "busy"`))
		if err == nil && busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("without scripts, the page did not reload to show gpu01's GPU 0 busy (last error %v)", err)
		}
		<-tick.C
	}
}

// Updates that fail say so, apart from stale data.
func TestUpdatesStoppedSaysWhy(t *testing.T) {
	s := newLiveSite(t)
	s.render(t, fleet(time.Now()))
	tb := newTab(t, tabOptions{})
	tb.load(serve(t, s.www))
	if err := os.Remove(filepath.Join(s.www, render.PageState)); err != nil {
		t.Fatal(err)
	}
	tb.waitVisible("#stopped")
	if txt := eval[string](tb, `document.querySelector("#stopped").innerText`); !strings.Contains(txt, "HTTP 404") || !strings.Contains(txt, "Updates stopped") {
		t.Errorf("the banner says %q, want why updates stopped (HTTP 404)", txt)
	}
	if tb.isVisible("#stale") {
		t.Errorf("fresh data is called stale when only updates failed")
	}
	tb.takeProblems() // the 404s
}

// Escape closes a GPU's detail and leaves the focus on its cell; Tab away
// and back opens it again.
func TestEscapeClosesTheDetail(t *testing.T) {
	tb := openFleet(t, tabOptions{}, fleet(time.Now()))
	tb.tabTo(busyGPU, 10)
	tb.waitVisible(busyGPU + aside)
	if err := chromedp.Do(tb.ctx, chromedp.KeyEvent(kb.Escape)); err != nil {
		t.Fatal(err)
	}
	tb.waitHidden(busyGPU + aside)
	if !eval[bool](tb, `document.activeElement.matches(`+jsString(busyGPU)+`)`) {
		t.Errorf("Escape moved the focus away from the cell")
	}
	tb.tabTo(bobGPU, 10)
	tb.waitVisible(bobGPU + aside)
	tb.noProblems("Escape")
}

// The scheme toggle forces the light or the dark palette whatever the
// system says, and the browser remembers it.
func TestSchemeToggle(t *testing.T) {
	tb := openFleet(t, tabOptions{colorScheme: "dark"}, fleet(time.Now()))
	auto := tb.pageBackground()
	click := func(want string) {
		t.Helper()
		if err := chromedp.Do(tb.ctx, chromedp.Click(chromedp.CSS("#scheme"))); err != nil {
			t.Fatal(err)
		}
		tb.waitJS(`document.querySelector("#scheme").textContent === `+jsString("colours: "+want), "the toggle to say "+want)
	}
	click("light")
	light := tb.pageBackground()
	if (light != rgba{255, 255, 255, 1}) || eval[string](tb, `document.documentElement.dataset.scheme`) != "light" {
		t.Errorf("forced light on a dark system: background %v, want white", light)
	}
	tb.screenshot("scheme-light-on-dark.png", false)
	click("dark")
	if dark := tb.pageBackground(); dark != auto {
		t.Errorf("forced dark %v differs from the system's dark %v", dark, auto)
	}
	if err := chromedp.Do(tb.ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	tb.waitJS(`document.readyState === "complete" && document.documentElement.dataset.scheme === "dark"`, "the choice to be remembered")
	click("automatic")
	if tb.pageBackground() != auto {
		t.Errorf("automatic is not the system's scheme")
	}
	tb.noProblems("the scheme toggle")
}

// The search box finds GPUs by what their cells say, and the fragment
// carries it.
func TestSearchFilter(t *testing.T) {
	s := newLiveSite(t)
	s.render(t, fleet(time.Now()))
	tb := newTab(t, tabOptions{})
	tb.load(serve(t, s.www) + "#q=torchrun")
	tb.waitVisible(bobGPU)
	tb.waitHidden(busyGPU)
	tb.waitHidden(`.host[data-host="gpu01"]`)
	eval[bool](tb, `(location.hash = "#q=gpu01&state=free", true)`)
	tb.waitVisible(freeGPU)
	tb.waitHidden(busyGPU)
	if !eval[bool](tb, `document.querySelector("#only-free").checked`) {
		t.Errorf("state=free does not check only free GPUs")
	}
	// an anchor is an anchor, not a filter
	eval[bool](tb, `(location.hash = "#gpu03", true)`)
	tb.waitJS(`location.hash === "#gpu03"`, "the anchor to stay")
	tb.noProblems("searching")
}

// An in-place update of a group page of the 1,000-host fleet with 50
// cards changed keeps every other card's node (asserted) and costs little
// main-thread time (logged: a bound would flake on a loaded machine),
// next to what a reload of the page costs.
func TestInPlaceUpdateCost(t *testing.T) {
	s := newLiveSite(t)
	rows := scaleFleet(1000)
	s.render(t, rows)
	groups, err := filepath.Glob(filepath.Join(s.www, "groups", "*.html"))
	if err != nil || len(groups) == 0 {
		t.Fatalf("no group pages: %v", err)
	}
	url := strings.TrimSuffix(serve(t, s.www), "/") + "/groups/" + filepath.Base(groups[0])
	tb := newTab(t, tabOptions{})
	tb.enableMetrics()
	tb.load(url)
	cards := eval[int](tb, `document.querySelectorAll("#hosts > .host").length`)
	first := eval[string](tb, `document.querySelector("#hosts > .host").dataset.host`)
	eval[bool](tb, `(document.querySelectorAll("#hosts > .host").forEach(c => c.__kept = true), true)`)
	v := eval[string](tb, `document.body.dataset.v`)
	// 50 of the page's hosts change their utilization
	changed := 0
	for i := range rows {
		if h := rows[i].Host; h >= first && changed < 50*8 {
			rows[i].GPUUtilPct = loaddata.Num(float64(11 + i%7))
			changed++
		}
	}
	// one evaluation that waits for the update, not a poll: the poll's
	// own work would count as the page's
	eval[bool](tb, `(window.__updated = new Promise(ok => new MutationObserver(ok).observe(document.body, {attributeFilter: ["data-v"]})),
		window.__frames = [], new PerformanceObserver(l => window.__frames.push(...l.getEntries().map(e => JSON.stringify({d: Math.round(e.duration), render: Math.round(e.renderStart ? e.startTime + e.duration - e.renderStart : 0), layout: Math.round(e.styleAndLayoutStart ? e.startTime + e.duration - e.styleAndLayoutStart : 0), scripts: e.scripts.map(x => x.invoker + " " + x.sourceFunctionName + " " + Math.round(x.duration))})))).observe({type: "long-animation-frame"}), true)`)
	// rendered aside and moved in: render's own CPU would slow the tab
	next := newLiveSite(t)
	next.render(t, rows)
	before := tb.idleCPU()
	next.moveTo(t, s)
	if _, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`window.__updated.then(() => true)`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("waiting for the update: %v", err)
	}
	after := tb.idleCPU()
	if v == eval[string](tb, `document.body.dataset.v`) {
		t.Fatalf("the page's hash did not change")
	}
	swapped := eval[int](tb, `[...document.querySelectorAll("#hosts > .host")].filter(c => !c.__kept).length`)
	if swapped != 50 || eval[int](tb, `document.querySelectorAll("#hosts > .host").length`) != cards {
		t.Errorf("%d of %d cards swapped, want the 50 that changed", swapped, cards)
	}
	t.Logf("update in place, %d cards of %d swapped: tasks %.1f ms, style %.1f ms, layout %.1f ms (from render's start to idle); frames over 50 ms: %v",
		swapped, cards, after.Tasks-before.Tasks, after.Style-before.Style, after.Layout-before.Layout, eval[[]string](tb, `window.__frames`))
	if err := chromedp.Do(tb.ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	tb.waitJS(`document.readyState === "complete"`, "the reload")
	after = tb.idleCPU() // a new document: its metrics start anew
	t.Logf("a reload of the same page, until idle: tasks %.1f ms, style %.1f ms, layout %.1f ms", after.Tasks, after.Style, after.Layout)
	tb.noProblems("an update at 1,000 hosts")
}

// idleCPU waits until the tab's main thread is nearly idle (under 20 ms of
// tasks in 500 ms: the page's age ticks each second) and returns its
// metrics then.
func (tb *tab) idleCPU() cpu {
	tb.t.Helper()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := tb.cpu()
	for i := 0; i < 40; i++ {
		<-tick.C
		c := tb.cpu()
		if c.Tasks-last.Tasks < 20 {
			return c
		}
		last = c
	}
	tb.t.Fatalf("the tab did not go idle in 20 s")
	return last
}

// The overview of a big fleet updates in place too, its host search kept
// and applied to the new boxes.
func TestOverviewUpdatesInPlace(t *testing.T) {
	s := newLiveSite(t)
	rows := scaleFleet(1000)
	s.render(t, rows)
	tb := newTab(t, tabOptions{})
	tb.load(serve(t, s.www) + "#q=gpu-000")
	tb.waitJS(`document.querySelector("#shown").textContent === "10 of 1000 hosts match"`, "the host search from the fragment")
	eval[bool](tb, `(window.__same = true)`)
	for i := range rows[:8] {
		rows[i] = withProcess(rows[i], int64(7000+i), "dave", "python dave.py", 1000, 60)
	}
	s.render(t, rows)
	tb.waitJS(`document.querySelector("#users").innerText.includes("dave")`, "dave in the overview's users table")
	tb.waitJS(`document.querySelector("#overview .ck > a").title.includes("8 busy")`, "gpu-0000's box to show 8 busy")
	if got := eval[string](tb, `document.querySelector("#q").value + " / " + document.querySelector("#shown").textContent`); got != "gpu-000 / 10 of 1000 hosts match" {
		t.Errorf("after the update the search is %q", got)
	}
	if !eval[bool](tb, `window.__same === true`) {
		t.Errorf("the overview reloaded")
	}
	tb.noProblems("the overview's update")
}

// Why the page's meta refresh is in <noscript>: chromium still follows one
// that a script removes from the DOM after parsing, and does not follow
// one in <noscript> while scripts run. The first half also shows that the
// test sees a meta refresh's reload.
func TestMetaRefreshRemovedStillFires(t *testing.T) {
	const page = `<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">HEAD</head>
<body><script>document.querySelectorAll('meta[http-equiv="refresh"]').forEach(m => m.remove());</script></body></html>`
	reloads := func(head string) bool {
		tb := newTab(t, tabOptions{})
		tb.load(servePage(t, strings.Replace(page, "HEAD", head, 1)))
		start := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for time.Since(start) < 3*time.Second { // the refresh is due after 1 s
			same, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`performance.getEntriesByType("navigation")[0].type === "reload"`))
			if err == nil && same {
				return true
			}
			<-tick.C
		}
		return false
	}
	if !reloads(`<meta http-equiv="refresh" content="1">`) {
		t.Errorf("no reload seen from a meta refresh removed after parsing: chromium changed, or the test sees no reload")
	}
	if reloads(`<noscript><meta http-equiv="refresh" content="1"></noscript>`) {
		t.Errorf("a meta refresh in <noscript> fired with scripts on")
	}
}

// A detail open under the pointer stays open when its card is swapped.
func TestHoveredDetailSurvivesAnUpdate(t *testing.T) {
	s := newLiveSite(t)
	now := time.Now()
	s.render(t, fleet(now))
	tb := newTab(t, tabOptions{})
	tb.load(serve(t, s.www))
	tb.hover(busyGPU)
	tb.waitVisible(busyGPU + aside)
	rows := fleet(now)
	rows[0] = withProcess(rows[0], 5151, "alice", "python eval.py", 1000, 60)
	s.render(t, rows)
	tb.waitJS(`document.querySelector(`+jsString(freeGPU)+`).getAttribute("data-state") === "busy"`, "gpu01's card to be swapped")
	tb.waitVisible(busyGPU + aside)
	tb.noProblems("hovering across an update")
}

// An open page of another gpumon build reloads, for its new script.
func TestNewBuildReloads(t *testing.T) {
	s := newLiveSite(t)
	s.render(t, fleet(time.Now()))
	tb := newTab(t, tabOptions{})
	tb.load(serve(t, s.www))
	eval[bool](tb, `(window.__same = true)`)
	path := filepath.Join(s.www, render.PageState)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	build := eval[string](tb, `document.body.dataset.build`)
	if !bytes.Contains(b, []byte(`"build":"`+build+`"`)) {
		t.Fatalf("page-state.json lacks the page's build %q: %s", build, b)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(build), []byte("newbuild"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		same, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`window.__same === true`))
		if err == nil && !same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page of an older build did not reload")
		}
		<-tick.C
	}
	// once: the state still names another build, the page updates in place
	tb.waitJS(`document.readyState === "complete"`, "the reload")
	eval[bool](tb, `(window.__same = true)`)
	tb.waitJS(`performance.getEntriesByType("resource").filter(e => e.name.endsWith("/page-state.json")).length >= 3`, "three fetches of the state")
	if !eval[bool](tb, `window.__same === true`) {
		t.Errorf("the page reloaded again for the same build")
	}
}
