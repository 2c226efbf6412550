package pagetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/loaddata"
)

// What a cell says without a hover (issue 10): who holds a busy GPU and how
// much memory, for whom a reserved one is kept, why a MIG GPU has no
// utilization; and what its card says about the host.

const longNames = "maximilian-alexander, bartholomew-johnson, constantinople-smith"

func cellsFleet(at time.Time) []loaddata.Row {
	ts := at.UTC().Format(loaddata.TimeFormat)
	mig := withProcess(gpuRow(ts, "gpu01", 4), 21198, "alice", "./gpu_burn 60", 7484, 600)
	mig.GPUUtilPct, mig.MemUtilPct = loaddata.Number{}, loaddata.Number{}
	rows := []loaddata.Row{
		withProcess(gpuRow(ts, "gpu01", 0), 100, "alice", aliceCmd, 63488, 3*3600+5*60),
		withProcess(gpuRow(ts, "gpu01", 1), 101, "alice", aliceCmd, 20480, 60),
		withProcess(gpuRow(ts, "gpu01", 1), 102, "bob", bobCmd, 40960, 60),
		gpuRow(ts, "gpu01", 3), // reserved below
		mig,
		gpuRow(ts, "gpu01", 5),
	}
	for i, u := range strings.Split(longNames, ", ") {
		rows = append(rows, withProcess(gpuRow(ts, "gpu01", 2), int64(200+i), u, aliceCmd, 1024, 60))
	}
	return rows
}

const cellsReservations = `{"gpu01": [{"name": "carol", "gpus": [3], "date": "2099-01-01 00:00", "comment": "ICML deadline"}]}`

func cellSel(i int) string { return fmt.Sprintf(`.host[data-host="gpu01"] .gpu[data-gpu="%d"]`, i) }

func TestCellsSayWhoWithoutHover(t *testing.T) {
	url := serve(t, renderPageWith(t, cellsFleet(time.Now()), cellsReservations))
	tb := newTab(t, tabOptions{})
	tb.load(url)
	tb.unhover()
	text := func(sel string) string {
		t.Helper()
		return strings.Join(strings.Fields(eval[string](tb, `document.querySelector(`+jsString(sel)+`).innerText`)), " ")
	}
	for _, tt := range []struct {
		gpu  int
		want []string // in the cell's text, no detail shown
	}{
		{0, []string{"alice 62G"}},
		{1, []string{"bob, alice 60G"}}, // the biggest holder first
		{3, []string{"carol: ICML deadline"}},
		{4, []string{"no util (MIG)", "alice 7.3G"}},
		{5, []string{"0.0/80G · 0%"}},
	} {
		got := text(cellSel(tt.gpu))
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("GPU %d's cell says %q, want %q in it", tt.gpu, got, w)
			}
		}
	}
	if card := text(`.host[data-host="gpu01"]`); !strings.Contains(card, "64 CPUs · load 2.5 · RAM 98/503G") {
		t.Errorf("the card lacks the host's CPUs, load and RAM: %q", card)
	}

	checkLongNamesCut(t, tb, text)

	// The MIG GPU's detail says why in words.
	tb.hover(cellSel(4))
	tb.waitVisible(cellSel(4) + aside)
	if d := text(cellSel(4) + aside); !strings.Contains(d, "utilization not reported under MIG") {
		t.Errorf("the MIG GPU's detail does not say why it has no utilization: %q", d)
	}
	tb.unhover()

	checkStateCues(t, tb)
	tb.screenshot("page-cells.png", false)
	tb.noProblems("the cells")
}

// checkLongNamesCut checks the cell of three long names: the names cut on
// screen with "…", the memory in sight, and every user in the detail.
func checkLongNamesCut(t *testing.T, tb *tab, text func(sel string) string) {
	t.Helper()
	type cut struct {
		Overflow, Cut bool
		Mem           string
		MemIn         bool
	}
	c := eval[cut](tb, `(() => {
		const cell = document.querySelector(`+jsString(cellSel(2))+`), u = cell.querySelector(".u"), b = u.querySelector("b");
		const r = document.createRange(); r.selectNodeContents(u); r.setStartAfter(b);
		const m = r.getBoundingClientRect(), cr = cell.getBoundingClientRect();
		return {Overflow: b.scrollWidth > b.clientWidth, Cut: getComputedStyle(b).textOverflow === "ellipsis",
			Mem: r.toString().trim(), MemIn: m.width > 0 && m.left >= cr.left && m.right <= cr.right};
	})()`)
	if !c.Overflow || !c.Cut || c.Mem != "3.0G" || !c.MemIn {
		t.Errorf("the cell of three long names: %+v; want the names overflowing, cut with an ellipsis, and 3.0G whole inside the cell", c)
	}
	tb.hover(cellSel(2))
	tb.waitVisible(cellSel(2) + aside)
	if d := text(cellSel(2) + aside); !strings.Contains(d, "maximilian-alexander") || !strings.Contains(d, "constantinople-smith") {
		t.Errorf("the detail of the three long names lacks one: %q", d)
	}
	tb.unhover()
}

// checkStateCues checks that every state is told by a word and a symbol
// as well as by colour: the style sheet writes them from data-state.
func checkStateCues(t *testing.T, tb *tab) {
	t.Helper()
	type cue struct{ State, Content string }
	cues := eval[[]cue](tb, `[...document.querySelectorAll(".gpu")].map(e => ({State: e.dataset.state,
		Content: getComputedStyle(e, "::after").content}))`)
	symbols := map[string]string{}
	for _, c := range cues {
		word := strings.Trim(strings.TrimSpace(c.Content[strings.IndexByte(c.Content, ' ')+1:]), `"`)
		if !strings.HasSuffix(strings.Trim(c.Content, `"`), c.State) || word == "" {
			t.Errorf("a %s cell shows %s: want a symbol and its state", c.State, c.Content)
		}
		symbols[c.State] = strings.Fields(strings.Trim(c.Content, `"`))[0]
	}
	if len(symbols) != 3 || symbols["free"] == symbols["busy"] || symbols["busy"] == symbols["reserved"] || symbols["free"] == symbols["reserved"] {
		t.Errorf("free, busy and reserved need three symbols: %q", symbols)
	}
}

func TestDetailHasColumnHeaders(t *testing.T) {
	tb := openFleet(t, tabOptions{}, fleet(time.Now()))
	tb.hover(busyGPU)
	tb.waitVisible(busyGPU + aside)
	heads := eval[[]string](tb, `[...document.querySelectorAll(`+jsString(busyGPU+aside+" tr:first-child > td")+`)].map(td => getComputedStyle(td, "::before").content)`)
	want := []string{`"user"`, `"pid"`, `"memory"`, `"elapsed"`, `"command"`}
	if strings.Join(heads, " ") != strings.Join(want, " ") {
		t.Errorf("the process table's column headers are %v, want %v", heads, want)
	}
	// the columns hold what their headers say
	row := eval[[]string](tb, `[...document.querySelectorAll(`+jsString(busyGPU+aside+" tr:first-child > td")+`)].map(td => td.innerText)`)
	if strings.Join(row, "|") != "alice|4242|30G|1 h 30 min|"+aliceCmd {
		t.Errorf("alice's row is %q", row)
	}
	tb.noProblems("column headers")
}

// wideFleet fills a desktop window with cards of GPUs whose details are
// wide (long command lines) and tall (several processes).
func wideFleet(at time.Time) []loaddata.Row {
	ts := at.UTC().Format(loaddata.TimeFormat)
	long := "python -u train.py --config configs/a-rather-long-experiment-name/with/nested/folders.yaml --lr 3e-4"
	var rows []loaddata.Row
	for h := 0; h < 12; h++ {
		for g := int64(0); g < 8; g++ {
			for p := int64(0); p < 4; p++ {
				rows = append(rows, withProcess(gpuRow(ts, fmt.Sprintf("node%02d", h), g), 1000*g+p, "alice", long, 10000, 7200))
			}
		}
	}
	return rows
}

// A detail never leaves the window, wherever its cell is: the last cell of
// a row at the right edge, and the last cell of the page scrolled to the
// bottom right; shown by hover and by keyboard focus.
func TestDetailStaysInTheWindow(t *testing.T) {
	for _, size := range []struct{ w, h int64 }{{1280, 900}, {900, 700}} {
		t.Run(fmt.Sprintf("%dx%d", size.w, size.h), func(t *testing.T) {
			tb := openFleet(t, tabOptions{width: size.w, height: size.h}, wideFleet(time.Now()))
			// mark the rightmost cell of the first row and the bottom-right cell of the page
			marked := eval[int](tb, `(() => {
				const cells = [...document.querySelectorAll(".gpu")], r = c => c.getBoundingClientRect();
				const top = Math.min(...cells.map(c => r(c).top));
				const row = cells.filter(c => Math.abs(r(c).top - top) < 2);
				row.reduce((a, c) => r(c).right > r(a).right ? c : a).dataset.pagetest = "edge";
				cells.reduce((a, c) => r(c).bottom > r(a).bottom + 1 || (Math.abs(r(c).bottom - r(a).bottom) <= 1 && r(c).right > r(a).right) ? c : a).dataset.pagetest = "corner";
				return document.querySelectorAll("[data-pagetest]").length;
			})()`)
			if marked != 2 {
				t.Fatalf("marked %d cells, want 2", marked)
			}
			inWindow := func(how, sel string) {
				t.Helper()
				type place struct{ L, T, R, B, W, H float64 }
				p := eval[place](tb, `(() => { const r = document.querySelector(`+jsString(sel+aside)+`).getBoundingClientRect();
					return {L: r.left, T: r.top, R: r.right, B: r.bottom, W: innerWidth, H: innerHeight}; })()`)
				if p.L < 0 || p.T < 0 || p.R > p.W || p.B > p.H {
					t.Errorf("%s %s: its detail is at left %g top %g right %g bottom %g, outside the %gx%g window", how, sel, p.L, p.T, p.R, p.B, p.W, p.H)
				}
				on := eval[bool](tb, `(() => { const d = document.querySelector(`+jsString(sel+aside)+`), r = d.getBoundingClientRect();
					const at = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2); return !!at && d.contains(at); })()`)
				if !on {
					t.Errorf("%s %s: its detail is covered by something else", how, sel)
				}
			}
			for _, c := range []struct{ name, block string }{{"edge", "center"}, {"corner", "end"}} {
				sel := `.gpu[data-pagetest="` + c.name + `"]`
				tb.hoverAt(sel, c.block)
				tb.waitVisible(sel + aside)
				inWindow("hovering", sel)
				if size.w == 1280 {
					tb.screenshot("page-hover-"+c.name+".png", false)
				}
				tb.unhover()
				tb.waitHidden(sel + aside)
				// keyboard focus, the cell where the hover had it
				eval[bool](tb, `(() => { const e = document.querySelector(`+jsString(sel)+`); e.focus({preventScroll: true}); return document.activeElement === e; })()`)
				tb.waitVisible(sel + aside)
				inWindow("focusing", sel)
				eval[bool](tb, `(document.activeElement.blur(), true)`)
			}
			tb.noProblems("details at the window's edges")
		})
	}
}
