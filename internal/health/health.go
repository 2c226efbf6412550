// Package health decides what a GPU's health readings mean: whether it is
// failed (offered to nobody), degraded (still free or busy, with a visible
// warning) or fine, and why. fetch only observes (load_data.csv's health
// columns); the decision is render's, by the policy in config.ini's
// [health], so that a sysadmin can read and change it. Assess is a pure
// function of the readings and the policy.
//
// The defaults follow NVIDIA's own guidance (the XID catalogue and the GPU
// memory error management guide): a GPU that is lost, whose row remapping
// failed, or that logged an XID whose resolution is a reset or a reboot is
// failed; a GPU with a remap or page retirement pending ("reset when idle"),
// uncorrectable ECC errors since boot, hardware slowdown, a thermal or
// power brake, or an XID that asks to watch is degraded. XIDs that an
// application causes (13, 31, 43, 45) are no condition at all: they would
// flood a lab with false alarms.
package health

import (
	"fmt"
	"slices"
	"strings"
)

// States of a GPU's health. OK is the empty string, so a zero Health is
// a healthy GPU.
const (
	OK       = ""
	Degraded = "degraded"
	Failed   = "failed"
)

// Condition names: stable identifiers, used in config.ini, status.json,
// metrics.prom labels, notifications and the history. Their number is
// fixed, so a label made of them is bounded.
const (
	Lost                = "lost"                  // the driver lists the GPU, nvidia-smi cannot read it
	RemapFailure        = "remap_failure"         // a row remapping failed: the GPU needs service
	RemapPending        = "remap_pending"         // a row remapping waits for a reset
	RetiredPagesPending = "retired_pages_pending" // a page retirement waits for a reset
	ECCUncorrected      = "ecc_uncorrected"       // uncorrectable ECC errors since the driver loaded
	HWSlowdown          = "hw_slowdown"           // clocks held down by hardware
	HWThermal           = "hw_thermal"            // hardware thermal slowdown
	HWPowerBrake        = "hw_power_brake"        // an external power brake
	SWThermal           = "sw_thermal"            // the driver cuts clocks for heat
	XIDFatal            = "xid_fatal"             // an XID in the policy's failed list
	XIDWarning          = "xid_warning"           // an XID in the policy's degraded list
	RecoveryAction      = "recovery_action"       // the driver asks for a reset or a reboot (gpu_recovery_action)
)

// Conditions lists every condition, in the order a GPU's are shown.
var Conditions = []string{Lost, RecoveryAction, RemapFailure, XIDFatal, RemapPending, RetiredPagesPending,
	ECCUncorrected, XIDWarning, HWPowerBrake, HWThermal, HWSlowdown, SWThermal}

// ClockEventNames are the bits of nvidia-smi's clocks_event_reasons.active
// (clocks_throttle_reasons.active on older drivers), by the names the CSV's
// clock_events cell uses. Bits not listed are not named.
var ClockEventNames = []struct {
	Bit  uint64
	Name string
}{
	{0x1, "gpu_idle"},
	{0x2, "app_clocks"},
	{0x4, "sw_power_cap"},
	{0x8, HWSlowdown},
	{0x10, "sync_boost"},
	{0x20, SWThermal},
	{0x40, HWThermal},
	{0x80, HWPowerBrake},
	{0x100, "display_clocks"},
}

// ClockEvents names the bits of mask set, space-separated, "none" for 0.
func ClockEvents(mask uint64) string {
	if mask == 0 {
		return "none"
	}
	var names []string
	for _, e := range ClockEventNames {
		if mask&e.Bit != 0 {
			names = append(names, e.Name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}

// Policy is config.ini's [health]: which conditions make a GPU failed,
// which degraded (a condition in neither is ignored), and which XIDs are
// fatal or a warning.
type Policy struct {
	Failed      []string
	Degraded    []string
	FatalXIDs   []int
	WarningXIDs []int
}

// DefaultPolicy is the policy without a [health] section.
func DefaultPolicy() Policy {
	return Policy{
		Failed:   []string{Lost, RecoveryAction, RemapFailure, XIDFatal},
		Degraded: []string{RemapPending, RetiredPagesPending, ECCUncorrected, XIDWarning, HWPowerBrake, HWThermal, HWSlowdown, SWThermal},
		// 48 double-bit ECC, 61/62 internal micro-controller halt, 64 row
		// remap failure, 74 NVLink error, 79 fallen off the bus, 95
		// uncontained ECC, 119/120 GSP timeout or error, 140 unrecovered
		// ECC: NVIDIA's resolution for each is a reset or a reboot.
		FatalXIDs: []int{48, 61, 62, 64, 74, 79, 95, 119, 120, 140},
		// 63 row remap pending, 92 high single-bit ECC rate, 94 contained
		// ECC error: the GPU works; reset it when idle.
		WarningXIDs: []int{63, 92, 94},
	}
}

// Readings are one GPU's health readings, as load_data.csv holds them.
// A reading that is not Valid is not known: it is never a condition.
type Readings struct {
	// Lost is the reason when the GPU could not be read at all (the row's
	// gpu_error): "" for a GPU nvidia-smi read.
	Lost                string
	ECCUncorrected      float64
	ECCUncorrectedValid bool
	RetiredPagesPending bool
	RemapPending        bool
	RemapFailure        bool
	// ClockEvents is the clock_events cell: names from ClockEventNames.
	ClockEvents string
	// XIDs are the XID codes logged since the last poll.
	XIDs []int
	// RecoveryAction is the driver's gpu_recovery_action ("none", "reset",
	// "reboot", ...; "" not known): set after an uncorrectable error until
	// the GPU is reset or the node rebooted.
	RecoveryAction string
}

// A Finding is one condition a GPU is in, and how the policy ranks it.
type Finding struct {
	Condition string // one of Conditions
	Severity  string // Failed or Degraded
	Detail    string // plain words, e.g. "3 uncorrectable ECC errors since boot"
}

// Health is a GPU's assessed state and every condition behind it, in the
// order of Conditions.
type Health struct {
	State    string // OK, Degraded or Failed
	Findings []Finding
}

// Assess applies p to r.
func Assess(r Readings, p Policy) Health {
	var h Health
	add := func(cond, detail string) {
		sev := p.severity(cond)
		if sev == OK {
			return
		}
		h.Findings = append(h.Findings, Finding{Condition: cond, Severity: sev, Detail: detail})
		if sev == Failed || h.State == OK {
			h.State = sev
		}
	}
	if r.Lost != "" {
		// a GPU nvidia-smi cannot read has nothing to offer it by: it is
		// failed whatever the policy says (ReadConfig refuses lost as
		// degraded), so that its state and its health never disagree
		h.Findings = append(h.Findings, Finding{Condition: Lost, Severity: Failed, Detail: r.Lost})
		h.State = Failed
	}
	if a := r.RecoveryAction; a != "" && a != "none" {
		add(RecoveryAction, "the driver asks for recovery: "+recoveryWords(a))
	}
	if r.RemapFailure {
		add(RemapFailure, "a row remapping failed: the GPU needs service")
	}
	if fatal := xidsIn(r.XIDs, p.FatalXIDs); len(fatal) > 0 {
		add(XIDFatal, "XID "+joinInts(fatal)+" logged since the last poll")
	}
	if r.RemapPending {
		add(RemapPending, "a row remapping is pending: reset the GPU when idle")
	}
	if r.RetiredPagesPending {
		add(RetiredPagesPending, "a page retirement is pending: reset the GPU when idle")
	}
	if r.ECCUncorrectedValid && r.ECCUncorrected >= 1 { // a count: 0.5 is no error
		add(ECCUncorrected, fmt.Sprintf("%.0f uncorrectable ECC errors since the driver loaded", r.ECCUncorrected))
	}
	if warn := xidsIn(r.XIDs, p.WarningXIDs); len(warn) > 0 {
		add(XIDWarning, "XID "+joinInts(warn)+" logged since the last poll")
	}
	for _, c := range clockConditions {
		if hasField(r.ClockEvents, c.cond) {
			add(c.cond, c.detail)
		}
	}
	return h
}

// clockConditions are the clock events that are conditions, in the order
// of Conditions, with their words.
var clockConditions = []struct{ cond, detail string }{
	{HWPowerBrake, "clocks held down by a power brake"},
	{HWThermal, "clocks held down by hardware thermal slowdown"},
	{HWSlowdown, "clocks held down by hardware slowdown"},
	{SWThermal, "clocks cut by the driver for heat"},
}

// hasField reports whether name is one of s's space-separated fields,
// without splitting s: Assess runs for each of thousands of GPUs.
func hasField(s, name string) bool {
	for s != "" {
		var f string
		f, s, _ = strings.Cut(s, " ")
		if f == name {
			return true
		}
	}
	return false
}

// recoveryWords says what the driver's recovery action asks of an admin
// (NVIDIA's GPU memory error management guide, "Recovery action flag").
func recoveryWords(action string) string {
	switch action {
	case "reset":
		return "reset the GPU (nvidia-smi -r) once its processes end"
	case "reboot", "system_reboot":
		return "reboot the node"
	case "drain_p2p":
		return "drain peer-to-peer traffic"
	case "drain_and_reset":
		return "drain peer-to-peer traffic, then reset the GPU"
	case "bus_reset":
		return "reset the GPU's PCIe bus"
	case "recover_imex_domain":
		return "recover the IMEX domain"
	}
	return action
}

// severity is what p makes of cond: Failed, Degraded or OK (ignored).
// A condition in both lists is failed.
func (p Policy) severity(cond string) string {
	switch {
	case slices.Contains(p.Failed, cond):
		return Failed
	case slices.Contains(p.Degraded, cond):
		return Degraded
	}
	return OK
}

func xidsIn(xids, list []int) []int {
	var out []int
	for _, x := range xids {
		if slices.Contains(list, x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func joinInts(n []int) string {
	s := make([]string, len(n))
	for i, v := range n {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
