package render

import (
	"bufio"
	"io"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/loaddata"

	"github.com/gpumon/gpumon/internal/history"
)

// Prom writes metrics.prom in the Prometheus text format, for
// node_exporter's textfile collector. Every family has HELP and TYPE lines;
// label values are escaped as the format says (\\, \" and \n). A reading
// that is not known has no sample. [render] prom_detail chooses the
// series: one per GPU (gpu, the default), per host (host) or for the
// fleet only (fleet); see promHosts.
func Prom(w io.Writer, r *Report) error {
	c := r.Cluster
	b := bufio.NewWriterSize(w, 64<<10)
	family := func(name, typ, help string) {
		b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
	}
	sample := func(name string, labels []string, v float64) {
		b.WriteString(name)
		if len(labels) > 0 {
			b.WriteByte('{')
			for i := 0; i < len(labels); i += 2 {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(labels[i])
				b.WriteString(`="`)
				b.WriteString(labelEscaper.Replace(strings.ToValidUTF8(labels[i+1], "\uFFFD")))
				b.WriteByte('"')
			}
			b.WriteByte('}')
		}
		b.WriteByte(' ')
		b.WriteString(strconv.FormatFloat(v, 'f', -1, 64))
		b.WriteByte('\n')
	}
	// uuid and name only on gpumon_gpu_state; join on host and gpu for the rest
	each := func(name, help string, val func(g *cluster.GPU) loaddata.Number, scale float64) {
		family(name, "gauge", help)
		for _, h := range c.Hosts {
			for _, g := range h.GPUs {
				if n := val(g); n.Valid {
					sample(name, []string{"host", h.Name, "gpu", g.ID()}, n.Value*scale)
				}
			}
		}
	}

	family("gpumon_data_timestamp_seconds", "gauge", "Time of the newest reading in load_data.csv (Unix seconds).")
	if !c.DataTime.IsZero() {
		sample("gpumon_data_timestamp_seconds", nil, float64(c.DataTime.UnixMilli())/1000)
	}
	family("gpumon_render_timestamp_seconds", "gauge", "When render wrote this file (Unix seconds).")
	sample("gpumon_render_timestamp_seconds", nil, float64(r.Now.UnixMilli())/1000)
	detail := PromGPU
	if r.Config != nil && r.Config.PromDetail != "" {
		detail = r.Config.PromDetail
	}
	if detail == PromFleet {
		family("gpumon_hosts", "gauge", "Hosts by the status of the last fetch (ok: answered).")
		byStatus := map[string]int{}
		var order []string
		for _, h := range c.Hosts {
			if byStatus[string(h.Status)] == 0 {
				order = append(order, string(h.Status))
			}
			byStatus[string(h.Status)]++
		}
		for _, st := range order {
			sample("gpumon_hosts", []string{"status", st}, float64(byStatus[st]))
		}
	} else {
		family("gpumon_host_up", "gauge", "1 if the host answered the last fetch, 0 if not (status says why).")
	}
	for _, h := range c.Hosts {
		if detail == PromFleet {
			break
		}
		up := 0.0
		if h.Up() {
			up = 1
		}
		sample("gpumon_host_up", []string{"host", h.Name, "status", string(h.Status)}, up)
	}
	family("gpumon_gpus", "gauge", "GPUs in each state (GPUs of hosts that are down are not counted).")
	for _, s := range cluster.States {
		sample("gpumon_gpus", []string{"state", s}, float64(c.Count[s]))
	}
	switch detail {
	case PromHost:
		promHosts(family, sample, c)
	case PromGPU:
		promGPUs(family, sample, each, c)
	}
	promUsers(family, sample, r)
	return b.Flush()
}

// promGPUs writes the series of each GPU (prom_detail = gpu).
func promGPUs(family func(name, typ, help string), sample func(string, []string, float64),
	each func(name, help string, val func(g *cluster.GPU) loaddata.Number, scale float64), c *cluster.Cluster) {
	gpuLabels := func(h *cluster.Host, g *cluster.GPU) []string {
		return []string{"host", h.Name, "gpu", g.ID()}
	}
	family("gpumon_gpu_state", "gauge", "The GPU's state (free, busy, reserved or failed) in the state label; always 1.")
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			sample("gpumon_gpu_state", []string{"host", h.Name, "gpu", g.ID(), "uuid", g.UUID, "name", g.Name, "state", g.State}, 1)
		}
	}
	each("gpumon_gpu_memory_used_bytes", "GPU memory in use.", func(g *cluster.GPU) loaddata.Number { return g.MemUsed }, 1<<20)
	each("gpumon_gpu_memory_total_bytes", "GPU memory in all.", func(g *cluster.GPU) loaddata.Number { return g.MemTotal }, 1<<20)
	each("gpumon_gpu_utilization_ratio", "GPU utilization, 0 to 1 (not reported under MIG).", func(g *cluster.GPU) loaddata.Number { return g.Util }, 0.01)
	each("gpumon_gpu_temperature_celsius", "GPU temperature.", func(g *cluster.GPU) loaddata.Number { return g.Temp }, 1)
	each("gpumon_gpu_power_watts", "GPU power draw.", func(g *cluster.GPU) loaddata.Number { return g.Power }, 1)
	family("gpumon_gpu_processes", "gauge", "Processes on the GPU that hold it (ignored and preemptible ones not counted).")
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			n := 0
			for _, p := range g.Procs {
				if p.Holds() {
					n++
				}
			}
			sample("gpumon_gpu_processes", gpuLabels(h, g), float64(n))
		}
	}
}

// promHosts writes each host's GPUs together (prom_detail = host): 8
// series a host instead of 7 a GPU and the state's.
func promHosts(family func(name, typ, help string), sample func(string, []string, float64), c *cluster.Cluster) {
	family("gpumon_host_gpus", "gauge", "The host's GPUs in each state.")
	for _, h := range c.Hosts {
		if !h.Up() {
			continue
		}
		for _, s := range cluster.States {
			sample("gpumon_host_gpus", []string{"host", h.Name, "state", s}, float64(h.Count[s]))
		}
	}
	sum := func(name, help string, val func(g *cluster.GPU) loaddata.Number, scale float64, mean bool) {
		family(name, "gauge", help)
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
			sample(name, []string{"host", h.Name}, total*scale)
		}
	}
	sum("gpumon_host_gpu_memory_used_bytes", "GPU memory in use on the host's GPUs together.", func(g *cluster.GPU) loaddata.Number { return g.MemUsed }, 1<<20, false)
	sum("gpumon_host_gpu_memory_total_bytes", "GPU memory of the host's GPUs together.", func(g *cluster.GPU) loaddata.Number { return g.MemTotal }, 1<<20, false)
	sum("gpumon_host_gpu_utilization_ratio", "The mean utilization of the host's GPUs that report one, 0 to 1.", func(g *cluster.GPU) loaddata.Number { return g.Util }, 0.01, true)
	sum("gpumon_host_gpu_power_watts", "The power draw of the host's GPUs together.", func(g *cluster.GPU) loaddata.Number { return g.Power }, 1, false)
}

// promUsers writes the users' series and render's warnings, whatever
// prom_detail says, and the history's.
func promUsers(family func(name, typ, help string), sample func(string, []string, float64), r *Report) {
	c := r.Cluster
	family("gpumon_user_gpus", "gauge", "GPUs on which the user runs a process.")
	for _, u := range c.Users {
		sample("gpumon_user_gpus", []string{"user", u.Name}, float64(u.GPUs))
	}
	family("gpumon_user_gpu_memory_bytes", "gauge", "GPU memory the user's processes use.")
	for _, u := range c.Users {
		sample("gpumon_user_gpu_memory_bytes", []string{"user", u.Name}, u.MemMiB*(1<<20))
	}
	family("gpumon_user_processes", "gauge", "GPU processes the user runs (a process on several GPUs counts once).")
	for _, u := range c.Users {
		sample("gpumon_user_processes", []string{"user", u.Name}, float64(u.Procs))
	}
	family("gpumon_render_warnings", "gauge", "Problems render found besides the data (a bad reservations file).")
	sample("gpumon_render_warnings", nil, float64(len(r.Warnings)))
	promHistory(family, sample, r.History)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// promHistory writes the history's counters and the idle-held gauges.
func promHistory(family func(name, typ, help string), sample func(name string, labels []string, v float64), h *history.Summary) {
	if h == nil {
		return
	}
	t := h.Totals
	family("gpumon_user_gpu_seconds_total", "counter", "GPU-seconds the user held since history began (a GPU held by n users counts 1/n to each).")
	for _, u := range sortedKeys(t.User) {
		sample("gpumon_user_gpu_seconds_total", []string{"user", u}, t.User[u])
	}
	family("gpumon_user_idle_held_gpu_seconds_total", "counter", "GPU-seconds the user held a GPU idle (utilization at or under idle_util_pct for idle_after or longer).")
	for _, u := range sortedKeys(t.IdleHeld) {
		sample("gpumon_user_idle_held_gpu_seconds_total", []string{"user", u}, t.IdleHeld[u])
	}
	family("gpumon_gpu_state_seconds_total", "counter", "GPU-seconds in each state since history began (down: the last known GPUs of hosts that did not answer).")
	for _, s := range history.States {
		sample("gpumon_gpu_state_seconds_total", []string{"state", s}, t.State[s])
	}
	family("gpumon_idle_job_gpu_seconds_total", "counter", "GPU-seconds used by idlemon's idle-time job alone.")
	sample("gpumon_idle_job_gpu_seconds_total", nil, t.IdleJob)
	family("gpumon_idle_held_gpus", "gauge", "GPUs idle-held now.")
	sample("gpumon_idle_held_gpus", nil, float64(len(h.IdleHeld)))
	family("gpumon_gpu_idle_held_seconds", "gauge", "How long the GPU has been idle-held so far; present only while it is.")
	for _, sp := range h.IdleHeld {
		sample("gpumon_gpu_idle_held_seconds", []string{"host", sp.Host, "gpu", sp.GPU, "users", strings.Join(sp.Users, ",")}, float64(sp.Seconds()))
	}
	// one series per holder, so that an alert carries the user label an
	// Alertmanager route mails (dist/prometheus); only idle-held GPUs have one
	family("gpumon_gpu_idle_held_by_user_seconds", "gauge", "How long the GPU has been idle-held so far, once for each of its holders; present only while it is.")
	for _, sp := range h.IdleHeld {
		for _, u := range sp.Users {
			sample("gpumon_gpu_idle_held_by_user_seconds", []string{"host", sp.Host, "gpu", sp.GPU, "user", u}, float64(sp.Seconds()))
		}
	}
}
