// Package textfile is what idlemon did, for Prometheus: the jobs' state,
// GPU-seconds run, stops and preemptions with their latency, starts
// refused, leftovers found at start, written as a node_exporter textfile
// (the textfile collector's folder: node_exporter
// --collector.textfile.directory). It holds counters in memory; idlemon
// calls its methods as things happen and Write after each scan.
package textfile

import (
	"slices"
	"strings"
	"time"
)

// FileName is the file Write makes in the folder: idlemon-<vendor>.prom,
// so that a host with two idlemons (one per vendor) has two files.
func FileName(vendor string) string { return "idlemon-" + vendor + ".prom" }

// Stop reasons, the reason label of idlemon_job_stops_total.
const (
	Preempted = "preempted" // another process opened one of the job's GPUs
	Terminal  = "terminal"  // a terminal user became active
	Exited    = "exited"    // the job's first process ended by itself
	Shutdown  = "shutdown"  // idlemon stopped
)

// Refusal reasons, the reason label of idlemon_job_start_refusals_total and
// idlemon_job_waiting.
const (
	BusyGPU      = "busy_gpu"      // one of its GPUs has a foreign holder
	TerminalUser = "terminal_user" // a terminal user is active
	Backoff      = "backoff"       // it ended by itself and waits to restart
	MinIdle      = "min_idle"      // its GPUs have not been idle for min_idle_seconds yet
	OtherJob     = "other_job"     // another job of ours holds one of its GPUs
	StartFailed  = "start_failed"  // the start itself failed (exec, cgroup)
)

// Job is one [process-*] section as the metrics name it.
type Job struct {
	Name string // the section, the job label
	GPUs int    // how many GPUs a run holds: GPU-seconds = run seconds * GPUs
}

// Usage is one running job's use of the host, from its cgroup; -1 where
// not known.
type Usage struct {
	CPUSeconds  float64
	MemoryBytes int64
	OOMKills    int64
	PidsMaxHits int64
}

// Metrics are one idlemon's counters. Not safe for concurrent use: the
// daemon's loop owns it.
type Metrics struct {
	vendor, mode, version string
	started               time.Time
	jobs                  []jobCounters
	leftoverRuns          int64
	leftoverProcs         int64
	swept                 bool   // Write removed an earlier idlemon's temporary files
	buf                   []byte // the text, kept from one write to the next
}

// jobCounters are one job's counters.
type jobCounters struct {
	Job
	running  bool
	since    time.Time // when the current run started
	starts   int64
	stops    tally
	ranGPU   float64 // GPU-seconds of the runs that ended
	shownGPU float64 // the most GPU-seconds written: the counter never goes back
	waiting  string  // the current reason, "" for none
	refusals tally   // also the reasons idlemon_job_waiting writes
	usage    Usage
	hasUsage bool
	oomTotal int64 // OOM kills of every run

	preemption, preemptedRun histogram
}

// Every job has a series for each of these reasons from the start, at 0, so
// that increase() sees the first stop or refusal of each: a series that
// appears at 1 counts nothing until its second.
var (
	stopReasons    = []string{Exited, Preempted, Shutdown, Terminal}
	refusalReasons = []string{Backoff, BusyGPU, MinIdle, OtherJob, StartFailed, TerminalUser}
)

// The histograms' upper bounds, in seconds: preemption latency is
// milliseconds when the inotify watch sees the open, up to a scan interval
// when only the scan does, and the grace period when the job ignores
// SIGTERM; a preempted run, from a flapping GPU's seconds to a day.
var (
	preemptionBuckets   = newBuckets(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
	preemptedRunBuckets = newBuckets(1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600)
)

// New starts the counters of jobs at now: every job waiting, nothing
// counted. vendor ("nvidia" or "amd") and mode (the cgroup mode: "v2",
// "v2+v1", "marks") go into idlemon_info with version.
func New(jobs []Job, vendor, mode, version string, now time.Time) *Metrics {
	m := &Metrics{vendor: vendor, mode: mode, version: version, started: now, jobs: make([]jobCounters, len(jobs))}
	for i, j := range jobs {
		m.jobs[i] = jobCounters{
			Job:          j,
			stops:        newTally(stopReasons),
			refusals:     newTally(refusalReasons),
			preemption:   newHistogram(preemptionBuckets),
			preemptedRun: newHistogram(preemptedRunBuckets),
		}
	}
	return m
}

// Leftovers counts runs an earlier idlemon left running, found and
// stopped at start (idlemon_leftover_runs_total) and their processes
// (idlemon_leftover_processes_total).
func (m *Metrics) Leftovers(runs, procs int) {
	m.leftoverRuns += int64(max(runs, 0))
	m.leftoverProcs += int64(max(procs, 0))
}

// Started: job i started at now (idlemon_job_starts_total, and
// idlemon_job_running 1 from now).
func (m *Metrics) Started(i int, now time.Time) {
	j := &m.jobs[i]
	j.starts++
	j.running, j.since = true, now
	// a running job waits for nothing; a reason after this run is a new refusal
	j.waiting = ""
	j.hasUsage = false
}

// Stopped: job i's run ended at now for reason, after running ran. For a
// preemption, latency is from the scan that saw the foreign holder to the
// job's last process gone (idlemon_preemption_seconds histogram), and ran
// goes into idlemon_preempted_run_seconds (runs preempted soon after their
// start: a flapping GPU). GPU-seconds (idlemon_job_gpu_seconds_total)
// grow by ran * the job's GPUs.
func (m *Metrics) Stopped(i int, reason string, ran, latency time.Duration, now time.Time) {
	j := &m.jobs[i]
	ran = max(ran, 0) // a clock stepped back
	j.running = false
	j.stops.add(reason)
	j.ranGPU += ran.Seconds() * float64(j.GPUs)
	if reason == Preempted {
		j.preemption.observe(max(latency, 0).Seconds())
		j.preemptedRun.observe(ran.Seconds())
	}
}

// Waiting sets why job i is not running now ("" while it runs or may
// start): idlemon_job_waiting{reason} is 1 for that reason; each time a
// reason begins, idlemon_job_start_refusals_total{reason} counts one.
func (m *Metrics) Waiting(i int, reason string) {
	j := &m.jobs[i]
	if reason != "" && reason != j.waiting {
		j.refusals.add(reason)
	}
	j.waiting = reason
}

// Usage sets job i's current use (idlemon_job_cpu_seconds,
// idlemon_job_memory_bytes, idlemon_job_oom_kills, idlemon_job_pids_max_hits:
// gauges of the current run; not written where -1). After a run ends they
// stay at its last values until the next run starts: the OOM kill that
// ended a run is seen.
//
// A field of u that is -1 keeps what the run last had: a group read as it
// is removed says nothing, and must not hide the OOM kill that ended the
// run. OOM kills the run had not had before go into
// idlemon_job_oom_kills_total, which, unlike the gauge, outlives the run.
func (m *Metrics) Usage(i int, u Usage) {
	j := &m.jobs[i]
	if j.hasUsage {
		keep := func(v *int64, old int64) {
			if *v == -1 {
				*v = old
			}
		}
		if u.CPUSeconds == -1 {
			u.CPUSeconds = j.usage.CPUSeconds
		}
		keep(&u.MemoryBytes, j.usage.MemoryBytes)
		keep(&u.OOMKills, j.usage.OOMKills)
		keep(&u.PidsMaxHits, j.usage.PidsMaxHits)
	}
	before := int64(0)
	if j.hasUsage && j.usage.OOMKills > 0 {
		before = j.usage.OOMKills
	}
	if u.OOMKills > before {
		j.oomTotal += u.OOMKills - before
	}
	j.usage, j.hasUsage = u, true
}

// tally counts by reason, sorted by reason.
type tally []reasonCount

type reasonCount struct {
	reason string
	n      int64
}

// newTally is a tally of reasons at 0.
func newTally(reasons []string) tally {
	t := make(tally, len(reasons))
	for k, r := range reasons {
		t[k].reason = r
	}
	slices.SortFunc(t, func(a, b reasonCount) int { return strings.Compare(a.reason, b.reason) })
	return t
}

// add counts one for reason, a new one in its place.
func (t *tally) add(reason string) {
	k, found := slices.BinarySearchFunc(*t, reason, func(c reasonCount, r string) int { return strings.Compare(c.reason, r) })
	if !found {
		*t = slices.Insert(*t, k, reasonCount{reason: reason})
	}
	(*t)[k].n++
}

// buckets are a histogram's upper bounds, and the same as its le labels.
type buckets struct {
	bounds []float64
	les    []string
}

func newBuckets(bounds ...float64) *buckets {
	b := &buckets{bounds: bounds}
	for _, v := range bounds {
		b.les = append(b.les, string(appendBound(nil, v)))
	}
	return b
}

// histogram is a Prometheus histogram: counts[k] is how many observations
// were at most bounds[k] (cumulative, as the buckets are written).
type histogram struct {
	*buckets
	counts []int64
	count  int64
	sum    float64
}

func newHistogram(b *buckets) histogram {
	return histogram{buckets: b, counts: make([]int64, len(b.bounds))}
}

func (h *histogram) observe(v float64) {
	for k, b := range h.bounds {
		if v <= b {
			h.counts[k]++
		}
	}
	h.count++
	h.sum += v
}
