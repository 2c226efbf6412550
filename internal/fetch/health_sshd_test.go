package fetch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/sshdtest"
)

// fakeDriver465 plays an RTX 2080 SUPER on driver 465.27 (the capture in
// internal/captures): it refuses remapped_rows.* and clocks_event_reasons.*
// with the real message, lists its real fields to --help-query-gpu and
// answers the query the probe then asks with the capture's values; pmon
// prints the driver's older columns for the process in DATA/pid, and
// hangs after its header where DATA/pmon.hang exists.
const fakeDriver465 = `#!/bin/sh
D=%s
echo "$*" >>"$D/calls"
case "$1" in
--query-gpu=*)
  case $1 in
  *remapped_rows.*|*clocks_event_reasons.*)
    printf 'Field "remapped_rows.pending" is not a valid field to query.\n\n'
    exit 2 ;;
  esac
  echo "index, uuid, name, pci.bus_id, utilization.gpu [%%], utilization.memory [%%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%%], pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, clocks_throttle_reasons.active"
  echo "0, GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa, NVIDIA GeForce RTX 2080 SUPER, 00000000:0C:00.0, 0, 10, 344, 7979, 32, 30.37, 250.00, 38, P8, [N/A], [N/A], [N/A], 0x0000000000000001" ;;
--help-query-gpu) cat "$D/help.txt" ;;
--query-compute-apps=*) echo "pid, gpu_uuid, used_gpu_memory [MiB]"; echo "$(cat "$D/pid"), GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa, 300" ;;
pmon)
  echo "# gpu        pid  type    sm   mem   enc   dec   command"
  echo "# Idx          #   C/G     %%     %%     %%     %%   name"
  [ -e "$D/pmon.hang" ] && exec sleep 3599.75
  printf '    0  %%7d     C    42     3     -     -   sleep          \n' "$(cat "$D/pid")" ;;
esac
exit 0
`

// healthSite is one real sshd host on driver 465 with a stand-in for the
// driver's GPU folder (no test can add GPUs to /proc): the GPU nvidia-smi
// reports, and one it leaves out.
type healthSite struct {
	*realSite
	tmp, driverGPUs string
}

func newHealthSite(t *testing.T, addr string) *healthSite {
	t.Helper()
	s := &healthSite{realSite: newRealSite(t)}
	s.tmp = sshdtest.TempDir(t)
	os.Chmod(s.tmp, 0o1777) // the account's TMPDIR: the probe's pmon file goes there
	s.add([]string{"gpu01"}, []string{addr}, fmt.Sprintf("SetEnv PATH=%s:/usr/bin:/bin TMPDIR=%s", s.bin, s.tmp))
	if err := os.WriteFile(filepath.Join(s.bin, "nvidia-smi"), fmt.Appendf(nil, fakeDriver465, s.data), 0o755); err != nil {
		t.Fatal(err)
	}
	help, ok := captures.MustLoad("rtx-2080-super__465.27__query-gpu-all").Section("", "help-query-gpu")
	if !ok {
		t.Fatal("no help-query-gpu in the 465 capture")
	}
	s.put("help.txt", help.Body)
	os.WriteFile(filepath.Join(s.data, "calls"), nil, 0o666)
	os.Chmod(filepath.Join(s.data, "calls"), 0o666)
	s.driverGPUs = sshdtest.TempDir(t)
	for _, id := range []string{"0000:0c:00.0", "0000:0d:00.0"} {
		os.Mkdir(filepath.Join(s.driverGPUs, id), 0o755)
	}
	return s
}

func (s *healthSite) put(name, data string) {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(s.data, name), []byte(data), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// poll polls the host once, as fetch's cron run does (config, SSH), with
// the stand-in driver folder.
func (s *healthSite) poll(ctx context.Context) Result {
	s.t.Helper()
	return s.pollOne(ctx, func(p *Poller) { p.driverGPUs = s.driverGPUs })
}

// End to end over a real sshd: an old driver loses only the fields it
// lacks (two more nvidia-smi runs), pmon gives the process's own SM %, the
// GPU the driver lists and nvidia-smi leaves out is a lost row, and the
// kernel log says how it was read or why not, once, in its cell.
func TestRealSSHDHealthOldDriver(t *testing.T) {
	s := newHealthSite(t, "127.0.8.1")
	sshdtest.EnsureUser(t, "alice")
	pid := sshdtest.StartProcessAs(t, "alice", "sleep", "600")
	s.put("pid", fmt.Sprint(pid))

	res := s.poll(context.Background())
	if res.Status != hoststatus.OK || res.Error != "" || len(res.Rows) != 2 {
		t.Fatalf("status %q %q, %d rows: %+v", res.Status, res.Error, len(res.Rows), res.Rows)
	}
	wantLog := wantKernelLogCell(t)
	got := []healthCellsOf{healthOf(res.Rows[0]), healthOf(res.Rows[1])}
	want := []healthCellsOf{
		{GPU: 0, PID: int64(pid), BusID: "00000000:0C:00.0", PState: loaddata.IntOf(8), ClockEvents: "gpu_idle", SMPct: loaddata.Num(42)},
		{BusID: "0000:0d:00.0", GPUError: lostGPU},
	}
	for i := range want {
		if wantLog != "" {
			want[i].KernelLog = wantLog
		} else {
			want[i].KernelLog = got[i].KernelLog
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(got[0].KernelLog, "unreadable: ") && !slices.Contains([]string{"journal", "dmesg"}, got[0].KernelLog) {
		t.Errorf("kernel_log %q", got[0].KernelLog)
	}
	if res.Rows[0].User != "alice" || res.Rows[0].Command != "sleep 600" {
		t.Errorf("process %q %q", res.Rows[0].User, res.Rows[0].Command)
	}
	calls := readCalls(t, s.data)
	var queries []string // the GPU queries and the help, their fields
	for _, c := range calls {
		if f := strings.Fields(c); strings.HasPrefix(f[0], "--query-gpu=") || f[0] == "--help-query-gpu" {
			queries = append(queries, f[0])
		}
	}
	wantQueries := []string{
		"--query-gpu=" + strings.Join(probe.GPUFields, ",") + ",pstate,ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,clocks_event_reasons.active,clocks_throttle_reasons.active,gpu_recovery_action",
		"--help-query-gpu",
		"--query-gpu=" + strings.Join(probe.GPUFields, ",") + ",pstate,ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending,clocks_throttle_reasons.active",
	}
	if diff := cmp.Diff(wantQueries, queries); diff != "" {
		t.Errorf("nvidia-smi's GPU queries (-want +got):\n%s", diff)
	}
	if !slices.Contains(calls, "pmon -c 1 -s u") {
		t.Errorf("pmon not run: %q", calls)
	}
	checkNoTempFiles(t, s.tmp)
}

// The session cut while pmon hangs on the host (fetch gave up): nothing
// the probe started stays on the host (timeout ends the hung pmon, the
// shell then dies writing to the closed session), and its temporary file
// goes with it.
func TestRealSSHDHealthSessionCut(t *testing.T) {
	s := newHealthSite(t, "127.0.8.2")
	s.put("pid", fmt.Sprint(os.Getpid()))
	s.put("pmon.hang", "")
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	res := s.poll(ctx)
	if res.Status != hoststatus.Timeout {
		t.Fatalf("status %q %q, want timeout (fetch cuts the session)", res.Status, res.Error)
	}
	srv := s.servers["gpu01"]
	deadline := time.Now().Add(time.Minute)
	for {
		left := srv.RemotePIDs()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var cmds []string
			for _, pid := range left {
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				cmds = append(cmds, fmt.Sprintf("%d %q", pid, cmd))
			}
			t.Fatalf("still running on the host a minute after the cut: %s", strings.Join(cmds, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkNoTempFiles(t, s.tmp)
}

func readCalls(t *testing.T, data string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func checkNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Errorf("left in the account's TMPDIR: %v", left)
	}
}

// wantKernelLogCell is what this machine's kernel log must read as for
// the login account, where that is certain: unreadable, in dmesg's words,
// where dmesg is restricted and the account is in none of the journal's
// groups; "" where the machine decides.
func wantKernelLogCell(t *testing.T) string {
	t.Helper()
	restrict, _ := os.ReadFile("/proc/sys/kernel/dmesg_restrict")
	u, err := user.Lookup(loginUser)
	if err != nil || strings.TrimSpace(string(restrict)) != "1" {
		return ""
	}
	out, err := exec.Command("id", "-Gn", u.Username).Output()
	if err != nil {
		return ""
	}
	for _, g := range strings.Fields(string(out)) {
		if g == "systemd-journal" || g == "adm" || g == "wheel" {
			return ""
		}
	}
	return "unreadable: not in group systemd-journal or adm; dmesg: read kernel buffer failed: Operation not permitted"
}
