package pagetest

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// On a 390 px phone, light and dark: the plots' text is at least 11 px as
// drawn, the idle-held table's dates stay on one line (the table scrolls,
// not the page), and the page does not scroll sideways. The screenshots
// (artifacts/phone-history-*.png) are for a person to look at.
func TestPhoneHistoryReadable(t *testing.T) {
	for _, scheme := range []string{"light", "dark"} {
		t.Run(scheme, func(t *testing.T) {
			tb := openHistory(t, tabOptions{width: 390, height: 844, mobile: true, colorScheme: scheme}, nil)
			type text struct {
				Texts    int
				Min      float64
				Smallest string
			}
			got := eval[text](tb, `(() => {
				let min = 1e9, smallest = "", n = 0;
				for (const svg of document.querySelectorAll("figure.plot svg")) {
					const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
					for (const t of svg.querySelectorAll("text")) {
						const px = parseFloat(getComputedStyle(t).fontSize) * scale;
						n++;
						if (px < min) { min = px; smallest = t.textContent; }
					}
				}
				return {Texts: n, Min: min, Smallest: smallest};
			})()`)
			if got.Texts == 0 {
				t.Fatal("no text in the plots")
			}
			if got.Min < 11 {
				t.Errorf("the plots' smallest text %q is %.1f px on a 390 px phone, want at least 11", got.Smallest, got.Min)
			}
			wrapped := eval[[]string](tb, `[...document.querySelectorAll("#idleheld td")].filter(td => /\d{4}-\d\d-\d\d/.test(td.textContent))
				.filter(td => { const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length > 1; }).map(td => td.textContent)`)
			if eval[int](tb, `document.querySelectorAll("#idleheld td").length`) == 0 {
				t.Fatal("no idle-held table")
			}
			if len(wrapped) > 0 {
				t.Errorf("dates wrap in the idle-held table: %q", wrapped)
			}
			if w := eval[int](tb, `document.documentElement.scrollWidth`); w > 391 {
				t.Errorf("the page scrolls sideways on a phone: %d px wide", w)
			}
			tb.screenshot("phone-history-"+scheme+".png", true)
			tb.noProblems("a phone, " + scheme)
		})
	}
}

// On a phone the detail's sheet has a close button that a tap closes it
// with; a tap on the GPU opens it again.
func TestPhoneSheetCloses(t *testing.T) {
	tb := openFleet(t, tabOptions{width: 390, height: 844, mobile: true}, fleet(time.Now()))
	detail := busyGPU + aside
	tap := func(sel string) {
		t.Helper()
		if err := chromedp.Do(tb.ctx, chromedp.Tap(chromedp.CSS(sel))); err != nil {
			t.Fatalf("tapping %s: %v", sel, err)
		}
	}
	tap(busyGPU)
	tb.waitVisible(detail)
	tb.waitVisible(detail + " > .close")
	tap(detail + " > .close")
	tb.waitHidden(detail)
	tap(freeGPU)
	tap(busyGPU)
	tb.waitVisible(detail)
	tb.noProblems("closing the sheet")
}

// A page longer than the screen does not scroll sideways on a phone: the
// cards below the fold, which chromium does not lay out (content-visibility),
// have no width of their own to push the page wider than 390 px.
func TestPhonePageFitsBelowTheFold(t *testing.T) {
	s := newLiveSite(t)
	s.render(t, scaleFleet(40))
	tb := newTab(t, tabOptions{width: 390, height: 844, mobile: true})
	tb.load(serve(t, s.www))
	if n := eval[int](tb, `[...document.querySelectorAll("#hosts > .host")].filter(c => c.getBoundingClientRect().top > innerHeight).length`); n == 0 {
		t.Fatal("no card below the fold: the page does not test it")
	}
	// not innerWidth: a mobile viewport widens to the content it holds
	if w := eval[int](tb, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("the page is %d px wide on a 390 px phone: it scrolls sideways", w)
	}
	tb.noProblems("a long page on a phone")
}
