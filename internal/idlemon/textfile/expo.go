package textfile

import (
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Every series has a vendor label, not only idlemon_info: node_exporter
// merges the files of its folder into one exposition, and two idlemons on
// a host (one per vendor) would otherwise write the same series twice
// (idlemon_leftover_runs_total{}, or a job name both configs have), which
// it refuses as "collected before with the same name and label values".
// For the same reason each family's HELP is the same whatever the vendor.
//
// A job's label is name, not job: Prometheus renames a scraped job label
// to exported_job, as it clashes with the scrape job's own.

// WriteTo writes the exposition text (Prometheus text format 0.0.4, HELP
// and TYPE for each family, label values escaped) as of now: a running
// job's GPU-seconds include its current run.
func (m *Metrics) WriteTo(w io.Writer, now time.Time) error {
	m.buf = m.appendText(m.buf[:0], now)
	_, err := w.Write(m.buf)
	return err
}

// appendText appends the exposition text to b, its families sorted by name.
func (m *Metrics) appendText(b []byte, now time.Time) []byte {
	e := &expo{b: b, vendor: m.vendor}
	e.family("idlemon_info", "gauge", "Always 1: idlemon's version, GPU vendor and cgroup mode (v2, v2+v1, or marks where it has no cgroups) in its labels.")
	e.series("idlemon_info")
	e.label("cgroup_mode", m.mode)
	e.label("vendor", m.vendor)
	e.label("version", m.version)
	e.value(1)
	m.jobFamilies(e, now)
	e.family("idlemon_leftover_processes_total", "counter", "Processes of runs an earlier idlemon left running, stopped at start.")
	e.vendorOnly("idlemon_leftover_processes_total", float64(m.leftoverProcs))
	e.family("idlemon_leftover_runs_total", "counter", "Runs an earlier idlemon left running (it was killed, not stopped), stopped at start.")
	e.vendorOnly("idlemon_leftover_runs_total", float64(m.leftoverRuns))
	e.family("idlemon_preempted_run_seconds", "histogram", "How long preempted runs had run (seconds): many short ones are a flapping GPU.")
	for i := range m.jobs {
		e.histogram("idlemon_preempted_run_seconds", &m.jobs[i], &m.jobs[i].preemptedRun)
	}
	e.family("idlemon_preemption_seconds", "histogram", "From the scan that saw another user's process on a job's GPU to the job's last process gone (seconds).")
	for i := range m.jobs {
		e.histogram("idlemon_preemption_seconds", &m.jobs[i], &m.jobs[i].preemption)
	}
	e.family("idlemon_start_time_seconds", "gauge", "When this idlemon started (Unix seconds).")
	e.vendorOnly("idlemon_start_time_seconds", float64(m.started.UnixMilli())/1000)
	return e.b
}

// jobFamilies writes the idlemon_job_* families, sorted by name.
func (m *Metrics) jobFamilies(e *expo, now time.Time) {
	m.usage(e, "idlemon_job_cpu_seconds", "CPU time the job's current or last run has used (seconds), from its cgroup.",
		func(u Usage) float64 { return u.CPUSeconds })
	e.family("idlemon_job_gpu_seconds_total", "counter", "GPU-seconds the job has run: each run's seconds times its GPUs, a current run included.")
	for i := range m.jobs {
		e.job("idlemon_job_gpu_seconds_total", &m.jobs[i], "", m.jobs[i].gpuSeconds(now))
	}
	m.usage(e, "idlemon_job_memory_bytes", "Memory the job's current or last run uses (bytes), from its cgroup.",
		func(u Usage) float64 { return float64(u.MemoryBytes) })
	m.usage(e, "idlemon_job_oom_kills", "Processes of the job's current or last run the OOM killer killed, from its cgroup.",
		func(u Usage) float64 { return float64(u.OOMKills) })
	e.family("idlemon_job_oom_kills_total", "counter", "Processes of the job the OOM killer killed, every run, from its cgroups.")
	for i := range m.jobs {
		e.job("idlemon_job_oom_kills_total", &m.jobs[i], "", float64(m.jobs[i].oomTotal))
	}
	m.usage(e, "idlemon_job_pids_max_hits", "Forks the job's current or last run was refused at its pids ceiling, from its cgroup.",
		func(u Usage) float64 { return float64(u.PidsMaxHits) })
	e.family("idlemon_job_running", "gauge", "1 while the job runs, else 0.")
	for i, j := range m.jobs {
		e.job("idlemon_job_running", &m.jobs[i], "", b2f(j.running))
	}
	e.family("idlemon_job_start_refusals_total", "counter", "Times the job could have started but did not, by why (counted when a reason begins).")
	for i, j := range m.jobs {
		for _, r := range j.refusals {
			e.job("idlemon_job_start_refusals_total", &m.jobs[i], r.reason, float64(r.n))
		}
	}
	e.family("idlemon_job_starts_total", "counter", "Times the job started.")
	for i, j := range m.jobs {
		e.job("idlemon_job_starts_total", &m.jobs[i], "", float64(j.starts))
	}
	e.family("idlemon_job_stops_total", "counter", "Times the job's run ended, by why (preempted, terminal, exited, shutdown).")
	for i, j := range m.jobs {
		for _, r := range j.stops {
			e.job("idlemon_job_stops_total", &m.jobs[i], r.reason, float64(r.n))
		}
	}
	e.family("idlemon_job_waiting", "gauge", "1 for the reason the job waits now, 0 for the other reasons; all 0 while it runs or may start.")
	for i, j := range m.jobs {
		for _, r := range j.refusals {
			e.job("idlemon_job_waiting", &m.jobs[i], r.reason, b2f(r.reason == j.waiting))
		}
	}
}

// usage writes the family of one Usage field: a sample for each job whose
// usage is known and that field not -1.
func (m *Metrics) usage(e *expo, name, help string, field func(Usage) float64) {
	e.family(name, "gauge", help)
	for i, j := range m.jobs {
		if v := field(j.usage); j.hasUsage && v != -1 {
			e.job(name, &m.jobs[i], "", v)
		}
	}
}

// gpuSeconds is the job's GPU-seconds as of now, the current run included.
// It never goes below what was written last: Stopped's ran may be a little
// less than the run's time as WriteTo counted it, and a counter that goes
// back reads as a reset, all of it counted again.
func (j *jobCounters) gpuSeconds(now time.Time) float64 {
	v := j.ranGPU
	if j.running {
		v += max(now.Sub(j.since), 0).Seconds() * float64(j.GPUs)
	}
	j.shownGPU = max(j.shownGPU, v)
	return j.shownGPU
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// expo appends samples to b; its methods keep a sample's labels off the heap.
type expo struct {
	b      []byte
	vendor string
	sep    byte // before the next label: '{' for the first, then ','
}

// family writes a family's HELP and TYPE lines.
func (e *expo) family(name, typ, help string) {
	e.b = append(e.b, "# HELP "...)
	e.b = append(e.b, name...)
	e.b = append(e.b, ' ')
	e.b = append(e.b, help...)
	e.b = append(e.b, "\n# TYPE "...)
	e.b = append(e.b, name...)
	e.b = append(e.b, ' ')
	e.b = append(e.b, typ...)
	e.b = append(e.b, '\n')
}

// series begins a sample of the metric name; label adds its labels, value
// ends it.
func (e *expo) series(name string) {
	e.b = append(e.b, name...)
	e.sep = '{'
}

func (e *expo) label(name, value string) {
	e.b = append(e.b, e.sep)
	e.b = append(e.b, name...)
	e.b = append(e.b, `="`...)
	e.b = appendLabelValue(e.b, value)
	e.b = append(e.b, '"')
	e.sep = ','
}

func (e *expo) value(v float64) {
	if e.sep == ',' {
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, ' ')
	e.b = appendFloat(e.b, v)
	e.b = append(e.b, '\n')
}

// jobSeries begins a sample of job j's metric name+suffix.
func (e *expo) jobSeries(name, suffix string, j *jobCounters) {
	e.b = append(e.b, name...)
	e.b = append(e.b, suffix...)
	e.sep = '{'
	e.label("name", j.Name)
}

// job writes a sample of job j, with a reason label unless reason is "".
func (e *expo) job(name string, j *jobCounters, reason string, v float64) {
	e.jobSeries(name, "", j)
	if reason != "" {
		e.label("reason", reason)
	}
	e.label("vendor", e.vendor)
	e.value(v)
}

// vendorOnly writes a sample of idlemon itself, not of a job.
func (e *expo) vendorOnly(name string, v float64) {
	e.series(name)
	e.label("vendor", e.vendor)
	e.value(v)
}

// histogram writes job j's histogram h: its buckets, sum and count.
func (e *expo) histogram(name string, j *jobCounters, h *histogram) {
	for k, le := range h.les {
		e.bucket(name, j, le, h.counts[k])
	}
	e.bucket(name, j, "+Inf", h.count)
	for _, s := range []struct {
		suffix string
		v      float64
	}{{"_sum", h.sum}, {"_count", float64(h.count)}} {
		e.jobSeries(name, s.suffix, j)
		e.label("vendor", e.vendor)
		e.value(s.v)
	}
}

func (e *expo) bucket(name string, j *jobCounters, le string, n int64) {
	e.jobSeries(name, "_bucket", j)
	e.label("vendor", e.vendor)
	e.label("le", le)
	e.value(float64(n))
}

// appendBound appends a bucket's upper bound as Prometheus 3 stores it
// whatever the exposition says ("30.0", "0.005"), so that a rule's
// le="30.0" matches on Prometheus 2 as well.
func appendBound(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return append(strconv.AppendInt(b, int64(v), 10), ".0"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// appendFloat appends a sample's value: a whole number as its digits.
func appendFloat(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// appendLabelValue appends a label's value escaped as the format says
// (\\, \" and \n), its invalid UTF-8 replaced: job names come from the
// config, and Prometheus refuses a file with invalid UTF-8.
func appendLabelValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c >= utf8.RuneSelf || c == '\\' || c == '"' || c == '\n' {
			return append(b, labelEscaper.Replace(strings.ToValidUTF8(v, "\uFFFD"))...)
		}
	}
	return append(b, v...)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
