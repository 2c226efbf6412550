package fetch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/sshdtest"
)

// hostileProbe is a ForceCommand that answers like the probe script, with
// the nonce read from the script on its standard input, and pads the
// process list with $1 bytes of junk lines: an answer that looks valid to
// the end.
const hostileProbe = `N=
while IFS= read -r l; do case $l in "N='"*) N=${l#N=\'}; N=${N%\'}; break ;; esac; done
printf '%s begin gpus\nindex, uuid, name, pci.bus_id, utilization.gpu [%%], utilization.memory [%%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%%]\n0, GPU-h-0, NVIDIA H100, 00000000:18:00.0, 1, 1, 1, 81559, 30, 70.00, 700.00, [N/A]\n%s end gpus 0\n' "$N" "$N"
printf '%s begin apps\npid, gpu_uuid, used_gpu_memory [MiB]\n' "$N"
head -c "$1" /dev/zero | tr '\0' x | fold -w 99
printf '%s end apps 0\n%s begin host\ncpus 8\n%s end host 0\n%s done\n' "$N" "$N" "$N" "$N"
`

// floodRSSBound is the most fetch's peak resident memory may be with 40
// hosts flooding beside 20 healthy ones: docs/performance.md measured 95 to
// 195 MB across the scenarios (fetch's soft limit is 192 MiB), and 719 to
// 1,252 MB before the output budget's rework.
const floodRSSBound = 300_000_000 // bytes

// TestRealSSHDFloodRSS runs the fetch binary against 40 flooding hosts
// beside 20 healthy ones, all real sshds, and holds its peak resident
// memory (the kernel's, from the process's rusage) under floodRSSBound,
// every healthy host ok and every flooding one cut off. It runs the `yes`
// scenario; the others, by hand, as root:
//
//	GPUMON_FLOOD_RSS=zero16|yes|valid16|valid3|sleep go test -run TestRealSSHDFloodRSS -v ./internal/fetch
func TestRealSSHDFloodRSS(t *testing.T) {
	scenario := os.Getenv("GPUMON_FLOOD_RSS")
	if scenario == "" {
		scenario = "yes"
	}
	sshdtest.Require(t)
	// built before newRealSite moves HOME, where go keeps its caches
	bin := filepath.Join(t.TempDir(), "fetch")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/fetch").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := newRealSite(t)
	s.keyTypes = []string{"ed25519"}
	script := filepath.Join(s.bin, "hostile.sh")
	if err := os.WriteFile(script, []byte(hostileProbe), 0o755); err != nil {
		t.Fatal(err)
	}
	floods, timeout := 40, 20
	var force string
	switch scenario {
	case "zero16":
		force = "head -c 16000000 /dev/zero"
	case "yes":
		force = "yes"
	case "valid16":
		force = "sh " + script + " 16000000"
	case "valid3":
		force = "sh " + script + " 3000000"
	case "sleep":
		floods, timeout, force = 17, 15, "head -c 16000000 /dev/zero; sleep 25"
	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
	var names, addrs []string
	for i := range 20 {
		names, addrs = append(names, fmt.Sprintf("ok%02d", i)), append(addrs, fmt.Sprintf("127.0.3.%d", 10+i))
	}
	s.add(names, addrs, "")
	for _, n := range names {
		s.setGPUs(n, realGPUs, realAppsHeader)
	}
	var fnames, faddrs []string
	for i := range floods {
		fnames, faddrs = append(fnames, fmt.Sprintf("flood%02d", i)), append(faddrs, fmt.Sprintf("127.0.3.%d", 100+i))
	}
	s.add(fnames, faddrs, "ForceCommand "+force)
	ini := s.writeFiles("")
	data, _ := os.ReadFile(ini)
	os.WriteFile(ini, []byte(strings.Replace(string(data), "timeout = 6", fmt.Sprintf("timeout = %d", timeout), 1)), 0o644)

	csv := filepath.Join(s.dir, "load_data.csv")
	start := time.Now()
	cmd := exec.Command(bin, "-c", ini, "-o", csv)
	out, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		t.Fatalf("fetch: %v\n%s", err, out)
	}
	peak := int64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) << 10 // KiB on Linux
	t.Logf("scenario %s: %d flooding + 20 healthy hosts: peak RSS %.0f MB, wall %.1f s; %s",
		scenario, floods, float64(peak)/1e6, wall.Seconds(), strings.TrimSpace(string(out)))
	if peak > floodRSSBound {
		t.Errorf("peak RSS %.0f MB, more than %.0f MB", float64(peak)/1e6, float64(floodRSSBound)/1e6)
	}
	by, _ := readRows(t, csv)
	for _, n := range names {
		if rows := by[n]; len(rows) == 0 || rows[0].HostStatus != hoststatus.OK {
			t.Errorf("healthy host %s: %s", n, firstErr(rows))
		}
	}
	for _, n := range fnames {
		if rows := by[n]; scenario != "valid3" && (len(rows) != 1 || rows[0].HostStatus == hoststatus.OK) {
			t.Errorf("flooding host %s: %s, want it cut off", n, firstErr(rows))
		}
	}
}

func readRows(t *testing.T, csv string) (map[string][]loaddata.Row, error) {
	t.Helper()
	rows, err := loaddata.ReadFile(csv)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string][]loaddata.Row{}
	for _, r := range rows {
		by[r.Host] = append(by[r.Host], r)
	}
	return by, nil
}

func firstErr(rows []loaddata.Row) string {
	if len(rows) == 0 {
		return "(no row)"
	}
	return string(rows[0].HostStatus) + ": " + rows[0].HostError
}
