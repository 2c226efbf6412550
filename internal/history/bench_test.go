package history

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fleet is hosts × 8 GPUs at minute m: a third of the GPUs busy with one of
// 200 users, some of them idle-held, a host in a hundred down.
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
			switch (h + g) % 3 {
			case 0:
				host.GPUs = append(host.GPUs, held(id, 97, fmt.Sprintf("user%03d", (h*8+g)%200)))
			case 1:
				host.GPUs = append(host.GPUs, held(id, 0, fmt.Sprintf("user%03d", (h*8+g)%200))) // idle-held
			default:
				host.GPUs = append(host.GPUs, held(id, 0))
			}
		}
		s.Hosts = append(s.Hosts, host)
	}
	return s
}

// BenchmarkRecord: one snapshot of 1,000 hosts × 8 GPUs into a database
// that already holds a day of them (the target is 100 ms), the figures
// render reads after it, and the database's size per snapshot.
func BenchmarkRecord(b *testing.B) {
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
	var summary time.Duration
	for b.Loop() {
		if _, err := s.Record(ctx, fleet(1000, m)); err != nil {
			b.Fatal(err)
		}
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
