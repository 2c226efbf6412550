package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/fetch"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/simfleet"
	"github.com/gpumon/gpumon/internal/simfleet/fleetproc"
)

// startFleetProcess starts n generated hosts, with fault's failures (see
// fleetproc.Start), in a child process (so that the CPU the benchmark
// reports is fetch's alone), with a config.ini whose per-host timeout is
// timeoutS and that writes the CSV, the page and the history into dir.
func startFleetProcess(b *testing.B, n int, fault string, timeoutS int, dir string) *fleetproc.Proc {
	b.Helper()
	fp := fleetproc.Start(b, n, filepath.Join(dir, "client"), fault)
	fp.SetINI(b, func(ini []byte) []byte {
		ini = bytes.Replace(ini, []byte("timeout = 5\n"), fmt.Appendf(nil, "timeout = %d\n", timeoutS), 1)
		return fmt.Appendf(ini, "output = %s\n\n[render]\nhtml = %s\n\n[history]\ndb = %s\n",
			filepath.Join(dir, "load_data.csv"), filepath.Join(dir, "index.html"), filepath.Join(dir, "history.db"))
	})
	return fp
}

func cpuSelf() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memory is the heap in use after two collections (the second empties
// sync.Pools' victim caches), and the resident set, in MB.
func memory(b *testing.B) (heap, rss float64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			rss = kib / 1000
		}
	}
	return float64(ms.HeapInuse) / 1e6, rss
}

// BenchmarkLive runs live mode over 1,000 simulated hosts (8 GPUs each,
// about half busy), one round per iteration: a session on every kept
// connection, the CSV written, the page, status.json and metrics.prom
// rendered and the history recorded, as fetch -every does. Rounds follow
// one another at once (the interval's wait is no work); their clock moves
// on 15 s a round, so each is a snapshot of its own in the history.
//
// cpu-ms/round is fetch's CPU (user+system) per round, render included;
// core-%@15s is what that is as a share of one core at one round every
// 15 s. heap-MB and rss-MB are measured after 10 warm-up rounds (@10) and
// after all of them (@end): they should stay flat. handshakes is the
// number of SSH handshakes the fleet completed over all rounds (one per
// host), sessions/round the sessions it opened per round.
//
// poll-only leaves the render step out: the CSV is still written.
//
// tenth-dead is render with a tenth of the hosts failing (fleetproc's
// "tenth": a third of them refuse connections, a third accept and never
// speak SSH, a third open the session and never answer), a 5 s per-host
// timeout and a 3 s cut-off (Live.RoundWait): each round waits the
// cut-off for the hung hosts, so its wall time is the cut-off plus the
// render, and must not grow. round-s and round-s-max are a round's wall
// time, on average and at most; dials/round the SSH connections fetch
// attempted per round (a failing host's re-dials back off) and
// handshakes/round those completed, over the measured rounds;
// healthy-late the rows of healthy hosts still answering at a cut-off, or
// timed out, over the measured rounds (0 on a machine of its own: every
// healthy host answers in every round). A failing host's row is never ok.
func BenchmarkLive(b *testing.B) {
	b.Run("render/hosts=1000", func(b *testing.B) { benchLive(b, liveCase{render: true}) })
	b.Run("poll-only/hosts=1000", func(b *testing.B) { benchLive(b, liveCase{}) })
	b.Run("tenth-dead/hosts=1000", func(b *testing.B) {
		benchLive(b, liveCase{render: true, fault: "tenth", timeoutS: 5, cutoff: 3 * time.Second})
	})
}

// liveCase is one of BenchmarkLive's fleets.
type liveCase struct {
	render   bool
	fault    string        // fleetproc's fault; "": every host healthy
	timeoutS int           // per-host timeout; 0: 20 s
	cutoff   time.Duration // Live.RoundWait; 0: its default
}

func benchLive(b *testing.B, c liveCase) {
	const hosts, warmup = 1000, 10
	debug.SetMemoryLimit(fetch.MemoryLimit)
	dir := b.TempDir()
	if c.timeoutS == 0 {
		c.timeoutS = 20
	}
	specs, err := fleetproc.Specs(hosts, c.fault)
	if err != nil {
		b.Fatal(err)
	}
	failing := map[string]bool{}
	for _, s := range specs {
		if s.Failure != simfleet.None {
			failing[s.Name] = true
		}
	}
	fp := startFleetProcess(b, hosts, c.fault, c.timeoutS, dir)
	cfg, err := fetch.LoadConfig(fp.INI)
	if err != nil {
		b.Fatal(err)
	}
	var stderr lockedBuffer
	l, closeAll, err := fetch.SetupLive(context.Background(), cfg, every, publishing, &stderr)
	if err != nil {
		b.Fatal(err)
	}
	clock := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	ticks := make(chan time.Time)
	rounds := make(chan *fetch.Round)
	l.Now = func() time.Time { return clock }
	l.Poller.Now = l.Now
	l.Ticks = ticks
	l.RoundWait = c.cutoff
	dialer := l.Poller.Runner.(interface{ Dials() int64 })
	render := l.Publish
	l.Publish = func(ctx context.Context, r *fetch.Round) error {
		var err error
		if c.render {
			if err = render(ctx, r); err != nil {
				b.Errorf("render: %v", err)
			}
		}
		rounds <- r
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	n, late := 0, 0
	var longest time.Duration
	round := func() {
		start := time.Now()
		if n > 0 {
			clock = clock.Add(every) // the loop reads it only after the tick
			ticks <- clock
		}
		n++
		r := <-rounds
		longest = max(longest, time.Since(start))
		for _, res := range r.Results {
			// With tenth-dead's short cut-off and timeout, a healthy
			// host that timed out, or is still answering at the
			// cut-off, is counted, not fatal: the first round dials
			// every host, and on a 2-core machine shared with other work
			// a poll can outlast a 3 s cut-off or even the 5 s timeout.
			if c.fault != "" && !failing[res.Host] && res.Status == hoststatus.Timeout {
				if n > warmup {
					late++
				}
				continue
			}
			if ok := res.Status == hoststatus.OK; ok == failing[res.Host] {
				b.Fatalf("round %d: %s (failing: %v): %s: %s", r.N, res.Host, failing[res.Host], res.Status, res.Error)
			}
		}
	}
	for range warmup {
		round()
	}
	heap10, rss10 := memory(b)
	before := fp.Stats(b)
	dials0 := dialer.Dials()
	longest = 0
	cpu0 := cpuSelf()
	b.ResetTimer()
	for b.Loop() {
		round()
	}
	b.StopTimer()
	cpu := cpuSelf() - cpu0
	after := fp.Stats(b)
	heapN, rssN := memory(b)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	closeAll()
	perRound := cpu / time.Duration(b.N)
	b.ReportMetric(float64(perRound.Microseconds())/1000, "cpu-ms/round")
	b.ReportMetric(100*perRound.Seconds()/every.Seconds(), "core-%@15s")
	b.ReportMetric(heap10, "heap-MB@10")
	b.ReportMetric(heapN, "heap-MB@end")
	b.ReportMetric(rss10, "rss-MB@10")
	b.ReportMetric(rssN, "rss-MB@end")
	b.ReportMetric(float64(after.Authed), "handshakes")
	b.ReportMetric(float64(after.Sessions-before.Sessions)/float64(b.N), "sessions/round")
	if c.fault == "" {
		if after.Authed != hosts {
			b.Errorf("%d handshakes over %d rounds, want %d", after.Authed, n, hosts)
		}
		return
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "round-s")
	b.ReportMetric(longest.Seconds(), "round-s-max")
	b.ReportMetric(float64(dialer.Dials()-dials0)/float64(b.N), "dials/round")
	b.ReportMetric(float64(after.Authed-before.Authed)/float64(b.N), "handshakes/round")
	b.ReportMetric(float64(late), "healthy-late")
}
