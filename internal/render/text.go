package render

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
)

// ANSI colours per state; failed is dim.
var stateColor = map[string]string{
	cluster.Free: "\x1b[32m", cluster.Busy: "\x1b[31m", cluster.Reserved: "\x1b[33m", cluster.Failed: "\x1b[90m",
}

const colorReset = "\x1b[0m"

// What one string from a host may take on a line, in columns: a broken or
// hostile host must not flood the terminal even when the width is not
// limited (a pipe), and a long name must not push every column away.
const (
	hostNameMax = 32
	gpuNameMax  = 24
	userNameMax = 32
	reasonMax   = 256 // an error, a note, a reservation
	numberMax   = 6   // a reading: 1e300 is a number too
	gpuUsersMax = 8   // users named on one GPU's line; the rest are counted
	usersShown  = 10  // users named in the summary
	modelsShown = 3   // models named in a host's header
	tailMin     = 48  // the columns a GPU line keeps for its users, or its name column goes
)

// idleJobNote is cluster's note for a free GPU running the idle-time job;
// the line names the job's users instead.
const idleJobNote = "idle-time job running"

// textOptions are -text's settings.
type textOptions struct {
	Color bool // ANSI colours; the words say the same without them
	Free  bool // only free GPUs, and the hosts that have some (-free)
	Width int  // columns a line may take; 0 is no limit
	// Dated: the summary gives the data's time rather than its age, for
	// a file read long after it was written (index.txt)
	Dated bool
}

// textFileWidth is index.txt's width: it fits a terminal of 100 columns
// that curl prints it to, and a browser's window.
const textFileWidth = 100

// writeIndexText writes index.txt: -text's table, plain, textFileWidth
// wide, dated.
func writeIndexText(w io.Writer, r *Report) error {
	return writeTextWith(w, r, textOptions{Width: textFileWidth, Dated: true})
}

// writeText writes the cluster for a terminal at no width limit: see writeTextWith.
func writeText(w io.Writer, r *Report, color bool) error {
	return writeTextWith(w, r, textOptions{Color: color})
}

// writeTextWith writes the cluster for a terminal, as gpustat does: the summary,
// then per host a header line (model, load, CPUs, RAM) and a line per GPU
// (index, name, temperature, utilization, memory, and who holds it), or one
// line for a host that is down. No line is wider than o.Width: the users
// are cut first, with "…".
func writeTextWith(w io.Writer, r *Report, o textOptions) error {
	b := bufio.NewWriter(w)
	writeTextSummary(b, r, o)
	newTextTable(r, o).write(b)
	if !o.Free {
		for _, line := range healthList(r.Cluster) {
			writeSegs(b, fitSegs(line, o.Width), o.Color)
		}
	}
	return b.Flush()
}

// terminalWidth is the width -text fits w to: $COLUMNS when it is a number
// (0 for no limit), else the terminal's when w is one (80 when it will not
// say), else 0, so that a script reading a pipe gets whole lines.
func terminalWidth(w io.Writer) int {
	if s, ok := os.LookupEnv("COLUMNS"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n >= 0 {
			return n
		}
	}
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	// through SyscallConn: Fd would put the file in blocking mode
	var ws *unix.Winsize
	var err error
	if rc, cerr := f.SyscallConn(); cerr == nil {
		cerr = rc.Control(func(fd uintptr) { ws, err = unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ) })
		if cerr == nil && err == nil {
			if ws.Col > 0 {
				return int(ws.Col)
			}
			return 80
		}
	}
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		return 80
	}
	return 0
}

// A seg is a run of text in one colour ("" for none).
type seg struct{ text, color string }

// gpuLine is one GPU's line before its columns are padded; a reading is
// "?" when not known, and the readings are all "" for a failed GPU.
type gpuLine struct {
	cells  [gpuCells]string // idCell, nameCell, ...
	widths [gpuCells]uint8  // each cell's columns, measured once: cells are short
	main   seg              // who holds it, in its state's colour
	notes  string           // " · " and the notes, or ""
}

// A GPU line's cells, before its users.
const (
	idCell    = iota // "[0]"
	nameCell         // "H100"
	tempCell         // "45", without "°C"
	utilCell         // "98", without "%"
	usedCell         // "62"
	totalCell        // "80", without " GB"
	gpuCells
)

// hostLines is one host: its header (or down line), notes and GPUs.
type hostLines struct {
	name   string
	fields []string // header fields after the name, the most useful first
	down   []seg    // a host that is down: its line after the name
	notes  []string // an ok host's warnings
	gpus   []gpuLine
}

// textTable is the hosts' part of the output, with its column widths.
type textTable struct {
	o     textOptions
	hosts []hostLines
	host  int           // the widest host name
	cells [gpuCells]int // the widest of each GPU cell
}

func newTextTable(r *Report, o textOptions) *textTable {
	hosts := r.Cluster.Hosts
	t := &textTable{o: o, hosts: make([]hostLines, 0, len(hosts))}
	if o.Free {
		hosts = freeFirst(hosts)
	}
	for _, h := range hosts {
		if o.Free && (!h.Up() || h.Count[cluster.Free] == 0) {
			continue
		}
		hl := hostLines{name: clean(h.Display, hostNameMax)}
		if h.Up() {
			hl.fields = hostFields(h, len(r.Cluster.Vendors) > 1)
			if h.Error != "" {
				hl.notes = append(hl.notes, clean(h.Error, reasonMax))
			}
			if s := kernelLogNote(h); s != "" {
				hl.notes = append(hl.notes, clean(s, reasonMax))
			}
		} else {
			hl.down = downSegs(h, r)
		}
		gpus := h.GPUs
		if o.Free {
			gpus = healthyFirst(gpus)
		}
		hl.gpus = make([]gpuLine, 0, len(gpus))
		for _, g := range gpus {
			if o.Free && g.State != cluster.Free {
				continue
			}
			hl.gpus = append(hl.gpus, newGPULine(g, r))
		}
		t.add(hl)
	}
	return t
}

// freeFirst is -free's order of the hosts: those with a healthy free GPU
// first, so that a degraded GPU is never offered before a healthy one;
// else as they were.
func freeFirst(hosts []*cluster.Host) []*cluster.Host {
	healthyFree := func(h *cluster.Host) bool {
		return slices.ContainsFunc(h.GPUs, func(g *cluster.GPU) bool {
			return g.State == cluster.Free && g.Health.State == health.OK
		})
	}
	out := make([]*cluster.Host, 0, len(hosts))
	var rest []*cluster.Host
	for _, h := range hosts {
		if healthyFree(h) {
			out = append(out, h)
		} else {
			rest = append(rest, h)
		}
	}
	return append(out, rest...)
}

// healthyFirst is a host's GPUs with the degraded ones last (gpus itself
// when none is: the caller must not change it).
func healthyFirst(gpus []*cluster.GPU) []*cluster.GPU {
	if !slices.ContainsFunc(gpus, func(g *cluster.GPU) bool { return g.Health.State == health.Degraded }) {
		return gpus
	}
	out := slices.Clone(gpus)
	slices.SortStableFunc(out, func(a, b *cluster.GPU) int {
		return cmpBool(a.Health.State == health.Degraded, b.Health.State == health.Degraded)
	})
	return out
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func (t *textTable) add(hl hostLines) {
	t.hosts = append(t.hosts, hl)
	t.host = max(t.host, strWidth(hl.name))
	for _, g := range hl.gpus {
		for i, w := range g.widths {
			t.cells[i] = max(t.cells[i], int(w))
		}
	}
}

// write writes the hosts' lines, each fitted to the width.
func (t *textTable) write(b *bufio.Writer) {
	write := func(line []seg) { writeSegs(b, fitSegs(line, t.o.Width), t.o.Color) }
	if len(t.hosts) == 0 && t.o.Free {
		write([]seg{{text: "no free GPU"}})
		return
	}
	// Who holds a GPU matters more than its name, which the host's header
	// says: the name column goes when it would leave the users too little
	// room (80 columns, with H100 80GB HBM3).
	showName := t.cells[nameCell] > 0
	if w := t.o.Width; w > 0 && showName && w-t.prefixWidth(true) < tailMin {
		showName = false
	}
	line := make([]seg, 0, 8) // reused, as prefix is: 8,000 GPUs make as many lines
	var prefix []byte
	prefixWidth := t.prefixWidth(showName)
	for _, h := range t.hosts {
		if h.down != nil {
			write(append(append(line[:0], seg{text: pad(h.name, t.host) + "  "}), h.down...))
			continue
		}
		if !t.writeHeader(b, &h) {
			write(append(line[:0], seg{text: t.header(pad(h.name, t.host), h.fields)}))
		}
		for _, n := range h.notes {
			write(append(line[:0], seg{text: "  note: " + n}))
		}
		for i := range h.gpus {
			g := &h.gpus[i]
			tail := append(line[:0], g.main)
			if g.notes != "" {
				tail = append(tail, seg{text: g.notes})
			}
			prefix = t.appendPrefix(prefix[:0], g, showName)
			if t.fits(prefixWidth, tail) { // most lines: no need to cut
				b.Write(prefix)
				writeSegs(b, tail, t.o.Color)
				continue
			}
			write(append([]seg{{text: string(prefix)}}, tail...))
		}
	}
}

// writeHeader writes the host's line straight out when it needs no cut,
// and reports whether it did: else header cuts it.
func (t *textTable) writeHeader(b *bufio.Writer, h *hostLines) bool {
	if len(h.fields) == 0 || strings.HasSuffix(h.fields[len(h.fields)-1], " ") {
		return false // header trims the blanks at the end
	}
	w := t.host
	for _, f := range h.fields {
		w += 2 + strWidth(f)
	}
	if t.o.Width > 0 && w > t.o.Width {
		return false
	}
	b.WriteString(h.name)
	for n := t.host - strWidth(h.name); n > 0; n-- {
		b.WriteByte(' ')
	}
	for _, f := range h.fields {
		b.WriteString("  ")
		b.WriteString(f)
	}
	b.WriteByte('\n')
	return true
}

// header is the host's line: its fields, the last ones left out while the
// line is too wide (the model is kept, and cut if it must be).
func (t *textTable) header(name string, fields []string) string {
	for n := len(fields); ; n-- {
		s := strings.TrimRight(name+"  "+strings.Join(fields[:n], "  "), " ")
		if n <= 1 || t.o.Width <= 0 || strWidth(s) <= t.o.Width {
			return s
		}
	}
}

// fits reports whether a GPU line of tail after a prefix of prefixWidth
// columns needs no cut, and ends with its own words: such a line is
// written as it is, its prefix straight to the output.
func (t *textTable) fits(prefixWidth int, tail []seg) bool {
	if strings.TrimRight(tail[len(tail)-1].text, " ") == "" {
		return false // writeSegs would trim the prefix's blanks
	}
	if t.o.Width <= 0 {
		return true
	}
	w := prefixWidth
	for _, s := range tail {
		w += strWidth(s.text)
	}
	return w <= t.o.Width
}

// appendPrefix appends a GPU line up to its users: "[0] H100 | 45°C  98% |
// 62/80 GB | ", or without the name "[0] 45°C  98% | 62/80 GB | ".
func (t *textTable) appendPrefix(b []byte, g *gpuLine, showName bool) []byte {
	cell := func(b []byte, i int, left bool) []byte {
		if !left {
			b = appendSpaces(b, t.cells[i]-int(g.widths[i]))
		}
		b = append(b, g.cells[i]...)
		if left {
			b = appendSpaces(b, t.cells[i]-int(g.widths[i]))
		}
		return b
	}
	b = append(cell(b, idCell, true), ' ')
	if showName {
		b = append(cell(b, nameCell, true), " | "...)
	}
	deg, pct, slash, unit := "°C ", "% | ", "/", " GB"
	if g.cells[tempCell] == "" { // a failed GPU: blanks keep the columns
		deg, pct, slash, unit = "   ", "  | ", " ", "   "
	}
	b = append(cell(b, tempCell, false), deg...)
	b = append(cell(b, utilCell, false), pct...)
	b = append(cell(b, usedCell, false), slash...)
	b = append(append(b, g.cells[totalCell]...), unit...)
	b = appendSpaces(b, t.cells[totalCell]-int(g.widths[totalCell]))
	return append(b, " | "...)
}

// prefixWidth is the width of every GPU line's prefix.
func (t *textTable) prefixWidth(showName bool) int {
	c := t.cells
	w := c[idCell] + 1 + c[tempCell] + 2 + 1 + c[utilCell] + 1 + 3 + c[usedCell] + 1 + c[totalCell] + 3 + 3
	if showName {
		w += c[nameCell] + 3
	}
	return w
}

// hostFields are the header's fields: "H100 80GB HBM3 x8", "load 3.2",
// "cpus 64", "ram 120/512 GB"; each model with its vendor's name in a
// fleet of several vendors (vendors), "NVIDIA H100 80GB HBM3 x8".
func hostFields(h *cluster.Host, vendors bool) []string {
	f := make([]string, 0, 4)
	if m := hostModels(h, vendors); m != "" {
		f = append(f, m)
	}
	// the other fields are made in one string, each a part of it: a
	// thousand hosts have as many headers
	var buf [64]byte
	var num [32]byte
	b, ends := buf[:0], make([]int, 0, 3)
	if h.Load1.Valid {
		b = appendNumber(append(b, "load "...), strconv.AppendFloat(num[:0], h.Load1.Value, 'f', 1, 64))
		ends = append(ends, len(b))
	}
	if h.CPUs.Valid {
		b = appendNumber(append(b, "cpus "...), strconv.AppendInt(num[:0], h.CPUs.Value, 10))
		ends = append(ends, len(b))
	}
	if h.MemUsed.Valid || h.MemTotal.Valid {
		prec := memPrec(h.MemUsed.Value, h.MemUsed.Valid, h.MemTotal.Value, h.MemTotal.Valid)
		b = appendGiB(append(b, "ram "...), h.MemUsed.Value, h.MemUsed.Valid, prec)
		b = append(appendGiB(append(b, '/'), h.MemTotal.Value, h.MemTotal.Valid, prec), " GB"...)
		ends = append(ends, len(b))
	}
	all, start := string(b), 0
	for _, end := range ends {
		f = append(f, all[start:end])
		start = end
	}
	return f
}

// appendNumber appends num, cut to numberMax columns as clip cuts it.
func appendNumber(b, num []byte) []byte {
	if len(num) <= numberMax { // ASCII: a column a byte
		return append(b, num...)
	}
	return append(b, clip(string(num), numberMax)...)
}

// appendGiB appends MiB as memPair's GiB with prec decimals, or "?".
func appendGiB(b []byte, mib float64, ok bool, prec int) []byte {
	if !ok {
		return append(b, '?')
	}
	var num [32]byte
	return appendNumber(b, strconv.AppendFloat(num[:0], mib/1024, 'f', prec, 64))
}

// hostModels counts the host's GPUs per model: "H100 80GB HBM3 x8", or
// "A100 x2 + V100 x1". A GPU the driver lost counts under the host's model.
// With vendors, each model's vendor comes first: where a lab has both, a
// CUDA user looks for "NVIDIA", whatever the models are called.
func hostModels(h *cluster.Host, vendors bool) string {
	return modelsOf(h, h.GPUs, vendors)
}

// modelsOf is hostModels of some of h's GPUs.
func modelsOf(h *cluster.Host, gpus []*cluster.GPU, vendors bool) string {
	common := ""
	for _, g := range h.GPUs {
		if g.Name == h.ModelName && h.ModelName != "" {
			common = g.Short
			break
		}
	}
	var first [4]modelCount // most hosts have one model
	counts := modelCounts{list: first[:0]}
	for _, g := range gpus {
		name := g.Short
		if g.Name == "" {
			name = common
		}
		if name == "" {
			name = "unknown"
		}
		if vendors {
			name = vendorName(g.Vendor) + " " + name
		}
		counts.add(name)
	}
	var b strings.Builder
	b.Grow(32 * len(counts.list))
	for i, m := range counts.list {
		if i > 0 {
			b.WriteString(" + ")
		}
		if i == modelsShown && len(counts.list) > modelsShown+1 {
			b.WriteString(strconv.Itoa(len(counts.list)-i) + " more")
			break
		}
		b.WriteString(clean(m.name, gpuNameMax))
		b.WriteString(" x")
		b.WriteString(strconv.Itoa(m.n))
	}
	return b.String()
}

// modelCounts counts GPUs by model, in the order the models come. Most
// hosts have one model: a map is made only past a few, for a host that
// names every GPU apart.
type modelCounts struct {
	list  []modelCount
	index map[string]int // into list; nil while it is short
}

type modelCount struct {
	name string
	n    int
}

func (c *modelCounts) add(name string) {
	i, ok := c.index[name]
	if c.index == nil {
		i = slices.IndexFunc(c.list, func(m modelCount) bool { return m.name == name })
		ok = i >= 0
	}
	if !ok {
		c.list = append(c.list, modelCount{name: name})
		i = len(c.list) - 1
		if c.index != nil {
			c.index[name] = i
		} else if len(c.list) > 8 {
			c.index = make(map[string]int, 2*len(c.list))
			for j, m := range c.list {
				c.index[m.name] = j
			}
		}
	}
	c.list[i].n++
}

// downSegs is a down host's line after its name: "down (timeout): no
// complete answer in 20s", and its reservation.
func downSegs(h *cluster.Host, r *Report) []seg {
	s := "down (" + clean(string(h.Status), 16) + ")"
	if e := clean(h.Error, reasonMax); e != "" {
		s += ": " + e
	}
	segs := []seg{{s, stateColor[cluster.Failed]}}
	if rs := clean(reservationText(h.Reserved, r.Loc), reasonMax); rs != "" {
		segs = append(segs, seg{text: " · " + rs})
	}
	return segs
}

func newGPULine(g *cluster.GPU, r *Report) gpuLine {
	var l gpuLine
	c := &l.cells
	c[idCell], c[nameCell] = "[?]", clean(g.Short, gpuNameMax)
	switch {
	case g.HasIndex && g.Index >= 0 && g.Index < len(gpuIDs):
		c[idCell] = gpuIDs[g.Index]
	case g.HasIndex:
		c[idCell] = "[" + strconv.Itoa(g.Index) + "]"
	}
	if g.State != cluster.Failed {
		c[tempCell], c[utilCell] = reading(g.Temp.Value, g.Temp.Valid), reading(g.Util.Value, g.Util.Valid)
		c[usedCell], c[totalCell] = memPair(g.MemUsed.Value, g.MemUsed.Valid, g.MemTotal.Value, g.MemTotal.Valid)
	}
	for i, s := range c {
		l.widths[i] = uint8(min(strWidth(s), math.MaxUint8)) // cut to fewer by clean and clip
	}
	l.main, l.notes = gpuTail(g, r)
	return l
}

// gpuTail says who holds the GPU, in its state's colour, then its notes:
// "alice(62G) bob(3G)", "free · idle job: sweep(20G)", "reserved by carol
// until ...", "bob(3G) · reserved by carol until ... · used by bob",
// "failed: GPU is lost; ...". Ignored processes are not named.
func gpuTail(g *cluster.GPU, r *Report) (seg, string) {
	users, idle := gpuUsers(g, idleShares(g, r.idlePct()))
	var main string
	var notes []string
	switch g.State {
	case cluster.Failed:
		main = "failed"
		if !g.HasIndex && g.ID() != "?" {
			main += " (" + clean(g.ID(), 48) + ")"
		}
		why := g.Error
		if why == "" {
			why = g.FailedReason() // the [health] policy's
		}
		if e := clean(why, reasonMax); e != "" {
			main += ": " + e
		}
	case cluster.Free:
		main = "free"
	case cluster.Reserved:
		main = clean(reservationText(g.Reservation, r.Loc), reasonMax)
	default:
		main = users
		if main == "" {
			main = "busy"
		}
	}
	if !g.HasIndex && g.ID() != "?" && g.State != cluster.Failed {
		notes = append(notes, "GPU "+clean(g.ID(), 48)) // its line says [?]
	}
	if words := degradedWords(g); words != "" {
		notes = append(notes, "degraded: "+words)
	}
	if idle != "" {
		notes = append(notes, "idle job: "+idle)
	}
	for _, n := range g.Notes {
		if n != idleJobNote || idle == "" {
			notes = append(notes, clean(n, reasonMax))
		}
	}
	if g.State == cluster.Busy && g.Reservation != nil {
		notes = append(notes, clean(reservationText(g.Reservation, r.Loc), reasonMax))
		if used := usedByWords(unreservedUsers(g)); used != "" {
			notes = append(notes, clean(used, reasonMax))
		}
	}
	if len(notes) == 0 {
		return seg{main, stateColor[g.State]}, ""
	}
	return seg{main, stateColor[g.State]}, " · " + strings.Join(notes, " · ")
}

// gpuUsers are the users holding g with their memory, the most first,
// "alice(62G) bob(3G)", and apart those of the idle-time job. A process
// of root in a container counts under the container's name, else its
// short id (cluster.Proc.Holder): "vllm-server(70G)". A holder whose
// share of a shared GPU is idle (idleShares) says so: "alice(29G idle)".
func gpuUsers(g *cluster.GPU, idleShare []string) (holders, idle string) {
	var holdBuf, jobBuf [4]holderMem // most GPUs have a holder or two
	hold, job := holdBuf[:0], jobBuf[:0]
	for _, p := range g.Procs {
		switch {
		case p.Preemptible:
			job = addUse(job, p)
		case p.Ignored:
		default:
			hold = addUse(hold, p) // root in a container: the container, as on the page
		}
	}
	return usesText(hold, idleShare), usesText(job, idleShare)
}

// holderMem is one holder's memory on a GPU.
type holderMem struct {
	name  string
	mib   float64
	known bool
}

// addUse adds p's memory to its holder's in list.
func addUse(list []holderMem, p *cluster.Proc) []holderMem {
	name := p.Holder()
	i := slices.IndexFunc(list, func(u holderMem) bool { return u.name == name })
	if i < 0 {
		list = append(list, holderMem{name: name})
		i = len(list) - 1
	}
	if p.MemMiB.Valid {
		list[i].mib += p.MemMiB.Value
		list[i].known = true
	}
	return list
}

// usesText is "alice(62G) bob(3G)": the holders, the most memory first,
// gpuUsersMax of them named.
func usesText(list []holderMem, idleShare []string) string {
	if len(list) == 0 {
		return ""
	}
	slices.SortStableFunc(list, func(a, b holderMem) int { return cmp.Compare(b.mib, a.mib) })
	var b strings.Builder
	b.Grow(20 * len(list)) // "alice(62G) ": one allocation, not one per write
	for i, u := range list {
		if i > 0 {
			b.WriteByte(' ')
		}
		if i == gpuUsersMax && len(list) > gpuUsersMax+1 {
			b.WriteString("+" + strconv.Itoa(len(list)-i) + " more")
			break
		}
		b.WriteString(clean(userName(u.name), userNameMax))
		idle := slices.Contains(idleShare, u.name)
		switch {
		case u.known:
			b.WriteByte('(')
			b.WriteString(memNumber(u.mib))
			b.WriteByte('G')
			if idle {
				b.WriteString(" idle")
			}
			b.WriteByte(')')
		case idle:
			b.WriteString("(idle)")
		}
	}
	return b.String()
}

// memG is an amount for a user: "62G", "3G", "2.5G", "0.4G".
func memG(mib float64) string { return memNumber(mib) + "G" }

// memNumber is memG without its unit.
func memNumber(mib float64) string {
	g := mib / 1024
	if g < 9.95 {
		return strings.TrimSuffix(strconv.FormatFloat(g, 'f', 1, 64), ".0")
	}
	return clip(wholeText(math.RoundToEven(g)), numberMax)
}

// memPair is used and total in GiB, both with a decimal when the total is
// under 10 GiB ("0.4", "8.0"), else whole ("62", "80"); "?" when unknown.
func memPair(used float64, usedOK bool, total float64, totalOK bool) (string, string) {
	prec := memPrec(used, usedOK, total, totalOK)
	f := func(v float64, ok bool) string {
		if !ok {
			return "?"
		}
		if prec == 0 {
			return clip(wholeText(math.RoundToEven(v/1024)), numberMax)
		}
		return clip(strconv.FormatFloat(v/1024, 'f', prec, 64), numberMax)
	}
	return f(used, usedOK), f(total, totalOK)
}

// memPrec is memPair's decimals: 1 when the total is under 10 GiB, or the
// used memory when the total is not known; else 0.
func memPrec(used float64, usedOK bool, total float64, totalOK bool) int {
	if totalOK && total/1024 < 9.95 || !totalOK && used/1024 < 9.95 {
		return 1
	}
	return 0
}

// reading is a whole number, or "?".
func reading(v float64, ok bool) string {
	if !ok || math.IsNaN(v) {
		return "?"
	}
	return clip(wholeText(math.Round(v)), numberMax)
}

// wholeText is strconv.FormatFloat(r, 'f', 0, 64) of a whole r, the small
// ones (readings, GiB) from a table: 8,000 GPUs have four numbers each.
func wholeText(r float64) string {
	if r >= 0 && r < float64(len(smallWholes)) && !math.Signbit(r) {
		return smallWholes[int(r)]
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}

var smallWholes = func() (t [1000]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

// gpuIDs are the lines' "[0]" to "[63]".
var gpuIDs = func() (t [64]string) {
	for i := range t {
		t[i] = "[" + strconv.Itoa(i) + "]"
	}
	return t
}()

// writeTextSummary writes the lines above the hosts: the counts per model,
// the data's age, the stale warning, the page's warnings and the users. A
// width wraps the summary between its items and cuts the other lines.
func writeTextSummary(b *bufio.Writer, r *Report, o textOptions) {
	c := r.Cluster
	items := []string{fmt.Sprintf("%d free of %d GPUs", c.Count[cluster.Free], c.GPUs)}
	models, more := modelsView(c.Models)
	for _, m := range models {
		items = append(items, fmt.Sprintf("%s: %d free of %d", clean(m.Name, gpuNameMax), m.Free, m.Total))
	}
	if more != nil {
		items = append(items, fmt.Sprintf("+%d more: %d free of %d", more.N, more.Free, more.Total))
	}
	if c.Degraded > 0 {
		items = append(items, fmt.Sprintf("%d degraded", c.Degraded))
	}
	if c.Down > 0 {
		items = append(items, fmt.Sprintf("%d host%s down", c.Down, plural(c.Down)))
	}
	age := r.age()
	switch {
	case o.Dated && !r.Cluster.DataTime.IsZero():
		items = append(items, "data from "+timeText(r.Cluster.DataTime, r.Loc))
	case age >= 0:
		items = append(items, "data "+ageText(age)+" old")
	default:
		items = append(items, "data time unknown")
	}
	for _, line := range wrapItems(items, o.Width) {
		writeSegs(b, fitSegs([]seg{{text: line}}, o.Width), false)
	}
	if r.stale() {
		writeSegs(b, fitSegs([]seg{{"STALE: " + staleText(r), "\x1b[1;31m"}}, o.Width), o.Color)
	}
	for _, wmsg := range r.Warnings {
		writeSegs(b, fitSegs([]seg{{text: "warning: " + oneLine(wmsg)}}, o.Width), false)
	}
	if o.Free || len(c.Users) == 0 {
		return // -free is for a GPU to run on, not for who holds the others
	}
	items = items[:0]
	for i, u := range c.Users {
		if i == usersShown && len(c.Users) > usersShown+1 {
			items = append(items, fmt.Sprintf("+%d more", len(c.Users)-i))
			break
		}
		items = append(items, fmt.Sprintf("%s %d GPU%s %s", clean(userName(u.Name), userNameMax), u.GPUs, plural(u.GPUs), memG(u.MemMiB)))
	}
	items[0] = "users: " + items[0]
	for _, line := range wrapItems(items, o.Width) {
		writeSegs(b, fitSegs([]seg{{text: line}}, o.Width), false)
	}
}

// staleText says why the data is stale.
func staleText(r *Report) string {
	if age := r.age(); age >= 0 {
		return fmt.Sprintf("the newest reading is %s old (more than %s)", ageText(age), durText(r.Config.StaleAfter))
	}
	return r.unknownAgeText()
}

// wrapItems joins items with " · " into lines of at most width columns (0:
// one line), breaking only between items; a line after the first is
// indented. An item wider than a line is cut when written.
func wrapItems(items []string, width int) []string {
	var lines []string
	line := ""
	for _, it := range items {
		switch {
		case line == "":
			line = it
		case width <= 0 || strWidth(line)+3+strWidth(it) <= width:
			line += " · " + it
		default:
			lines = append(lines, line)
			line = "  " + it
		}
	}
	return append(lines, line)
}

// fitSegs cuts a line to width columns, ending it with "…" (width 0: no
// limit).
func fitSegs(line []seg, width int) []seg {
	if width <= 0 {
		return line
	}
	total := 0
	for _, s := range line {
		total += strWidth(s.text)
	}
	if total <= width {
		return line
	}
	var out []seg
	room := width - 1 // for "…"
	for _, s := range line {
		if w := strWidth(s.text); w <= room {
			out = append(out, s)
			room -= w
			continue
		}
		out = append(out, seg{cutWidth(s.text, room) + "…", s.color})
		break
	}
	return out
}

// writeSegs writes a line, without trailing blanks; colour only if color.
func writeSegs(b *bufio.Writer, line []seg, color bool) {
	for len(line) > 0 && strings.TrimRight(line[len(line)-1].text, " ") == "" {
		line = line[:len(line)-1]
	}
	for i, s := range line {
		text := s.text
		if i == len(line)-1 {
			text = strings.TrimRight(text, " ")
		}
		if color && s.color != "" {
			b.WriteString(s.color + text + colorReset)
		} else {
			b.WriteString(text)
		}
	}
	b.WriteByte('\n')
}

// oneLine keeps a table cell on one line and drops control characters, so
// nothing a host printed (a process name with escape sequences) can move the
// cursor or recolour the terminal: C0 and C1 controls (0x9b is CSI to some
// terminals, as a raw byte too), invalid UTF-8 and other runes that are not
// printable (bidi overrides, zero-width ones). Each run of them is a space.
func oneLine(s string) string {
	if printableASCII(s) {
		return s // the common case, without a copy
	}
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		// a byte that is not UTF-8 decodes as RuneError
		return r == utf8.RuneError || !unicode.IsPrint(r)
	}), " ")
}

// printableASCII reports whether s is all printable ASCII, which oneLine
// keeps as it is.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// clean is s from a host made safe for a terminal (oneLine) and cut to n
// columns. Only s's first bytes are looked at: a 1 MiB name costs no more
// than a short one.
func clean(s string, n int) string {
	cut := false
	if limit := 4*n + 16; len(s) > limit { // a rune is at most 4 bytes
		s, cut = s[:limit], true
	}
	s = oneLine(s)
	if cut {
		return cutWidth(s, n-1) + "…"
	}
	return clip(s, n)
}

// clip cuts s to n columns, the last one "…", when it is wider.
func clip(s string, n int) string {
	if strWidth(s) <= n {
		return s
	}
	return cutWidth(s, n-1) + "…"
}

// cutWidth is the longest start of s that takes at most n columns.
func cutWidth(s string, n int) string {
	w := 0
	for i, r := range s {
		rw := runeWidth(r)
		if w+rw > n {
			return s[:i]
		}
		w += rw
	}
	return s
}

// pad fills s with spaces to n columns; lpad puts them before it.
func pad(s string, n int) string  { return s + strings.Repeat(" ", max(0, n-strWidth(s))) }
func lpad(s string, n int) string { return strings.Repeat(" ", max(0, n-strWidth(s))) + s }

// appendSpaces appends n spaces (none if n < 1).
func appendSpaces(b []byte, n int) []byte {
	for ; n > 0; n-- {
		b = append(b, ' ')
	}
	return b
}

// strWidth is the columns s takes on a terminal.
func strWidth(s string) int {
	w := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < utf8.RuneSelf:
			w++
		case c >= 0xcc: // a rune from U+0300 on: it may take 0 or 2 columns
			return w + runesWidth(s[i:])
		case c >= 0xc0: // the first byte of a rune under U+0300 ("°", "·"): one column
			w++
		} // else a rune's later byte, counted with its first
	}
	return w
}

// runesWidth is strWidth rune by rune.
func runesWidth(s string) int {
	w := 0
	for _, r := range s {
		w += runeWidth(r)
	}
	return w
}

// runeWidth is the columns r takes on a terminal: 2 for east Asian wide and
// full-width runes and most emoji, 0 for combining marks, else 1. Ambiguous
// runes ("°", "·", "…") are 1, as terminals outside east Asian locales show
// them. Only printable runes reach it (oneLine).
func runeWidth(r rune) int {
	switch {
	case r < 0x300:
		return 1
	case unicode.In(r, unicode.Mn, unicode.Me):
		return 0
	case unicode.Is(wideRunes, r):
		return 2
	}
	return 1
}

// wideRunes are Unicode's east Asian wide (W) and full-width (F) runes, in
// blocks: CJK, Hangul, kana, full-width forms, emoji. Our own small table
// rather than a library: close enough for names.
var wideRunes = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x1100, Hi: 0x115f, Stride: 1}, // Hangul Jamo initials
		{Lo: 0x231a, Hi: 0x231b, Stride: 1},
		{Lo: 0x2329, Hi: 0x232a, Stride: 1},
		{Lo: 0x23e9, Hi: 0x23ec, Stride: 1},
		{Lo: 0x23f0, Hi: 0x23f0, Stride: 1},
		{Lo: 0x23f3, Hi: 0x23f3, Stride: 1},
		{Lo: 0x25fd, Hi: 0x25fe, Stride: 1},
		{Lo: 0x2614, Hi: 0x2615, Stride: 1},
		{Lo: 0x2648, Hi: 0x2653, Stride: 1},
		{Lo: 0x267f, Hi: 0x267f, Stride: 1},
		{Lo: 0x2693, Hi: 0x2693, Stride: 1},
		{Lo: 0x26a1, Hi: 0x26a1, Stride: 1},
		{Lo: 0x26aa, Hi: 0x26ab, Stride: 1},
		{Lo: 0x26bd, Hi: 0x26be, Stride: 1},
		{Lo: 0x26c4, Hi: 0x26c5, Stride: 1},
		{Lo: 0x26ce, Hi: 0x26ce, Stride: 1},
		{Lo: 0x26d4, Hi: 0x26d4, Stride: 1},
		{Lo: 0x26ea, Hi: 0x26ea, Stride: 1},
		{Lo: 0x26f2, Hi: 0x26f3, Stride: 1},
		{Lo: 0x26f5, Hi: 0x26f5, Stride: 1},
		{Lo: 0x26fa, Hi: 0x26fa, Stride: 1},
		{Lo: 0x26fd, Hi: 0x26fd, Stride: 1},
		{Lo: 0x2705, Hi: 0x2705, Stride: 1},
		{Lo: 0x270a, Hi: 0x270b, Stride: 1},
		{Lo: 0x2728, Hi: 0x2728, Stride: 1},
		{Lo: 0x274c, Hi: 0x274c, Stride: 1},
		{Lo: 0x274e, Hi: 0x274e, Stride: 1},
		{Lo: 0x2753, Hi: 0x2755, Stride: 1},
		{Lo: 0x2757, Hi: 0x2757, Stride: 1},
		{Lo: 0x2795, Hi: 0x2797, Stride: 1},
		{Lo: 0x27b0, Hi: 0x27b0, Stride: 1},
		{Lo: 0x27bf, Hi: 0x27bf, Stride: 1},
		{Lo: 0x2b1b, Hi: 0x2b1c, Stride: 1},
		{Lo: 0x2b50, Hi: 0x2b50, Stride: 1},
		{Lo: 0x2b55, Hi: 0x2b55, Stride: 1},
		{Lo: 0x2e80, Hi: 0x303e, Stride: 1}, // CJK radicals, symbols and punctuation
		{Lo: 0x3041, Hi: 0x33ff, Stride: 1}, // kana, bopomofo, Hangul compatibility, CJK compatibility
		{Lo: 0x3400, Hi: 0x4dbf, Stride: 1}, // CJK extension A
		{Lo: 0x4e00, Hi: 0x9fff, Stride: 1}, // CJK unified ideographs
		{Lo: 0xa000, Hi: 0xa4cf, Stride: 1}, // Yi
		{Lo: 0xa960, Hi: 0xa97f, Stride: 1}, // Hangul Jamo extended A
		{Lo: 0xac00, Hi: 0xd7a3, Stride: 1}, // Hangul syllables
		{Lo: 0xf900, Hi: 0xfaff, Stride: 1}, // CJK compatibility ideographs
		{Lo: 0xfe10, Hi: 0xfe19, Stride: 1}, // vertical forms
		{Lo: 0xfe30, Hi: 0xfe6f, Stride: 1}, // CJK compatibility and small forms
		{Lo: 0xff00, Hi: 0xff60, Stride: 1}, // full-width forms
		{Lo: 0xffe0, Hi: 0xffe6, Stride: 1},
	},
	R32: []unicode.Range32{
		{Lo: 0x16fe0, Hi: 0x18cff, Stride: 1}, // Tangut, Khitan
		{Lo: 0x1b000, Hi: 0x1b2ff, Stride: 1}, // kana supplement, Nüshu
		{Lo: 0x1f004, Hi: 0x1f004, Stride: 1},
		{Lo: 0x1f0cf, Hi: 0x1f0cf, Stride: 1},
		{Lo: 0x1f18e, Hi: 0x1f18e, Stride: 1},
		{Lo: 0x1f191, Hi: 0x1f19a, Stride: 1},
		{Lo: 0x1f200, Hi: 0x1f251, Stride: 1},
		{Lo: 0x1f300, Hi: 0x1f64f, Stride: 1}, // emoji: pictographs, emoticons
		{Lo: 0x1f680, Hi: 0x1f6ff, Stride: 1}, // transport and map
		{Lo: 0x1f900, Hi: 0x1f9ff, Stride: 1}, // supplemental pictographs
		{Lo: 0x1fa70, Hi: 0x1faff, Stride: 1},
		{Lo: 0x20000, Hi: 0x2fffd, Stride: 1}, // CJK extensions B to F
		{Lo: 0x30000, Hi: 0x3fffd, Stride: 1}, // CJK extension G and on
	},
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// healthList is -text's last lines: the GPUs whose health is not ok, the
// failed first, each with its findings, "h100a [2] failed: XID 79 logged
// since the last poll"; none when every GPU is healthy.
func healthList(c *cluster.Cluster) [][]seg {
	var failed, degraded [][]seg
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			if g.Health.State == health.OK {
				continue
			}
			var details []string
			for _, f := range g.Health.Findings {
				details = append(details, f.Detail)
			}
			id := "[" + clean(g.ID(), 48) + "]"
			line := []seg{{text: "  " + clean(h.Display, hostNameMax) + " " + id + " "},
				{g.Health.State, healthColor[g.Health.State]}, {text: ": " + clean(strings.Join(details, "; "), reasonMax)}}
			if g.Health.State == health.Failed {
				failed = append(failed, line)
			} else {
				degraded = append(degraded, line)
			}
		}
	}
	if len(failed)+len(degraded) == 0 {
		return nil
	}
	head := []seg{{text: fmt.Sprintf("health: %d failed, %d degraded", len(failed), len(degraded))}}
	return append(append([][]seg{head}, failed...), degraded...)
}

// healthColor is each health state's colour in -text's list.
var healthColor = map[string]string{health.Failed: stateColor[cluster.Failed], health.Degraded: "\x1b[33m"}
