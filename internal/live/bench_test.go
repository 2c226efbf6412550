package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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
)

// The benchmark runs the simulated fleet in a child process (this test
// binary, re-executed), so that the CPU time it reports is fetch's alone.
const fleetChildEnv = "GPUMON_TEST_LIVE_SIMFLEET"

func TestMain(m *testing.M) {
	if spec := os.Getenv(fleetChildEnv); spec != "" {
		if err := serveFleet(spec); err != nil {
			fmt.Fprintln(os.Stderr, "simfleet child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveFleet is the child: spec is "N DIR". It prints the config path once
// every host listens, then its Stats as JSON for each line "stats" on its
// stdin, until stdin closes.
func serveFleet(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 2 {
		return fmt.Errorf("bad spec %q", spec)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return err
	}
	fleet, err := simfleet.Launch(simfleet.Generate(n, 1))
	if err != nil {
		return err
	}
	defer fleet.Close()
	cf, err := fleet.WriteClientFiles(f[1])
	if err != nil {
		return err
	}
	fmt.Println(cf.ConfigINI)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		js, _ := json.Marshal(fleet.Stats())
		fmt.Println(string(js))
	}
	return nil
}

type fleetProcess struct {
	cmd    *exec.Cmd
	stdin  interface{ Write([]byte) (int, error) }
	stdout *bufio.Reader
	ini    string
}

func startFleetProcess(b *testing.B, n int, dir string) *fleetProcess {
	b.Helper()
	b.Setenv("HOME", b.TempDir())
	b.Setenv("SSH_AUTH_SOCK", "")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s", fleetChildEnv, n, filepath.Join(dir, "client")))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("simulated fleet: %v", err)
		}
	})
	fp := &fleetProcess{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	line, err := fp.stdout.ReadString('\n')
	if err != nil {
		b.Fatalf("simulated fleet did not start: %v", err)
	}
	fp.ini = strings.TrimSpace(line)
	ini, err := os.ReadFile(fp.ini)
	if err != nil {
		b.Fatal(err)
	}
	ini = bytes.Replace(ini, []byte("timeout = 5\n"), []byte("timeout = 20\n"), 1)
	ini = fmt.Appendf(ini, "output = %s\n\n[render]\nhtml = %s\n\n[history]\ndb = %s\n",
		filepath.Join(dir, "load_data.csv"), filepath.Join(dir, "index.html"), filepath.Join(dir, "history.db"))
	if err := os.WriteFile(fp.ini, ini, 0o644); err != nil {
		b.Fatal(err)
	}
	return fp
}

func (fp *fleetProcess) stats(b *testing.B) simfleet.Stats {
	if _, err := fp.stdin.Write([]byte("stats\n")); err != nil {
		b.Fatal(err)
	}
	line, err := fp.stdout.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	var s simfleet.Stats
	if err := json.Unmarshal([]byte(line), &s); err != nil {
		b.Fatal(err)
	}
	return s
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
func BenchmarkLive(b *testing.B) {
	b.Run("render/hosts=1000", func(b *testing.B) { benchLive(b, true) })
	b.Run("poll-only/hosts=1000", func(b *testing.B) { benchLive(b, false) })
}

func benchLive(b *testing.B, withRender bool) {
	const hosts, warmup = 1000, 10
	debug.SetMemoryLimit(fetch.MemoryLimit)
	dir := b.TempDir()
	fp := startFleetProcess(b, hosts, dir)
	cfg, err := fetch.LoadConfig(fp.ini)
	if err != nil {
		b.Fatal(err)
	}
	var stderr lockedBuffer
	l, closeAll, err := fetch.SetupLive(context.Background(), cfg, every, NewRenderer, &stderr)
	if err != nil {
		b.Fatal(err)
	}
	clock := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	ticks := make(chan time.Time)
	rounds := make(chan *fetch.Round)
	l.Now = func() time.Time { return clock }
	l.Poller.Now = l.Now
	l.Ticks = ticks
	render := l.AfterWrite
	l.AfterWrite = func(ctx context.Context, r *fetch.Round) error {
		var err error
		if withRender {
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
	n := 0
	round := func() {
		if n > 0 {
			clock = clock.Add(every) // the loop reads it only after the tick
			ticks <- clock
		}
		n++
		r := <-rounds
		for _, res := range r.Results {
			if res.Status != hoststatus.OK {
				b.Fatalf("round %d: %s: %s: %s", r.N, res.Host, res.Status, res.Error)
			}
		}
	}
	for range warmup {
		round()
	}
	heap10, rss10 := memory(b)
	before := fp.stats(b)
	cpu0 := cpuSelf()
	b.ResetTimer()
	for b.Loop() {
		round()
	}
	b.StopTimer()
	cpu := cpuSelf() - cpu0
	after := fp.stats(b)
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
	if after.Authed != hosts {
		b.Errorf("%d handshakes over %d rounds, want %d", after.Authed, n, hosts)
	}
}
