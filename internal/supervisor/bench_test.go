package supervisor

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/testenv"
)

// BenchmarkJobStart is what a job's start costs idlemon, from Start to
// its first process running the job's command (which exits at once), and
// its end (Release): marks only, and with a cgroup per run (made, the
// gate passed, removed).
func BenchmarkJobStart(b *testing.B) {
	testenv.NeedRoot(b)
	// cgroup: the default cpu_weight and a pids_max, which on a hybrid host
	// are v1 folders, joined behind the gate (a second exec of /bin/sh);
	// cgroup-v2-only: no limits, the group joined at birth, as every group
	// is on a pure-v2 host.
	for _, mode := range []string{"marks", "cgroup", "cgroup-v2-only"} {
		b.Run(mode, func(b *testing.B) {
			s := &Supervisor{Instance: "bench", UID: os.Getuid()}
			limits := cgroup.Limits{CPUWeight: 1, PidsMax: 64}
			switch mode {
			case "cgroup":
				s.Tree = benchTree(b)
			case "cgroup-v2-only":
				s.Tree, limits = benchTree(b), cgroup.Limits{}
			}
			spec := Spec{Name: "process-bench", Cmd: "exit 0", Dir: "/", Env: os.Environ(), Grace: time.Second, Limits: limits}
			b.ResetTimer()
			for b.Loop() {
				j, err := s.Start(spec)
				if err != nil {
					b.Fatal(err)
				}
				<-j.Exited()
				if err, _ := j.Exit(); err != nil {
					b.Fatalf("the job: %v", err)
				}
				s.Release(j)
			}
		})
	}
}

// benchTree is a cgroup tree of the benchmark's own, removed at its end.
func benchTree(b *testing.B) *cgroup.Tree {
	b.Helper()
	h, err := cgroup.Mounted()
	if err != nil {
		b.Fatal(err)
	}
	var r [6]byte
	rand.Read(r[:])
	t, err := cgroup.Open(h, filepath.Join(h.V2, "gpumon-bench-"+hex.EncodeToString(r[:])))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		os.Remove(t.Dir)
		for _, m := range h.V1 {
			os.Remove(m + t.Rel)
		}
	})
	return t
}
