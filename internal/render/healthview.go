package render

import (
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
)

// What every output says of a GPU's health (cluster.GPU.Health): the
// cell's mark, the detail's findings and readings, -text's notes and list.
// The words are ours or the health package's; only a lost GPU's detail (its
// gpu_error) and the readings (ECC mode, clock events) come from a host,
// and each output escapes or cleans them as it does every host's text.

// conditionWords are each condition's words in a cell or a -text line,
// where the finding's detail would not fit.
var conditionWords = map[string]string{
	health.Lost:                "lost",
	health.RemapFailure:        "row remap failed",
	health.XIDFatal:            "fatal XID",
	health.RemapPending:        "remap pending",
	health.RetiredPagesPending: "page retirement pending",
	health.ECCUncorrected:      "uncorrected ECC",
	health.XIDWarning:          "XID warning",
	health.HWPowerBrake:        "power brake",
	health.HWThermal:           "HW thermal slowdown",
	health.HWSlowdown:          "HW slowdown",
	health.SWThermal:           "SW thermal slowdown",
}

// degradedWords is a degraded GPU's mark: its degraded conditions in
// words, "remap pending, HW slowdown"; "" for a GPU that is not degraded.
func degradedWords(g *cluster.GPU) string {
	if g.Health.State != health.Degraded {
		return ""
	}
	var words []string
	for _, f := range g.Health.Findings {
		words = append(words, conditionWords[f.Condition])
	}
	return strings.Join(words, ", ")
}

// findingLines are the detail's lines of g's findings, "degraded: a row
// remapping is pending: reset the GPU when idle", but a lost GPU's, which
// its error says already.
func findingLines(g *cluster.GPU) []string {
	var lines []string
	for _, f := range g.Health.Findings {
		if f.Condition == health.Lost {
			continue
		}
		lines = append(lines, f.Severity+": "+f.Detail)
	}
	return lines
}

// healthReadingsMax bounds the readings a host gave as text (ECC mode,
// clock events): the names are short and few, a broken host's are not.
const healthReadingsMax = 120

// healthReadings is the detail's readings beside the sensors: "P0 · ECC
// enabled · clocks: sw_power_cap hw_slowdown", leaving out what is not
// known, and the clocks when no event is active but an idle GPU's own
// (gpu_idle, on most free GPUs: 8,000 cells would repeat it).
func healthReadings(g *cluster.GPU) string {
	var parts []string
	if g.PState.Valid {
		parts = append(parts, "P"+strconv.FormatInt(g.PState.Value, 10))
	}
	if g.ECCMode != "" {
		parts = append(parts, "ECC "+g.ECCMode)
	}
	if c := g.ClockEvents; c != "" && c != "none" && c != "gpu_idle" {
		parts = append(parts, "clocks: "+c)
	}
	return shorten(strings.Join(parts, " · "), healthReadingsMax)
}

// idleShares are the holders (cluster.Proc.Holder) of a shared GPU whose
// processes together use at most idlePct of its SMs while another holder's
// use more: whose share is idle while someone works. nil when there is
// none, or a holder's use is not known (pmon off, MIG).
func idleShares(g *cluster.GPU, idlePct float64) map[string]bool {
	holding := 0
	for _, p := range g.Procs {
		if p.Holds() {
			if !p.SMPct.Valid {
				return nil
			}
			holding++
		}
	}
	if holding < 2 {
		return nil
	}
	use := map[string]float64{}
	for _, p := range g.Procs {
		if p.Holds() {
			use[p.Holder()] += p.SMPct.Value
		}
	}
	idle, working := map[string]bool{}, false
	for who, pct := range use {
		if pct <= idlePct {
			idle[who] = true
		} else {
			working = true
		}
	}
	if !working || len(idle) == 0 {
		return nil
	}
	return idle
}

// idlePct is the history's idle threshold ([history] idle_util_pct), which
// also says whose share of a GPU is idle.
func (r *Report) idlePct() float64 {
	if r.Config == nil {
		return DefaultConfig().History.Params.IdleUtilPct
	}
	return r.Config.History.Params.IdleUtilPct
}

// kernelLogNote is an up host's line when its kernel log could not be
// read for XIDs ("kernel log unreadable: ..."), so that an empty xids cell
// is not taken for a clean log; "" otherwise.
func kernelLogNote(h *cluster.Host) string {
	if !h.Up() || !strings.HasPrefix(h.KernelLog, "unreadable") {
		return ""
	}
	return "kernel log " + h.KernelLog + ": XIDs not known"
}
