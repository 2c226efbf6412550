package textfile

import (
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/testenv"
)

// eightJobs is an idlemon with 8 jobs that have all run, been preempted
// and refused: the text a busy host writes after each scan.
func eightJobs() *Metrics {
	var jobs []Job
	for k := range 8 {
		jobs = append(jobs, Job{Name: fmt.Sprintf("process-job%d", k), GPUs: 1})
	}
	m := New(jobs, "nvidia", "v2+v1", "1.4.0", t0)
	for i := range jobs {
		m.Waiting(i, BusyGPU)
		m.Started(i, at(10))
		m.Stopped(i, Preempted, 3*time.Second, 4*time.Millisecond, at(13))
		m.Waiting(i, MinIdle)
		m.Started(i, at(60))
		m.Usage(i, Usage{CPUSeconds: 12.5, MemoryBytes: 1 << 30, OOMKills: 0, PidsMaxHits: 0})
	}
	return m
}

// BenchmarkWrite is what idlemon spends after each scan: the text, a
// temporary file fsynced and renamed; on the test's disk, and on a tmpfs
// (root only), which shows what is the fsync. cpu-ns/op is the CPU time
// (user and system), the rest of ns/op waits for the disk.
func BenchmarkWrite(b *testing.B) {
	b.Run("disk", func(b *testing.B) { benchmarkWrite(b, b.TempDir()) })
	b.Run("tmpfs", func(b *testing.B) { benchmarkWrite(b, testenv.MountTmpfs(b, b.TempDir(), "1m")) })
}

func benchmarkWrite(b *testing.B, dir string) {
	m := eightJobs()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for k := 0; b.Loop(); k++ {
		if err := m.Write(dir, at(float64(100+k))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(m.buf)), "bytes/file")
}

// cpuTime is the CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriteTo is the text alone.
func BenchmarkWriteTo(b *testing.B) {
	m := eightJobs()
	b.ReportAllocs()
	for k := 0; b.Loop(); k++ {
		if err := m.WriteTo(io.Discard, at(float64(100+k))); err != nil {
			b.Fatal(err)
		}
	}
}
