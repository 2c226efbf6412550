package textfile

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/testenv"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// at is t0 plus seconds.
func at(seconds float64) time.Time { return t0.Add(time.Duration(seconds * float64(time.Second))) }

// busyHost is an idlemon that has done a bit of everything: a job with a
// name that needs escaping, leftovers, every stop reason, refusals, and
// usage with a field not known.
func busyHost(vendor string) *Metrics {
	m := New([]Job{{Name: "process-miner", GPUs: 2}, {Name: "process-all", GPUs: 8}, {Name: "process-we\"ird\\\n", GPUs: 1}},
		vendor, "v2+v1", "1.4.0", t0)
	m.Leftovers(1, 3)
	m.Waiting(0, MinIdle)
	m.Started(0, at(30))
	m.Usage(0, Usage{CPUSeconds: 12.5, MemoryBytes: 3 << 30, OOMKills: 0, PidsMaxHits: -1})
	m.Stopped(0, Preempted, 4500*time.Millisecond, 3*time.Millisecond, at(34.5))
	m.Waiting(0, BusyGPU)
	m.Waiting(1, OtherJob)
	m.Waiting(2, TerminalUser)
	m.Waiting(2, "")
	m.Started(2, at(40))
	m.Stopped(2, Exited, 20*time.Second, 0, at(60))
	m.Waiting(2, Backoff)
	m.Started(2, at(61))
	m.Usage(2, Usage{CPUSeconds: 0.25, MemoryBytes: 1 << 20, OOMKills: 1, PidsMaxHits: 2})
	return m
}

func text(t testing.TB, m *Metrics, now time.Time) string {
	t.Helper()
	var b bytes.Buffer
	if err := m.WriteTo(&b, now); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	testenv.Golden(t, "testdata/nvidia.prom.golden", []byte(text(t, busyHost("nvidia"), at(100))))
}

// promtool is Prometheus's own checker; CI installs it (Debian's prometheus).
func TestPromtoolCheckMetrics(t *testing.T) {
	for name, m := range map[string]*Metrics{
		"fresh": New([]Job{{Name: "process-miner", GPUs: 1}}, "amd", "marks", "1.4.0", t0),
		"busy":  busyHost("nvidia"),
	} {
		t.Run(name, func(t *testing.T) { testenv.CheckMetrics(t, []byte(text(t, m, at(100)))) })
	}
}

// samples parses the exposition text into its samples' values by series
// (name and labels as written), failing on a series written twice.
func samples(t testing.TB, text string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		k := strings.LastIndexByte(line, ' ')
		if k < 0 {
			t.Errorf("not a sample: %q", line)
			continue
		}
		if _, dup := got[line[:k]]; dup {
			t.Errorf("%s written twice", line[:k])
		}
		got[line[:k]] = line[k+1:]
	}
	return got
}

// want checks the series of want in the text (others may be there too);
// a value of "absent" is a series that must not be.
func wantSamples(t testing.TB, text string, want map[string]string) {
	t.Helper()
	got := samples(t, text)
	sub := map[string]string{}
	for k := range want {
		if v, ok := got[k]; ok {
			sub[k] = v
		} else {
			sub[k] = "absent"
		}
	}
	if diff := cmp.Diff(want, sub); diff != "" {
		t.Errorf("samples differ (-want +got):\n%s", diff)
	}
}

func TestSequences(t *testing.T) {
	const job = `{name="j",vendor="nvidia"}`
	reason := func(r string) string { return `{name="j",reason="` + r + `",vendor="nvidia"}` }
	le := func(b string) string { return `{name="j",vendor="nvidia",le="` + b + `"}` }
	tests := []struct {
		name   string
		events func(m *Metrics)
		want   map[string]string
	}{
		{"preempted 3 times within 2 s of its start", func(m *Metrics) {
			for k := range 3 {
				start := at(float64(10 * k))
				m.Started(0, start)
				m.Stopped(0, Preempted, 2*time.Second, 4*time.Millisecond, start.Add(2*time.Second))
			}
		}, map[string]string{
			"idlemon_preempted_run_seconds_bucket" + le("1.0"):  "0",
			"idlemon_preempted_run_seconds_bucket" + le("5.0"):  "3",
			"idlemon_preempted_run_seconds_bucket" + le("30.0"): "3",
			"idlemon_preempted_run_seconds_bucket" + le("+Inf"): "3",
			"idlemon_preempted_run_seconds_sum" + job:           "6",
			"idlemon_preempted_run_seconds_count" + job:         "3",
			"idlemon_preemption_seconds_bucket" + le("0.005"):   "3",
			"idlemon_preemption_seconds_sum" + job:              "0.012",
			"idlemon_job_stops_total" + reason(Preempted):       "3",
			"idlemon_job_stops_total" + reason(Exited):          "0",
			"idlemon_job_starts_total" + job:                    "3",
			"idlemon_job_gpu_seconds_total" + job:               "12", // 3 runs of 2 s on 2 GPUs
			"idlemon_job_running" + job:                         "0",
		}},
		{"preemption latency into its buckets", func(m *Metrics) {
			for _, latency := range []time.Duration{3 * time.Millisecond, 40 * time.Millisecond, 2 * time.Second} {
				m.Started(0, t0)
				m.Stopped(0, Preempted, time.Hour, latency, t0.Add(time.Hour))
			}
		}, map[string]string{
			"idlemon_preemption_seconds_bucket" + le("0.005"):     "1",
			"idlemon_preemption_seconds_bucket" + le("0.025"):     "1",
			"idlemon_preemption_seconds_bucket" + le("0.05"):      "2",
			"idlemon_preemption_seconds_bucket" + le("1.0"):       "2",
			"idlemon_preemption_seconds_bucket" + le("2.5"):       "3",
			"idlemon_preemption_seconds_sum" + job:                "2.043",
			"idlemon_preempted_run_seconds_bucket" + le("3600.0"): "3",
			"idlemon_preempted_run_seconds_bucket" + le("1800.0"): "0",
		}},
		{"a run of exactly a bound is in its bucket", func(m *Metrics) {
			m.Started(0, t0)
			m.Stopped(0, Preempted, 30*time.Second, 10*time.Millisecond, at(30))
		}, map[string]string{
			"idlemon_preempted_run_seconds_bucket" + le("10.0"): "0",
			"idlemon_preempted_run_seconds_bucket" + le("30.0"): "1",
			"idlemon_preemption_seconds_bucket" + le("0.005"):   "0",
			"idlemon_preemption_seconds_bucket" + le("0.01"):    "1",
		}},
		{"a fresh job has every known reason, at 0", func(m *Metrics) {}, map[string]string{
			"idlemon_job_stops_total" + reason(Preempted):             "0",
			"idlemon_job_stops_total" + reason(Shutdown):              "0",
			"idlemon_job_start_refusals_total" + reason(StartFailed):  "0",
			"idlemon_job_start_refusals_total" + reason(TerminalUser): "0",
			"idlemon_job_waiting" + reason(Backoff):                   "0",
			"idlemon_job_running" + job:                               "0",
			"idlemon_job_gpu_seconds_total" + job:                     "0",
			"idlemon_preempted_run_seconds_count" + job:               "0",
			`idlemon_leftover_runs_total{vendor="nvidia"}`:            "0",
		}},
		{"a job that exits is not preempted", func(m *Metrics) {
			m.Started(0, t0)
			m.Stopped(0, Exited, time.Second, 0, at(1))
		}, map[string]string{
			"idlemon_job_stops_total" + reason(Exited):    "1",
			"idlemon_job_stops_total" + reason(Preempted): "0",
			"idlemon_preemption_seconds_count" + job:      "0",
			"idlemon_preempted_run_seconds_count" + job:   "0",
		}},
		{"busy_gpu twice in a row is one refusal", func(m *Metrics) {
			m.Waiting(0, BusyGPU)
			m.Waiting(0, BusyGPU)
		}, map[string]string{
			"idlemon_job_start_refusals_total" + reason(BusyGPU): "1",
			"idlemon_job_waiting" + reason(BusyGPU):              "1",
			"idlemon_job_waiting" + reason(MinIdle):              "0",
		}},
		{"busy_gpu, nothing, busy_gpu is two", func(m *Metrics) {
			m.Waiting(0, BusyGPU)
			m.Waiting(0, "")
			m.Waiting(0, BusyGPU)
		}, map[string]string{
			"idlemon_job_start_refusals_total" + reason(BusyGPU): "2",
			"idlemon_job_waiting" + reason(BusyGPU):              "1",
		}},
		{"another reason between counts both", func(m *Metrics) {
			m.Waiting(0, BusyGPU)
			m.Waiting(0, TerminalUser)
			m.Waiting(0, BusyGPU)
		}, map[string]string{
			"idlemon_job_start_refusals_total" + reason(BusyGPU):      "2",
			"idlemon_job_start_refusals_total" + reason(TerminalUser): "1",
			"idlemon_job_waiting" + reason(BusyGPU):                   "1",
			"idlemon_job_waiting" + reason(TerminalUser):              "0",
		}},
		{"a run ends the wait: the same reason after it is a new refusal", func(m *Metrics) {
			m.Waiting(0, BusyGPU)
			m.Started(0, t0)
			m.Stopped(0, Preempted, time.Second, time.Millisecond, at(1))
			m.Waiting(0, BusyGPU)
		}, map[string]string{
			"idlemon_job_start_refusals_total" + reason(BusyGPU): "2",
		}},
		{"a running job waits for nothing", func(m *Metrics) {
			m.Waiting(0, BusyGPU)
			m.Started(0, t0)
		}, map[string]string{
			"idlemon_job_waiting" + reason(BusyGPU): "0",
			"idlemon_job_running" + job:             "1",
		}},
		{"a reason idlemon does not know yet has its own series", func(m *Metrics) {
			m.Waiting(0, "unhealthy")
		}, map[string]string{
			"idlemon_job_start_refusals_total" + reason("unhealthy"): "1",
			"idlemon_job_waiting" + reason("unhealthy"):              "1",
		}},
		{"usage: -1 is not written", func(m *Metrics) {
			m.Started(0, t0)
			m.Usage(0, Usage{CPUSeconds: -1, MemoryBytes: 5 << 30, OOMKills: -1, PidsMaxHits: 0})
		}, map[string]string{
			"idlemon_job_cpu_seconds" + job:   "absent",
			"idlemon_job_memory_bytes" + job:  "5368709120",
			"idlemon_job_oom_kills" + job:     "absent",
			"idlemon_job_pids_max_hits" + job: "0",
		}},
		{"usage stays after the run, for the OOM kill that ended it", func(m *Metrics) {
			m.Started(0, t0)
			m.Usage(0, Usage{CPUSeconds: 1, MemoryBytes: 1, OOMKills: 1, PidsMaxHits: 0})
			m.Stopped(0, Exited, time.Second, 0, at(1))
		}, map[string]string{
			"idlemon_job_oom_kills" + job: "1",
		}},
		{"usage goes with the next run's start", func(m *Metrics) {
			m.Started(0, t0)
			m.Usage(0, Usage{CPUSeconds: 1, MemoryBytes: 1, OOMKills: 1, PidsMaxHits: 0})
			m.Stopped(0, Exited, time.Second, 0, at(1))
			m.Started(0, at(2))
		}, map[string]string{
			"idlemon_job_oom_kills" + job:   "absent",
			"idlemon_job_cpu_seconds" + job: "absent",
		}},
		{"leftovers add up", func(m *Metrics) {
			m.Leftovers(1, 4)
			m.Leftovers(2, 3)
		}, map[string]string{
			`idlemon_leftover_runs_total{vendor="nvidia"}`:      "3",
			`idlemon_leftover_processes_total{vendor="nvidia"}`: "7",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New([]Job{{Name: "j", GPUs: 2}}, "nvidia", "v2", "1.4.0", t0)
			tt.events(m)
			wantSamples(t, text(t, m, at(3600)), tt.want)
		})
	}
}

// A running job's GPU-seconds grow with the clock, its current run
// included; and never go back, whatever ran Stopped is told.
func TestGPUSecondsOfARunningJob(t *testing.T) {
	m := New([]Job{{Name: "j", GPUs: 2}}, "nvidia", "v2", "1.4.0", t0)
	const series = `idlemon_job_gpu_seconds_total{name="j",vendor="nvidia"}`
	m.Started(0, at(10))
	for _, step := range []struct {
		name  string
		event func()
		now   float64
		want  string
	}{
		{"before it ran", func() {}, 10, "0"},
		{"90 s into the run", func() {}, 100, "180"},
		{"a write a moment earlier than the last", func() {}, 99.5, "180"},
		{"ended, ran 89.5 s by the daemon's count", func() { m.Stopped(0, Terminal, 89500*time.Millisecond, 0, at(100)) }, 100, "180"},
		{"a second run, 10 s in", func() { m.Started(0, at(200)) }, 210, "199"},
		{"the second run ended after 10 s", func() { m.Stopped(0, Exited, 10*time.Second, 0, at(210)) }, 300, "199"},
	} {
		step.event()
		wantSamples(t, text(t, m, at(step.now)), map[string]string{series: step.want})
		if t.Failed() {
			t.Fatalf("at %q", step.name)
		}
	}
}

// node_exporter merges the files of its folder: two idlemons on one host,
// with the same job names, must write no series twice, and the same HELP
// and TYPE for each family.
func TestTwoVendorsOnOneHost(t *testing.T) {
	nv, amd := text(t, busyHost("nvidia"), at(100)), text(t, busyHost("amd"), at(100))
	samples(t, nv+amd) // fails on a series both write
	comments := func(s string) []string {
		var c []string
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "#") {
				c = append(c, l)
			}
		}
		return c
	}
	if diff := cmp.Diff(comments(nv), comments(amd)); diff != "" {
		t.Errorf("HELP or TYPE differ between vendors (-nvidia +amd):\n%s", diff)
	}
}

// Every family has HELP then TYPE, once, families sorted by name, and
// every sample follows its own family's TYPE.
func TestFamilies(t *testing.T) {
	var families []string
	family := ""
	lines := strings.Split(strings.TrimSuffix(text(t, busyHost("nvidia"), at(100)), "\n"), "\n")
	for k, line := range lines {
		switch f := strings.Fields(line); {
		case strings.HasPrefix(line, "# HELP "):
			if k+1 == len(lines) || !strings.HasPrefix(lines[k+1], "# TYPE "+f[2]+" ") {
				t.Errorf("HELP of %s not followed by its TYPE", f[2])
			}
		case strings.HasPrefix(line, "# TYPE "):
			family = f[2]
			families = append(families, family)
		default:
			name, _, _ := strings.Cut(f[0], "{")
			if base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count"); base != family && name != family {
				t.Errorf("%s under the TYPE of %s", name, family)
			}
		}
	}
	if !slices.IsSorted(families) || len(slices.Compact(slices.Clone(families))) != len(families) {
		t.Errorf("families not sorted and unique: %v", families)
	}
}

// Writing is the same text each time for the same counters and clock.
func TestDeterministic(t *testing.T) {
	if a, b := text(t, busyHost("nvidia"), at(100)), text(t, busyHost("nvidia"), at(100)); a != b {
		t.Errorf("two writes differ:\n%s", cmp.Diff(a, b))
	}
}

// A run's OOM kills outlive it in the counter; a group read as it goes
// (every field -1) keeps the run's last values.
func TestOOMKillsOutliveTheRun(t *testing.T) {
	m := New([]Job{{Name: "process-a", GPUs: 1}}, "nvidia", "v2", "1", at(0))
	m.Started(0, at(0))
	m.Usage(0, Usage{CPUSeconds: 1, MemoryBytes: 100, OOMKills: 0, PidsMaxHits: 0})
	m.Usage(0, Usage{CPUSeconds: 2, MemoryBytes: 200, OOMKills: 2, PidsMaxHits: 0})
	m.Usage(0, Usage{-1, -1, -1, -1}) // the group is gone
	m.Stopped(0, Exited, 10*time.Second, 0, at(10))
	m.Started(0, at(11))
	m.Usage(0, Usage{CPUSeconds: 0, MemoryBytes: 10, OOMKills: 1, PidsMaxHits: 0})
	got := samples(t, text(t, m, at(12)))
	for series, want := range map[string]string{
		`idlemon_job_oom_kills_total{name="process-a",vendor="nvidia"}`: "3",
		`idlemon_job_oom_kills{name="process-a",vendor="nvidia"}`:       "1",
	} {
		if got[series] != want {
			t.Errorf("%s = %q, want %s", series, got[series], want)
		}
	}
}
