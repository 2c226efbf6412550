// Package probe is the one round trip fetch makes to a GPU host: a POSIX sh
// script that runs nvidia-smi (twice: the GPUs with their health readings,
// then the processes; on a driver that refuses a health field, twice more
// to find and drop it), nvidia-smi pmon in the background beside the rest,
// ps for the GPU processes only, reads their /proc/PID/cgroup, asks squeue
// (and, where configured, docker or podman ps) about the jobs and
// containers those name, reads the host's CPU count, load and memory, the
// GPUs the driver lists and the kernel log's XID lines; and the framing of
// its output. ParseOutput splits the answer into sections; ParsePS and
// ParseHost read the sections the script makes itself (nvsmi reads
// nvidia-smi's, package attrib the cgroups, squeue and ps records, kernlog
// the kernel log's).
//
// Text a user chooses reaches the output in two kinds of places: the
// commands that ps prints, one process a line, control characters
// replaced, last on the line; and names (a cgroup folder in a user's own
// subtree, a Slurm job's name), each inside a record that starts with the
// run's nonce (RecordPrefix), so that it can lengthen its own record but
// never start another. nvidia-smi is asked for nothing a user names (see
// AppFields).
//
// The script travels on the session's standard input to `sh -s`, so it works
// whatever the account's login shell is (bash, zsh, fish, tcsh) and needs no
// quoting. Every section of the output is framed by lines that carry a random
// nonce chosen per run: a process name or an error message printed by a host
// can never forge a section boundary.
package probe

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/lines"
)

// Command is what fetch asks the remote account to run; the script follows on stdin.
const Command = "sh -s"

// Section names, in the order the script prints them.
const (
	SectionGPUs = "gpus"
	SectionApps = "apps"
	SectionPS   = "ps"
	// SectionCgroups is /proc/PID/cgroup of each GPU process, each after a
	// record line "PREFIXpid PID" (see RecordPrefix and package attrib).
	SectionCgroups = "cgroups"
	// SectionSqueue is one squeue for the Slurm jobs the cgroups name,
	// where the host has squeue.
	SectionSqueue = "squeue"
	// SectionDocker and SectionPodman are one `docker ps` or `podman ps`,
	// as Request.Containers asks, where a cgroup names a container and the
	// host has the command.
	SectionDocker  = ContainersDocker
	SectionPodman  = ContainersPodman
	SectionHost    = "host"
	SectionIdlemon = "idlemon"
	// SectionDriverGPUs is the names in /proc/driver/nvidia/gpus (the
	// PCI addresses of the GPUs the driver lists, "0000:3b:00.0"), one a
	// line; a non-zero exit where the folder cannot be read.
	SectionDriverGPUs = "driver_gpus"
	// SectionPmon is `nvidia-smi pmon -c 1 -s u` as printed, where
	// Request.ProcessUtil asks for it and there is a GPU process.
	SectionPmon = "pmon"
	// SectionKernelLog is the kernel's XID lines since Request.KernelLogSince
	// seconds ago: a first line "source journal" (journalctl -k -o
	// short-unix) or "source dmesg" (dmesg -k, with a second line
	// "uptime SECONDS" to place its boot-relative times), then the lines
	// that hold "NVRM: Xid", the newest last, at most maxXIDLines. A
	// non-zero exit, with the reason as the body, where neither can be read.
	SectionKernelLog = "kernel_log"
	// SectionTools says which GPU tools the host has, one a line: "nvidia-smi
	// PATH", "amd-smi PATH", "rocm-smi PATH" as `command -v` finds them,
	// and "rocm_version X.Y.Z" where /opt/rocm/.info/version holds it. The
	// NVIDIA sections (gpus, apps, pmon, driver_gpus) are there where the
	// host has nvidia-smi, or has no AMD tool at all (to say so); the AMD
	// ones where it has amd-smi or rocm-smi.
	SectionTools = "gpu_tools"
	// SectionAMDSMIStatic and SectionAMDSMIMetric are `amd-smi static
	// --json` and `amd-smi metric --json` (asked for the parts fetch reads,
	// or whole where that amd-smi does not know the options), where the
	// host has amd-smi.
	SectionAMDSMIStatic = "amd_smi_static"
	SectionAMDSMIMetric = "amd_smi_metric"
	// SectionROCmSMI is `rocm-smi ... --json`, where the host has rocm-smi
	// and not amd-smi.
	SectionROCmSMI = "rocm_smi"
	// SectionKFD is what /sys/class/kfd/kfd says, where the host has an
	// AMD tool: a line "node GPU_ID DOMAIN LOCATION_ID" for each topology
	// node with a GPU, in the nodes' numeric order, which is ROCm's device
	// order (the decimal numbers of its properties file: location_id is
	// the PCI bus << 8 | device << 3 | function), then a line "proc PID
	// GPU_ID BYTES" for each vram_GPU_ID file of each process in proc/
	// that holds VRAM (a ROCm process has a file, of 0, for every GPU it
	// can see: those would let idle openers of /dev/kfd push the holders
	// past the bound), at most maxKFDLines lines, then "cut" where there
	// were more. A non-zero exit where the folder cannot be read.
	SectionKFD = "kfd"
)

const (
	markerPrefix     = "@@gpumon:"
	defaultNVTimeout = 8
)

// GPUFields and AppFields are what nvidia-smi is asked for. Every field exists
// in drivers back to 450; an unknown field makes nvidia-smi refuse the whole query.
var (
	GPUFields = []string{
		"index", "uuid", "name", "pci.bus_id",
		"utilization.gpu", "utilization.memory",
		"memory.used", "memory.total",
		"temperature.gpu", "power.draw", "power.limit", "fan.speed",
	}
	// pid comes first: the script reads it with shell parameter expansion only.
	// No process_name: nvidia-smi prints it unquoted, so a process named
	// "python\n<uuid>, 99999, x, 70000" splits its own line and adds a forged
	// one. Without it nothing in this output is chosen by a user, and names
	// and commands come from ps, which makes control characters harmless.
	AppFields = []string{"pid", "gpu_uuid", "used_gpu_memory"}
)

// A Request is everything a script is built from; a simulated host recovers it
// with ParseScript.
type Request struct {
	Nonce     string
	GPUFields []string
	AppFields []string
	// NVTimeout bounds each nvidia-smi run on the host itself, in seconds:
	// closing the SSH session does not stop a wedged nvidia-smi.
	NVTimeout int
	// StateFile is idlemon's state file, printed when it exists ("" for none).
	StateFile string
	// Containers is the engine asked for container names: ContainersDocker,
	// ContainersPodman, or "" for none (the default: its socket is
	// root-equivalent, see config.example.ini).
	Containers string
	// HealthFields are asked of nvidia-smi --query-gpu after GPUFields;
	// those the host's driver does not know are dropped on the host (it
	// refuses a whole query for one unknown field), not the query.
	HealthFields []string
	// ProcessUtil asks for each process's own utilization (SectionPmon).
	ProcessUtil bool
	// KernelLogSince asks for the kernel log's XID lines of the last so
	// many seconds (SectionKernelLog); 0 asks for none.
	KernelLogSince int
	// DriverGPUs is the folder whose names are SectionDriverGPUs:
	// DriverGPUsFolder (NewRequest's), or a stand-in that tests point it
	// to, since no test can make GPUs appear in /proc.
	DriverGPUs string
	// KFD is the folder SectionKFD reads: KFDFolder (NewRequest's), or a
	// test tree.
	KFD string
}

// KFDFolder is where the amdgpu driver's compute interface (KFD) lists
// its GPUs (topology/nodes) and the processes that use them (proc),
// world-readable.
const KFDFolder = "/sys/class/kfd/kfd"

// The commands the script runs on a host with AMD's tools. amd-smi is
// asked only for the parts fetch reads (the whole static and metric
// answers are some 20 KiB a GPU), by long options (short ones changed
// meaning between releases); an amd-smi that refuses one (argparse prints
// its usage: early releases lack --vram and --mem-usage, a VM guest
// --limit, --power, --ecc and --fan) is asked again with none.
var (
	AMDSMIStaticArgs = []string{"--asic", "--bus", "--vram", "--limit"}
	AMDSMIMetricArgs = []string{"--usage", "--power", "--temperature", "--mem-usage", "--ecc", "--fan"}
	ROCmSMIArgs      = []string{"--showid", "--showproductname", "--showbus", "--showuniqueid", "--showserial",
		"--showuse", "--showmemuse", "--showmeminfo", "vram", "--showtemp", "--showpower", "--showmaxpower", "--showfan"}
)

// DriverGPUsFolder is where the NVIDIA driver lists its GPUs, one folder
// each, named by PCI address; world-readable wherever the driver is loaded.
const DriverGPUsFolder = "/proc/driver/nvidia/gpus"

// The values of Request.Containers that ask something.
const (
	ContainersDocker = "docker"
	ContainersPodman = "podman"
)

// RecordPrefix is what starts each record of the cgroups, squeue and
// docker/podman sections: "@@gpumon:NONCE:". A record line is never a
// section marker, which has a space after the nonce.
func RecordPrefix(nonce string) string { return markerPrefix + nonce + ":" }

// NewRequest returns a request with a fresh nonce and the standard fields.
func NewRequest(nvTimeout int) Request {
	if nvTimeout < 1 {
		nvTimeout = defaultNVTimeout
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return Request{
		Nonce:      hex.EncodeToString(b[:]),
		GPUFields:  GPUFields,
		AppFields:  AppFields,
		NVTimeout:  nvTimeout,
		DriverGPUs: DriverGPUsFolder,
		KFD:        KFDFolder,
	}
}

// Script renders the shell script for r.
func (r Request) Script() string {
	var b strings.Builder
	ct := r.Containers
	if ct != ContainersDocker && ct != ContainersPodman {
		ct = "" // the script runs what CT names: nothing else
	}
	pu := 0
	if r.ProcessUtil {
		pu = 1
	}
	fmt.Fprintf(&b, "gpumon_probe() {\nN='%s%s'\nGF='%s'\nAF='%s'\nT=%d\nSF='%s'\nCT='%s'\nHF='%s'\nPU=%d\nKS=%d\nDG='%s'\nKF='%s'\n",
		markerPrefix, r.Nonce, strings.Join(r.GPUFields, ","), strings.Join(r.AppFields, ","), r.NVTimeout, r.StateFile, ct,
		strings.Join(r.HealthFields, ","), pu, max(r.KernelLogSince, 0), cmp.Or(r.DriverGPUs, DriverGPUsFolder), cmp.Or(r.KFD, KFDFolder))
	b.WriteString(script)
	return b.String()
}

// What the script lets each command print on the host before it cuts it
// off: the shell holds a command's output in a variable, so without these a
// host whose nvidia-smi prints without end (or a `yes` in its place) fills
// the host's memory first, and then fetch's. Each is several times what a
// real host prints (about 250 bytes a GPU, 70 bytes a process line, and ps
// lines at most psBudget/processes wide); a command that prints more fails
// the host with "the host sent too much: ... printed more than N bytes".
const (
	maxGPUsOutput = 64 << 10   // nvidia-smi --query-gpu: 64 GPUs take about 16 KiB (20 KiB with the health fields)
	maxAppsOutput = 512 << 10  // nvidia-smi --query-compute-apps: 4,096 processes take about 280 KiB
	maxPSOutput   = 1152 << 10 // ps: at most psBudget, and a newline a process
	maxStateFile  = 1 << 20    // idlemon's state file (head -c)
	// maxCgroupsOutput bounds the cgroups section: each process's
	// /proc/PID/cgroup (a few hundred bytes on a cgroup v2 host, about
	// 1 KiB on a v1 host in a container) up to 4,096 bytes, less where
	// there are more than 150 processes: maxCgroupsOutput / processes, less
	// 96 bytes for its record lines. A process whose file is longer is
	// unknown, not read in part.
	maxCgroupsOutput = 640 << 10
	// MaxSqueueOutput bounds squeue's answer: up to 1,024 jobs (the script
	// asks for no more), about 80 bytes each with a short account, and
	// their names.
	MaxSqueueOutput = 128 << 10
	// maxContainersOutput bounds docker or podman ps, which lists every
	// running container: about 130 bytes each, some 1,000 containers.
	maxContainersOutput = 128 << 10
	// psBudget is what the script asks of ps in all: each line is
	// psBudget / processes columns wide, between 256 and 4,096 (a line holds
	// pid, user and elapsed time too).
	psBudget = 1 << 20
	// maxHelpOutput bounds nvidia-smi --help-query-gpu, asked only where
	// the health fields were refused: 32 KiB on driver 590. It stays on
	// the host (the script picks the fields it lists), so it is not part
	// of MaxAnswer.
	maxHelpOutput = 128 << 10
	// MaxPmonOutput bounds nvidia-smi pmon -c 1 -s u: about 85 bytes a
	// process, some 3,000 processes. Past it, the host answers without
	// the processes' own utilization, and says so.
	MaxPmonOutput = 256 << 10
	// maxDriverGPUs bounds the names read from the driver's folder (as
	// nvsmi.MaxGPUs bounds nvidia-smi's list); each is a PCI address, a
	// name at most 255 bytes.
	maxDriverGPUs       = 64
	maxDriverGPUsOutput = maxDriverGPUs * 256
	// maxXIDLines and maxXIDLine bound the kernel_log section: of the
	// window's kernel messages that start with "NVRM: Xid (" (anchored
	// after the journal's or dmesg's stamp, as kernlog reads them, so that
	// no line a user can make counts against the bound), the newest of
	// each GPU and XID (awk, where the host has it: a burst of XID 13,
	// a line per SM, cannot push an XID 79 out), at most maxXIDLines, each
	// cut at maxXIDLine bytes (a real one is 100 to 300), on the host. MaxKernelLogOutput is that and room for what journalctl
	// or dmesg say on standard error; past it, the log is unreadable for
	// this poll, and the section says so.
	maxXIDLines        = 256
	maxXIDLine         = 512
	MaxKernelLogOutput = maxXIDLines*(maxXIDLine+1) + 8<<10
	// maxAMDSMIOutput bounds each of amd-smi static and metric: about 2
	// KiB a GPU as asked, 20 KiB where an older amd-smi is asked for
	// everything; maxROCmSMIOutput bounds rocm-smi's one answer (3 KiB a
	// GPU). Past them the host answers without its AMD GPUs, and says so.
	maxAMDSMIOutput  = 512 << 10
	maxROCmSMIOutput = 256 << 10
	// maxKFDLines bounds the kfd section: a line per GPU and per process
	// and GPU (a ROCm process has an entry on every GPU it can see), some
	// 40 bytes each.
	maxKFDLines  = 8192
	maxKFDOutput = maxKFDLines*48 + 4<<10
	// MaxAnswer is the most a host running the script can send: the
	// sections above and a few KiB of framing and host lines. fetch's own
	// per-host cap (remote.MaxOutput) is above it.
	MaxAnswer = maxGPUsOutput + maxAppsOutput + maxPSOutput + maxStateFile +
		maxCgroupsOutput + MaxSqueueOutput + maxContainersOutput +
		MaxPmonOutput + maxDriverGPUsOutput + MaxKernelLogOutput +
		max(2*maxAMDSMIOutput, maxROCmSMIOutput) + maxKFDOutput + 16<<10
)

// AMD's tools print their JSON indented, four spaces a level: unindent
// strips each line's leading blanks on the host (a JSON string holds no
// newline, so no blank it strips is in one), which halves what crosses
// the network and what fetch reads, and keeps the tool's exit status.
//
// The body is one function called with stdin from /dev/null: sh has read the
// whole function before it runs anything, so no command can swallow the rest
// of the script from stdin.
//
// run keeps at most LIMIT bytes of a command's output (head -c in the
// pipeline: the command dies of SIGPIPE once head has enough) and still
// learns its exit status, through file descriptor 3, in POSIX sh without
// pipefail or a temporary file. Its parameter expansions only ever strip a
// few bytes from the end of the output, which sh does in linear time.
//
// ps lists the shell itself ($$) beside the GPU processes, so a working ps
// always lists something and exits 0, even when every GPU process ended
// after nvidia-smi saw it; args comes last, so spaces in it cannot shift the
// other columns; COLUMNS caps each line (procps alone prints up to 128 KiB of
// arguments per process, a way to flood the answer), at 4,096 bytes for up
// to 256 processes and less beyond (see psBudget). The state file is read
// through head -c, under the same timeout: a state file grown huge, or one
// whose reads block, costs 1 MiB and T seconds at most.
//
// The sections that say who a process runs for come after ps, and no
// failure of theirs fails the host: in run's soft mode, output past the
// limit becomes exit 3 and a message in the section instead of the end of
// the script. cgroups reads each GPU process's /proc/PID/cgroup once (the
// pid list repeats a process on several GPUs) with read, no command per
// process, after a record line carrying the nonce; a line past the
// process's share, or a last line without its newline, is not printed, so
// no path is ever cut into a shorter one that parses. The Slurm job ids
// are picked out of that text with parameter expansion and case only,
// anchored where slurmstepd makes its folders (a user's own folder named
// job_42 asks nothing), and asked of ONE squeue, whose format starts every
// record with the nonce and puts the name last (after the partition and
// the account, which the billing reports need). docker or podman ps runs
// once, only where Request.Containers names it and a cgroup names a
// container.
//
// pmon takes about one sampling interval, so it starts first, in the
// background, and its framed section waits in a mktemp file (0600; fd 5
// is opened before the fork, so the file is never made again after the
// traps removed it) until the end, when the script waits for it and
// prints it where a GPU process exists. Its output, under timeout and head
// -c like any command's, goes to the file only: a session cut meanwhile
// leaves pmon to its timeout and the shell to die, traps run, at its next
// write. Without mktemp, pmon runs in line at the end. The health fields
// cost nothing on a driver that knows them all; one that refuses the
// query is asked --help-query-gpu once, and the fields it lists (a case
// match on the quoted name; of the two clock names, the first) are asked
// again. The kernel log's lines are filtered on the host (grep -F, tail
// -n, cut -b) and a journal is read only by an account its groups allow
// (id -Gn): for any other, journalctl would show that account's own
// messages without a word.
const scriptBody = `export LC_ALL=C
PATH="$PATH:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
if command -v timeout >/dev/null 2>&1; then TO="timeout -k 2 $T"; else TO=; fi
NL='
'
soft=
run() {
  lim=$1; what=$2; shift 2
  out=$( { rc=$( { { "$@" 2>&1; echo "$?" >&3; } | head -c "$((lim + 1))" >&4; } 3>&1 ); printf '\n%s' "$rc"; } 4>&1 )
  rc=${out##*"$NL"}
  out=${out%"$NL"*}
  if [ "${#out}" -gt "$lim" ] && [ -n "$soft" ]; then
    out="gpumon probe: $what printed more than $lim bytes (cut off on the host)" rc=3
  fi
  if [ "${#out}" -gt "$lim" ]; then
    echo "gpumon probe: the host sent too much: $what printed more than $lim bytes (cut off on the host)" >&2
    exit 3
  fi
  while :; do case $out in *"$NL") out=${out%"$NL"} ;; *) break ;; esac; done
}
cgroups() {
  seen=,
  IFS=,
  for pid in $pids; do
    case $seen in *",$pid,"*) continue ;; esac
    seen=$seen$pid,
    printf '%s:pid %s\n' "$N" "$pid"
    n=0
    while IFS= read -r l; do
      n=$((n + ${#l} + 1))
      if [ "$n" -gt "$cgl" ]; then printf '%s:cut\n' "$N"; break; fi
      printf '%s\n' "$l"
    done 2>/dev/null <"/proc/$pid/cgroup"
  done
  return 0
}
knownfields() {
  keep= clk=
  soft=1
  run @HELP@ "nvidia-smi --help-query-gpu" $TO nvidia-smi --help-query-gpu
  soft=
  [ "$rc" -eq 0 ] || return 0
  oifs=$IFS
  IFS=,
  for f in $HF; do
    case $out in *"\"$f\""*) ;; *) continue ;; esac
    case $f in
    clocks_event_reasons.active|clocks_throttle_reasons.active)
      [ -n "$clk" ] && continue
      clk=1 ;;
    esac
    keep=$keep${keep:+,}$f
  done
  IFS=$oifs
}
xidlines() {
  { kr=$( { { "$@"; echo "$?" >&3; } | grep -a -E '^([0-9]+(\.[0-9]+)? [^ ]+ kernel: |\[ *[0-9]+(\.[0-9]+)?\](\[ *[CT][0-9]+\])? )NVRM: Xid \(' | cut -b 1-@XIDLINE@ | newestxid | tail -n @XIDLINES@ >&4; } 3>&1 ); } 4>&1
  return "${kr:-1}"
}
newestxid() {
  if ! command -v awk >/dev/null 2>&1; then cat; return; fi
  awk '{ k = substr($0, index($0, "NVRM: Xid (")); if (match(k, /^NVRM: Xid \([^)]*\): *[0-9]+/)) k = substr(k, 1, RLENGTH)
    if (k in at) delete l[at[k]]
    at[k] = NR; l[NR] = $0 }
    END { for (n = 1; n <= NR; n++) if (n in l) print l[n] }'
}
journalreader() {
  [ "$(id -u 2>/dev/null)" = 0 ] && return 0
  for g in $(id -Gn 2>/dev/null); do
    case $g in systemd-journal|adm|wheel) return 0 ;; esac
  done
  return 1
}
since() {
  kept=
  while IFS= read -r l; do
    t=${l#"["}
    t=${t%%"]"*}
    t=${t%%.*}
    t=${t##*" "}
    case $t in ''|*[!0-9]*|??????????*) continue ;; esac
    [ "$t" -ge "$1" ] && kept=$kept$NL$l
  done <<EOF
$out
EOF
}
kernellog() {
  soft=1 why=
  if ! command -v journalctl >/dev/null 2>&1; then
    why="no journalctl"
  elif ! journalreader; then
    why="not in group systemd-journal or adm"
  else
    now=$(date +%s)
    run @KLOG@ journalctl xidlines $TO journalctl -k -q --no-pager -o short-unix --since="@$((now - KS))"
    out="source journal${out:+$NL$out}"
    [ "$rc" -eq 0 ] || why="journalctl failed (exit $rc)"
  fi
  if [ -n "$why" ]; then
    up=
    read -r up rest </proc/uptime 2>/dev/null
    up=${up%%.*}
    if command -v dmesg >/dev/null 2>&1; then
      run @KLOG@ dmesg xidlines $TO dmesg -k
    else
      out= rc=127
    fi
    if [ "$rc" -ne 0 ]; then
      l=${out%%"$NL"*}
      out="$why; ${l:-dmesg failed (exit $rc)}"
    elif [ -z "$up" ]; then
      out="$why; dmesg: no /proc/uptime to place its times" rc=1
    else
      since "$((up - KS))"
      out="source dmesg${NL}uptime $up$kept"
    fi
  fi
  soft=
  printf '%s begin kernel_log\n%s\n%s end kernel_log %d\n' "$N" "$out" "$N" "$rc"
}
unindent() {
  { kr=$( { { "$@" 2>&1; echo "$?" >&3; } | sed 's/^[[:space:]]*//' >&4; } 3>&1 ); } 4>&1
  return "${kr:-1}"
}
amdsmi() {
  am=$1
  run @AMDSMI@ "amd-smi $am" unindent $TO amd-smi "$@" --json
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; then
    case $out in
    *"usage:"*|*"unrecognized arguments"*|*"invalid choice"*) run @AMDSMI@ "amd-smi $am" unindent $TO amd-smi "$am" --json ;;
    esac
  fi
  printf '%s begin amd_smi_%s\n%s\n%s end amd_smi_%s %d\n' "$N" "$am" "$out" "$N" "$am" "$rc"
}
kfd() {
  if [ ! -d "$KF/topology/nodes" ]; then
    echo "$KF/topology/nodes is not a folder: is the amdgpu driver loaded?"
    return 1
  fi
  n=0 i=0
  while [ -d "$KF/topology/nodes/$i" ] && [ "$i" -lt @KFDLINES@ ]; do
    d=$KF/topology/nodes/$i i=$((i + 1))
    g= dom= loc=
    read -r g 2>/dev/null <"$d/gpu_id"
    case $g in ''|0|*[!0-9]*) continue ;; esac
    while read -r k v; do
      case $k in domain) dom=$v ;; location_id) loc=$v ;; esac
    done 2>/dev/null <"$d/properties"
    n=$((n + 1))
    printf 'node %s %s %s\n' "$g" "$dom" "$loc"
  done
  for d in "$KF"/proc/[0-9]*; do
    for f in "$d"/vram_*; do
      b=
      read -r b 2>/dev/null <"$f" || [ -n "$b" ] || continue
      case $b in ''|0) continue ;; esac
      n=$((n + 1))
      [ "$n" -gt @KFDLINES@ ] && { echo cut; return 0; }
      printf 'proc %s %s %s\n' "${d##*/}" "${f##*/vram_}" "$b"
    done
  done
  return 0
}
pmon() {
  run @PMON@ "nvidia-smi pmon" $TO nvidia-smi pmon -c 1 -s u
  printf '%s begin pmon\n%s\n%s end pmon %d\n' "$N" "$out" "$N" "$rc"
}
NV=$(command -v nvidia-smi 2>/dev/null)
AS=$(command -v amd-smi 2>/dev/null)
RS=$(command -v rocm-smi 2>/dev/null)
nvpart=
if [ -n "$NV" ] || [ -z "$AS$RS" ]; then nvpart=1; fi
rv=
[ -n "$AS$RS" ] && [ -r /opt/rocm/.info/version ] && read -r rv </opt/rocm/.info/version 2>/dev/null
printf '%s begin gpu_tools\n%s%s%s%s%s end gpu_tools 0\n' "$N" "${NV:+nvidia-smi $NV$NL}" "${AS:+amd-smi $AS$NL}" \
  "${RS:+rocm-smi $RS$NL}" "${rv:+rocm_version $rv$NL}" "$N"
pm= pmpid=
if [ "$PU" = 1 ] && [ -n "$NV" ]; then
  pm=$(mktemp 2>/dev/null) || pm=
  if [ -n "$pm" ] && { command exec 5>"$pm"; } 2>/dev/null; then
    trap 'rm -f "$pm"' EXIT
    trap 'rm -f "$pm"; exit 129' HUP
    trap 'rm -f "$pm"; exit 141' PIPE
    trap 'rm -f "$pm"; exit 143' TERM
    (soft=1; pmon >&5) >/dev/null 2>&1 &
    pmpid=$!
    exec 5>&-
  else
    [ -n "$pm" ] && rm -f "$pm"
    pm=
  fi
fi
pids= np=1 rc=0
if [ -n "$nvpart" ]; then
Q=$GF${HF:+,$HF}
run @GPUS@ "nvidia-smi --query-gpu" $TO nvidia-smi --query-gpu="$Q" --format=csv,nounits
if [ "$rc" -ne 0 ] && [ -n "$HF" ]; then
  case $out in
  *"is not a valid field to query"*)
    knownfields
    run @GPUS@ "nvidia-smi --query-gpu" $TO nvidia-smi --query-gpu="$GF${keep:+,$keep}" --format=csv,nounits ;;
  esac
fi
printf '%s begin gpus\n%s\n%s end gpus %d\n' "$N" "$out" "$N" "$rc"
fi
if [ -n "$nvpart" ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; then
  run @APPS@ "nvidia-smi --query-compute-apps" $TO nvidia-smi --query-compute-apps="$AF" --format=csv,nounits
  printf '%s begin apps\n%s\n%s end apps %d\n' "$N" "$out" "$N" "$rc"
  while IFS= read -r line; do
    pid=${line%%,*}
    case $pid in ''|*[!0-9]*) continue ;; esac
    pids="$pids${pids:+,}$pid"
    np=$((np + 1))
    [ "$np" -gt 4097 ] && break
  done <<EOF
$out
EOF
fi
if [ -n "$AS$RS" ]; then
  soft=1
  if [ -n "$AS" ]; then
    amdsmi @AMDSTATIC@
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && amdsmi @AMDMETRIC@
  else
    run @ROCMSMI@ rocm-smi unindent $TO rocm-smi @ROCMSMIARGS@ --json
    printf '%s begin rocm_smi\n%s\n%s end rocm_smi %d\n' "$N" "$out" "$N" "$rc"
  fi
  run @KFD@ "$KF" kfd
  soft=
  printf '%s begin kfd\n%s\n%s end kfd %d\n' "$N" "$out" "$N" "$rc"
  while read -r k pid rest; do
    [ "$k" = proc ] || continue
    case $pid in ''|*[!0-9]*) continue ;; esac
    case ,$pids, in *",$pid,"*) continue ;; esac
    pids="$pids${pids:+,}$pid"
    np=$((np + 1))
    [ "$np" -gt 4097 ] && break
  done <<EOF
$out
EOF
fi
if [ -n "$pids" ]; then
  cols=$((@PSBUDGET@ / np))
  [ "$cols" -gt 4096 ] && cols=4096
  [ "$cols" -lt 256 ] && cols=256
  run @PS@ ps env COLUMNS="$cols" ps -o pid=,user:32=,etimes=,args= -p "$$,$pids"
  printf '%s begin ps\n%s\n%s end ps %d\n' "$N" "$out" "$N" "$rc"
  soft=1
  cgl=$((@CGROUPS@ / np - 96))
  [ "$cgl" -gt 4096 ] && cgl=4096
  run @CGROUPS@ /proc/PID/cgroup cgroups
  printf '%s begin cgroups\n%s\n%s end cgroups %d\n' "$N" "$out" "$N" "$rc"
  jobs= nj=0 ctr=
  while IFS= read -r line; do
    p=${line#*:}
    p=${p#*:}
    case $p in
    /slurm/uid_*/job_[1-9]*|/slurm_*/uid_*/job_[1-9]*|/system.slice/slurmstepd.scope/job_[1-9]*|/system.slice/*_slurmstepd.scope/job_[1-9]*)
      j=${p#*/job_}
      j=${j%%[!0-9]*}
      case ,$jobs, in
      *",$j,"*) ;;
      *) if [ "$nj" -lt 1024 ]; then jobs=$jobs${jobs:+,}$j nj=$((nj + 1)); fi ;;
      esac ;;
    /docker/*|/system.slice/docker-*|/kubepods*) [ "$CT" = docker ] && ctr=1 ;;
    *libpod-*) [ "$CT" = podman ] && ctr=1 ;;
    esac
  done <<EOF
$out
EOF
  if [ -n "$jobs" ] && command -v squeue >/dev/null 2>&1; then
    run @SQUEUE@ squeue $TO squeue --noheader --jobs="$jobs" --format="$N:job %A %i %P account=%a %j"
    printf '%s begin squeue\n%s\n%s end squeue %d\n' "$N" "$out" "$N" "$rc"
  fi
  if [ -n "$ctr" ] && command -v "$CT" >/dev/null 2>&1; then
    run @CTRS@ "$CT ps" $TO "$CT" ps --no-trunc --format "$N:ctr {{.ID}} {{.Names}}"
    printf '%s begin %s\n%s\n%s end %s %d\n' "$N" "$CT" "$out" "$N" "$CT" "$rc"
  fi
  soft=
fi
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)
load=
read -r l1 l5 l15 rest </proc/loadavg 2>/dev/null && load="$l1 $l5 $l15"
mt= ma=
while read -r k v u; do
  case $k in MemTotal:) mt=$v ;; MemAvailable:) ma=$v ;; esac
done </proc/meminfo 2>/dev/null
printf '%s begin host\ncpus %s\nload %s\nmem_total_kib %s\nmem_available_kib %s\n%s end host 0\n' "$N" "$cpus" "$load" "$mt" "$ma" "$N"
if [ -n "$SF" ] && [ -f "$SF" ] && [ -r "$SF" ]; then
  out=$($TO head -c @STATE@ -- "$SF" 2>&1); rc=$?
  printf '%s begin idlemon\n%s\n%s end idlemon %d\n' "$N" "$out" "$N" "$rc"
fi
dg= drc=0 n=0
if [ -z "$nvpart" ]; then
  :
elif [ -d "$DG" ]; then
  for d in "$DG"/*; do
    [ -e "$d" ] || continue
    n=$((n + 1))
    [ "$n" -gt @DRIVERGPUS@ ] && break
    dg=$dg${dg:+$NL}${d##*/}
  done
else
  dg="$DG is not a folder: is the NVIDIA driver loaded?" drc=1
fi
[ -n "$nvpart" ] && printf '%s begin driver_gpus\n%s\n%s end driver_gpus %d\n' "$N" "$dg" "$N" "$drc"
[ "$KS" -gt 0 ] && [ -n "$nvpart" ] && kernellog
if [ -n "$pmpid" ]; then
  wait "$pmpid"
  [ -n "$pids" ] && cat "$pm"
  rm -f "$pm"
elif [ "$PU" = 1 ] && [ -n "$NV" ] && [ -n "$pids" ]; then
  soft=1
  pmon
  soft=
fi
printf '%s done\n' "$N"
}
gpumon_probe </dev/null
exit 0
`

// script is scriptBody with its limits filled in.
var script = strings.NewReplacer(
	"@GPUS@", strconv.Itoa(maxGPUsOutput), "@APPS@", strconv.Itoa(maxAppsOutput),
	"@PS@", strconv.Itoa(maxPSOutput), "@PSBUDGET@", strconv.Itoa(psBudget),
	"@STATE@", strconv.Itoa(maxStateFile), "@CGROUPS@", strconv.Itoa(maxCgroupsOutput),
	"@SQUEUE@", strconv.Itoa(MaxSqueueOutput), "@CTRS@", strconv.Itoa(maxContainersOutput),
	"@HELP@", strconv.Itoa(maxHelpOutput), "@PMON@", strconv.Itoa(MaxPmonOutput),
	"@DRIVERGPUS@", strconv.Itoa(maxDriverGPUs), "@KLOG@", strconv.Itoa(MaxKernelLogOutput),
	"@XIDLINES@", strconv.Itoa(maxXIDLines), "@XIDLINE@", strconv.Itoa(maxXIDLine),
	"@AMDSMI@", strconv.Itoa(maxAMDSMIOutput), "@ROCMSMI@", strconv.Itoa(maxROCmSMIOutput),
	"@KFD@", strconv.Itoa(maxKFDOutput), "@KFDLINES@", strconv.Itoa(maxKFDLines),
	"@AMDSTATIC@", "static "+strings.Join(AMDSMIStaticArgs, " "), "@AMDMETRIC@", "metric "+strings.Join(AMDSMIMetricArgs, " "),
	"@ROCMSMIARGS@", strings.Join(ROCmSMIArgs, " ")).Replace(scriptBody)

var scriptVar = regexp.MustCompile(`(?m)^(N|GF|AF|T|SF|CT|HF|PU|KS|DG|KF)=(?:'([^']*)'|(\d+))$`)

// ParseScript recovers the request from a script made by Request.Script, so a
// simulated host answers exactly the fields fetch asked for.
func ParseScript(script string) (Request, error) {
	var r Request
	seen := map[string]bool{}
	for _, m := range scriptVar.FindAllStringSubmatch(script, -1) {
		seen[m[1]] = true
		switch m[1] {
		case "N":
			r.Nonce = strings.TrimPrefix(m[2], markerPrefix)
		case "GF":
			r.GPUFields = strings.Split(m[2], ",")
		case "AF":
			r.AppFields = strings.Split(m[2], ",")
		case "T":
			r.NVTimeout, _ = strconv.Atoi(m[3])
		case "SF":
			r.StateFile = m[2]
		case "CT":
			r.Containers = m[2]
		case "HF":
			if m[2] != "" {
				r.HealthFields = strings.Split(m[2], ",")
			}
		case "PU":
			r.ProcessUtil = m[3] == "1"
		case "KS":
			r.KernelLogSince, _ = strconv.Atoi(m[3])
		case "DG":
			r.DriverGPUs = m[2]
		case "KF":
			r.KFD = m[2]
		}
	}
	if !seen["N"] || !seen["GF"] || !seen["AF"] {
		return r, fmt.Errorf("probe: not a gpumon probe script")
	}
	return r, nil
}

// A Writer frames sections the way the script does; simulated hosts use it.
type Writer struct {
	W     io.Writer
	Nonce string
}

// Section writes one framed section. body need not end in a newline.
func (w Writer) Section(name string, body []byte, exitCode int) error {
	_, err := fmt.Fprintf(w.W, "%s%s begin %s\n%s\n%s%s end %s %d\n",
		markerPrefix, w.Nonce, name, bytes.TrimRight(body, "\n"), markerPrefix, w.Nonce, name, exitCode)
	return err
}

// Done writes the closing line that says the output is complete.
func (w Writer) Done() error {
	_, err := fmt.Fprintf(w.W, "%s%s done\n", markerPrefix, w.Nonce)
	return err
}

// A Section is one command's output and exit status on the host.
type Section struct {
	Body     []byte
	ExitCode int
}

// Output is a host's parsed answer.
type Output struct {
	Sections map[string]Section
	// Complete is false when the output stopped before the closing line
	// (the connection dropped or the host killed the script).
	Complete bool
	// Stray holds text outside any section: a login banner or a shell's
	// complaint from the account's rc files. Kept for error messages.
	Stray []byte
}

// Has reports whether the section was printed in full.
func (o Output) Has(name string) bool {
	_, ok := o.Sections[name]
	return ok
}

// maxStray is how much text outside any section ParseOutput keeps: only
// its first line is ever shown.
const maxStray = 4 << 10

// ParseOutput splits a host's output into sections, trusting only marker
// lines that carry nonce. A section without its end line is dropped.
//
// The sections' bodies are slices of out, not copies (a line's "\r\n"
// becomes "\n" by a copy of that body only): parsing a host's answer
// costs little beyond the answer itself.
func ParseOutput(nonce string, out []byte) Output {
	o := Output{Sections: make(map[string]Section)}
	marker := []byte(markerPrefix + nonce + " ")
	var (
		cur       string
		open      bool
		bodyStart int
	)
	for l := range lines.All(out) {
		line := l.Text
		rest, isMarker := bytes.CutPrefix(line, marker)
		if !isMarker {
			if !open && len(o.Stray) < maxStray && len(bytes.TrimSpace(line)) > 0 {
				o.Stray = append(o.Stray, line[:min(len(line), maxStray-len(o.Stray))]...)
				o.Stray = append(o.Stray, '\n')
			}
			continue
		}
		f := strings.Fields(string(rest))
		switch {
		case len(f) == 2 && f[0] == "begin":
			cur, open, bodyStart = f[1], true, l.Next
		case len(f) == 3 && f[0] == "end" && open && f[1] == cur:
			code, err := strconv.Atoi(f[2])
			if err == nil {
				body := out[bodyStart:l.Start:l.Start]
				if bytes.IndexByte(body, '\r') >= 0 {
					body = bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n"))
				}
				o.Sections[cur] = Section{Body: body, ExitCode: code}
			}
			open = false
		case len(f) == 1 && f[0] == "done" && !open:
			o.Complete = true
		}
	}
	return o
}
