package fetch

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/probe"
)

// amdOutput is what a host with AMD's tools prints, framed as the probe
// script frames it: sections in the script's order, the nvidia ones only
// where given.
func amdOutput(nonce string, sections ...section) []byte {
	var b bytes.Buffer
	w := probe.Writer{W: &b, Nonce: nonce}
	for _, s := range sections {
		w.Section(s.name, []byte(s.body), s.rc)
	}
	w.Section(probe.SectionHost, []byte("cpus 128\nload 6.50 5.00 4.00\nmem_total_kib 1073741824\nmem_available_kib 858993459\n"), 0)
	w.Done()
	return b.Bytes()
}

func amdCapture(t *testing.T, tool, name string) captures.AMDCapture {
	t.Helper()
	c, err := captures.LoadAMD(tool, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kfdOf is a kfd section: a node line per address (gpu_ids 1001, 1002,
// ...) and procs "PID GPU MiB" with GPU the node's position.
func kfdOf(addrs []string, procs ...[3]int) string {
	var b strings.Builder
	for i, a := range addrs {
		var dom, bus, dev, fn int
		fmt.Sscanf(a, "%x:%x:%x.%x", &dom, &bus, &dev, &fn)
		fmt.Fprintf(&b, "node %d %d %d\n", 1001+i, dom, bus<<8|dev<<3|fn)
	}
	for _, p := range procs {
		fmt.Fprintf(&b, "proc %d %d %d\n", p[0], 1001+p[1], int64(p[2])<<20)
	}
	return b.String()
}

// amdRow is what these tests compare of a row.
type amdRow struct {
	Index              string
	Vendor, Name, Bus  string
	Util, Used, Total  string
	PID, User, ProcMiB string
	Error              string
}

// cell is a number's load_data.csv cell.
func cell(m interface{ MarshalCSV() (string, error) }) string {
	s, _ := m.MarshalCSV()
	return s
}

func amdRows(res Result) []amdRow {
	var out []amdRow
	for _, r := range res.Rows {
		out = append(out, amdRow{Index: cell(r.GPUIndex), Vendor: r.GPUVendor, Name: r.GPUName, Bus: r.GPUBusID,
			Util: cell(r.GPUUtilPct), Used: cell(r.MemUsedMiB), Total: cell(r.MemTotalMiB),
			PID: cell(r.PID), User: r.User, ProcMiB: cell(r.ProcessMemMiB), Error: r.GPUError})
	}
	return out
}

const mi100Tools = "rocm-smi /opt/rocm/bin/rocm-smi\nrocm_version 6.0.2\n"

// A host with only AMD's tools reads as one with only nvidia-smi does:
// its GPUs from amd-smi or rocm-smi, who holds VRAM where from KFD (a
// ROCm process has an entry on every GPU it sees: 0 elsewhere), users
// and commands from ps.
func TestAMDHosts(t *testing.T) {
	mi100 := amdCapture(t, captures.ROCmSMI, "mi100x4__rocm-6.0.2")
	rx6600 := amdCapture(t, captures.AMDSMI, "rx6600__list")
	mi210 := amdCapture(t, captures.AMDSMI, "mi210__gpu-data")
	mi100Bus := []string{"0000:83:00.0", "0000:a3:00.0", "0000:c3:00.0", "0000:e3:00.0"}
	ps := "24011 heidi                               32400 python train.py\n 7702 judy                                 1500 python3 sd_webui.py\n" + shellLine
	tests := []struct {
		name     string
		sections []section
		want     []amdRow
		wantErr  string // in host_error
	}{{
		name: "rocm-smi of ROCm 6.0.2, four MI100s, a process on two",
		sections: []section{{probe.SectionTools, mi100Tools, 0}, {probe.SectionROCmSMI, string(mi100.Out), 0},
			{probe.SectionKFD, kfdOf(mi100Bus, [3]int{24011, 0, 28100}, [3]int{24011, 1, 27950}, [3]int{24011, 2, 0}, [3]int{24011, 3, 0}), 0},
			{probe.SectionPS, ps, 0}},
		want: []amdRow{
			{"0", "amd", "AMD Instinct MI100", "0000:83:00.0", "0", "6", "32752", "24011", "heidi", "28100", ""},
			{"1", "amd", "AMD Instinct MI100", "0000:a3:00.0", "0", "6", "32752", "24011", "heidi", "27950", ""},
			{"2", "amd", "AMD Instinct MI100", "0000:c3:00.0", "0", "6", "32752", "", "", "", ""},
			{"3", "amd", "AMD Instinct MI100", "0000:e3:00.0", "0", "6", "32752", "", "", "", ""},
		},
	}, {
		name: "amd-smi, a Radeon",
		sections: []section{{probe.SectionTools, "amd-smi /usr/bin/amd-smi\n", 0},
			{probe.SectionAMDSMIStatic, string(rx6600.Static), 0}, {probe.SectionAMDSMIMetric, string(rx6600.Metric), 0},
			{probe.SectionKFD, kfdOf([]string{"0000:0b:00.0"}, [3]int{7702, 0, 3900}), 0}, {probe.SectionPS, ps, 0}},
		want: []amdRow{{"0", "amd", "AMD Radeon RX 6600/6600 XT", "0000:0b:00.0", "1", "202", "8176", "7702", "judy", "3900", ""}},
	}, {
		name: "amd-smi without PCI addresses: KFD's order pairs them, and gives the address",
		sections: []section{{probe.SectionTools, "amd-smi /usr/bin/amd-smi\n", 0},
			{probe.SectionAMDSMIStatic, string(mi210.Static), 0}, {probe.SectionAMDSMIMetric, "", 0},
			{probe.SectionKFD, kfdOf([]string{"0000:c1:00.0"}, [3]int{7702, 0, 3900}), 0}, {probe.SectionPS, ps, 0}},
		want:    []amdRow{{"0", "amd", "AMD Instinct MI210", "0000:c1:00.0", "", "", "65520", "7702", "judy", "3900", ""}},
		wantErr: "amd-smi metric printed nothing; the AMD GPUs' readings are unknown",
	}, {
		name: "a process on a GPU the tool did not list",
		sections: []section{{probe.SectionTools, "amd-smi /usr/bin/amd-smi\n", 0},
			{probe.SectionAMDSMIStatic, string(rx6600.Static), 0}, {probe.SectionAMDSMIMetric, string(rx6600.Metric), 0},
			{probe.SectionKFD, kfdOf([]string{"0000:0b:00.0", "0000:0c:00.0"}, [3]int{7702, 1, 100}), 0}, {probe.SectionPS, ps, 0}},
		want: []amdRow{
			{"0", "amd", "AMD Radeon RX 6600/6600 XT", "0000:0b:00.0", "1", "202", "8176", "", "", "", ""},
			{"", "amd", "", "0000:0c:00.0", "", "", "", "7702", "judy", "100", "process on a GPU that amd-smi did not list"},
		},
	}, {
		name: "KFD unreadable: the GPUs stay, their processes are unknown",
		sections: []section{{probe.SectionTools, mi100Tools, 0}, {probe.SectionROCmSMI, string(mi100.Out), 0},
			{probe.SectionKFD, "/sys/class/kfd/kfd/topology/nodes is not a folder: is the amdgpu driver loaded?", 1}},
		want: []amdRow{
			{"0", "amd", "AMD Instinct MI100", "0000:83:00.0", "0", "6", "32752", "", "", "", ""},
			{"1", "amd", "AMD Instinct MI100", "0000:a3:00.0", "0", "6", "32752", "", "", "", ""},
			{"2", "amd", "AMD Instinct MI100", "0000:c3:00.0", "0", "6", "32752", "", "", "", ""},
			{"3", "amd", "AMD Instinct MI100", "0000:e3:00.0", "0", "6", "32752", "", "", "", ""},
		},
		wantErr: "the KFD process list is unreadable (/sys/class/kfd/kfd/topology/nodes is not a folder: is the amdgpu driver loaded?)",
	}, {
		name: "a host with both: NVIDIA's GPUs first, AMD's numbered after them",
		sections: []section{{probe.SectionTools, "nvidia-smi /usr/bin/nvidia-smi\nrocm-smi /opt/rocm/bin/rocm-smi\n", 0},
			{probe.SectionGPUs, twoGPUs, 0}, {probe.SectionApps, appsHeader, 0},
			{probe.SectionROCmSMI, string(amdCapture(t, captures.ROCmSMI, "rx6700xt__rocm-6.1.2").Out), 0},
			{probe.SectionKFD, kfdOf([]string{"0000:07:00.0"}, [3]int{7702, 0, 3900}), 0}, {probe.SectionPS, ps, 0}},
		want: []amdRow{
			{"0", "nvidia", "NVIDIA H200", "00000000:18:00.0", "100", "30342", "143771", "", "", "", ""},
			{"1", "nvidia", "NVIDIA H200", "00000000:2A:00.0", "0", "0", "143771", "", "", "", ""},
			{"2", "amd", "AMD Radeon RX 6700/6700 XT / 6800M", "0000:07:00.0", "0", "1500", "12272", "7702", "judy", "3900", ""},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := buildResult("mi100-d01", "n0nce", amdOutput("n0nce", tt.sections...), nil, at)
			if res.Status != hoststatus.OK {
				t.Fatalf("status %s: %s", res.Status, res.Error)
			}
			if diff := cmp.Diff(tt.want, amdRows(res)); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if !strings.Contains(res.Error, tt.wantErr) || (tt.wantErr == "" && res.Error != "") {
				t.Errorf("host_error %q, want %q", res.Error, tt.wantErr)
			}
		})
	}
}

// What goes wrong with an AMD tool fails the host where it is its only
// one, says what was not understood, naming the tool and its version,
// and costs only the AMD GPUs where the host has NVIDIA's too.
func TestAMDFailures(t *testing.T) {
	mi100 := amdCapture(t, captures.ROCmSMI, "mi100x4__rocm-6.0.2")
	rx6600 := amdCapture(t, captures.AMDSMI, "rx6600__list")
	amdTools := "amd-smi /opt/rocm/bin/amd-smi\nrocm_version 6.2.4\n"
	both := "nvidia-smi /usr/bin/nvidia-smi\namd-smi /opt/rocm/bin/amd-smi\nrocm_version 6.2.4\n"
	nvidia := []section{{probe.SectionGPUs, twoGPUs, 0}, {probe.SectionApps, appsHeader, 0}}
	tests := []struct {
		name       string
		sections   []section
		wantStatus hoststatus.Status
		wantErr    string
		wantRows   int
	}{
		{"rocm-smi hangs", []section{{probe.SectionTools, mi100Tools, 0}, {probe.SectionROCmSMI, "", 124}},
			hoststatus.Timeout, "rocm-smi did not answer in time (killed by timeout; rocm-smi (ROCm 6.0.2))", 1},
		{"the amdgpu driver is not loaded",
			[]section{{probe.SectionTools, amdTools, 0}, {probe.SectionAMDSMIStatic, "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)", 255}},
			hoststatus.Driver, "amd-smi static failed (exit 255, amd-smi (ROCm 6.2.4)): ERROR:root:Unable to detect any GPU devices", 1},
		{"a shape fetch does not know",
			[]section{{probe.SectionTools, amdTools, 0}, {probe.SectionAMDSMIStatic, `{"devices": {"0": {"name": "MI300X"}}}`, 0}, {probe.SectionAMDSMIMetric, string(rx6600.Metric), 0}},
			hoststatus.Error, "amd-smi (ROCm 6.2.4) answered in a shape fetch does not read: ", 1},
		{"a flood cut on the host",
			[]section{{probe.SectionTools, amdTools, 0}, {probe.SectionAMDSMIStatic, "gpumon probe: amd-smi static printed more than 524288 bytes (cut off on the host)", 3}},
			hoststatus.Error, "amd-smi static failed (exit 3, amd-smi (ROCm 6.2.4)): gpumon probe: amd-smi static printed more than 524288 bytes", 1},
		{"amd-smi exits 0 on its own error",
			[]section{{probe.SectionTools, amdTools, 0}, {probe.SectionAMDSMIStatic, "ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)\namdsmi_cli_exceptions.AmdSmiLibraryException: Error code: -3", 0}},
			hoststatus.Driver, "amd-smi static printed no JSON (amd-smi (ROCm 6.2.4)): ERROR:root:Unable to get devices, driver not initialized", 1},
		{"rocm-smi without the driver",
			[]section{{probe.SectionTools, mi100Tools, 0}, {probe.SectionROCmSMI, "cat: /sys/module/amdgpu/initstate: No such file or directory\nERROR:root:Driver not initialized (amdgpu not found in modules)", 1}},
			hoststatus.Driver, "rocm-smi failed (exit 1, rocm-smi (ROCm 6.0.2)): ERROR:root:Driver not initialized (amdgpu not found in modules)", 1},
		{"no tool of any vendor",
			[]section{{probe.SectionTools, "", 0}, {probe.SectionGPUs, "sh: 1: nvidia-smi: not found", 127}},
			hoststatus.Driver, noTool, 1},
		{"both vendors, amd-smi hangs: NVIDIA's GPUs stay",
			append([]section{{probe.SectionTools, both, 0}}, append(nvidia, section{probe.SectionAMDSMIStatic, "", 124})...),
			hoststatus.OK, "the AMD GPUs are unknown: amd-smi static did not answer in time (killed by timeout; amd-smi (ROCm 6.2.4))", 2},
		{"both vendors, NVIDIA's driver is not loaded: AMD's GPUs stay",
			[]section{{probe.SectionTools, "nvidia-smi /usr/bin/nvidia-smi\nrocm-smi /opt/rocm/bin/rocm-smi\n", 0},
				{probe.SectionGPUs, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.", 9},
				{probe.SectionROCmSMI, string(mi100.Out), 0}, {probe.SectionKFD, "", 0}},
			hoststatus.OK, "the NVIDIA GPUs are unknown: NVIDIA driver not loaded", 4},
		{"both vendors fail",
			[]section{{probe.SectionTools, both, 0}, {probe.SectionGPUs, "", 124}, {probe.SectionAMDSMIStatic, "", 124}},
			hoststatus.Timeout, "nvidia-smi did not answer in time (killed by timeout); amd-smi static did not answer in time", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := buildResult("gpu01", "n0nce", amdOutput("n0nce", tt.sections...), nil, at)
			if res.Status != tt.wantStatus || !strings.Contains(res.Error, tt.wantErr) || len(res.Rows) != tt.wantRows {
				t.Errorf("got %s %q, %d rows; want %s containing %q, %d rows", res.Status, res.Error, len(res.Rows), tt.wantStatus, tt.wantErr, tt.wantRows)
			}
		})
	}
}
