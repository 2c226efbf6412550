// Package ignore is the one list of programs that hold a GPU without making
// it busy, and the one rule that tells whether a process is one of them.
// render (the page's "free") and idlemon (whether a GPU is idle) both use it,
// so they agree on which GPUs are free; each one's config can add names.
package ignore

import (
	"path"
	"slices"
	"strings"
)

// Default lists the programs that never make a GPU busy, whatever the config
// says:
//
//   - nvidia-smi opens every GPU's device while it runs (a monitor polling
//     it, fetch itself), without running work on any;
//   - nvidia-persistenced, the persistence daemon, keeps every GPU's device
//     open for good so the driver stays loaded;
//   - nv-hostengine, DCGM's host engine, and dcgm-exporter, its Prometheus
//     exporter, hold every GPU for good to read its counters;
//   - Xorg and Xwayland, a display server, hold the GPU that drives the
//     screen for as long as they run, with a few hundred MiB at most.
var Default = []string{"nvidia-smi", "nvidia-persistenced", "nv-hostengine", "dcgm-exporter", "Xorg", "Xwayland"}

// With returns Default followed by the names in extra that are not in it yet
// (a fresh slice). Empty names and repeats are left out.
func With(extra ...string) []string {
	out := make([]string, 0, len(Default)+len(extra))
	out = append(out, Default...)
	for _, n := range extra {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Process is what is known of a process: any field may be empty (render
// knows the command line only; idlemon knows all three).
type Process struct {
	Comm string // /proc/PID/comm: the kernel cuts it to 15 bytes
	Exe  string // the executable's path (/proc/PID/exe), " (deleted)" already removed
	Args string // the command line, arguments separated by spaces

	UID    int     // real uid, or Unknown
	MemMiB float64 // GPU memory it holds, or Unknown
}

// Whoever starts a process chooses its name: `exec -a nvidia-persistenced
// python train.py` matches the list. So a listed name is not enough where
// more is known: a process is ignored only if it could be one of these
// programs, run by root or a system account (they all are) and holding
// less GPU memory than any of them does.
const (
	// firstUserUID is the first uid of a person's account (SYS_UID_MAX is
	// 999 on Debian, Ubuntu and RHEL).
	firstUserUID = 1000
	// MaxMemMiB is more GPU memory than any listed program holds: the
	// daemons hold next to none, a display server a few hundred MiB.
	MaxMemMiB = 1024
)

// Unknown marks UID or MemMiB as not known.
const Unknown = -1

// Ignored is the one rule: p matches one of programs (Match), its real uid
// is root's or a system account's when known, and it holds under
// MaxMemMiB of GPU memory when that is known. render knows the command
// line and the memory, idlemon the names and the uid.
func Ignored(p Process, programs []string) bool {
	if p.UID != Unknown && p.UID >= firstUserUID {
		return false
	}
	if p.MemMiB != Unknown && p.MemMiB >= MaxMemMiB {
		return false
	}
	return Match(p, programs)
}

// commLen is the most bytes the kernel keeps of a process name
// (TASK_COMM_LEN less the terminating NUL).
const commLen = 15

// Match reports whether p is one of programs: a program name equals the base
// name of Exe, the base name of the first word of Args, the first word
// itself, the whole of Args, or Comm (a 15-byte Comm matches any program it
// begins: nvidia-persistenced shows as nvidia-persiste). A name that only
// appears inside a word or as a later argument does not match: "python
// Xorg.py" and "sh -c nvidia-smi" are not ignored.
func Match(p Process, programs []string) bool {
	var names []string
	if p.Exe != "" {
		names = append(names, path.Base(p.Exe))
	}
	if p.Args != "" {
		first := p.Args
		if i := strings.IndexAny(first, " \t"); i >= 0 {
			first = first[:i]
		}
		if first != "" {
			names = append(names, path.Base(first), first)
		}
		names = append(names, p.Args)
	}
	for _, prog := range programs {
		if prog == "" {
			continue
		}
		if p.Comm != "" && (p.Comm == prog || len(p.Comm) == commLen && strings.HasPrefix(prog, p.Comm)) {
			return true
		}
		if slices.Contains(names, prog) {
			return true
		}
	}
	return false
}
