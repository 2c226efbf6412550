package pagetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The harness's own tests, against hand-written pages: each detector must
// see what it is there to see, or the page tests could pass by seeing
// nothing.

func servePage(t *testing.T, html string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	return serve(t, dir)
}

const harnessPage = `<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">
<style>
.gpu { width: 60px; height: 40px; display: inline-block; position: relative; }
.gpu[data-state=free] { background: green; } .gpu[data-state=busy] { background: rgb(200, 0, 0); }
.gpu-detail { display: none; position: absolute; top: 100%; left: 0; width: 200px; background: #ffc; }
.gpu:hover .gpu-detail, .gpu:focus .gpu-detail { display: block; }
</style></head><body>
<div class="gpu" data-state="free" data-host="h" data-gpu="0" tabindex="0">0<div class="gpu-detail">idle</div></div>
<div class="gpu" data-state="busy" data-host="h" data-gpu="1" tabindex="0">1<div class="gpu-detail">alice</div></div>
<script>document.body.dataset.js = "ran";</script>
BODY
</body></html>`

func TestHarnessSeesHoverFocusAndColour(t *testing.T) {
	tb := newTab(t, tabOptions{})
	tb.load(servePage(t, strings.Replace(harnessPage, "BODY", "", 1)))
	tb.noProblems("a clean page")
	busy := `.gpu[data-gpu="1"]`
	if tb.isVisible(busy + " .gpu-detail") {
		t.Fatal("a display:none detail counts as visible")
	}
	tb.hover(busy)
	tb.waitVisible(busy + " .gpu-detail")
	tb.unhover()
	tb.waitHidden(busy + " .gpu-detail")
	tb.tabTo(busy, 5)
	tb.waitVisible(busy + " .gpu-detail")
	c, _ := tb.background(busy)
	if (c != rgba{200, 0, 0, 1}) {
		t.Errorf("background %v, want rgba(200, 0, 0, 1)", c)
	}
	if g, _ := tb.background(`.gpu[data-gpu="0"]`); g.greyish() || !(rgba{128, 128, 128, 1}).greyish() {
		t.Errorf("greyish is wrong")
	}
}

func TestHarnessCatchesScriptsConsoleErrorsAndRequests(t *testing.T) {
	tb := newTab(t, tabOptions{xssDetector: true})
	tb.load(servePage(t, strings.Replace(harnessPage, "BODY", `<div>"><img src=x onerror=alert(1)></div>
<script>console.error("boom"); confirm("sure?"); setTimeout(() => { throw new Error("late") }, 0);</script>
<img src="http://127.0.0.2:9/pixel.gif" alt="">`, 1)))
	tb.waitJS(`window.__xss && window.__xss.length >= 2`, "the detector to see alert and confirm")
	hits := eval[[]string](tb, `window.__xss`)
	if !strings.Contains(strings.Join(hits, " "), "alert(1)") {
		t.Errorf("detector hits %v lack alert(1)", hits)
	}
	tb.waitJS(`performance.getEntriesByType("resource").some(e => e.name.endsWith("/x"))`, "the img to be requested")
	tb.waitProblems("console.error", "exception", "HTTP 404", "outside the test server", "loading failed")
}

func TestHarnessDisablesScripts(t *testing.T) {
	page := servePage(t, strings.Replace(harnessPage, "BODY", "", 1))
	on := newTab(t, tabOptions{})
	on.load(page)
	if js := eval[string](on, `document.body.dataset.js || ""`); js != "ran" {
		t.Fatalf("the page's script did not run in a normal tab (%q)", js)
	}
	off := newTab(t, tabOptions{noScript: true})
	off.load(page)
	if js := eval[string](off, `document.body.dataset.js || ""`); js != "" {
		t.Fatalf("the page's script ran with scripts disabled (%q)", js)
	}
}

// waitProblems waits up to 10 s until, for each of wants, a problem
// mentions it, and fails the test for those none mentions.
func (tb *tab) waitProblems(wants ...string) {
	tb.t.Helper()
	var seen []string
	missing := func() []string {
		var m []string
		for _, w := range wants {
			if !strings.Contains(strings.Join(seen, "\n"), w) {
				m = append(m, w)
			}
		}
		return m
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		seen = append(seen, tb.takeProblems()...)
		if len(missing()) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.t.Errorf("no problem mentions %q; problems: %q", missing(), seen)
			return
		}
		<-tick.C
	}
}
