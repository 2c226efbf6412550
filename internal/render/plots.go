package render

import (
	"bufio"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/history"
)

// The page's history (Report.History) is drawn here, in Go, as inline
// SVG and tables: no script is needed to see it. Every text in an SVG (a
// user's name) goes through esc like the rest of the page: in an <svg>
// the parser still reads &lt; and &amp; as text, and since < is never
// written raw, neither "<![CDATA[" nor "]]>" nor "</svg>" can start or end
// anything.

// The fleet plots' bands, bottom to top, with their class (the style
// sheet's fill and pattern) and their label. Each band has a pattern
// besides its colour and is named at the plot's right edge, so that no
// one needs to tell colours apart.
var fleetBands = []struct{ class, label string }{
	{"busy", "busy"},
	{"idle", "idle-held"},
	{"resv", "reserved"},
	{"free", "free"},
	{"fail", "failed + down"},
}

// bandValues is p's GPUs per band, in fleetBands' order. Idle-held GPUs
// are held, so busy: the busy band is the rest of the busy ones.
func bandValues(p history.FleetPoint) [5]float64 {
	idle := max(0, p.IdleHeld)
	return [5]float64{max(0, p.Busy-idle), min(idle, max(0, p.Busy)), max(0, p.Reserved), max(0, p.Free), max(0, p.Failed) + max(0, p.Down)}
}

// The fleet plot's box, in SVG units (the style sheet scales it to the
// page's width): the plot area is [plotL, plotR] × [plotT, plotB].
const (
	plotW, plotH = 600, 195
	plotL, plotR = 44, 470 // the right margin holds the bands' labels
	plotT, plotB = 10, 170
)

// writeFleetPlot draws the fleet's GPUs per state over [from, to] as
// stacked areas. A gap in the points over gapOver (no snapshots: render
// did not run) is left empty rather than bridged.
func writeFleetPlot(w *bufio.Writer, title string, pts []history.FleetPoint, from, to time.Time, gapOver time.Duration, loc *time.Location) {
	w.WriteString("\n<figure class=plot><figcaption>")
	esc(w, title)
	w.WriteString("</figcaption>")
	in := pointsIn(pts, from, to)
	if len(in) < 2 {
		w.WriteString("<p class=nodata>Not enough history yet: ")
		w.WriteString(strconv.Itoa(len(in)))
		w.WriteString(" point(s).</p></figure>")
		return
	}
	top := 0.0
	for _, p := range in {
		v := bandValues(p)
		top = max(top, v[0]+v[1]+v[2]+v[3]+v[4])
	}
	yMax := niceCeil(top)
	span := to.Sub(from).Seconds()
	x := func(t time.Time) int {
		return plotL + int(math.Round(t.Sub(from).Seconds()/span*(plotR-plotL)))
	}
	y := func(v float64) int { return plotB - int(math.Round(v/yMax*(plotB-plotT))) }

	last := bandValues(in[len(in)-1])
	w.WriteString("<svg viewBox=\"0 0 " + strconv.Itoa(plotW) + " " + strconv.Itoa(plotH) + "\" role=img aria-label=\"")
	esc(w, title+": "+fleetNow(last))
	w.WriteString("\">")
	writeYAxis(w, yMax, y)
	// The bands from the top one down, each filled from its top line to
	// the axis: the ones drawn after cover the lower part, so each path
	// is one line, not a line and its way back.
	var buf []byte
	for b := len(fleetBands) - 1; b >= 0; b-- {
		w.WriteString("<path class=" + fleetBands[b].class + " d=\"")
		buf = stackPath(buf[:0], in, b, x, y, gapOver)
		w.Write(buf)
		w.WriteString("\"/>")
	}
	writeBandLabels(w, last, y)
	writeTimeAxis(w, from, to, loc)
	w.WriteString("</svg></figure>")
}

// pointsIn is the points of pts in [from, to].
func pointsIn(pts []history.FleetPoint, from, to time.Time) []history.FleetPoint {
	var in []history.FleetPoint
	for _, p := range pts {
		if !p.Time.Before(from) && !p.Time.After(to) {
			in = append(in, p)
		}
	}
	return in
}

// writeYAxis draws the grid and the y axis: 0, half and the top.
func writeYAxis(w *bufio.Writer, yMax float64, y func(float64) int) {
	for _, v := range []float64{0, yMax / 2, yMax} {
		yy := strconv.Itoa(y(v))
		w.WriteString("<path class=grid d=\"M" + strconv.Itoa(plotL) + "," + yy + "H" + strconv.Itoa(plotR) + "\"/>")
		w.WriteString("<text class=ax x=" + strconv.Itoa(plotL-4) + " y=" + yy + " dy=4 text-anchor=end>" + strconv.FormatFloat(v, 'f', -1, 64) + "</text>")
	}
}

// writeBandLabels labels the bands at the plot's right edge, at the
// middle of each band thick enough to hold one; the figure's legend names
// them all.
func writeBandLabels(w *bufio.Writer, last [5]float64, y func(float64) int) {
	cum, lastY := 0.0, plotB+20
	for b, band := range fleetBands {
		lo := cum
		cum += last[b]
		mid := y((lo + cum) / 2)
		if y(lo)-y(cum) < 11 || lastY-mid < 12 {
			continue
		}
		lastY = mid
		w.WriteString("<text class=lb x=" + strconv.Itoa(plotR+4) + " y=" + strconv.Itoa(mid) + " dy=4>")
		w.WriteString(band.label + " " + strconv.FormatFloat(math.Round(last[b]), 'f', -1, 64))
		w.WriteString("</text>")
	}
}

// writeTimeAxis draws the time axis's ticks and both its ends, in the
// page's one time format.
func writeTimeAxis(w *bufio.Writer, from, to time.Time, loc *time.Location) {
	w.WriteString("<path class=grid d=\"M" + strconv.Itoa(plotL) + "," + strconv.Itoa(plotB) + "v5M" + strconv.Itoa(plotR) + "," + strconv.Itoa(plotB) + "v5\"/>")
	w.WriteString("<text class=ax x=" + strconv.Itoa(plotL) + " y=" + strconv.Itoa(plotB+20) + ">")
	w.WriteString(timeText(from, loc))
	w.WriteString("</text><text class=ax x=" + strconv.Itoa(plotR) + " y=" + strconv.Itoa(plotB+20) + " text-anchor=end>")
	w.WriteString(timeText(to, loc))
	w.WriteString("</text>")
}

// fleetNow is the newest point in words, the plot's text alternative.
func fleetNow(v [5]float64) string {
	parts := make([]string, 0, len(fleetBands))
	for b, band := range fleetBands {
		parts = append(parts, strconv.FormatFloat(math.Round(v[b]), 'f', -1, 64)+" "+band.label)
	}
	return "now " + strings.Join(parts, ", ")
}

// stackPath is the SVG path of band b's top line (the bands below it
// added) closed down to the axis, a separate piece after each gap: an
// absolute move, then relative steps ("l3-2 2 0"), which are a third of
// the bytes of absolute ones.
func stackPath(buf []byte, pts []history.FleetPoint, b int, x func(time.Time) int, y func(float64) int, gapOver time.Duration) []byte {
	var px, start int
	open := false
	closeTo := func() {
		// down to the axis, back to the start, closed
		buf = append(buf, 'V')
		buf = strconv.AppendInt(buf, plotB, 10)
		buf = append(buf, 'H')
		buf = strconv.AppendInt(buf, int64(start), 10)
		buf = append(buf, 'Z')
	}
	py := 0
	for i, p := range pts {
		v := bandValues(p)
		sum := 0.0
		for k := 0; k <= b; k++ {
			sum += v[k]
		}
		nx, ny := x(p.Time), y(sum)
		if open && p.Time.Sub(pts[i-1].Time) > gapOver {
			closeTo()
			open = false
		}
		if !open {
			buf = append(buf, 'M')
			buf = strconv.AppendInt(buf, int64(nx), 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(ny), 10)
			buf = append(buf, 'l')
			start, open = nx, true
		} else {
			dx, dy := nx-px, ny-py
			if buf[len(buf)-1] != 'l' {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendInt(buf, int64(dx), 10)
			if dy >= 0 {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendInt(buf, int64(dy), 10)
		}
		px, py = nx, ny
	}
	if open {
		closeTo()
	}
	return buf
}

// niceCeil is the smallest of 1, 2, 2.5, 5 × 10^n at or over v (at least 1):
// the y axis's top.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// usersMax is how many users a GPU-hours plot names; the rest are one bar,
// "others".
const usersMax = 10

// userBar is one bar of a GPU-hours plot.
type userBar struct {
	name  string
	hours float64
}

// userBars is each user's GPU-hours over the last `days` days (the same
// rolling window as status.json's gpu_hours, not calendar days), ranked by
// rankBars.
func userBars(s *history.Summary, days int) (bars []userBar, others int) {
	window := strconv.Itoa(days) + "d"
	for _, u := range s.Users {
		if h := u.GPUHours[window]; h > 0 && !math.IsNaN(h) {
			bars = append(bars, userBar{u.User, h})
		}
	}
	return rankBars(bars)
}

// rankBars puts the most hours first (then by name), the bars past
// usersMax as one "N others" bar.
func rankBars(bars []userBar) ([]userBar, int) {
	slices.SortFunc(bars, func(a, b userBar) int {
		if a.hours != b.hours {
			if a.hours > b.hours {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	if len(bars) > usersMax+1 { // "1 others" would take a bar to hide one name
		rest := userBar{}
		for _, b := range bars[usersMax:] {
			rest.hours += b.hours
		}
		return append(bars[:usersMax], rest), len(bars) - usersMax
	}
	return bars, 0
}

// barNameMax is how much of a name a bar's label shows; the bar's title
// (a tooltip) has it whole.
const barNameMax = 18

// writeBarPlot draws GPU-hours per user (or team) as horizontal bars,
// each labelled with its name and hours; others is how many the last bar
// stands for (0: it is one name).
func writeBarPlot(w *bufio.Writer, title string, bars []userBar, others int) {
	w.WriteString("\n<figure class=plot><figcaption>")
	esc(w, title)
	w.WriteString("</figcaption>")
	if len(bars) == 0 {
		w.WriteString("<p class=nodata>No GPU-hours in this span.</p></figure>")
		return
	}
	const rowH, labelW, barW = 22, 150, 360
	most := bars[0].hours
	for _, b := range bars {
		most = max(most, b.hours)
	}
	h := len(bars)*rowH + 4
	w.WriteString("<svg class=bars viewBox=\"0 0 600 " + strconv.Itoa(h) + "\" role=img aria-label=\"")
	esc(w, title)
	w.WriteString("\">")
	for i, b := range bars {
		y := i*rowH + 2
		name := b.name
		cls := "bar"
		if others > 0 && i == len(bars)-1 {
			name = strconv.Itoa(others) + " others"
			cls = "bar o" // hatched: not one user
		}
		// a name is one line: a newline in it is a space (and escaped text)
		label := shorten(strings.Join(strings.Fields(userName(name)), " "), barNameMax)
		wd := max(1, int(math.Round(b.hours/most*barW)))
		w.WriteString("<g><title>")
		esc(w, userName(name))
		w.WriteString(": ")
		w.WriteString(hoursText(b.hours))
		w.WriteString("</title><text x=" + strconv.Itoa(labelW-6) + " y=" + strconv.Itoa(y+15) + " text-anchor=end>")
		esc(w, label)
		w.WriteString("</text><rect class=\"" + cls + "\" x=" + strconv.Itoa(labelW) + " y=" + strconv.Itoa(y+3) +
			" width=" + strconv.Itoa(wd) + " height=" + strconv.Itoa(rowH-6) + " />")
		w.WriteString("<text class=ax x=" + strconv.Itoa(labelW+wd+5) + " y=" + strconv.Itoa(y+15) + ">")
		w.WriteString(hoursText(b.hours))
		w.WriteString("</text></g>")
	}
	w.WriteString("</svg></figure>")
}

// hoursText is GPU-hours for the page: "0.4 GPU-h", "12 GPU-h", "1,234 GPU-h".
func hoursText(h float64) string { return groupedText(h) + " GPU-h" }

// The utilization sparklines are drawn by page.js from a compact string:
// at 8,000 GPUs × 24 hours, an SVG for each would be megabytes. Each
// point is one of 7 states, 0 unknown or 1 + its level (utilization in
// fifths, rounded: 0, 20, 40, 60, 80, 100%), and two points make one
// character of utilAlphabet (the first × 7 + the second, 0 to 48). The
// alphabet's last 15 characters (49 + n) repeat the character before them
// n + 1 more times: a GPU idle, or steady, for hours costs two. A host's
// card carries its GPUs' strings in one data-util attribute, in the order
// of its cells, separated by "."; a GPU whose points are all 0 or unknown
// has an empty string (those at the end are left out), and a card whose
// GPUs all do has no attribute. The alphabet is base64url's, which needs
// no quotes in an attribute.
const utilAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

const (
	utilStates = 7
	utilRun    = utilStates * utilStates // the first repeat character
)

// utilState is a point's state: 0 unknown, else 1 + the level.
func utilState(v float64) int {
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return 1 + int(math.Round(min(v, 100)/100*(utilStates-2)))
}

// appendUtil appends the GPU's points as utilAlphabet characters, or
// nothing when they are all 0 or unknown.
func appendUtil(buf []byte, pts []float64) []byte {
	some := false
	for _, v := range pts {
		if utilState(v) > 1 {
			some = true
			break
		}
	}
	if !some {
		return buf
	}
	run := 0 // repeats of the last character not written yet
	flush := func() {
		for run > 0 {
			n := min(run, len(utilAlphabet)-utilRun)
			buf = append(buf, utilAlphabet[utilRun+n-1])
			run -= n
		}
	}
	last := -1
	for i := 0; i < len(pts); i += 2 {
		a, b := utilState(pts[i]), 0
		if i+1 < len(pts) {
			b = utilState(pts[i+1])
		}
		c := a*utilStates + b
		if c == last {
			run++
			continue
		}
		flush()
		buf = append(buf, utilAlphabet[c])
		last = c
	}
	flush()
	return buf
}

// idleHeldMax is how many idle-held GPUs the page's table lists, longest
// first; each one's cell is marked whatever their number, and
// status.json lists them all.
const idleHeldMax = 100

// writeIdleHeld writes the table of the GPUs held idle now, longest
// first.
func writeIdleHeld(w *bufio.Writer, s *history.Summary, r *Report) {
	w.WriteString("\n<h2 id=idle>Idle-held GPUs</h2>")
	if len(s.IdleHeld) == 0 {
		w.WriteString("<p class=nodata>No GPU is held idle now")
		if r.Config.History.Params.IdleAfter > 0 {
			w.WriteString(" (held at ≤")
			w.WriteString(strconv.FormatFloat(r.Config.History.Params.IdleUtilPct, 'f', -1, 64))
			w.WriteString("% utilization for ")
			w.WriteString(settingText(r.Config.History.Params.IdleAfter))
			w.WriteString(" or more)")
		}
		w.WriteString(".</p>")
		return
	}
	w.WriteString("\n<table id=idleheld>\n<thead><tr><th>host<th>GPU<th>user(s)<th>idle since<th>for<th>memory held</thead>\n<tbody>")
	display := map[string]string{}
	for _, h := range r.Cluster.Hosts {
		display[h.Name] = h.Display
	}
	for i, sp := range s.IdleHeld {
		if i == idleHeldMax {
			break
		}
		w.WriteString("\n<tr><td>")
		if d := display[sp.Host]; d != "" {
			esc(w, d)
		} else {
			esc(w, sp.Host)
		}
		w.WriteString("<td>")
		esc(w, sp.GPU)
		w.WriteString("<td>")
		for j, u := range sp.Users {
			if j > 0 {
				w.WriteString(", ")
			}
			esc(w, userName(u))
		}
		w.WriteString("<td>")
		w.WriteString(timeText(time.Unix(sp.Start, 0), r.Loc))
		w.WriteString("<td>")
		w.WriteString(spanText(sp.Seconds()))
		w.WriteString("<td>")
		w.WriteString(gib(sp.MemMiB))
		w.WriteString("G")
	}
	w.WriteString("\n</tbody></table>")
	if n := len(s.IdleHeld) - idleHeldMax; n > 0 {
		w.WriteString("<p class=nodata>and ")
		w.WriteString(strconv.Itoa(n))
		w.WriteString(" more, each marked on its GPU above; status.json lists them all.</p>")
	}
}

// writeHistory writes the history's part of the page, after the users
// table: the idle-held GPUs, the fleet over 24 hours and 7 days, and
// GPU-hours per user (and per team, where [teams] names any) over 7 and
// 30 days. Without history it says so in one line when it is off; when
// it failed, the page's warning says why.
func writeHistory(w *bufio.Writer, r *Report) {
	s := r.History
	if s == nil {
		if r.Config.History.DB == "" {
			w.WriteString("\n<p class=nodata id=history>History is off ([history] db is empty): no plots and no idle-held GPUs.</p>")
		}
		return
	}
	writeIdleHeld(w, s, r)
	w.WriteString("\n<h2 id=history>History</h2>\n<p class=nodata>")
	w.WriteString(strconv.Itoa(s.Snapshots))
	w.WriteString(" snapshots since ")
	w.WriteString(timeText(s.First, r.Loc))
	w.WriteString(".</p>")
	w.WriteString("\n<svg class=defs width=0 height=0 aria-hidden=true><defs>" + plotPatterns + "</defs></svg>")
	if len(s.Fleet24h) > 1 || len(s.Fleet7d) > 1 { // a legend for plots that are drawn
		w.WriteString("\n<p class=\"legend pl\">")
		for _, b := range fleetBands {
			w.WriteString("<span><svg width=16 height=12 aria-hidden=true><rect class=" + b.class + " width=16 height=12 /></svg> " + b.label + "</span> ")
		}
		w.WriteString("</p>")
	}
	w.WriteString("\n<div class=plots>")
	newest := s.Newest
	if newest.IsZero() {
		newest = r.Now
	}
	writeFleetPlot(w, "GPUs by state, last 24 hours", s.Fleet24h, newest.Add(-24*time.Hour), newest, 3*time.Duration(r.Config.History.Params.MaxGap), r.Loc)
	writeFleetPlot(w, "GPUs by state, last 7 days (hourly averages)", s.Fleet7d, newest.Add(-7*24*time.Hour), newest, 3*time.Hour, r.Loc)
	for _, days := range []int{7, 30} {
		bars, others := userBars(s, days)
		writeBarPlot(w, "GPU-hours per user, last "+strconv.Itoa(days)+" days", bars, others)
	}
	if acc := &r.Config.Accounting; len(acc.Teams) > 0 {
		for _, days := range []int{7, 30} {
			bars, others := teamBars(s, acc, days)
			writeBarPlot(w, "GPU-hours per team, last "+strconv.Itoa(days)+" days", bars, others)
		}
	}
	w.WriteString("\n</div>")
}

// plotPatterns are the plots' fills besides colour: each state's pattern
// has its colour (a class the style sheet fills) under marks of its own.
const plotPatterns = `<pattern id=pi width=6 height=6 patternUnits=userSpaceOnUse patternTransform="rotate(45)"><rect class=b-busy width=6 height=6 /><path class=m-busy d="M0,0V6" stroke-width=2.5 /></pattern>` +
	`<pattern id=pr width=6 height=6 patternUnits=userSpaceOnUse><rect class=b-resv width=6 height=6 /><circle class=m-resv cx=3 cy=3 r=1.2 /></pattern>` +
	`<pattern id=pf width=6 height=6 patternUnits=userSpaceOnUse><rect class=b-fail width=6 height=6 /><path class=m-fail d="M0,0L6,6M6,0L0,6" /></pattern>` +
	`<pattern id=po width=6 height=6 patternUnits=userSpaceOnUse patternTransform="rotate(-45)"><rect class=b-bar width=6 height=6 /><path class=m-bar d="M0,0V6" stroke-width=2 /></pattern>`
