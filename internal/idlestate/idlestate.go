// Package idlestate is idlemon's state file: what idlemon writes on a GPU
// host (per GPU: idle, running our job, or busy, and who holds it), what
// `idlemon status` and `idlemon available` print, and what fetch reads in its
// SSH round trip to mark the job's processes as preemptible.
package idlestate

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// DefaultPath is where idlemon writes the file unless its config says otherwise.
const DefaultPath = "/run/idlemon/state.json"

// Version is the format's version; a reader refuses a newer one.
const Version = 1

// GPU states.
const (
	Idle = "idle" // nobody holds it
	Job  = "job"  // only our idle-time job holds it: free for anyone who wants it
	Busy = "busy" // someone else holds it (or a terminal user is active)
)

// File is the whole state file.
type File struct {
	Version int       `json:"version"`
	Updated time.Time `json:"updated"`
	PID     int       `json:"pid"` // idlemon's own pid
	Host    string    `json:"host,omitempty"`
	// Paused says why no job may run at all (an active terminal user), or "".
	Paused string    `json:"paused,omitempty"`
	GPUs   []GPU     `json:"gpus"`
	Jobs   []JobInfo `json:"jobs,omitempty"`
}

// GPU is one GPU's state.
type GPU struct {
	Index   int       `json:"index"`
	State   string    `json:"state"` // Idle, Job or Busy
	Since   time.Time `json:"since"`
	Holders []Holder  `json:"holders,omitempty"` // the processes that make it busy
}

// Holder is a process that holds a GPU's device file open.
type Holder struct {
	PID     int    `json:"pid"`
	User    string `json:"user"`
	Command string `json:"command"`
}

// JobInfo is one of idlemon's jobs.
type JobInfo struct {
	Name    string    `json:"name"` // the config section, e.g. process-miner
	GPUs    []int     `json:"gpus"`
	PGID    int       `json:"pgid,omitempty"` // 0 when not running
	PIDs    []int     `json:"pids,omitempty"` // the job's processes seen at the last scan
	Since   time.Time `json:"since,omitzero"`
	Running bool      `json:"running"`
	// LeaderStart and Procs let a restarted idlemon stop what a killed one
	// left behind, and only that: start times (clock ticks after boot,
	// /proc/PID/stat field 22) tell a reused pid apart.
	LeaderStart uint64      `json:"leader_start,omitempty"`
	Procs       []ProcStart `json:"procs,omitempty"`
	// Cgroup is the run's cgroup v2 folder; "" without cgroups.
	Cgroup string `json:"cgroup,omitempty"`
	// Waiting says why a job that does not run waits (busy_gpu,
	// terminal_user, other_job, backoff, min_idle), or "".
	Waiting string `json:"waiting,omitempty"`
}

// ProcStart is one process of a job with its start time.
type ProcStart struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// JobPIDs returns the set of pids that belong to idlemon's jobs.
func (f *File) JobPIDs() map[int]bool {
	m := map[int]bool{}
	for _, j := range f.Jobs {
		for _, p := range j.PIDs {
			m[p] = true
		}
	}
	return m
}

// Decode reads a state file.
func Decode(r io.Reader) (*File, error) {
	var f File
	dec := json.NewDecoder(io.LimitReader(r, 4<<20))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not an idlemon state file: %v", err)
	}
	if f.Version < 1 || f.Version > Version {
		return nil, fmt.Errorf("idlemon state file version %d, this program reads version %d", f.Version, Version)
	}
	return &f, nil
}

// Encode writes f as indented JSON.
func Encode(w io.Writer, f *File) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(f)
}
