package pagetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// The fleet of the page tests: gpu01 with a free GPU and alice's busy one,
// gpu02 with bob's job and a lost GPU, gpu03 unreachable.

const (
	freeGPU   = `.host[data-host="gpu01"] .gpu[data-gpu="0"]`
	busyGPU   = `.host[data-host="gpu01"] .gpu[data-gpu="1"]`
	bobGPU    = `.host[data-host="gpu02"] .gpu[data-gpu="0"]`
	lostGPU   = `.host[data-host="gpu02"] .gpu[data-gpu="1"]`
	aliceCmd  = "python train.py"
	bobCmd    = "torchrun --nproc-per-node 8 finetune.py"
	lostError = "GPU is lost; reboot the system to recover this GPU"

	aside = " > aside" // a cell's detail (hover, focus, tap), after the cell's selector
)

func gpuRow(ts, host string, idx int64) loaddata.Row {
	return loaddata.Row{
		Timestamp: ts, Host: host, HostStatus: hoststatus.OK,
		GPUIndex: loaddata.IntOf(idx), GPUUUID: fmt.Sprintf("GPU-%s-%d", host, idx),
		GPUName: "NVIDIA H100 80GB HBM3", GPUBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+idx),
		GPUUtilPct: loaddata.Num(0), MemUtilPct: loaddata.Num(0),
		MemUsedMiB: loaddata.Num(4), MemTotalMiB: loaddata.Num(81559),
		TempC: loaddata.Num(31), PowerW: loaddata.Num(70.5), PowerLimitW: loaddata.Num(700), FanPct: loaddata.Num(30),
		CPUs: loaddata.IntOf(64), Load1: loaddata.Num(2.5),
		HostMemUsedMiB: loaddata.Num(100000), HostMemTotalMiB: loaddata.Num(515000),
	}
}

func withProcess(r loaddata.Row, pid int64, user, cmd string, memMiB float64, elapsed int64) loaddata.Row {
	r.GPUUtilPct, r.MemUtilPct = loaddata.Num(97), loaddata.Num(40)
	r.MemUsedMiB = loaddata.Num(memMiB + 500)
	r.TempC, r.PowerW = loaddata.Num(71), loaddata.Num(612.3)
	r.PID, r.User, r.Command = loaddata.IntOf(pid), user, cmd
	r.ProcessMemMiB, r.ProcessElapsedS = loaddata.Num(memMiB), loaddata.IntOf(elapsed)
	return r
}

func fleet(at time.Time) []loaddata.Row {
	ts := at.UTC().Format(loaddata.TimeFormat)
	lost := loaddata.Row{Timestamp: ts, Host: "gpu02", HostStatus: hoststatus.OK,
		GPUIndex: loaddata.IntOf(1), GPUError: lostError,
		CPUs: loaddata.IntOf(32), Load1: loaddata.Num(8), HostMemUsedMiB: loaddata.Num(9000), HostMemTotalMiB: loaddata.Num(256000)}
	return []loaddata.Row{
		gpuRow(ts, "gpu01", 0),
		withProcess(gpuRow(ts, "gpu01", 1), 4242, "alice", aliceCmd, 30720, 5400),
		withProcess(gpuRow(ts, "gpu02", 0), 777, "bob", bobCmd, 70000, 86400*2+60),
		lost,
		{Timestamp: ts, Host: "gpu03", HostStatus: hoststatus.Unreachable,
			HostError: "dial tcp 10.0.0.3:22: connect: connection refused"},
	}
}

// openFleet renders rows and loads the page in a new tab.
func openFleet(t *testing.T, o tabOptions, rows []loaddata.Row) *tab {
	t.Helper()
	url := serve(t, renderPage(t, rows))
	tb := newTab(t, o)
	tb.load(url)
	return tb
}

func TestPageLoadsCleanAndColoursStates(t *testing.T) {
	tb := openFleet(t, tabOptions{}, fleet(time.Now()))
	tb.noProblems("loading the page")

	// Every GPU is a cell with its state.
	type cell struct{ Host, GPU, State, Tabindex string }
	cells := eval[[]cell](tb, `[...document.querySelectorAll(".gpu")].map(e => ({
		Host: e.closest(".host").dataset.host, GPU: e.dataset.gpu, State: e.dataset.state, Tabindex: e.getAttribute("tabindex")}))`)
	want := map[string]string{"gpu01/0": "free", "gpu01/1": "busy", "gpu02/0": "busy", "gpu02/1": "failed"}
	got := map[string]string{}
	for _, c := range cells {
		got[c.Host+"/"+c.GPU] = c.State
		if c.Tabindex != "0" {
			t.Errorf("GPU %s/%s has tabindex %q, want \"0\" (keyboard users reach it with Tab)", c.Host, c.GPU, c.Tabindex)
		}
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("GPU %s: data-state %q, want %q (all cells: %v)", k, got[k], w, cells)
		}
	}

	// Free and busy look different, not only in their words.
	free, freeImg := tb.background(freeGPU)
	busy, busyImg := tb.background(busyGPU)
	t.Logf("free %v %s; busy %v %s", free, freeImg, busy, busyImg)
	if free.distance(busy) < 30 && freeImg == busyImg {
		t.Errorf("a free and a busy GPU have (nearly) the same background: free %v, busy %v", free, busy)
	}
	if free.A < 0.5 || busy.A < 0.5 {
		t.Errorf("free (%v) or busy (%v) background is (nearly) transparent", free, busy)
	}

	// A failed GPU is grey-ish and says so in a word, not by colour alone.
	failed, _ := tb.background(lostGPU)
	if !failed.greyish() {
		t.Errorf("the failed GPU's background %v is not grey-ish", failed)
	}
	if failed.distance(free) < 25 || failed.distance(busy) < 25 {
		t.Errorf("the failed GPU's background %v is too close to free %v or busy %v", failed, free, busy)
	}
	if txt := eval[string](tb, `document.querySelector(`+jsString(lostGPU)+`).innerText.trim()`); txt == "" {
		t.Errorf("the failed GPU cell shows no text")
	}

	// The unreachable host has a card that says why.
	if st := eval[string](tb, `[...document.querySelectorAll('.host[data-host="gpu03"] .gpu')].map(e => e.dataset.state).join()`); st != "" && st != "failed" {
		t.Errorf("the unreachable host's cells are %q, want failed", st)
	}
	if c := eval[string](tb, `getComputedStyle(document.querySelector('.host[data-host="gpu03"] .gpu'), "::after").content`); c != "none" && c != "normal" {
		t.Errorf("the unreachable host's row shows %s after its text, as a GPU cell would", c)
	}
	host := eval[string](tb, `(document.querySelector('.host[data-host="gpu03"]') || {innerText: "<no .host card>"}).innerText`)
	if !strings.Contains(strings.ToLower(host), "unreachable") && !strings.Contains(host, "connection refused") {
		t.Errorf("host gpu03's card says %q, want it unreachable (or its error)", host)
	}

	// Summary and per-user table.
	for _, sel := range []string{"#summary", "#users"} {
		if !tb.isVisible(sel) {
			t.Errorf("%s is missing or hidden", sel)
		}
	}
	users := eval[string](tb, `(document.querySelector("#users") || {innerText: ""}).innerText`)
	for _, u := range []string{"alice", "bob"} {
		if !strings.Contains(users, u) {
			t.Errorf("the users table lacks %s: %q", u, users)
		}
	}
	if icon := eval[string](tb, `(document.querySelector('link[rel="icon"]') || {}).getAttribute?.call(document.querySelector('link[rel="icon"]'), "href") || ""`); icon != "data:," {
		t.Errorf(`<link rel="icon"> href is %q, want "data:," (no favicon request)`, icon)
	}
	tb.screenshot("page.png", true)
	tb.noProblems("after the checks")
}

func TestHoverShowsWhoHoldsTheGPU(t *testing.T) {
	tb := openFleet(t, tabOptions{}, fleet(time.Now()))
	detail := busyGPU + aside
	tb.unhover()
	if tb.isVisible(detail) {
		t.Errorf("%s is shown before any hover", detail)
	}
	tb.hover(busyGPU)
	tb.waitVisible(detail)
	txt := eval[string](tb, `document.querySelector(`+jsString(detail)+`).innerText`)
	for _, w := range []string{"alice", aliceCmd, "4242"} {
		if !strings.Contains(txt, w) {
			t.Errorf("the hovered busy GPU's detail lacks %q:\n%s", w, txt)
		}
	}
	// The detail is on screen, whole, and not under another cell.
	inView := eval[bool](tb, fmt.Sprintf(`(() => {
		const d = document.querySelector(%s), r = d.getBoundingClientRect();
		if (r.left < 0 || r.top < 0 || r.right > innerWidth || r.bottom > innerHeight) return false;
		const at = document.elementFromPoint(r.left + r.width / 2, r.top + Math.min(10, r.height / 2));
		return !!at && (d === at || d.contains(at));
	})()`, jsString(detail)))
	if !inView {
		t.Errorf("the hovered detail is cut off by the viewport or covered by something else")
	}
	tb.screenshot("page-hover.png", false)

	tb.unhover()
	tb.waitHidden(detail)
	tb.noProblems("hovering")
}

func TestKeyboardFocusShowsWhoHoldsTheGPU(t *testing.T) {
	tb := openFleet(t, tabOptions{}, fleet(time.Now()))
	detail := busyGPU + aside
	tb.tabTo(busyGPU, 60)
	tb.waitVisible(detail)
	txt := eval[string](tb, `document.querySelector(`+jsString(detail)+`).innerText`)
	for _, w := range []string{"alice", aliceCmd} {
		if !strings.Contains(txt, w) {
			t.Errorf("the focused busy GPU's detail lacks %q:\n%s", w, txt)
		}
	}
	// Focus is visible: an outline or a box-shadow on the focused cell.
	ring := eval[string](tb, `(() => { const s = getComputedStyle(document.activeElement);
		return s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0 ? "outline" : (s.boxShadow !== "none" ? "shadow" : ""); })()`)
	if ring == "" {
		t.Errorf("the focused GPU cell has neither an outline nor a box-shadow: keyboard users cannot see where they are")
	}
	// Moving on hides it again.
	tb.tabTo(bobGPU, 60)
	tb.waitHidden(detail)
	tb.waitVisible(bobGPU + aside)
	tb.noProblems("keyboard focus")
}

// Text from load_data.csv is written by anyone who can start a process on
// a GPU host. It must come out as text and run nothing.
var payloads = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	`</style><h1>x`,
	`</script><script>alert(2)</script>`,
	`'><svg onload=alert(3)>`,
	`javascript:alert(4)`,
	`{{.}} ${alert(5)} <!--`,
}

// userPayloads are user names as a hostile host could report them: ps
// prints what /etc/passwd or NSS says.
var userPayloads = []string{
	`a"b'c`,
	"new\nline<script>alert(8)</script>",
	`</b></p><img src=x onerror=alert(9)>`,
	`<b onmouseover=alert(10)>x`,
}

func xssFleet(at time.Time) []loaddata.Row {
	ts := at.UTC().Format(loaddata.TimeFormat)
	var rows []loaddata.Row
	for i, p := range payloads {
		host := fmt.Sprintf("x%02d", i)
		r := withProcess(gpuRow(ts, host, 0), int64(1000+i), p, p, 1024, 60)
		r.GPUName = p
		rows = append(rows, r)
		// the same user on a second GPU, with an ordinary command
		rows = append(rows, withProcess(gpuRow(ts, host, 1), int64(2000+i), p, "python "+p, 2048, 120))
	}
	// user names with quotes, newlines and markup, named on their cells
	for i, u := range userPayloads {
		rows = append(rows, withProcess(gpuRow(ts, "users", int64(i)), int64(3000+i), u, aliceCmd, 1024, 60))
	}
	// markup in a host name, in a failed host's error, and in a lost GPU's error
	rows = append(rows,
		withProcess(gpuRow(ts, "<b>h</b>", 0), 99, "alice", aliceCmd, 512, 30),
		loaddata.Row{Timestamp: ts, Host: "down", HostStatus: hoststatus.Error, HostError: `</style><h1>x <img src=x onerror=alert(6)>`},
		loaddata.Row{Timestamp: ts, Host: "lost", HostStatus: hoststatus.OK, GPUIndex: loaddata.IntOf(0),
			GPUError: `<script>alert(7)</script>`},
	)
	return rows
}

func TestUntrustedTextIsShownAndRunsNothing(t *testing.T) {
	tb := openFleet(t, tabOptions{xssDetector: true}, xssFleet(time.Now()))
	if !eval[bool](tb, `typeof window.alert === "function" && !("__xss" in window)`) {
		t.Fatal("the XSS detector is not in place")
	}
	check := func(when string) {
		t.Helper()
		if hits := eval[[]string](tb, `window.__xss || []`); len(hits) > 0 {
			t.Errorf("%s: a payload ran: %v", when, hits)
		}
		type injected struct{ Img, Svg, H1, Scripts, Handlers int }
		got := eval[injected](tb, `({
			Img: document.querySelectorAll('img[src="x"]').length,
			Svg: document.querySelectorAll('svg[onload]').length,
			H1: [...document.querySelectorAll("h1")].filter(e => e.textContent.trim().startsWith("x")).length,
			Scripts: [...document.scripts].filter(s => /alert\(/.test(s.textContent)).length,
			Handlers: [...document.querySelectorAll("*")].filter(e => [...e.attributes].some(a => /^on/i.test(a.name))).length,
		})`)
		if got != (injected{}) {
			t.Errorf("%s: markup from the CSV became elements: %+v", when, got)
		}
		tb.noProblems(when)
	}
	check("after load")

	// The host name's markup is an attribute value and text, not a <b>.
	if n := eval[int](tb, `[...document.querySelectorAll(".host b, .gpu b")].filter(e => e.textContent === "h").length`); n != 0 {
		t.Errorf("the host name <b>h</b> became a <b> element")
	}
	if n := eval[int](tb, `[...document.querySelectorAll(".host")].filter(e => e.dataset.host === "<b>h</b>").length`); n != 1 {
		t.Errorf("no .host card has data-host=\"<b>h</b>\" (found %d)", n)
	}

	// A user's name on a cell is that name, as text, whole (the style sheet
	// may cut it on screen, not in the document).
	names := eval[[]string](tb, `[...document.querySelectorAll('.host[data-host="users"] .gpu > .u > b')].map(e => e.textContent)`)
	if !slices.Equal(names, userPayloads) {
		t.Errorf("the user names on the cells are %q, want %q", names, userPayloads)
	}
	if n := eval[int](tb, `document.querySelectorAll('.host[data-host="users"] .u *:not(b)').length`); n != 0 {
		t.Errorf("%d elements inside the user lines besides the names' <b>", n)
	}

	// Every payload is shown as text: in the page, or in a GPU's detail
	// while it is hovered.
	shown := eval[string](tb, `document.body.innerText`)
	n := eval[int](tb, `(() => { const g = document.querySelectorAll(".gpu"); g.forEach((e, i) => e.setAttribute("data-pagetest", i)); return g.length; })()`)
	if n < 2*len(payloads)+2 {
		t.Errorf("%d GPU cells, want %d", n, 2*len(payloads)+2)
	}
	for i := 0; i < n; i++ {
		sel := fmt.Sprintf(`.gpu[data-pagetest="%d"]`, i)
		tb.hover(sel)
		if eval[bool](tb, `!!document.querySelector(`+jsString(sel+aside)+`)`) {
			tb.waitVisible(sel + aside)
			shown += "\n" + eval[string](tb, `document.querySelector(`+jsString(sel+aside)+`).innerText`)
		}
	}
	for _, p := range payloads {
		if !strings.Contains(shown, p) {
			t.Errorf("the payload %s is not shown as text anywhere", p)
		}
	}
	if !strings.Contains(shown, "<b>h</b>") {
		t.Errorf("the host name <b>h</b> is not shown as text")
	}
	// the script names the host in each detail's title, as text too
	if title := eval[string](tb, `(document.querySelector('.host[data-host="<b>h</b>"] aside > .t') || {}).textContent || ""`); title != "<b>h</b> · GPU 0" {
		t.Errorf("the title of the <b>h</b> host's detail is %q, want %q", title, "<b>h</b> · GPU 0")
	}
	check("after hovering every GPU")

	// The page's own style survived "</style>" in the data.
	a, _ := tb.background(`.gpu[data-state="busy"]`)
	if a.A < 0.5 {
		t.Errorf("busy GPUs lost their background (%v): did the CSV end the page's <style>?", a)
	}
	tb.unhover()
	tb.screenshot("page-xss.png", true)
}

func TestPhoneLayoutDoesNotOverflow(t *testing.T) {
	tb := openFleet(t, tabOptions{width: 390, height: 844, mobile: true}, fleet(time.Now()))
	if w := eval[int](tb, `innerWidth`); w != 390 {
		t.Errorf("the layout viewport is %d px wide on a 390 px phone: is <meta name=viewport content=\"width=device-width\"> missing?", w)
	}
	type overflow struct {
		Scroll, Inner int
		Wide          []string
	}
	o := eval[overflow](tb, `({
		Scroll: document.documentElement.scrollWidth, Inner: innerWidth,
		Wide: [...document.body.querySelectorAll("*")].filter(e => e.getBoundingClientRect().right > innerWidth + 1 &&
			getComputedStyle(e).visibility === "visible" && getComputedStyle(e).display !== "none")
			.slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + String(e.className).split(" ").join(".") : "")),
	})`)
	if o.Scroll > o.Inner+1 {
		t.Errorf("the page scrolls sideways on a phone: scrollWidth %d > innerWidth %d; too wide: %v", o.Scroll, o.Inner, o.Wide)
	}
	if !tb.isVisible(busyGPU) || !tb.isVisible("#summary") {
		t.Errorf("the busy GPU or the summary is hidden on a phone")
	}
	tb.screenshot("page-phone.png", true)
	tb.noProblems("the phone layout")
}

func TestDarkModeChangesThePage(t *testing.T) {
	rows := fleet(time.Now())
	light := openFleet(t, tabOptions{colorScheme: "light"}, rows)
	dark := openFleet(t, tabOptions{colorScheme: "dark"}, rows)
	if !eval[bool](dark, `matchMedia("(prefers-color-scheme: dark)").matches`) {
		t.Fatal("the dark tab does not match prefers-color-scheme: dark")
	}
	lb, db := light.pageBackground(), dark.pageBackground()
	t.Logf("page background: light %v, dark %v", lb, db)
	if lb.distance(db) < 60 {
		t.Errorf("the page background is (nearly) the same in dark mode: light %v, dark %v", lb, db)
	}
	lum := func(c rgba) float64 { return 0.2126*c.R + 0.7152*c.G + 0.0722*c.B }
	if lum(db) >= lum(lb) {
		t.Errorf("dark mode's background %v is not darker than light mode's %v", db, lb)
	}
	// Text stays readable and states stay apart in the dark.
	text := eval[rgba](dark, fmt.Sprintf(`(%s)(getComputedStyle(document.body).color)`, toRGBAJS))
	if lum(text) <= lum(db) {
		t.Errorf("dark mode text %v is not lighter than its background %v", text, db)
	}
	free, _ := dark.background(freeGPU)
	busy, _ := dark.background(busyGPU)
	if free.distance(busy) < 30 {
		t.Errorf("in dark mode a free (%v) and a busy (%v) GPU look the same", free, busy)
	}
	dark.screenshot("page-dark.png", true)
	light.noProblems("light mode")
	dark.noProblems("dark mode")
}

func TestPageWorksWithoutJavaScript(t *testing.T) {
	tb := openFleet(t, tabOptions{noScript: true}, fleet(time.Now()))
	for _, sel := range []string{freeGPU, busyGPU, bobGPU, lostGPU, `.host[data-host="gpu03"]`} {
		if n := eval[int](tb, `document.querySelectorAll(`+jsString(sel)+`).length`); n != 1 || !tb.isVisible(sel) {
			t.Errorf("without JavaScript, %d shown elements match %s, want 1", n, sel)
		}
	}
	// Controls that need the script stay out of sight without it.
	if tb.isVisible("#filters") {
		t.Errorf("#filters is shown without JavaScript, where it cannot work")
	}
	users := eval[string](tb, `(document.querySelector("#users") || {innerText: ""}).innerText`)
	if !strings.Contains(users, "alice") || !tb.isVisible("#users") {
		t.Errorf("without JavaScript the users table is missing, hidden or lacks alice: %q", users)
	}
	// The hover detail is CSS, so it works without JavaScript too.
	tb.hover(busyGPU)
	tb.waitVisible(busyGPU + aside)
	tb.noProblems("without JavaScript")
}

func TestStaleBanner(t *testing.T) {
	fresh := openFleet(t, tabOptions{}, fleet(time.Now()))
	if fresh.isVisible("#stale") {
		t.Errorf("fresh data shows the stale banner: %q", eval[string](fresh, `document.querySelector("#stale").innerText`))
	}
	old := openFleet(t, tabOptions{}, fleet(time.Now().Add(-50*time.Hour)))
	if !old.isVisible("#stale") {
		t.Fatalf("data 50 hours old shows no stale banner (#stale)")
	}
	if txt := eval[string](old, `document.querySelector("#stale").innerText.trim()`); txt == "" {
		t.Errorf("the stale banner is empty")
	}
	// The script rewrites the age as render wrote it: 50 hours are "2 d 2 h"
	// with and without it.
	oldNoJS := openFleet(t, tabOptions{noScript: true}, fleet(time.Now().Add(-50*time.Hour)))
	for _, tb := range []*tab{old, oldNoJS} {
		if age := eval[string](tb, `document.querySelector("#age").textContent + " | " + document.querySelector("#stale .age").textContent`); age != "2 d 2 h | 2 d 2 h" {
			t.Errorf("the data's age (summary | banner) is %q, want \"2 d 2 h\" in both", age)
		}
	}
	fresh.noProblems("fresh data")
	old.noProblems("stale data")
}

func TestPhoneTapShowsWhoHoldsTheGPU(t *testing.T) {
	tb := openFleet(t, tabOptions{width: 390, height: 844, mobile: true}, fleet(time.Now()))
	detail := busyGPU + aside
	if err := chromedp.Do(tb.ctx, chromedp.Tap(chromedp.CSS(busyGPU))); err != nil {
		t.Fatalf("tapping the busy GPU: %v", err)
	}
	tb.waitVisible(detail)
	txt := eval[string](tb, `document.querySelector(`+jsString(detail)+`).innerText`)
	for _, w := range []string{"alice", aliceCmd} {
		if !strings.Contains(txt, w) {
			t.Errorf("the tapped busy GPU's detail lacks %q:\n%s", w, txt)
		}
	}
	// The sheet is away from the cell: its title names the host and GPU.
	if title := eval[string](tb, `(document.querySelector(`+jsString(detail+" > .t")+`) || {}).innerText || ""`); title != "gpu01 · GPU 1" {
		t.Errorf("the tapped detail's title is %q, want %q", title, "gpu01 · GPU 1")
	}
	if y := eval[float64](tb, `document.querySelector(`+jsString(detail+" > .t")+`).getBoundingClientRect().top - document.querySelector(`+jsString(detail)+`).getBoundingClientRect().top`); y > 20 {
		t.Errorf("the title is %g px below the top of the detail, want it first", y)
	}
	var r box
	r = eval[box](tb, `(() => { const r = document.querySelector(`+jsString(detail)+`).getBoundingClientRect();
		return {X: r.x, Y: r.y, W: r.width, H: r.height, Found: true}; })()`)
	if r.X < 0 || r.Y < 0 || r.X+r.W > 390.5 || r.Y+r.H > 844.5 {
		t.Errorf("on a 390x844 phone the tapped detail is at %+v, partly off screen", r)
	}
	tb.screenshot("page-phone-tap.png", false)
	tb.noProblems("tapping on a phone")
}

func TestFiltersHideOtherGPUsAndRememberTheChoice(t *testing.T) {
	tb := openFleet(t, tabOptions{}, fleet(time.Now()))
	tb.waitVisible("#filters")
	if err := chromedp.Do(tb.ctx, chromedp.Click(chromedp.CSS("#only-free"))); err != nil {
		t.Fatalf("clicking only free GPUs: %v", err)
	}
	tb.waitHidden(busyGPU)
	tb.waitHidden(`.host[data-host="gpu02"]`) // no free GPU there
	if !tb.isVisible(freeGPU) {
		t.Errorf("only free GPUs hid the free GPU")
	}
	// The choice survives the page's own reload.
	if err := chromedp.Do(tb.ctx, chromedp.Reload()); err != nil {
		t.Fatalf("reloading: %v", err)
	}
	tb.waitJS(`document.readyState === "complete" && document.querySelector("#only-free").checked`, "the filter to be restored after a reload")
	tb.waitHidden(busyGPU)
	if err := chromedp.Do(tb.ctx, chromedp.Click(chromedp.CSS("#only-free"))); err != nil {
		t.Fatalf("clicking only free GPUs again: %v", err)
	}
	tb.waitVisible(busyGPU)

	// One user's GPUs.
	eval[bool](tb, `(() => { const s = document.querySelector("#only-user"); s.value = "bob";
		s.dispatchEvent(new Event("change", {bubbles: true})); return s.value === "bob"; })()`)
	tb.waitHidden(busyGPU)
	tb.waitVisible(bobGPU)
	if tb.isVisible(freeGPU) {
		t.Errorf("the user filter bob still shows gpu01's free GPU")
	}
	tb.noProblems("filtering")
}
