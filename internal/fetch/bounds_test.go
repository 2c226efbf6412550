package fetch

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/remote"
)

const gpuHeader = "index, uuid, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%], pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, remapped_rows.pending, remapped_rows.failure, clocks_event_reasons.active, clocks_throttle_reasons.active, gpu_recovery_action\n"

func gpuLine(index int, uuid, name string) string {
	return fmt.Sprintf("%d, %s, %s, 00000000:%02X:00.0, 1, 1, 1, 143771, 30, 75.10, 700.00, [N/A], P0, Enabled, 0, [N/A], No, No, 0x0000000000000000, 0x0000000000000000, None\n", index, uuid, name, index%256)
}

// repeat joins n lines made by line(i).
func repeat(n int, line func(i int) string) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(line(i))
	}
	return b.String()
}

// A host that answers with more than a GPU host has, or with GPUs that
// share a UUID, costs load_data.csv a bounded number of bounded rows: one
// small answer can no longer multiply into millions of rows (GPUs × processes)
// or a host_error of megabytes repeated on every row.
func TestBuildBounded(t *testing.T) {
	const uuid = "GPU-aaaa"
	tests := []struct {
		name  string
		out   hostOutput
		check func(t *testing.T, r Result)
	}{
		{
			name: "GPUs sharing a UUID: processes on the first only",
			out: hostOutput{
				gpus: gpuHeader + repeat(60, func(i int) string { return gpuLine(i, uuid, "NVIDIA H200") }),
				apps: appsHeader + repeat(4000, func(i int) string { return fmt.Sprintf("%d, %s, 10\n", 1000+i, uuid) }),
				ps:   shellLine,
			},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || len(r.Rows) != 4000+59 {
					t.Fatalf("status %s, %d rows; want ok, 4059 (4000 processes on GPU 0, 59 idle rows)", r.Status, len(r.Rows))
				}
				for _, row := range r.Rows[4000:] {
					if row.PID.Valid {
						t.Fatalf("GPU %d has process %d: a shared UUID's processes are on the first GPU only", row.GPUIndex.Value, row.PID.Value)
					}
				}
				want := "nvidia-smi gave UUID GPU-aaaa to 60 GPUs (indexes 0, 1, 2, 3, 4 and 55 more); its processes are shown on the first"
				if !strings.Contains(r.Error, want) {
					t.Errorf("warning %q, want it to contain %q", r.Error, want)
				}
			},
		},
		{
			name:  "more GPUs than a host has",
			out:   hostOutput{gpus: gpuHeader + repeat(65, func(i int) string { return gpuLine(i, fmt.Sprintf("GPU-%d", i), "x") })},
			check: wantFailure(hoststatus.Error, "nvidia-smi listed more than 64 GPUs"),
		},
		{
			name: "more processes than a host runs",
			out: hostOutput{gpus: twoGPUs,
				apps: appsHeader + repeat(5000, func(i int) string { return fmt.Sprintf("%d, GPU-aaaa, 10\n", 1000+i) })},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || len(r.Rows) != 2 || !strings.Contains(r.Error, "process list unavailable: nvidia-smi listed more than 4096 processes") {
					t.Errorf("status %s, %d rows, %q; want ok, the GPUs alone, and why", r.Status, len(r.Rows), r.Error)
				}
			},
		},
		{
			name: "thirty GPUs with one index: five named",
			out:  hostOutput{gpus: gpuHeader + repeat(30, func(i int) string { return gpuLine(0, fmt.Sprintf("GPU-%02d", i), "x") })},
			check: func(t *testing.T, r Result) {
				want := "nvidia-smi gave GPU index 0 to 30 GPUs (GPU-00, GPU-01, GPU-02, GPU-03, GPU-04 and 25 more)"
				if len(r.Rows) != 30 || !strings.Contains(r.Error, want) {
					t.Errorf("%d rows, %q; want 30 rows and %q", len(r.Rows), r.Error, want)
				}
			},
		},
		{
			name: "a thousand bad lines: a few named, the rest counted",
			out: hostOutput{gpus: twoGPUs + repeat(1000, func(i int) string { return fmt.Sprintf("junk %d\n", i) }),
				apps: appsHeader, ps: shellLine},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || len(r.Rows) != 2 {
					t.Fatalf("status %s, %d rows", r.Status, len(r.Rows))
				}
				if !strings.HasPrefix(r.Error, "nvidia-smi --query-gpu line 4 skipped: not a CSV row; ") ||
					!strings.HasSuffix(r.Error, "; and 13 more warnings") || len(r.Error) > maxHostError {
					t.Errorf("host_error of %d bytes: %q", len(r.Error), r.Error)
				}
			},
		},
		{
			name: "a GPU name of a megabyte with escapes",
			out:  hostOutput{gpus: gpuHeader + gpuLine(0, "GPU-a", "\x1b[31m"+strings.Repeat("n", 1<<20)), apps: appsHeader},
			check: func(t *testing.T, r Result) {
				name := r.Rows[0].GPUName
				if len(name) > 256 || !strings.HasPrefix(name, "?[31mnnn") {
					t.Errorf("gpu_name of %d bytes starting %q", len(name), name[:min(len(name), 10)])
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, buildResult("gpu01", "n", tt.out.bytes("n"), nil, at))
		})
	}

	t.Run("a failure's message is clipped", func(t *testing.T) {
		err := &remote.Error{Status: hoststatus.Error, Msg: "proxy said: " + strings.Repeat("e", 64<<10)}
		r := buildResult("gpu01", "n", nil, err, at)
		if len(r.Rows) != 1 || len(r.Rows[0].HostError) > maxHostError {
			t.Errorf("host_error of %d bytes, want at most %d", len(r.Rows[0].HostError), maxHostError)
		}
	})
}

// stdinRunner answers every host with the same probe output, framed with
// the nonce of the script it was sent.
type stdinRunner struct{ out hostOutput }

func (s stdinRunner) Run(_ context.Context, _, _ string, stdin []byte) ([]byte, error) {
	req, err := probe.ParseScript(string(stdin))
	if err != nil {
		return nil, err
	}
	return s.out.bytes(req.Nonce), nil
}

// The rows of a whole run are bounded too: once the hosts that answered
// fill MaxRowBytes, a host with many rows is failed, saying why, and the
// file stays small enough for render to read.
func TestPollRowBytesBounded(t *testing.T) {
	big := hostOutput{gpus: twoGPUs,
		apps: appsHeader + repeat(1000, func(i int) string { return fmt.Sprintf("%d, GPU-aaaa, 10\n", 1000+i) }),
		ps:   shellLine + repeat(1000, func(i int) string { return fmt.Sprintf("%d alice 5 %s\n", 1000+i, strings.Repeat("c", 1000)) })}
	p := &Poller{Runner: stdinRunner{big}, Timeout: 5e9, Concurrency: 1, MaxRowBytes: 3 << 20}
	results := p.Poll(context.Background(), []string{"gpu01", "gpu02", "gpu03"})
	var size int64
	for _, r := range Rows(results) {
		size += rowBytes(&r)
	}
	if results[0].Status != hoststatus.OK || results[1].Status != hoststatus.OK {
		t.Fatalf("first hosts %s, %s; want ok (about 1.2 MiB each)", results[0].Status, results[1].Status)
	}
	want := "its 1001 rows (1.2 MiB) would take load_data.csv past 3 MiB"
	if r := results[2]; r.Status != hoststatus.Error || !strings.HasPrefix(r.Error, want) || len(r.Rows) != 1 {
		t.Errorf("third host: %s %q, %d rows; want error %q", r.Status, r.Error, len(r.Rows), want)
	}
	if size > 3<<20 {
		t.Errorf("rows take %d bytes, more than the 3 MiB bound", size)
	}
}

// Once the run is stopped, the hosts not yet started are failed at once,
// not dialled one after another.
func TestPollStopsFeeding(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	p := &Poller{Runner: runnerFunc(func() { calls++; cancel() }), Timeout: 5e9, Concurrency: 1}
	hosts := []string{"a", "b", "c", "d"}
	results := p.Poll(ctx, hosts)
	if calls != 1 {
		t.Errorf("%d hosts dialled; the run was stopped by the first", calls)
	}
	last := results[3]
	if last.Status != hoststatus.Timeout || !strings.HasPrefix(last.Error, "not polled: the run was stopped") {
		t.Errorf("host d: %s %q", last.Status, last.Error)
	}
}

type runnerFunc func()

func (f runnerFunc) Run(ctx context.Context, _, _ string, _ []byte) ([]byte, error) {
	f()
	return nil, ctx.Err()
}
