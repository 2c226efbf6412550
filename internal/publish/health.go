package publish

import (
	"time"

	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/notify"
)

// healthNow is the GPUs failed or degraded in this snapshot, on hosts that
// answered, each since the start of its oldest condition of that severity
// going on in the history (open: its episodes at this snapshot).
func healthNow(snap *history.Snapshot, open []history.HealthEpisode) []notify.GPUHealth {
	type ref struct{ host, gpu, severity string }
	since := map[ref]int64{}
	for _, ep := range open {
		k := ref{ep.Host, ep.GPU, ep.Severity}
		if t, ok := since[k]; !ok || ep.Start < t {
			since[k] = ep.Start
		}
	}
	var out []notify.GPUHealth
	for _, h := range snap.Hosts {
		if !h.Up {
			continue
		}
		for _, g := range h.GPUs {
			if len(g.Findings) == 0 {
				continue
			}
			gh := notify.GPUHealth{Host: h.Name, GPU: g.ID, Model: g.Name, State: health.Degraded, Findings: g.Findings}
			for _, f := range g.Findings {
				if f.Severity == health.Failed {
					gh.State = health.Failed
				}
			}
			if t, ok := since[ref{h.Name, g.ID, gh.State}]; ok {
				gh.Since = time.Unix(t, 0)
			}
			out = append(out, gh)
		}
	}
	return out
}
