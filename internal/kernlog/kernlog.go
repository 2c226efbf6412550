// Package kernlog reads the XID lines of a GPU host's kernel log, as the
// probe's kernel_log section carries them (probe.SectionKernelLog): a first
// line "source journal" (`journalctl -k -o short-unix`) or "source dmesg"
// (`dmesg -k`, then a line "uptime SECONDS"), then the lines that hold
// "NVRM: Xid", the newest last.
//
// The NVIDIA driver logs one line per XID, e.g.
//
//	NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
//
// (older drivers: "NVRM: Xid (0000:03:00): 13, 0003 00000000 …"). Only a line
// whose message starts with "NVRM: Xid" counts: a kernel message that merely
// quotes it later on the line (a module echoing a user's text) does not.
// Users cannot write kernel messages: `journalctl -k` shows only
// _TRANSPORT=kernel, so what `logger` or `systemd-cat` write (user messages,
// even tagged "kernel") never reaches this section, and a journal line whose
// identifier is not plain "kernel:" is refused all the same; dmesg reads the
// kernel's own ring buffer, which only root can write to (/dev/kmsg).
//
// The one part of an XID line a user chooses is the process name after
// "name=" (at most 15 bytes, printed by the kernel with control characters
// escaped): it comes after the bus id and the code, so it cannot change
// which GPU or which XID a line reports; a name holding ", " can only shift
// text into Detail, which is printable, bounded and shown as text.
package kernlog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/hosttext"
)

// Bounds on what one host's kernel log can make fetch hold.
const (
	maxEvents = 256  // distinct (GPU, XID) pairs kept; the rest are counted in Skipped
	maxLine   = 1024 // bytes of a line read; the rest of a longer line is ignored
	maxDetail = 200  // bytes kept of an event's text
	maxCode   = 9999 // XIDs run to about 170 today
)

// The sources a section names, as load_data.csv's kernel_log writes them.
const (
	SourceJournal = "journal"
	SourceDmesg   = "dmesg"
)

// Event is one GPU's XID. Repeats of the same XID on the same GPU are one
// Event: the newest one's text and age.
type Event struct {
	BusID  string // canonical, see CanonicalBusID: "0000:3b:00.0"
	Code   int    // the XID, e.g. 79
	Detail string // the driver's words after the code, e.g. "GPU has fallen off the bus"
	// Age is how many seconds before the log was read the newest line of
	// this event was logged, where known: dmesg's boot-relative stamps and
	// its uptime line place each line. The journal's lines were chosen by
	// `journalctl --since`, so there AgeKnown is false.
	Age      float64
	AgeKnown bool
}

// Report is what Parse found.
type Report struct {
	Source string // SourceJournal or SourceDmesg
	Events []Event
	// Repeated counts the lines that repeated an XID already in Events.
	Repeated int
	// Skipped counts the lines not used: not an XID line, unreadable, or
	// past maxEvents.
	Skipped int
}

// Parse reads a kernel_log section's body (the section's exit status was 0).
// It fails only when the body does not start as the probe writes it.
func Parse(body []byte) (Report, error) {
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	rep, lines, uptime, err := parseHead(lines)
	if err != nil {
		return Report{}, err
	}
	index := map[eventKey]int{}
	for _, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		ev, ok := parseLine(rep.Source, line, uptime)
		if !ok {
			rep.Skipped++
			continue
		}
		key := eventKey{ev.BusID, ev.Code}
		if i, seen := index[key]; seen {
			rep.Events[i] = ev // lines come oldest first: keep the newest
			rep.Repeated++
			continue
		}
		if len(rep.Events) == maxEvents {
			rep.Skipped++
			continue
		}
		index[key] = len(rep.Events)
		rep.Events = append(rep.Events, ev)
	}
	return rep, nil
}

type eventKey struct {
	bus  string
	code int
}

// parseHead reads "source journal", or "source dmesg" and "uptime SECONDS",
// and returns the lines after them.
func parseHead(lines []string) (rep Report, rest []string, uptime float64, err error) {
	first := strings.TrimSpace(strings.TrimSuffix(lines[0], "\r"))
	switch first {
	case "source " + SourceJournal:
		return Report{Source: SourceJournal}, lines[1:], 0, nil
	case "source " + SourceDmesg:
		if len(lines) < 2 {
			return rep, nil, 0, errors.New(`kernel_log section: "source dmesg" without its "uptime" line`)
		}
		second := strings.TrimSpace(strings.TrimSuffix(lines[1], "\r"))
		up, hasPrefix := strings.CutPrefix(second, "uptime ")
		uptime, ok := parseSeconds(up)
		if !hasPrefix || !ok {
			return rep, nil, 0, fmt.Errorf("kernel_log section: %q is not an uptime line", hosttext.Clip(hosttext.Printable(second), 80))
		}
		return Report{Source: SourceDmesg}, lines[2:], uptime, nil
	}
	return rep, nil, 0, fmt.Errorf("kernel_log section: %q names no source (journal or dmesg)", hosttext.Clip(hosttext.Printable(first), 80))
}

// parseLine reads one journal or dmesg line holding an XID.
func parseLine(source, line string, uptime float64) (Event, bool) {
	if len(line) > maxLine {
		line = line[:maxLine]
	}
	var (
		msg   string
		stamp float64
		ok    bool
	)
	if source == SourceJournal {
		msg, ok = journalMessage(line)
	} else {
		msg, stamp, ok = dmesgMessage(line)
	}
	if !ok {
		return Event{}, false
	}
	ev, ok := parseXID(msg)
	if !ok {
		return Event{}, false
	}
	if source == SourceDmesg {
		ev.Age, ev.AgeKnown = max(uptime-stamp, 0), true
	}
	return ev, true
}

// journalMessage cuts `1732600000.123456 gpu01 kernel: MESSAGE` to MESSAGE.
func journalMessage(line string) (string, bool) {
	stamp, rest, ok := strings.Cut(line, " ")
	if !ok {
		return "", false
	}
	if _, ok := parseSeconds(stamp); !ok {
		return "", false
	}
	host, rest, ok := strings.Cut(rest, " ")
	if !ok || host == "" {
		return "", false
	}
	return strings.CutPrefix(rest, "kernel: ")
}

// dmesgMessage cuts `[12345.678901] MESSAGE` to MESSAGE and its stamp. A
// kernel built with CONFIG_PRINTK_CALLER adds the caller after the stamp:
// `[12345.678901][ T1234] MESSAGE`.
func dmesgMessage(line string) (string, float64, bool) {
	inner, rest, ok := cutBracket(line)
	if !ok {
		return "", 0, false
	}
	stamp, ok := parseSeconds(strings.TrimSpace(inner))
	if !ok {
		return "", 0, false
	}
	if caller, after, ok := cutBracket(rest); ok && isCaller(strings.TrimSpace(caller)) {
		rest = after
	}
	msg, ok := strings.CutPrefix(rest, " ")
	return msg, stamp, ok
}

// cutBracket splits "[inner]rest".
func cutBracket(s string) (inner, rest string, ok bool) {
	if !strings.HasPrefix(s, "[") {
		return "", "", false
	}
	return strings.Cut(s[1:], "]")
}

// isCaller reads printk's caller id: "T1234" (a task) or "C3" (a CPU).
func isCaller(s string) bool {
	if len(s) < 2 || (s[0] != 'T' && s[0] != 'C') {
		return false
	}
	_, err := strconv.ParseUint(s[1:], 10, 32)
	return err == nil
}

// parseSeconds reads a non-negative decimal stamp such as "12345.678901".
func parseSeconds(s string) (float64, bool) {
	if s == "" || strings.Trim(s, "0123456789.") != "" || strings.Count(s, ".") > 1 || s[0] == '.' {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

const xidPrefix = "NVRM: Xid ("

// parseXID reads "NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…, DETAIL".
func parseXID(msg string) (Event, bool) {
	rest, ok := strings.CutPrefix(msg, xidPrefix)
	if !ok {
		return Event{}, false
	}
	addr, rest, ok := strings.Cut(rest, "): ")
	if !ok {
		// "NVRM: Xid (0000:01:00): 16, " may end the line after the code's comma.
		addr, rest, ok = strings.Cut(rest, "):")
		if !ok {
			return Event{}, false
		}
		rest = strings.TrimLeft(rest, " ")
	}
	bus, ok := CanonicalBusID(strings.TrimPrefix(addr, "PCI:"))
	if !ok {
		return Event{}, false
	}
	codeText, detail, _ := strings.Cut(rest, ",")
	code, err := strconv.Atoi(strings.TrimSpace(codeText))
	if err != nil || code < 1 || code > maxCode || strings.TrimSpace(codeText) != codeText {
		return Event{}, false
	}
	return Event{BusID: bus, Code: code, Detail: cleanDetail(detail)}, true
}

// cleanDetail drops the process fields newer drivers print first
// ("pid=1234, name=python, " or "pid='<unknown>', name=<unknown>, ") and
// makes the rest one short printable clause.
func cleanDetail(s string) string {
	s = strings.TrimSpace(s)
	for _, field := range []string{"pid=", "name="} {
		if strings.HasPrefix(s, field) {
			_, after, found := strings.Cut(s, ", ")
			if !found {
				after = ""
			}
			s = strings.TrimSpace(after)
		}
	}
	s = strings.TrimSuffix(s, ".")
	return hosttext.Clip(hosttext.Printable(s), maxDetail)
}

// CanonicalBusID writes a PCI address the way the kernel names the device,
// "0000:3b:00.0", from the forms GPU tools print: nvidia-smi's
// "00000000:3B:00.0", /proc/driver/nvidia/gpus' "0000:3b:00.0" and the XID
// line's "0000:3b:00" (no function: function 0, the GPU's own).
func CanonicalBusID(s string) (string, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return "", false
	}
	devFn := parts[2]
	fn := "0"
	if d, f, ok := strings.Cut(devFn, "."); ok {
		devFn, fn = d, f
	}
	domain, ok1 := hexField(parts[0], 4, 8, 0xffffffff) // every form prints 4 or more: a "0:18:00" is not a bus id
	bus, ok2 := hexField(parts[1], 2, 2, 0xff)
	dev, ok3 := hexField(devFn, 2, 2, 0x1f)
	function, ok4 := hexField(fn, 1, 1, 7)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return "", false
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, function), true
}

// hexField reads minLen to maxLen hex digits worth at most limit.
func hexField(s string, minLen, maxLen int, limit uint64) (uint64, bool) {
	if len(s) < minLen || len(s) > maxLen {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || v > limit {
		return 0, false
	}
	return v, true
}
