package probe_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/probe"
)

// fakeAMDSMI prints its answer indented, as amd-smi does, after a warning
// line; where $OLD is set it refuses --mem-usage as argparse does, where
// $HANG is set static never answers, and it exits $RC.
const fakeAMDSMI = `echo "$*" >>"$CALLS"
case "$*" in *--mem-usage*) [ -n "$OLD" ] && { echo "usage: amd-smi metric [-h]"; echo "amd-smi metric: error: unrecognized arguments: --mem-usage"; exit 2; } ;; esac
[ "$1" = static ] && [ -n "$HANG" ] && exec sleep 3599.75
echo "WARNING: a warning"
printf '[\n    {\n        "gpu": 0,\n        "what": "%s"\n    }\n]\n' "$1"
exit "${RC:-0}"
`

// runAMD runs the script as fetch would on a host whose PATH has only
// bin (and the system's), with its KFD folder at kfd.
func runAMD(t *testing.T, bin, kfd string, env ...string) (probe.Output, probe.Request) {
	t.Helper()
	req := probe.NewRequest(1)
	req.KFD = kfd
	cmd := exec.Command("/bin/sh", "-c", probe.Command)
	cmd.Stdin = strings.NewReader(req.Script())
	cmd.Env = append([]string{"PATH=" + bin + ":/usr/bin:/bin", "CALLS=" + filepath.Join(bin, "calls")}, env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	o := probe.ParseOutput(req.Nonce, out)
	if !o.Complete {
		t.Fatalf("output not complete:\n%s", out)
	}
	return o, req
}

// An AMD-only host: the tools listed, no nvidia-smi section, amd-smi's
// JSON unindented with its exit status kept, an amd-smi that refuses an
// option asked again without, and a hung one asked once.
func TestScriptAMDSMI(t *testing.T) {
	for _, tt := range []struct {
		name      string
		env       []string
		wantCalls []string
		wantRC    [2]int // static, metric; -1: not run
	}{
		{"amd-smi", nil, []string{"static --asic --bus --vram --limit --json", "metric --usage --power --temperature --mem-usage --ecc --fan --json"}, [2]int{0, 0}},
		{"its exit status", []string{"RC=7"}, nil, [2]int{7, 7}},
		{"an older one", []string{"OLD=1"}, []string{"static --asic --bus --vram --limit --json",
			"metric --usage --power --temperature --mem-usage --ecc --fan --json", "metric --json"}, [2]int{0, 0}},
		{"hung", []string{"HANG=1"}, []string{"static --asic --bus --vram --limit --json"}, [2]int{124, -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			writeScript(t, bin, "amd-smi", fakeAMDSMI)
			o, _ := runAMD(t, bin, t.TempDir(), tt.env...)
			if tools := probe.ParseTools(o); tools.AMDSMI != filepath.Join(bin, "amd-smi") || tools.NVIDIASMI != "" || tools.ROCmSMI != "" {
				t.Errorf("tools %+v", tools)
			}
			for _, s := range []string{probe.SectionGPUs, probe.SectionApps, probe.SectionDriverGPUs, probe.SectionPmon, probe.SectionROCmSMI} {
				if o.Has(s) {
					t.Errorf("an AMD-only host printed section %s", s)
				}
			}
			for i, name := range []string{probe.SectionAMDSMIStatic, probe.SectionAMDSMIMetric} {
				sec, ok := o.Sections[name]
				switch {
				case tt.wantRC[i] < 0 && ok:
					t.Errorf("%s ran after static hung", name)
				case tt.wantRC[i] >= 0 && (!ok || sec.ExitCode != tt.wantRC[i]):
					t.Errorf("%s: exit %d (printed: %v), want %d", name, sec.ExitCode, ok, tt.wantRC[i])
				case tt.wantRC[i] == 0 && !strings.Contains(string(sec.Body), "WARNING: a warning\n[\n{\n\"gpu\": 0,\n"):
					t.Errorf("%s not unindented:\n%s", name, sec.Body)
				}
			}
			if tt.wantCalls != nil {
				if diff := cmp.Diff(tt.wantCalls, readLines(t, filepath.Join(bin, "calls"))); diff != "" {
					t.Errorf("amd-smi's calls (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// The KFD folder: GPU nodes in their numeric order (node 10 after node 9),
// a node without its properties file says nothing of the shell's, the
// entries without VRAM are left out, so that a thousand idle openers of
// /dev/kfd cannot push a holder past the bound, and the holder's pid goes
// to ps.
func TestScriptKFD(t *testing.T) {
	kfd := t.TempDir()
	put := func(name, data string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(kfd, name)), 0o755)
		if err := os.WriteFile(filepath.Join(kfd, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("topology/nodes/0/gpu_id", "0\n") // the CPU
	for i := 1; i <= 11; i++ {
		put(fmt.Sprintf("topology/nodes/%d/gpu_id", i), fmt.Sprintf("%d\n", 1000+i))
		if i != 5 {
			put(fmt.Sprintf("topology/nodes/%d/properties", i), fmt.Sprintf("simd_count 104\ndomain 0\nlocation_id %d\n", (0x10+i)<<8))
		}
	}
	for pid := 100000; pid < 101100; pid++ {
		for g := 1001; g <= 1008; g++ {
			put(fmt.Sprintf("proc/%d/vram_%d", pid, g), "0\n")
		}
	}
	holder := os.Getpid()
	put(fmt.Sprintf("proc/%d/vram_1003", holder), "5242880\n")
	put(fmt.Sprintf("proc/%d/vram_1004", holder), "0\n")
	bin := t.TempDir()
	writeScript(t, bin, "rocm-smi", `echo '{"card0": {}}'`)
	o, _ := runAMD(t, bin, kfd)
	var want []string
	for i := 1; i <= 11; i++ {
		if i == 5 {
			want = append(want, "node 1005  ")
		} else {
			want = append(want, fmt.Sprintf("node %d 0 %d", 1000+i, (0x10+i)<<8))
		}
	}
	want = append(want, fmt.Sprintf("proc %d 1003 5242880", holder))
	sec := o.Sections[probe.SectionKFD]
	if diff := cmp.Diff(want, strings.Split(strings.TrimSuffix(string(sec.Body), "\n"), "\n")); diff != "" || sec.ExitCode != 0 {
		t.Errorf("kfd section, exit %d (-want +got):\n%s", sec.ExitCode, diff)
	}
	if ps := string(o.Sections[probe.SectionPS].Body); !strings.Contains(ps, fmt.Sprint(holder)) || strings.Contains(ps, "100000") {
		t.Errorf("ps was not asked for the holder only:\n%s", ps)
	}
}
