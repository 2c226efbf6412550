package render

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
)

// free.txt is for `curl -s monitor/free.txt | grep a100` and for scripts:
// a line per host with a free GPU, its columns separated by blanks, in an
// order that stays (docs/render.md documents them):
//
//	host free gpus free_gib degraded models
//
// host has no blanks (they become _); gpus are the free GPUs' indices
// ("0,3"), the healthy ones first; free_gib each one's free memory in
// GiB, in the same order ("?" when not known); degraded those of them
// whose health is degraded, or "-"; models, the last column, the free
// GPUs' models as the table's header counts them ("A100 80GB x2"). Lines
// starting with "#" are for people: the first gives the data's time and
// the totals, the second names the columns; "# no GPU is free" replaces
// the hosts' lines when none is.

// freeLine is one line of free.txt, its cells made safe: host, free,
// gpus, free_gib, degraded, then models, which may have blanks.
type freeLine struct {
	cells  [5]string
	models string
}

// freeHeader names free.txt's columns.
var freeHeader = freeLine{[5]string{"# host", "free", "gpus", "free_gib", "degraded"}, "models"}

// writeFreeText writes free.txt of r.
func writeFreeText(w io.Writer, r *Report) error {
	b := bufio.NewWriter(w)
	lines, hosts := freeLines(r) // the header first
	b.WriteString(freeSummary(r, hosts))
	b.WriteByte('\n')
	if r.stale() {
		// it may name a host, whose name could hold a newline: one line
		b.WriteString("# STALE: " + clean(staleText(r), textFileWidth-len("# STALE: ")) + "\n")
	}
	if hosts == 0 {
		b.WriteString("# no GPU is free\n")
		return b.Flush()
	}
	writeFreeTable(b, lines)
	return b.Flush()
}

// freeLines are the header and the lines of the hosts with a free GPU,
// those with a healthy one first (freeFirst), and how many hosts have one.
func freeLines(r *Report) ([]freeLine, int) {
	vendors := len(r.Cluster.Vendors) > 1
	lines := make([]freeLine, 1, 1+len(r.Cluster.Hosts))
	lines[0] = freeHeader
	for _, h := range freeFirst(r.Cluster.Hosts) {
		if !h.Up() || h.Count[cluster.Free] == 0 {
			continue
		}
		var free []*cluster.GPU
		for _, g := range healthyFirst(h.GPUs) {
			if g.State == cluster.Free {
				free = append(free, g)
			}
		}
		lines = append(lines, freeLineOf(h, free, vendors))
	}
	return lines, len(lines) - 1
}

// freeLineOf is h's line, of its free GPUs.
func freeLineOf(h *cluster.Host, free []*cluster.GPU, vendors bool) freeLine {
	var gpuBuf, memBuf [64]byte // a host's lists, most often short
	gpus, mem, degraded := gpuBuf[:0], memBuf[:0], []byte(nil)
	for i, g := range free {
		if i > 0 {
			gpus, mem = append(gpus, ','), append(mem, ',')
		}
		id := token(g.ID(), 48)
		gpus = append(gpus, id...)
		mem = append(mem, freeGiB(g)...)
		if g.Health.State == health.Degraded {
			if len(degraded) > 0 {
				degraded = append(degraded, ',')
			}
			degraded = append(degraded, id...)
		}
	}
	return freeLine{
		cells: [...]string{token(h.Name, hostNameMax), strconv.Itoa(len(free)),
			string(gpus), string(mem), cmp.Or(string(degraded), "-")},
		models: cmp.Or(modelsOf(h, free, vendors), "-"),
	}
}

// writeFreeTable writes lines in columns two blanks apart.
func writeFreeTable(b *bufio.Writer, lines []freeLine) {
	var widths [len(freeLine{}.cells)]int
	for _, l := range lines {
		for i, c := range l.cells {
			widths[i] = max(widths[i], strWidth(c))
		}
	}
	for _, l := range lines {
		for i, c := range l.cells {
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", 2+widths[i]-strWidth(c)))
		}
		b.WriteString(l.models)
		b.WriteByte('\n')
	}
}

// freeSummary is free.txt's first line: "# data 2026-11-23T14:05:00Z · 12
// of 64 GPUs free · on 3 of 8 hosts · 1 host down".
func freeSummary(r *Report, freeHosts int) string {
	c := r.Cluster
	when := "data time unknown"
	if !c.DataTime.IsZero() {
		when = "data " + c.DataTime.UTC().Format(time.RFC3339)
	}
	s := fmt.Sprintf("# %s · %d of %d GPUs free · on %d of %d hosts", when, c.Count[cluster.Free], c.GPUs, freeHosts, len(c.Hosts))
	if c.Down > 0 {
		s += fmt.Sprintf(" · %d host%s down", c.Down, plural(c.Down))
	}
	return s
}

// freeGiB is g's free memory in GiB, "79" or "7.5"; "?" when not known.
func freeGiB(g *cluster.GPU) string {
	if !g.MemUsed.Valid || !g.MemTotal.Valid {
		return "?"
	}
	free := max(0, g.MemTotal.Value-g.MemUsed.Value)
	if math.IsNaN(free) || math.IsInf(free, 0) {
		return "?"
	}
	if g := free / 1024; g >= 9.95 {
		return clip(wholeText(math.RoundToEven(g)), numberMax) // gib's, without a new string
	}
	return clip(gib(free), numberMax)
}

// token is s from a host as one cell of a line split at blanks: made safe
// (clean), cut to n columns, its blanks and commas (which separate a
// cell's items) turned to _; "?" for nothing, which would shift the
// columns after it.
func token(s string, n int) string {
	s = clean(s, n)
	if s == "" {
		return "?"
	}
	if !strings.ContainsAny(s, " ,") {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == ',' {
			return '_'
		}
		return r
	}, s)
}
