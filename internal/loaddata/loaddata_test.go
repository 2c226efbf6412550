package loaddata

import (
	"bytes"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sampleRows() []Row {
	return []Row{
		{Timestamp: "2026-11-22T14:00:00Z", Host: "gpu01", HostStatus: hoststatus.OK,
			GPUIndex: IntOf(0), GPUUUID: "GPU-1", GPUName: "NVIDIA H100 80GB HBM3", GPUBusID: "00000000:09:00.0",
			GPUUtilPct: Number{}, MemUtilPct: Num(0), MemUsedMiB: Num(11052), MemTotalMiB: Num(81559),
			TempC: Num(35), PowerW: Num(71.15), PowerLimitW: Num(700), FanPct: Number{},
			PID: IntOf(21198), User: "alice", Command: `python train.py --name "a, b"`, ProcessMemMiB: Num(7484),
			ProcessElapsedS: IntOf(3600), CPUs: IntOf(64), Load1: Num(3.5), HostMemUsedMiB: Num(1000), HostMemTotalMiB: Num(2000)},
		{Timestamp: "2026-11-22T14:00:00Z", Host: "gpu02", HostStatus: hoststatus.Timeout, HostError: "no answer within 20s"},
	}
}

func TestRoundTripKeepsMissingApartFromZero(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, sampleRows()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	if lines[0] != strings.Join(Columns(), ",") {
		t.Errorf("header %q", lines[0])
	}
	// gpu_util_pct is missing (empty), mem_util_pct is a real 0
	if !strings.Contains(lines[1], ",00000000:09:00.0,,,0,11052,81559,35,71.15,700,,21198,") {
		t.Errorf("row 1 = %q", lines[1])
	}
	got, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sampleRows(), got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestColumnsAreTheDocumentedOnes(t *testing.T) {
	want := "timestamp,host,host_status,host_error,gpu_index,gpu_uuid,gpu_name,gpu_bus_id,gpu_error," +
		"gpu_util_pct,mem_util_pct,mem_used_mib,mem_total_mib,temperature_c,power_w,power_limit_w,fan_pct," +
		"pid,user,command,process_mem_mib,process_elapsed_s,preemptible,cpus,load1,host_mem_used_mib,host_mem_total_mib"
	if got := strings.Join(Columns(), ","); got != want {
		t.Errorf("columns changed; update the README too.\n got %s\nwant %s", got, want)
	}
}

func TestDecodeErrorsNameTheLine(t *testing.T) {
	var buf bytes.Buffer
	Encode(&buf, sampleRows())
	good := buf.String()
	tests := []struct{ name, in, want string }{
		{"empty", "", "empty"},
		{"not our file", "a,b\n1,2\n", "line 1"},
		{"bad number", strings.Replace(good, ",11052,", ",lots,", 1), `line 2 (column mem_used_mib): "lots" is not a number`},
		{"short row", good + "x,y\n", "line 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestWriteFileIsAtomicAndReadable(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "load_data.csv")
	os.WriteFile(path, []byte("previous"), 0o644)
	if err := WriteFile(path, sampleRows()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 even under umask 077 (nginx must read it)", fi.Mode().Perm())
	}
	rows, err := ReadFile(path)
	if err != nil || len(rows) != 2 {
		t.Errorf("read back %d rows, %v", len(rows), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}
