package render

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// childEnv makes the test binary run the render command itself (for
// BenchmarkRender/peak, which measures the command's peak memory alone).
const childEnv = "GPUMON_RENDER_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			panic(err)
		}
		if err := Main(context.Background(), argv, io.Discard, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "render:", err)
			os.Exit(1)
		}
		// The peak of this process's own memory. Not rusage's maxrss: the
		// child starts sharing the parent's memory (vfork) and Linux counts
		// the parent's resident set in the child's maxrss.
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			panic(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				fmt.Println(line)
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fleetRows is hosts × gpus GPUs, about half of them busy with one or two
// processes, with realistic command lines.
func fleetRows(hosts, gpus int) []loaddata.Row {
	var rows []loaddata.Row
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	for h := 0; h < hosts; h++ {
		host := fmt.Sprintf("gpu%04d", h)
		for g := 0; g < gpus; g++ {
			base := loaddata.Row{Timestamp: "2026-11-23T14:05:00Z", Host: host, HostStatus: hoststatus.OK,
				GPUIndex: loaddata.IntOf(int64(g)), GPUUUID: fmt.Sprintf("GPU-%08x-1111-2222-3333-%012x", h, g),
				GPUName: "NVIDIA H100 80GB HBM3", GPUBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+g),
				GPUUtilPct: loaddata.Num(0), MemUtilPct: loaddata.Num(0), MemUsedMiB: loaddata.Num(4), MemTotalMiB: loaddata.Num(81559),
				TempC: loaddata.Num(35), PowerW: loaddata.Num(70.5), PowerLimitW: loaddata.Num(700),
				CPUs: loaddata.IntOf(192), Load1: loaddata.Num(24.3), HostMemUsedMiB: loaddata.Num(1239040), HostMemTotalMiB: loaddata.Num(2097152)}
			n := (h*gpus + g) % 4 // 0, 1: free; 2: one process; 3: two
			if n < 2 {
				rows = append(rows, base)
				continue
			}
			base.GPUUtilPct, base.MemUsedMiB = loaddata.Num(97), loaddata.Num(61000)
			for p := 0; p < n-1; p++ {
				r := base
				r.PID = loaddata.IntOf(int64(400000 + h*16 + g*2 + p))
				r.User = users[(h+g+p)%len(users)]
				r.Command = fmt.Sprintf("/opt/conda/envs/train/bin/python -u train.py --config configs/run%d.yaml --seed %d", h%50, p)
				r.ProcessMemMiB = loaddata.Num(30000)
				r.ProcessElapsedS = loaddata.IntOf(int64(3600*h%200000 + 61))
				rows = append(rows, r)
			}
		}
	}
	return rows
}

// BenchmarkRender: 1000 hosts × 8 GPUs. "command" is the whole command on a
// CSV file (read, classify, write the page, status.json and metrics.prom),
// with the size of each output;
// "html" is the page alone from classified data; "peak" runs the command
// once in a child process and reports its peak resident memory.
func BenchmarkRender(b *testing.B) {
	dir := b.TempDir()
	csvPath := filepath.Join(dir, "load_data.csv")
	if err := loaddata.WriteFile(csvPath, fleetRows(1000, 8)); err != nil {
		b.Fatal(err)
	}
	args := []string{"-i", csvPath, "-o", filepath.Join(dir, "index.html"), "-c", filepath.Join(dir, "none.ini")}
	os.WriteFile(filepath.Join(dir, "none.ini"), nil, 0o644)

	b.Run("command", func(b *testing.B) {
		for b.Loop() {
			if err := Main(context.Background(), args, io.Discard, io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		for _, f := range []struct{ name, unit string }{
			{"index.html", "page-bytes"}, {"status.json", "json-bytes"}, {"metrics.prom", "prom-bytes"},
		} {
			st, err := os.Stat(filepath.Join(dir, f.name))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Size()), f.unit)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/render")
	})
	b.Run("html", func(b *testing.B) {
		rep := testReport(b, readRows(b, csvPath), "")
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := HTML(&buf, rep); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len()), "page-bytes")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/render")
	})
	b.Run("peak", func(b *testing.B) {
		var peak int64
		for b.Loop() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			argv, _ := json.Marshal(args)
			cmd.Env = append(os.Environ(), childEnv+"="+string(argv))
			out, err := cmd.CombinedOutput()
			if err != nil {
				b.Fatalf("%v\n%s", err, out)
			}
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "VmHWM: %d kB", &kib); err != nil {
				b.Fatalf("no VmHWM from the child: %q", out)
			}
			peak = max(peak, kib)
		}
		b.ReportMetric(float64(peak)/1024, "peak-MB")
	})
}

// BenchmarkRenderHistory: the whole command at 1000 hosts × 8 GPUs with 30
// days of history behind it (history.Synthesize: a snapshot every 5
// minutes, 200 users, whole snapshots for 14 days): each run records a new
// snapshot, reads the month's figures and writes the page, status.json and
// metrics.prom. "peak" runs it once in a child process. The database's size
// is reported too.
func BenchmarkRenderHistory(b *testing.B) {
	dir := b.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
	end := time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)
	if err := history.Synthesize(context.Background(), filepath.Join(dir, "history.db"), history.DefaultParams,
		DefaultKeepDays*24*time.Hour, 1000, 30, end); err != nil {
		b.Fatal(err)
	}
	rows := fleetRows(1000, 8)
	next := end
	csvAt := func() string {
		next = next.Add(5 * time.Minute)
		for i := range rows {
			rows[i].Timestamp = next.Format(time.RFC3339)
		}
		p := filepath.Join(dir, "load_data.csv")
		if err := loaddata.WriteFile(p, rows); err != nil {
			b.Fatal(err)
		}
		return p
	}
	b.Run("command", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			in := csvAt()
			b.StartTimer()
			if err := Main(context.Background(), []string{"-c", ini, "-i", in}, io.Discard, io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/render")
		st, err := os.Stat(filepath.Join(dir, "index.html"))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Size()), "page-bytes")
		var size int64
		for _, suffix := range []string{"", "-wal"} {
			if st, err := os.Stat(filepath.Join(dir, "history.db"+suffix)); err == nil {
				size += st.Size()
			}
		}
		b.ReportMetric(float64(size)/1e6, "db-MB")
	})
	b.Run("peak", func(b *testing.B) {
		var peak int64
		for b.Loop() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			argv, _ := json.Marshal([]string{"-c", ini, "-i", csvAt()})
			cmd.Env = append(os.Environ(), childEnv+"="+string(argv))
			out, err := cmd.CombinedOutput()
			if err != nil {
				b.Fatalf("%v\n%s", err, out)
			}
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "VmHWM: %d kB", &kib); err != nil {
				b.Fatalf("no VmHWM from the child: %q", out)
			}
			peak = max(peak, kib)
		}
		b.ReportMetric(float64(peak)/1024, "peak-MB")
	})
}
