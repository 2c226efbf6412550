package render

import (
	"bufio"
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

// What a host's health readings sent as text may take in the detail: the
// names are short and few, a broken host's are not.
const (
	eccModeMax     = 24
	clockEventsMax = 120
)

// writeHealthReadings writes the detail's readings after its sensors (sep:
// a " · " first): "P0 · ECC disabled · clocks: sw_power_cap hw_slowdown",
// leaving out what is not known and what most GPUs would repeat in 8,000
// cells (the page budget): ECC enabled, and the clocks when no event is
// active but an idle GPU's own (gpu_idle). It allocates nothing: 8,000
// cells.
func writeHealthReadings(w *bufio.Writer, g *cluster.GPU, sep bool, scratch []byte) []byte {
	part := func() {
		if sep {
			w.WriteString(" · ")
		}
		sep = true
	}
	if g.PState.Valid {
		part()
		scratch = strconv.AppendInt(append(scratch[:0], 'P'), g.PState.Value, 10)
		w.Write(scratch)
	}
	if eccShown(g) {
		part()
		w.WriteString("ECC ")
		esc(w, shorten(g.ECCMode, eccModeMax))
	}
	if clocksShown(g) {
		part()
		w.WriteString("clocks: ")
		esc(w, shorten(g.ClockEvents, clockEventsMax))
	}
	return scratch
}

// hasHealthReadings reports whether writeHealthReadings writes anything.
func hasHealthReadings(g *cluster.GPU) bool {
	return g.PState.Valid || eccShown(g) || clocksShown(g)
}

func eccShown(g *cluster.GPU) bool { return g.ECCMode != "" && g.ECCMode != "enabled" }

func clocksShown(g *cluster.GPU) bool {
	c := g.ClockEvents
	return c != "" && c != "none" && c != "gpu_idle"
}

// idleShares are the holders (cluster.Proc.Holder) of a shared GPU whose
// processes together use at most idlePct of its SMs while another holder's
// use more: whose share is idle while someone works. nil when there is
// none, or a holder's use is not known (pmon off, MIG). It allocates only
// when it finds one: it runs for each of thousands of GPUs.
func idleShares(g *cluster.GPU, idlePct float64) []string {
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
	working := false
	var idle []string
	for i, p := range g.Procs {
		if !p.Holds() || holderSeen(g.Procs[:i], p.Holder()) {
			continue
		}
		if use := holderUse(g.Procs[i:], p.Holder()); use > idlePct {
			working = true
		} else {
			idle = append(idle, p.Holder())
		}
	}
	if !working {
		return nil
	}
	return idle
}

// holderSeen reports whether one of procs that holds its GPU is who's.
func holderSeen(procs []*cluster.Proc, who string) bool {
	for _, p := range procs {
		if p.Holds() && p.Holder() == who {
			return true
		}
	}
	return false
}

// holderUse is the SM % of who's processes among procs together.
func holderUse(procs []*cluster.Proc, who string) float64 {
	use := 0.0
	for _, p := range procs {
		if p.Holds() && p.Holder() == who {
			use += p.SMPct.Value
		}
	}
	return use
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
