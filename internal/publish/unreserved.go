package publish

import (
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/notify"
)

// UnreservedHolder is a user who holds a GPU during someone else's
// reservation, and the memory their processes hold on it (those whose
// memory is known).
type UnreservedHolder struct {
	User   string
	MemMiB float64
}

// UnreservedHolders are the users who hold g while its current
// reservation (cluster.GPU.Reservation: the GPU's own, or its host's
// whole-host one) is someone else's, in the order of their first process.
// A holder is a user whose process holds the GPU (cluster.Proc.Holds:
// idlemon's idle-time job and ignored processes hold nothing). A user
// name is compared with the reservation's exactly, as Unix compares them:
// "Alice" is not alice. A reservation that names nobody has no one else.
func UnreservedHolders(g *cluster.GPU) []UnreservedHolder {
	r := g.Reservation
	if r == nil || r.Name == "" {
		return nil
	}
	var out []UnreservedHolder
	for _, p := range g.Procs {
		if !p.Holds() || p.User == r.Name {
			continue
		}
		i := 0
		for i < len(out) && out[i].User != p.User {
			i++
		}
		if i == len(out) {
			out = append(out, UnreservedHolder{User: p.User})
		}
		if p.MemMiB.Valid {
			out[i].MemMiB += p.MemMiB.Value
		}
	}
	return out
}

// unreservedNow are the holders of GPUs reserved for someone else on the
// hosts that answered, one per holder and GPU, for notify.
func unreservedNow(c *cluster.Cluster) []notify.UnreservedGPU {
	var out []notify.UnreservedGPU
	for _, h := range c.Hosts {
		if !h.Up() {
			continue
		}
		for _, g := range h.GPUs {
			for _, u := range UnreservedHolders(g) {
				r := g.Reservation
				out = append(out, notify.UnreservedGPU{Host: h.Name, GPU: g.ID(), Model: g.Name, User: u.User,
					MemMiB: u.MemMiB, Commands: holderCommands(g, []string{u.User}),
					Reservation: notify.Reserved{Owner: r.Name, Until: r.Until, Comment: r.Comment}})
			}
		}
	}
	return out
}
