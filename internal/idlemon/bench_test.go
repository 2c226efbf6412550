package idlemon

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlestate"
)

// BenchmarkPreemptionLatency: from a foreign open() of a device file to
// SIGTERM delivered to the job, measured in the two processes (the opener
// notes the time just before open(2), the job when its signal handler
// runs). interval_seconds = 10, so only the inotify path can be fast.
func BenchmarkPreemptionLatency(b *testing.B) {
	e := newEnv(b, 1)
	benchPreemption(b, e, e.devs[0], nil, nil)
}

// BenchmarkPreemptionLatencyAMD: the same on an AMD host: the job holds
// /dev/kfd itself (as a ROCm job does: it is ours, and every GPU's), the
// opener opens /dev/kfd with a KFD entry that shows no VRAM yet (as a
// ROCm program that has just started), so the scan reads the KFD entries
// too.
func BenchmarkPreemptionLatencyAMD(b *testing.B) {
	e := newAMDEnv(b, 2)
	ids := make([]string, len(e.gpuIDs))
	for i, id := range e.gpuIDs {
		ids[i] = strconv.FormatUint(uint64(id), 10)
	}
	benchPreemption(b, e, e.kfd, []string{"OPEN_DEV=" + e.kfd},
		[]string{"KFD_PROC=" + filepath.Join(e.sysfs, "proc"), "KFD_GPU_IDS=" + strings.Join(ids, ",")})
}

// benchPreemption measures the preemption of a job on GPU 0 of e by the
// opener's opens of dev; jobEnv and openerEnv are added to the job's and
// the opener's environments.
func benchPreemption(b *testing.B, e *env, dev string, jobEnv, openerEnv []string) {
	ready, term := e.path("ready"), e.path("term")
	// The job notes when its SIGTERM arrives: at the lowest CPU weight (the
	// default) it waits for a CPU itself on a busy machine, which is not
	// idlemon's latency. A normal process's weight keeps that out.
	e.start(fmt.Sprintf(`interval_seconds = 10
min_idle_seconds = 0
grace_seconds = 5
user = root
cpu_weight = 100
[process-bench]
gpus = 0
cmd = IDLEMON_TEST_HELPER=term READY_FILE=%s TERM_FILE=%s %s exec %s
`, ready, term, strings.Join(jobEnv, " "), os.Args[0]), options{})

	opener := exec.Command(os.Args[0])
	opener.Env = append(append(os.Environ(), "IDLEMON_TEST_HELPER=opener", "DEV="+dev), openerEnv...)
	in, _ := opener.StdinPipe()
	outp, _ := opener.StdoutPipe()
	if err := opener.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); opener.Wait() }()
	lines := bufio.NewScanner(outp)
	say := func(cmd string) string {
		fmt.Fprintln(in, cmd)
		if !lines.Scan() {
			b.Fatalf("opener: %v", lines.Err())
		}
		return lines.Text()
	}
	trials := max(b.N, 20)
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < trials; i++ {
		waitFile(b, ready, 10*time.Second)
		os.Remove(ready)
		t0, err := strconv.ParseInt(say("open"), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		t1, err := strconv.ParseInt(strings.TrimSpace(string(waitFile(b, term, 10*time.Second))), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		os.Remove(term)
		lat = append(lat, time.Duration(t1-t0))
		say("close")
	}
	b.StopTimer()
	if n := e.countLog("stopped job process-bench .* - preempted by "); n != trials {
		b.Errorf("%d preemptions by the opener for %d opens:\n%s", n, trials, e.log.String())
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		i := int(p*float64(len(lat))+0.5) - 1
		i = min(max(i, 0), len(lat)-1)
		return float64(lat[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.90), "p90-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(len(lat)), "trials")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkScan2000: one scan of /proc with 2,000 extra sleeping processes,
// every 100th holding one of four device files; then the daemon's whole
// step (scan, decisions, state file at most once a second) with a job
// running on a fifth GPU, its leader and two children holding it.
func BenchmarkScan2000(b *testing.B) {
	e := newEnv(b, 5)
	var files []*os.File
	for _, d := range e.devs[:4] {
		f, err := os.Open(d)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	procs := startSleepers(b, 2000, files)
	defer stopAll(procs)
	devs, err := holders.Find(e.path("dev/nvidia[0-9]*"))
	if err != nil {
		b.Fatal(err)
	}
	sc := holders.NewScanner(devs)
	snap, err := sc.Scan()
	if err != nil {
		b.Fatal(err)
	}
	held := 0
	for _, p := range snap.Holders {
		held += len(p)
	}
	if len(snap.PIDs) < 2000 || held < 20 {
		b.Fatalf("scan saw %d processes, %d holders", len(snap.PIDs), held)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := sc.Scan(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/scan")
	b.StopTimer()
	// What a scan costs while a job runs: every stat line is read too, for
	// the job's processes (Descendants).
	start = time.Now()
	for i := 0; i < b.N; i++ {
		s, err := sc.Scan()
		if err != nil {
			b.Fatal(err)
		}
		s.Descendants([]int{os.Getpid()}, map[int]bool{os.Getpid(): true})
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/scan+members")
	b.ReportMetric(float64(len(snap.PIDs)), "procs")

	// The steady state with a job running: what idlemon does every
	// interval_seconds.
	d := e.daemon(fmt.Sprintf(`interval_seconds = 10
min_idle_seconds = 0
grace_seconds = 2
user = root
[process-bench]
gpus = 4
cmd = exec 3<%s; sleep 600 & sleep 600 & wait
`, e.devs[4]), options{})
	d.step(time.Now())
	j := d.runs[0]
	if j.job == nil {
		b.Fatalf("job not started:\n%s", e.log.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := sc.Scan()
		if err != nil {
			b.Fatal(err)
		}
		if len(s.Holders[4]) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the job's processes hold gpu 4: %v", s.Holders[4])
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.step(time.Now()) // lists the job's processes
	// Steady state: a job running for an hour, listed in full every
	// ProcsEvery (60s), not at these scans.
	j.job.Began = j.job.Began.Add(-time.Hour)
	start = time.Now()
	for i := 0; i < b.N; i++ {
		if d.step(time.Now()) {
			b.Fatal("preempted")
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/step-with-job")
	if len(j.procs) < 3 || j.job == nil || d.sched.Jobs[0].Phase != running {
		b.Fatalf("job %+v, procs %v:\n%s", j.job, j.procs, e.log.String())
	}
}

// startSleepers starts n sleeping processes, every 100th holding one of
// files open (in turn).
func startSleepers(b *testing.B, n int, files []*os.File) []*exec.Cmd {
	var procs []*exec.Cmd
	for i := 0; i < n; i++ {
		c := exec.Command("sleep", "600")
		if i%100 == 0 {
			c.ExtraFiles = []*os.File{files[(i/100)%len(files)]}
		}
		if err := c.Start(); err != nil {
			stopAll(procs)
			b.Fatalf("process %d: %v", i, err)
		}
		procs = append(procs, c)
	}
	return procs
}

func stopAll(procs []*exec.Cmd) {
	for _, c := range procs {
		c.Process.Kill()
		c.Wait()
	}
}

// BenchmarkScan2000AMD: BenchmarkScan2000's scan on an AMD host: 2,000
// extra sleeping processes, every 100th holding /dev/kfd, half of those
// with a KFD entry showing VRAM on one of 4 GPUs, the others without one
// (they hold every GPU: the scan walks up their parents).
func BenchmarkScan2000AMD(b *testing.B) {
	e := newAMDEnv(b, 4)
	f, err := os.Open(e.kfd)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	procs := startSleepers(b, 2000, []*os.File{f})
	defer stopAll(procs)
	for i := 0; i < len(procs); i += 200 {
		dir := filepath.Join(e.sysfs, "proc", strconv.Itoa(procs[i].Process.Pid))
		os.MkdirAll(dir, 0o755)
		for g, id := range e.gpuIDs {
			vram := "0\n"
			if g == (i/200)%len(e.gpuIDs) {
				vram = "1073741824\n"
			}
			os.WriteFile(filepath.Join(dir, "vram_"+strconv.FormatUint(uint64(id), 10)), []byte(vram), 0o644)
		}
	}
	sc := e.scanner()
	snap, err := sc.Scan()
	if err != nil {
		b.Fatal(err)
	}
	if len(snap.PIDs) < 2000 || len(snap.Holders[0]) < 10 || len(snap.Holders[3]) < 10 {
		b.Fatalf("scan saw %d processes, holders %v", len(snap.PIDs), snap.Holders)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := sc.Scan(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/scan")
	b.ReportMetric(float64(len(snap.PIDs)), "procs")
}

// BenchmarkCPU: idlemon's CPU time in each state it spends its life in,
// as % of one core, over a window (IDLEMON_CPU_WINDOW, default 10s; make
// bench: 60s). Three idlemon binaries (this test binary re-executed), each
// with 4 GPUs, interval_seconds = 10 and the terminal watch on, run side
// by side:
//   - rest: no job in the config, only watching;
//   - running: the shipped example's gpus = ALL job, running;
//   - waiting: the same job waiting (min_idle_seconds = 30) because
//     another process holds one of the 4 GPUs: the state that spun a
//     whole core before the schedule waited for scans instead of timers.
func BenchmarkCPU(b *testing.B) {
	window := 10 * time.Second
	if w, err := time.ParseDuration(os.Getenv("IDLEMON_CPU_WINDOW")); err == nil {
		window = w
	}
	const tty = "[tty]\nenabled = true\nidle_seconds = 300\n"
	const allJob = "[process-all]\ngpus = ALL\ncmd = exec sleep 600\n"
	states := []struct {
		name, body string
		ready      func(*idlestate.File) bool
		hold       bool // another process holds gpu 1
	}{
		{"rest", "interval_seconds = 10\n" + tty, func(f *idlestate.File) bool { return len(f.GPUs) == 4 }, false},
		{"running", "interval_seconds = 10\nmin_idle_seconds = 0\nuser = root\n" + allJob + tty, jobRunning("process-all"), false},
		{"waiting", "interval_seconds = 10\nmin_idle_seconds = 30\nuser = root\n" + allJob + tty, func(f *idlestate.File) bool {
			return f.GPUs[1].State == idlestate.Busy && !jobRunning("process-all")(f)
		}, true},
	}
	type daemon struct {
		name string
		cmd  *exec.Cmd
		e    *env
	}
	var ds []daemon
	for _, st := range states {
		e := newEnv(b, 4)
		if st.hold {
			f, err := os.Open(e.devs[1])
			if err != nil {
				b.Fatal(err)
			}
			c := exec.Command("sleep", "600")
			c.ExtraFiles = []*os.File{f}
			err = c.Start()
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			defer func() { c.Process.Kill(); c.Wait() }()
			e.waitHolder(1, c.Process.Pid, patience)
		}
		cmd := e.startBinary(e.config(st.body), st.name+".log")
		waitStateAt(b, e.statePath(), st.name, patience, func(f *idlestate.File) bool { return f.PID == cmd.Process.Pid && st.ready(f) })
		ds = append(ds, daemon{st.name, cmd, e})
	}
	cpu := func(pid int) time.Duration {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)            // field 14
		st, _ := strconv.ParseInt(f[12], 10, 64)            // field 15
		return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
	}
	b.ResetTimer()
	c0 := make([]time.Duration, len(ds))
	for i, d := range ds {
		c0[i] = cpu(d.cmd.Process.Pid)
	}
	t0 := time.Now()
	time.Sleep(window) // measuring a stretch of time: nothing to wait for
	t1 := time.Now()
	for i, d := range ds {
		b.ReportMetric(100*float64(cpu(d.cmd.Process.Pid)-c0[i])/float64(t1.Sub(t0)), d.name+"-%core")
	}
	for _, d := range ds {
		if f := d.e.readState(); d.name == "waiting" && jobRunning("process-all")(f) {
			b.Errorf("the waiting job started: %+v", f.Jobs)
		}
	}
	b.ReportMetric(t1.Sub(t0).Seconds(), "window-s")
	b.ReportMetric(0, "ns/op")
}
