package nvsmi

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/hoststatus"
)

const notLoaded = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."

func TestDiagnose(t *testing.T) {
	good := lines(fetchHeader, "0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:04:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]")
	tests := []struct {
		name string
		out  []byte
		exit int
		want *HostError
	}{
		{"exit 0 with a header", good, 0, nil},
		{"idle processes: header only", lines(appsHeader), 0, nil},
		{
			// The message goes to stdout and stderr, and 2>&1 joins them.
			"driver not loaded", lines(notLoaded, notLoaded), 9,
			&HostError{Status: hoststatus.Driver, Message: "NVIDIA driver not loaded (nvidia-smi could not communicate with the driver)"},
		},
		{
			"version mismatch", lines("Failed to initialize NVML: Driver/library version mismatch"), 18,
			&HostError{Status: hoststatus.Driver, Message: "NVIDIA driver/library version mismatch (reboot or reload the driver)"},
		},
		{
			"version mismatch, newer wording", lines("Failed to initialize NVML: Driver/library version mismatch", "NVML library version: 590.48"), 18,
			&HostError{Status: hoststatus.Driver, Message: "NVIDIA driver/library version mismatch (reboot or reload the driver)"},
		},
		{"no devices", lines("No devices were found"), 6, &HostError{Status: hoststatus.Driver, Message: "no NVIDIA GPU found"}},
		{
			"lost GPU between rows is usable",
			lines(fetchHeader,
				"0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:04:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]",
				"Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU",
				"2, GPU-c, NVIDIA H100 80GB HBM3, 00000000:06:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]"),
			15, nil,
		},
		{
			"the only GPU lost is usable: the parser reports the fault",
			lines(fetchHeader, "Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU"),
			15, nil,
		},
		{
			"ERR! in fields is usable",
			lines(fetchHeader, "0, GPU-a, ERR!, 00000000:04:00.0, ERR!, ERR!, 1234, 81559, ERR!, ERR!, 700.00, ERR!"),
			0, nil,
		},
		{"hanging, timeout", nil, 124, &HostError{Status: hoststatus.Timeout, Message: "nvidia-smi did not answer in time (killed by timeout)"}},
		{"hanging, timeout -k", nil, 137, &HostError{Status: hoststatus.Timeout, Message: "nvidia-smi did not answer in time (killed by timeout)"}},
		{"timeout after a partial answer", lines(fetchHeader), 124, &HostError{Status: hoststatus.Timeout, Message: "nvidia-smi did not answer in time (killed by timeout)"}},
		{"not found, bash", lines("bash: line 1: nvidia-smi: command not found"), 127, &HostError{Status: hoststatus.Driver, Message: "nvidia-smi not found on the host"}},
		{"not found, dash", lines("sh: 1: nvidia-smi: not found"), 127, &HostError{Status: hoststatus.Driver, Message: "nvidia-smi not found on the host"}},
		{"not found, odd exit", lines("env: 'nvidia-smi': No such file or directory", "nvidia-smi: not found"), 1, &HostError{Status: hoststatus.Driver, Message: "nvidia-smi not found on the host"}},
		{"127 and no output", nil, 127, &HostError{Status: hoststatus.Driver, Message: "nvidia-smi not found on the host"}},
		{
			"invalid field",
			lines(`Field "power.draw.instant" is not a valid field to query.`, "", "Please run 'nvidia-smi --help-query-gpu' for a list of valid fields."),
			2,
			&HostError{Status: hoststatus.Error, Message: `nvidia-smi does not know the field "power.draw.instant" (the driver is probably older than the query needs)`},
		},
		{"other failure", lines("Unable to open NVML: Insufficient Permissions.", "more"), 3, &HostError{Status: hoststatus.Error, Message: "nvidia-smi failed (exit 3): Unable to open NVML: Insufficient Permissions"}},
		{"failure, no output", nil, 255, &HostError{Status: hoststatus.Error, Message: "nvidia-smi failed (exit 255) with no output"}},
		{"failure after the header only", lines(fetchHeader), 255, &HostError{Status: hoststatus.Error, Message: "nvidia-smi failed (exit 255) after printing only the CSV header"}},
		{"exit 0, nothing", nil, 0, &HostError{Status: hoststatus.Error, Message: "nvidia-smi printed nothing"}},
		{"exit 0, no header", lines("Killed"), 0, &HostError{Status: hoststatus.Error, Message: "nvidia-smi printed no CSV header: Killed"}},
		{"a process called not found is not a missing nvidia-smi", lines(appsHeader, "1, GPU-a, /opt/not found/x, 1"), 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Diagnose(tt.out, tt.exit)); diff != "" {
				t.Errorf("Diagnose (-want +got):\n%s", diff)
			}
		})
	}
}

// A failure's first line goes into a status column: short and printable.
func TestDiagnoseFirstLineClipped(t *testing.T) {
	out := []byte("\n  " + strings.Repeat("x\x1b[31m", 100) + "  \nsecond line\n")
	he := Diagnose(out, 3)
	if he == nil || he.Status != hoststatus.Error {
		t.Fatalf("Diagnose = %v, want a Kind error", he)
	}
	msg := strings.TrimPrefix(he.Message, "nvidia-smi failed (exit 3): ")
	if len(msg) > 200 || !utf8.ValidString(msg) || strings.ContainsRune(msg, '\x1b') || strings.Contains(msg, "second") {
		t.Errorf("message %q: want the first line only, printable, at most 200 bytes", msg)
	}
}

// Every message reads like the rest of gpumon's: lower-case start unless a
// proper name, no final period.
func TestDiagnoseMessageStyle(t *testing.T) {
	outs := []struct {
		out  string
		exit int
	}{
		{notLoaded, 9}, {"Failed to initialize NVML: Driver/library version mismatch", 18},
		{"No devices were found", 6}, {"", 124}, {"", 127}, {`Field "x" is not a valid field to query.`, 2},
		{"Something broke.", 3}, {"", 0}, {"", 255}, {fetchHeader, 255},
	}
	for _, o := range outs {
		he := Diagnose([]byte(o.out), o.exit)
		if he == nil {
			t.Errorf("Diagnose(%q, %d) = nil", o.out, o.exit)
			continue
		}
		if strings.HasSuffix(he.Message, ".") {
			t.Errorf("%q ends with a period", he.Message)
		}
		first, _, _ := strings.Cut(he.Message, " ")
		if first != strings.ToLower(first) && first != "NVIDIA" {
			t.Errorf("%q starts with a capital", he.Message)
		}
		if he.Error() != he.Message {
			t.Errorf("Error() = %q, want %q", he.Error(), he.Message)
		}
	}
}
