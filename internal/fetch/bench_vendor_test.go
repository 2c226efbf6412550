package fetch

import (
	"context"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/simfleet"
)

// recorder keeps the last answer its Runner gave.
type recorder struct {
	Runner
	out []byte
}

func (r *recorder) Run(ctx context.Context, alias, command string, stdin []byte) ([]byte, error) {
	out, err := r.Runner.Run(ctx, alias, command, stdin)
	r.out = append([]byte(nil), out...)
	return out, err
}

// BenchmarkBuildResult is what fetch spends on one host's answer once it
// has arrived (sections, the tool's output, ps, cgroups, rows), for an
// 8-GPU host of each kind as the simulated fleet answers: nvidia-smi's
// CSV, amd-smi's JSON (static and metric, as the probe's options ask,
// unindented on the host) and rocm-smi's, with KFD's process list.
func BenchmarkBuildResult(b *testing.B) {
	for _, bc := range []struct {
		name string
		spec simfleet.HostSpec
	}{
		{"nvidia-smi", simfleet.Generate(1, 1)[0]},
		{"amd-smi", simfleet.GenerateAMD(1, 1)[0]},
		{"rocm-smi", simfleet.GenerateAMD(3, 1)[2]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, ini := fleetConfig(b, []simfleet.HostSpec{bc.spec}, 10)
			cfg, err := LoadConfig(ini)
			if err != nil {
				b.Fatal(err)
			}
			client, err := newClient(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			rec := &recorder{Runner: client}
			p := &Poller{Runner: rec, Timeout: 10 * time.Second, ProcessUtil: true, KernelLogWindow: 10 * time.Minute}
			if res := p.Poll(context.Background(), []string{bc.spec.Name})[0]; res.Error != "" || len(res.Rows) < 8 {
				b.Fatalf("%s: %d rows, %q", bc.name, len(res.Rows), res.Error)
			}
			nonce := string(rec.out[len("@@gpumon:") : len("@@gpumon:")+24]) // the first line is a section's
			b.ReportMetric(float64(len(rec.out)), "answer-bytes")
			for b.Loop() {
				buildResult(bc.spec.Name, nonce, rec.out, nil, time.Now())
			}
		})
	}
}
