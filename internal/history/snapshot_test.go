package history

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// A holder's SM % is the sum of their processes' where each one's is
// known; one not known makes it not known.
func TestHolderSMFromProcesses(t *testing.T) {
	proc := func(user string, mem float64, sm loaddata.Number) *cluster.Proc {
		return &cluster.Proc{User: user, MemMiB: loaddata.Num(mem), SMPct: sm}
	}
	tests := []struct {
		name  string
		procs []*cluster.Proc
		want  []Holder
	}{
		{"one process", []*cluster.Proc{proc("alice", 100, loaddata.Num(3))},
			[]Holder{{User: "alice", MemMiB: 100, SMPct: 3, HasSM: true}}},
		{"a holder's processes add up", []*cluster.Proc{proc("bob", 100, loaddata.Num(40)), proc("alice", 50, loaddata.Num(0)), proc("bob", 200, loaddata.Num(30))},
			[]Holder{{User: "alice", MemMiB: 50, HasSM: true}, {User: "bob", MemMiB: 300, SMPct: 70, HasSM: true}}},
		{"one process not known makes the holder not known", []*cluster.Proc{proc("alice", 100, loaddata.Num(0)), proc("alice", 100, loaddata.Number{})},
			[]Holder{{User: "alice", MemMiB: 200}}},
		{"whichever process it is", []*cluster.Proc{proc("alice", 100, loaddata.Number{}), proc("alice", 100, loaddata.Num(0))},
			[]Holder{{User: "alice", MemMiB: 200}}},
		{"an absurd reading is not known", []*cluster.Proc{proc("alice", 1, loaddata.Num(-1)), proc("bob", 1, loaddata.Num(math.NaN())), proc("carol", 1, loaddata.Num(1e19))},
			[]Holder{{User: "alice", MemMiB: 1}, {User: "bob", MemMiB: 1}, {User: "carol", MemMiB: 1}}},
		{"ignored and preemptible processes hold nothing", []*cluster.Proc{proc("alice", 100, loaddata.Num(0)),
			{User: "root", MemMiB: loaddata.Num(10), SMPct: loaddata.Num(50), Ignored: true},
			{User: "idle", MemMiB: loaddata.Num(10), SMPct: loaddata.Num(99), Preemptible: true}},
			[]Holder{{User: "alice", MemMiB: 100, HasSM: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gpuOf(&cluster.GPU{HasIndex: true, Util: loaddata.Num(50), Procs: tt.procs})
			if diff := cmp.Diff(tt.want, got.Holders, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("holders (-want +got):\n%s", diff)
			}
		})
	}
}

// The page asks the same test of its own GPUs.
func TestIdleHoldersOf(t *testing.T) {
	g := &cluster.GPU{HasIndex: true, Util: loaddata.Num(88), Procs: []*cluster.Proc{
		{User: "bob", SMPct: loaddata.Num(85)}, {User: "alice", SMPct: loaddata.Num(0)}, {User: "carol"}}}
	if diff := cmp.Diff([]string{"alice"}, IdleHoldersOf(g, 5)); diff != "" {
		t.Errorf("idle holders (-want +got):\n%s", diff)
	}
}

// An AMD GPU is idle by the same test as any: held at 0 % it is idle;
// held with no utilization (a partition, for which AMD's tools give none)
// and no process's own use (AMD gives none), it never is, as under MIG.
func TestAMDGPUIdleAsAnyGPU(t *testing.T) {
	row := func(idx int64, util loaddata.Number) loaddata.Row {
		return loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: "mi300a", HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(idx), GPUName: "AMD Instinct MI300X", GPUVendor: loaddata.VendorAMD,
			GPUUtilPct: util, MemUsedMiB: loaddata.Num(20283), MemTotalMiB: loaddata.Num(196592),
			PID: loaddata.IntOf(9000 + idx), User: "alice", Command: "python notebook.py", ProcessMemMiB: loaddata.Num(20000)}
	}
	b := cluster.NewBuilder(cluster.Options{FreeMemMiB: 1024})
	for _, r := range []loaddata.Row{row(0, loaddata.Num(0)), row(1, loaddata.Number{})} {
		b.Add(&r)
	}
	s := FromCluster(b.Cluster())
	var got [][]string
	for _, g := range s.Hosts[0].GPUs {
		got = append(got, g.IdleHolders(5))
	}
	if diff := cmp.Diff([][]string{{"alice"}, nil}, got); diff != "" {
		t.Errorf("idle holders of GPU 0 (0 %%) and GPU 1 (no utilization) (-want +got):\n%s", diff)
	}
}
