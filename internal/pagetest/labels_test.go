package pagetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/domsnapshot"
	"github.com/chromedp/chromedp"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// A cell's label (its GPU's index, or the bus id or UUID of a GPU that has
// none) and its badge (its state) are the style sheet's ::before and
// ::after. A lost GPU is named by its bus id, which nvidia-smi writes in
// place of its row: in the demo, "0000:9a:00.0" ran over "✖ failed".

// labelsFleet is a host of 7 GPUs and a lost one, as the demo's h200-b04
// (its bus id as the simulated nvidia-smi writes it), a host with a lost
// GPU whose bus id has the 8-digit domain of nvidia-smi's queries, and a
// host down (labelsHistory knows its GPUs).
func labelsFleet(at time.Time) []loaddata.Row {
	ts := at.UTC().Format(loaddata.TimeFormat)
	var rows []loaddata.Row
	for i := range int64(7) {
		rows = append(rows, gpuRow(ts, "gpu01", i))
	}
	lost := func(host, bus string) loaddata.Row {
		return loaddata.Row{Timestamp: ts, Host: host, HostStatus: hoststatus.OK, GPUBusID: bus, GPUError: lostError,
			CPUs: loaddata.IntOf(224), Load1: loaddata.Num(3.3), HostMemUsedMiB: loaddata.Num(204800), HostMemTotalMiB: loaddata.Num(2097152)}
	}
	return append(rows, lost("gpu01", "0000:9a:00.0"), gpuRow(ts, "gpu02", 0), lost("gpu02", "00000000:9A:00.0"),
		loaddata.Row{Timestamp: ts, Host: "gpu03", HostStatus: hoststatus.Unreachable, HostError: "connection refused"})
}

// labelsHistory knows the GPUs of labelsFleet's down host as history keeps
// them: by bus id or UUID where nvidia-smi gave no index.
func labelsHistory(now time.Time) *history.Summary {
	return &history.Summary{First: now.Add(-time.Hour), Newest: now, Snapshots: 12,
		Down: map[string]*history.HostState{"gpu03": {DownSince: now.Add(-time.Hour).Unix(), GPUs: []history.KnownGPU{
			{ID: "0", Name: "NVIDIA H100 80GB HBM3"},
			{ID: "00000000:9A:00.0", Name: "NVIDIA H100 80GB HBM3"},
			{ID: "GPU-6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11", Name: "NVIDIA H100 80GB HBM3"}}}}}
}

// rect is a box in CSS pixels, from the document's top left corner.
type rect struct{ X, Y, W, H float64 }

func (a rect) intersects(b rect) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// inside reports whether a lies within b, give or take half a pixel.
func (a rect) inside(b rect) bool {
	return a.X >= b.X-0.5 && a.Y >= b.Y-0.5 && a.X+a.W <= b.X+b.W+0.5 && a.Y+a.H <= b.Y+b.H+0.5
}

// cellText is where chromium drew a cell's label and badge: the boxes of
// their text (one a line), and the cell's box.
type cellText struct {
	host, gpu    string
	cell         rect
	label, badge []rect
}

// cellTexts is the drawn text of the label and badge of every GPU cell
// that is laid out (a card off screen is not: content-visibility). A
// pseudo-element has no getBoundingClientRect, and its box would not show
// text that runs out of it anyway: the boxes are those of its text, from
// a DOM snapshot.
func (tb *tab) cellTexts() []cellText {
	tb.t.Helper()
	n := eval[int](tb, `(() => {
		const cells = document.querySelectorAll(".gpu:not(.w)");
		cells.forEach((e, i) => e.dataset.probe = i);
		return cells.length;
	})()`)
	var snap domsnapshot.CaptureSnapshotResult
	err := chromedp.Do(tb.ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		var err error
		snap, err = cdp.Call(ctx, t, domsnapshot.CaptureSnapshot, domsnapshot.CaptureSnapshotParams{ComputedStyles: []string{}})
		return err
	}))
	if err != nil {
		tb.t.Fatalf("capturing a DOM snapshot: %v", err)
	}
	if len(snap.Documents) == 0 {
		tb.t.Fatal("the DOM snapshot has no document")
	}
	cells := cellsOf(snap.Documents[0], snap.Strings)
	if len(cells) != n {
		tb.t.Fatalf("the DOM snapshot has %d of the page's %d cells", len(cells), n)
	}
	placeText(snap.Documents[0], snap.Strings, cells)
	out := make([]cellText, 0, len(cells))
	for _, c := range cells {
		out = append(out, *c)
	}
	return out
}

// cellsOf is the snapshot's cells (marked data-probe) by node index.
func cellsOf(doc *domsnapshot.DocumentSnapshot, strs []string) map[int64]*cellText {
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	cells := map[int64]*cellText{}
	for node, attrs := range doc.Nodes.Attributes {
		a := map[string]string{}
		for k := 0; k+1 < len(attrs); k += 2 {
			a[str(attrs[k])] = str(attrs[k+1])
		}
		if _, ok := a["data-probe"]; ok {
			cells[int64(node)] = &cellText{gpu: a["data-gpu"]}
		}
	}
	for node, c := range cells { // the card's host
		for p := doc.Nodes.ParentIndex[node]; p >= 0 && c.host == ""; p = doc.Nodes.ParentIndex[p] {
			attrs := doc.Nodes.Attributes[p]
			for k := 0; k+1 < len(attrs); k += 2 {
				if str(attrs[k]) == "data-host" {
					c.host = str(attrs[k+1])
				}
			}
		}
	}
	return cells
}

// placeText fills in the cells' boxes and their labels' and badges' text
// boxes: the text of a ::before or ::after is laid out under the
// pseudo-element's node, whose parent is the cell.
func placeText(doc *domsnapshot.DocumentSnapshot, strs []string, cells map[int64]*cellText) {
	pseudo := map[int64]string{}
	if pt := doc.Nodes.PseudoType; pt != nil {
		for k, node := range pt.Index {
			pseudo[node] = strs[pt.Value[k]]
		}
	}
	rectOf := func(r domsnapshot.Rectangle) rect {
		if len(r) < 4 {
			return rect{}
		}
		return rect{r[0], r[1], r[2], r[3]}
	}
	for li, node := range doc.Layout.NodeIndex {
		if c := cells[node]; c != nil {
			c.cell = rectOf(doc.Layout.Bounds[li])
		}
	}
	for k, li := range doc.TextBoxes.LayoutIndex {
		node := doc.Layout.NodeIndex[li]
		c := cells[doc.Nodes.ParentIndex[node]]
		if c == nil {
			continue
		}
		switch pseudo[node] {
		case "before":
			c.label = append(c.label, rectOf(doc.TextBoxes.Bounds[k]))
		case "after":
			c.badge = append(c.badge, rectOf(doc.TextBoxes.Bounds[k]))
		}
	}
}

// A cell's label never runs over its badge, nor out of the cell: a lost
// GPU's bus id, and the bus id or UUID of a down host's GPU as history
// last saw it, included; on a desktop and on a phone.
func TestCellLabelClearOfBadge(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	dir := renderHistoryPage(t, labelsFleet(now), labelsHistory(now), now)
	for _, tt := range []struct {
		name string
		o    tabOptions
	}{
		{"desktop", tabOptions{}},
		{"phone", tabOptions{width: 390, height: 844, mobile: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTab(t, tt.o)
			tb.load(serve(t, dir))
			seen := map[string]bool{}
			for _, host := range []string{"gpu01", "gpu02", "gpu03"} {
				tb.scrollTo(fmt.Sprintf(`.host[data-host=%q]`, host))
				for _, c := range tb.cellTexts() {
					id := c.host + "/" + c.gpu
					if seen[id] || len(c.label) == 0 || len(c.badge) == 0 {
						continue // checked, or not laid out (off screen)
					}
					seen[id] = true
					checkCellText(t, c)
				}
			}
			for _, gpu := range []string{"gpu01/0", "gpu01/0000:9a:00.0", "gpu02/00000000:9A:00.0",
				"gpu03/00000000:9A:00.0", "gpu03/GPU-6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11"} {
				if !seen[gpu] {
					t.Errorf("cell %s: no label and badge drawn (cells seen: %v)", gpu, seen)
				}
			}
			tb.screenshot("labels-"+tt.name+".png", false)
			tb.noProblems("after the checks")
		})
	}
}

func checkCellText(t *testing.T, c cellText) {
	t.Helper()
	for _, l := range c.label {
		for _, b := range c.badge {
			if l.intersects(b) {
				t.Errorf("cell %s/%s: its label %+v runs over its badge %+v", c.host, c.gpu, l, b)
			}
		}
		if !l.inside(c.cell) {
			t.Errorf("cell %s/%s: its label %+v runs out of the cell %+v", c.host, c.gpu, l, c.cell)
		}
	}
	for _, b := range c.badge {
		if !b.inside(c.cell) {
			t.Errorf("cell %s/%s: its badge %+v runs out of the cell %+v", c.host, c.gpu, b, c.cell)
		}
	}
}
