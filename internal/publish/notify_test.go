package publish

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/notify"
)

// On a shared GPU notify is told of the idle holder alone, with their own
// commands and memory, and who uses the GPU meanwhile.
func TestObservationsPerHolder(t *testing.T) {
	now := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	proc := func(user, command string, sm float64) *cluster.Proc {
		return &cluster.Proc{User: user, Command: command, MemMiB: loaddata.Num(1000), SMPct: loaddata.Num(sm)}
	}
	gpu := &cluster.GPU{Index: 2, HasIndex: true, Name: "NVIDIA H100 80GB HBM3", Util: loaddata.Num(88),
		Procs: []*cluster.Proc{proc("alice", "jupyter", 0), proc("bob", "train.py", 85), proc("carol", "eval.py", 3)}}
	c := &cluster.Cluster{DataTime: now, Hosts: []*cluster.Host{{Name: "gpu03", Status: hoststatus.OK, GPUs: []*cluster.GPU{gpu}}}}
	snap := history.FromCluster(c)
	sum := &history.Summary{Newest: now, IdleHeld: []history.Spell{
		{Host: "gpu03", GPU: "2", Users: []string{"alice"}, Start: now.Add(-6 * time.Hour).Unix(), Last: now.Unix(), MemMiB: 1000}}}
	obs := observations(Run{Cluster: c, Now: now}, &recording{snap: snap, summary: sum}, 5)
	want := []notify.IdleGPU{{Host: "gpu03", GPU: "2", Model: "NVIDIA H100 80GB HBM3", Users: []string{"alice"},
		Working: []string{"bob"}, Since: now.Add(-6 * time.Hour), MemMiB: 1000, Commands: []string{"jupyter"}}}
	if diff := cmp.Diff(want, obs.IdleHeld, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("idle-held (-want +got):\n%s", diff)
	}
	// carol, idle for less than idle_after, is held idle too: one each
	held := []notify.IdleGPU{{Host: "gpu03", GPU: "2", Users: []string{"alice"}}, {Host: "gpu03", GPU: "2", Users: []string{"carol"}}}
	if diff := cmp.Diff(held, obs.HeldIdle, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("held idle (-want +got):\n%s", diff)
	}
}
