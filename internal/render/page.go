package render

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/assets"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/reservations"
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
//
// The view is a struct (pageView): a field the template names that the
// view lacks fails at execution. missingkey=error makes a map fed to it
// by mistake fail the same way.
var pageTmpl = template.Must(newPageTemplate().ParseFS(templates.FS, "page.html"))

func newPageTemplate() *template.Template {
	return template.New("page.html").Option("missingkey=error")
}

// csp allows the inline style and exactly the inline script of this build:
// even a bug in escaping could not run a script or load anything.
var csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-" +
	hash(assets.JS) + "'; connect-src 'self'; base-uri 'none'; form-action 'none'"

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
	Name, Mem, Hosts, Jobs string
	GPUs, Procs            int
	// the history's last 30 days (acctview.go), where the table has them
	GPUHours30d, IdleHours30d, KWh30d, Efficiency30d string
	Past                                             bool // holds no GPU now
}

// HTML writes the status page.
func HTML(w io.Writer, r *Report) error {
	_, err := writePage(w, r)
	return err
}

// writePage writes the status page and returns its hash for
// page-state.json. The cards are written first, into memory (a page of
// at most indexBudget bytes): the page's head carries their hash.
func writePage(w io.Writer, r *Report) (sum string, err error) {
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriterSize(w, 64<<10)
	}
	var cards, history bytes.Buffer
	cw := bufio.NewWriterSize(&cards, 64<<10)
	var hashes []string
	writeHosts(cw, r, r.Cluster.Hosts, false, func(_ *cluster.Host, h string) { hashes = append(hashes, h) })
	cw.Flush()
	hw := bufio.NewWriter(&history)
	writeHistory(hw, r)
	hw.Flush()
	v := pageViewOf(r)
	v.link(r, pageLinks{key: filepath.Base(r.Config.HTML), state: PageState})
	v.Hash = frameHash(v, history.Bytes())
	v.Sum = pageSum(v.Hash, hashes)
	if err := pageTmpl.ExecuteTemplate(bw, "head", v); err != nil {
		return "", err
	}
	bw.Write(cards.Bytes())
	if err := pageTmpl.ExecuteTemplate(bw, "tail", v); err != nil {
		return "", err
	}
	bw.Write(history.Bytes())
	if err := pageTmpl.ExecuteTemplate(bw, "end", v); err != nil {
		return "", err
	}
	return v.Sum, bw.Flush()
}

// link tells the page's script where the page is and where its state is,
// when the page is a file that has one (not a test's page in memory).
func (v *pageView) link(r *Report, l pageLinks) {
	if r.Config.HTML == "" {
		return
	}
	v.Page, v.State, v.Build = l.key, l.state, buildHash
}

// buildHash tells this build's script and style sheet from another's: an
// open page whose build is not the state's reloads.
var buildHash = cardHash([]byte(assets.JS + assets.CSS))

// pageView is what templates/page.html shows. It is a struct, not a map,
// so that a field the template names and the view lacks (a typo) fails
// at execution instead of rendering as nothing.
type pageView struct {
	Title   string
	CSP     string
	CSS     template.CSS
	JS      template.JS
	Refresh int // seconds; 0: the page does not reload itself
	// The page's place for its script (pagestate.go), "" when it has no
	// page-state.json: its key there and the state's address, its frame's
	// hash (Hash), its hash in the state (Sum) and the build's.
	Page, State, Hash, Sum, Build string
	RefreshText                   string
	DataTime                      string // RFC 3339, only a time the script can trust to age
	DataTimeText                  string
	Generated                     string
	LiveText                      string
	StaleAfterS                   int
	StaleAfterText                string
	Stale                         bool
	Age                           string // known age only; the page says unknown otherwise
	NoTimeText                    string
	Free                          int
	Busy                          int
	Reserved                      int
	Failed                        int
	Degraded                      int // GPUs whose health is degraded, whatever their state
	Total                         int
	Hosts                         int
	Down                          int
	DownGPUs                      int    // GPUs last seen on hosts down now (history)
	IdleHeld                      int    // GPUs held idle now (history)
	UtilFrom                      string // the sparklines' first and last hour
	UtilTo                        string
	UtilHours                     int
	Models                        []modelView
	MoreModels                    *moreModels
	Warnings                      []string
	JSONLink                      string
	PromLink                      string
	TextLink, FreeLink            string
	Privacy                       string // what the privacy settings hide, in words; "" when nothing
	Users                         []userView
	UserJobs                      bool // the users table's jobs column, only where someone has one
	UserHistory                   bool // the users table's 30-day columns, only with history
	Cost                          *costView

	// the overview's and a group page's (pages.go)
	Overview  bool
	Up        string // the overview, from a group page
	GroupName string
	IdleLink  string // the idle-held table, when not on this page
	Nav       []navLink
}

func pageViewOf(r *Report) *pageView {
	c := r.Cluster
	cfg := r.Config
	v := &pageView{
		Title:          cfg.Title,
		CSP:            csp,
		CSS:            template.CSS(assets.CSS),
		JS:             template.JS(assets.JS),
		Refresh:        int(cfg.Refresh / time.Second),
		RefreshText:    settingText(cfg.Refresh),
		DataTimeText:   timeText(c.DataTime, r.Loc),
		Generated:      timeText(r.Now, r.Loc),
		LiveText:       liveText(cfg.LiveEvery),
		StaleAfterS:    int(cfg.StaleAfter / time.Second),
		StaleAfterText: settingText(cfg.StaleAfter),
		Stale:          r.stale(),
		NoTimeText:     r.unknownAgeText(),
		Free:           c.Count[cluster.Free],
		Busy:           c.Count[cluster.Busy],
		Reserved:       c.Count[cluster.Reserved],
		Failed:         c.Count[cluster.Failed],
		Degraded:       c.Degraded,
		Total:          c.GPUs,
		Hosts:          len(c.Hosts),
		Down:           c.Down,
		Warnings:       r.Warnings,
		JSONLink:       r.JSONLink,
		PromLink:       r.PromLink,
		TextLink:       r.TextLink,
		FreeLink:       r.FreeLink,
		Privacy:        privacyText(cfg),
	}
	if a := r.age(); a >= 0 {
		if !c.DataTime.IsZero() { // the script ages only a time it can trust
			v.DataTime = c.DataTime.UTC().Format(time.RFC3339)
		}
		v.Age = spanText(int64(a / time.Second))
	}
	v.historyView(r)
	v.Models, v.MoreModels = modelsView(c.Models)
	v.Users, v.UserJobs, v.UserHistory = usersWithHistory(c.Users, r.History, 0)
	v.Cost = costViewOf(r.History, &cfg.Accounting)
	return v
}

// historyView fills in what the summary says of the history: the GPUs of
// the hosts down now, those held idle, and the sparklines' span.
func (v *pageView) historyView(r *Report) {
	s := r.History
	if s == nil {
		return
	}
	for _, h := range r.Cluster.Hosts {
		if d := s.Down[h.Name]; d != nil && !h.Up() {
			v.DownGPUs += len(d.GPUs)
		}
	}
	v.IdleHeld = s.IdleHeldGPUs()
	if len(s.UtilHours) > 0 && len(s.Util) > 0 {
		v.UtilFrom = timeText(s.UtilHours[0], r.Loc)
		v.UtilTo = timeText(s.UtilHours[len(s.UtilHours)-1], r.Loc)
		v.UtilHours = len(s.UtilHours)
	}
}

// usersView is the users table, each user's hosts cut at hostsMax ("+N
// more") unless it is 0, and whether it needs the jobs column: only where
// someone has a job or a container.
func usersView(us []*cluster.User, hostsMax int) (users []userView, jobs bool) {
	users = make([]userView, 0, len(us))
	for _, u := range us {
		hosts, more := u.Hosts, ""
		if hostsMax > 0 && len(hosts) > hostsMax {
			more = ", +" + strconv.Itoa(len(hosts)-hostsMax) + " more"
			hosts = hosts[:hostsMax]
		}
		users = append(users, userView{Name: userName(u.Name), GPUs: u.GPUs, Procs: u.Procs,
			Mem: gib(u.MemMiB) + " GiB", Hosts: strings.Join(hosts, ", ") + more, Jobs: userJobsText(u)})
		jobs = jobs || len(u.Jobs)+len(u.Containers) > 0
	}
	return users, jobs
}

// migNote says why an NVIDIA GPU that reports its memory has no
// utilization: the driver gives none for a GPU in MIG mode (every
// utilization.* is [N/A]), and the CSV has no other way to tell.
const migNote = "utilization not reported under MIG"

// noUtilNote says the same of another vendor's GPU: AMD's tools give none
// for a compute partition, among others; MIG is NVIDIA's alone.
const noUtilNote = "utilization not reported by the vendor tool (none for a compute partition)"

// noUtilWords are a cell's words for a GPU that reports its memory but not
// its utilization, and its detail's note.
func noUtilWords(g *cluster.GPU) (cell, note string) {
	if isNVIDIA(g) {
		return "no util (MIG)", migNote
	}
	return "no util", noUtilNote
}

// writeHosts writes one card per host:
//
//	<section class=host data-host=NAME><h2>DISPLAY <small>INFO</small></h2><p class=hs>CPUS · LOAD · RAM
//	<ul>
//	<li class=gpu data-state=busy data-gpu=0 tabindex=0>...
//	</ul></section>
//
// The markup leans on HTML's optional end tags to stay small at 8,000
// cells: a <p> is closed by the <ul>, <p>, <aside> or <li> after it, and a
// <li> by the next <li> or the </ul>. None of them is a parse error.
//
// Each card carries its hash (data-h, cardHash of what follows it), by
// which the page's script tells the cards that changed.
//
// ids gives each card an id, its host's name (a group page's, which the
// overview links to); each, if not nil, is called after each card with
// its host and hash.
func writeHosts(w *bufio.Writer, r *Report, hosts []*cluster.Host, ids bool, each func(*cluster.Host, string)) {
	var scratch, util []byte // for numbers; a card's utilization strings
	var card bytes.Buffer    // a card, to hash before it is written
	cw := bufio.NewWriterSize(&card, 16<<10)
	idle := idleHeldByGPU(r.History)
	for _, h := range hosts {
		card.Reset()
		util = writeCardHead(cw, r.History, h, ids, util)
		cw.WriteString("\n<ul>")
		if !h.Up() {
			writeDownHost(cw, h, r)
		}
		for _, g := range h.GPUs {
			var sp *history.Spell
			if idle != nil {
				sp = idle[history.GPURef{Host: h.Name, GPU: g.ID()}]
			}
			scratch = writeGPU(cw, h, g, r, sp, scratch)
		}
		cw.WriteString("\n</ul></section>")
		cw.Flush()
		sum := cardHash(card.Bytes())
		w.WriteString("\n<section class=host data-h=")
		w.WriteString(sum) // base64url: no quotes needed
		w.Write(card.Bytes())
		if each != nil {
			each(h, sum)
		}
	}
}

// idleHeldByGPU is the GPUs held idle now, by GPU, each with its longest
// spell (a shared GPU has one per idle holder); nil when none is.
func idleHeldByGPU(s *history.Summary) map[history.GPURef]*history.Spell {
	if s == nil || len(s.IdleHeld) == 0 {
		return nil
	}
	idle := make(map[history.GPURef]*history.Spell, len(s.IdleHeld))
	for i := range s.IdleHeld {
		sp := &s.IdleHeld[i]
		ref := history.GPURef{Host: sp.Host, GPU: sp.GPU}
		if _, ok := idle[ref]; !ok { // IdleHeld is longest first
			idle[ref] = sp
		}
	}
	return idle
}

// writeCardHead writes a host's card's opening tag's attributes, its header, its stats and
// an ok host's warnings. util is a buffer for the card's data-util, which
// it returns for the next card.
func writeCardHead(w *bufio.Writer, s *history.Summary, h *cluster.Host, ids bool, util []byte) []byte {
	// "\n<section class=host data-h=HASH" is writeHosts's
	if ids {
		attr(w, "id", h.Name)
	}
	attr(w, "data-host", h.Name)
	if util = hostUtil(util[:0], s, h); len(util) > 0 {
		w.WriteString(" data-util=")
		w.Write(util) // utilAlphabet and "." only: no quotes needed
	}
	w.WriteString("><h2>")
	esc(w, h.Display)
	if info := hostInfo(h); info != "" {
		w.WriteString(" <small>")
		esc(w, info)
		w.WriteString("</small>")
	}
	w.WriteString("</h2>")
	if s := hostStats(h); s != "" {
		w.WriteString("<p class=hs>")
		w.WriteString(s) // numbers and fixed words only
	}
	if h.Up() && h.Error != "" { // an ok host's warnings
		w.WriteString("<p class=hn>")
		esc(w, h.Error)
	}
	if s := kernelLogNote(h); s != "" {
		w.WriteString("<p class=hn>")
		esc(w, shorten(s, hostErrorMax))
	}
	return util
}

// writeDownHost writes the row that stands for a down host's GPUs, which
// are not known: its status, since when (history), why, its reservation,
// the whole reason in the detail when the row cuts it, then its GPUs as
// history last saw them.
func writeDownHost(w *bufio.Writer, h *cluster.Host, r *Report) {
	var down *history.HostState
	if r.History != nil {
		down = r.History.Down[h.Name]
	}
	// no data-gpu: the row stands for the host's GPUs, which are not known
	w.WriteString("\n<li class=\"gpu w\" data-state=failed tabindex=0><i>down</i> <b>")
	esc(w, string(h.Status))
	w.WriteString("</b>")
	if down != nil && down.DownSince != 0 {
		writeDownSince(w, down, r)
	}
	w.WriteString("<p class=why>")
	short := shorten(h.Error, hostErrorMax)
	esc(w, short)
	if s := pageReservation(h.Reserved, r.Loc); s != "" {
		w.WriteString("<p>")
		esc(w, s)
	}
	if short != h.Error {
		w.WriteString("<aside><p>")
		esc(w, h.Error)
		w.WriteString("</aside>")
	}
	if down != nil {
		writeKnownGPUs(w, down, r)
	}
}

// writeDownSince writes since when a host is down, and for how long.
func writeDownSince(w *bufio.Writer, down *history.HostState, r *Report) {
	since := time.Unix(down.DownSince, 0)
	w.WriteString("<p class=since>down since ")
	if down.LastUp == 0 { // never seen up: down at least since history began
		w.WriteString("at least ")
	}
	w.WriteString(timeText(since, r.Loc))
	if d := r.Now.Sub(since); d > 0 {
		w.WriteString(" (")
		w.WriteString(spanText(int64(d / time.Second)))
		w.WriteString(")")
	}
}

// hostUtil appends the card's data-util (see utilAlphabet): its GPUs'
// utilization strings in the order of its cells, "." between them, the
// empty ones at the end left out; nothing when none has one.
func hostUtil(buf []byte, s *history.Summary, h *cluster.Host) []byte {
	if s == nil || len(s.Util) == 0 || !h.Up() {
		return buf
	}
	end := 0 // after the last GPU's string that is not empty
	for i, g := range h.GPUs {
		if i > 0 {
			buf = append(buf, '.')
		}
		n := len(buf)
		buf = appendUtil(buf, s.Util[history.GPURef{Host: h.Name, GPU: g.ID()}])
		if len(buf) > n {
			end = len(buf)
		}
	}
	return buf[:end]
}

// writeKnownGPUs writes a down host's GPUs as history last saw them: grey
// cells whose state is unknown ("?" and the word, from the style sheet),
// counted apart from the others in the summary.
func writeKnownGPUs(w *bufio.Writer, down *history.HostState, r *Report) {
	for _, g := range down.GPUs {
		w.WriteString("\n<li class=gpu data-state=unknown")
		attr(w, "data-gpu", g.ID)
		w.WriteString(" tabindex=0><p class=why>host down<aside>")
		esc(w, g.Name)
		w.WriteString("<p class=n>as last seen; its state is unknown while the host is down")
		if down.DownSince != 0 {
			w.WriteString(" (since ")
			w.WriteString(timeText(time.Unix(down.DownSince, 0), r.Loc))
			w.WriteString(")")
		}
		w.WriteString("</p></aside>")
	}
}

// hostInfo is the card's header after the name: "gpu01 · 8× NVIDIA H100
// 80GB HBM3 · 3 free" (the raw name when it has a display name); the
// model's vendor where its name does not say it ("AMD Arcturus GL-XL
// [Instinct MI100]").
func hostInfo(h *cluster.Host) string {
	var info []string
	if h.Display != h.Name {
		info = append(info, h.Name)
	}
	if !h.Up() {
		return strings.Join(info, " · ")
	}
	if h.ModelName != "" {
		// every GPU: a lost one has no name, but is one of the host's
		// model (as the models' tally counts it): 8×, not 7×, where one
		// of 8 fell off the bus
		info = append(info, strconv.Itoa(len(h.GPUs))+"× "+withVendor(h.ModelName, hostVendor(h)))
	}
	if h.Count[cluster.Free] > 0 {
		info = append(info, strconv.Itoa(h.Count[cluster.Free])+"\u00a0free") // not cut from its number
	}
	return strings.Join(info, " · ")
}

// hostStats is the card's second line: "64 CPUs · load 3.5 · RAM 117/503G",
// leaving out what the host did not say. It is made of numbers only, so it
// needs no escaping.
func hostStats(h *cluster.Host) string {
	var parts []string
	if h.CPUs.Valid {
		s := strconv.FormatInt(h.CPUs.Value, 10) + " CPUs"
		if h.CPUs.Value == 1 {
			s = "1 CPU"
		}
		parts = append(parts, s)
	}
	if h.Load1.Valid {
		parts = append(parts, "load "+strconv.FormatFloat(h.Load1.Value, 'f', -1, 64))
	}
	if h.MemUsed.Valid || h.MemTotal.Valid {
		parts = append(parts, "RAM "+memText(h.MemUsed, h.MemTotal))
	}
	return strings.Join(parts, " · ")
}

// writeGPU writes one cell:
//
//	<li class=gpu data-state=busy data-gpu=1 tabindex=0><p style=--m:75%>60/80G · 98%<p class=u><b>alice, bob</b> 60G<aside>31°C · 71/700W<table>...</table></aside>
//
// A cell names its model only when the card's header does not (a host
// with mixed models). Its second line says who holds it (busy) or for
// whom it is kept (reserved), so that nobody has to hover to know; the
// detail (<aside>, shown on hover, focus or tap) holds the sensors, notes
// and every process.
func writeGPU(w *bufio.Writer, h *cluster.Host, g *cluster.GPU, r *Report, idle *history.Spell, scratch []byte) []byte {
	writeCellStart(w, h, g)
	// memory but no utilization: MIG, or a partition of another vendor's
	noUtil := !g.Util.Valid && g.MemUsed.Valid && g.Error == ""
	scratch = writeMemLine(w, g, noUtil, scratch)
	writeWho(w, g)
	if idle != nil {
		// a word, not a colour: the style sheet adds a dashed frame
		w.WriteString("<p class=idle>idle ")
		w.WriteString(idleText(idle.Seconds()))
	}
	if words := degradedWords(g); words != "" {
		// words, not a colour: the style sheet adds the sign and a frame
		w.WriteString("<p class=hl>")
		esc(w, shorten(words, gpuErrorMax))
	}
	sens := sensors(g)
	if g.Name != h.ModelName && g.Name != "" {
		// the cell names the short name, which may not say whose it is
		sens = joinNonEmpty(withVendor(g.Name, g.Vendor), sens)
	}
	readings := hasHealthReadings(g)
	if sens == "" && !readings && len(g.Procs) == 0 && g.Error == "" && len(g.Notes) == 0 && g.Reservation == nil && !noUtil &&
		len(g.Health.Findings) == 0 {
		return scratch // nothing to tell
	}
	w.WriteString("<aside>")
	esc(w, sens) // the first line; notes and the table are blocks
	if readings {
		scratch = writeHealthReadings(w, g, sens != "", scratch)
	}
	writeNotes(w, g, r, noUtil)
	if len(g.Procs) > 0 {
		scratch = writeProcTable(w, g.Procs, idleShares(g, r.idlePct()), scratch)
	}
	w.WriteString("</aside>") // </li> is implied by the next <li> or </ul>
	return scratch
}

// writeCellStart writes a cell's <li> (data-health on a degraded GPU),
// its model on a host of mixed models, and why a lost GPU failed, or why
// the [health] policy failed it.
func writeCellStart(w *bufio.Writer, h *cluster.Host, g *cluster.GPU) {
	w.WriteString("\n<li class=gpu data-state=")
	w.WriteString(g.State) // one of cluster.States
	if g.Health.State == health.Degraded {
		w.WriteString(" data-health=degraded")
	}
	// the host is the card's data-host: 8,000 cells need not repeat it
	attr(w, "data-gpu", g.ID())
	// The style sheet writes the index and the state, as a symbol and a
	// word, from data-gpu and data-state: 13 bytes less in each cell.
	w.WriteString(" tabindex=0>")
	if g.Short != "" && (g.Name != h.ModelName || h.ModelName == "") {
		w.WriteString("<p class=m>") // a line of its own: a name may be long
		esc(w, g.Short)
	}
	why := g.Error
	if why == "" {
		why = g.FailedReason() // the [health] policy's
	}
	if why != "" {
		w.WriteString("<p class=why>")
		esc(w, reasonText(why, gpuErrorMax))
	}
}

// joinNonEmpty joins a and b with " · ", or is the one that is not "".
func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + " · " + b
}

// writeMemLine writes a cell's memory and utilization, under a bar of
// its memory used, or that a GPU (in MIG mode, a partition) has no
// utilization (noUtil); nothing when its memory is not known.
func writeMemLine(w *bufio.Writer, g *cluster.GPU, noUtil bool, scratch []byte) []byte {
	if !g.MemUsed.Valid && !g.MemTotal.Valid {
		return scratch // no memText
	}
	// the bar above the text is the style sheet's, from --m
	if p := memPct(g.MemUsed, g.MemTotal); p > 0 {
		w.WriteString("<p style=--m:")
		scratch = strconv.AppendInt(scratch[:0], int64(p), 10)
		w.Write(scratch)
		w.WriteString("%>")
	} else {
		w.WriteString("<p>")
	}
	scratch = appendMemText(scratch[:0], g.MemUsed, g.MemTotal)
	if g.Util.Valid {
		scratch = append(appendFloat(append(scratch, " · "...), g.Util.Value), '%')
	}
	w.Write(scratch) // numbers only
	if !g.Util.Valid && noUtil {
		cell, _ := noUtilWords(g)
		w.WriteString("<span class=mig>") // a line of its own
		w.WriteString(cell)               // fixed words
		w.WriteString("</span>")
	}
	return scratch
}

// writeNotes writes the detail's notes: the GPU's error, why it has no
// utilization (noUtil), the driver's notes and its reservation.
func writeNotes(w *bufio.Writer, g *cluster.GPU, r *Report, noUtil bool) {
	note := func(s string) {
		w.WriteString("<p class=n>")
		esc(w, s)
		w.WriteString("</p>")
	}
	if g.Error != "" {
		note(g.Error)
	}
	for _, l := range findingLines(g) {
		note(l)
	}
	if noUtil {
		_, why := noUtilWords(g)
		note(why)
	}
	for _, n := range g.Notes {
		note(n)
	}
	if s := pageReservation(g.Reservation, r.Loc); s != "" {
		if used := usedByWords(unreservedUsers(g)); used != "" {
			s += " · " + used
		}
		note(s)
	}
}

// writeProcTable writes the detail's table of processes.
//
// The column headers are the style sheet's (the first row's cells'
// ::before): a header row in each of 4,000 tables would cost 200 kB. No
// processes: the style sheet says so. A "job / container" column comes
// before the command only where a process has one, in every row then (the
// style sheet names the command by td:last-child, the job by a 5th cell
// that is not the last): a page of a cluster without Slurm or containers
// pays nothing for it. An "SM" column after the memory, each process's own
// utilization, only where a process has one (the table's class s moves
// the headers), says "idle share" for the holders in idle (idleShares).
func writeProcTable(w *bufio.Writer, procs []*cluster.Proc, idle []string, scratch []byte) []byte {
	jobs := slices.ContainsFunc(procs, attributed)
	sm := slices.ContainsFunc(procs, func(p *cluster.Proc) bool { return p.SMPct.Valid })
	if sm {
		w.WriteString("<table class=s>")
	} else {
		w.WriteString("<table>")
	}
	for _, p := range procs {
		scratch = writeProcRow(w, p, procColumns{jobs: jobs, sm: sm, idleShare: p.Holds() && slices.Contains(idle, p.Holder())}, scratch)
	}
	w.WriteString("</table>")
	return scratch
}

// procColumns are the optional columns of a process's row, and whether its
// share of the GPU is idle.
type procColumns struct{ jobs, sm, idleShare bool }

// writeProcRow writes a process's row: user, pid, memory, its SM % where
// the table has the column, running time, its job or container where the
// table has the column, and its command, marked (and greyed, class x) when
// it holds the GPU for nobody.
func writeProcRow(w *bufio.Writer, p *cluster.Proc, cols procColumns, scratch []byte) []byte {
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
	if p.MemMiB.Valid {
		scratch = append(appendGib(scratch[:0], p.MemMiB.Value), 'G')
		w.Write(scratch)
	} else {
		w.WriteString("?")
	}
	if cols.sm {
		scratch = writeSMCell(w, p, cols.idleShare, scratch)
	}
	w.WriteString("<td>")
	if p.ElapsedS.Valid {
		w.WriteString(spanText(p.ElapsedS.Value))
	} else {
		w.WriteString("?")
	}
	if cols.jobs {
		writeJobCell(w, p)
	}
	w.WriteString("<td>")
	esc(w, commandText(p.Command))
	if mark != "" {
		w.WriteString(" <em>")
		w.WriteString(mark)
		w.WriteString("</em>")
	}
	return scratch
}

// writeSMCell writes a process's SM utilization, "?" when not known, and
// "idle share" when it holds its share of a shared GPU idle.
func writeSMCell(w *bufio.Writer, p *cluster.Proc, idleShare bool, scratch []byte) []byte {
	w.WriteString("<td>")
	if !p.SMPct.Valid {
		w.WriteString("?")
		return scratch
	}
	scratch = append(appendFloat(scratch[:0], p.SMPct.Value), '%')
	w.Write(scratch) // a number only
	if idleShare {
		w.WriteString(" <em>idle share</em>")
	}
	return scratch
}

// idleText is how long a GPU has been idle-held, in whole hours (or
// minutes under one): "26 h", "2 d 4 h", "40 min".
func idleText(sec int64) string {
	if sec >= 3600 {
		sec -= sec % 3600
	}
	return spanText(sec)
}

// whoMax is how many users a cell names; the style sheet cuts the line
// with "…" where it is too long anyway, and the detail lists them all.
const whoMax = 4

// writeWho writes a cell's second line, which says who holds it: "alice
// 62G", "alice, bob 58G" (the biggest holder first, and the memory their
// processes hold together; root in a container is the container,
// "vllm-server 70G", see cluster.Proc.Holder) and, when they hold it in
// someone else's reservation, whose ("reserved: carol"), or for whom it is
// reserved ("carol: ICML"), or that idlemon's idle-time job runs on it. A Slurm job
// is not named here but in the detail: a job id beside each name would
// push the names out of an 8rem cell, and cost 8 bytes a process.
func writeWho(w *bufio.Writer, g *cluster.GPU) {
	open := false // a <p class=u> was written
	switch g.State {
	case cluster.Busy:
		hs := holdersOf(g.Procs) // a value: 4,000 busy cells allocate nothing
		writeHolders(w, &hs)
		writeReservedTag(w, g)
		open = true
	case cluster.Reserved:
		open = writeReservedFor(w, g.Reservation)
	}
	if !slices.ContainsFunc(g.Procs, func(p *cluster.Proc) bool { return p.Preemptible }) {
		return
	}
	if open {
		w.WriteString(" <span class=tag>idle job</span>")
	} else {
		w.WriteString("<p class=u><span class=tag>idle job</span>")
	}
}

// holder is one who holds a GPU, and the memory their processes hold.
type holder struct {
	name string
	mib  float64
}

// holders are who hold a busy GPU: the first whoMax of them (by their
// processes' order), biggest first.
type holders struct {
	top   [whoMax]holder
	n     int     // of top
	more  bool    // others hold it too
	mib   float64 // the memory all its processes hold
	known bool    // whether any process's memory is known
}

func holdersOf(procs []*cluster.Proc) holders {
	var hs holders
	for _, p := range procs {
		if !p.Holds() {
			continue
		}
		if p.MemMiB.Valid {
			hs.mib += p.MemMiB.Value
			hs.known = true
		}
		name := holderName(p) // root in a container: the container
		i := 0
		for i < hs.n && hs.top[i].name != name {
			i++
		}
		switch {
		case i < hs.n:
		case hs.n < whoMax:
			hs.top[hs.n] = holder{name: name}
			hs.n++
		default:
			hs.more = true
			continue
		}
		hs.top[i].mib += p.MemMiB.Value // 0 when unknown
	}
	// the biggest holder first (a stable insertion sort: n ≤ whoMax)
	for i := 1; i < hs.n; i++ {
		for j := i; j > 0 && hs.top[j].mib > hs.top[j-1].mib; j-- {
			hs.top[j], hs.top[j-1] = hs.top[j-1], hs.top[j]
		}
	}
	return hs
}

// writeHolders writes a busy cell's second line.
func writeHolders(w *bufio.Writer, hs *holders) {
	if hs.n == 0 {
		w.WriteString("<p class=u>no process visible")
		return
	}
	w.WriteString("<p class=u><b>")
	for i := 0; i < hs.n; i++ {
		if i > 0 {
			w.WriteString(", ")
		}
		esc(w, hs.top[i].name)
	}
	if hs.more {
		w.WriteString(", …")
	}
	w.WriteString("</b>")
	if hs.known {
		w.WriteString(" ")
		w.WriteString(gib(hs.mib))
		w.WriteString("G")
	}
}

// writeReservedFor writes a reserved cell's second line, for whom it is
// kept, and reports whether it wrote one: a reservation may name nobody.
func writeReservedFor(w *bufio.Writer, r *reservations.Reservation) bool {
	s := r.Name
	if r.Comment != "" {
		s = strings.TrimPrefix(s+": "+r.Comment, ": ")
	}
	if s == "" {
		return false
	}
	w.WriteString("<p class=u><b>")
	esc(w, s)
	w.WriteString("</b>")
	return true
}

// spanText is a duration as the page writes every one (a process's running
// time, the data's age): "45 s", "12 min", "3 h", "3 h 5 min", "2 d",
// "2 d 4 h". page.js's span() writes the same.
func spanText(s int64) string {
	m, h, d := s/60, s/3600, s/86400
	switch {
	case s < 60:
		return strconv.FormatInt(max(s, 0), 10) + " s"
	case m < 60:
		return strconv.FormatInt(m, 10) + " min"
	case h < 48:
		if m%60 == 0 {
			return strconv.FormatInt(h, 10) + " h"
		}
		return strconv.FormatInt(h, 10) + " h " + strconv.FormatInt(m%60, 10) + " min"
	}
	if h%24 == 0 {
		return strconv.FormatInt(d, 10) + " d"
	}
	return strconv.FormatInt(d, 10) + " d " + strconv.FormatInt(h%24, 10) + " h"
}

// settingText is a setting's duration in the page's one format (spanText),
// or in seconds when it is not whole minutes, which spanText would round.
func settingText(d time.Duration) string {
	if d%time.Minute == 0 {
		return spanText(int64(d / time.Second))
	}
	return durText(d)
}

// pageReservation is "reserved by carol until 2026-11-30 18:00 UTC: ICML",
// the end written as every time on the page is (timeText).
func pageReservation(r *reservations.Reservation, loc *time.Location) string {
	return reservationWith(r, func(t time.Time) string { return timeText(t, loc) })
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
