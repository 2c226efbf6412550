package nvsmi

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumon/gpumon/internal/captures"
)

func n(v float64) Number { return Number{Value: v, Valid: true} }

var na = Number{}

const zeroUUID = "GPU-00000000-0000-0000-0000-000000000000"

// captureWant is what one capture's state must parse to. procs nil with
// checkProcs false means the capture has no compute-apps section.
type captureWant struct {
	gpu        GPU
	procs      []Process
	noProcs    bool // the capture holds no --query-compute-apps section
	procCount  int  // when procs lists only some of them
	allMemGone bool // every process's used_gpu_memory is missing (Windows WDDM)
}

// A desktop card has no ECC, no page retirement and no row remapping: each
// of those prints [N/A], which is missing, never "no".
func rtx2080(util, memUtil, used, temp, power float64, pstate float64, clocks uint64) GPU {
	return GPU{
		Index: 0, UUID: zeroUUID, Name: "NVIDIA GeForce RTX 2080 SUPER", BusID: "00000000:0C:00.0",
		UtilGPU: n(util), UtilMem: n(memUtil), MemUsedMiB: n(used), MemTotalMiB: n(8192),
		TempC: n(temp), PowerW: n(power), PowerLimitW: n(250), FanPct: n(38),
		PState: n(pstate), ClockEventMask: clocks, ClockEventValid: true,
		RecoveryAction: "none",
	}
}

func h100MIG(used, temp, power float64, clocks uint64) GPU {
	// MIG mode: the GPU reports no utilization at all; the fans are the
	// chassis's, not the GPU's.
	return GPU{
		Index: 0, UUID: zeroUUID, Name: "NVIDIA H100 80GB HBM3", BusID: "00000000:00:09.0",
		UtilGPU: na, UtilMem: na, MemUsedMiB: n(used), MemTotalMiB: n(81559),
		TempC: n(temp), PowerW: n(power), PowerLimitW: n(700), FanPct: na,
		// ECC on; this H100 prints [N/A] for retired pages and remapped rows.
		PState: n(0), ECCMode: "enabled", ECCUncorrected: n(0),
		ClockEventMask: clocks, ClockEventValid: true, RecoveryAction: "none",
	}
}

func h200(util, memUtil, used, temp, power float64, clocks uint64) GPU {
	return GPU{
		Index: 0, UUID: zeroUUID, Name: "NVIDIA H200", BusID: "00000000:83:00.0",
		UtilGPU: n(util), UtilMem: n(memUtil), MemUsedMiB: n(used), MemTotalMiB: n(143771),
		TempC: n(temp), PowerW: n(power), PowerLimitW: n(700), FanPct: na,
		// The H200 remaps rows (No, No) and does not retire pages ([N/A]).
		PState: n(0), ECCMode: "enabled", ECCUncorrected: n(0),
		RemapPending: Flag{Valid: true}, RemapFailure: Flag{Valid: true},
		ClockEventMask: clocks, ClockEventValid: true, RecoveryAction: "none",
	}
}

func proc(pid int, name string, mem Number) Process {
	return Process{PID: pid, GPUUUID: zeroUUID, Name: name, UsedMemMiB: mem}
}

var captureWants = map[string]map[string]captureWant{
	"linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05": {
		"idle": {gpu: rtx2080(0, 9, 214, 40, 39.32, 8, 0x4)},
		// Xorg and gnome-shell are graphics clients: only the default table
		// shows them, never --query-compute-apps.
		"load": {gpu: rtx2080(8, 3, 819, 45, 111.50, 2, 0), procs: []Process{
			proc(5268, "ffmpeg", n(370)),
			proc(5267, "ffmpeg", n(230)),
		}},
	},
	"linux-x86_64__nvidia-h100-mig__590.48.01": {
		"idle": {gpu: h100MIG(59, 42, 71.15, 0x1)},
		// MIG: the processes name the parent GPU's uuid, not the MIG device's.
		"load": {gpu: h100MIG(11125, 53, 433.78, 0), procs: []Process{
			proc(21180, "/root/tools/memhog", n(2296)),
			proc(21181, "/root/tools/memhog", n(1272)),
			proc(21198, "./gpu_burn", n(7484)),
		}},
	},
	"linux-x86_64__nvidia-h200__590.48.01": {
		"idle": {gpu: h200(0, 0, 0, 28, 77.71, 0x1)},
		"load": {gpu: h200(100, 7, 32362, 52, 627.40, 0), procs: []Process{
			proc(10291, "/root/tools/memhog", n(2566)),
			proc(10293, "/root/tools/memhog", n(1542)),
			proc(10309, "./gpu_burn", n(28234)),
		}},
	},
	// The 465 driver knew clocks_throttle_reasons.* (later renamed) and no
	// memory.reserved; the columns fetch reads are the same.
	"rtx-2080-super__465.27__query-gpu-all": {
		"idle": {noProcs: true, gpu: GPU{
			Index: 0, UUID: "GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa", Name: "NVIDIA GeForce RTX 2080 SUPER", BusID: "00000000:0C:00.0",
			UtilGPU: n(0), UtilMem: n(10), MemUsedMiB: n(344), MemTotalMiB: n(7979),
			TempC: n(32), PowerW: n(30.37), PowerLimitW: n(250), FanPct: n(38),
			// Only the old name of the clock reasons; no remapped_rows at all.
			PState: n(8), ClockEventMask: 0x1, ClockEventValid: true,
		}},
	},
	// WDDM: Windows manages GPU memory, so no process has used_gpu_memory.
	"windows-x86_64__nvidia-geforce-rtx-2080-super__610.62": {
		"idle": {gpu: rtx2080(0, 10, 797, 40, 39.25, 8, 0x1), procCount: 19, allMemGone: true, procs: []Process{
			proc(2140, `C:\Windows\System32\dwm.exe`, na),
			proc(17648, `C:\Program Files\NVIDIA Corporation\NVIDIA App\CEF\NVIDIA Overlay.exe`, na),
			proc(15964, `C:\Program Files\NVIDIA Corporation\NVIDIA App\CEF\NVIDIA Overlay.exe`, na),
			proc(17840, `C:\Program Files (x86)\Microsoft\EdgeWebView\Application\149.0.4022.80\msedgewebview2.exe`, na),
			proc(20440, `C:\Program Files\Controller Companion\ControllerCompanion.exe`, na),
		}},
		"load": {gpu: rtx2080(7, 3, 1366, 44, 97.99, 2, 0), procCount: 21, allMemGone: true, procs: []Process{
			proc(23988, `C:\Program Files (x86)\Microsoft\Edge\Application\msedge.exe`, na),
			proc(12940, `C:\Users\utku\AppData\Local\Microsoft\WinGet\Packages\Gyan.FFmpeg_Microsoft.Winget.Source_8wekyb3d8bbwe\ffmpeg-8.1.1-full_build\bin\ffmpeg.exe`, na),
			proc(13820, `C:\Users\utku\AppData\Local\Microsoft\WinGet\Packages\Gyan.FFmpeg_Microsoft.Winget.Source_8wekyb3d8bbwe\ffmpeg-8.1.1-full_build\bin\ffmpeg.exe`, na),
		}},
	},
}

func section(t testing.TB, name, state, prefix string) (string, bool) {
	t.Helper()
	s, ok := captures.MustLoad(name).Section(state, prefix)
	return s.Body, ok
}

// TestCaptures parses every real capture, idle and under load, with units
// (as recorded) and without (as fetch asks), and checks the readings.
func TestCaptures(t *testing.T) {
	names := captures.Names()
	if len(names) == 0 {
		t.Fatal("no captures embedded")
	}
	for _, name := range names {
		states, ok := captureWants[name]
		if !ok {
			t.Errorf("capture %s has no expectations here: add them", name)
			continue
		}
		for _, state := range []string{"idle", "load"} {
			want, ok := states[state]
			if !ok {
				// The old single-state file answers every state with the same section.
				want = states["idle"]
			}
			gpuBody, ok := section(t, name, state, "query-gpu")
			if !ok {
				t.Fatalf("%s: no %s query-gpu section", name, state)
			}
			for _, variant := range []struct {
				name string
				body func(string) string
			}{
				{"csv", func(s string) string { return s }},
				{"nounits", stripUnits},
			} {
				t.Run(name+"/"+state+"/"+variant.name, func(t *testing.T) {
					body := variant.body(gpuBody)
					if he := Diagnose([]byte(body), 0); he != nil {
						t.Errorf("Diagnose = %v, want nil", he)
					}
					got, err := ParseGPUs([]byte(body))
					if err != nil {
						t.Fatalf("ParseGPUs: %v", err)
					}
					if diff := cmp.Diff(GPUReport{GPUs: []GPU{want.gpu}}, got); diff != "" {
						t.Errorf("ParseGPUs (-want +got):\n%s", diff)
					}

					appsBody, ok := section(t, name, state, "query-compute-apps")
					if want.noProcs {
						if ok {
							t.Fatalf("expected no compute-apps section")
						}
						return
					}
					if !ok {
						t.Fatalf("no compute-apps section")
					}
					appsBody = variant.body(appsBody)
					if he := Diagnose([]byte(appsBody), 0); he != nil {
						t.Errorf("Diagnose(apps) = %v, want nil", he)
					}
					pr, err := ParseProcesses([]byte(appsBody))
					if err != nil {
						t.Fatalf("ParseProcesses: %v", err)
					}
					if len(pr.Skipped) > 0 || len(pr.Faults) > 0 {
						t.Errorf("ParseProcesses skipped %v, faults %v", pr.Skipped, pr.Faults)
					}
					if want.procCount == 0 {
						if diff := cmp.Diff(want.procs, pr.Processes, cmpopts.EquateEmpty()); diff != "" {
							t.Errorf("ParseProcesses (-want +got):\n%s", diff)
						}
						return
					}
					if len(pr.Processes) != want.procCount {
						t.Errorf("got %d processes, want %d", len(pr.Processes), want.procCount)
					}
					byPID := map[int]Process{}
					for _, p := range pr.Processes {
						byPID[p.PID] = p
						if want.allMemGone && p.UsedMemMiB.Valid {
							t.Errorf("pid %d: used memory %v, want missing", p.PID, p.UsedMemMiB)
						}
						if !strings.HasPrefix(p.Name, `C:\`) {
							t.Errorf("pid %d: name %q is not a whole Windows path", p.PID, p.Name)
						}
					}
					for _, w := range want.procs {
						if diff := cmp.Diff(w, byPID[w.PID]); diff != "" {
							t.Errorf("pid %d (-want +got):\n%s", w.PID, diff)
						}
					}
				})
			}
		}
	}
}

var unitValue = regexp.MustCompile(`^(-?[0-9]+(?:\.[0-9]+)?) (?:%|MiB|W|MHz|C|us|ms|KiB|KB/s)$`)

// stripUnits turns --format=csv output into --format=csv,nounits: values lose
// their units, the header keeps them (as nvidia-smi does).
func stripUnits(body string) string {
	lines := strings.Split(body, "\n")
	for i := 1; i < len(lines); i++ {
		fields := strings.Split(lines[i], ", ")
		for j, f := range fields {
			if m := unitValue.FindStringSubmatch(f); m != nil {
				fields[j] = m[1]
			}
		}
		lines[i] = strings.Join(fields, ", ")
	}
	return strings.Join(lines, "\n")
}

func TestStripUnitsChangesSomething(t *testing.T) {
	body, _ := section(t, "linux-x86_64__nvidia-h200__590.48.01", "load", "query-gpu")
	got := stripUnits(body)
	rows := strings.SplitN(got, "\n", 2)[1]
	for _, unit := range []string{" MiB", " %", " W,"} {
		if strings.Contains(rows, unit) {
			t.Errorf("nounits rows still contain %q", unit)
		}
	}
	if !strings.Contains(got, "memory.used [MiB]") {
		t.Errorf("nounits header lost its units")
	}
}
