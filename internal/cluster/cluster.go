// Package cluster turns load_data.csv's rows into hosts and GPUs, and says
// which GPUs are free, busy, reserved or failed.
//
// A GPU is free when no process holds it and it uses less memory than a
// threshold. Processes in the ignore list (ignore.Default: the persistence
// daemon, DCGM, a display server, nvidia-smi; plus the config's names) and
// processes of idlemon's idle-time job (preemptible) do not hold a GPU, and
// their memory is not counted. Utilization is never a reason: an idle L40S
// has reported 100 % with no process. A free GPU under a current reservation
// is reserved; a busy GPU stays busy and only shows the reservation. A GPU
// of a host that failed, or one the driver could not read (gpu_error), is
// failed.
package cluster

import (
	"github.com/gpumon/gpumon/internal/hoststatus"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/ignore"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
)

// States of a GPU.
const (
	Free     = "free"
	Busy     = "busy"
	Reserved = "reserved"
	Failed   = "failed"
)

// States lists the states in display order.
var States = []string{Free, Busy, Reserved, Failed}

// Notes a GPU may carry.
const (
	NoteIdleJob     = "idle-time job running"
	NoteMemNoProc   = "memory in use but no process visible (another container?)"
	NoteMemUnknown  = "memory use unknown"
	NoteHostDown    = "host down"
	NoteReservedFor = "reserved"
)

// Options decide the classification.
type Options struct {
	FreeMemMiB   float64  // a GPU using this much (not counting ignored processes) is busy
	Ignore       []string // programs that never hold a GPU, matched by ignore.Match on the command line
	Reservations []reservations.Reservation
	HostNames    map[string]string // lower-case host -> display name
	GPUNames     map[string]string // lower-case full name -> short name
	Now          time.Time         // for reservations' end dates
}

// Cluster is everything one CSV says.
type Cluster struct {
	Hosts    []*Host
	DataTime time.Time // the newest timestamp in the CSV; zero if none parsed
	Users    []*User
	Models   []*Model
	Count    map[string]int // GPUs per state
	GPUs     int            // GPUs known (down hosts' GPUs are not)
	Down     int            // hosts that did not answer
}

// Host is one GPU host.
type Host struct {
	Name      string // as in the CSV
	Display   string // from [host_names], else Name
	Status    hoststatus.Status
	Error     string // why it failed; warnings for an ok host
	Time      time.Time
	CPUs      loaddata.Int
	Load1     loaddata.Number
	MemUsed   loaddata.Number
	MemTotal  loaddata.Number
	GPUs      []*GPU
	Reserved  *reservations.Reservation // a whole-host reservation, for a down host's card
	Count     map[string]int
	ModelName string // the GPUs' full name when they all share it
}

// Up reports whether the host answered.
func (h *Host) Up() bool { return h.Status == hoststatus.OK }

// GPU is one GPU and what runs on it.
type GPU struct {
	Index       int  // nvidia-smi's index; see HasIndex
	HasIndex    bool // false for a GPU the driver lost, known by its bus id only
	UUID        string
	Name        string // full nvidia-smi name
	Short       string
	BusID       string
	Error       string
	Util        loaddata.Number
	MemUtil     loaddata.Number
	MemUsed     loaddata.Number
	MemTotal    loaddata.Number
	Temp        loaddata.Number
	Power       loaddata.Number
	PowerLimit  loaddata.Number
	Fan         loaddata.Number
	Procs       []*Proc
	State       string
	Notes       []string
	Reservation *reservations.Reservation // current, whatever the state
}

// ID is the GPU's index, else its bus id (a lost GPU has no index), else "?".
func (g *GPU) ID() string {
	switch {
	case g.HasIndex:
		return strconv.Itoa(g.Index)
	case g.BusID != "":
		return g.BusID
	case g.UUID != "":
		return g.UUID
	}
	return "?"
}

// Proc is one process on a GPU.
type Proc struct {
	PID         loaddata.Int
	User        string
	Command     string
	MemMiB      loaddata.Number
	ElapsedS    loaddata.Int
	Preemptible bool
	Ignored     bool
}

// Holds reports whether the process makes its GPU busy.
func (p *Proc) Holds() bool { return !p.Preemptible && !p.Ignored }

// User is what one user holds across the cluster.
type User struct {
	Name   string // "" when ps could not tell
	GPUs   int
	MemMiB float64
	Procs  int      // distinct processes: a pid on 8 GPUs of a host is one
	Hosts  []string // raw host names, sorted
}

// Model counts the GPUs of one short name. A GPU the driver lost has no
// name: it counts under its host's model when all the host's other GPUs
// share one, else under the model named "" (unknown). So the models' totals
// add up to the cluster's GPUs.
type Model struct {
	Name                string
	Free, Failed, Total int // Total counts every GPU of the model, failed ones too
}

// Build groups rows into hosts (in the CSV's order) and GPUs (by index) and
// classifies every GPU.
func Build(rows []loaddata.Row, o Options) *Cluster {
	b := NewBuilder(o)
	for i := range rows {
		b.Add(&rows[i])
	}
	return b.Cluster()
}

// Builder builds a Cluster one row at a time, so that a caller reading the
// CSV need not hold all its rows: Add each row, then call Cluster once.
type Builder struct {
	o      Options
	c      *Cluster
	hosts  map[string]*Host
	gpus   map[string]map[string]*GPU
	n      int    // rows added
	lastTS string // the last timestamp parsed, and its time
	lastT  time.Time
	lastOK bool
	short  map[string]string // full GPU name -> ShortName
}

// NewBuilder starts a cluster.
func NewBuilder(o Options) *Builder {
	return &Builder{o: o, c: &Cluster{Count: map[string]int{}}, hosts: map[string]*Host{}, gpus: map[string]map[string]*GPU{},
		short: map[string]string{}}
}

// Add adds one row. The Builder keeps the row's strings, not the row.
func (b *Builder) Add(r *loaddata.Row) {
	c, o := b.c, b.o
	i := b.n
	b.n++
	h := b.hosts[r.Host]
	if h == nil {
		h = &Host{Name: r.Host, Display: lookup(o.HostNames, r.Host, r.Host), Status: r.HostStatus,
			Error: r.HostError, CPUs: r.CPUs, Load1: r.Load1, MemUsed: r.HostMemUsedMiB, MemTotal: r.HostMemTotalMiB,
			Count: map[string]int{}}
		b.hosts[r.Host] = h
		b.gpus[r.Host] = map[string]*GPU{}
		c.Hosts = append(c.Hosts, h)
	}
	if r.Timestamp != b.lastTS { // rows of a host share their timestamp
		t, err := time.Parse(loaddata.TimeFormat, r.Timestamp)
		b.lastTS, b.lastT, b.lastOK = r.Timestamp, t, err == nil
	}
	if b.lastOK {
		if t := b.lastT; t.After(h.Time) {
			h.Time = t
		}
		if t := b.lastT; t.After(c.DataTime) {
			c.DataTime = t
		}
	}
	if r.HostStatus != hoststatus.OK {
		// a failed host's row has no GPU cells; one failed row makes the host failed
		h.Status, h.Error = r.HostStatus, r.HostError
		return
	}
	var key string
	switch {
	case r.GPUIndex.Valid:
		if r.GPUIndex.Value >= 0 && r.GPUIndex.Value < int64(len(indexKeys)) {
			key = indexKeys[r.GPUIndex.Value]
		} else {
			key = "i" + strconv.FormatInt(r.GPUIndex.Value, 10)
		}
	case r.GPUBusID != "":
		key = "b" + r.GPUBusID
	case r.GPUUUID != "":
		key = "u" + r.GPUUUID
	case r.GPUError != "":
		key = "r" + strconv.Itoa(i) // a GPU known only by its error
	default:
		return // an ok host without GPU cells: nothing to show
	}
	g := b.gpus[r.Host][key]
	if g == nil {
		g = &GPU{Index: int(r.GPUIndex.Value), HasIndex: r.GPUIndex.Valid, UUID: r.GPUUUID, Name: r.GPUName, BusID: r.GPUBusID, Error: r.GPUError,
			Util: r.GPUUtilPct, MemUtil: r.MemUtilPct, MemUsed: r.MemUsedMiB, MemTotal: r.MemTotalMiB,
			Temp: r.TempC, Power: r.PowerW, PowerLimit: r.PowerLimitW, Fan: r.FanPct}
		short, ok := b.short[g.Name]
		if !ok {
			short = ShortName(g.Name, o.GPUNames)
			b.short[g.Name] = short
		}
		g.Short = short
		b.gpus[r.Host][key] = g
		h.GPUs = append(h.GPUs, g)
	}
	if r.PID.Valid || r.Command != "" {
		g.Procs = append(g.Procs, &Proc{PID: r.PID, User: r.User, Command: r.Command, MemMiB: r.ProcessMemMiB,
			ElapsedS: r.ProcessElapsedS, Preemptible: bool(r.Preemptible), Ignored: ignore.Match(ignore.Process{Args: r.Command}, o.Ignore)})
	}
}

// indexKeys are the map keys of the usual GPU indexes, made once.
var indexKeys = func() []string {
	k := make([]string, 64)
	for i := range k {
		k[i] = "i" + strconv.Itoa(i)
	}
	return k
}()

// Cluster classifies every GPU and returns the cluster. Call it once, after
// the last Add.
func (b *Builder) Cluster() *Cluster {
	c, o := b.c, b.o
	b.hosts, b.gpus = nil, nil
	resv := map[string][]reservations.Reservation{}
	for _, r := range o.Reservations {
		if r.Active(o.Now) {
			resv[r.Host] = append(resv[r.Host], r)
		}
	}
	models := map[string]*Model{}
	users := map[string]*User{}
	type procKey struct {
		host string
		pid  int64
	}
	procs := map[procKey]bool{} // a pid on several GPUs of a host is one process
	for _, h := range c.Hosts {
		sort.SliceStable(h.GPUs, func(i, j int) bool {
			a, b := h.GPUs[i], h.GPUs[j]
			if a.HasIndex != b.HasIndex {
				return a.HasIndex // GPUs without an index last
			}
			return a.Index < b.Index
		})
		hr := resv[h.Name]
		if hr == nil {
			for name, list := range resv { // host names are case-insensitive
				if strings.EqualFold(name, h.Name) {
					hr = list
					break
				}
			}
		}
		for i := range hr {
			if hr[i].GPUs == nil {
				h.Reserved = &hr[i]
				break
			}
		}
		if !h.Up() {
			c.Down++
			h.GPUs = nil
			continue
		}
		h.ModelName = ""
		for _, g := range h.GPUs {
			if g.Name == "" { // a lost GPU has no name
				continue
			}
			if h.ModelName == "" {
				h.ModelName = g.Name
			} else if g.Name != h.ModelName {
				h.ModelName = ""
				break
			}
		}
		for _, g := range h.GPUs {
			for i := range hr {
				if g.HasIndex && hr[i].Covers(g.Index) || hr[i].GPUs == nil {
					g.Reservation = &hr[i]
					break
				}
			}
			classify(g, o.FreeMemMiB)
			c.Count[g.State]++
			h.Count[g.State]++
			c.GPUs++
			model := g.Short
			if g.Name == "" && h.ModelName != "" {
				model = ShortName(h.ModelName, o.GPUNames) // a lost GPU: its host's model
			}
			m := models[model]
			if m == nil {
				m = &Model{Name: model}
				models[model] = m
				c.Models = append(c.Models, m)
			}
			m.Total++
			switch g.State {
			case Free:
				m.Free++
			case Failed:
				m.Failed++
			}
			var seen map[string]bool
			if len(g.Procs) > 1 {
				seen = map[string]bool{}
			}
			counted := false // the one user of a GPU with one process
			for _, p := range g.Procs {
				if !p.Holds() {
					continue
				}
				u := users[p.User]
				if u == nil {
					u = &User{Name: p.User}
					users[p.User] = u
					c.Users = append(c.Users, u)
				}
				if !p.PID.Valid {
					u.Procs++ // no pid: nothing to tell it apart by
				} else if k := (procKey{h.Name, p.PID.Value}); !procs[k] {
					procs[k] = true
					u.Procs++
				}
				if p.MemMiB.Valid {
					u.MemMiB += p.MemMiB.Value
				}
				if seen == nil {
					if !counted {
						counted = true
						u.GPUs++
					}
				} else if !seen[p.User] {
					seen[p.User] = true
					u.GPUs++
				}
				if len(u.Hosts) == 0 || u.Hosts[len(u.Hosts)-1] != h.Name {
					u.Hosts = append(u.Hosts, h.Name)
				}
			}
		}
	}
	for _, u := range c.Users {
		sort.Strings(u.Hosts)
		u.Hosts = compact(u.Hosts)
	}
	sort.SliceStable(c.Users, func(i, j int) bool {
		a, b := c.Users[i], c.Users[j]
		if a.GPUs != b.GPUs {
			return a.GPUs > b.GPUs
		}
		return a.Name < b.Name
	})
	// the biggest models first, the unknown one last
	sort.SliceStable(c.Models, func(i, j int) bool {
		a, b := c.Models[i], c.Models[j]
		if (a.Name == "") != (b.Name == "") {
			return b.Name == ""
		}
		if a.Total != b.Total {
			return a.Total > b.Total
		}
		return a.Name < b.Name
	})
	return c
}

// classify sets g's state and notes.
func classify(g *GPU, freeMiB float64) {
	g.Notes = nil
	if g.Error != "" {
		g.State = Failed
		return
	}
	holders := false
	idleJob := false
	used := g.MemUsed.Value
	memKnown := g.MemUsed.Valid
	for _, p := range g.Procs {
		switch {
		case p.Holds():
			holders = true
		case p.MemMiB.Valid:
			used -= p.MemMiB.Value
		case p.Preemptible:
			memKnown = false // its memory is the job's, but how much is not known
		}
		if p.Preemptible {
			idleJob = true
		}
	}
	switch {
	case holders:
		g.State = Busy
	case memKnown && used >= freeMiB:
		g.State = Busy
		g.Notes = append(g.Notes, NoteMemNoProc)
	default:
		g.State = Free
		if !g.MemUsed.Valid {
			g.Notes = append(g.Notes, NoteMemUnknown)
		}
		if idleJob {
			g.Notes = append(g.Notes, NoteIdleJob)
		}
		if g.Reservation != nil {
			g.State = Reserved
		}
	}
}

// ShortName is the [gpu_names] name for full, else full without the vendor
// words: "NVIDIA H100 80GB HBM3" is "H100 80GB HBM3", "NVIDIA GeForce RTX 2080
// SUPER" is "RTX 2080 SUPER", "Tesla V100-SXM2-16GB" is "V100-SXM2-16GB".
func ShortName(full string, names map[string]string) string {
	if s, ok := names[strings.ToLower(strings.TrimSpace(full))]; ok {
		return s
	}
	s := strings.TrimSpace(full)
	for _, p := range []string{"NVIDIA ", "GeForce ", "Tesla ", "Quadro "} {
		if len(s) > len(p) && strings.EqualFold(s[:len(p)], p) {
			s = strings.TrimSpace(s[len(p):])
		}
	}
	return s
}

func lookup(m map[string]string, key, def string) string {
	if v, ok := m[strings.ToLower(key)]; ok {
		return v
	}
	return def
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
