package pagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/demo"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/render"
	"github.com/gpumon/gpumon/internal/testenv"
)

// axe-core, the accessibility engine (tools/axe, pinned from the npm
// registry), checks the pages against WCAG 2.1 A and AA inside chromium:
// the demo page (history plots, accounting, reservations, troubled GPUs),
// a 1,000-host overview and one of its group pages, each light and dark,
// and the demo page at a phone's width.

// axeScript is axe-core's build, from the repository's top two levels up.
const axeScript = "../../tools/axe/node_modules/axe-core/axe.min.js"

// axeTags are the rules run: WCAG 2.0 and 2.1, levels A and AA.
var axeTags = []string{"wcag2a", "wcag2aa", "wcag21a", "wcag21aa"}

// axeAccepted are the rules the pages still break, each with why; they
// are logged, not failed, and docs/render.md's "Accessibility" names them.
// None now: the page's timed reload (meta-refresh, WCAG 2.2.1) is inside
// <noscript>, so that with JavaScript on, as axe runs, the page updates in
// place instead.
var axeAccepted = map[string]string{}

var axeSource = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile(axeScript)
	return string(b), err
})

// needAxe returns axe-core's script, or skips (fails under CI) without it.
func needAxe(t *testing.T) string {
	t.Helper()
	src, err := axeSource()
	if errors.Is(err, os.ErrNotExist) {
		testenv.Need(t, fmt.Sprintf("axe-core not found at %s (npm ci --prefix tools/axe; .ci/run does)", axeScript))
	}
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// axeNode is one element a rule found, as axe describes it.
type axeNode struct {
	Target  []string // CSS selectors, one per frame or shadow root
	HTML    string
	Summary string // what to fix
}

// axeResult is a rule that found something: its violations, or the
// elements axe could not decide on (incomplete: a background image under
// text, say).
type axeResult struct {
	ID, Impact, Help, HelpURL string
	Count                     int       // elements found
	Nodes                     []axeNode // the first few
}

type axeReport struct {
	Violations, Incomplete []axeResult
	Ms                     float64  // how long axe.run took in the page
	Undecided              []string // every element color-contrast left undecided
}

// axeRunJS runs axe on the document; CONTEXT and OPTIONS are replaced by
// the scope's. It resolves to an axeReport.
const axeRunJS = `(() => {
	const start = performance.now();
	const brief = (r) => ({ID: r.id, Impact: r.impact || "", Help: r.help, HelpURL: r.helpUrl, Count: r.nodes.length,
		Nodes: r.nodes.slice(0, 3).map(n => ({Target: n.target.map(String), HTML: n.html, Summary: n.failureSummary || ""}))});
	return axe.run(CONTEXT, OPTIONS).then(r => ({
		Violations: r.violations.map(brief), Incomplete: r.incomplete.map(brief), Ms: performance.now() - start,
		Undecided: r.incomplete.filter(i => i.id === "color-contrast").flatMap(i => i.nodes.map(n => n.target.join(" ")))}));
})()`

// axeScope is what one axe run covers: the elements (a JavaScript axe
// context, "document" for the whole page) and the rules (the WCAG tags,
// less skip; or only the rules of only).
type axeScope struct {
	context    string
	only, skip []string
}

func (s axeScope) js() string {
	ctx := s.context
	if ctx == "" {
		ctx = "document"
	}
	runOnly := fmt.Sprintf(`{type: "tag", values: %s}`, jsList(axeTags))
	if len(s.only) > 0 {
		runOnly = fmt.Sprintf(`{type: "rule", values: %s}`, jsList(s.only))
	}
	var rules []string
	for _, id := range s.skip {
		rules = append(rules, jsString(id)+": {enabled: false}")
	}
	opts := fmt.Sprintf(`{runOnly: %s, rules: {%s}, resultTypes: ["violations", "incomplete"]}`, runOnly, strings.Join(rules, ", "))
	return strings.NewReplacer("CONTEXT", ctx, "OPTIONS", opts).Replace(axeRunJS)
}

func jsList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = jsString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// axe puts axe-core into the loaded page and runs it over scope. The
// script goes in through the DevTools protocol (Runtime.evaluate), which
// the page's Content-Security-Policy does not govern: no violation, and
// noProblems would see one.
func (tb *tab) axe(src string, scope axeScope) axeReport {
	tb.t.Helper()
	if !eval[bool](tb, `typeof window.axe === "object"`) {
		if err := chromedp.Do(tb.ctx, chromedp.Evaluate[chromedp.Void](src)); err != nil {
			tb.t.Fatalf("putting axe-core into the page: %v", err)
		}
	}
	r, err := chromedp.Run(tb.ctx, chromedp.Evaluate[axeReport](scope.js(), chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("running axe: %v", err)
	}
	return r
}

// checkAxe fails the test for each violation in r of a rule not in
// axeAccepted, with the first elements it found and what to fix; it logs
// the accepted ones and what axe could not decide.
func checkAxe(t *testing.T, what string, r axeReport) {
	t.Helper()
	t.Logf("%s: axe took %.0f ms", what, r.Ms)
	for _, v := range r.Violations {
		if why, ok := axeAccepted[v.ID]; ok {
			t.Logf("%s: accepted violation %s (%d elements): %s", what, v.ID, v.Count, why)
			continue
		}
		t.Errorf("%s: %s", what, v.describe())
	}
	for _, v := range r.Incomplete {
		t.Logf("%s: axe could not decide %s on %d elements, e.g. %s", what, v.ID, v.Count, v.firstNode())
	}
}

func (v axeResult) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s, on %d elements (%s)", v.ID, v.Impact, v.Help, v.Count, v.HelpURL)
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "\n\t%s\n\t\t%s\n\t\t%s", strings.Join(n.Target, " "), short(n.HTML),
			strings.ReplaceAll(strings.TrimSpace(n.Summary), "\n", "\n\t\t"))
	}
	return b.String()
}

func (v axeResult) firstNode() string {
	if len(v.Nodes) == 0 {
		return "(none listed)"
	}
	n := v.Nodes[0]
	return fmt.Sprintf("%s: %s", strings.Join(n.Target, " "), strings.Join(strings.Fields(n.Summary), " "))
}

// demoSite runs the demo once (`demo -once`: the simulated fleet, fetch,
// render, a seeded week of history) and returns the folder of its page.
func demoSite(t *testing.T) string {
	t.Helper()
	t.Setenv("SSH_AUTH_SOCK", "")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr strings.Builder
	if err := demo.Main(ctx, []string{"-once", "-dir", dir}, io.Discard, &stderr); err != nil {
		t.Fatalf("demo -once: %v\n%s", err, stderr.String())
	}
	return filepath.Join(dir, "www")
}

var schemes = []string{"light", "dark"}

// The demo page, light, dark and on a phone: every rule on everything.
func TestAxeDemoPage(t *testing.T) {
	src := needAxe(t)
	requireBrowser(t, false)
	url := serve(t, demoSite(t))
	for _, o := range []tabOptions{
		{colorScheme: "light"},
		{colorScheme: "dark"},
		{colorScheme: "light", width: 390, height: 844, mobile: true},
	} {
		name := o.colorScheme
		if o.width > 0 {
			name += fmt.Sprintf("-%dpx", o.width)
		}
		t.Run(name, func(t *testing.T) {
			tb := newTab(t, o)
			tb.load(url)
			if n := eval[int](tb, `document.querySelectorAll("svg").length`); n == 0 {
				t.Fatal("the demo page shows no plots: the history is not on it")
			}
			r := tb.axe(src, axeScope{})
			checkAxe(t, "the demo page "+name, r)
			checkUndecidedContrast(t, tb, "the demo page "+name, r.Undecided)
			tb.noProblems("running axe")
		})
	}
}

// The overview of 1,000 hosts and the group page its first box links to
// (69,000 elements). There, two rules would take most of the time and
// decide nothing more than on a part: color-contrast (57 s, leaving every
// cell undecided: see the docs) and avoid-inline-spacing (44 s in its
// matcher; the page's inline styles set only custom properties). Every
// other rule runs on the whole page; then the page is cut to its first
// cards (axe's setup walks the whole document, whatever part it checks:
// 20 s), and those two run on what is left: the header, the legend, the
// cards, the users' table. Inline spacing is checked on the whole page by
// importantSpacing. Dark mode changes colours only, so in the dark the
// group page runs the rules about colour, on the cut page.
func TestAxeBigFleet(t *testing.T) {
	src := needAxe(t)
	requireBrowser(t, false)
	url := serve(t, renderNoRefresh(t, scaleFleet(1000)))
	var group string
	for _, scheme := range schemes {
		t.Run("overview-"+scheme, func(t *testing.T) {
			tb := newTab(t, tabOptions{colorScheme: scheme})
			tb.load(url)
			checkAxe(t, "the overview "+scheme, tb.axe(src, axeScope{}))
			tb.noProblems("running axe")
			group = eval[string](tb, `document.querySelector("#overview .ck > a").getAttribute("href").split("#")[0]`)
		})
	}
	if group == "" {
		t.Fatal("no group page found on the overview")
	}
	slow := []string{"color-contrast", "avoid-inline-spacing"}
	colour := []string{"color-contrast", "link-in-text-block"}
	t.Run("group-light", func(t *testing.T) {
		tb := newTab(t, tabOptions{colorScheme: "light", timeout: 4 * time.Minute})
		tb.load(url + group)
		checkAxe(t, group+" light, all but "+strings.Join(slow, ", "), tb.axe(src, axeScope{skip: slow}))
		for _, e := range tb.importantSpacing() {
			t.Errorf("an inline style fixes text spacing with !important (avoid-inline-spacing, WCAG 1.4.12): %s", e)
		}
		tb.keepFirstCards(4)
		r := tb.axe(src, axeScope{only: slow})
		checkAxe(t, group+" light, cut to 4 cards", r)
		checkUndecidedContrast(t, tb, group+" light, cut to 4 cards", r.Undecided)
		tb.noProblems("running axe")
	})
	t.Run("group-dark", func(t *testing.T) {
		tb := newTab(t, tabOptions{colorScheme: "dark", timeout: 3 * time.Minute})
		tb.load(url + group)
		tb.keepFirstCards(4)
		r := tb.axe(src, axeScope{only: colour})
		checkAxe(t, group+" dark, cut to 4 cards", r)
		checkUndecidedContrast(t, tb, group+" dark, cut to 4 cards", r.Undecided)
		tb.noProblems("running axe")
	})
}

// importantSpacing is axe's avoid-inline-spacing over the whole page, in
// one pass and stricter: it returns the first elements whose style
// attribute fixes line-height, letter-spacing or word-spacing with
// !important (axe allows it at WCAG 1.4.12's minimum spacing or above),
// which stops a reader's own spacing.
func (tb *tab) importantSpacing() []string {
	tb.t.Helper()
	return eval[[]string](tb, `[...document.querySelectorAll("[style]")].filter(e =>
		["line-height", "letter-spacing", "word-spacing"].some(p => e.style.getPropertyPriority(p) === "important"))
		.slice(0, 5).map(e => e.outerHTML.slice(0, 200))`)
}

// keepFirstCards removes every host's card but the first n from the page.
func (tb *tab) keepFirstCards(n int) {
	tb.t.Helper()
	left := eval[int](tb, fmt.Sprintf(`(() => {
		document.querySelectorAll("section.host:nth-of-type(n+%d)").forEach(e => e.remove());
		return document.querySelectorAll("section.host").length;
	})()`, n+1))
	if left != n {
		tb.t.Fatalf("%d cards left on the page, want %d", left, n)
	}
}

// renderNoRefresh is renderPage with refresh = 0: the page must not reload
// itself while axe, slower than a minute on a group page, runs.
func renderNoRefresh(t *testing.T, rows []loaddata.Row) string {
	t.Helper()
	dir := t.TempDir()
	csv, conf, out := filepath.Join(dir, "load_data.csv"), filepath.Join(dir, "config.ini"), filepath.Join(dir, "www")
	if err := loaddata.WriteFile(csv, rows); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("[render]\nrefresh = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	args := []string{"-c", conf, "-i", csv, "-o", filepath.Join(out, "index.html")}
	if err := render.Main(context.Background(), args, io.Discard, &stderr); err != nil {
		t.Fatalf("render %q: %v\n%s", args, err, stderr.String())
	}
	return out
}

// axe goes into a page under a Content-Security-Policy as strict as the
// page's without a violation, and the harness would have seen one: a
// script the policy forbids is reported.
func TestAxeInjectionPassesTheCSP(t *testing.T) {
	src := needAxe(t)
	tb := newTab(t, tabOptions{})
	tb.load(servePage(t, `<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'">
<title>csp</title></head><body><main><h1>csp</h1><p style="letter-spacing: 0 !important">text</p></main></body></html>`))
	r := tb.axe(src, axeScope{})
	tb.noProblems("running axe under the page's policy")
	if len(r.Violations) != 1 || r.Violations[0].ID != "avoid-inline-spacing" {
		t.Errorf("axe found %+v, want avoid-inline-spacing alone", r.Violations)
	}
	if got := tb.importantSpacing(); len(got) != 1 {
		t.Errorf("importantSpacing found %q, want the one <p>", got)
	}
	eval[bool](tb, `(() => { const s = document.createElement("script"); s.textContent = "1"; document.body.append(s); return true; })()`)
	tb.waitProblems("Content Security Policy")
}

// Where axe cannot tell a text's background (a gradient or pattern under
// it: the utilization bar's cell, a down host's hatched cell), it leaves
// color-contrast undecided. checkUndecidedContrast measures those texts
// itself: it hides every text on the page, takes a screenshot, and
// compares each text's colour with every pixel under it, failing at the
// worst pixel below WCAG's ratio (4.5:1, or 3:1 for large text).

// textBox is an undecided element's text: its colour, the ratio it needs,
// and its lines' boxes in device pixels of the whole page.
type textBox struct {
	Sel   string
	Color rgba
	Need  float64
	Boxes []box
}

const textBoxesJS = `(sels) => {
	const conv = TORGBA, dpr = devicePixelRatio;
	return sels.map(sel => {
		const e = document.querySelector(sel);
		if (!e) return {Sel: sel, Color: {R: 0, G: 0, B: 0, A: 0}, Need: 0, Boxes: []};
		const s = getComputedStyle(e), px = parseFloat(s.fontSize), bold = parseInt(s.fontWeight) >= 700;
		const boxes = [];
		for (const n of e.childNodes) {
			if (n.nodeType !== Node.TEXT_NODE || !n.data.trim()) continue;
			const r = document.createRange();
			r.selectNodeContents(n);
			for (const b of r.getClientRects()) {
				boxes.push({X: (b.left + scrollX) * dpr, Y: (b.top + scrollY) * dpr, W: b.width * dpr, H: b.height * dpr, Found: true});
			}
		}
		// an SVG text's colour is its fill
		return {Sel: sel, Color: conv(e instanceof SVGElement ? s.fill : s.color), Need: px >= 24 || (bold && px >= 18.66) ? 3 : 4.5, Boxes: boxes};
	});
}`

// hideTextCSS makes every text transparent, and lays out every card (a
// card off screen is not painted: content-visibility).
const hideTextCSS = `*,*::before,*::after{color:transparent!important;-webkit-text-fill-color:transparent!important;text-shadow:none!important;text-decoration-color:transparent!important}svg text{fill:transparent!important}.host{content-visibility:visible!important}`

func checkUndecidedContrast(t *testing.T, tb *tab, what string, sels []string) {
	t.Helper()
	if len(sels) == 0 {
		return
	}
	measured := tb.measureContrast(sels)
	if len(measured) == 0 {
		t.Errorf("%s: none of the %d texts axe left undecided could be measured", what, len(sels))
		return
	}
	failed, lowest := 0, measured[0]
	for _, m := range measured {
		if m.Ratio < m.Need {
			if failed++; failed <= 5 {
				t.Errorf("%s: color-contrast, measured: %s: text %v on %v is %.2f:1, want %.1f:1", what, m.Sel, m.Color, m.On, m.Ratio, m.Need)
			}
		}
		if m.Ratio/m.Need < lowest.Ratio/lowest.Need {
			lowest = m
		}
	}
	t.Logf("%s: measured %d texts axe left undecided: %d below WCAG's ratio; the lowest %.2f:1 (want %.1f:1), %s, text %v on %v",
		what, len(measured), failed, lowest.Ratio, lowest.Need, lowest.Sel, lowest.Color, lowest.On)
}

// measuredText is a text's worst contrast with a pixel under it.
type measuredText struct {
	textBox
	Ratio float64
	On    rgba // the pixel
}

// measureContrast measures the texts of the elements sels finds (those
// with text of their own, laid out).
func (tb *tab) measureContrast(sels []string) []measuredText {
	tb.t.Helper()
	js := fmt.Sprintf(`(%s)(%s)`, strings.Replace(textBoxesJS, "TORGBA", toRGBAJS, 1), jsList(sels))
	texts := eval[[]textBox](tb, js)
	eval[bool](tb, `(() => { const s = document.createElement("style"); s.id = "axe-hide-text"; s.textContent = `+jsString(hideTextCSS)+`; document.head.append(s); return true; })()`)
	defer eval[bool](tb, `(document.getElementById("axe-hide-text").remove(), true)`)
	tb.waitJS(`new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))`, "a frame without text")
	boxes := eval[[]textBox](tb, js) // laid out as in the screenshot
	shot, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		tb.t.Fatalf("the screenshot: %v", err)
	}
	var out []measuredText
	for i, tx := range texts {
		tx.Boxes = boxes[i].Boxes
		if ratio, on := worstContrast(img, tx); !math.IsInf(ratio, 1) {
			out = append(out, measuredText{tx, ratio, on})
		}
	}
	return out
}

// worstContrast is the lowest contrast between tx's colour (over the
// pixel, if not opaque) and a pixel under its text, and that pixel.
func worstContrast(img image.Image, tx textBox) (float64, rgba) {
	worst, at := math.Inf(1), rgba{}
	bounds := img.Bounds()
	for _, b := range tx.Boxes {
		r := image.Rect(int(math.Ceil(b.X)), int(math.Ceil(b.Y)), int(b.X+b.W), int(b.Y+b.H)).Intersect(bounds)
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				cr, cg, cb, _ := img.At(x, y).RGBA()
				bg := rgba{float64(cr >> 8), float64(cg >> 8), float64(cb >> 8), 1}
				fg := tx.Color
				fg = rgba{fg.R*fg.A + bg.R*(1-fg.A), fg.G*fg.A + bg.G*(1-fg.A), fg.B*fg.A + bg.B*(1-fg.A), 1}
				if c := contrast(fg, bg); c < worst {
					worst, at = c, bg
				}
			}
		}
	}
	return worst, at
}

// contrast is WCAG's contrast ratio of two opaque colours.
func contrast(a, b rgba) float64 {
	lum := func(c rgba) float64 {
		ch := func(v float64) float64 {
			v /= 255
			if v <= 0.04045 {
				return v / 12.92
			}
			return math.Pow((v+0.055)/1.055, 2.4)
		}
		return 0.2126*ch(c.R) + 0.7152*ch(c.G) + 0.0722*ch(c.B)
	}
	la, lb := lum(a), lum(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// The contrast measure sees a text on a pattern that axe leaves undecided:
// black on light stripes passes, grey on grey stripes does not.
func TestUndecidedContrastIsMeasured(t *testing.T) {
	src := needAxe(t)
	tb := newTab(t, tabOptions{})
	tb.load(servePage(t, `<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>stripes</title><style>
p{font-size:14px;padding:4px;background:repeating-linear-gradient(135deg,#fff 0 4px,var(--s) 4px 8px)}
#good{--s:#eee;color:#000} #bad{--s:#999;color:#777}</style></head>
<body><main><h1>stripes</h1><p id="good">readable on its stripes</p><p id="bad">unreadable on its stripes</p></main></body></html>`))
	r := tb.axe(src, axeScope{only: []string{"color-contrast"}})
	if len(r.Violations) != 0 || len(r.Undecided) != 2 {
		t.Fatalf("axe decided what it should not: violations %+v, undecided %q", r.Violations, r.Undecided)
	}
	got := map[string]bool{}
	for _, m := range tb.measureContrast(r.Undecided) {
		got[m.Sel] = m.Ratio >= m.Need
		t.Logf("%s: %.2f:1 on %v", m.Sel, m.Ratio, m.On)
	}
	if want := map[string]bool{"#good": true, "#bad": false}; !cmp.Equal(got, want) {
		t.Errorf("texts that meet their ratio: %v, want %v", got, want)
	}
	tb.noProblems("measuring")
}
