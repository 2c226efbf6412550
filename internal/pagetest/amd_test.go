package pagetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/fetch"
	"github.com/gpumon/gpumon/internal/render"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"golang.org/x/crypto/ssh"
)

// kfdShim runs the probe with its KFD folder in a stand-in (no test can
// add GPUs to /sys/class/kfd): the only change to what fetch sent.
const kfdShim = `#!/bin/sh
sed "s|^KF='/sys/class/kfd/kfd'\$|KF='%s'|" | sh -s
`

// mixedLab is two real sshd hosts, as fetch and render meet them: nv01
// with nvidia-smi (an H100 with bob's process), mi01 with rocm-smi of
// ROCm 6.0.2 answering from the MI100 capture and alice's process in its
// KFD folder, named with markup. It runs fetch and render over them and
// returns render's folder.
func mixedLab(t *testing.T) (www string, alicePID int) {
	t.Helper()
	sshdtest.Require(t)
	for _, u := range []string{"gpumon", "alice", "bob"} {
		sshdtest.EnsureUser(t, u)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	key, keyPath := sshdtest.NewUserKey(t, t.TempDir())
	nvBin, nvData := sshdtest.TempDir(t), sshdtest.TempDir(t)
	sshdtest.WriteFakeNvidiaSMI(t, nvBin, nvData)
	amdBin, amdData, kfd := sshdtest.TempDir(t), sshdtest.TempDir(t), sshdtest.TempDir(t)
	mi100, err := captures.LoadAMD(captures.ROCmSMI, "mi100x4__rocm-6.0.2")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(name, mode)
	}
	write(filepath.Join(amdData, "rocm-smi.json"), mi100.Out, 0o644)
	write(filepath.Join(amdBin, "rocm-smi"), fmt.Appendf(nil, "#!/bin/sh\ncat %s/rocm-smi.json\n", amdData), 0o755)
	write(filepath.Join(amdBin, "kfd-shim"), fmt.Appendf(nil, kfdShim, kfd), 0o755)

	bobPID := sshdtest.StartProcessAs(t, "bob", "sleep", "600")
	alicePID = sshdtest.StartProcessAs(t, "alice", "sh", "-c", "sleep 600 # <img src=x onerror=alert(1)>")
	// the MI100s' KFD nodes after the CPU's, node 0 (location_id is bus
	// << 8): alice holds 28 GB of the second, and an entry without VRAM
	// on each of the others
	write(filepath.Join(kfd, "topology", "nodes", "0", "gpu_id"), []byte("0\n"), 0o644)
	write(filepath.Join(kfd, "topology", "nodes", "0", "properties"), []byte("cpu_cores_count 64\nsimd_count 0\n"), 0o644)
	for i, bus := range []int{0x83, 0xa3, 0xc3, 0xe3} {
		node := filepath.Join(kfd, "topology", "nodes", fmt.Sprint(i+1))
		write(filepath.Join(node, "gpu_id"), fmt.Appendf(nil, "%d\n", 5000+i), 0o644)
		write(filepath.Join(node, "properties"), fmt.Appendf(nil, "simd_count 480\ndomain 0\nlocation_id %d\n", bus<<8), 0o644)
		vram := 0
		if i == 1 {
			vram = 28100 << 20
		}
		write(filepath.Join(kfd, "proc", fmt.Sprint(alicePID), fmt.Sprintf("vram_%d", 5000+i)), fmt.Appendf(nil, "%d\n", vram), 0o644)
	}

	servers := sshdtest.StartMany(t,
		sshdtest.Options{Addr: "127.0.21.1", AuthorizedKeys: []ssh.PublicKey{key.PublicKey()}, FakeBin: nvBin},
		sshdtest.Options{Addr: "127.0.21.2", AuthorizedKeys: []ssh.PublicKey{key.PublicKey()}, FakeBin: amdBin,
			Extra: "ForceCommand " + filepath.Join(amdBin, "kfd-shim")})
	nv := servers[0].Host()
	sshdtest.SetHostOutput(t, nvData, nv, "gpu", `index, uuid, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%], pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, remapped_rows.pending, remapped_rows.failure, clocks_event_reasons.active, clocks_throttle_reasons.active, gpu_recovery_action
0, GPU-real-0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 98, 41, 30000, 81559, 61, 512.00, 700.00, [N/A], P0, Enabled, 0, [N/A], No, No, 0x0000000000000000, 0x0000000000000000, None
`, 0)
	sshdtest.SetHostOutput(t, nvData, nv, "apps", fmt.Sprintf("pid, gpu_uuid, used_gpu_memory [MiB]\n%d, GPU-real-0, 30000\n", bobPID), 0)
	sshdtest.SetHostOutput(t, nvData, nv, "other", "", 0)

	var sshCfg, known strings.Builder
	for i, name := range []string{"nv01", "mi01"} {
		fmt.Fprintf(&sshCfg, "Host %s\n  HostName %s\n  Port %d\n  User gpumon\n  IdentityFile %s\n\n", name, servers[i].Host(), servers[i].Port(), keyPath)
		known.WriteString(servers[i].KnownHostsLines())
	}
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	write(filepath.Join(home, ".ssh", "config"), []byte(sshCfg.String()), 0o600)
	write(filepath.Join(home, ".ssh", "known_hosts"), []byte(known.String()), 0o600)
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	write(ini, []byte("[common]\nhosts = nv01, mi01\ntimeout = 10\nprocess_util = false\nkernel_log = false\n"), 0o644)

	csv := filepath.Join(dir, "load_data.csv")
	www = filepath.Join(dir, "www")
	os.Mkdir(www, 0o755)
	var stdout, stderr bytes.Buffer
	ctx := context.Background()
	if err := fetch.Main(ctx, []string{"-c", ini, "-o", csv}, &stdout, &stderr); err != nil {
		t.Fatalf("fetch: %v\n%s", err, &stderr)
	}
	if !strings.Contains(stderr.String(), "2 hosts: 2 ok") {
		b, _ := os.ReadFile(csv)
		t.Log(string(b))
		t.Fatalf("fetch: %s", &stderr)
	}
	if err := render.Main(ctx, []string{"-c", ini, "-i", csv, "-o", filepath.Join(www, "index.html")}, &stdout, &stderr); err != nil {
		t.Fatalf("render: %v\n%s", err, &stderr)
	}
	return www, alicePID
}

// An AMD host on the page, beside an NVIDIA one, as a user sees it: its
// GPUs counted by model in the summary, the busy one red with alice's process in its hover (her
// command's markup as text, running nothing), the others free.
func TestAMDHostOnThePage(t *testing.T) {
	www, alicePID := mixedLab(t)
	tb := newTab(t, tabOptions{xssDetector: true})
	tb.load(serve(t, www))
	tb.noProblems("loading the page")
	tb.screenshot("amd-page.png", true)

	nvBusy := `.host[data-host="nv01"] .gpu[data-gpu="0"]`
	amdBusy := `.host[data-host="mi01"] .gpu[data-gpu="1"]`
	amdFree := `.host[data-host="mi01"] .gpu[data-gpu="2"]`
	for sel, want := range map[string]string{nvBusy: "busy", amdBusy: "busy", amdFree: "free"} {
		if st := eval[string](tb, `(document.querySelector(`+jsString(sel)+`) || {dataset: {}}).dataset.state || ""`); st != want {
			t.Errorf("%s: state %q, want %q", sel, st, want)
		}
	}
	if sum := tb.textOf("#summary"); !strings.Contains(sum, "MI100: 3 free of 4") || !strings.Contains(sum, "H100 80GB HBM3: 0 free of 1") {
		t.Errorf("the summary does not count each model by its short name:\n%s", sum)
	}
	if card := tb.textOf(`.host[data-host="mi01"]`); !strings.Contains(card, "4× AMD Instinct MI100") || !strings.Contains(card, "alice") {
		t.Errorf("the AMD host's card does not name its GPUs and their user:\n%s", card)
	}
	busyBg, _ := tb.background(amdBusy)
	nvBg, _ := tb.background(nvBusy)
	if busyBg.distance(nvBg) > 1 {
		t.Errorf("a busy AMD GPU (%v) is not the colour of a busy NVIDIA one (%v)", busyBg, nvBg)
	}
	d := tb.hoverText(amdBusy)
	for _, w := range []string{"alice", fmt.Sprint(alicePID), "<img src=x onerror=alert(1)>"} {
		if !strings.Contains(d, w) {
			t.Errorf("the busy AMD GPU's detail lacks %q:\n%s", w, d)
		}
	}
	if d := tb.hoverText(nvBusy); !strings.Contains(d, "bob") {
		t.Errorf("the NVIDIA GPU's detail lacks bob:\n%s", d)
	}
	tb.screenshot("amd-hover.png", false)
	if eval[bool](tb, `!!window.__xss`) {
		t.Error("a process name ran script")
	}
	tb.noProblems("hovering")
}
