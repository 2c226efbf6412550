// Package nvsmi reads what `nvidia-smi --query-gpu=… --format=csv` and
// `--query-compute-apps=…` print, and tells a usable answer from a failed run.
//
// nvidia-smi's CSV is loose: columns come in the order asked for, headers
// carry units with --format=csv (`memory.used [MiB]`) and values do too
// (`81559 MiB`), unreadable values are tokens such as `[N/A]` or `ERR!`,
// process names may hold the separator, and with 2>&1 a message about one
// broken GPU can land between two good rows. So columns are found by header
// name, a missing reading stays missing (never 0), and one bad line costs that
// line only.
package nvsmi

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// Number is a reading that may be missing. Missing is never 0.
type Number struct {
	Value float64
	Valid bool
}

// GPU is one row of --query-gpu. Index comes from `index`, the only column
// that must be there; the others are zero values or missing Numbers when
// their column was not asked for.
type GPU struct {
	Index             int
	UUID, Name, BusID string

	UtilGPU, UtilMem, MemUsedMiB, MemTotalMiB, TempC, PowerW, PowerLimitW, FanPct Number

	// The health readings (HealthFields), missing where not asked for, not
	// supported ("[N/A]") or unreadable.
	PState         Number // 0 for P0 to 15 for P15
	ECCMode        string // "enabled", "disabled" or ""
	ECCUncorrected Number // uncorrectable ECC errors since the driver loaded

	// Yes/No readings: pages or rows waiting for a reset to be retired or
	// remapped, and a remap that failed (the GPU ran out of spare rows).
	RetiredPagesPending, RemapPending, RemapFailure Flag

	// ClockEventMask is clocks_event_reasons.active (clocks_throttle_reasons
	// on older drivers); health.ClockEvents names its bits.
	ClockEventMask  uint64
	ClockEventValid bool

	// RecoveryAction is gpu_recovery_action: "none", what the driver asks
	// for ("reset", "reboot", "drain_p2p", ...; "unknown" for a word this
	// code does not know), or "" where not given.
	RecoveryAction string
}

// Process is one row of --query-compute-apps: one process on one GPU. A
// process using several GPUs appears once per GPU.
type Process struct {
	PID     int
	GPUUUID string
	// Name is process_name, where the query asked for it. nvidia-smi prints
	// it unquoted, so whoever names a process can split its row and add
	// forged ones: gpumon's probe does not ask for it (probe.AppFields) and
	// takes names from ps.
	Name       string
	UsedMemMiB Number
}

// A GPUFault is a GPU that nvidia-smi named but could not read, e.g.
// "Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU".
type GPUFault struct {
	BusID   string // as nvidia-smi printed it, e.g. "0000:05:00.0"
	Message string // in plain words, e.g. "GPU is lost; reboot the system to recover this GPU"
}

// A LineError is one line that could not be used; the rest of the output
// still counts.
type LineError struct {
	Line   int    // 1-based, in the output given to the parser
	Text   string // the line, cut to a readable length
	Reason string
}

func (e LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Bounds on what one host's nvidia-smi output can make fetch hold. The
// biggest machines have 16 GPUs (a few more counting unreachable ones); a
// GPU runs at most a few hundred processes. Past these, the answer is not a
// GPU host's, and the host is reported instead of believed.
const (
	MaxGPUs      = 64   // GPUs and unreachable GPUs in --query-gpu
	MaxProcesses = 4096 // rows of --query-compute-apps
	MaxSkipped   = 20   // unusable lines kept to be named; the rest are counted
	MaxCell      = 256  // bytes kept of a text field (name, uuid, bus id)
)

// GPUReport is what ParseGPUs found.
type GPUReport struct {
	GPUs    []GPU
	Faults  []GPUFault
	Skipped []LineError // the first MaxSkipped, in line order
	// MoreSkipped counts the unusable lines past the first MaxSkipped.
	MoreSkipped int
}

// ProcessReport is what ParseProcesses found. Faults holds the same
// "GPU is lost" messages ParseGPUs reports, when nvidia-smi printed them
// among the process rows too.
type ProcessReport struct {
	Processes   []Process
	Faults      []GPUFault
	Skipped     []LineError // the first MaxSkipped, in line order
	MoreSkipped int
}

// HostError is a failure that makes the whole host's GPU data unusable.
type HostError struct {
	Status  hoststatus.Status // Driver, Timeout or Error
	Message string
}

func (e *HostError) Error() string { return e.Message }

// Column names, with the aliases nvidia-smi accepts for them
// (`nvidia-smi --help-query-gpu`, `--help-query-compute-apps`). The first
// name found in the header wins.
var (
	colIndex    = []string{"index"}
	colUUID     = []string{"uuid", "gpu_uuid"}
	colName     = []string{"name", "gpu_name"}
	colBusID    = []string{"pci.bus_id", "gpu_bus_id"}
	colUtilGPU  = []string{"utilization.gpu"}
	colUtilMem  = []string{"utilization.memory"}
	colMemUsed  = []string{"memory.used"}
	colMemTotal = []string{"memory.total"}
	colTemp     = []string{"temperature.gpu"}
	colPower    = []string{"power.draw", "power.draw.instant", "gpu.power.draw.instant"}
	colPowerLim = []string{"power.limit", "gpu.power.requested_limit"}
	colFan      = []string{"fan.speed"}
	colPID      = []string{"pid"}
	colGPUUUID  = []string{"gpu_uuid", "uuid"}
	colProcName = []string{"process_name", "name"}
	colProcUsed = []string{"used_gpu_memory", "used_memory"}

	// The health columns (HealthFields). The clock reasons under their new
	// name and their old one (all driver 465 knows); 590+ knows both.
	colPState         = []string{"pstate"}
	colECCMode        = []string{"ecc.mode.current"}
	colECCUncorrected = []string{"ecc.errors.uncorrected.volatile.total"}
	colRetiredPending = []string{"retired_pages.pending"}
	colRemapPending   = []string{"remapped_rows.pending"}
	colRemapFailure   = []string{"remapped_rows.failure"}
	colClockEvents    = []string{"clocks_event_reasons.active", "clocks_throttle_reasons.active"}
	colRecovery       = []string{"gpu_recovery_action"}
	maxLineText       = 200
)

// ParseGPUs reads the output of `nvidia-smi --query-gpu=… --format=csv[,nounits]`
// (stderr included). Only `index` is required; the other columns of GPU are
// filled when present. It fails only when no header with `index` is found.
func ParseGPUs(out []byte) (GPUReport, error) {
	var rep GPUReport
	t, err := parseTable(out, "index", colName, MaxGPUs, "GPUs")
	if err != nil {
		return rep, err
	}
	rep.Faults = t.faults
	idx := t.col(colIndex)
	uuid, name, bus := t.col(colUUID), t.col(colName), t.col(colBusID)
	utilG, utilM := t.col(colUtilGPU), t.col(colUtilMem)
	used, total := t.col(colMemUsed), t.col(colMemTotal)
	temp, pw, pwl, fan := t.col(colTemp), t.col(colPower), t.col(colPowerLim), t.col(colFan)
	hc := t.healthColumns()
	for _, r := range t.rows {
		i, ok := parseInt(r.fields[idx])
		if !ok {
			t.skip(r.errorf("index %q is not a GPU index", hosttext.Clip(r.fields[idx], 40)))
			continue
		}
		rep.GPUs = append(rep.GPUs, GPU{
			Index:       i,
			UUID:        r.str(uuid),
			Name:        r.str(name),
			BusID:       r.str(bus),
			UtilGPU:     r.num(utilG),
			UtilMem:     r.num(utilM),
			MemUsedMiB:  r.num(used),
			MemTotalMiB: r.num(total),
			TempC:       r.num(temp),
			PowerW:      r.num(pw),
			PowerLimitW: r.num(pwl),
			FanPct:      r.num(fan),
		})
		r.readHealth(hc, &rep.GPUs[len(rep.GPUs)-1])
	}
	rep.Skipped, rep.MoreSkipped = t.skippedInOrder(), t.moreSkipped
	return rep, nil
}

// ParseProcesses reads the output of
// `nvidia-smi --query-compute-apps=… --format=csv[,nounits]` (stderr
// included). Only `pid` is required. A header with no rows is a GPU with no
// process, not an error.
func ParseProcesses(out []byte) (ProcessReport, error) {
	var rep ProcessReport
	t, err := parseTable(out, "pid", colProcName, MaxProcesses, "processes")
	if err != nil {
		return rep, err
	}
	rep.Faults = t.faults
	pid := t.col(colPID)
	uuid, name, used := t.col(colGPUUUID), t.col(colProcName), t.col(colProcUsed)
	for _, r := range t.rows {
		p, ok := parseInt(r.fields[pid])
		if !ok {
			t.skip(r.errorf("pid %q is not a process id", hosttext.Clip(r.fields[pid], 40)))
			continue
		}
		rep.Processes = append(rep.Processes, Process{
			PID:        p,
			GPUUUID:    r.str(uuid),
			Name:       r.str(name),
			UsedMemMiB: r.num(used),
		})
	}
	rep.Skipped, rep.MoreSkipped = t.skippedInOrder(), t.moreSkipped
	return rep, nil
}

// table is a CSV output split into header and rows of exactly len(header)
// fields, trimmed.
type table struct {
	header      map[string]int // column name without unit -> position
	rows        []row
	faults      []GPUFault
	skipped     []LineError // at most MaxSkipped
	moreSkipped int
}

// skip keeps a line that could not be used, or counts it once MaxSkipped
// are kept: a host printing a million bad lines costs a counter.
func (t *table) skip(le LineError) {
	if len(t.skipped) < MaxSkipped {
		t.skipped = append(t.skipped, le)
		return
	}
	t.moreSkipped++
}

// skippedInOrder is the kept lines in line order, which is how people read
// them (the parser skips some lines as it splits them and others later).
func (t *table) skippedInOrder() []LineError {
	sort.SliceStable(t.skipped, func(i, j int) bool { return t.skipped[i].Line < t.skipped[j].Line })
	return t.skipped
}

type row struct {
	line   int
	text   string
	fields []string
}

// col returns the position of the first of names in the header, or -1.
func (t *table) col(names []string) int {
	for _, n := range names {
		if i, ok := t.header[n]; ok {
			return i
		}
	}
	return -1
}

// str is a text field made safe to keep: printable (nvidia-smi prints a GPU
// name as the driver has it, and a host can print anything) and at most
// MaxCell bytes.
func (r row) str(i int) string {
	if i < 0 {
		return ""
	}
	return hosttext.Clip(hosttext.Printable(r.fields[i]), MaxCell)
}

func (r row) num(i int) Number {
	if i < 0 {
		return Number{}
	}
	return ParseNumber(r.fields[i])
}

func (r row) errorf(format string, args ...any) LineError {
	return LineError{Line: r.line, Text: hosttext.Clip(hosttext.Printable(r.text), maxLineText), Reason: fmt.Sprintf(format, args...)}
}

// parseTable finds the header (the first line that looks like one and names
// the required column), then splits every later line. Lines that cannot be
// rows (messages, garbage, short rows) are reported, not fatal, because
// nvidia-smi prints its per-GPU errors on the same stream as the rows.
// When a row has more fields than the header, the surplus came from commas
// inside the free-text column (a process or GPU name), so it goes back there.
// More than maxRows rows, or more than maxRows fault messages, is not an
// answer to believe: the host fails, naming what it listed too much of.
func parseTable(out []byte, required string, freeText []string, maxRows int, what string) (*table, error) {
	t := &table{}
	lines := splitLines(out)
	var (
		sep     string
		width   int
		freeCol = -1
		found   bool
	)
	for n, line := range lines {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			continue
		}
		if f, ok := parseFault(trimmed); ok {
			if len(t.faults) == maxRows {
				return nil, tooMany(maxRows, "unreachable GPUs")
			}
			t.faults = append(t.faults, f)
			continue
		}
		le := LineError{Line: n + 1, Text: hosttext.Clip(hosttext.Printable(trimmed), maxLineText)}
		if !found {
			if names, s, ok := parseHeader(trimmed); ok && contains(names, required) {
				found, sep, width = true, s, len(names)
				t.header = make(map[string]int, len(names))
				for i, name := range names {
					if _, dup := t.header[name]; !dup {
						t.header[name] = i
					}
				}
				freeCol = t.col(freeText)
				continue
			}
			le.Reason = "not a CSV header or row (before the header)"
			t.skip(le)
			continue
		}
		// Split the line as printed: trimming it first would eat the space
		// of an empty last field ("ERR!, ").
		fields := strings.Split(line, sep)
		if len(fields) > width && freeCol >= 0 {
			extra := len(fields) - width
			merged := strings.Join(fields[freeCol:freeCol+extra+1], sep)
			fields = append(fields[:freeCol+1], fields[freeCol+extra+1:]...)
			fields[freeCol] = merged
		}
		if len(fields) != width {
			switch {
			case len(fields) == 1:
				le.Reason = "not a CSV row"
			default:
				le.Reason = fmt.Sprintf("%d fields where the header has %d", len(fields), width)
			}
			t.skip(le)
			continue
		}
		if len(t.rows) == maxRows {
			return nil, tooMany(maxRows, what)
		}
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		t.rows = append(t.rows, row{line: n + 1, text: trimmed, fields: fields})
	}
	if !found {
		msg := fmt.Sprintf("no CSV header with a %q column in the nvidia-smi output", required)
		if first := hosttext.FirstLine(string(out)); first != "" {
			msg += ": " + first
		}
		return nil, &HostError{Status: hoststatus.Error, Message: msg}
	}
	return t, nil
}

func tooMany(max int, what string) *HostError {
	return &HostError{Status: hoststatus.Error,
		Message: fmt.Sprintf("nvidia-smi listed more than %d %s, more than fetch believes one host has", max, what)}
}

// splitLines splits on \n and drops a \r before it (Windows hosts).
func splitLines(out []byte) []string {
	s := string(out)
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

// parseHeader reads a header line, returning the column names with their
// units removed and the separator to split rows with. nvidia-smi joins with
// ", "; splitting on exactly that keeps a comma inside a name ("a,b") whole.
// A bare "," is accepted for hand-made or re-encoded input.
func parseHeader(line string) (names []string, sep string, ok bool) {
	sep = ", "
	if !strings.Contains(line, sep) {
		sep = ","
	}
	parts := strings.Split(line, sep)
	names = make([]string, len(parts))
	for i, p := range parts {
		name, ok := headerName(strings.TrimSpace(p))
		if !ok {
			return nil, "", false
		}
		names[i] = name
	}
	return names, sep, true
}

// headerName turns `memory.used [MiB]` into `memory.used`. Field names are
// ASCII letters, digits, '.' and '_', starting with a lower-case letter;
// anything else (a message, a data row) is not a header.
func headerName(s string) (string, bool) {
	if i := strings.IndexByte(s, '['); i >= 0 {
		if !strings.HasSuffix(s, "]") {
			return "", false
		}
		s = strings.TrimSpace(s[:i])
	}
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_') {
			return "", false
		}
	}
	return s, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// missingTokens are what nvidia-smi prints instead of a value it cannot read.
// Any other bracketed text is treated the same way (see ParseNumber).
var missingTokens = map[string]bool{
	"":                           true,
	"ERR!":                       true,
	"N/A":                        true,
	"[N/A]":                      true,
	"[Not Supported]":            true,
	"[Unknown Error]":            true,
	"[Insufficient Permissions]": true,
	"[Requested functionality has been deprecated]": true,
	"[Function Not Found]":                          true,
}

// ParseNumber reads one field such as "81559 MiB", "38 %", "71.15 W" or
// "42". Tokens like "[N/A]" or "ERR!", and anything that is not a plain
// decimal number with an optional %/MiB/W/C unit, are missing: a reading we
// cannot read must never turn into 0.
func ParseNumber(field string) Number {
	s := strings.TrimSpace(field)
	if missingTokens[s] || strings.HasPrefix(s, "[") {
		return Number{}
	}
	s = trimUnit(s)
	if !isDecimal(s) {
		return Number{}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return Number{}
	}
	return Number{Value: v, Valid: true}
}

// units nvidia-smi appends to the values fetch asks for (--format=csv).
var units = []string{"MiB", "%", "W", "C"}

func trimUnit(s string) string {
	for _, u := range units {
		if strings.HasSuffix(s, u) {
			return strings.TrimSpace(strings.TrimSuffix(s, u))
		}
	}
	return s
}

// isDecimal accepts [-+]digits[.digits]: what nvidia-smi prints. It keeps
// out what strconv.ParseFloat would also take (Inf, NaN, hex, 1e9, "_").
func isDecimal(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	digits, dot := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot && digits > 0 && i < len(s)-1:
			dot = true
		default:
			return false
		}
	}
	return digits > 0
}

// parseInt reads an index or pid: a non-negative decimal integer.
func parseInt(s string) (int, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

const faultPrefix = "unable to determine the device handle for gpu"

// parseFault reads nvidia-smi's message about one GPU it cannot reach:
// "Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU".
// Some drivers print no space before the bus id ("for GPU0000:05:00.0").
func parseFault(line string) (GPUFault, bool) {
	if len(line) < len(faultPrefix) || !strings.EqualFold(line[:len(faultPrefix)], faultPrefix) {
		return GPUFault{}, false
	}
	rest := strings.TrimSpace(line[len(faultPrefix):])
	// The bus id has colons itself ("0000:05:00.0"); the message starts after ": ".
	bus, msg, _ := strings.Cut(rest, ": ")
	bus = strings.TrimSuffix(strings.TrimSpace(bus), ":")
	return GPUFault{BusID: hosttext.Clip(hosttext.Printable(bus), 64), Message: plainMessage(msg)}, true
}

// plainMessage turns nvidia-smi's sentences into one clause in the style of
// the rest of gpumon's messages: "GPU is lost.  Reboot the system to recover
// this GPU" becomes "GPU is lost; reboot the system to recover this GPU".
func plainMessage(msg string) string {
	msg = hosttext.Printable(strings.TrimSpace(msg))
	if msg == "" {
		return "GPU cannot be reached (nvidia-smi gave no reason)"
	}
	var parts []string
	// Split on a period that ends a sentence only: "590.48" stays whole.
	for _, s := range strings.Split(msg, ". ") {
		s = strings.TrimSuffix(strings.TrimSpace(s), ".")
		if s == "" {
			continue
		}
		parts = append(parts, lowerWords(s))
	}
	if len(parts) == 0 {
		return "GPU cannot be reached (nvidia-smi gave no reason)"
	}
	return hosttext.Clip(strings.Join(parts, "; "), maxLineText)
}

// lowerWords lower-cases capitalised words ("Reboot", "Unknown Error") and
// keeps acronyms and names written in capitals (GPU, NVIDIA, NVML).
func lowerWords(s string) string {
	words := strings.Split(s, " ")
	for i, w := range words {
		upper := 0
		for _, r := range w {
			if unicode.IsUpper(r) {
				upper++
			}
		}
		if upper == 1 {
			r, n := utf8.DecodeRuneInString(w)
			if unicode.IsUpper(r) {
				words[i] = string(unicode.ToLower(r)) + w[n:]
			}
		}
	}
	return strings.Join(words, " ")
}
