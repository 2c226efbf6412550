package history

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/health"
)

// fleet is hosts × 8 GPUs at minute m: a third of the GPUs busy with one of
// 200 users, some of them idle-held, a host in a hundred down; every GPU
// with its power draw, and on half the hosts each held GPU a Slurm job of
// its own in one of 20 accounts.
func fleet(hosts int, m float64) *Snapshot {
	s := &Snapshot{Time: at(m)}
	for h := range hosts {
		name := fmt.Sprintf("gpu%04d", h)
		if h%100 == 99 {
			s.Hosts = append(s.Hosts, down(name))
			continue
		}
		host := Host{Name: name, Up: true}
		for g := range 8 {
			id := fmt.Sprint(g)
			var gpu GPU
			switch (h + g) % 3 {
			case 0:
				gpu = held(id, 97, fmt.Sprintf("user%03d", (h*8+g)%200))
				gpu.PowerW = 650
			case 1:
				gpu = held(id, 0, fmt.Sprintf("user%03d", (h*8+g)%200)) // idle-held
				gpu.PowerW = 120
			default:
				gpu = held(id, 0)
				gpu.PowerW = 70
			}
			gpu.HasPower = true
			if len(gpu.Holders) > 0 && h%2 == 0 {
				gpu.Holders[0].Job, gpu.Holders[0].Account = fmt.Sprint(100000+h*8+g), fmt.Sprintf("lab%02d", (h*8+g)%20)
			}
			host.GPUs = append(host.GPUs, gpu)
		}
		s.Hosts = append(s.Hosts, host)
	}
	return s
}

// noSlurmFleet is fleet without Slurm: a lab of SSH hosts, no job rows.
func noSlurmFleet(hosts int, m float64) *Snapshot {
	s := fleet(hosts, m)
	for h := range s.Hosts {
		for g := range s.Hosts[h].GPUs {
			for i := range s.Hosts[h].GPUs[g].Holders {
				s.Hosts[h].GPUs[g].Holders[i].Job, s.Hosts[h].GPUs[g].Holders[i].Account = "", ""
			}
		}
	}
	return s
}

// sickFleet is fleet with health problems: 1 GPU in 100 with a remap
// pending all along, 1 in 200 with an XID warning every other snapshot (an
// episode ends at every snapshot), 1 in 500 lost.
func sickFleet(hosts int, m float64) *Snapshot {
	s := fleet(hosts, m)
	odd := int(m/5)%2 == 1
	for h := range s.Hosts {
		for g := range s.Hosts[h].GPUs {
			gpu := &s.Hosts[h].GPUs[g]
			switch n := h*8 + g; {
			case n%100 == 7:
				*gpu = sick(*gpu, health.RemapPending)
			case n%200 == 13 && odd:
				*gpu = sick(*gpu, health.XIDWarning)
			case n%500 == 21:
				*gpu = sick(*gpu, health.Lost)
			}
		}
	}
	return s
}

// BenchmarkRecord: one snapshot of 1,000 hosts × 8 GPUs into a database
// that already holds a day of them (the target is 100 ms), the figures
// render reads after it, and the database's size per snapshot; for a
// healthy fleet and for one with health episodes going on and ending.
func BenchmarkRecord(b *testing.B) {
	for _, bc := range []struct {
		name  string
		fleet func(hosts int, m float64) *Snapshot
	}{{"healthy", fleet}, {"sick", sickFleet}, {"no-slurm", noSlurmFleet}} {
		b.Run(bc.name, func(b *testing.B) { benchmarkRecord(b, bc.fleet) })
	}
}

func benchmarkRecord(b *testing.B, fleet func(hosts int, m float64) *Snapshot) {
	ctx := context.Background()
	dir := b.TempDir()
	s, err := Open(filepath.Join(dir, "h.db"), DefaultParams, 14*24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const day = 288
	for i := range day {
		if _, err := s.Record(ctx, fleet(1000, float64(i*5))); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	m := float64(day * 5)
	var summary, cpu time.Duration
	for b.Loop() {
		snap := fleet(1000, m)
		before := cpuTime(b)
		if _, err := s.Record(ctx, snap); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime(b) - before
		m += 5
		b.StopTimer()
		t := time.Now()
		if _, err := s.Summary(ctx, at(m)); err != nil {
			b.Fatal(err)
		}
		summary += time.Since(t)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/record")
	b.ReportMetric(float64(summary.Milliseconds())/float64(b.N), "ms/summary")
	// the process's CPU time in Record: on a machine others share, wall
	// time says more about them than about Record
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/record")
	var size int64
	for _, suffix := range []string{"", "-wal"} {
		if st, err := os.Stat(filepath.Join(dir, "h.db"+suffix)); err == nil {
			size += st.Size()
		}
	}
	b.ReportMetric(float64(size)/float64(day+b.N)/1024, "KiB/snapshot")
}

// BenchmarkSize: the database's size for the two cases, made by
// Synthesize (a snapshot every 5 minutes, whole snapshots kept 14 days):
// 1,000 hosts × 8 GPUs for 30 days, and 100 hosts × 8 GPUs for a year
// (targets: 1 GB each).
func BenchmarkSize(b *testing.B) {
	for _, bc := range []struct {
		name        string
		hosts, days int
	}{{"hosts=1000/days=30", 1000, 30}, {"hosts=100/days=366", 100, 366}} {
		b.Run(bc.name, func(b *testing.B) {
			var size int64
			for b.Loop() {
				path := filepath.Join(b.TempDir(), "h.db")
				if err := Synthesize(context.Background(), path, DefaultParams, 14*24*time.Hour, bc.hosts, bc.days, at(0)); err != nil {
					b.Fatal(err)
				}
				size = 0
				for _, suffix := range []string{"", "-wal"} {
					if st, err := os.Stat(path + suffix); err == nil {
						size += st.Size()
					}
				}
			}
			b.ReportMetric(float64(size)/1e6, "db-MB")
		})
	}
}

// BenchmarkFoldAndEncode: the CPU part of Record for one snapshot of 1,000
// hosts × 8 GPUs (the fold's step, the snapshot's blob and the state's
// checkpoint), healthy and with health episodes: what the episodes add,
// without SQLite's share of the time.
func BenchmarkFoldAndEncode(b *testing.B) {
	for _, bc := range []struct {
		name  string
		fleet func(hosts int, m float64) *Snapshot
	}{{"healthy", fleet}, {"sick", sickFleet}} {
		b.Run(bc.name, func(b *testing.B) {
			st := newFoldState()
			snaps := []*Snapshot{bc.fleet(1000, 0), bc.fleet(1000, 5)}
			for _, s := range snaps {
				step(st, s, DefaultParams)
			}
			i := 0
			for b.Loop() {
				s := snaps[i%2]
				s.Time = at(float64(10 + 5*i))
				i++
				step(st, s, DefaultParams)
				if _, err := encodeSnapshot(s); err != nil {
					b.Fatal(err)
				}
				if _, err := encodeState(st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFold: the fold's step alone for one snapshot of 1,000 hosts ×
// 8 GPUs, with its spells going on: what Record spends outside SQLite.
func BenchmarkFold(b *testing.B) {
	st := newFoldState()
	for i := range 24 {
		step(st, fleet(1000, float64(i*5)), DefaultParams)
	}
	snaps := make([]*Snapshot, 64)
	for i := range snaps {
		snaps[i] = fleet(1000, float64((24+i)*5))
	}
	i := 0
	for b.Loop() {
		s := *snaps[i%len(snaps)]
		s.Time = at(float64((24 + i) * 5))
		step(st, &s, DefaultParams)
		i++
	}
}
