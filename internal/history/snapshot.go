// Package history keeps every snapshot render reads, and what follows from
// them: GPU-hours per user, GPUs held idle for hours (idle-held spells),
// the fleet's states over time, and the last known GPUs of a host that went
// down. The store is SQLite (modernc.org/sqlite: pure Go, so the binaries
// stay static); the accounting is a fold over the snapshots in time order
// (fold.go), pure and tested by tables; the store (store.go) runs it, keeps
// its checkpoints, and replays it when a snapshot arrives out of order.
package history

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// The GPU states history counts. The first four are the page's; Down is a
// GPU last seen on a host that did not answer since.
const (
	Free     = cluster.Free
	Busy     = cluster.Busy
	Reserved = cluster.Reserved
	Failed   = cluster.Failed
	Down     = "down"
)

// States lists the states in the order the store, the plots and the
// metrics use.
var States = []string{Free, Busy, Reserved, Failed, Down}

// Snapshot is what history keeps of one load_data.csv: each host, whether
// it answered, and each GPU's state, utilization, memory and holders.
type Snapshot struct {
	Time  time.Time
	Hosts []Host
}

// Host is one host of a snapshot. A host that did not answer has no GPUs.
type Host struct {
	Name string
	Up   bool
	GPUs []GPU
}

// GPU is one GPU of a snapshot.
type GPU struct {
	ID          string // the page's id: the vendor tool's index, else the bus id
	Name        string // the vendor tool's name, "AMD Instinct MI300X"
	State       string // Free, Busy, Reserved or Failed
	UtilPct     float64
	HasUtil     bool // false under MIG, on an AMD partition, or when the tool could not tell
	MemUsedMiB  float64
	MemTotalMiB float64
	Holders     []Holder // users whose processes hold it, sorted by name
	IdleJob     bool     // idlemon's preemptible job runs on it
	// Findings are its health conditions ([health] policy), as render
	// assessed them; UUID is kept for a GPU with findings only.
	Findings []health.Finding
	UUID     string
	// PowerW is its power draw; HasPower is false when the tool gave none
	// ([N/A]) or an absurd one (saneWatts).
	PowerW   float64
	HasPower bool
	// ReservedFor is who its current reservation is for; "" when none.
	ReservedFor string
}

// Holder is one user holding a GPU: the memory their processes use on it,
// and how much of its SMs they use.
type Holder struct {
	User   string // "" when ps could not tell
	MemMiB float64
	// SMPct is the sum of its processes' own SM utilization (pmon); HasSM
	// is false when that of any one of them is not known (MIG, pmon off,
	// AMD's GPUs, whose tools give no process its own use).
	SMPct float64
	HasSM bool
	// Job and Account are the Slurm job and account of the holder's
	// processes on the GPU ("" outside Slurm): of the one using the most
	// memory, when their processes are in several jobs.
	Job, Account string
}

// Users is the holders' names, sorted.
func (g *GPU) Users() []string {
	u := make([]string, len(g.Holders))
	for i, h := range g.Holders {
		u[i] = h.User
	}
	return u
}

// FromCluster takes what history keeps from the page's model. Ignored and
// preemptible processes hold nothing: an ignored one counts to nobody, the
// idle-time job to its own account.
func FromCluster(c *cluster.Cluster) *Snapshot {
	s := &Snapshot{Time: c.DataTime, Hosts: make([]Host, 0, len(c.Hosts))}
	for _, h := range c.Hosts {
		sh := Host{Name: h.Name, Up: h.Up()}
		for _, g := range h.GPUs {
			sh.GPUs = append(sh.GPUs, gpuOf(g))
		}
		s.Hosts = append(s.Hosts, sh)
	}
	addHealth(s, c)
	return s
}

func gpuOf(g *cluster.GPU) GPU {
	out := GPU{ID: g.ID(), Name: g.Name, State: g.State,
		UtilPct: g.Util.Value, HasUtil: g.Util.Valid,
		MemUsedMiB: g.MemUsed.Value, MemTotalMiB: g.MemTotal.Value}
	out.PowerW, out.HasPower = saneWatts(g.Power, g.PowerLimit)
	if g.Reservation != nil {
		out.ReservedFor = g.Reservation.Name
	}
	holders := map[string]*Holder{}
	jobMem := map[string]float64{} // the memory of the holder's process that named its job
	for _, p := range g.Procs {
		if p.Preemptible {
			out.IdleJob = true
		}
		if !p.Holds() {
			continue
		}
		h := holders[p.User]
		if h == nil {
			h = &Holder{User: p.User, HasSM: true}
			holders[p.User] = h
		}
		if p.MemMiB.Valid { // a process whose memory is not known adds none
			h.MemMiB += p.MemMiB.Value
		}
		if p.SlurmJob != "" && (h.Job == "" || p.MemMiB.Value > jobMem[p.User]) {
			h.Job, h.Account, jobMem[p.User] = p.SlurmJob, p.SlurmAccount, p.MemMiB.Value
		}
		// one process not known makes the holder's sum not known: a part
		// read as the whole could call a working holder idle
		h.SMPct += p.SMPct.Value
		h.HasSM = h.HasSM && p.SMPct.Valid && p.SMPct.Value >= 0 && p.SMPct.Value <= 100
	}
	for _, h := range holders {
		if !h.HasSM {
			h.SMPct = 0
		}
		out.Holders = append(out.Holders, *h)
	}
	slices.SortFunc(out.Holders, func(a, b Holder) int { return strings.Compare(a.User, b.User) })
	return out
}

// maxWatts bounds a GPU's power draw when its cap is not known: no GPU
// draws 10 kW.
const maxWatts = 10000

// saneWatts is a power reading the accounting can integrate: known,
// finite, not negative, and at most 10 times the GPU's cap (or maxWatts
// without one). A driver's 2^64 counter or a negative draw is not known,
// as [N/A] is: it would bill someone for energy nobody used.
func saneWatts(p, limit loaddata.Number) (float64, bool) {
	v := p.Value
	if !p.Valid || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, false
	}
	ceiling := float64(maxWatts)
	if limit.Valid && limit.Value > 0 && !math.IsInf(limit.Value, 0) {
		ceiling = min(ceiling, 10*limit.Value)
	}
	if v > ceiling {
		return 0, false
	}
	return v, true
}

// IdleHolders names g's holders who do not use it, sorted: every holder
// when the GPU's utilization is known and at most limitPct; otherwise each
// one whose own SM utilization is known and at most limitPct, while others
// keep the GPU busier (alice's notebook at 0 % where bob trains). A
// utilization not known (MIG, an AMD partition, pmon off) is never idle:
// history does not guess. It is the one test of idleness (holderIdle):
// history's idle-held spells and notify's episodes both ask it.
func (g *GPU) IdleHolders(limitPct float64) []string {
	var idle []string
	for i := range g.Holders {
		if g.holderIdle(&g.Holders[i], limitPct) {
			idle = append(idle, g.Holders[i].User)
		}
	}
	return idle
}

// IdleHoldersOf is IdleHolders of a GPU of the page's model, by the
// users of its processes: for the page's hover, which marks each idle
// holder's share by the same test as the idle-held spells.
func IdleHoldersOf(g *cluster.GPU, limitPct float64) []string {
	hg := gpuOf(g)
	return hg.IdleHolders(limitPct)
}

// holderIdle reports whether h, one of g's holders, is idle on it (see
// IdleHolders).
func (g *GPU) holderIdle(h *Holder, limitPct float64) bool {
	if g.HasUtil && !math.IsNaN(g.UtilPct) && g.UtilPct <= limitPct {
		return true
	}
	return h.HasSM && h.SMPct <= limitPct
}
