// Package textfile is what idlemon did, for Prometheus: the jobs' state,
// GPU-seconds run, stops and preemptions with their latency, starts
// refused, leftovers found at start, written as a node_exporter textfile
// (the textfile collector's folder: node_exporter
// --collector.textfile.directory). It holds counters in memory; idlemon
// calls its methods as things happen and Write after each scan.
package textfile

import (
	"errors"
	"io"
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
	// to be written
}

// New starts the counters of jobs at now: every job waiting, nothing
// counted. vendor ("nvidia" or "amd") and mode (the cgroup mode: "v2",
// "v2+v1", "marks") go into idlemon_info with version.
func New(jobs []Job, vendor, mode, version string, now time.Time) *Metrics { return &Metrics{} }

// Leftovers counts runs an earlier idlemon left running, found and
// stopped at start (idlemon_leftover_runs_total) and their processes
// (idlemon_leftover_processes_total).
func (m *Metrics) Leftovers(runs, procs int) {}

// Started: job i started at now (idlemon_job_starts_total, and
// idlemon_job_running 1 from now).
func (m *Metrics) Started(i int, now time.Time) {}

// Stopped: job i's run ended at now for reason, after running ran. For a
// preemption, latency is from the scan that saw the foreign holder to the
// job's last process gone (idlemon_preemption_seconds histogram), and ran
// goes into idlemon_preempted_run_seconds (runs preempted soon after their
// start: a flapping GPU). GPU-seconds (idlemon_job_gpu_seconds_total)
// grow by ran * the job's GPUs.
func (m *Metrics) Stopped(i int, reason string, ran, latency time.Duration, now time.Time) {}

// Waiting sets why job i is not running now ("" while it runs or may
// start): idlemon_job_waiting{reason} is 1 for that reason; each time a
// reason begins, idlemon_job_start_refusals_total{reason} counts one.
func (m *Metrics) Waiting(i int, reason string) {}

// Usage sets job i's current use (idlemon_job_cpu_seconds,
// idlemon_job_memory_bytes, idlemon_job_oom_kills, idlemon_job_pids_max_hits:
// gauges of the current run; not written where -1).
func (m *Metrics) Usage(i int, u Usage) {}

// WriteTo writes the exposition text (Prometheus text format 0.0.4, HELP
// and TYPE for each family, label values escaped) as of now: a running
// job's GPU-seconds include its current run.
func (m *Metrics) WriteTo(w io.Writer, now time.Time) error { return errors.New("textfile: not written yet") }

// Write writes the text to dir/FileName(vendor) atomically (a temporary
// file in dir, renamed), mode 0644: node_exporter never reads half a file.
func (m *Metrics) Write(dir string, now time.Time) error { return errors.New("textfile: not written yet") }
