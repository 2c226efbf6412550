package fetch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/simfleet"
	"github.com/gpumon/gpumon/internal/testenv"
)

// fleetConfig starts specs as a simulated fleet and returns a config.ini
// polling it with the given per-host timeout, in a HOME of its own so that
// nothing of the user running the tests (agent, ~/.ssh) takes part.
func fleetConfig(tb testing.TB, specs []simfleet.HostSpec, timeoutS int) (*simfleet.Fleet, string) {
	tb.Helper()
	tb.Setenv("HOME", tb.TempDir())
	tb.Setenv("SSH_AUTH_SOCK", "")
	f := testenv.StartFleet(tb, specs)
	cf, err := f.WriteClientFiles(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	ini, err := os.ReadFile(cf.ConfigINI)
	if err != nil {
		tb.Fatal(err)
	}
	ini = bytes.Replace(ini, []byte("timeout = 5\n"), fmt.Appendf(nil, "timeout = %d\n", timeoutS), 1)
	if err := os.WriteFile(cf.ConfigINI, ini, 0o644); err != nil {
		tb.Fatal(err)
	}
	return f, cf.ConfigINI
}

// TestFleetFailures runs fetch over one host of each kind of failure, beside
// a healthy one: each becomes rows that say plainly what went wrong, and the
// others are not held up.
func TestFleetFailures(t *testing.T) {
	const h100 = "nvidia-h100-mig"
	specs := []simfleet.HostSpec{{Name: "healthy", Capture: h100, State: "load", CPUs: 64, Load1: 3.5,
		Processes: []simfleet.Process{{PID: 4242, User: "alice", GPU: 1, MemMiB: 1000, ElapsedS: 60, Command: "python train.py"}}}}
	for _, f := range simfleet.Failures() {
		specs = append(specs, simfleet.HostSpec{Name: strings.ToLower(f.String()), Capture: h100, Failure: f})
	}
	fleet, ini := fleetConfig(t, specs, 3)
	rows, stderr := fetchRows(t, ini)
	byHost := map[string][]loaddata.Row{}
	for _, r := range rows {
		byHost[r.Host] = append(byHost[r.Host], r)
	}

	tests := []struct {
		host     string
		status   hoststatus.Status
		errorHas string
		gpuRows  int // rows with a GPU uuid
	}{
		{"healthy", "ok", "", 8},
		{"refuse", "unreachable", "refused", 0},
		{"silent", "timeout", "", 0},
		{"authreject", "auth", "", 0},
		{"hangnvidiasmi", "timeout", "nvidia-smi", 0},
		{"hangforever", "timeout", "", 0},
		{"dropmidoutput", "error", "closed before the output was complete", 0},
		{"drivernotloaded", "driver", "driver", 0},
		{"nodevices", "driver", "no NVIDIA GPU found", 0},
		{"gpulost", "ok", "", 7},
		{"wronghostkey", "hostkey", "SHA256:", 0},
		{"flood", "error", "the host sent more than 6 MiB of output", 0},
		{"floodstderr", "error", "the host sent more than 64 KiB of error output", 0},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			got := byHost[tt.host]
			if len(got) == 0 {
				t.Fatalf("no row for %s", tt.host)
			}
			uuids := 0
			for _, r := range got {
				if r.HostStatus != tt.status {
					t.Errorf("host_status = %q, want %q (host_error %q)", r.HostStatus, tt.status, r.HostError)
				}
				if tt.status != "ok" && r.HostError == "" {
					t.Errorf("failed host without a reason")
				}
				if !strings.Contains(r.HostError, tt.errorHas) {
					t.Errorf("host_error = %q, want it to mention %q", r.HostError, tt.errorHas)
				}
				if r.GPUUUID != "" {
					uuids++
				}
			}
			if uuids != tt.gpuRows {
				t.Errorf("%d rows with a GPU, want %d", uuids, tt.gpuRows)
			}
		})
	}

	// The lost GPU is a row of its own, naming its bus id and the reason.
	var lost []loaddata.Row
	for _, r := range byHost["gpulost"] {
		if r.GPUError != "" {
			lost = append(lost, r)
		}
	}
	if len(lost) != 1 || lost[0].GPUBusID == "" || !strings.Contains(lost[0].GPUError, "lost") {
		t.Errorf("lost GPU rows = %+v, want one naming the bus id and saying it is lost", lost)
	}
	procRows := 0
	for _, r := range byHost["healthy"] {
		if r.HostError != "" {
			t.Errorf("healthy host warns: %q", r.HostError)
		}
		if r.PID.Valid {
			procRows++
			if r.User != "alice" || r.Command != "python train.py" {
				t.Errorf("process row user %q command %q, want alice running python train.py", r.User, r.Command)
			}
		}
	}
	if procRows != 1 {
		t.Errorf("%d process rows on the healthy host, want 1", procRows)
	}

	// One connection and one session per host that got that far.
	for _, h := range specs {
		s := fleet.HostStats(h.Name)
		wantSessions := int64(1)
		switch h.Failure {
		case simfleet.Refuse, simfleet.Silent, simfleet.AuthReject, simfleet.WrongHostKey:
			wantSessions = 0
		}
		if h.Failure != simfleet.Refuse && s.Accepted != 1 {
			t.Errorf("%s: %d connections, want 1", h.Name, s.Accepted)
		}
		if s.Sessions != wantSessions {
			t.Errorf("%s: %d sessions, want %d", h.Name, s.Sessions, wantSessions)
		}
	}
	if !strings.Contains(stderr.String(), "13 hosts: 2 ok, 11 failed:") {
		t.Errorf("summary line missing or wrong:\n%s", stderr.String())
	}
}

// The demo fleet through fetch with containers = docker: its processes in
// Slurm jobs, a Docker container and a Kubernetes pod get their columns;
// the others stay empty.
func TestFleetAttribution(t *testing.T) {
	_, ini := fleetConfig(t, simfleet.Demo(), 10)
	f, err := os.OpenFile(ini, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "containers = docker") // the file ends in [common]
	f.Close()
	rows, _ := fetchRows(t, ini)
	type cells struct {
		User                                                 string
		SlurmJob, SlurmJobName, SlurmPartition, SlurmAccount string
		Container, ContainerName, Pod                        string
	}
	got := map[string]cells{} // "host pid"
	for _, r := range rows {
		if r.HostStatus == hoststatus.OK && r.HostError != "" {
			t.Errorf("%s: %s", r.Host, r.HostError)
		}
		if r.PID.Valid {
			got[fmt.Sprintf("%s %d", r.Host, r.PID.Value)] = cells{r.User, r.SlurmJob, r.SlurmJobName, r.SlurmPartition, r.SlurmAccount, r.Container, r.ContainerName, r.Pod}
		}
	}
	want := map[string]cells{
		"h100-a01 401233": {User: "alice", SlurmJob: "7310", SlurmJobName: "alice-7b-pretrain", SlurmPartition: "h100", SlurmAccount: "vision-lab"},
		"h100-a03 51200":  {User: "bob", SlurmJob: "7400_3", SlurmJobName: "lr-sweep", SlurmPartition: "h100", SlurmAccount: "nlp-lab"},
		"h100-a03 51388":  {User: "carol"},
		"h200-b01 70001":  {User: "root", Container: got["h200-b01 70001"].Container, ContainerName: "frank-vllm-70b"},
		"h100-a05 61500":  {User: "erin", Container: got["h100-a05 61500"].Container, Pod: "7c1e9b52-4d3a-4f0e-9a61-2b8d5e3f1c07"},
		"h200-b02 88001":  {User: "bob"},
	}
	for k, w := range want {
		if diff := cmp.Diff(w, got[k]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	for _, k := range []string{"h200-b01 70001", "h100-a05 61500"} {
		if c := got[k].Container; len(c) != 12 || strings.Trim(c, "0123456789abcdef") != "" {
			t.Errorf("%s: container %q is not 12 hex digits", k, c)
		}
	}
}

// fetchRows runs fetch -v with the config ini and returns its rows and
// what it printed.
func fetchRows(t testing.TB, ini string) ([]loaddata.Row, *bytes.Buffer) {
	t.Helper()
	out := t.TempDir() + "/load_data.csv"
	var stderr bytes.Buffer
	if err := Main(context.Background(), []string{"-c", ini, "-o", out, "-v"}, &stderr, &stderr); err != nil {
		t.Fatalf("fetch: %v\n%s", err, stderr.String())
	}
	rows, err := loaddata.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return rows, &stderr
}

// TestFleetAMD runs fetch over a generated fleet of AMD hosts, every
// amd-smi and rocm-smi capture in turn, 8 GPUs each: every host is ok
// without a warning, every GPU is AMD's and there once, and every process
// the fleet runs is on its GPU with its user.
func TestFleetAMD(t *testing.T) {
	specs := simfleet.GenerateAMD(20, 1)
	_, ini := fleetConfig(t, specs, 10)
	rows, _ := fetchRows(t, ini)
	gpus := map[string]bool{}  // "host index"
	procs := map[string]bool{} // "host pid gpu user"
	for _, r := range rows {
		if r.HostStatus != hoststatus.OK || r.HostError != "" || r.GPUVendor != loaddata.VendorAMD || r.GPUError != "" {
			t.Errorf("%s GPU %d: %s %q, vendor %q, gpu_error %q", r.Host, r.GPUIndex.Value, r.HostStatus, r.HostError, r.GPUVendor, r.GPUError)
		}
		gpus[fmt.Sprintf("%s %d", r.Host, r.GPUIndex.Value)] = true
		if r.PID.Valid {
			procs[fmt.Sprintf("%s %d %d %s", r.Host, r.PID.Value, r.GPUIndex.Value, r.User)] = true
		}
	}
	want := map[string]bool{}
	for _, s := range specs {
		for _, p := range s.Processes {
			want[fmt.Sprintf("%s %d %d %s", s.Name, p.PID, p.GPU, p.User)] = true
		}
	}
	if len(gpus) != 8*len(specs) {
		t.Errorf("%d GPUs, want %d", len(gpus), 8*len(specs))
	}
	if diff := cmp.Diff(want, procs); diff != "" {
		t.Errorf("processes (-want +got):\n%s", diff)
	}
}
