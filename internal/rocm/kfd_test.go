package rocm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

func TestParseKFD(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		want      KFD
		wantNotes int
	}{
		{
			// Two MI100s of the telegraf capture (83:00.0, a3:00.0), and
			// two processes: location_id is bus<<8 | dev<<3 | fn.
			name: "nodes and processes",
			body: "node 53907 0 33536\nnode 14036 0 41728\n" +
				"proc 4242 53907 1073741824\nproc 4242 14036 0\nproc 977 14036 268435456\n",
			want: KFD{
				BusIDs: map[uint32]string{53907: "0000:83:00.0", 14036: "0000:a3:00.0"},
				Nodes:  []uint32{53907, 14036},
				Procs: []KFDProc{
					{PID: 4242, GPUID: 53907, VRAMBytes: 1 << 30},
					{PID: 4242, GPUID: 14036},
					{PID: 977, GPUID: 14036, VRAMBytes: 256 << 20},
				},
			},
		},
		{
			name: "device, function and domain",
			// bus 0xc1, device 0x1e, function 3 = 0xc1f3; domain 3.
			body: "node 1 3 49651\nnode 2 65536 256\n",
			want: KFD{BusIDs: map[uint32]string{1: "0003:c1:1e.3", 2: "10000:01:00.0"}, Nodes: []uint32{1, 2}},
		},
		{
			// As ROCm/k8s-gpu-dra-driver#21 reads them: one location_id,
			// a domain per partition.
			name: "MI300X partitions",
			body: "node 101 0 49408\nnode 102 1 49408\n",
			want: KFD{BusIDs: map[uint32]string{101: "0000:c1:00.0", 102: "0001:c1:00.0"}, Nodes: []uint32{101, 102}},
		},
		{
			name: "cut",
			body: "node 1 0 256\nproc 10 1 5\ncut\n",
			want: KFD{BusIDs: map[uint32]string{1: "0000:01:00.0"}, Nodes: []uint32{1}, Procs: []KFDProc{{PID: 10, GPUID: 1, VRAMBytes: 5}}, Cut: true},
		},
		{
			name: "empty: no GPU process, no node",
			body: "",
			want: KFD{BusIDs: map[uint32]string{}},
		},
		{
			name: "lines not understood cost themselves",
			body: "node 1 0 256\nnode 1 0 512\nnode 0 0 0\nnode 2 0 70000\nnode x 0 1\n" +
				"proc 0 1 5\nproc 10 1 18446744073709551615\nproc 10 1 -5\nproc 11 1 5 extra\n<b>hi</b>\x1b[2J\n" +
				"proc 12 99 7\r\n",
			want: KFD{
				BusIDs: map[uint32]string{1: "0000:01:00.0"},
				Nodes:  []uint32{1},
				Procs:  []KFDProc{{PID: 12, GPUID: 99, VRAMBytes: 7}},
			},
			wantNotes: 10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKFD([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Notes) != tt.wantNotes {
				t.Errorf("notes %q, want %d", got.Notes, tt.wantNotes)
			}
			got.Notes = nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseKFDTooManyNodes(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= nvsmi.MaxGPUs+1; i++ {
		fmt.Fprintf(&b, "node %d 0 %d\n", i, i<<8)
	}
	if _, err := ParseKFD([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("error %v, want one saying more than %d", err, nvsmi.MaxGPUs)
	}
}

// 100k proc lines: the first MaxKFDProcs are kept, the rest cut, quickly.
func TestParseKFDFlood(t *testing.T) {
	var b strings.Builder
	b.WriteString("node 1 0 256\n")
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&b, "proc %d 1 4096\n", i)
	}
	b.WriteString(strings.Repeat("x", 1<<20) + "\n") // one long line, too
	start := time.Now()
	k, err := ParseKFD([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Procs) != MaxKFDProcs || !k.Cut || len(k.Notes) != 1 {
		t.Errorf("%d procs, cut %v, notes %q: want %d, cut, one note", len(k.Procs), k.Cut, k.Notes, MaxKFDProcs)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("100k lines took %v", d)
	}
}
