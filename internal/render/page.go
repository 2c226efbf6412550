package render

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/assets"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/templates"
)

// The page's frame (head, summary, users, footer) is html/template. The
// host cards, thousands of GPU cells, are written by writeHosts in Go, for
// speed: every string from a host (process, user, host and GPU names, error
// texts) and from the reservations file goes through esc or attr, which
// escape it as html/template would and quote every attribute value that is
// not plainly safe. TestMarkupDoesNotDependOnData and FuzzMarkup check that
// no text can change the markup. The script takes its data from data
// attributes only.
var pageTmpl = template.Must(template.ParseFS(templates.FS, "page.html"))

// csp allows the inline style and exactly the inline script of this build:
// even a bug in escaping could not run a script or load anything.
var csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-" +
	hash(assets.JS) + "'; base-uri 'none'; form-action 'none'"

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// commandMax is how much of a command line the page shows; status.json has
// it whole.
const commandMax = 100

// hostErrorMax is how much of a failed host's reason its card shows; the
// rest is in the card's detail.
const hostErrorMax = 300

// gpuErrorMax is how much of a lost GPU's error its cell shows.
const gpuErrorMax = 40

// modelsMax is how many models the summary names; the rest are "+N more".
const modelsMax = 6

type modelView struct {
	Name        string
	Free, Total int
}

type moreModels struct {
	N, Free, Total int
}

type userView struct {
	Name, Mem, Hosts string
	GPUs, Procs      int
}

// HTML writes the status page.
func HTML(w io.Writer, r *Report) error {
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriterSize(w, 64<<10)
	}
	v := pageViewOf(r)
	if err := pageTmpl.ExecuteTemplate(bw, "head", v); err != nil {
		return err
	}
	writeHosts(bw, r)
	if err := pageTmpl.ExecuteTemplate(bw, "tail", v); err != nil {
		return err
	}
	return bw.Flush()
}

func pageViewOf(r *Report) map[string]any {
	c := r.Cluster
	cfg := r.Config
	v := map[string]any{
		"Title":          cfg.Title,
		"CSP":            csp,
		"CSS":            template.CSS(assets.CSS),
		"JS":             template.JS(assets.JS),
		"Refresh":        int(cfg.Refresh / time.Second),
		"RefreshText":    durText(cfg.Refresh),
		"DataTime":       "",
		"DataTimeText":   timeText(c.DataTime, r.Loc),
		"Generated":      timeText(r.Now, r.Loc),
		"StaleAfterS":    int(cfg.StaleAfter / time.Second),
		"StaleAfterText": durText(cfg.StaleAfter),
		"Stale":          r.Stale(),
		"Age":            "", // known age only; the page says unknown otherwise
		"NoTimeText":     noTimeText,
		"Free":           c.Count[cluster.Free],
		"Busy":           c.Count[cluster.Busy],
		"Reserved":       c.Count[cluster.Reserved],
		"Failed":         c.Count[cluster.Failed],
		"Total":          c.GPUs,
		"Hosts":          len(c.Hosts),
		"Down":           c.Down,
		"Models":         nil,
		"MoreModels":     nil,
		"Warnings":       r.Warnings,
		"JSONLink":       r.JSONLink,
		"PromLink":       r.PromLink,
	}
	if !c.DataTime.IsZero() {
		v["DataTime"] = c.DataTime.UTC().Format(time.RFC3339)
	}
	if a := r.Age(); a >= 0 {
		v["Age"] = ageText(a)
	}
	models, more := modelsView(c.Models)
	v["Models"] = models
	if more != nil {
		v["MoreModels"] = more
	}
	users := make([]userView, 0, len(c.Users))
	for _, u := range c.Users {
		users = append(users, userView{Name: userName(u.Name), GPUs: u.GPUs, Procs: u.Procs,
			Mem: gib(u.MemMiB) + " GiB", Hosts: strings.Join(u.Hosts, ", ")})
	}
	v["Users"] = users
	return v
}

var stateText = map[string]string{
	cluster.Free: "free", cluster.Busy: "busy", cluster.Reserved: "reserved", cluster.Failed: "failed",
}

// writeHosts writes one card per host:
//
//	<section class=host data-host=NAME><h2>DISPLAY <small>INFO</small></h2>
//	<ul>
//	<li class=gpu data-state=busy data-gpu=0 tabindex=0>...</li>
//	</ul></section>
//
// A GPU cell names its model only when the card's header does not (a host
// with mixed models); its detail (shown on hover, focus or tap) holds the
// sensors, notes and processes.
func writeHosts(w *bufio.Writer, r *Report) {
	var scratch []byte // for numbers
	for _, h := range r.Cluster.Hosts {
		w.WriteString("\n<section class=host")
		attr(w, "data-host", h.Name)
		w.WriteString("><h2>")
		esc(w, h.Display)
		info := hostInfo(h)
		if info != "" {
			w.WriteString(" <small>")
			esc(w, info)
			w.WriteString("</small>")
		}
		w.WriteString("</h2>")
		if h.Up() && h.Error != "" { // an ok host's warnings
			w.WriteString("<p class=hn>")
			esc(w, h.Error)
			w.WriteString("</p>")
		}
		w.WriteString("\n<ul>")
		if !h.Up() {
			w.WriteString("\n<li class=\"gpu w\" data-state=failed data-gpu=\"\" tabindex=0><i>down</i> <b>")
			esc(w, string(h.Status))
			w.WriteString("</b><p class=why>")
			short := shorten(h.Error, hostErrorMax)
			esc(w, short)
			w.WriteString("</p>")
			if s := reservationText(h.Reserved, r.Loc); s != "" {
				w.WriteString("<p>")
				esc(w, s)
				w.WriteString("</p>")
			}
			if short != h.Error {
				w.WriteString("<div class=gpu-detail><p>")
				esc(w, h.Error)
				w.WriteString("</p></div>")
			}
		}
		for _, g := range h.GPUs {
			scratch = writeGPU(w, h, g, r, scratch)
		}
		w.WriteString("\n</ul></section>")
	}
}

// hostInfo is the card's header after the name: "gpu01 · 8× NVIDIA H100
// 80GB HBM3 · 3 free" (the raw name when it has a display name).
func hostInfo(h *cluster.Host) string {
	var info []string
	if h.Display != h.Name {
		info = append(info, h.Name)
	}
	if !h.Up() {
		return strings.Join(info, " · ")
	}
	if h.ModelName != "" {
		n := 0
		for _, g := range h.GPUs {
			if g.Name == h.ModelName {
				n++
			}
		}
		info = append(info, strconv.Itoa(n)+"× "+h.ModelName)
	}
	if h.Count[cluster.Free] > 0 {
		info = append(info, strconv.Itoa(h.Count[cluster.Free])+" free")
	}
	return strings.Join(info, " · ")
}

func writeGPU(w *bufio.Writer, h *cluster.Host, g *cluster.GPU, r *Report, scratch []byte) []byte {
	id := g.ID()
	w.WriteString("\n<li class=gpu data-state=")
	w.WriteString(g.State) // one of cluster.States
	// the host is the card's data-host: 8,000 cells need not repeat it
	attr(w, "data-gpu", id)
	w.WriteString(" tabindex=0>") // the style sheet shows data-gpu first
	if g.Name != h.ModelName || h.ModelName == "" {
		esc(w, g.Short)
		w.WriteString(" ")
	}
	w.WriteString("<i>")
	w.WriteString(stateText[g.State])
	w.WriteString("</i>")
	if g.Error != "" {
		w.WriteString("<p class=why>")
		esc(w, reasonText(g.Error, gpuErrorMax))
		w.WriteString("</p>")
	}
	if mem := memText(g.MemUsed, g.MemTotal); mem != "" {
		// the bar above the text is the style sheet's, from --m
		if p := memPct(g.MemUsed, g.MemTotal); p > 0 {
			w.WriteString("<small style=--m:")
			scratch = strconv.AppendInt(scratch[:0], int64(p), 10)
			w.Write(scratch)
			w.WriteString("%>")
		} else {
			w.WriteString("<small>")
		}
		esc(w, mem)
		if g.Util.Valid {
			w.WriteString(" · ")
			esc(w, num(g.Util, "%"))
		}
		w.WriteString("</small>")
	}
	idle := false
	for _, p := range g.Procs {
		idle = idle || p.Preemptible
	}
	if idle {
		w.WriteString(" <span class=tag>idle job</span>")
	}
	sens := sensors(g)
	if g.Name != h.ModelName && g.Name != "" {
		sens = strings.TrimSuffix(g.Name+" · "+sens, " · ")
	}
	if sens == "" && len(g.Procs) == 0 && g.Error == "" && len(g.Notes) == 0 && g.Reservation == nil {
		return scratch // nothing to tell
	}
	w.WriteString("<div class=gpu-detail>")
	esc(w, sens) // the first line; notes and the table are blocks
	note := func(s string) {
		w.WriteString("<p class=n>")
		esc(w, s)
		w.WriteString("</p>")
	}
	if g.Error != "" {
		note(g.Error)
	}
	for _, n := range g.Notes {
		note(n)
	}
	if s := reservationText(g.Reservation, r.Loc); s != "" {
		note(s)
	}
	if len(g.Procs) > 0 {
		// no processes: the style sheet says so
		w.WriteString("<table>")
		for _, p := range g.Procs {
			mark := ""
			switch {
			case p.Preemptible:
				mark = "(idle-time job)"
			case p.Ignored:
				mark = "(ignored)"
			}
			if mark != "" {
				w.WriteString("<tr class=x><td>")
			} else {
				w.WriteString("<tr><td>")
			}
			esc(w, userName(p.User))
			w.WriteString("<td>")
			if p.PID.Valid {
				scratch = strconv.AppendInt(scratch[:0], p.PID.Value, 10)
				w.Write(scratch)
			}
			w.WriteString("<td>")
			esc(w, commandText(p.Command))
			if mark != "" {
				w.WriteString(" <em>")
				w.WriteString(mark)
				w.WriteString("</em>")
			}
			w.WriteString("<td>")
			if p.MemMiB.Valid {
				w.WriteString(gib(p.MemMiB.Value))
				w.WriteString("G")
			} else {
				w.WriteString("?")
			}
			w.WriteString("<td>")
			w.WriteString(elapsedText(p.ElapsedS))
		}
		w.WriteString("</table>")
	}
	w.WriteString("</div>") // </li> is implied by the next <li> or </ul>
	return scratch
}

// commandText is a command line as the page shows it: its program by base
// name, as top shows it ("/opt/conda/envs/x/bin/python -u train.py" is
// "python -u train.py"), cut at commandMax characters with "…".
// status.json has the whole command.
func commandText(c string) string {
	if strings.HasPrefix(c, "/") {
		end := strings.IndexAny(c, " \t")
		if end < 0 {
			end = len(c)
		}
		if i := strings.LastIndexByte(c[:end], '/'); i >= 0 && i < end-1 {
			c = c[i+1:]
		}
	}
	return shorten(c, commandMax)
}

// attr writes ` name=value`, the value quoted and escaped unless it is
// made only of characters that need neither (letters, digits, . _ : -), as
// most host names and GPU ids are. An unquoted value can be ended by a
// space, and broken by = < > ` ' ", so anything else is quoted.
func attr(w *bufio.Writer, name, value string) {
	w.WriteByte(' ')
	w.WriteString(name)
	w.WriteByte('=')
	if value != "" && plain(value) {
		w.WriteString(value)
		return
	}
	w.WriteByte('"')
	esc(w, value)
	w.WriteByte('"')
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// esc writes s as HTML text or as a quoted attribute value, escaped as
// template.HTMLEscapeString does: & < > " ' and NUL.
func esc(w *bufio.Writer, s string) {
	last := 0
	for i := 0; i < len(s); i++ {
		var rep string
		switch s[i] {
		case '&':
			rep = "&amp;"
		case '<':
			rep = "&lt;"
		case '>':
			rep = "&gt;"
		case '"':
			rep = "&#34;"
		case '\'':
			rep = "&#39;"
		case 0:
			rep = "\uFFFD"
		default:
			continue
		}
		w.WriteString(s[last:i])
		w.WriteString(rep)
		last = i + 1
	}
	w.WriteString(s[last:])
}

// modelsView is the summary's models: the first modelsMax (the biggest),
// then the rest together.
func modelsView(ms []*cluster.Model) ([]modelView, *moreModels) {
	var out []modelView
	var more *moreModels
	for i, m := range ms {
		if i >= modelsMax && len(ms) > modelsMax {
			if more == nil {
				more = &moreModels{}
			}
			more.N++
			more.Free += m.Free
			more.Total += m.Total
			continue
		}
		out = append(out, modelView{Name: modelName(m.Name), Free: m.Free, Total: m.Total})
	}
	return out, more
}

// modelName names the model of GPUs whose model is not known.
func modelName(s string) string {
	if s == "" {
		return "unknown model"
	}
	return s
}
