package fetch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/sshdtest"
)

// fakeAMDSMI plays amd-smi from a capture: static and metric print the
// capture's answers; where DATA/old exists it is an amd-smi that knows no
// --mem-usage and says so as argparse does (exit 2), so the probe must
// ask again without options.
const fakeAMDSMI = `#!/bin/sh
D=%s
echo "$*" >>"$D/calls"
case "$*" in *--mem-usage*)
  if [ -e "$D/old" ]; then
    echo "usage: amd-smi metric [-h] [--json | --csv] [-g GPU [GPU ...]]"
    echo "amd-smi metric: error: unrecognized arguments: --mem-usage"
    exit 2
  fi ;;
esac
case "$1" in
static) cat "$D/static.json" ;;
metric) cat "$D/metric.json" ;;
*) exit 1 ;;
esac
`

// fakeROCmSMI plays rocm-smi from a capture, whatever it is asked.
const fakeROCmSMI = `#!/bin/sh
echo "$*" >>"%[1]s/calls"
cat "%[1]s/rocm-smi.json"
`

// amdSite is a real sshd host with AMD's tool on its PATH, and a stand-in
// for its KFD folder (no test can add GPUs to /sys): the capture's GPUs,
// with a real process of alice's holding VRAM on the first.
type amdSite struct {
	*realSite
	kfd string
}

func newAMDSite(t *testing.T, addr, tool, capture string, withNVIDIA bool) *amdSite {
	t.Helper()
	s := &amdSite{realSite: newRealSite(t)}
	bin := sshdtest.TempDir(t)
	path := bin
	if withNVIDIA {
		path += ":" + s.bin // the fake nvidia-smi
	}
	s.add([]string{"gpu01"}, []string{addr}, fmt.Sprintf("SetEnv PATH=%s:/usr/bin:/bin", path))
	c, err := captures.LoadAMD(tool, capture)
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, data []byte, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(name, data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(name, mode)
	}
	if tool == captures.AMDSMI {
		put(filepath.Join(bin, "amd-smi"), fmt.Appendf(nil, fakeAMDSMI, s.data), 0o755)
		put(filepath.Join(s.data, "static.json"), c.Static, 0o644)
		put(filepath.Join(s.data, "metric.json"), c.Metric, 0o644)
	} else {
		put(filepath.Join(bin, "rocm-smi"), fmt.Appendf(nil, fakeROCmSMI, s.data), 0o755)
		put(filepath.Join(s.data, "rocm-smi.json"), c.Out, 0o644)
	}
	put(filepath.Join(s.data, "calls"), nil, 0o666)
	s.kfd = sshdtest.TempDir(t)
	return s
}

// holds makes the stand-in KFD folder list one GPU node at addr (gpu_id
// 41000) and pid with mib MiB of VRAM on it, and none on a second GPU it
// can see (a ROCm process has an entry on each).
func (s *amdSite) holds(pid, mib int, dom, bus int) {
	s.t.Helper()
	for _, n := range []struct {
		dir, id, props string
	}{
		{"0", "0", "cpu_cores_count 64\nsimd_count 0\ndomain 0\nlocation_id 0\n"}, // a CPU node: no GPU
		{"1", "41000", fmt.Sprintf("simd_count 120\ndrm_render_minor 128\ndomain %d\nlocation_id %d\n", dom, bus<<8)},
		{"2", "41017", "simd_count 120\ndrm_render_minor 129\ndomain 0\nlocation_id 65280\n"},
	} {
		d := filepath.Join(s.kfd, "topology", "nodes", n.dir)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "gpu_id"), []byte(n.id+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "properties"), []byte(n.props), 0o644)
	}
	d := filepath.Join(s.kfd, "proc", fmt.Sprint(pid))
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(d, "vram_41000"), []byte(fmt.Sprintf("%d\n", int64(mib)<<20)), 0o644)
	os.WriteFile(filepath.Join(d, "vram_41017"), []byte("0\n"), 0o644)
	os.WriteFile(filepath.Join(d, "pasid"), []byte("32770\n"), 0o644)
}

func (s *amdSite) poll() Result {
	s.t.Helper()
	return s.pollOne(context.Background(), func(p *Poller) { p.kfd = s.kfd })
}

// End to end over a real sshd, as a user meets an AMD host: its tool on
// the PATH (amd-smi of ROCm 6, an older one that refuses an option, or
// rocm-smi), KFD's process entries, ps: the GPU comes with alice's real
// process on it.
func TestRealSSHDAMDHost(t *testing.T) {
	sshdtest.EnsureUser(t, "alice")
	pid := sshdtest.StartProcessAs(t, "alice", "sleep", "600")
	for i, tt := range []struct {
		name, tool, capture string
		old                 bool
		bus                 int
		wantName            string
		wantCalls           []string
	}{
		{"amd-smi", captures.AMDSMI, "rx6600__list", false, 0x0b, "AMD Radeon RX 6600/6600 XT",
			[]string{"static --asic --bus --vram --limit --json", "metric --usage --power --temperature --mem-usage --ecc --fan --json"}},
		{"an amd-smi that refuses an option", captures.AMDSMI, "rx6600__list", true, 0x0b, "AMD Radeon RX 6600/6600 XT",
			[]string{"static --asic --bus --vram --limit --json", "metric --usage --power --temperature --mem-usage --ecc --fan --json", "metric --json"}},
		{"rocm-smi", captures.ROCmSMI, "mi100x4__rocm-6.0.2", false, 0x83, "AMD Instinct MI100", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newAMDSite(t, fmt.Sprintf("127.0.9.%d", i+1), tt.tool, tt.capture, false)
			if tt.old {
				os.WriteFile(filepath.Join(s.data, "old"), nil, 0o644)
			}
			s.holds(pid, 3900, 0, tt.bus)
			res := s.poll()
			if res.Status != hoststatus.OK || res.Error != "" {
				t.Fatalf("status %q %q", res.Status, res.Error)
			}
			var held []string
			for _, r := range res.Rows {
				if r.GPUVendor != "amd" || r.GPUName != tt.wantName {
					t.Errorf("GPU %d: %q %q", r.GPUIndex.Value, r.GPUVendor, r.GPUName)
				}
				if r.PID.Valid {
					held = append(held, fmt.Sprintf("GPU %d %s: %d %s %q %s MiB", r.GPUIndex.Value, r.GPUBusID, r.PID.Value, r.User, r.Command, cell(r.ProcessMemMiB)))
				}
			}
			want := []string{fmt.Sprintf("GPU 0 0000:%02x:00.0: %d alice \"sleep 600\" 3900 MiB", tt.bus, pid)}
			if diff := cmp.Diff(want, held); diff != "" {
				t.Errorf("processes (-want +got):\n%s", diff)
			}
			if calls := readCalls(t, s.data); tt.wantCalls != nil && !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("amd-smi ran as\n%s\nwant\n%s", strings.Join(calls, "\n"), strings.Join(tt.wantCalls, "\n"))
			}
		})
	}
}

// A workstation with an NVIDIA and an AMD GPU: both, in one round trip,
// the AMD one numbered after the NVIDIA ones.
func TestRealSSHDBothVendors(t *testing.T) {
	sshdtest.EnsureUser(t, "alice")
	pid := sshdtest.StartProcessAs(t, "alice", "sleep", "600")
	s := newAMDSite(t, "127.0.9.9", captures.ROCmSMI, "rx6700xt__rocm-6.1.2", true)
	s.setGPUs("gpu01", realGPUs, realAppsHeader)
	s.holds(pid, 1200, 0, 0x07)
	res := s.poll()
	if res.Status != hoststatus.OK || res.Error != "" {
		t.Fatalf("status %q %q", res.Status, res.Error)
	}
	var got []string
	for _, r := range res.Rows {
		got = append(got, fmt.Sprintf("%d %s %s %s %s", r.GPUIndex.Value, r.GPUVendor, r.GPUName, r.GPUBusID, r.User))
	}
	want := []string{
		"0 nvidia NVIDIA H100 80GB HBM3 00000000:18:00.0 ",
		"1 nvidia NVIDIA H100 80GB HBM3 00000000:2A:00.0 ",
		"2 amd AMD Radeon RX 6700/6700 XT / 6800M 0000:07:00.0 alice",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}
