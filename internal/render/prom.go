package render

import (
	"bufio"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/loaddata"

	"github.com/gpumon/gpumon/internal/history"
)

// writeProm writes metrics.prom in the Prometheus text format, for
// node_exporter's textfile collector. Every family has HELP and TYPE lines;
// label values are escaped as the format says (\\, \" and \n). A reading
// that is not known has no sample. [render] prom_detail chooses the
// series: one per GPU (gpu, the default), per host (host) or for the
// fleet only (fleet); see promHosts.
func writeProm(w io.Writer, r *Report) error {
	c := r.Cluster
	pw := &promWriter{Writer: bufio.NewWriterSize(w, 64<<10)}
	// uuid, name and vendor only on gpumon_gpu_state; join on host and gpu for the rest
	each := func(name, help string, val func(g *cluster.GPU) loaddata.Number, scale float64) {
		pw.family(name, "gauge", help)
		for _, h := range c.Hosts {
			for _, g := range h.GPUs {
				if n := val(g); n.Valid {
					pw.sample(name, []string{"host", h.Name, "gpu", g.ID()}, n.Value*scale)
				}
			}
		}
	}

	pw.family("gpumon_data_timestamp_seconds", "gauge", "Time of the newest reading in load_data.csv (Unix seconds).")
	if !c.DataTime.IsZero() {
		pw.sample("gpumon_data_timestamp_seconds", nil, float64(c.DataTime.UnixMilli())/1000)
	}
	pw.family("gpumon_render_timestamp_seconds", "gauge", "When render wrote this file (Unix seconds).")
	pw.sample("gpumon_render_timestamp_seconds", nil, float64(r.Now.UnixMilli())/1000)
	detail := promGPU
	if r.Config != nil && r.Config.PromDetail != "" {
		detail = r.Config.PromDetail
	}
	if detail == promFleet {
		pw.family("gpumon_hosts", "gauge", "Hosts by the status of the last fetch (ok: answered).")
		byStatus := map[string]int{}
		var order []string
		for _, h := range c.Hosts {
			if byStatus[string(h.Status)] == 0 {
				order = append(order, string(h.Status))
			}
			byStatus[string(h.Status)]++
		}
		for _, st := range order {
			pw.sample("gpumon_hosts", []string{"status", st}, float64(byStatus[st]))
		}
	} else {
		pw.family("gpumon_host_up", "gauge", "1 if the host answered the last fetch, 0 if not (status says why).")
	}
	for _, h := range c.Hosts {
		if detail == promFleet {
			break
		}
		up := 0.0
		if h.Up() {
			up = 1
		}
		pw.sample("gpumon_host_up", []string{"host", h.Name, "status", string(h.Status)}, up)
	}
	pw.family("gpumon_gpus", "gauge", "GPUs in each state (GPUs of hosts that are down are not counted).")
	for _, s := range cluster.States {
		pw.sample("gpumon_gpus", []string{"state", s}, float64(c.Count[s]))
	}
	switch detail {
	case promHost:
		promHosts(pw, c)
	case promGPU:
		promGPUs(pw, each, c)
	}
	promHealth(pw, c, detail == promGPU)
	promUsers(pw, r)
	return pw.Flush()
}

// promWriter writes metrics.prom's lines. Its methods (not closures) let
// a sample's labels stay on the stack: 60,000 samples at 1,000 hosts.
type promWriter struct {
	*bufio.Writer
	line []byte // a sample's, made before it is written
}

// family writes a family's HELP and TYPE lines.
func (b *promWriter) family(name, typ, help string) {
	b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

// sample writes a sample: labels are names and values in turn.
func (b *promWriter) sample(name string, labels []string, v float64) {
	line := append(b.line[:0], name...)
	if len(labels) > 0 {
		line = append(line, '{')
		for i := 0; i < len(labels); i += 2 {
			if i > 0 {
				line = append(line, ',')
			}
			line = append(line, labels[i]...)
			line = append(line, `="`...)
			line = appendLabelValue(line, labels[i+1])
			line = append(line, '"')
		}
		line = append(line, '}')
	}
	line = append(line, ' ')
	line = append(appendFloat(line, v), '\n')
	b.Write(line)
	b.line = line
}

// appendLabelValue appends a label's value escaped as the format says,
// its invalid UTF-8 replaced; most values need neither, and are appended
// as they are.
func appendLabelValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c >= utf8.RuneSelf || c == '\\' || c == '"' || c == '\n' {
			return append(b, labelEscaper.Replace(strings.ToValidUTF8(v, "\uFFFD"))...)
		}
	}
	return append(b, v...)
}

// promGPUs writes the series of each GPU (prom_detail = gpu).
func promGPUs(pw *promWriter, each func(name, help string, val func(g *cluster.GPU) loaddata.Number, scale float64), c *cluster.Cluster) {
	pw.family("gpumon_gpu_state", "gauge", "The GPU's state (free, busy, reserved or failed) in the state label; always 1. vendor: amd, none for NVIDIA.")
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			labels := append(make([]string, 0, 12), "host", h.Name, "gpu", g.ID(), "uuid", g.UUID, "name", g.Name, "state", g.State)
			// An NVIDIA GPU's series has no vendor label, so that it is the
			// series it was before other vendors came (a missing label
			// and an empty one are the same to Prometheus: {vendor=""}
			// selects NVIDIA's GPUs).
			if !isNVIDIA(g) {
				labels = append(labels, "vendor", g.Vendor)
			}
			pw.sample("gpumon_gpu_state", labels, 1)
		}
	}
	each("gpumon_gpu_memory_used_bytes", "GPU memory in use.", func(g *cluster.GPU) loaddata.Number { return g.MemUsed }, 1<<20)
	each("gpumon_gpu_memory_total_bytes", "GPU memory in all.", func(g *cluster.GPU) loaddata.Number { return g.MemTotal }, 1<<20)
	each("gpumon_gpu_utilization_ratio", "GPU utilization, 0 to 1 (not reported under MIG, nor for an AMD compute partition).", func(g *cluster.GPU) loaddata.Number { return g.Util }, 0.01)
	each("gpumon_gpu_temperature_celsius", "GPU temperature.", func(g *cluster.GPU) loaddata.Number { return g.Temp }, 1)
	each("gpumon_gpu_power_watts", "GPU power draw.", func(g *cluster.GPU) loaddata.Number { return g.Power }, 1)
	pw.family("gpumon_gpu_processes", "gauge", "Processes on the GPU that hold it (ignored and preemptible ones not counted).")
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			n := 0
			for _, p := range g.Procs {
				if p.Holds() {
					n++
				}
			}
			pw.sample("gpumon_gpu_processes", []string{"host", h.Name, "gpu", g.ID()}, float64(n))
		}
	}
}

// healthStateValue is gpumon_gpu_health_state's value of a health state.
var healthStateValue = map[string]float64{health.OK: 0, health.Degraded: 1, health.Failed: 2}

// promHealth writes the GPUs' health: the degraded count whatever
// prom_detail says, and where the file has series per GPU (perGPU) each
// GPU's health state and a gpumon_gpu_health series for each finding (its
// labels a fixed set of conditions and severities), which the alert rules
// in dist/prometheus use.
func promHealth(pw *promWriter, c *cluster.Cluster, perGPU bool) {
	pw.family("gpumon_gpus_degraded", "gauge", "GPUs whose health is degraded (counted in gpumon_gpus by their state too).")
	pw.sample("gpumon_gpus_degraded", nil, float64(c.Degraded))
	if !perGPU {
		return
	}
	pw.family("gpumon_gpu_health", "gauge", "1 for each condition ([health] policy) a GPU is in, by condition and severity (failed or degraded).")
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			for _, f := range g.Health.Findings {
				pw.sample("gpumon_gpu_health", []string{"host", h.Name, "gpu", g.ID(), "condition", f.Condition, "severity", f.Severity}, 1)
			}
		}
	}
	pw.family("gpumon_gpu_health_state", "gauge", "The GPU's health: 0 ok, 1 degraded, 2 failed.")
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			pw.sample("gpumon_gpu_health_state", []string{"host", h.Name, "gpu", g.ID()}, healthStateValue[g.Health.State])
		}
	}
}

// promHosts writes each host's GPUs together (prom_detail = host): 8
// series a host instead of 7 a GPU and the state's.
func promHosts(pw *promWriter, c *cluster.Cluster) {
	pw.family("gpumon_host_gpus", "gauge", "The host's GPUs in each state.")
	for _, h := range c.Hosts {
		if !h.Up() {
			continue
		}
		for _, s := range cluster.States {
			pw.sample("gpumon_host_gpus", []string{"host", h.Name, "state", s}, float64(h.Count[s]))
		}
	}
	sum := func(name, help string, val func(g *cluster.GPU) loaddata.Number, scale float64, mean bool) {
		pw.family(name, "gauge", help)
		for _, h := range c.Hosts {
			total, n := 0.0, 0
			for _, g := range h.GPUs {
				if v := val(g); v.Valid {
					total += v.Value
					n++
				}
			}
			if n == 0 {
				continue
			}
			if mean {
				total /= float64(n)
			}
			pw.sample(name, []string{"host", h.Name}, total*scale)
		}
	}
	sum("gpumon_host_gpu_memory_used_bytes", "GPU memory in use on the host's GPUs together.", func(g *cluster.GPU) loaddata.Number { return g.MemUsed }, 1<<20, false)
	sum("gpumon_host_gpu_memory_total_bytes", "GPU memory of the host's GPUs together.", func(g *cluster.GPU) loaddata.Number { return g.MemTotal }, 1<<20, false)
	sum("gpumon_host_gpu_utilization_ratio", "The mean utilization of the host's GPUs that report one, 0 to 1.", func(g *cluster.GPU) loaddata.Number { return g.Util }, 0.01, true)
	sum("gpumon_host_gpu_power_watts", "The power draw of the host's GPUs together.", func(g *cluster.GPU) loaddata.Number { return g.Power }, 1, false)
}

// promUsers writes the users' series and render's warnings, whatever
// prom_detail says, and the history's.
func promUsers(pw *promWriter, r *Report) {
	c := r.Cluster
	pw.family("gpumon_user_gpus", "gauge", "GPUs on which the user runs a process.")
	for _, u := range c.Users {
		pw.sample("gpumon_user_gpus", []string{"user", u.Name}, float64(u.GPUs))
	}
	pw.family("gpumon_user_gpu_memory_bytes", "gauge", "GPU memory the user's processes use.")
	for _, u := range c.Users {
		pw.sample("gpumon_user_gpu_memory_bytes", []string{"user", u.Name}, u.MemMiB*(1<<20))
	}
	pw.family("gpumon_user_processes", "gauge", "GPU processes the user runs (a process on several GPUs counts once).")
	for _, u := range c.Users {
		pw.sample("gpumon_user_processes", []string{"user", u.Name}, float64(u.Procs))
	}
	pw.family("gpumon_render_warnings", "gauge", "Problems render found besides the data (a bad reservations file).")
	pw.sample("gpumon_render_warnings", nil, float64(len(r.Warnings)))
	promHistory(pw, r.History)
	if r.Config != nil {
		promAccounting(pw, &r.Config.Accounting, r.History)
	}
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// promHistory writes the history's counters and the idle-held gauges.
func promHistory(pw *promWriter, h *history.Summary) {
	if h == nil {
		return
	}
	t := h.Totals
	pw.family("gpumon_user_gpu_seconds_total", "counter", "GPU-seconds the user held since history began (a GPU held by n users counts 1/n to each).")
	for _, u := range slices.Sorted(maps.Keys(t.User)) {
		pw.sample("gpumon_user_gpu_seconds_total", []string{"user", u}, t.User[u])
	}
	pw.family("gpumon_user_idle_held_gpu_seconds_total", "counter", "GPU-seconds the user held a GPU idle (utilization at or under idle_util_pct for idle_after or longer).")
	for _, u := range slices.Sorted(maps.Keys(t.IdleHeld)) {
		pw.sample("gpumon_user_idle_held_gpu_seconds_total", []string{"user", u}, t.IdleHeld[u])
	}
	pw.family("gpumon_user_energy_joules_total", "counter", "Joules the user's share of their GPUs drew since history began (a GPU's power split among its holders; GPU-seconds of unknown power count none).")
	for _, u := range slices.Sorted(maps.Keys(t.UserEnergyJ)) {
		pw.sample("gpumon_user_energy_joules_total", []string{"user", u}, t.UserEnergyJ[u])
	}
	// one series per user and model they held: a team's GPU-hour cost
	// needs each user's GPU-hours per model, prices being per model
	pw.family("gpumon_user_model_gpu_seconds_total", "counter", "GPU-seconds the user held of GPUs of the model since history began (model: the GPU's full name, as in gpumon_gpu_hour_price).")
	for _, u := range slices.Sorted(maps.Keys(t.UserModelGPU)) {
		models := t.UserModelGPU[u]
		for _, m := range slices.Sorted(maps.Keys(models)) {
			pw.sample("gpumon_user_model_gpu_seconds_total", []string{"user", u, "model", m}, models[m])
		}
	}
	pw.family("gpumon_gpu_state_seconds_total", "counter", "GPU-seconds in each state since history began (down: the last known GPUs of hosts that did not answer).")
	for _, s := range history.States {
		pw.sample("gpumon_gpu_state_seconds_total", []string{"state", s}, t.State[s])
	}
	pw.family("gpumon_idle_job_gpu_seconds_total", "counter", "GPU-seconds used by idlemon's idle-time job alone.")
	pw.sample("gpumon_idle_job_gpu_seconds_total", nil, t.IdleJob)
	pw.family("gpumon_idle_held_gpus", "gauge", "GPUs idle-held now.")
	pw.sample("gpumon_idle_held_gpus", nil, float64(h.IdleHeldGPUs()))
	pw.family("gpumon_gpu_idle_held_seconds", "gauge", "How long the GPU has been idle-held so far; present only while it is.")
	for _, sp := range h.IdleHeld {
		pw.sample("gpumon_gpu_idle_held_seconds", []string{"host", sp.Host, "gpu", sp.GPU, "users", strings.Join(sp.Users, ",")}, float64(sp.Seconds()))
	}
	// one series per holder, so that an alert carries the user label an
	// Alertmanager route mails (dist/prometheus); only idle-held GPUs have one
	pw.family("gpumon_gpu_idle_held_by_user_seconds", "gauge", "How long the GPU has been idle-held so far, once for each of its holders; present only while it is.")
	for _, sp := range h.IdleHeld {
		for _, u := range sp.Users {
			pw.sample("gpumon_gpu_idle_held_by_user_seconds", []string{"host", sp.Host, "gpu", sp.GPU, "user", u}, float64(sp.Seconds()))
		}
	}
}

// promAccounting writes what Prometheus needs to add the users' counters
// up by team and price them (dist/prometheus's gpumon:team_* rules): each
// team member's team, where [teams] names any, and the prices, where
// [accounting] sets them. Prometheus knows no team and no price itself.
func promAccounting(pw *promWriter, acc *accounting.Config, h *history.Summary) {
	if len(acc.Teams) > 0 {
		pw.family("gpumon_user_team", "gauge", "1 for each user in a team of [teams], labelled with it (a user in two teams: the one the accounting gives them).")
		seen := map[string]bool{}
		for _, t := range acc.Teams {
			for _, m := range t.Members {
				if !seen[m] && acc.TeamOf(m) == t.Name {
					seen[m] = true
					pw.sample("gpumon_user_team", []string{"user", m, "team", t.Name}, 1)
				}
			}
		}
	}
	if !acc.Priced() {
		return
	}
	gpuHour, kwh := prices(acc, h)
	if len(gpuHour) > 0 {
		pw.family("gpumon_gpu_hour_price", "gauge", "The price of a GPU-hour of the model, in [accounting] currency; models the history saw in 30 days or has a counter of that have one.")
		for _, m := range slices.Sorted(maps.Keys(gpuHour)) {
			pw.sample("gpumon_gpu_hour_price", []string{"model", m}, gpuHour[m])
		}
	}
	if kwh > 0 {
		pw.family("gpumon_kwh_price", "gauge", "The price of a kWh, in [accounting] currency.")
		pw.sample("gpumon_kwh_price", nil, kwh)
	}
}

// prices are the GPU-hour price of each model the history saw in the last
// 30 days or has a gpumon_user_model_gpu_seconds_total of (so that the
// rules' join on model finds a price for every counter a price covers,
// whatever the span they take), and the kWh price. A price of 0 is left
// out, as one not set is: it adds nothing.
func prices(acc *accounting.Config, h *history.Summary) (gpuHour map[string]float64, kwh float64) {
	gpuHour = map[string]float64{}
	if h != nil {
		models := map[string]bool{}
		for m := range h.Models30d {
			models[m] = true
		}
		for _, byModel := range h.Totals.UserModelGPU {
			for m := range byModel {
				models[m] = true
			}
		}
		for m := range models {
			if p, ok := acc.PriceOf(m); ok && p > 0 {
				gpuHour[m] = p
			}
		}
	}
	if acc.HasKWhPrice && acc.KWhPrice > 0 {
		kwh = acc.KWhPrice
	}
	return gpuHour, kwh
}
