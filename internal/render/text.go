package render

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumon/gpumon/internal/cluster"
)

// ANSI colours per state; failed is dim.
var stateColor = map[string]string{
	cluster.Free: "\x1b[32m", cluster.Busy: "\x1b[31m", cluster.Reserved: "\x1b[33m", cluster.Failed: "\x1b[90m",
}

const colorReset = "\x1b[0m"

// Text writes the cluster as a table for a terminal, one line per GPU (and
// one per host that is down), with the summary first. Colour only when
// color is set; the words say the same without it.
func Text(w io.Writer, r *Report, color bool) error {
	c := r.Cluster
	b := bufio.NewWriter(w)
	writeTextSummary(b, r, color)

	rows := [][]string{{"HOST", "GPU", "NAME", "STATE", "MEMORY", "UTIL", "PROCESSES"}}
	states := []string{""}
	for _, h := range c.Hosts {
		if !h.Up() {
			rows = append(rows, []string{h.Display, "-", "", "down", "", "", string(h.Status) + ": " + oneLine(h.Error)})
			states = append(states, cluster.Failed)
			continue
		}
		for _, g := range h.GPUs {
			var procs []string
			for _, p := range g.Procs {
				s := userName(p.User)
				if p.PID.Valid {
					s += "(" + strconv.FormatInt(p.PID.Value, 10) + ")"
				}
				if p.Preemptible {
					s += "[idle job]"
				} else if p.Ignored {
					s += "[ignored]"
				}
				procs = append(procs, s)
			}
			extra := strings.Join(procs, " ")
			notes := append([]string{}, g.Notes...)
			if g.Error != "" {
				notes = append([]string{g.Error}, notes...)
			}
			if rs := reservationText(g.Reservation, r.Loc); rs != "" {
				notes = append(notes, rs)
			}
			if len(notes) > 0 {
				extra = strings.TrimSpace(extra + " " + strings.Join(notes, "; "))
			}
			util := ""
			if g.Util.Valid {
				util = num(g.Util, "%")
			}
			rows = append(rows, []string{h.Display, g.ID(), g.Short, g.State,
				memText(g.MemUsed, g.MemTotal), util, oneLine(extra)})
			states = append(states, g.State)
		}
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row[:len(row)-1] {
			widths[i] = max(widths[i], utf8.RuneCountInString(oneLine(cell)))
		}
	}
	for n, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			cell = oneLine(cell)
			pad := ""
			if i < len(row)-1 {
				pad = strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell)+2)
			}
			if color && i == 3 && states[n] != "" {
				cell = stateColor[states[n]] + cell + colorReset
			}
			line.WriteString(cell + pad)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	return b.Flush()
}

// oneLine keeps a table cell on one line and drops control characters, so
// nothing a host printed (a process name with escape sequences) can move the
// cursor or recolour the terminal: C0 and C1 controls (0x9b is CSI to some
// terminals, as a raw byte too), invalid UTF-8 and other runes that are not
// printable (bidi overrides, zero-width ones). Each run of them is a space.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		// a byte that is not UTF-8 decodes as RuneError
		return r == utf8.RuneError || !unicode.IsPrint(r)
	}), " ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// writeTextSummary writes the lines above the table: the counts, the data's
// age, the stale warning and the page's warnings.
func writeTextSummary(b *bufio.Writer, r *Report, color bool) {
	c := r.Cluster
	fmt.Fprintf(b, "%d free of %d GPUs", c.Count[cluster.Free], c.GPUs)
	models, more := modelsView(c.Models)
	for _, m := range models {
		fmt.Fprintf(b, " · %s: %d free of %d", oneLine(m.Name), m.Free, m.Total)
	}
	if more != nil {
		fmt.Fprintf(b, " · +%d more: %d free of %d", more.N, more.Free, more.Total)
	}
	if c.Down > 0 {
		fmt.Fprintf(b, " · %d host%s down", c.Down, plural(c.Down))
	}
	age := r.Age()
	if age >= 0 {
		fmt.Fprintf(b, " · data %s old\n", ageText(age))
	} else {
		fmt.Fprintln(b, " · data time unknown")
	}
	if r.Stale() {
		line := "STALE: " + noTimeText
		if age >= 0 {
			line = fmt.Sprintf("STALE: the newest reading is %s old (more than %s)", ageText(age), durText(r.Config.StaleAfter))
		}
		if color {
			line = "\x1b[1;31m" + line + colorReset
		}
		fmt.Fprintln(b, line)
	}
	for _, wmsg := range r.Warnings {
		fmt.Fprintln(b, "warning: "+oneLine(wmsg))
	}
}
