package fetch

import (
	"context"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/simfleet"
)

type recRunner struct {
	Runner
	out []byte
}

func (r *recRunner) Run(ctx context.Context, alias, command string, stdin []byte) ([]byte, error) {
	out, err := r.Runner.Run(ctx, alias, command, stdin)
	r.out = append([]byte(nil), out...)
	return out, err
}

func BenchmarkZZBuild(b *testing.B) {
	for _, kind := range []string{"nvidia", "amd-smi", "rocm-smi"} {
		var specs []simfleet.HostSpec
		switch kind {
		case "nvidia":
			specs = simfleet.Generate(1, 1)
		case "amd-smi":
			specs = simfleet.GenerateAMD(1, 1)
		case "rocm-smi":
			specs = simfleet.GenerateAMD(3, 1)[2:]
		}
		_, ini := fleetConfig(b, specs, 10)
		cfg, _ := LoadConfig(ini)
		client, _ := newClient(cfg)
		rr := &recRunner{Runner: client}
		p := &Poller{Runner: rr, Timeout: 10 * time.Second, ProcessUtil: true, KernelLogWindow: 10 * time.Minute}
		req := probe.NewRequest(3)
		_ = req
		res := p.Poll(context.Background(), []string{specs[0].Name})
		b.Logf("%s: %d bytes, %d rows, %s %q", kind, len(rr.out), len(res[0].Rows), res[0].Status, res[0].Error)
		// the nonce: find it in the output
		out := rr.out
		nonce := string(out[len("@@gpumon:") : len("@@gpumon:")+24])
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				buildResult("h", nonce, out, nil, time.Now())
			}
		})
		client.Close()
	}
}
