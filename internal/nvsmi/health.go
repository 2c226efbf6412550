package nvsmi

import (
	"strconv"
	"strings"
)

// HealthFields are the --query-gpu fields the probe asks after its usual
// ones, in this order. A driver refuses the whole query over one field it does
// not know (driver 465 has no remapped_rows.* and no clocks_event_reasons.*),
// so the probe drops the fields a host's --help-query-gpu lacks (KnownFields).
// The two clock fields are one reading under its new and its old name: where
// a driver knows both (590+ lists them as aliases), the probe keeps only the
// first, and ParseGPUs reads whichever came back.
var HealthFields = []string{
	"pstate",
	"ecc.mode.current",
	"ecc.errors.uncorrected.volatile.total",
	"retired_pages.pending",
	"remapped_rows.pending",
	"remapped_rows.failure",
	"clocks_event_reasons.active",
	"clocks_throttle_reasons.active",
	// The driver's own verdict after an uncorrectable error (NVML's
	// recovery action flag, drivers of the 550s on): set until the GPU is
	// reset or the node rebooted, so it is the "since the last reset" that
	// an XID in the kernel log cannot say.
	"gpu_recovery_action",
}

// Flag is a Yes/No reading that may be missing. Missing is never No.
type Flag struct {
	Value, Valid bool
}

// maxExact is the largest count a float64 holds exactly (2^53). A counter
// above it is no count a GPU reached: drivers print 2^64-1 or -1 for
// "unknown", and those must stay missing, never become a condition.
const maxExact = 1 << 53

// parsePState reads "P0" to "P15". NVML's "unknown" pstate (32) and anything
// else are missing.
func parsePState(field string) Number {
	s := strings.TrimSpace(field)
	if len(s) < 2 || len(s) > 3 || s[0] != 'P' {
		return Number{}
	}
	n, ok := parseInt(s[1:])
	if !ok || n > 15 {
		return Number{}
	}
	return Number{Value: float64(n), Valid: true}
}

// parseECCMode reads "Enabled" and "Disabled" as the CSV writes them,
// "enabled" and "disabled"; "[N/A]" (a GPU without ECC) and anything else
// are "".
func parseECCMode(field string) string {
	switch s := strings.TrimSpace(field); {
	case strings.EqualFold(s, "Enabled"):
		return "enabled"
	case strings.EqualFold(s, "Disabled"):
		return "disabled"
	}
	return ""
}

// recoveryActions are the words nvidia-smi prints for NVML's recovery
// actions (nvmlDeviceGpuRecoveryAction_t), lower case, by what
// RecoveryAction keeps.
var recoveryActions = map[string]string{
	"none":                "none",
	"reset":               "reset",
	"gpu reset":           "reset",
	"reboot":              "reboot",
	"node reboot":         "reboot",
	"drain p2p":           "drain_p2p",
	"drain and reset":     "drain_and_reset",
	"drain p2p and reset": "drain_and_reset",
	"recover imex domain": "recover_imex_domain",
	"bus reset":           "bus_reset",
	"system reboot":       "system_reboot",
}

// parseRecoveryAction reads gpu_recovery_action: "None" is "none", a known
// action its name (recoveryActions); "[N/A]" is "". Any other word is an
// action this code does not know yet, kept as "unknown": a GPU the driver
// wants recovered must not read as well.
func parseRecoveryAction(field string) string {
	s := strings.ToLower(strings.Join(strings.Fields(field), " "))
	if a, ok := recoveryActions[s]; ok {
		return a
	}
	if s == "" || missingTokens[strings.TrimSpace(field)] || strings.HasPrefix(s, "[") {
		return ""
	}
	return "unknown"
}

// parseCount reads an error counter: decimal digits, from 0 to 2^53, read
// as an integer so that 2^53+1 is not rounded down into range.
func parseCount(field string) Number {
	s := strings.TrimSpace(field)
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return Number{}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > maxExact {
		return Number{}
	}
	return Number{Value: float64(v), Valid: true}
}

// parseFlag reads nvidia-smi's "Yes" and "No" (retired_pages.pending,
// remapped_rows.pending and .failure print these on every capture at hand;
// GPUs without the feature print "[N/A]").
func parseFlag(field string) Flag {
	switch s := strings.TrimSpace(field); {
	case strings.EqualFold(s, "Yes"):
		return Flag{Value: true, Valid: true}
	case strings.EqualFold(s, "No"):
		return Flag{Valid: true}
	}
	return Flag{}
}

// parseMask reads a bitmask as nvidia-smi prints it, "0x0000000000000004".
// A mask above 2^53 is missing: no defined reason lives up there, all ones is
// what a failed read looks like, and old NVML's "unknown reason" bit 63 says
// nothing a policy can act on.
func parseMask(field string) (uint64, bool) {
	s := strings.TrimSpace(field)
	if len(s) < 3 || len(s) > 18 || (s[:2] != "0x" && s[:2] != "0X") {
		return 0, false
	}
	v, err := strconv.ParseUint(s[2:], 16, 64)
	if err != nil || v > maxExact {
		return 0, false
	}
	return v, true
}

// KnownFields lists the field names, aliases included, that
// `nvidia-smi --help-query-gpu` prints: lines such as `"name" or "gpu_name"`.
// Description lines that start with a quote (`"0: Default" means …`) are not
// field lists and are passed over.
func KnownFields(help []byte) map[string]bool {
	known := map[string]bool{}
	for _, line := range splitLines(help) {
		names, ok := fieldListLine(strings.TrimSpace(line))
		if !ok {
			continue
		}
		for _, n := range names {
			if len(known) == maxKnownFields {
				return known
			}
			known[n] = true
		}
	}
	return known
}

// maxKnownFields bounds KnownFields' map; driver 610 lists about 290 names.
const maxKnownFields = 4096

// fieldListLine reads `"a"` or `"a" or "b" …`, each name a header name.
func fieldListLine(line string) ([]string, bool) {
	if !strings.HasPrefix(line, `"`) || !strings.HasSuffix(line, `"`) || len(line) < 3 {
		return nil, false
	}
	parts := strings.Split(line[1:len(line)-1], `" or "`)
	for _, p := range parts {
		if name, ok := headerName(p); !ok || name != p {
			return nil, false
		}
	}
	return parts, true
}

// healthColumns are the positions of the health columns in one table, -1
// where not asked for.
type healthColumns struct {
	pstate, eccMode, eccUncorrected, retiredPending, remapPending, remapFailure, clockEvents, recovery int
}

func (t *table) healthColumns() healthColumns {
	return healthColumns{
		pstate:         t.col(colPState),
		eccMode:        t.col(colECCMode),
		eccUncorrected: t.col(colECCUncorrected),
		retiredPending: t.col(colRetiredPending),
		remapPending:   t.col(colRemapPending),
		remapFailure:   t.col(colRemapFailure),
		clockEvents:    t.col(colClockEvents),
		recovery:       t.col(colRecovery),
	}
}

// field is the cell at i, "" where the column is absent (which every
// health parser reads as missing).
func (r row) field(i int) string {
	if i < 0 {
		return ""
	}
	return r.fields[i]
}

func (r row) readHealth(c healthColumns, g *GPU) {
	g.PState = parsePState(r.field(c.pstate))
	g.ECCMode = parseECCMode(r.field(c.eccMode))
	g.ECCUncorrected = parseCount(r.field(c.eccUncorrected))
	g.RetiredPagesPending = parseFlag(r.field(c.retiredPending))
	g.RemapPending = parseFlag(r.field(c.remapPending))
	g.RemapFailure = parseFlag(r.field(c.remapFailure))
	g.ClockEventMask, g.ClockEventValid = parseMask(r.field(c.clockEvents))
	g.RecoveryAction = parseRecoveryAction(r.field(c.recovery))
}
