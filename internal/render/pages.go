package render

import (
	"bufio"
	"bytes"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
)

// The page budgets (docs/performance.md): index.html is at most
// indexBudget bytes at any fleet size, each group page at most
// groupBudget. A fleet of at most onePageHosts hosts whose whole page
// fits in indexBudget keeps everything on index.html, with no group pages.
const (
	indexBudget  = 1_000_000
	groupBudget  = 2_000_000
	onePageHosts = 200
)

// groupsDir is the folder beside index.html that holds the group pages.
const groupsDir = "groups"

// finderHostsMax is how many hosts the free-GPU finder names for a model;
// the rest are "+N more hosts", linked to the group pages that have them.
const finderHostsMax = 24

// finderPagesMax is how many group pages a model's "+N more" links to.
const finderPagesMax = 12

// userHostsMax is how many hosts the users table names for a user on the
// overview and the group pages; the rest are "+N more".
const userHostsMax = 12

// groupPage is one page of a group: the group's hosts in order, split
// where a page would pass groupBudget.
type groupPage struct {
	group *hostGroup
	file  string // "gpu", "gpu-2": groups/FILE.html
	n, of int    // page n of the group's of
	hosts []*cluster.Host
	cards []byte   // the hosts' cards (writeHosts)
	sums  []string // the cards' hashes
	// room is the bytes before a group's first cards, where the page of a
	// group of one page is made around them (groupPageHTML); else nil
	room []byte
	html []byte // the whole page
	sum  string // its hash in page-state.json
}

// pagePlan is what render writes: one page (pages nil), or the overview
// and the group pages.
type pagePlan struct {
	groups []*hostGroup
	pages  []*groupPage
	pageOf map[*cluster.Host]*groupPage
	index  []byte // the overview (index.html), when pages are written
	// hashes are the pages' hashes for page-state.json, by file from the
	// page's folder (index.html, groups/gpu.html)
	hashes map[string]string
}

// planPages groups the hosts ([groups] warnings go to the report's) and
// makes the group pages and the overview, unless the fleet is small
// enough for one page.
func planPages(r *Report) *pagePlan {
	groups, warnings := groupHosts(r.Cluster, r.Config.Groups)
	r.Warnings = append(r.Warnings, warnings...)
	p := &pagePlan{groups: groups, hashes: map[string]string{}}
	index := filepath.Base(r.Config.HTML)
	if len(r.Cluster.Hosts) <= onePageHosts {
		var cw countWriter
		if sum, err := writePage(&cw, r); err == nil && cw.n <= indexBudget {
			p.hashes[index] = sum
			return p // one page, as before
		}
	}
	used := map[string]bool{}
	p.pageOf = map[*cluster.Host]*groupPage{}
	for _, g := range groups {
		g.file = uniqueFile(pageFile(g.name), 1, used) // the pages link to one another by it
		pages := splitGroup(r, g)
		if len(pages) > 1 && !freePages(g.file, len(pages), used) {
			// a split group whose later pages' names are taken: named anew
			delete(used, g.file)
			g.file = uniqueFile(pageFile(g.name), len(pages), used)
			for _, pg := range pages {
				pg.html = groupPageHTML(r, pg)
			}
		}
		for i, pg := range pages {
			pg.file = pagePath(g.file, i+1)
			used[pg.file] = true
			for _, h := range pg.hosts {
				p.pageOf[h] = pg
			}
		}
		p.pages = append(p.pages, pages...)
	}
	for _, pg := range p.pages {
		p.hashes[groupsDir+"/"+pg.file+".html"] = pg.sum
	}
	p.index, p.hashes[index] = overviewHTML(r, p)
	return p
}

// freePages reports whether a group's pages 2 to n are free to be named
// after file.
func freePages(file string, n int, used map[string]bool) bool {
	for i := 2; i <= n; i++ {
		if used[pagePath(file, i)] {
			return false
		}
	}
	return true
}

// pagePath is the file name of a group's page n: gpu, gpu-2, gpu-3.
func pagePath(file string, n int) string {
	if n == 1 {
		return file
	}
	return file + "-" + strconv.Itoa(n)
}

// uniqueFile is base, or base_2, base_3, ... when one of its n pages'
// names is taken already (two groups alike once made safe, or a group
// named like another's second page).
func uniqueFile(base string, n int, used map[string]bool) string {
	for k := 1; ; k++ {
		file := base
		if k > 1 {
			file = base + "_" + strconv.Itoa(k)
		}
		free := true
		for i := 1; i <= n && free; i++ {
			free = !used[pagePath(file, i)]
		}
		if free {
			for i := 1; i <= n; i++ {
				used[pagePath(file, i)] = true
			}
			return file
		}
	}
}

// splitGroup writes the group's cards and splits them, in host order, into
// pages that each fit groupBudget: as many hosts a page as their cards'
// sizes allow, less where a whole page (its users table grows with its
// hosts) is measured over the budget. A host whose card alone is over the
// budget has a page to itself. The pages are made (html) with the group's
// file.
func splitGroup(r *Report, g *hostGroup) []*groupPage {
	var buf bytes.Buffer
	room := 0
	if len(g.hosts) >= pageRoomHosts {
		room = pageRoom
		buf.Write(make([]byte, room))
	}
	w := bufio.NewWriterSize(&buf, 64<<10)
	ends := make([]int, 0, len(g.hosts)) // each card's end in buf
	sums := make([]string, 0, len(g.hosts))
	writeHosts(w, r, g.hosts, true, func(_ *cluster.Host, sum string) {
		w.Flush()
		ends = append(ends, buf.Len())
		sums = append(sums, sum)
		if len(ends) == 1 {
			// room for as many cards again as the first, and a quarter,
			// and the page's end: growing a buffer of megabytes by
			// doubling cost more than writing the cards
			buf.Grow((buf.Len()-room)*len(g.hosts)*5/4 + room)
		}
	})
	cards := buf.Bytes()
	frame := len(groupPageHTML(r, &groupPage{group: g, n: 1, of: 1}))
	limit := groupBudget - frame - 8<<10 // the page links and the users table
	for try := 0; ; try++ {
		var pages []*groupPage
		start, from := 0, room // the page's first host and its first byte
		for i, end := range ends {
			if end-from > limit && i > start {
				pages = append(pages, &groupPage{group: g, hosts: g.hosts[start:i], cards: cards[from:ends[i-1]], sums: sums[start:i]})
				start, from = i, ends[i-1]
			}
		}
		pages = append(pages, &groupPage{group: g, hosts: g.hosts[start:], cards: cards[from:], sums: sums[start:]})
		if room > 0 {
			pages[0].room = cards[:room]
		}
		fits := true
		for i, pg := range pages {
			pg.n, pg.of = i+1, len(pages)
			pg.html = groupPageHTML(r, pg)
			if len(pg.hosts) > 1 && len(pg.html) > groupBudget {
				fits = false
			}
		}
		if fits || try == 8 {
			return pages
		}
		limit = limit * 8 / 10
	}
}

// pageRoom is the room left before the cards of a group of at least
// pageRoomHosts hosts for its page's beginning, where the group has one
// page (groupPageHTML): copying megabytes of cards cost more than the
// room. Smaller groups' pages are copied, not each given the room.
const (
	pageRoom      = 64 << 10
	pageRoomHosts = 64
)

type navLink struct {
	N    int
	Href string
	Here bool
}

// groupPageHTML is a group page: today's page (hover details, filters)
// of the page's hosts alone, its summary and users theirs, linked to the
// overview and to the group's other pages. The history stays on the
// overview.
func groupPageHTML(r *Report, pg *groupPage) []byte {
	sub := *r
	sub.Cluster = r.Cluster.Subset(pg.hosts, r.Config.GPUNames)
	if sub.JSONLink != "" {
		sub.JSONLink = "../" + sub.JSONLink
	}
	for _, l := range []*string{&sub.PromLink, &sub.TextLink, &sub.FreeLink} {
		if *l != "" {
			*l = "../" + *l
		}
	}
	v := pageViewOf(&sub)
	title := pg.group.name
	if pg.of > 1 {
		title += " (" + strconv.Itoa(pg.n) + "/" + strconv.Itoa(pg.of) + ")"
	}
	v.Title = r.Config.Title + ": " + title
	v.Up = "../" + filepath.Base(r.Config.HTML)
	v.GroupName = pg.group.name
	v.IdleLink = v.Up + "#idle"
	for i := 1; i <= pg.of; i++ {
		v.Nav = append(v.Nav, navLink{N: i, Href: url.PathEscape(pagePath(pg.group.file, i)) + ".html", Here: i == pg.n})
	}
	v.Users, _ = usersView(sub.Cluster.Users, userHostsMax)
	v.UserHistory, v.Cost = false, nil // the fleet's figures stay on the overview
	v.link(r, pageLinks{key: groupsDir + "/" + pagePath(pg.group.file, pg.n) + ".html", state: "../" + PageState})
	v.Hash = frameHash(v)
	pg.sum = pageSum(v.Hash, pg.sums)
	v.Sum = pg.sum
	// the page around the cards first, then the page in one piece: the
	// cards are megabytes
	var head, tail bytes.Buffer
	w := bufio.NewWriterSize(&head, 16<<10)
	if err := pageTmpl.ExecuteTemplate(w, "head", v); err != nil {
		panic(err) // the template and its data are ours
	}
	w.Flush()
	w.Reset(&tail)
	if err := pageTmpl.ExecuteTemplate(w, "tail", v); err != nil {
		panic(err)
	}
	if err := pageTmpl.ExecuteTemplate(w, "end", v); err != nil {
		panic(err)
	}
	w.Flush()
	if pg.room != nil && pg.of == 1 && head.Len() <= len(pg.room) {
		// a group's one page, made where its cards lie: no copy of them
		at := len(pg.room) - head.Len()
		copy(pg.room[at:], head.Bytes())
		page := pg.room[at : len(pg.room)+len(pg.cards)]
		return append(page, tail.Bytes()...)
	}
	page := make([]byte, 0, head.Len()+len(pg.cards)+tail.Len())
	page = append(page, head.Bytes()...)
	page = append(page, pg.cards...)
	return append(page, tail.Bytes()...)
}

// overview modes, from the most detailed to the smallest; the first whose
// page fits indexBudget is written: a box a host, linked to its card and
// titled with its name and counts (the link's accessible name); a box a
// host, titled, in one link a group page (the link named by aria-label);
// the same untitled; no GPU squares at all (a fleet of well over 100,000
// GPUs). A host's link without a title would be read out as its URL, so
// there is no untitled link a host.
const (
	cellsByHostTitled = iota
	cellsByPageTitled
	cellsByPage
	cellsNone
)

// overviewHTML is index.html of a fleet too big for one page: the
// summary, the free-GPU finder, every GPU as a square by group, the users
// and the history.
func overviewHTML(r *Report, p *pagePlan) (page []byte, sum string) {
	v := pageViewOf(r)
	v.Overview = true
	v.Users, _, _ = usersWithHistory(r.Cluster.Users, r.History, userHostsMax)
	v.link(r, pageLinks{key: filepath.Base(r.Config.HTML), state: PageState})
	var finder, history bytes.Buffer
	fw := bufio.NewWriter(&finder)
	writeFinder(fw, r, p)
	fw.Flush()
	hw := bufio.NewWriter(&history)
	writeHistory(hw, r)
	hw.Flush()
	// the frame's size, to choose the boxes: the hashes are of a fixed length
	v.Hash, v.Sum = strings.Repeat("-", hashLen), strings.Repeat("-", hashLen)
	var frame countWriter
	for _, name := range []string{"head", "tail", "end"} {
		if err := pageTmpl.ExecuteTemplate(&frame, name, v); err != nil {
			panic(err)
		}
	}
	frame.n += finder.Len() + history.Len()
	var cells bytes.Buffer
	for mode := cellsByHostTitled; mode <= cellsNone; mode++ {
		cells.Reset()
		cw := bufio.NewWriter(&cells)
		writeCells(cw, p, mode)
		cw.Flush()
		if frame.n+cells.Len() <= indexBudget {
			break
		}
	}
	v.Hash = frameHash(v, finder.Bytes(), cells.Bytes(), history.Bytes())
	v.Sum = v.Hash // the overview has no cards
	out := bytes.NewBuffer(make([]byte, 0, frame.n+cells.Len()))
	w := bufio.NewWriter(out)
	if err := pageTmpl.ExecuteTemplate(w, "head", v); err != nil {
		panic(err)
	}
	w.Write(finder.Bytes())
	w.Write(cells.Bytes())
	if err := pageTmpl.ExecuteTemplate(w, "tail", v); err != nil {
		panic(err)
	}
	w.Write(history.Bytes())
	if err := pageTmpl.ExecuteTemplate(w, "end", v); err != nil {
		panic(err)
	}
	w.Flush()
	return out.Bytes(), v.Sum
}

// pageHref is a group page's link from index.html, with a host's anchor.
func pageHref(pg *groupPage, h *cluster.Host) string {
	s := groupsDir + "/" + url.PathEscape(pg.file) + ".html"
	if h != nil {
		s += "#" + url.PathEscape(h.Name)
	}
	return s
}

// href writes ` href=URL`, unquoted where the URL allows (url.PathEscape
// leaves & ' = of what an unquoted value must not hold: such a URL is
// quoted and escaped): 10,000 hosts' links save 20 kB.
func href(w *bufio.Writer, u string) {
	if strings.ContainsAny(u, "&'=\"<>`\t\n\f\r ") {
		attr(w, "href", u)
		return
	}
	w.WriteString(" href=")
	w.WriteString(u)
}

// writeFinder writes the free-GPU finder: each model's free GPUs and the
// hosts that have them, most free first, finderHostsMax of them, then
// "+N more hosts" linked to the group pages that have the rest.
func writeFinder(w *bufio.Writer, r *Report, p *pagePlan) {
	w.WriteString("\n<section class=finder><h2>Free GPUs</h2>")
	found := false
	for _, m := range r.Cluster.Models {
		if m.Free == 0 {
			continue
		}
		found = true
		hosts := freeHosts(r.Cluster.Hosts, m.Name)
		w.WriteString("\n<p><b>")
		esc(w, modelName(m.Name))
		w.WriteString(": ")
		w.WriteString(strconv.Itoa(m.Free))
		w.WriteString(" free</b> on ")
		w.WriteString(countOf(len(hosts), "host"))
		w.WriteString(":")
		for i, hf := range hosts[:min(len(hosts), finderHostsMax)] {
			if i > 0 {
				w.WriteString(",")
			}
			w.WriteString(" <a")
			href(w, pageHref(p.pageOf[hf.h], hf.h))
			w.WriteString(">")
			esc(w, hf.h.Display)
			w.WriteString("</a> ")
			w.WriteString(strconv.Itoa(hf.n))
			if hf.degraded > 0 {
				w.WriteString(" (")
				w.WriteString(strconv.Itoa(hf.degraded))
				w.WriteString(" degraded)")
			}
		}
		if len(hosts) > finderHostsMax {
			writeMoreHosts(w, p, hosts[finderHostsMax:])
		}
	}
	if !found {
		w.WriteString("\n<p>none")
	}
	w.WriteString("\n</section>")
}

// hostFree is a host with free GPUs of a model, how many, and how many of
// them are degraded.
type hostFree struct {
	h           *cluster.Host
	n, degraded int
}

// freeHosts is the hosts with free GPUs of the model (by short name),
// those with the most healthy ones first: a degraded GPU is never offered
// before a healthy one. Between as many healthy ones, the most free first.
func freeHosts(all []*cluster.Host, model string) []hostFree {
	var hosts []hostFree
	for _, h := range all {
		hf := hostFree{h: h}
		for _, g := range h.GPUs {
			if g.State == cluster.Free && g.Short == model {
				hf.n++
				if g.Health.State == health.Degraded {
					hf.degraded++
				}
			}
		}
		if hf.n > 0 {
			hosts = append(hosts, hf)
		}
	}
	sort.SliceStable(hosts, func(i, j int) bool {
		a, b := hosts[i], hosts[j]
		if a.n-a.degraded != b.n-b.degraded {
			return a.n-a.degraded > b.n-b.degraded
		}
		return a.n > b.n
	})
	return hosts
}

// writeMoreHosts writes the finder's "+N more hosts", linked to the group
// pages that have them (finderPagesMax of them), each with its count.
func writeMoreHosts(w *bufio.Writer, p *pagePlan, rest []hostFree) {
	w.WriteString(" · +")
	w.WriteString(countOf(len(rest), "more host"))
	w.WriteString(":")
	var order []*groupPage
	count := map[*groupPage]int{}
	for _, hf := range rest {
		pg := p.pageOf[hf.h]
		if count[pg] == 0 {
			order = append(order, pg)
		}
		count[pg]++
	}
	for i, pg := range order {
		if i == finderPagesMax {
			w.WriteString(" …")
			break
		}
		w.WriteString(" <a")
		href(w, pageHref(pg, nil))
		w.WriteString(">")
		esc(w, pageTitle(pg))
		w.WriteString("</a> (")
		w.WriteString(strconv.Itoa(count[pg]))
		w.WriteString(")")
	}
}

// pageTitle is a group page's name: "gpu", or "gpu 2/5" when split.
func pageTitle(pg *groupPage) string {
	if pg.of == 1 {
		return pg.group.name
	}
	return pg.group.name + " " + strconv.Itoa(pg.n) + "/" + strconv.Itoa(pg.of)
}

// boxStates are the states a host's box draws, in the order the style
// sheet draws them, with each one's class letter: free first, so that the
// hosts with free GPUs are green at their left edge.
var boxStates = []struct {
	state, class string
}{{cluster.Free, "f"}, {cluster.Busy, "b"}, {cluster.Reserved, "r"}, {cluster.Failed, "x"}}

// boxClassMax is the largest count the style sheet has a class for (.f16);
// a bigger one is a style attribute (--f:24).
const boxClassMax = 16

// chunkGPUs is about how many squares a .ck block holds: chromium lays out
// and paints only the blocks near the screen (content-visibility), and
// with one block per few hundred GPUs it has 100 blocks to track at
// 10,000 hosts rather than 10,000 boxes.
const chunkGPUs = 768

// writeBox writes a host's box's attributes: its class (its GPUs counted by
// state, "f4 b3 x1", dn for a host down) and, when titled, its title, the
// host's name and counts ("gpu-0042: 4 free, 3 busy, 1 failed"), which is
// also the accessible name of a box that is a link.
func writeBox(w *bufio.Writer, h *cluster.Host, titled bool) {
	var class, style, title strings.Builder
	if !h.Up() {
		class.WriteString("dn")
	}
	if titled {
		title.WriteString(h.Display)
		title.WriteString(":")
		if !h.Up() {
			title.WriteString(" down")
		}
	}
	sep := ""
	if !h.Up() {
		sep = ","
	}
	for _, st := range boxStates {
		n := h.Count[st.state]
		if n == 0 {
			continue
		}
		if n <= boxClassMax {
			if class.Len() > 0 {
				class.WriteByte(' ')
			}
			class.WriteString(st.class)
			class.WriteString(strconv.Itoa(n))
		} else {
			style.WriteString("--" + st.class + ":" + strconv.Itoa(n) + ";")
		}
		if titled {
			title.WriteString(sep + " " + strconv.Itoa(n) + " " + st.state)
			sep = ","
		}
	}
	if titled && h.Up() && len(h.GPUs) == 0 {
		title.WriteString(" no GPUs")
	}
	if class.Len() > 0 {
		attr(w, "class", class.String())
	}
	if style.Len() > 0 {
		attr(w, "style", style.String())
	}
	if titled {
		attr(w, "title", title.String())
	}
}

// writeCells writes every GPU as a square, group by group, a host a box
// (one element, its squares drawn by the style sheet from its class),
// in blocks of about chunkGPUs squares:
//
//	<section class=grp><h2><a href=groups/gpu.html>gpu</a> <small>1000 hosts · 8000 GPUs · 2000 free · pages 1 2 3</small></h2>
//	<div class=cells><div class=ck><a href=groups/gpu.html#gpu0001 class="f4 b4" title="gpu0001: 4 free, 4 busy"></a>...</div>...</div></section>
//
// By page, a group page's link is the block and a host a <p> in it.
func writeCells(w *bufio.Writer, p *pagePlan, mode int) {
	pi := 0
	for _, g := range p.groups {
		var pages []*groupPage
		for pi < len(p.pages) && p.pages[pi].group == g {
			pages = append(pages, p.pages[pi])
			pi++
		}
		writeGroupHeading(w, g, pages)
		if mode == cellsNone {
			w.WriteString("</section>")
			continue
		}
		w.WriteString("\n<div class=cells>")
		if mode == cellsByHostTitled {
			writeBoxesByHost(w, pages)
		} else {
			writeBoxesByPage(w, pages, mode == cellsByPageTitled)
		}
		w.WriteString("</div></section>")
	}
}

// writeGroupHeading opens a group's section on the overview with its
// heading: its name, linked to its first page, its counts and its pages.
func writeGroupHeading(w *bufio.Writer, g *hostGroup, pages []*groupPage) {
	gpus, free, down := 0, 0, 0
	for _, h := range g.hosts {
		gpus += len(h.GPUs)
		free += h.Count[cluster.Free]
		if !h.Up() {
			down++
		}
	}
	w.WriteString("\n<section class=grp><h2><a")
	href(w, pageHref(pages[0], nil))
	w.WriteString(">")
	esc(w, g.name)
	w.WriteString("</a> <small>")
	w.WriteString(countOf(len(g.hosts), "host"))
	w.WriteString(" · ")
	w.WriteString(countOf(gpus, "GPU"))
	w.WriteString(" · ")
	w.WriteString(strconv.Itoa(free))
	w.WriteString(" free")
	if down > 0 {
		w.WriteString(" · ")
		w.WriteString(strconv.Itoa(down))
		w.WriteString(" down")
	}
	if len(pages) > 1 {
		w.WriteString(" · pages")
		for _, pg := range pages {
			w.WriteString(" <a")
			href(w, pageHref(pg, nil))
			w.WriteString(">")
			w.WriteString(strconv.Itoa(pg.n))
			w.WriteString("</a>")
		}
	}
	w.WriteString("</small></h2>")
}

// writeBoxesByHost writes a group's hosts as titled boxes, each a link to
// its card, in blocks of about chunkGPUs squares.
func writeBoxesByHost(w *bufio.Writer, pages []*groupPage) {
	squares := 0
	w.WriteString("<div class=ck>")
	for _, pg := range pages {
		for _, h := range pg.hosts {
			if squares >= chunkGPUs {
				w.WriteString("</div><div class=ck>")
				squares = 0
			}
			squares += max(len(h.GPUs), 1)
			w.WriteString("<a")
			href(w, pageHref(pg, h))
			writeBox(w, h, true)
			w.WriteString("></a>")
		}
	}
	w.WriteString("</div>")
}

// writeBoxesByPage writes a group's hosts as boxes, a block a page, the
// block a link to the page named by aria-label.
func writeBoxesByPage(w *bufio.Writer, pages []*groupPage, titled bool) {
	for _, pg := range pages {
		free := 0
		for _, h := range pg.hosts {
			free += h.Count[cluster.Free]
		}
		w.WriteString("<a class=\"pg ck\"")
		href(w, pageHref(pg, nil))
		attr(w, "aria-label", pageTitle(pg)+": "+countOf(len(pg.hosts), "host")+", "+strconv.Itoa(free)+" free GPUs")
		w.WriteString(">")
		for _, h := range pg.hosts {
			w.WriteString("<p") // closed by the next one
			writeBox(w, h, titled)
			w.WriteString(">")
		}
		w.WriteString("</p></a>")
	}
}

// countWriter counts what is written to it.
type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	return len(p), nil
}

// pageName is what a group page's file name looks like: only such files
// in the groups folder are removed when their group is gone.
