package nvsmi

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gpumon/gpumon/internal/hoststatus"
)

// The header fetch's query produces, with --format=csv,nounits.
const fetchHeader = "index, uuid, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%]"

const appsHeader = "pid, gpu_uuid, process_name, used_gpu_memory [MiB]"

func lines(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }

func gpuRow(i int, uuid, bus string) GPU {
	return GPU{
		Index: i, UUID: uuid, Name: "NVIDIA H100 80GB HBM3", BusID: bus,
		UtilGPU: n(38), UtilMem: n(12), MemUsedMiB: n(1234), MemTotalMiB: n(81559),
		TempC: n(42), PowerW: n(71.15), PowerLimitW: n(700), FanPct: na,
	}
}

func TestParseGPUs(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want GPUReport
	}{
		{
			name: "nounits, fetch's columns",
			in: lines(fetchHeader,
				"0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:04:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]",
				"1, GPU-b, NVIDIA H100 80GB HBM3, 00000000:05:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]"),
			want: GPUReport{GPUs: []GPU{gpuRow(0, "GPU-a", "00000000:04:00.0"), gpuRow(1, "GPU-b", "00000000:05:00.0")}},
		},
		{
			name: "units in values",
			in: lines(fetchHeader,
				"0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:04:00.0, 38 %, 12 %, 1234 MiB, 81559 MiB, 42, 71.15 W, 700.00 W, [N/A]"),
			want: GPUReport{GPUs: []GPU{gpuRow(0, "GPU-a", "00000000:04:00.0")}},
		},
		{
			name: "any column order, aliases, extra columns",
			in: lines("fan.speed [%], timestamp, gpu_bus_id, gpu_name, memory.total [MiB], pstate, temperature.gpu, gpu_uuid, index",
				"55 %, 2026/07/03 22:11:09.763, 00000000:04:00.0, Tesla V100, 16384 MiB, P0, 61, GPU-v, 3"),
			want: GPUReport{GPUs: []GPU{{
				Index: 3, UUID: "GPU-v", Name: "Tesla V100", BusID: "00000000:04:00.0",
				MemTotalMiB: n(16384), TempC: n(61), FanPct: n(55), PState: n(0),
			}}},
		},
		{
			name: "lost GPU between rows becomes a fault",
			in: lines(fetchHeader,
				"0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:04:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]",
				"Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU",
				"2, GPU-c, NVIDIA H100 80GB HBM3, 00000000:06:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]"),
			want: GPUReport{
				GPUs:   []GPU{gpuRow(0, "GPU-a", "00000000:04:00.0"), gpuRow(2, "GPU-c", "00000000:06:00.0")},
				Faults: []GPUFault{{BusID: "0000:05:00.0", Message: "GPU is lost; reboot the system to recover this GPU"}},
			},
		},
		{
			// stderr is unbuffered, stdout is not: the message can come first.
			name: "fault before the header, other wording",
			in: lines("Unable to determine the device handle for GPU0000:05:00.0: Unknown Error",
				"Unable to determine the device handle for GPU 00000000:06:00.0: GPU requires reset. Driver 590.48 says so.",
				fetchHeader,
				"0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:04:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]"),
			want: GPUReport{
				GPUs: []GPU{gpuRow(0, "GPU-a", "00000000:04:00.0")},
				Faults: []GPUFault{
					{BusID: "0000:05:00.0", Message: "unknown error"},
					{BusID: "00000000:06:00.0", Message: "GPU requires reset; driver 590.48 says so"},
				},
			},
		},
		{
			// NVIDIA/open-gpu-kernel-modules#446: ERR! everywhere but memory.
			name: "ERR! fields are missing, memory still counts",
			in: lines(fetchHeader,
				"0, GPU-a, ERR!, 00000000:04:00.0, ERR!, ERR!, 1234, 81559, ERR!, ERR!, 700.00, ERR!"),
			want: GPUReport{GPUs: []GPU{{
				Index: 0, UUID: "GPU-a", Name: "ERR!", BusID: "00000000:04:00.0",
				MemUsedMiB: n(1234), MemTotalMiB: n(81559), PowerLimitW: n(700),
			}}},
		},
		{
			name: "every token is missing, never zero",
			in: lines("index, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%]",
				"0, [N/A], [Not Supported], [Unknown Error], [Insufficient Permissions], [Requested functionality has been deprecated], [Function Not Found], ERR!, ",
				"1, [Something New], , garbage, 12abc, 0x1A, NaN, Inf, -"),
			want: GPUReport{GPUs: []GPU{{Index: 0}, {Index: 1}}},
		},
		{
			name: "surplus fields belong to the name",
			in: lines("index, name, memory.used [MiB]",
				"0, Weird, Card, Inc, 5 MiB"),
			want: GPUReport{GPUs: []GPU{{Index: 0, Name: "Weird, Card, Inc", MemUsedMiB: n(5)}}},
		},
		{
			name: "bad lines are skipped, the rest counts",
			in: lines(fetchHeader,
				"",
				"0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:04:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]",
				"Segmentation fault",
				"[N/A], GPU-x, NVIDIA H100 80GB HBM3, 00000000:07:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]",
				"1, GPU-b, short",
				"",
				"2, GPU-c, NVIDIA H100 80GB HBM3, 00000000:06:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]"),
			want: GPUReport{
				GPUs: []GPU{gpuRow(0, "GPU-a", "00000000:04:00.0"), gpuRow(2, "GPU-c", "00000000:06:00.0")},
				Skipped: []LineError{
					{Line: 4, Text: "Segmentation fault", Reason: "not a CSV row"},
					{Line: 5, Text: "[N/A], GPU-x, NVIDIA H100 80GB HBM3, 00000000:07:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]", Reason: `index "[N/A]" is not a GPU index`},
					{Line: 6, Text: "1, GPU-b, short", Reason: "3 fields where the header has 12"},
				},
			},
		},
		{
			name: "windows line ends and a bare comma separator",
			in:   []byte("index,name,memory.used [MiB]\r\n0,A100,7 MiB\r\n"),
			want: GPUReport{GPUs: []GPU{{Index: 0, Name: "A100", MemUsedMiB: n(7)}}},
		},
		{
			name: "a line before the header is reported",
			in:   lines("WARNING: infoROM is corrupted at gpu 0000:04:00.0", "index", "0"),
			want: GPUReport{
				GPUs:    []GPU{{Index: 0}},
				Skipped: []LineError{{Line: 1, Text: "WARNING: infoROM is corrupted at gpu 0000:04:00.0", Reason: "not a CSV header or row (before the header)"}},
			},
		},
		{
			name: "header only: no GPU, no error",
			in:   lines(fetchHeader),
			want: GPUReport{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseGPUs(tt.in)
			if err != nil {
				t.Fatalf("ParseGPUs: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParseGPUs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseProcesses(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want ProcessReport
	}{
		{
			name: "idle: header only",
			in:   lines(appsHeader),
			want: ProcessReport{},
		},
		{
			name: "name with commas and spaces, old driver",
			in: lines(appsHeader,
				"4242, GPU-a, python train.py --tags a, b, c, 1000 MiB",
				"4243, GPU-a, python train.py --tags a?b?c, 10 MiB"),
			want: ProcessReport{Processes: []Process{
				{PID: 4242, GPUUUID: "GPU-a", Name: "python train.py --tags a, b, c", UsedMemMiB: n(1000)},
				{PID: 4243, GPUUUID: "GPU-a", Name: "python train.py --tags a?b?c", UsedMemMiB: n(10)},
			}},
		},
		{
			name: "comma without a space stays inside the name",
			in:   lines(appsHeader, "7, GPU-a, a,b, 1"),
			want: ProcessReport{Processes: []Process{{PID: 7, GPUUUID: "GPU-a", Name: "a,b", UsedMemMiB: n(1)}}},
		},
		{
			name: "windows path with spaces and a comma",
			in:   lines(appsHeader, `17648, GPU-a, C:\Program Files\My App, Inc\CEF\My Overlay.exe, [N/A]`),
			want: ProcessReport{Processes: []Process{{PID: 17648, GPUUUID: "GPU-a", Name: `C:\Program Files\My App, Inc\CEF\My Overlay.exe`}}},
		},
		{
			name: "one pid on two GPUs",
			in: lines(appsHeader,
				"900, GPU-a, torchrun, 30000",
				"900, GPU-b, torchrun, 29000"),
			want: ProcessReport{Processes: []Process{
				{PID: 900, GPUUUID: "GPU-a", Name: "torchrun", UsedMemMiB: n(30000)},
				{PID: 900, GPUUUID: "GPU-b", Name: "torchrun", UsedMemMiB: n(29000)},
			}},
		},
		{
			name: "garbage between good rows",
			in: lines(appsHeader,
				"1, GPU-a, a, 1",
				"\x00\x01garbage\xff",
				"x, GPU-a, b, 2",
				"3, GPU-a, c, 3"),
			want: ProcessReport{
				Processes: []Process{
					{PID: 1, GPUUUID: "GPU-a", Name: "a", UsedMemMiB: n(1)},
					{PID: 3, GPUUUID: "GPU-a", Name: "c", UsedMemMiB: n(3)},
				},
				Skipped: []LineError{
					{Line: 3, Text: "??garbage?", Reason: "not a CSV row"},
					{Line: 4, Text: "x, GPU-a, b, 2", Reason: `pid "x" is not a process id`},
				},
			},
		},
		{
			name: "aliases and order: the exporter's query",
			in: lines("timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid, name, used_memory [MiB]",
				"2026/07/03 22:11:09.916, NVIDIA H200, 00000000:83:00.0, 0, GPU-h, 10309, ./gpu_burn, 28234 MiB"),
			want: ProcessReport{Processes: []Process{{PID: 10309, GPUUUID: "GPU-h", Name: "./gpu_burn", UsedMemMiB: n(28234)}}},
		},
		{
			name: "lost GPU among processes",
			in: lines(appsHeader,
				"Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU",
				"1, GPU-a, a, 1"),
			want: ProcessReport{
				Processes: []Process{{PID: 1, GPUUUID: "GPU-a", Name: "a", UsedMemMiB: n(1)}},
				Faults:    []GPUFault{{BusID: "0000:05:00.0", Message: "GPU is lost; reboot the system to recover this GPU"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcesses(tt.in)
			if err != nil {
				t.Fatalf("ParseProcesses: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParseProcesses (-want +got):\n%s", diff)
			}
		})
	}
}

// Without a header naming the required column nothing can be read by name.
func TestParseNoHeader(t *testing.T) {
	tests := []struct {
		name      string
		in        []byte
		processes bool
		want      string
	}{
		{"empty", nil, false, `no CSV header with a "index" column in the nvidia-smi output`},
		{"driver message", lines("No devices were found"), false, `no CSV header with a "index" column in the nvidia-smi output: No devices were found`},
		{"noheader rows", lines("0, GPU-a, 38"), false, `no CSV header with a "index" column in the nvidia-smi output: 0, GPU-a, 38`},
		{"process header for GPUs", lines(appsHeader), false, `no CSV header with a "index" column in the nvidia-smi output: ` + appsHeader},
		{"GPU header for processes", lines(fetchHeader), true, `no CSV header with a "pid" column in the nvidia-smi output: ` + fetchHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.processes {
				_, err = ParseProcesses(tt.in)
			} else {
				_, err = ParseGPUs(tt.in)
			}
			var he *HostError
			if !errors.As(err, &he) {
				t.Fatalf("err = %v, want a *HostError", err)
			}
			if diff := cmp.Diff(&HostError{Status: hoststatus.Error, Message: tt.want}, he); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseNumber(t *testing.T) {
	tests := []struct {
		in   string
		want Number
	}{
		{"0", n(0)},
		{"38 %", n(38)},
		{"38%", n(38)},
		{"81559 MiB", n(81559)},
		{" 71.15 W ", n(71.15)},
		{"42 C", n(42)},
		{"-5", n(-5)},
		{"", na},
		{"   ", na},
		{"[N/A]", na},
		{"N/A", na},
		{"[Not Supported]", na},
		{"[Unknown Error]", na},
		{"[Insufficient Permissions]", na},
		{"[Requested functionality has been deprecated]", na},
		{"[Function Not Found]", na},
		{"[GPU requires reset]", na},
		{"ERR!", na},
		{"%", na},
		{"MiB", na},
		{"NaN", na},
		{"Inf", na},
		{"1e9", na},
		{"0x10", na},
		{"1_000", na},
		{"1.", na},
		{".5", na},
		{"12 GiB", na},
		{"12 % %", na},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ParseNumber(tt.in)); diff != "" {
				t.Errorf("ParseNumber(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestLineErrorText(t *testing.T) {
	long := "1, GPU-a, " + strings.Repeat("é", 300)
	rep, err := ParseGPUs(lines("index, uuid, name, memory.used [MiB]", long))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 1 {
		t.Fatalf("skipped = %v, want one line", rep.Skipped)
	}
	if got := rep.Skipped[0].Text; len(got) > 200 || !strings.HasSuffix(got, "…") {
		t.Errorf("text is %d bytes (%q), want at most 200 ending in …", len(got), got)
	}
}

// A host can print anything in nvidia-smi's place: however much it prints,
// what the parser keeps is bounded, and too many GPUs or processes fail the
// host rather than fill load_data.csv.
func TestParseBounds(t *testing.T) {
	gpuLine := func(i int) string {
		return fmt.Sprintf("%d, GPU-%d, NVIDIA H100 80GB HBM3, 00000000:%02x:00.0, 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]", i, i, i%256)
	}
	many := func(n int, line func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = line(i)
		}
		return out
	}
	appLine := func(i int) string { return fmt.Sprintf("%d, GPU-0, , 100", 1000+i) }
	garbage := func(i int) string { return fmt.Sprintf("garbage line %d", i) }

	t.Run("MaxGPUs GPUs are read", func(t *testing.T) {
		rep, err := ParseGPUs(lines(append([]string{fetchHeader}, many(MaxGPUs, gpuLine)...)...))
		if err != nil || len(rep.GPUs) != MaxGPUs {
			t.Fatalf("got %d GPUs, err %v; want %d, nil", len(rep.GPUs), err, MaxGPUs)
		}
	})
	tests := []struct {
		name    string
		parse   func([]byte) error
		in      []string
		wantErr string
	}{
		{"one GPU too many", gpus, append([]string{fetchHeader}, many(MaxGPUs+1, gpuLine)...),
			"nvidia-smi listed more than 64 GPUs, more than fetch believes one host has"},
		{"a million GPUs", gpus, append([]string{fetchHeader}, many(1_000_000, gpuLine)...),
			"nvidia-smi listed more than 64 GPUs"},
		{"too many unreachable GPUs", gpus, append([]string{fetchHeader}, many(MaxGPUs+1, func(i int) string {
			return fmt.Sprintf("Unable to determine the device handle for GPU 0000:%02x:00.0: GPU is lost.", i)
		})...), "nvidia-smi listed more than 64 unreachable GPUs"},
		{"one process too many", procs, append([]string{appsHeader}, many(MaxProcesses+1, appLine)...),
			"nvidia-smi listed more than 4096 processes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parse(lines(tt.in...))
			var he *HostError
			if !errors.As(err, &he) || he.Status != hoststatus.Error || !strings.HasPrefix(he.Message, tt.wantErr) {
				t.Fatalf("error = %v, want a host error starting %q", err, tt.wantErr)
			}
		})
	}
	t.Run("skipped lines are counted past MaxSkipped", func(t *testing.T) {
		in := append([]string{appsHeader}, many(100_000, garbage)...)
		rep, err := ParseProcesses(lines(append(in, appLine(0))...))
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Processes) != 1 || len(rep.Skipped) != MaxSkipped || rep.MoreSkipped != 100_000-MaxSkipped {
			t.Fatalf("got %d processes, %d skipped kept, %d more; want 1, %d, %d",
				len(rep.Processes), len(rep.Skipped), rep.MoreSkipped, MaxSkipped, 100_000-MaxSkipped)
		}
		if rep.Skipped[0].Line != 2 || rep.Skipped[MaxSkipped-1].Line != MaxSkipped+1 {
			t.Errorf("kept lines %d..%d, want the first ones, 2..%d", rep.Skipped[0].Line, rep.Skipped[MaxSkipped-1].Line, MaxSkipped+1)
		}
	})
	t.Run("text fields printable and clipped", func(t *testing.T) {
		long := strings.Repeat("x", 1<<20)
		rep, err := ParseGPUs(lines(fetchHeader,
			"0, GPU-\x1b[2J, NVIDIA \x9b31m H100\x00, "+long+", 38, 12, 1234, 81559, 42, 71.15, 700.00, [N/A]"))
		if err != nil || len(rep.GPUs) != 1 {
			t.Fatalf("got %+v, %v", rep, err)
		}
		g := rep.GPUs[0]
		if g.UUID != "GPU-?[2J" || g.Name != "NVIDIA ?31m H100?" {
			t.Errorf("uuid %q, name %q: control characters kept", g.UUID, g.Name)
		}
		if len(g.BusID) > MaxCell || !strings.HasSuffix(g.BusID, "…") {
			t.Errorf("bus id of %d bytes kept, want at most %d ending in …", len(g.BusID), MaxCell)
		}
	})
}

func gpus(b []byte) error  { _, err := ParseGPUs(b); return err }
func procs(b []byte) error { _, err := ParseProcesses(b); return err }
