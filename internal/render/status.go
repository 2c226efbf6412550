package render

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
)

// StatusVersion is status.json's schema version. It changes only when a
// field changes meaning or goes away; new fields may appear in any version.
// Version 2 leaves out keys whose value is empty (docs/render.md lists
// them) and names a host's GPU model once, on the host: at 10,000 hosts
// version 1 repeated some 16 MB of "", false, null and model names.
const StatusVersion = 2

// status is status.json: the cluster for scripts. A reading that is not
// known is null, never 0. Times are RFC 3339 in UTC.
type status struct {
	Version     int                 `json:"version"`
	Generated   string              `json:"generated"`   // when render ran
	DataTime    *string             `json:"data_time"`   // the CSV's newest timestamp
	AgeSeconds  *float64            `json:"age_seconds"` // generated - data_time
	Stale       bool                `json:"stale"`       // age over stale_after, or no time
	StaleAfterS float64             `json:"stale_after_seconds"`
	Live        *liveStatus         `json:"live,omitempty"` // fetch -every wrote it
	Privacy     *statusPrivacy      `json:"privacy,omitempty"`
	Summary     statusSummary       `json:"summary"`
	Hosts       []statusHost        `json:"hosts"`
	Users       []statusUser        `json:"users"`
	Warnings    []string            `json:"warnings"`
	States      []string            `json:"states"` // the values "state" takes
	IdleHeld    []statusIdleHeldGPU `json:"idle_held"`
	History     *statusHistoryView  `json:"history"`
}

// statusSummary counts GPUs by state; GPUs of hosts that are down are not
// known and not counted.
type statusSummary struct {
	GPUs      int           `json:"gpus"`
	Free      int           `json:"free"`
	Busy      int           `json:"busy"`
	Reserved  int           `json:"reserved"`
	Failed    int           `json:"failed"`
	Degraded  int           `json:"degraded"` // GPUs whose health is degraded, in whatever state
	Hosts     int           `json:"hosts"`
	HostsDown int           `json:"hosts_down"`
	Models    []statusModel `json:"models"`
}

// statusModel counts one GPU model's GPUs. Every known GPU counts under a
// model, so the totals add up to summary.gpus: a lost GPU (no name) under
// its host's model, or under the name "" when that is not known either.
type statusModel struct {
	Name   string `json:"name"`             // short name; "" for GPUs of unknown model
	Vendor string `json:"vendor,omitempty"` // its GPUs' vendor; left out when they are not one vendor's
	Free   int    `json:"free"`
	Failed int    `json:"failed"`
	Total  int    `json:"total"` // failed GPUs included
}

// statusHost is one host. Keys marked omitempty or omitzero are left out
// when empty (schema version 2): most hosts have no error, reservation or
// history of being down, and each such key cost every host its bytes.
type statusHost struct {
	Name        string             `json:"name"`
	Display     string             `json:"display_name"`
	Up          bool               `json:"up"`
	Status      string             `json:"status"`          // load_data.csv's host_status
	Error       string             `json:"error,omitempty"` // why it is down; warnings for an up host
	Timestamp   *string            `json:"timestamp"`
	CPUs        *int64             `json:"cpus"`
	Load1       *float64           `json:"load1"`
	MemUsedMiB  *float64           `json:"mem_used_mib"`
	MemTotalMiB *float64           `json:"mem_total_mib"`
	Reservation *statusReservation `json:"reservation,omitempty"` // a whole-host reservation
	// The name, short name and vendor that every GPU of the host has,
	// when they all have the same (left out otherwise): its GPUs then
	// leave out theirs. A host of 8 identical GPUs would repeat them 8
	// times.
	GPUName      string      `json:"gpu_name,omitempty"`
	GPUShortName string      `json:"gpu_short_name,omitempty"`
	GPUVendor    string      `json:"gpu_vendor,omitempty"`
	GPUs         []statusGPU `json:"gpus"` // empty for a host that is down
	// For a host that is down, from the history (left out without it):
	// since when (the first failed snapshot since it last answered; left
	// out when it never answered in the history), and its GPUs as last
	// seen ([] when none was seen: omitzero keeps an empty list).
	DownSince     *string          `json:"down_since,omitempty"`
	LastKnownGPUs []statusKnownGPU `json:"last_known_gpus,omitzero"`
}

// statusKnownGPU is a GPU of a down host as last seen.
type statusKnownGPU struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// statusGPU is one GPU. Its readings are always there (null when not
// known); notes, error, reservation and processes are left out when empty.
type statusGPU struct {
	Index *int   `json:"index"` // null for a GPU the driver lost (see bus_id)
	UUID  string `json:"uuid"`
	// nil (left out): the host's gpu_name / gpu_short_name / gpu_vendor;
	// a GPU of a host without one has its own, "" included (a lost GPU's
	// name). The vendor is nvidia or amd.
	Name        *string            `json:"name,omitempty"`
	ShortName   *string            `json:"short_name,omitempty"`
	Vendor      *string            `json:"vendor,omitempty"`
	BusID       string             `json:"bus_id"`
	State       string             `json:"state"` // free, busy, reserved or failed
	Health      statusHealth       `json:"health"`
	Notes       []string           `json:"notes,omitempty"`
	Error       string             `json:"error,omitempty"`
	UtilPct     *float64           `json:"util_pct"`
	MemUtilPct  *float64           `json:"mem_util_pct"`
	MemUsedMiB  *float64           `json:"mem_used_mib"`
	MemTotalMiB *float64           `json:"mem_total_mib"`
	TempC       *float64           `json:"temperature_c"`
	PowerW      *float64           `json:"power_w"`
	PowerLimitW *float64           `json:"power_limit_w"`
	FanPct      *float64           `json:"fan_pct"`
	Reservation *statusReservation `json:"reservation,omitempty"`
	// UnreservedUsers hold the GPU while its reservation is someone else's
	// (publish.UnreservedHolders).
	UnreservedUsers []string        `json:"unreserved_users,omitempty"`
	Processes       []statusProcess `json:"processes,omitempty"`
}

// statusProcess is one process on a GPU. Preemptible and ignored processes
// do not make their GPU busy. Who it runs for is load_data.csv's six
// columns, whole and under their names there. Those six and the two flags
// are left out when "" or false: on most fleets nearly every process has
// none of them, and at 10,000 hosts writing them cost 8 MB.
type statusProcess struct {
	PID            *int64   `json:"pid"`
	User           string   `json:"user"`
	Command        string   `json:"command"`
	MemMiB         *float64 `json:"mem_mib"`
	SMPct          *float64 `json:"sm_pct,omitempty"` // its own SM utilization (pmon); left out when not known
	ElapsedS       *int64   `json:"elapsed_s"`
	Preemptible    bool     `json:"preemptible,omitempty"`
	Ignored        bool     `json:"ignored,omitempty"`
	SlurmJob       string   `json:"slurm_job,omitempty"`
	SlurmJobName   string   `json:"slurm_job_name,omitempty"`
	SlurmPartition string   `json:"slurm_partition,omitempty"`
	Container      string   `json:"container,omitempty"`
	ContainerName  string   `json:"container_name,omitempty"`
	Pod            string   `json:"pod,omitempty"`
}

// statusHealth is what the [health] policy made of a GPU's readings: ok,
// degraded (still free, busy or reserved) or failed, and each condition
// behind it ([] for ok).
type statusHealth struct {
	State    string          `json:"state"` // ok, degraded or failed
	Findings []statusFinding `json:"findings"`
}

// statusFinding is one condition a GPU is in.
type statusFinding struct {
	Condition string `json:"condition"` // one of health.Conditions
	Severity  string `json:"severity"`  // failed or degraded
	Detail    string `json:"detail"`
}

// noFindings is every healthy GPU's findings: [], allocated once.
var noFindings = []statusFinding{}

// healthOf is g's statusHealth.
func healthOf(h health.Health) statusHealth {
	if h.State == health.OK {
		return statusHealth{State: "ok", Findings: noFindings}
	}
	s := statusHealth{State: h.State, Findings: make([]statusFinding, 0, len(h.Findings))}
	for _, f := range h.Findings {
		s.Findings = append(s.Findings, statusFinding{Condition: f.Condition, Severity: f.Severity, Detail: f.Detail})
	}
	return s
}

// statusReservation is a current reservation.
type statusReservation struct {
	Name    string  `json:"name"`
	Until   *string `json:"until"` // null: no end date
	Comment string  `json:"comment"`
}

// statusUser is what one user holds (preemptible and ignored processes not
// counted).
type statusUser struct {
	User      string   `json:"user"` // "" when ps could not tell
	GPUs      int      `json:"gpus"`
	MemMiB    float64  `json:"mem_mib"`
	Processes int      `json:"processes"` // distinct: a pid on several GPUs of a host is one
	Hosts     []string `json:"hosts"`
	// the Slurm jobs and the containers (by name, else short id) of
	// the processes counted, each once, in natural order; [] for none
	SlurmJobs  []string `json:"slurm_jobs"`
	Containers []string `json:"containers"`
	// GPU-hours over the last 24h, 7d and 30d; null without history
	GPUHoursByWindow *statusHours `json:"gpu_hours"`
	IdleGPUHours     *statusHours `json:"idle_gpu_hours"`
}

// statusPrefix is Status up to its hosts, in the same order.
type statusPrefix struct {
	Version     int            `json:"version"`
	Generated   string         `json:"generated"`
	DataTime    *string        `json:"data_time"`
	AgeSeconds  *float64       `json:"age_seconds"`
	Stale       bool           `json:"stale"`
	StaleAfterS float64        `json:"stale_after_seconds"`
	Live        *liveStatus    `json:"live,omitempty"`
	Privacy     *statusPrivacy `json:"privacy,omitempty"`
	Summary     statusSummary  `json:"summary"`
}

// statusPrivacy says what [render] commands and users hid, so that a
// script tells a hidden command ("") from one ps could not read; absent
// when everything is shown.
type statusPrivacy struct {
	Commands string `json:"commands"` // "show", "program" or "hide"
	Users    string `json:"users"`    // "show" or "hide" (pseudonyms)
}

func statusHead(r *Report) *statusPrefix {
	c := r.Cluster
	s := &statusPrefix{
		Version:     StatusVersion,
		Generated:   r.Now.UTC().Format(time.RFC3339),
		Stale:       r.stale(),
		StaleAfterS: r.Config.StaleAfter.Seconds(),
		Live:        statusLive(r.Config.LiveEvery),
		Privacy:     statusPrivacyOf(r.Config),
		Summary: statusSummary{GPUs: c.GPUs, Free: c.Count[cluster.Free], Busy: c.Count[cluster.Busy],
			Reserved: c.Count[cluster.Reserved], Failed: c.Count[cluster.Failed], Degraded: c.Degraded, Hosts: len(c.Hosts), HostsDown: c.Down,
			Models: []statusModel{}},
	}
	if !c.DataTime.IsZero() {
		t := c.DataTime.UTC().Format(time.RFC3339)
		s.DataTime = &t
		if age := r.age(); age >= 0 { // null when dated ahead of this clock
			a := age.Seconds()
			s.AgeSeconds = &a
		}
	}
	for _, m := range c.Models {
		s.Summary.Models = append(s.Summary.Models, statusModel{Name: m.Name, Vendor: m.Vendor, Free: m.Free, Failed: m.Failed, Total: m.Total})
	}
	return s
}

func statusUsers(c *cluster.Cluster) []statusUser {
	users := make([]statusUser, 0, len(c.Users))
	for _, u := range c.Users {
		users = append(users, statusUser{User: u.Name, GPUs: u.GPUs, MemMiB: u.MemMiB, Processes: u.Procs,
			Hosts: append([]string{}, u.Hosts...), SlurmJobs: append([]string{}, u.Jobs...),
			Containers: append([]string{}, u.Containers...)})
	}
	return users
}

func statusHostOf(h *cluster.Host, hist *history.Summary) statusHost {
	var sh statusHost
	fillStatusHost(&sh, h, hist, &readings{})
	return sh
}

// fillStatusHost makes *sh h's StatusHost, reusing its GPUs' and their
// processes' slices and taking its readings from nums: JSON fills one
// statusHost host after host.
func fillStatusHost(sh *statusHost, h *cluster.Host, hist *history.Summary, nums *readings) {
	gpus := sh.GPUs[:0]
	if gpus == nil {
		gpus = make([]statusGPU, 0, len(h.GPUs))
	}
	*sh = statusHost{Name: h.Name, Display: h.Display, Up: h.Up(), Status: string(h.Status), Error: h.Error,
		CPUs: nums.int(h.CPUs), Load1: nums.float(h.Load1), MemUsedMiB: nums.float(h.MemUsed), MemTotalMiB: nums.float(h.MemTotal),
		Reservation: resvOf(h.Reserved), GPUs: gpus}
	if !h.Time.IsZero() {
		t := h.Time.UTC().Format(time.RFC3339)
		sh.Timestamp = &t
	}
	sh.GPUName, sh.GPUShortName = sharedName(h.GPUs, func(g *cluster.GPU) string { return g.Name }),
		sharedName(h.GPUs, func(g *cluster.GPU) string { return g.Short })
	sh.GPUVendor = sharedName(h.GPUs, func(g *cluster.GPU) string { return g.Vendor })
	for i, g := range h.GPUs {
		var procs []statusProcess
		if i < cap(gpus) {
			procs = gpus[:cap(gpus)][i].Processes[:0] // the last host's
		}
		sg := statusGPU{Index: nil, UUID: g.UUID, BusID: g.BusID,
			State: g.State, Health: healthOf(g.Health), Notes: g.Notes, Error: g.Error,
			UtilPct: nums.float(g.Util), MemUtilPct: nums.float(g.MemUtil), MemUsedMiB: nums.float(g.MemUsed), MemTotalMiB: nums.float(g.MemTotal),
			TempC: nums.float(g.Temp), PowerW: nums.float(g.Power), PowerLimitW: nums.float(g.PowerLimit), FanPct: nums.float(g.Fan),
			Reservation: resvOf(g.Reservation), UnreservedUsers: unreservedUsers(g), Processes: procs}
		if g.HasIndex {
			i := g.Index
			sg.Index = &i
		}
		if sh.GPUName == "" {
			sg.Name = &g.Name
		}
		if sh.GPUShortName == "" {
			sg.ShortName = &g.Short
		}
		if sh.GPUVendor == "" {
			sg.Vendor = &g.Vendor
		}
		for _, p := range g.Procs {
			sg.Processes = append(sg.Processes, statusProcess{PID: nums.int(p.PID), User: p.User, Command: p.Command,
				MemMiB: nums.float(p.MemMiB), SMPct: nums.float(p.SMPct), ElapsedS: nums.int(p.ElapsedS), Preemptible: p.Preemptible, Ignored: p.Ignored,
				SlurmJob: p.SlurmJob, SlurmJobName: p.SlurmJobName, SlurmPartition: p.SlurmPartition,
				Container: p.Container, ContainerName: p.ContainerName, Pod: p.Pod})
		}
		sh.GPUs = append(sh.GPUs, sg)
	}
	if d := downOf(h, hist); d != nil {
		if d.LastUp != 0 {
			t := time.Unix(d.DownSince, 0).UTC().Format(time.RFC3339)
			sh.DownSince = &t
		}
		sh.LastKnownGPUs = []statusKnownGPU{}
		for _, g := range d.GPUs {
			sh.LastKnownGPUs = append(sh.LastKnownGPUs, statusKnownGPU{ID: g.ID, Name: g.Name})
		}
	}
}

// readings are what a StatusHost's readings point to, appended one after
// another rather than allocated each: at 1,000 hosts, 100,000 of them. A
// reading's value never changes once handed out; reset reuses the
// slices for the next host once the last is written.
type readings struct {
	floats []float64
	ints   []int64
}

func (r *readings) reset() { r.floats, r.ints = r.floats[:0], r.ints[:0] }

// float is n's value, nil when not known.
func (r *readings) float(n loaddata.Number) *float64 {
	if !n.Valid {
		return nil
	}
	r.floats = append(r.floats, n.Value)
	return &r.floats[len(r.floats)-1]
}

// int is n's value, nil when not known.
func (r *readings) int(n loaddata.Int) *int64 {
	if !n.Valid {
		return nil
	}
	r.ints = append(r.ints, n.Value)
	return &r.ints[len(r.ints)-1]
}

// sharedName is what field gives for every GPU of gpus when it gives all
// the same, non-empty string; else "".
func sharedName(gpus []*cluster.GPU, field func(*cluster.GPU) string) string {
	if len(gpus) == 0 {
		return ""
	}
	name := field(gpus[0])
	for _, g := range gpus[1:] {
		if field(g) != name {
			return ""
		}
	}
	return name
}

// writeJSON writes status.json, one host at a time: the whole of it is never in
// memory. The bytes are what encoding/json would write for the whole
// Status (a test checks that).
func writeJSON(w io.Writer, r *Report) error {
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriterSize(w, 64<<10)
	}
	head, err := json.Marshal(statusHead(r))
	if err != nil {
		return err
	}
	bw.Write(head[:len(head)-1]) // without its closing brace
	bw.WriteString(`,"hosts":[`)
	var b []byte
	var sh statusHost
	var nums readings
	for i, h := range r.Cluster.Hosts {
		if i > 0 {
			bw.WriteByte(',')
		}
		nums.reset() // the last host is written
		fillStatusHost(&sh, h, r.History, &nums)
		var ok bool
		if b, ok = appendStatusHost(b[:0], &sh); !ok {
			var err error
			if b, err = json.Marshal(sh); err != nil { // its error, then
				return err
			}
		}
		bw.Write(b)
	}
	bw.WriteString(`],"users":`)
	for _, part := range []struct {
		name string
		v    any
	}{{"", withHistoryUsers(statusUsers(r.Cluster), r.History)}, {"warnings", append([]string{}, r.Warnings...)},
		{"states", cluster.States}, {"idle_held", statusIdleHeld(r.History)}, {"history", statusHistory(r.History)}} {
		if part.name != "" {
			bw.WriteString(`,"` + part.name + `":`)
		}
		b, err := json.Marshal(part.v)
		if err != nil {
			return err
		}
		bw.Write(b)
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

func resvOf(r *reservations.Reservation) *statusReservation {
	if r == nil {
		return nil
	}
	s := &statusReservation{Name: r.Name, Comment: r.Comment}
	if !r.Until.IsZero() {
		t := r.Until.UTC().Format(time.RFC3339)
		s.Until = &t
	}
	return s
}

// downOf is what the history knows of h when it is down, else nil.
func downOf(h *cluster.Host, hist *history.Summary) *history.HostState {
	if hist == nil || h.Up() {
		return nil
	}
	return hist.Down[h.Name]
}

// liveStatus says that fetch's live mode made the file, and how often it
// polls.
func statusPrivacyOf(cfg *Config) *statusPrivacy {
	if cfg.showsAll() {
		return nil
	}
	return &statusPrivacy{Commands: cfg.Commands, Users: cfg.Users}
}

type liveStatus struct {
	EveryS float64 `json:"every_s"`
}

func statusLive(every time.Duration) *liveStatus {
	if every <= 0 {
		return nil
	}
	return &liveStatus{EveryS: every.Seconds()}
}

// liveText is the page's "15s" for live mode, "" otherwise.
func liveText(every time.Duration) string {
	if every <= 0 {
		return ""
	}
	return settingText(every)
}

// statusUserHours is a user's GPU-hours per window for status.json.
type statusHours struct {
	H24 float64 `json:"24h"`
	D7  float64 `json:"7d"`
	D30 float64 `json:"30d"`
}

func hoursOf(m map[string]float64) *statusHours {
	return &statusHours{H24: round(m["24h"], 3), D7: round(m["7d"], 3), D30: round(m["30d"], 3)}
}

// statusIdleHeldGPU is one GPU idle-held now.
type statusIdleHeldGPU struct {
	Host       string   `json:"host"`
	GPU        string   `json:"gpu"`
	Users      []string `json:"users"`
	Since      string   `json:"since"`
	Hours      float64  `json:"hours"`
	MemUsedMiB float64  `json:"mem_used_mib"`
}

// statusHistoryView says what history there is; null in status.json when
// history is off or could not be read.
type statusHistoryView struct {
	First     *string `json:"first"`
	Snapshots int     `json:"snapshots"`
}

func statusIdleHeld(h *history.Summary) []statusIdleHeldGPU {
	out := []statusIdleHeldGPU{}
	if h == nil {
		return out
	}
	for _, sp := range h.IdleHeld {
		out = append(out, statusIdleHeldGPU{Host: sp.Host, GPU: sp.GPU, Users: append([]string{}, sp.Users...),
			Since: time.Unix(sp.Start, 0).UTC().Format(time.RFC3339), Hours: round(float64(sp.Seconds())/3600, 3), MemUsedMiB: sp.MemMiB})
	}
	return out
}

func statusHistory(h *history.Summary) *statusHistoryView {
	if h == nil {
		return nil
	}
	s := &statusHistoryView{Snapshots: h.Snapshots}
	if !h.First.IsZero() {
		t := h.First.UTC().Format(time.RFC3339)
		s.First = &t
	}
	return s
}

// withHistoryUsers adds to the current users everyone with GPU-hours in
// the last 30 days (holding no GPU now), and each one's hours.
func withHistoryUsers(users []statusUser, h *history.Summary) []statusUser {
	if h == nil {
		return users
	}
	idx := map[string]int{}
	for i, u := range users {
		idx[u.User] = i
	}
	for _, uh := range h.Users {
		i, ok := idx[uh.User]
		if !ok {
			if uh.GPUHours["30d"] == 0 && uh.IdleHours["30d"] == 0 {
				continue
			}
			users = append(users, statusUser{User: uh.User, Hosts: []string{}})
			i = len(users) - 1
			idx[uh.User] = i
		}
		users[i].GPUHoursByWindow = hoursOf(uh.GPUHours)
		users[i].IdleGPUHours = hoursOf(uh.IdleHours)
	}
	for i := range users {
		if users[i].GPUHoursByWindow == nil {
			users[i].GPUHoursByWindow, users[i].IdleGPUHours = &statusHours{}, &statusHours{}
		}
	}
	return users
}

// status.json's hosts are most of its bytes (3 MB at 1,000 hosts × 8
// GPUs) and encoding/json's reflection most of its time: they are
// appended by hand, byte for byte as encoding/json writes them (a test
// and FuzzStatusJSON compare the two). statusKeys holds the encoder to
// the structs' json tags: a field added to one of them without the
// encoder stops the program when it starts.

// statusKeys are the json tags of the structs appendStatusHost writes,
// field by field, as it writes them.
var statusKeys = map[reflect.Type][]string{
	reflect.TypeFor[statusHost](): {"name", "display_name", "up", "status", "error,omitempty", "timestamp", "cpus", "load1",
		"mem_used_mib", "mem_total_mib", "reservation,omitempty", "gpu_name,omitempty", "gpu_short_name,omitempty", "gpu_vendor,omitempty", "gpus",
		"down_since,omitempty", "last_known_gpus,omitzero"},
	reflect.TypeFor[statusGPU](): {"index", "uuid", "name,omitempty", "short_name,omitempty", "vendor,omitempty", "bus_id", "state", "health", "notes,omitempty",
		"error,omitempty", "util_pct", "mem_util_pct", "mem_used_mib", "mem_total_mib", "temperature_c", "power_w",
		"power_limit_w", "fan_pct", "reservation,omitempty", "unreserved_users,omitempty", "processes,omitempty"},
	reflect.TypeFor[statusProcess](): {"pid", "user", "command", "mem_mib", "sm_pct,omitempty", "elapsed_s", "preemptible,omitempty", "ignored,omitempty",
		"slurm_job,omitempty", "slurm_job_name,omitempty", "slurm_partition,omitempty", "container,omitempty",
		"container_name,omitempty", "pod,omitempty"},
	reflect.TypeFor[statusReservation](): {"name", "until", "comment"},
	reflect.TypeFor[statusKnownGPU]():    {"id", "name"},
	reflect.TypeFor[statusHealth]():      {"state", "findings"},
	reflect.TypeFor[statusFinding]():     {"condition", "severity", "detail"},
}

var _ = checkStatusKeys()

func checkStatusKeys() bool {
	for t, keys := range statusKeys {
		var tags []string
		for i := range t.NumField() {
			tags = append(tags, t.Field(i).Tag.Get("json"))
		}
		if !slices.Equal(tags, keys) {
			panic(fmt.Sprintf("render: %s's json tags are %q; appendStatusHost writes %q", t, tags, keys))
		}
	}
	return true
}

// appendStatusHost appends h as json.Marshal writes it; ok false where it
// cannot (a number that is not finite, which json.Marshal refuses).
func appendStatusHost(b []byte, h *statusHost) (_ []byte, ok bool) {
	ok = true
	b = append(b, `{"name":`...)
	b = appendJSONString(b, h.Name)
	b = append(b, `,"display_name":`...)
	b = appendJSONString(b, h.Display)
	b = append(b, `,"up":`...)
	b = strconv.AppendBool(b, h.Up)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, h.Status)
	if h.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, h.Error)
	}
	b = append(b, `,"timestamp":`...)
	b = appendJSONStringp(b, h.Timestamp)
	b = append(b, `,"cpus":`...)
	b = appendJSONIntp(b, h.CPUs)
	b = append(b, `,"load1":`...)
	b = appendJSONFloatp(b, h.Load1, &ok)
	b = append(b, `,"mem_used_mib":`...)
	b = appendJSONFloatp(b, h.MemUsedMiB, &ok)
	b = append(b, `,"mem_total_mib":`...)
	b = appendJSONFloatp(b, h.MemTotalMiB, &ok)
	if h.Reservation != nil {
		b = append(b, `,"reservation":`...)
		b = appendStatusReservation(b, h.Reservation)
	}
	if h.GPUName != "" {
		b = append(b, `,"gpu_name":`...)
		b = appendJSONString(b, h.GPUName)
	}
	if h.GPUShortName != "" {
		b = append(b, `,"gpu_short_name":`...)
		b = appendJSONString(b, h.GPUShortName)
	}
	if h.GPUVendor != "" {
		b = append(b, `,"gpu_vendor":`...)
		b = appendJSONString(b, h.GPUVendor)
	}
	b = append(b, `,"gpus":`...)
	if h.GPUs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range h.GPUs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStatusGPU(b, &h.GPUs[i], &ok)
		}
		b = append(b, ']')
	}
	if h.DownSince != nil {
		b = append(b, `,"down_since":`...)
		b = appendJSONString(b, *h.DownSince)
	}
	if h.LastKnownGPUs != nil {
		b = append(b, `,"last_known_gpus":[`...)
		for i, g := range h.LastKnownGPUs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendJSONString(b, g.ID)
			b = append(b, `,"name":`...)
			b = appendJSONString(b, g.Name)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), ok
}

// appendStatusGPU appends g as json.Marshal writes it; *ok false for a
// number that is not finite.
func appendStatusGPU(b []byte, g *statusGPU, ok *bool) []byte {
	b = append(b, `{"index":`...)
	if g.Index == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*g.Index), 10)
	}
	b = append(b, `,"uuid":`...)
	b = appendJSONString(b, g.UUID)
	if g.Name != nil {
		b = append(b, `,"name":`...)
		b = appendJSONString(b, *g.Name)
	}
	if g.ShortName != nil {
		b = append(b, `,"short_name":`...)
		b = appendJSONString(b, *g.ShortName)
	}
	if g.Vendor != nil {
		b = append(b, `,"vendor":`...)
		b = appendJSONString(b, *g.Vendor)
	}
	b = append(b, `,"bus_id":`...)
	b = appendJSONString(b, g.BusID)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, g.State)
	b = appendStatusHealth(b, &g.Health)
	if len(g.Notes) > 0 {
		b = append(b, `,"notes":[`...)
		for i, n := range g.Notes {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, n)
		}
		b = append(b, ']')
	}
	if g.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, g.Error)
	}
	for _, f := range []struct {
		key string
		v   *float64
	}{{`,"util_pct":`, g.UtilPct}, {`,"mem_util_pct":`, g.MemUtilPct}, {`,"mem_used_mib":`, g.MemUsedMiB},
		{`,"mem_total_mib":`, g.MemTotalMiB}, {`,"temperature_c":`, g.TempC}, {`,"power_w":`, g.PowerW},
		{`,"power_limit_w":`, g.PowerLimitW}, {`,"fan_pct":`, g.FanPct}} {
		b = append(b, f.key...)
		b = appendJSONFloatp(b, f.v, ok)
	}
	if g.Reservation != nil {
		b = append(b, `,"reservation":`...)
		b = appendStatusReservation(b, g.Reservation)
	}
	if len(g.UnreservedUsers) > 0 {
		b = append(b, `,"unreserved_users":[`...)
		for i, u := range g.UnreservedUsers {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, u)
		}
		b = append(b, ']')
	}
	if len(g.Processes) > 0 {
		b = append(b, `,"processes":[`...)
		for i := range g.Processes {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStatusProcess(b, &g.Processes[i], ok)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendStatusProcess appends p as json.Marshal writes it; *ok false for
// a number that is not finite.
func appendStatusProcess(b []byte, p *statusProcess, ok *bool) []byte {
	b = append(b, `{"pid":`...)
	b = appendJSONIntp(b, p.PID)
	b = append(b, `,"user":`...)
	b = appendJSONString(b, p.User)
	b = append(b, `,"command":`...)
	b = appendJSONString(b, p.Command)
	b = append(b, `,"mem_mib":`...)
	b = appendJSONFloatp(b, p.MemMiB, ok)
	if p.SMPct != nil {
		b = append(b, `,"sm_pct":`...)
		b = appendJSONFloatp(b, p.SMPct, ok)
	}
	b = append(b, `,"elapsed_s":`...)
	b = appendJSONIntp(b, p.ElapsedS)
	if p.Preemptible {
		b = append(b, `,"preemptible":true`...)
	}
	if p.Ignored {
		b = append(b, `,"ignored":true`...)
	}
	for _, f := range []struct{ key, v string }{{`,"slurm_job":`, p.SlurmJob}, {`,"slurm_job_name":`, p.SlurmJobName},
		{`,"slurm_partition":`, p.SlurmPartition}, {`,"container":`, p.Container},
		{`,"container_name":`, p.ContainerName}, {`,"pod":`, p.Pod}} {
		if f.v != "" {
			b = append(b, f.key...)
			b = appendJSONString(b, f.v)
		}
	}
	return append(b, '}')
}

// appendStatusHealth appends a GPU's "health" key and its object.
func appendStatusHealth(b []byte, h *statusHealth) []byte {
	b = append(b, `,"health":{"state":`...)
	b = appendJSONString(b, h.State)
	if h.Findings == nil {
		return append(b, `,"findings":null}`...)
	}
	b = append(b, `,"findings":[`...)
	for i, f := range h.Findings {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"condition":`...)
		b = appendJSONString(b, f.Condition)
		b = append(b, `,"severity":`...)
		b = appendJSONString(b, f.Severity)
		b = append(b, `,"detail":`...)
		b = appendJSONString(b, f.Detail)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

func appendStatusReservation(b []byte, r *statusReservation) []byte {
	b = append(b, `{"name":`...)
	b = appendJSONString(b, r.Name)
	b = append(b, `,"until":`...)
	b = appendJSONStringp(b, r.Until)
	b = append(b, `,"comment":`...)
	b = appendJSONString(b, r.Comment)
	return append(b, '}')
}

func appendJSONStringp(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}

func appendJSONIntp(b []byte, n *int64) []byte {
	if n == nil {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, *n, 10)
}

// appendJSONFloatp appends *f as encoding/json writes a float64 (ES6's
// number to string), null for nil; *ok false for a number not finite.
func appendJSONFloatp(b []byte, f *float64, ok *bool) []byte {
	if f == nil {
		return append(b, "null"...)
	}
	v := *f
	if math.IsInf(v, 0) || math.IsNaN(v) {
		*ok = false
		return b
	}
	if abs := math.Abs(v); abs == 0 || (abs >= 1e-6 && abs < 1e21) {
		return appendFloat(b, v)
	}
	b = strconv.AppendFloat(b, v, 'e', -1, 64)
	// e-09 to e-9, as encoding/json
	n := len(b)
	if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b
}

// appendJSONString appends s quoted as encoding/json does (HTML escaped:
// <, > and & as \u003c...; invalid UTF-8 as \ufffd; U+2028 and U+2029
// escaped).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
