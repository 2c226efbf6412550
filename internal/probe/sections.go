package probe

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/lines"
)

// A PSProcess is one line of the ps section, which the script makes with
// `ps -o pid=,user:32=,etimes=,args=`.
type PSProcess struct {
	PID int
	// User is the account as ps printed it: the name, or the uid where the
	// name is longer than 32 characters.
	User string
	// ElapsedS is the seconds since the process started.
	ElapsedS int64
	// Command is the command line with its inner spacing kept. procps prints
	// a control character in it as '.' or ' ' and, under LC_ALL=C, a byte
	// outside ASCII as '?'; whatever is left that is not printable becomes
	// '?' here, so a command can never hold a newline.
	Command string
}

// A SkippedLine is a line of a section that could not be used.
type SkippedLine struct {
	Line   int // 1-based, in the section's body
	Reason string
}

// Bounds on what a ps section can make fetch hold. The script asks ps for
// its own shell and the GPU processes nvidia-smi listed (at most
// nvsmi.MaxProcesses), so a longer answer was not made by ps.
const (
	maxPSLines   = 8192
	maxSkipped   = 20   // unusable lines kept to be named; the rest are counted
	MaxCommand   = 4096 // bytes kept of a command line
	maxUser      = 64   // ps prints at most 32 (user:32), or the uid
	maxPSReasons = 40   // bytes of a bad field quoted in a reason
)

// PSReport is what ParsePS found: the processes by pid, and the lines it
// could not read.
type PSReport struct {
	Processes   map[int]PSProcess
	Skipped     []SkippedLine // the first maxSkipped
	MoreSkipped int
}

func (r *PSReport) skip(line int, reason string) {
	if len(r.Skipped) < maxSkipped {
		r.Skipped = append(r.Skipped, SkippedLine{Line: line, Reason: reason})
		return
	}
	r.MoreSkipped++
}

// ParsePS reads the ps section. The error says ps failed (it is missing,
// exited non-zero, or listed no process, not even the script's own shell):
// the users and commands of the GPU processes are then unknown, though the
// lines it did print are still returned.
//
// ps makes every line one process: it prints control characters in a
// command, newlines included, as something else. A pid listed twice would
// mean a ps that does not (a forged line after a newline), so neither line
// of such a pid is believed.
func ParsePS(sec Section) (PSReport, error) {
	rep := PSReport{Processes: map[int]PSProcess{}}
	seen := map[int]int{} // pid -> its first line
	read, n := 0, 0       // n: the line's number
	for l := range lines.All(sec.Body) {
		n++
		line := string(l.Text)
		if strings.TrimSpace(line) == "" {
			continue
		}
		if read++; read > maxPSLines {
			return PSReport{}, fmt.Errorf("ps printed more than %d lines, more than the script asked for", maxPSLines)
		}
		p, err := parsePSLine(line)
		if err != nil {
			rep.skip(n, err.Error())
			continue
		}
		if first, dup := seen[p.PID]; dup {
			delete(rep.Processes, p.PID)
			rep.skip(n, fmt.Sprintf("pid %d listed again (first on line %d): neither line is used", p.PID, first))
			continue
		}
		seen[p.PID] = n
		rep.Processes[p.PID] = p
	}
	switch {
	case sec.ExitCode != 0:
		return rep, withFirstLine(fmt.Sprintf("ps failed (exit %d)", sec.ExitCode), sec.Body)
	case len(seen) == 0:
		return rep, withFirstLine("ps listed no process", sec.Body)
	}
	return rep, nil
}

// parsePSLine reads " 4242 alice      7260 python train.py --lr 0.1".
// The command is the rest of the line after the third field.
func parsePSLine(line string) (PSProcess, error) {
	var f [3]string
	rest := line
	for i := range f {
		rest = strings.TrimLeft(rest, " \t")
		end := strings.IndexAny(rest, " \t")
		if end < 0 {
			end = len(rest)
		}
		f[i], rest = rest[:end], rest[end:]
	}
	pid, err := strconv.Atoi(f[0])
	if !digits(f[0]) || err != nil || pid <= 0 {
		return PSProcess{}, fmt.Errorf("%q is not a pid", hosttext.Clip(hosttext.Printable(f[0]), maxPSReasons))
	}
	if f[1] == "" {
		return PSProcess{}, errors.New("no user")
	}
	// A user name with a space in it would shift the columns: the elapsed
	// time is then not a number, and the line is not guessed at.
	elapsed, err := strconv.ParseInt(f[2], 10, 64)
	if !digits(f[2]) || err != nil {
		return PSProcess{}, fmt.Errorf("elapsed time %q is not a number of seconds", hosttext.Clip(hosttext.Printable(f[2]), maxPSReasons))
	}
	return PSProcess{
		PID:      pid,
		User:     hosttext.Clip(hosttext.Printable(f[1]), maxUser),
		ElapsedS: elapsed,
		Command:  hosttext.Clip(hosttext.Printable(strings.TrimSpace(rest)), MaxCommand),
	}, nil
}

// digits reports whether s is a non-empty run of ASCII digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// HostInfo is the host section: what the kernel says about the machine.
// Each field is -1 where the host did not say or said something unreadable.
type HostInfo struct {
	CPUs            int64   // online CPUs
	Load1           float64 // load average over one minute
	MemTotalKiB     int64
	MemAvailableKiB int64
}

// MemUsedKiB is memory in use (total less available), or -1 when unknown.
func (h HostInfo) MemUsedKiB() int64 {
	if h.MemTotalKiB < 0 || h.MemAvailableKiB < 0 || h.MemAvailableKiB > h.MemTotalKiB {
		return -1
	}
	return h.MemTotalKiB - h.MemAvailableKiB
}

// ParseHost reads the host section: "cpus N", "load L1 L5 L15",
// "mem_total_kib N" and "mem_available_kib N", one a line. Unknown keys are
// ignored, so a newer script may add some.
func ParseHost(body []byte) HostInfo {
	h := HostInfo{CPUs: -1, Load1: -1, MemTotalKiB: -1, MemAvailableKiB: -1}
	for line := range lines.All(body) {
		f := strings.Fields(string(line.Text))
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "cpus":
			h.CPUs = positiveInt(f[1])
		case "load":
			if v, err := strconv.ParseFloat(f[1], 64); err == nil && v >= 0 && v < 1e9 {
				h.Load1 = v
			}
		case "mem_total_kib":
			h.MemTotalKiB = positiveInt(f[1])
		case "mem_available_kib":
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && n >= 0 {
				h.MemAvailableKiB = n
			}
		}
	}
	return h
}

// positiveInt reads a count that cannot be zero: -1 when it is not one.
func positiveInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return -1
	}
	return n
}

// withFirstLine is msg, then ": " and the first non-blank line of out where
// there is one (ps's own complaint, e.g. "sh: 1: ps: not found").
func withFirstLine(msg string, out []byte) error {
	for line := range lines.All(out) {
		if l := strings.TrimSpace(string(line.Text)); l != "" {
			return errors.New(msg + ": " + hosttext.Clip(hosttext.Printable(l), 200))
		}
	}
	return errors.New(msg)
}

// Tools is the gpu_tools section: which GPU tools the host has. Paths are
// as `command -v` printed them, "" where the host lacks the tool.
type Tools struct {
	NVIDIASMI, AMDSMI, ROCmSMI string
	// ROCmVersion is /opt/rocm/.info/version ("6.2.4-..."), "" where the
	// host has none.
	ROCmVersion string
	// Listed is false for an answer without the section (a script older
	// than AMD support, or a simulated host that predates it): such a host
	// ran nvidia-smi only.
	Listed bool
}

// AMD reports whether the host ran an AMD tool.
func (t Tools) AMD() bool { return t.AMDSMI != "" || t.ROCmSMI != "" }

// maxToolField bounds each value of the gpu_tools section: a path, or a
// version.
const maxToolField = 256

// ParseTools reads the gpu_tools section ("nvidia-smi PATH", "amd-smi
// PATH", "rocm-smi PATH", "rocm_version V", one a line).
func ParseTools(o Output) Tools {
	sec, ok := o.Sections[SectionTools]
	if !ok {
		return Tools{}
	}
	t := Tools{Listed: true}
	for line := range lines.All(sec.Body) {
		k, v, _ := strings.Cut(strings.TrimSpace(string(line.Text)), " ")
		v = hosttext.Clip(hosttext.Printable(strings.TrimSpace(v)), maxToolField)
		if v == "" {
			continue
		}
		switch k {
		case "nvidia-smi":
			t.NVIDIASMI = v
		case "amd-smi":
			t.AMDSMI = v
		case "rocm-smi":
			t.ROCmSMI = v
		case "rocm_version":
			t.ROCmVersion = v
		}
	}
	return t
}
