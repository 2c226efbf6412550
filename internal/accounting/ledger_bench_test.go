package accounting_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/inifile"
)

// BenchmarkUsageBy: `render -usage 30d -by ...` at 1,000 hosts × 8 GPUs ×
// 30 days of history (history.Synthesize: 200 users in 20 Slurm accounts,
// half the hosts' GPUs each a job of their own: 2,640 jobs every hour),
// the target 1 s by team: the part of the ledger a report needs
// read from the database, then summed; and the database's size (target
// 1 GB).
func BenchmarkUsageBy(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "h.db")
	end := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	if err := history.Synthesize(ctx, path, history.DefaultParams, 14*24*time.Hour, 1000, 30, end); err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, suffix := range []string{"", "-wal"} {
		if st, err := os.Stat(path + suffix); err == nil {
			size += st.Size()
		}
	}
	store, err := history.Open(path, history.DefaultParams, 14*24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var ini strings.Builder
	ini.WriteString("[accounting]\ncurrency = EUR\nkwh_price = 0.3\n[gpu_hour_prices]\nH100 = 2.10\n[teams]\n")
	for team := range 10 {
		fmt.Fprintf(&ini, "team%d = ", team)
		for u := range 20 {
			fmt.Fprintf(&ini, "user%03d, ", team*20+u)
		}
		ini.WriteString("\n")
	}
	f, err := inifile.Read(strings.NewReader(ini.String()), "config.ini")
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := accounting.Read(f, nil)
	if err != nil {
		b.Fatal(err)
	}
	from, to := history.UsageSpan(30*24*time.Hour, end)
	for _, bc := range []struct {
		by    accounting.By
		parts history.LedgerParts // as render's ledgerParts
		lines int
	}{
		{accounting.ByTeam, history.LedgerUsers, 10},
		{accounting.ByAccount, history.LedgerUsers, 21},
		{accounting.ByJob, history.LedgerJobs, 2667},
		{accounting.ByHost, history.LedgerHosts, 990}, // a host in 100 never answered
	} {
		b.Run(string(bc.by), func(b *testing.B) {
			var ledger, rows time.Duration
			var lines []accounting.Line
			for b.Loop() {
				t0 := time.Now()
				l, err := store.LedgerOf(ctx, from, to, bc.parts)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				lines = accounting.Aggregate(l, bc.by, &cfg)
				ledger, rows = ledger+t1.Sub(t0), rows+time.Since(t1)
			}
			if len(lines) != bc.lines {
				b.Errorf("%d lines by %s, want %d", len(lines), bc.by, bc.lines)
			}
			b.ReportMetric(float64(ledger.Milliseconds())/float64(b.N), "ledger-ms")
			b.ReportMetric(float64(rows.Microseconds())/1000/float64(b.N), "aggregate-ms")
			b.ReportMetric(float64(size)/1e6, "db-MB")
		})
	}
}
