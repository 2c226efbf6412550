package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// healthFleet is hosts of free H100s, each host's GPUs degraded (a
// hardware slowdown) as its string says: "ok" a healthy GPU, "bad" a
// degraded one, in index order.
func healthFleet(t testing.TB, hosts map[string][]string, order []string) *Report {
	t.Helper()
	var rows []loaddata.Row
	for _, h := range order {
		for i, state := range hosts[h] {
			r := loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: h, HostStatus: hoststatus.OK,
				GPUIndex: loaddata.IntOf(int64(i)), GPUName: "NVIDIA H100 80GB HBM3",
				MemUsedMiB: loaddata.Num(3), MemTotalMiB: loaddata.Num(81559), GPUUtilPct: loaddata.Num(0), ClockEvents: "gpu_idle"}
			if state == "bad" {
				r.ClockEvents = "hw_slowdown"
			}
			rows = append(rows, r)
		}
	}
	return testReport(t, rows, "")
}

// The free-GPU finder never offers a degraded GPU before a healthy one:
// a host with more healthy free GPUs comes first, however many degraded
// ones the others have.
func TestFinderOffersHealthyFirst(t *testing.T) {
	rep := healthFleet(t, map[string][]string{
		"a": {"bad", "bad", "bad", "bad"},
		"b": {"ok", "bad", "bad"},
		"c": {"ok"},
		"d": {"ok", "ok"},
		"e": {"bad"},
	}, []string{"a", "b", "c", "d", "e"})
	var got []string
	for _, hf := range freeHosts(rep.Cluster.Hosts, "H100 80GB HBM3") {
		got = append(got, hf.h.Name+" "+strings.Repeat("+", hf.n-hf.degraded)+strings.Repeat("-", hf.degraded))
	}
	want := []string{"d ++", "b +--", "c +", "a ----", "e -"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the finder's hosts (+ healthy, - degraded), (-want +got):\n%s", diff)
	}
}

// render -free lists the hosts with a healthy free GPU first, and on each
// host its healthy GPUs before its degraded ones.
func TestTextFreeOffersHealthyFirst(t *testing.T) {
	rep := healthFleet(t, map[string][]string{
		"a": {"bad", "bad"},
		"b": {"bad", "ok"},
	}, []string{"a", "b"})
	var b bytes.Buffer
	if err := writeTextWith(&b, rep, textOptions{Free: true}); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")[1:] // after the summary
	want := []string{
		"b  H100 80GB HBM3 x2",
		"[1] H100 80GB HBM3 | ?°C 0% | 0/80 GB | free",
		"[0] H100 80GB HBM3 | ?°C 0% | 0/80 GB | free · degraded: HW slowdown",
		"a  H100 80GB HBM3 x2",
		"[0] H100 80GB HBM3 | ?°C 0% | 0/80 GB | free · degraded: HW slowdown",
		"[1] H100 80GB HBM3 | ?°C 0% | 0/80 GB | free · degraded: HW slowdown",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-free's lines (-want +got):\n%s", diff)
	}
}

func TestIdleShares(t *testing.T) {
	proc := func(user string, sm float64, valid bool) *cluster.Proc {
		return &cluster.Proc{User: user, MemMiB: loaddata.Num(1000), SMPct: loaddata.Number{Value: sm, Valid: valid}}
	}
	for _, tc := range []struct {
		name  string
		procs []*cluster.Proc
		want  []string
	}{
		{"an idle holder while another works", []*cluster.Proc{proc("bob", 96, true), proc("alice", 0, true)}, []string{"alice"}},
		{"two idle holders, in their processes' order", []*cluster.Proc{proc("carol", 0.5, true), proc("bob", 96, true), proc("alice", 0, true),
			proc("carol", 0.5, true)}, []string{"carol", "alice"}},
		{"at the threshold is idle", []*cluster.Proc{proc("bob", 96, true), proc("alice", 1, true)}, []string{"alice"}},
		{"just over it is not", []*cluster.Proc{proc("bob", 96, true), proc("alice", 1.5, true)}, nil},
		{"all idle: nobody's share is singled out", []*cluster.Proc{proc("bob", 0, true), proc("alice", 0, true)}, nil},
		{"one holder", []*cluster.Proc{proc("alice", 0, true)}, nil},
		{"a holder's processes together", []*cluster.Proc{proc("alice", 0, true), proc("alice", 50, true), proc("bob", 50, true)}, nil},
		{"a use not known (MIG, pmon off)", []*cluster.Proc{proc("bob", 96, true), proc("alice", 0, false)}, nil},
		{"ignored and preemptible processes hold nothing", []*cluster.Proc{proc("bob", 96, true), proc("alice", 0, true),
			{User: "root", Command: "Xorg", Ignored: true}, {User: "idle", Preemptible: true, SMPct: loaddata.Num(99)}},
			[]string{"alice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := idleShares(&cluster.GPU{Procs: tc.procs}, 1)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
