package probe_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/captures"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
)

// fakeHost is a folder of fake commands (nvidia-smi, journalctl, dmesg,
// id, as a test writes them) and a log of the nvidia-smi calls.
type fakeHost struct {
	bin, calls, tmp string
}

// fakeNvidiaSMI answers --query-gpu by echoing the fields asked (refusing,
// as a driver does, the ones listed in $REFUSE with its real message),
// --help-query-gpu from help.txt, pmon from pmon.sh, and
// --query-compute-apps with one process when $APPS is set.
const fakeNvidiaSMI = `echo "$*" >>"$CALLS"
case "$1" in
--query-gpu=*)
  q=${1#--query-gpu=}
  IFS=,
  for f in $q; do
    case " $REFUSE " in *" $f "*) printf 'Field "%s" is not a valid field to query.\n\n' "$f"; exit 2 ;; esac
  done
  echo "$q" ;;
--help-query-gpu) cat "$DATA/help.txt" ;;
--query-compute-apps=*) echo "pid, gpu_uuid, used_gpu_memory [MiB]"; [ -n "$APPS" ] && echo "$APPS, GPU-a, 10" ;;
pmon) . "$DATA/pmon.sh" ;;
esac
exit 0
`

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	h := &fakeHost{bin: t.TempDir(), tmp: t.TempDir()}
	h.calls = filepath.Join(h.bin, "calls")
	writeScript(t, h.bin, "nvidia-smi", fakeNvidiaSMI)
	h.write(t, "pmon.sh", "echo '# gpu pid type sm mem enc dec jpg ofa command'\n")
	return h
}

func (h *fakeHost) write(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.bin, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs the script as fetch would, with env added, and returns its
// sections; it fails the test when the output is not complete.
func (h *fakeHost) run(t *testing.T, req probe.Request, env ...string) probe.Output {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", probe.Command)
	cmd.Stdin = strings.NewReader(req.Script())
	cmd.Env = append([]string{"PATH=" + h.bin + ":/usr/bin:/bin", "CALLS=" + h.calls, "DATA=" + h.bin, "TMPDIR=" + h.tmp}, env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	o := probe.ParseOutput(req.Nonce, out)
	if !o.Complete {
		t.Fatalf("output not complete:\n%s", out)
	}
	return o
}

func (h *fakeHost) nvidiaSMICalls(t *testing.T) []string {
	t.Helper()
	return readLines(t, h.calls)
}

func helpQueryGPU(t *testing.T, capture string) string {
	t.Helper()
	for _, state := range []string{"capabilities", ""} {
		if s, ok := captures.MustLoad(capture).Section(state, "help-query-gpu"); ok {
			return s.Body
		}
	}
	t.Fatalf("capture %s has no help-query-gpu", capture)
	return ""
}

// A new driver answers the health fields in the one query; driver 465
// refuses the whole query over remapped_rows.* and clocks_event_reasons.*
// (its real --help-query-gpu lists neither): the script asks the help once,
// keeps what it lists, and asks again. Where the help lists both clock
// names (590), only the first is kept.
func TestScriptHealthFieldsByDriver(t *testing.T) {
	gf := strings.Join(probe.GPUFields, ",")
	hf := strings.Join(nvsmi.HealthFields, ",")
	for _, tc := range []struct {
		name, capture, refuse string
		wantQuery             string
		wantCalls             []string
	}{
		{
			name: "590 knows every field", capture: "linux-x86_64__nvidia-h200__590.48.01",
			wantQuery: gf + "," + hf,
			wantCalls: []string{"--query-gpu=" + gf + "," + hf + " --format=csv,nounits"},
		},
		{
			name: "465 lacks the remapped rows and the new clock name", capture: "rtx-2080-super__465.27__query-gpu-all",
			refuse:    "remapped_rows.pending remapped_rows.failure clocks_event_reasons.active",
			wantQuery: gf + ",pstate,ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending,clocks_throttle_reasons.active",
			wantCalls: []string{
				"--query-gpu=" + gf + "," + hf + " --format=csv,nounits",
				"--help-query-gpu",
				"--query-gpu=" + gf + ",pstate,ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending,clocks_throttle_reasons.active --format=csv,nounits",
			},
		},
		{
			// a driver that refuses a field its help lists (none known):
			// both clock names listed, the first is kept
			name: "590's help with both clock names", capture: "linux-x86_64__nvidia-h200__590.48.01",
			refuse:    "clocks_throttle_reasons.active",
			wantQuery: gf + ",pstate,ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,clocks_event_reasons.active,gpu_recovery_action",
			wantCalls: []string{
				"--query-gpu=" + gf + "," + hf + " --format=csv,nounits",
				"--help-query-gpu",
				"--query-gpu=" + gf + ",pstate,ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure,clocks_event_reasons.active,gpu_recovery_action --format=csv,nounits",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			h.write(t, "help.txt", helpQueryGPU(t, tc.capture))
			req := probe.NewRequest(5)
			req.HealthFields = nvsmi.HealthFields
			o := h.run(t, req, "REFUSE="+tc.refuse)
			g := o.Sections[probe.SectionGPUs]
			if got := strings.TrimSpace(string(g.Body)); g.ExitCode != 0 || got != tc.wantQuery {
				t.Errorf("gpus section: exit %d, asked\n %s\nwant\n %s", g.ExitCode, got, tc.wantQuery)
			}
			var calls []string // the GPU queries and help
			for _, c := range h.nvidiaSMICalls(t) {
				if strings.HasPrefix(c, "--query-gpu=") || strings.HasPrefix(c, "--help") {
					calls = append(calls, c)
				}
			}
			if diff := cmp.Diff(tc.wantCalls, calls); diff != "" {
				t.Errorf("nvidia-smi calls (-want +got):\n%s", diff)
			}
		})
	}
}

// A help that fails or floods costs the health fields, not the host.
func TestScriptHealthFieldsHelpFails(t *testing.T) {
	for _, tc := range []struct{ name, help string }{
		{"help refused", "exit 9"},
		{"help floods", "exec yes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			writeScript(t, h.bin, "nvidia-smi", strings.Replace(fakeNvidiaSMI, `--help-query-gpu) cat "$DATA/help.txt" ;;`, "--help-query-gpu) "+tc.help+" ;;", 1))
			req := probe.NewRequest(5)
			req.HealthFields = nvsmi.HealthFields
			o := h.run(t, req, "REFUSE=pstate")
			g := o.Sections[probe.SectionGPUs]
			if got, want := strings.TrimSpace(string(g.Body)), strings.Join(probe.GPUFields, ","); g.ExitCode != 0 || got != want {
				t.Errorf("gpus section: exit %d, asked %s, want %s", g.ExitCode, got, want)
			}
		})
	}
}

// The driver's GPU folder: its names, at most 64; a missing folder is a
// non-zero exit that says so.
func TestScriptDriverGPUs(t *testing.T) {
	many := make([]string, 70)
	for i := range many {
		many[i] = fmt.Sprintf("0000:%02x:00.0", i+1)
	}
	for _, tc := range []struct {
		name     string
		dirs     []string
		noFolder bool
		wantBody string
		wantExit int
	}{
		{name: "three GPUs", dirs: []string{"0000:3b:00.0", "0000:18:00.0", "0000:86:00.0"}, wantBody: "0000:18:00.0\n0000:3b:00.0\n0000:86:00.0\n"},
		{name: "none", wantBody: "\n"},
		{name: "70 names", dirs: many, wantBody: strings.Join(many[:64], "\n") + "\n"},
		{name: "no folder", noFolder: true, wantExit: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			dir := filepath.Join(t.TempDir(), "gpus")
			if !tc.noFolder {
				os.Mkdir(dir, 0o755)
			}
			for _, d := range tc.dirs {
				if err := os.Mkdir(filepath.Join(dir, d), 0o555); err != nil {
					t.Fatal(err)
				}
			}
			req := probe.NewRequest(5)
			req.DriverGPUs = dir
			sec := h.run(t, req).Sections[probe.SectionDriverGPUs]
			if sec.ExitCode != tc.wantExit {
				t.Errorf("exit %d, want %d: %s", sec.ExitCode, tc.wantExit, sec.Body)
			}
			if tc.wantExit == 0 && string(sec.Body) != tc.wantBody {
				t.Errorf("body %q, want %q", sec.Body, tc.wantBody)
			}
			if tc.noFolder && !strings.Contains(string(sec.Body), "is not a folder") {
				t.Errorf("body %q does not say why", sec.Body)
			}
		})
	}
}

// pmon starts before the first --query-gpu and runs beside it (the
// fake query waits for pmon to have started), its section comes where a
// process exists, and its temporary file is gone at the end.
func TestScriptPmonRunsBeside(t *testing.T) {
	pmonLoad, ok := captures.MustLoad("linux-x86_64__nvidia-h200__590.48.01").Section("load", "pmon")
	if !ok {
		t.Fatal("no pmon in the H200 capture")
	}
	oneSample := strings.Join(strings.Split(pmonLoad.Body, "\n")[:5], "\n") + "\n"
	for _, tc := range []struct {
		name    string
		apps    string
		mktemp  bool // a working mktemp: pmon in the background
		want    bool // a pmon section
		wantOut string
	}{
		{name: "a process", apps: "10309", mktemp: true, want: true, wantOut: oneSample},
		{name: "no process", mktemp: true},
		{name: "no mktemp: pmon in line at the end", apps: "10309", want: true, wantOut: oneSample},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			started := filepath.Join(h.tmp, "pmon-started")
			h.write(t, "pmon.sh", fmt.Sprintf("touch %s\ncat <<'EOF'\n%sEOF\n", started, oneSample))
			if tc.mktemp {
				// the first query waits (at most 5 s) for pmon to start
				writeScript(t, h.bin, "nvidia-smi", strings.Replace(fakeNvidiaSMI, "--query-gpu=*)\n",
					fmt.Sprintf("--query-gpu=*)\n  i=0; while [ ! -e %s ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done\n  [ -e %s ] || { echo 'pmon did not start first'; exit 1; }\n", started, started), 1))
			} else {
				writeScript(t, h.bin, "mktemp", "exit 1")
			}
			req := probe.NewRequest(5)
			req.ProcessUtil = true
			o := h.run(t, req, "APPS="+tc.apps)
			if g := o.Sections[probe.SectionGPUs]; g.ExitCode != 0 {
				t.Fatalf("gpus: exit %d: %s", g.ExitCode, g.Body)
			}
			sec, got := o.Sections[probe.SectionPmon]
			if got != tc.want {
				t.Fatalf("pmon section present %v, want %v", got, tc.want)
			}
			if tc.want && (sec.ExitCode != 0 || string(sec.Body) != tc.wantOut) {
				t.Errorf("pmon section: exit %d\n%s\nwant\n%s", sec.ExitCode, sec.Body, tc.wantOut)
			}
			if left, _ := filepath.Glob(filepath.Join(h.tmp, "tmp.*")); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// A pmon that hangs is ended by timeout on the host and one that floods is
// cut off: either way the host answers in full, the section says why, and
// nothing of it is left running.
func TestScriptPmonHangsOrFloods(t *testing.T) {
	for _, tc := range []struct {
		name, pmon string
		wantExit   int
		wantBody   string
	}{
		{"hangs", "exec sleep 3599.25", 124, ""},
		{"floods", "exec yes", 3, fmt.Sprintf("gpumon probe: nvidia-smi pmon printed more than %d bytes (cut off on the host)\n", probe.MaxPmonOutput)},
		{"prints garbage", "head -c 3000 /dev/urandom; exit 0", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			h.write(t, "pmon.sh", tc.pmon+"\n")
			req := probe.NewRequest(1)
			req.ProcessUtil = true
			start := time.Now()
			o := h.run(t, req, "APPS=4242")
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("the script took %v with T=1", took)
			}
			sec, ok := o.Sections[probe.SectionPmon]
			if !ok || sec.ExitCode != tc.wantExit {
				t.Fatalf("pmon section present %v, exit %d, want %d", ok, sec.ExitCode, tc.wantExit)
			}
			if tc.wantBody != "" && string(sec.Body) != tc.wantBody {
				t.Errorf("body %q, want %q", sec.Body, tc.wantBody)
			}
			if out, _ := exec.Command("pgrep", "-f", "sleep 3599.25").Output(); tc.name == "hangs" && len(out) > 0 {
				t.Errorf("the hung pmon still runs: pids %s", out)
			}
		})
	}
}

const (
	xidLine   = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
	dmesgDeny = "dmesg: read kernel buffer failed: Operation not permitted"
)

// fakeID plays an account: `id -u` prints $UID_, `id -Gn` prints $GROUPS_.
const fakeID = `case "$1" in -u) echo "$UID_" ;; -Gn) echo "$GROUPS_" ;; *) exit 1 ;; esac`

// fakeJournalctl logs its arguments and prints a kernel line that is not
// an XID, then $XIDS XID lines (XID i for i = 1 to $XIDS: each its own), then
// one of 2,000 bytes; or fails as $JFAIL says. With $BURST it prints an
// XID 79, then 300 lines of XID 13 on another GPU (a line per SM, as a
// crashing job makes them), then a line that holds an XID's words but not
// at the start of its message.
const fakeJournalctl = `echo "$*" >"$DATA/journalctl.args"
[ -n "$JFAIL" ] && { echo "$JFAIL" >&2; exit 1; }
echo "1732600000.000001 gpu01 kernel: usb 1-1: new high-speed USB device"
if [ -n "$BURST" ]; then
  echo "1732600000.0 gpu01 kernel: ` + xidLine + `"
  i=0
  while [ $i -lt 300 ]; do
    i=$((i + 1))
    echo "1732600000.$i gpu01 kernel: ` + xid13 + ` n=$i"
  done
  echo "1732600002.0 gpu01 kernel: python[4242]: segfault in ` + xidLine + `"
  exit 0
fi
i=0
while [ $i -lt "$XIDS" ]; do
  i=$((i + 1))
  echo "1732600000.$i gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): $i, pid=1234 n=$i"
done
printf '1732600001.0 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 999, %02000d\n' 0
`

const xid13 = "NVRM: Xid (PCI:0000:1a:00): 13, pid=4242, name=python, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0)"

// fakeDmesg prints an XID from boot, a line that is not one, and an XID
// of 5 s ago (its times are seconds since boot, read from /proc/uptime);
// or fails as $DFAIL says.
const fakeDmesg = `[ -n "$DFAIL" ] && { echo "$DFAIL" >&2; exit 1; }
read -r up rest </proc/uptime
up=${up%%.*}
echo "$up" >"$DATA/dmesg.up"
echo "[    1.000000] ` + xidLine + ` at boot"
printf '[%5d.100000] eth0: link up\n' $((up - 6))
printf '[%5d.200000] ` + xidLine + ` recent\n' $((up - 5))
`

// The kernel log: the journal where the account may read it (root, or a
// member of systemd-journal, adm or wheel), the newest 256 XID lines of
// the window, each cut at 512 bytes; else dmesg, its lines of the window;
// else a non-zero exit that says why, with dmesg's own words.
func TestScriptKernelLog(t *testing.T) {
	const ks = 330
	long := "1732600001.0 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 999, " + strings.Repeat("0", 2000)
	journalLines := []string{"source journal"}
	for i := 300 - 254; i <= 300; i++ {
		journalLines = append(journalLines, fmt.Sprintf("1732600000.%d gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): %d, pid=1234 n=%d", i, i, i))
	}
	journalLines = append(journalLines, long[:512])
	wantJournal := strings.Join(journalLines, "\n") + "\n"
	for _, tc := range []struct {
		name     string
		env      []string
		noJctl   bool
		want     string // the body; "dmesg" for dmesg's recent line
		wantExit int
	}{
		{name: "adm reads the journal", env: []string{"UID_=1000", "GROUPS_=gpumon adm"}, want: wantJournal},
		{name: "systemd-journal reads the journal", env: []string{"UID_=1000", "GROUPS_=systemd-journal gpumon"}, want: wantJournal},
		{name: "wheel reads the journal", env: []string{"UID_=1000", "GROUPS_=wheel"}, want: wantJournal},
		{name: "root reads the journal", env: []string{"UID_=0", "GROUPS_=root"}, want: wantJournal},
		// the newest line of each GPU and XID: a burst of XID 13 cannot push
		// the XID 79 out, and a line with an XID's words past its start
		// does not count against the bound
		{name: "a burst of XID 13 keeps the XID 79", env: []string{"UID_=0", "GROUPS_=root", "BURST=1"},
			want: "source journal\n1732600000.0 gpu01 kernel: " + xidLine + "\n1732600000.300 gpu01 kernel: " + xid13 + " n=300\n"},
		{name: "no group: dmesg", env: []string{"UID_=1000", "GROUPS_=gpumon users"}, want: "dmesg"},
		{name: "no group, dmesg restricted", env: []string{"UID_=1000", "GROUPS_=gpumon", "DFAIL=" + dmesgDeny},
			want: "not in group systemd-journal or adm; " + dmesgDeny + "\n", wantExit: 1},
		{name: "journal fails: dmesg", env: []string{"UID_=0", "GROUPS_=root", "JFAIL=No journal files were found."}, want: "dmesg"},
		{name: "journal and dmesg fail", env: []string{"UID_=0", "GROUPS_=root", "JFAIL=x", "DFAIL=" + dmesgDeny},
			want: "journalctl failed (exit 1); " + dmesgDeny + "\n", wantExit: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			writeScript(t, h.bin, "id", fakeID)
			writeScript(t, h.bin, "journalctl", fakeJournalctl)
			writeScript(t, h.bin, "dmesg", fakeDmesg)
			req := probe.NewRequest(5)
			req.KernelLogSince = ks
			before := time.Now().Unix()
			o := h.run(t, req, append(tc.env, "XIDS=300")...)
			sec, ok := o.Sections[probe.SectionKernelLog]
			if !ok || sec.ExitCode != tc.wantExit {
				t.Fatalf("kernel_log present %v, exit %d, want %d:\n%s", ok, sec.ExitCode, tc.wantExit, sec.Body)
			}
			want := tc.want
			if want == "dmesg" {
				want = wantDmesg(t, h, string(sec.Body))
			}
			if diff := cmp.Diff(want, string(sec.Body)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			if want == wantJournal {
				checkJournalArgs(t, h, before-ks)
			}
		})
	}
}

// wantDmesg is the dmesg section the fake makes: the script's uptime
// (the body's: the test cannot know the second the script read it) and
// the fake's recent line.
func wantDmesg(t *testing.T, h *fakeHost, body string) string {
	t.Helper()
	var up, fakeUp int
	if _, err := fmt.Sscanf(strings.TrimPrefix(body, "source dmesg\n"), "uptime %d\n", &up); err != nil {
		t.Fatalf("no uptime line in %q", body)
	}
	b, _ := os.ReadFile(filepath.Join(h.bin, "dmesg.up"))
	if _, err := fmt.Sscanf(string(b), "%d", &fakeUp); err != nil {
		t.Fatalf("dmesg.up %q", b)
	}
	return fmt.Sprintf("source dmesg\nuptime %d\n[%5d.200000] %s recent\n", up, fakeUp-5, xidLine)
}

func checkJournalArgs(t *testing.T, h *fakeHost, since int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.bin, "journalctl.args"))
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	args := strings.TrimSpace(string(b))
	head, _, _ := strings.Cut(args, " --since=@")
	if _, err := fmt.Sscanf(args[len(head):], " --since=@%d", &at); err != nil || head != "-k -q --no-pager -o short-unix" {
		t.Fatalf("journalctl %s", args)
	}
	if at < since || at > since+10 {
		t.Errorf("journalctl --since=@%d, want about %d", at, since)
	}
}

// KernelLogSince 0 asks nothing of the kernel log.
func TestScriptKernelLogOff(t *testing.T) {
	h := newFakeHost(t)
	writeScript(t, h.bin, "journalctl", fakeJournalctl)
	o := h.run(t, probe.NewRequest(5), "XIDS=1")
	if o.Has(probe.SectionKernelLog) {
		t.Error("a kernel_log section without KernelLogSince")
	}
	if _, err := os.Stat(filepath.Join(h.bin, "journalctl.args")); err == nil {
		t.Error("journalctl ran")
	}
}
