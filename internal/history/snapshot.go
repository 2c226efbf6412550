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
	ID          string // the page's id: nvidia-smi's index, else the bus id
	Name        string // nvidia-smi's name
	State       string // Free, Busy, Reserved or Failed
	UtilPct     float64
	HasUtil     bool // false under MIG, or when nvidia-smi could not tell
	MemUsedMiB  float64
	MemTotalMiB float64
	Holders     []Holder // users whose processes hold it, sorted by name
	IdleJob     bool     // idlemon's preemptible job runs on it
	// Findings are its health conditions ([health] policy), as render
	// assessed them; UUID is kept for a GPU with findings only.
	Findings []health.Finding
	UUID     string
}

// Holder is one user holding a GPU and the memory their processes use on it.
type Holder struct {
	User   string // "" when ps could not tell
	MemMiB float64
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
	mem := map[string]float64{}
	for _, p := range g.Procs {
		if p.Preemptible {
			out.IdleJob = true
		}
		if !p.Holds() {
			continue
		}
		if _, ok := mem[p.User]; !ok {
			out.Holders = append(out.Holders, Holder{User: p.User})
		}
		var m float64 // a process whose memory is not known adds none
		if p.MemMiB.Valid {
			m = p.MemMiB.Value
		}
		mem[p.User] += m
	}
	for i := range out.Holders {
		out.Holders[i].MemMiB = mem[out.Holders[i].User]
	}
	slices.SortFunc(out.Holders, func(a, b Holder) int { return strings.Compare(a.User, b.User) })
	return out
}

// Idle reports whether g is held by someone and not used: utilization
// known and at most limit. A GPU whose utilization is not known (MIG) is
// never idle: history does not guess. It is the one test of idleness:
// history's idle-held spells and notify's episodes both ask it.
func (g *GPU) Idle(limitPct float64) bool {
	return len(g.Holders) > 0 && g.HasUtil && !math.IsNaN(g.UtilPct) && g.UtilPct <= limitPct
}
