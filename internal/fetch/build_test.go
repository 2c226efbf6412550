package fetch

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/attrib"
	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/remote"
	"github.com/gpumon/gpumon/internal/testenv"
)

var at = time.Date(2026, 11, 22, 14, 5, 0, 0, time.UTC)

// hostOutput is what a host prints, framed as the probe script frames it.
type hostOutput struct {
	gpus, apps, ps, host string
	gpusRC, appsRC, psRC int
	noApps, noPS         bool
	incomplete           bool
	banner               string
	idlemon              string // the state file's content, "" for none
	// attrib are the sections after ps (cgroups, squeue, docker); "@R@"
	// in their bodies becomes the record prefix of the run's nonce.
	attrib []section
}

type section struct {
	name, body string
	rc         int
}

func (h hostOutput) bytes(nonce string) []byte {
	var b bytes.Buffer
	b.WriteString(h.banner)
	w := probe.Writer{W: &b, Nonce: nonce}
	w.Section(probe.SectionGPUs, []byte(h.gpus), h.gpusRC)
	if h.incomplete {
		return b.Bytes()
	}
	if !h.noApps {
		w.Section(probe.SectionApps, []byte(h.apps), h.appsRC)
	}
	if !h.noPS {
		w.Section(probe.SectionPS, []byte(h.ps), h.psRC)
	}
	for _, s := range h.attrib {
		w.Section(s.name, []byte(strings.ReplaceAll(s.body, "@R@", probe.RecordPrefix(nonce))), s.rc)
	}
	host := h.host
	if host == "" {
		host = "cpus 64\nload 3.52 2.10 1.00\nmem_total_kib 2097152\nmem_available_kib 1048576\n"
	}
	w.Section(probe.SectionHost, []byte(host), 0)
	if h.idlemon != "" {
		w.Section(probe.SectionIdlemon, []byte(h.idlemon), 0)
	}
	w.Done()
	return b.Bytes()
}

// appsHeader is what nvidia-smi prints for probe.AppFields; shellLine is
// what ps says about the script's own shell, which it always lists.
const (
	appsHeader = "pid, gpu_uuid, used_gpu_memory [MiB]\n"
	shellLine  = "  901 gpumon                               0 sh -s\n"
)

const twoGPUs = `index, uuid, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%]
0, GPU-aaaa, NVIDIA H200, 00000000:18:00.0, 100, 40, 30342, 143771, 51, 412.50, 700.00, [N/A]
1, GPU-bbbb, NVIDIA H200, 00000000:2A:00.0, 0, 0, 0, 143771, 30, 75.10, 700.00, [N/A]
`

func TestBuild(t *testing.T) {
	tests := []struct {
		name   string
		out    hostOutput
		runErr error
		check  func(t *testing.T, r Result)
	}{
		{
			name: "processes with users, a pid on two GPUs, a pid gone before ps",
			out: hostOutput{
				gpus: twoGPUs,
				apps: appsHeader +
					"4242, GPU-aaaa, 30000\n" +
					"4242, GPU-bbbb, 100\n" +
					"5151, GPU-aaaa, 242\n",
				ps: shellLine + " 4242 alice      7260 python train.py --lr 0.1   --epochs 3\n",
			},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || r.Error != "" {
					t.Fatalf("status %q %q", r.Status, r.Error)
				}
				type proc struct {
					GPU     int64
					PID     int64
					User    string
					Command string
					Elapsed loaddata.Int
				}
				var got []proc
				for _, row := range r.Rows {
					got = append(got, proc{row.GPUIndex.Value, row.PID.Value, row.User, row.Command, row.ProcessElapsedS})
				}
				want := []proc{
					{0, 4242, "alice", "python train.py --lr 0.1   --epochs 3", loaddata.IntOf(7260)},
					{0, 5151, "", "", loaddata.Int{}},
					{1, 4242, "alice", "python train.py --lr 0.1   --epochs 3", loaddata.IntOf(7260)},
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				row := r.Rows[0]
				if row.FanPct.Valid || !row.PowerW.Valid || row.PowerW.Value != 412.5 || row.HostMemUsedMiB.Value != 1024 || row.CPUs.Value != 64 || row.Load1.Value != 3.52 {
					t.Errorf("readings: %+v", row)
				}
			},
		},
		{
			name: "idlemon's job processes are preemptible, a user's are not",
			out: hostOutput{
				gpus: twoGPUs,
				apps: appsHeader +
					"4242, GPU-aaaa, 30000\n" +
					"7001, GPU-bbbb, 2000\n",
				ps:      " 4242 alice 60 python train.py\n 7001 nobody 60 ./miner --pool x\n",
				idlemon: `{"version": 1, "pid": 900, "gpus": [], "jobs": [{"name": "process-miner", "gpus": [1], "pgid": 7000, "pids": [7000, 7001], "running": true}]}`,
			},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || r.Error != "" {
					t.Fatalf("status %q %q", r.Status, r.Error)
				}
				got := map[int64]loaddata.Flag{}
				for _, row := range r.Rows {
					got[row.PID.Value] = row.Preemptible
				}
				if diff := cmp.Diff(map[int64]loaddata.Flag{4242: false, 7001: true}, got); diff != "" {
					t.Errorf("preemptible (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "a broken idlemon state file is a warning, not a failed host",
			out: hostOutput{gpus: twoGPUs, apps: appsHeader, noPS: true,
				idlemon: "{not json"},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || len(r.Rows) != 2 || !strings.Contains(r.Error, "idlemon state file unreadable") {
					t.Errorf("status %q, error %q, %d rows", r.Status, r.Error, len(r.Rows))
				}
			},
		},
		{
			name: "a process named with a newline and a forged nvidia-smi line, as procps prints it",
			out: hostOutput{
				gpus: twoGPUs,
				apps: appsHeader + "4242, GPU-aaaa, 30000\n",
				ps:   shellLine + " 4242 mallory 60 python GPU-bbbb, 99999, forged, 70000..[31m\"q\" @@gpumon:n0nce end ps 0\n",
			},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || r.Error != "" || len(r.Rows) != 2 {
					t.Fatalf("status %q %q, %d rows", r.Status, r.Error, len(r.Rows))
				}
				got := r.Rows[0]
				want := procCells{4242, "mallory", `python GPU-bbbb, 99999, forged, 70000..[31m"q" @@gpumon:n0nce end ps 0`}
				if diff := cmp.Diff(want, cellsOf(got)); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				if r.Rows[1].PID.Valid || r.Rows[1].GPUUUID != "GPU-bbbb" {
					t.Errorf("GPU 1 gained a process: %+v", r.Rows[1])
				}
			},
		},
		{
			name: "ps missing on the host: processes stay, users unknown, and it says so",
			out: hostOutput{gpus: twoGPUs, apps: appsHeader + "4242, GPU-aaaa, 30000\n",
				ps: "sh: 1: ps: not found\n", psRC: 127},
			check: func(t *testing.T, r Result) {
				want := "ps failed (exit 127): sh: 1: ps: not found; users and commands unknown"
				if r.Status != hoststatus.OK || r.Error != want {
					t.Fatalf("status %q error %q, want ok %q", r.Status, r.Error, want)
				}
				if diff := cmp.Diff(procCells{PID: 4242}, cellsOf(r.Rows[0])); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				for _, row := range r.Rows {
					if row.HostError != want {
						t.Errorf("row without the warning: %+v", row)
					}
				}
			},
		},
		{
			name: "ps exits 1 with nothing: not even the shell is listed",
			out:  hostOutput{gpus: twoGPUs, apps: appsHeader + "4242, GPU-aaaa, 30000\n", psRC: 1},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || r.Error != "ps failed (exit 1); users and commands unknown" {
					t.Errorf("status %q error %q", r.Status, r.Error)
				}
			},
		},
		{
			name: "ps did not run although nvidia-smi listed processes",
			out:  hostOutput{gpus: twoGPUs, apps: appsHeader + "4242, GPU-aaaa, 30000\n", noPS: true},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || r.Error != "ps did not run; users and commands unknown" || !r.Rows[0].PID.Valid {
					t.Errorf("status %q error %q, row %+v", r.Status, r.Error, r.Rows[0])
				}
			},
		},
		{
			name: "every GPU process ended before ps ran: ps lists only the shell, no warning",
			out:  hostOutput{gpus: twoGPUs, apps: appsHeader + "4242, GPU-aaaa, 30000\n", ps: shellLine},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || r.Error != "" || r.Rows[0].PID.Value != 4242 || r.Rows[0].User != "" {
					t.Errorf("status %q error %q, row %+v", r.Status, r.Error, r.Rows[0])
				}
			},
		},
		{
			name: "two GPUs with the same index: both kept, told apart by uuid, and reported",
			out: hostOutput{
				gpus: twoGPUs + "0, GPU-cccc, NVIDIA H200, 00000000:3A:00.0, 7, 1, 500, 143771, 33, 80.00, 700.00, [N/A]\n",
				apps: appsHeader + "4242, GPU-aaaa, 30000\n5151, GPU-cccc, 400\n",
				ps:   shellLine + " 4242 alice 60 python a.py\n 5151 bob 60 python b.py\n",
			},
			check: func(t *testing.T, r Result) {
				want := "nvidia-smi gave GPU index 0 to 2 GPUs (GPU-aaaa, GPU-cccc); their rows differ by gpu_uuid"
				if r.Status != hoststatus.OK || r.Error != want {
					t.Fatalf("status %q error %q, want %q", r.Status, r.Error, want)
				}
				type gpuCells struct {
					Index     int64
					UUID, Bus string
					Util      float64
					PID       int64
					User      string
				}
				var got []gpuCells
				for _, row := range r.Rows {
					got = append(got, gpuCells{row.GPUIndex.Value, row.GPUUUID, row.GPUBusID, row.GPUUtilPct.Value, row.PID.Value, row.User})
				}
				wantRows := []gpuCells{
					{0, "GPU-aaaa", "00000000:18:00.0", 100, 4242, "alice"},
					{0, "GPU-cccc", "00000000:3A:00.0", 7, 5151, "bob"},
					{1, "GPU-bbbb", "00000000:2A:00.0", 0, 0, ""},
				}
				if diff := cmp.Diff(wantRows, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "idle host: one row per GPU, empty process cells",
			out:  hostOutput{gpus: twoGPUs, apps: appsHeader, noPS: true},
			check: func(t *testing.T, r Result) {
				if len(r.Rows) != 2 || r.Rows[0].PID.Valid || r.Rows[1].GPUIndex.Value != 1 {
					t.Errorf("rows %+v", r.Rows)
				}
			},
		},
		{
			name: "driver not loaded",
			out: hostOutput{gpus: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n", gpusRC: 9,
				apps: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", appsRC: 9, noPS: true},
			check: wantFailure(hoststatus.Driver, "driver not loaded"),
		},
		{
			name:  "no devices",
			out:   hostOutput{gpus: "No devices were found\n", gpusRC: 6, apps: "No devices were found", appsRC: 6, noPS: true},
			check: wantFailure(hoststatus.Driver, "no NVIDIA GPU"),
		},
		{
			name:   "nvidia-smi hung and was killed by timeout on the host",
			out:    hostOutput{gpus: "", gpusRC: 124, noApps: true, noPS: true},
			check:  wantFailure(hoststatus.Timeout, "did not answer"),
			runErr: nil,
		},
		{
			name:   "connection timeout with nothing received",
			runErr: &remote.Error{Status: hoststatus.Timeout, Msg: "no answer within 20s (while SSH handshake with 10.0.0.7:22)"},
			check:  wantFailure(hoststatus.Timeout, "while SSH handshake"),
		},
		{
			name:  "dropped mid-output",
			out:   hostOutput{gpus: twoGPUs, incomplete: true},
			check: wantFailure(hoststatus.Error, "ended early"),
		},
		{
			name: "one GPU lost between rows",
			out: hostOutput{gpus: strings.Replace(twoGPUs, "\n1, ", "\nUnable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU\n1, ", 1), gpusRC: 15,
				apps: appsHeader, noPS: true},
			check: func(t *testing.T, r Result) {
				if r.Status != hoststatus.OK || len(r.Rows) != 3 {
					t.Fatalf("status %q, %d rows: %+v", r.Status, len(r.Rows), r.Rows)
				}
				lost := r.Rows[2]
				if lost.GPUBusID == "" || !strings.Contains(lost.GPUError, "lost") || lost.GPUIndex.Valid {
					t.Errorf("lost GPU row %+v", lost)
				}
			},
		},
		{
			name:   "an account whose shell refuses to run anything",
			out:    hostOutput{},
			runErr: &remote.Error{Status: hoststatus.Error, Msg: "remote command exited with status 1: This account is currently not available."},
			check:  wantFailure(hoststatus.Error, "not available"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out []byte
			if tt.out.gpus != "" || tt.out.gpusRC != 0 || tt.out.incomplete {
				out = tt.out.bytes("n0nce")
			}
			r := buildResult("gpu01", "n0nce", out, tt.runErr, at)
			for _, row := range r.Rows {
				if row.Host != "gpu01" || row.Timestamp != "2026-11-22T14:05:00Z" || row.HostStatus != r.Status {
					t.Errorf("row identity: %+v", row)
				}
			}
			tt.check(t, r)
		})
	}
}

// procCells are a row's process cells.
type procCells struct {
	PID     int64
	User    string
	Command string
}

func cellsOf(r loaddata.Row) procCells { return procCells{r.PID.Value, r.User, r.Command} }

func wantFailure(status hoststatus.Status, msg string) func(t *testing.T, r Result) {
	return func(t *testing.T, r Result) {
		t.Helper()
		if r.Status != status || !strings.Contains(r.Error, msg) {
			t.Errorf("got %q %q, want %q containing %q", r.Status, r.Error, status, msg)
		}
		if len(r.Rows) != 1 || r.Rows[0].GPUIndex.Valid || r.Rows[0].HostError != r.Error {
			t.Errorf("a failed host is one row with empty GPU cells and the reason: %+v", r.Rows)
		}
	}
}

// Every real capture, idle and under load, through buildResult, compared with a
// golden CSV (go test -run TestBuildCaptures -update to refresh).
func TestBuildCaptures(t *testing.T) {
	for _, name := range captures.Names() {
		c := captures.MustLoad(name)
		for _, state := range []string{"idle", "load"} {
			g, ok := c.Section(state, "query-gpu")
			if !ok {
				continue
			}
			a, _ := c.Section(state, "query-compute-apps")
			t.Run(name+"/"+state, func(t *testing.T) {
				out := hostOutput{gpus: g.Body, apps: a.Body, ps: psFor(t, a.Body)}
				out.noPS = out.ps == "" // the script runs ps only for GPU processes
				if a.Body == "" {
					out.noApps = true
				}
				r := buildResult("gpu01", "n", out.bytes("n"), nil, at)
				if r.Status != hoststatus.OK {
					t.Fatalf("status %q: %s", r.Status, r.Error)
				}
				var buf bytes.Buffer
				if err := loaddata.Encode(&buf, r.Rows); err != nil {
					t.Fatal(err)
				}
				testenv.Golden(t, filepath.Join("testdata", "captures", name+"."+state+".csv"), buf.Bytes())
			})
		}
	}
}

// psFor is what ps says about a capture's processes: each is alice's, its
// command the name nvidia-smi printed (the captures were taken with
// process_name, which fetch no longer asks for).
func psFor(t *testing.T, apps string) string {
	t.Helper()
	rep, err := nvsmi.ParseProcesses([]byte(apps))
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range rep.Processes {
		fmt.Fprintf(&b, "%7d alice %d %s\n", p.PID, 600, p.Name)
	}
	return b.String()
}

// Whatever a host sends, buildResult returns rows and never panics; a reading it
// could not read is empty, never an invented zero.
func FuzzBuild(f *testing.F) {
	f.Add(hostOutput{gpus: twoGPUs, apps: "pid, gpu_uuid, used_gpu_memory\n1, GPU-aaaa, 5\n", ps: "1 root 5 x"}.bytes("n"))
	f.Add(hostOutput{gpus: twoGPUs + "0, GPU-cccc, NVIDIA H200, 00000000:3A:00.0, 1, 1, 1, 143771, 30, 75.10, 700.00, [N/A]\n",
		apps: appsHeader + "1, GPU-cccc, 5\n", ps: "ps: not found", psRC: 127}.bytes("n"))
	f.Add(hostOutput{gpus: "No devices were found", gpusRC: 6}.bytes("n"))
	f.Add([]byte("@@gpumon:n begin gpus\nindex\n0\n@@gpumon:n end gpus 0\n@@gpumon:n done\n"))
	f.Add(attributedHost.bytes("n"))
	real, err := os.ReadFile(filepath.Join("testdata", "h100-580", "probe-load.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(bytes.ReplaceAll(real, []byte("@@gpumon:devcheck"), []byte("@@gpumon:n")))
	f.Add(hostOutput{gpus: healthGPUs, apps: appsHeader + "4242, GPU-aaaa, 30000\n", ps: shellLine, attrib: []section{
		{probe.SectionPmon, pmonLines + pmonLine(0, 4242, "98", "python"), 0},
		{probe.SectionDriverGPUs, "0000:18:00.0\n0000:2a:00.0\n0000:3b:00.0", 0},
		{probe.SectionKernelLog, "source journal\n1764165900.1 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.", 0},
	}}.bytes("n"))
	mi100, _ := captures.LoadAMD(captures.ROCmSMI, "mi100x4__rocm-6.0.2")
	f.Add(amdOutput("n", section{probe.SectionTools, "nvidia-smi x\nrocm-smi y\n", 0}, section{probe.SectionGPUs, twoGPUs, 0},
		section{probe.SectionApps, appsHeader + "1, GPU-aaaa, 5\n", 0}, section{probe.SectionROCmSMI, string(mi100.Out), 0},
		section{probe.SectionKFD, kfdOf([]string{"0000:83:00.0", "0000:a3:00.0"}, [3]int{1, 0, 5}, [3]int{2, 3, 7}), 0},
		section{probe.SectionPS, "1 root 5 x\n2 bob 7 y\n", 0}))
	rx6600, _ := captures.LoadAMD(captures.AMDSMI, "rx6600__list")
	f.Add(amdOutput("n", section{probe.SectionTools, "amd-smi x\n", 0}, section{probe.SectionAMDSMIStatic, string(rx6600.Static), 0},
		section{probe.SectionAMDSMIMetric, string(rx6600.Metric), 0}, section{probe.SectionKFD, "node 1 0 2816\nproc 9 1 1048576\n", 0}))
	f.Fuzz(func(t *testing.T, out []byte) {
		r := buildResult("h", "n", out, nil, at)
		if len(r.Rows) == 0 {
			t.Fatal("no rows")
		}
		if len(r.Rows) > 3*nvsmi.MaxGPUs+nvsmi.MaxProcesses {
			t.Fatalf("%d rows from one host", len(r.Rows))
		}
		for _, row := range r.Rows {
			for _, s := range []string{row.User, row.Command, row.HostError, row.GPUName, row.GPUUUID, row.GPUBusID, row.GPUError,
				row.SlurmJob, row.SlurmJobName, row.SlurmPartition, row.SlurmAccount, row.Container, row.ContainerName, row.Pod,
				row.ECCMode, row.ClockEvents, row.XIDs, row.KernelLog} {
				if strings.ContainsFunc(s, func(c rune) bool { return c < ' ' || c == 0x7f }) {
					t.Errorf("control character in %q", s)
				}
			}
			if len(row.KernelLog) > maxKernelLogWhy || len(row.XIDs) > 5*256 || len(row.ClockEvents) > 200 {
				t.Errorf("health cells over their bounds: kernel_log %d bytes, xids %d, clock_events %d", len(row.KernelLog), len(row.XIDs), len(row.ClockEvents))
			}
			if len(row.HostError) > maxHostError || len(row.Command) > probe.MaxCommand || len(row.GPUName) > nvsmi.MaxCell {
				t.Errorf("cells over their bounds: host_error %d bytes, command %d, gpu_name %d", len(row.HostError), len(row.Command), len(row.GPUName))
			}
			if len(row.SlurmJob) > 32 || len(row.SlurmJobName) > attrib.MaxName || len(row.SlurmPartition) > attrib.MaxPartition ||
				len(row.SlurmAccount) > attrib.MaxAccount || len(row.Container) > 12 || len(row.ContainerName) > attrib.MaxName || len(row.Pod) > 36 {
				t.Errorf("attribution cells over their bounds: %q %q %q %q %q %q %q",
					row.SlurmJob, row.SlurmJobName, row.SlurmPartition, row.SlurmAccount, row.Container, row.ContainerName, row.Pod)
			}
		}
		if r.Status == hoststatus.OK {
			return
		}
		if r.Error == "" {
			t.Errorf("status %q without a reason", r.Status)
		}
	})
}

func TestSummary(t *testing.T) {
	res := []Result{{Host: "gpu01", Status: "ok"}, {Host: "gpu07", Status: "timeout"}, {Host: "gpu12", Status: "hostkey"}}
	if got := Summary(res); got != "3 hosts: 1 ok, 2 failed: gpu07 timeout, gpu12 hostkey" {
		t.Errorf("got %q", got)
	}
	var many []Result
	for i := 0; i < 15; i++ {
		many = append(many, Result{Host: "h", Status: "unreachable"})
	}
	if got := Summary(many); !strings.HasSuffix(got, "and 5 more") {
		t.Errorf("got %q", got)
	}

}

// A host's rows keep nothing of its answer alive: once detached, every
// cell still reads the same, and all of them lie in one block holding just
// their text, not in the answer's sections (which a run of 10,000 hosts
// would otherwise hold until the CSV is written).
func TestDetachLetsTheAnswerGo(t *testing.T) {
	c := captures.MustLoad(captures.Names()[0])
	g, _ := c.Section("load", "query-gpu")
	a, _ := c.Section("load", "query-compute-apps")
	out := hostOutput{gpus: g.Body, apps: a.Body, ps: psFor(t, a.Body)}
	out.noPS, out.noApps = out.ps == "", a.Body == ""
	r := buildResult("gpu01", "n", out.bytes("n"), nil, at)
	if r.Status != hoststatus.OK || len(r.Rows) < 2 || r.Rows[0].Command == "" {
		t.Fatalf("status %q, %d rows: %s", r.Status, len(r.Rows), r.Error)
	}
	want := append([]loaddata.Row(nil), r.Rows...)
	detach(r.Rows)
	if diff := cmp.Diff(want, r.Rows); diff != "" {
		t.Fatalf("detached rows differ (-want +got):\n%s", diff)
	}
	distinct := map[string]bool{}
	lo, hi := ^uintptr(0), uintptr(0)
	for _, row := range r.Rows {
		for _, cell := range []string{row.Timestamp, row.Host, row.GPUUUID, row.GPUName, row.GPUBusID, row.User, row.Command} {
			if cell == "" {
				continue
			}
			distinct[cell] = true
			p := uintptr(unsafe.Pointer(unsafe.StringData(cell)))
			lo, hi = min(lo, p), max(hi, p+uintptr(len(cell)))
		}
	}
	total := 0
	for cell := range distinct {
		total += len(cell)
	}
	if span := int(hi - lo); span > total+64 {
		t.Errorf("the cells span %d bytes of memory for %d bytes of text: they still point into the answer", span, total)
	}
}
