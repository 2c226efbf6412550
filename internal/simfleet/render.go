package simfleet

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

// Messages that real nvidia-smi prints, with the exit codes that go with them.
const (
	msgDriverNotLoaded = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
	msgNoDevices       = "No devices were found"
	msgGPULost         = "Unable to determine the device handle for GPU %s: GPU is lost.  Reboot the system to recover this GPU"
	exitDriverNotLoad  = 9
	exitNoDevices      = 6
	exitGPULost        = 15
	exitBadField       = 2
	exitTimeout        = 124
)

// capModel is one capture, split into what a simulated GPU answers from.
type capModel struct {
	name    string
	cols    map[string]int    // canonical --query-gpu field -> column
	units   []string          // per column: "MiB", "%", "" (none)
	aliases map[string]string // alias -> canonical field (gpu_name -> name)
	rows    map[string][]string
	// baseMiB is memory.used on the idle GPU: the driver's own share.
	baseMiB int
	// known is what its --help-query-gpu lists (nil: the columns);
	// the probe drops the health fields a host's driver does not know.
	known map[string]bool
	// appsUnit is the unit of used_gpu_memory; appsMemNA is true where the
	// capture's compute apps print [N/A] for it (Windows, WDDM).
	appsUnit  string
	appsMemNA bool
}

var (
	capMu    sync.Mutex
	capCache = map[string]*capModel{}
)

// linuxCaptures are the multi-section Linux captures, in the order Generate
// cycles through them.
func linuxCaptures() []string {
	var out []string
	for _, n := range captures.Names() {
		if strings.HasPrefix(n, "linux-") {
			out = append(out, n)
		}
	}
	return out
}

// resolveCapture accepts a capture's full name or a substring matching
// exactly one capture ("h200", "h100-mig", "linux-x86_64__nvidia-geforce").
func resolveCapture(name string) (string, error) {
	names := captures.Names()
	if name == "" {
		name = "h200"
	}
	var found []string
	for _, n := range names {
		if n == name {
			return n, nil
		}
		if strings.Contains(n, name) {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("no capture named %q (have %s)", name, strings.Join(names, ", "))
	}
	return "", fmt.Errorf("capture name %q is ambiguous: %s", name, strings.Join(found, ", "))
}

func loadModel(name string) (*capModel, error) {
	capMu.Lock()
	defer capMu.Unlock()
	if m, ok := capCache[name]; ok {
		return m, nil
	}
	c, err := captures.Load(name)
	if err != nil {
		return nil, err
	}
	m := &capModel{
		name:     name,
		cols:     map[string]int{},
		aliases:  map[string]string{"gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id"},
		rows:     map[string][]string{},
		appsUnit: "MiB",
	}
	for _, state := range []string{"idle", "load"} {
		s, ok := c.Section(state, "query-gpu")
		if !ok {
			return nil, fmt.Errorf("capture %s has no %s query-gpu section", name, state)
		}
		lines := strings.Split(strings.TrimRight(s.Body, "\n"), "\n")
		if len(lines) < 2 {
			return nil, fmt.Errorf("capture %s: %s query-gpu has no data row", name, state)
		}
		hdr := strings.Split(strings.TrimSpace(lines[0]), ", ")
		row := strings.Split(strings.TrimSpace(lines[1]), ", ")
		if len(hdr) != len(row) {
			return nil, fmt.Errorf("capture %s: %s query-gpu has %d header cells and %d values", name, state, len(hdr), len(row))
		}
		if m.units == nil {
			m.units = make([]string, len(hdr))
			for i, h := range hdr {
				f, unit := h, ""
				if j := strings.Index(h, " ["); j >= 0 && strings.HasSuffix(h, "]") {
					f, unit = h[:j], h[j+2:len(h)-1]
				}
				m.cols[f] = i
				m.units[i] = unit
			}
		} else if len(row) != len(m.units) {
			return nil, fmt.Errorf("capture %s: idle and load query-gpu differ in width", name)
		}
		m.rows[state] = row
	}
	if i, ok := m.cols["memory.used"]; ok {
		m.baseMiB, _ = strconv.Atoi(stripUnit(m.rows["idle"][i], m.units[i]))
	}
	if s, ok := c.Section("capabilities", "help-query-gpu"); ok {
		m.known = nvsmi.KnownFields([]byte(s.Body))
	}
	if s, ok := c.Section("capabilities", "help-query-gpu"); ok && s.State != "" {
		for _, line := range strings.Split(s.Body, "\n") {
			if !strings.HasPrefix(line, `"`) || !strings.Contains(line, `" or "`) {
				continue
			}
			names := strings.Split(strings.Trim(line, `"`), `" or "`)
			for _, a := range names[1:] {
				if _, isCol := m.cols[a]; !isCol {
					m.aliases[a] = names[0]
				}
			}
		}
	}
	if s, ok := c.Section("load", "query-compute-apps"); ok {
		lines := strings.Split(strings.TrimRight(s.Body, "\n"), "\n")
		hdr := strings.Split(lines[0], ", ")
		for i, h := range hdr {
			if strings.HasPrefix(h, "used_gpu_memory [") {
				m.appsUnit = strings.TrimSuffix(strings.TrimPrefix(h, "used_gpu_memory ["), "]")
				for _, l := range lines[1:] {
					if v := strings.Split(l, ", "); len(v) == len(hdr) && strings.HasPrefix(v[i], "[") {
						m.appsMemNA = true
					}
				}
			}
		}
	}
	capCache[name] = m
	return m, nil
}

// stripUnit turns "81559 MiB" into "81559" for --format=csv,nounits; tokens
// such as [N/A] stay.
func stripUnit(v, unit string) string {
	if unit != "" {
		if s, ok := strings.CutSuffix(v, " "+unit); ok {
			return s
		}
	}
	return v
}

// value returns the capture's value of a column with its unit.
func (m *capModel) col(field string) (int, string, bool) {
	if i, ok := m.cols[field]; ok {
		return i, field, true
	}
	if c, ok := m.aliases[field]; ok {
		if i, ok := m.cols[c]; ok {
			return i, c, true
		}
	}
	return 0, "", false
}

// simGPU is one simulated GPU: what differs from its capture row.
type simGPU struct {
	index   int
	uuid    string
	serial  string
	bus     int // PCI bus number
	usedMiB int
	state   string     // capture row: "idle" or "load"
	health  *GPUHealth // nil: as the capture reads
}

func (g *simGPU) busID() string { return fmt.Sprintf("00000000:%02X:00.0", g.bus) }

// dgxBuses are the PCI buses of the eight GPUs of an HGX H100/H200 board.
var dgxBuses = []int{0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB}

// makeGPUs makes the host's GPUs, nvidia-smi's and then the driver's only.
func makeGPUs(spec *HostSpec, m *capModel) []simGPU {
	gpus := make([]simGPU, spec.GPUs+spec.DriverOnlyGPUs)
	captureBus := 0
	if i, ok := m.cols["pci.bus"]; ok {
		if v, err := strconv.ParseUint(strings.TrimPrefix(m.rows["idle"][i], "0x"), 16, 8); err == nil {
			captureBus = int(v)
		}
	}
	for i := range gpus {
		sum := sha256.Sum256([]byte(spec.Name + "/" + strconv.Itoa(i)))
		h := hex.EncodeToString(sum[:16])
		g := &gpus[i]
		g.index = i
		g.uuid = "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
		g.serial = strconv.FormatUint(1650000000000+binary.BigEndian.Uint64(sum[16:24])%10000000000, 10)
		switch {
		case len(gpus) <= 2 && captureBus != 0:
			g.bus = captureBus + i
		case i < len(dgxBuses):
			g.bus = dgxBuses[i]
		default:
			g.bus = (0x10 + 0x11*i) & 0xFF
		}
		g.usedMiB = m.baseMiB
		g.state = spec.State
	}
	for i := range spec.Health {
		gpus[spec.Health[i].GPU].health = &spec.Health[i]
	}
	for _, p := range spec.Processes {
		gpus[p.GPU].usedMiB += p.MemMiB
		if spec.State == "" && !p.Idle {
			gpus[p.GPU].state = "load"
		}
	}
	for i := range gpus {
		g := &gpus[i]
		if g.state == "" {
			g.state = "idle"
		}
		if total, ok := m.intValue(g.state, "memory.total"); ok {
			reserved, _ := m.intValue(g.state, "memory.reserved")
			if g.usedMiB > total-reserved {
				g.usedMiB = total - reserved
			}
		}
	}
	return gpus
}

func (m *capModel) intValue(state, field string) (int, bool) {
	i, ok := m.cols[field]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(stripUnit(m.rows[state][i], m.units[i]))
	return n, err == nil
}

// gpuValue is the value a GPU prints for a canonical field, unit included.
func (h *host) gpuValue(g *simGPU, field string, col int, now string) string {
	m := h.model
	unit := m.units[col]
	switch field {
	case "index", "minor_number":
		return strconv.Itoa(g.index)
	case "uuid":
		return g.uuid
	case "serial":
		if v := m.rows[g.state][col]; strings.HasPrefix(v, "[") {
			return v
		}
		return g.serial
	case "pci.bus_id":
		return g.busID()
	case "pci.bus":
		return fmt.Sprintf("0x%02X", g.bus)
	case "pci.device":
		return "0x00"
	case "count":
		return strconv.Itoa(len(h.gpus))
	case "timestamp":
		return now
	case "memory.used":
		return withUnit(g.usedMiB, unit)
	case "memory.free":
		total, ok1 := m.intValue(g.state, "memory.total")
		reserved, _ := m.intValue(g.state, "memory.reserved")
		if ok1 {
			return withUnit(max(total-reserved-g.usedMiB, 0), unit)
		}
	}
	if g.health != nil {
		if v, ok := healthValue(g.health, field, m.rows[g.state][col]); ok {
			return v
		}
	}
	return m.rows[g.state][col]
}

func withUnit(n int, unit string) string {
	if unit == "" {
		return strconv.Itoa(n)
	}
	return strconv.Itoa(n) + " " + unit
}

func timestamp() string { return time.Now().Format("2006/01/02 15:04:05.000") }

// rendered is one nvidia-smi run: its output and exit status.
type rendered struct {
	body []byte
	code int
}

func badField(f string) rendered {
	return rendered{[]byte(fmt.Sprintf("Field \"%s\" is not a valid field to query.\n\n", f)), exitBadField}
}

// lostMessage is what nvidia-smi prints in place of a lost GPU's row.
func (g *simGPU) lostMessage() string {
	return fmt.Sprintf(msgGPULost, fmt.Sprintf("0000:%02x:00.0", g.bus))
}

// renderGPUs answers `nvidia-smi --query-gpu=FIELDS --format=csv,nounits`.
func (h *host) renderGPUs(fields []string) rendered {
	switch h.spec.Failure {
	case DriverNotLoaded:
		return rendered{[]byte(msgDriverNotLoaded + "\n"), exitDriverNotLoad}
	case NoDevices:
		return rendered{[]byte(msgNoDevices + "\n"), exitNoDevices}
	}
	m := h.model
	cols := make([]int, len(fields))
	canon := make([]string, len(fields))
	var b bytes.Buffer
	for i, f := range fields {
		c, name, ok := m.col(f)
		if !ok {
			return badField(f)
		}
		cols[i], canon[i] = c, name
		if i > 0 {
			b.WriteString(", ")
		}
		// an alias comes back under the field's own name (driver 580,
		// asked for clocks_throttle_reasons.active, printed
		// clocks_event_reasons.active)
		b.WriteString(name)
		if u := m.units[c]; u != "" {
			b.WriteString(" [" + u + "]")
		}
	}
	b.WriteByte('\n')
	now := timestamp()
	code := 0
	for gi := range h.gpus {
		g := &h.gpus[gi]
		if h.spec.Failure == GPULost && gi == h.lostGPU {
			b.WriteString(g.lostMessage())
			b.WriteByte('\n')
			code = exitGPULost
			continue
		}
		for i := range fields {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(stripUnit(h.gpuValue(g, canon[i], cols[i], now), m.units[cols[i]]))
		}
		b.WriteByte('\n')
	}
	return rendered{b.Bytes(), code}
}

// appFields are the --query-compute-apps fields, with their aliases.
var appFields = map[string]string{
	"timestamp": "timestamp", "gpu_name": "gpu_name", "gpu_bus_id": "gpu_bus_id",
	"gpu_serial": "gpu_serial", "gpu_uuid": "gpu_uuid", "pid": "pid",
	"process_name": "process_name", "name": "process_name",
	"used_gpu_memory": "used_gpu_memory", "used_memory": "used_gpu_memory",
}

// renderApps answers `nvidia-smi --query-compute-apps=FIELDS --format=csv,nounits`.
func (h *host) renderApps(fields []string) rendered {
	switch h.spec.Failure {
	case DriverNotLoaded:
		return rendered{[]byte(msgDriverNotLoaded + "\n"), exitDriverNotLoad}
	case NoDevices:
		return rendered{[]byte(msgNoDevices + "\n"), exitNoDevices}
	}
	m := h.model
	canon := make([]string, len(fields))
	var b bytes.Buffer
	for i, f := range fields {
		c, ok := appFields[f]
		if !ok {
			return badField(f)
		}
		canon[i] = c
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f)
		if c == "used_gpu_memory" && m.appsUnit != "" {
			b.WriteString(" [" + m.appsUnit + "]")
		}
	}
	b.WriteByte('\n')
	now := timestamp()
	code := 0
	for gi := range h.gpus {
		g := &h.gpus[gi]
		if h.spec.Failure == GPULost && gi == h.lostGPU {
			b.WriteString(g.lostMessage())
			b.WriteByte('\n')
			code = exitGPULost
			continue
		}
		for _, p := range h.procsByGPU[gi] {
			for i, c := range canon {
				if i > 0 {
					b.WriteString(", ")
				}
				switch c {
				case "timestamp":
					b.WriteString(now)
				case "gpu_name", "gpu_serial", "gpu_bus_id", "gpu_uuid":
					col, name, ok := m.col(strings.TrimPrefix(c, "gpu_"))
					if c == "gpu_bus_id" {
						col, name, ok = m.col("pci.bus_id")
					}
					if ok {
						b.WriteString(h.gpuValue(g, name, col, now))
					} else {
						b.WriteString("[N/A]")
					}
				case "pid":
					b.WriteString(strconv.Itoa(p.PID))
				case "process_name":
					// modern drivers print '?' for a comma in a process name
					b.WriteString(strings.ReplaceAll(p.processName(), ",", "?"))
				case "used_gpu_memory":
					if m.appsMemNA {
						b.WriteString("[N/A]")
					} else {
						b.WriteString(strconv.Itoa(p.MemMiB))
					}
				}
			}
			b.WriteByte('\n')
		}
	}
	return rendered{b.Bytes(), code}
}

// renderPS answers `ps -o pid=,user:32=,etimes=,args= -p $$,PIDS` for the
// pids the script picked from the apps output (the text before each line's
// first comma, where that is all digits), and the script's own shell ($$),
// which a working ps always lists. ok is false when it picked none: the
// script then runs no ps at all.
func (h *host) renderPS(apps []byte) (r rendered, ok bool) {
	var pids []int
	for _, line := range bytes.Split(apps, []byte("\n")) {
		f, _, _ := bytes.Cut(line, []byte(","))
		if len(f) == 0 || len(bytes.Trim(f, "0123456789")) != 0 {
			continue
		}
		if pid, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return rendered{}, false
	}
	sort.Ints(pids)
	var b bytes.Buffer
	line := func(pid int, user string, elapsedS int, command string) {
		if len(user) > 32 {
			user = user[:31] + "+"
		}
		fmt.Fprintf(&b, "%5d %-32s %7d %s\n", pid, user, elapsedS, command)
	}
	shell := 1
	for pid := range h.procByPID {
		shell = max(shell, pid+1)
	}
	for i, pid := range pids {
		if i > 0 && pid == pids[i-1] {
			continue
		}
		if p, ok := h.procByPID[pid]; ok {
			line(pid, p.User, p.ElapsedS, p.Command)
		}
	}
	line(shell, User, 0, "sh -s")
	return rendered{b.Bytes(), 0}, true
}

// renderHost is the host section: CPU count, load and memory.
func (h *host) renderHost() []byte {
	s := h.spec
	l1 := s.Load1
	total := s.MemTotalMiB * 1024
	avail := max(s.MemTotalMiB-s.MemUsedMiB, 0) * 1024
	return fmt.Appendf(nil, "cpus %d\nload %.2f %.2f %.2f\nmem_total_kib %d\nmem_available_kib %d\n",
		s.CPUs, l1, l1*0.9, l1*0.8, total, avail)
}

// answers caches a host's rendered nvidia-smi and ps output per field list.
type answers struct {
	mu   sync.Mutex
	gpus map[string]rendered
	apps map[string]appsAnswer
}

type appsAnswer struct {
	apps, ps rendered
	hasPS    bool
	attrib   attribAnswer // with hasPS: the sections after ps
}

const maxCached = 32

func cacheable(fields []string) bool {
	for _, f := range fields {
		if f == "timestamp" {
			return false
		}
	}
	return true
}

func (h *host) gpusAnswer(fields []string) rendered {
	if !cacheable(fields) {
		return h.renderGPUs(fields)
	}
	key := strings.Join(fields, ",")
	h.cache.mu.Lock()
	r, ok := h.cache.gpus[key]
	h.cache.mu.Unlock()
	if ok {
		return r
	}
	r = h.renderGPUs(fields)
	h.cache.mu.Lock()
	if h.cache.gpus == nil {
		h.cache.gpus = map[string]rendered{}
	}
	if len(h.cache.gpus) < maxCached {
		h.cache.gpus[key] = r
	}
	h.cache.mu.Unlock()
	return r
}

func (h *host) appsAnswer(fields []string) appsAnswer {
	build := func() appsAnswer {
		var a appsAnswer
		a.apps = h.renderApps(fields)
		a.ps, a.hasPS = h.renderPS(a.apps.body)
		if a.hasPS {
			a.attrib = h.renderAttrib(a.apps.body)
		}
		return a
	}
	if !cacheable(fields) {
		return build()
	}
	key := strings.Join(fields, ",")
	h.cache.mu.Lock()
	a, ok := h.cache.apps[key]
	h.cache.mu.Unlock()
	if ok {
		return a
	}
	a = build()
	h.cache.mu.Lock()
	if h.cache.apps == nil {
		h.cache.apps = map[string]appsAnswer{}
	}
	if len(h.cache.apps) < maxCached {
		h.cache.apps[key] = a
	}
	h.cache.mu.Unlock()
	return a
}
