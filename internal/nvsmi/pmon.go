package nvsmi

import (
	"fmt"
	"strings"

	"github.com/gpumon/gpumon/internal/hosttext"
)

// PmonSample is one process's line in `nvidia-smi pmon`: its share of the
// GPU's streaming multiprocessors over the sampling interval.
type PmonSample struct {
	GPU   int // the GPU's index, as --query-gpu's index
	PID   int
	SMPct Number // missing where pmon printed "-": no sample, MIG, or listed twice
}

// PmonReport is what ParsePmon found.
type PmonReport struct {
	Samples     []PmonSample
	Skipped     []LineError // the first MaxSkipped, in line order
	MoreSkipped int
}

// ParsePmon reads `nvidia-smi pmon -c 1 -s u` (stderr included): '#' header
// lines naming the columns (driver 590: `# gpu pid type sm mem enc dec jpg
// ofa command`; older drivers have fewer), then one line per process per
// GPU, "-" for a value pmon did not sample (an idle process reads "-", not 0;
// on MIG every sm reads "-") and a line of "-" for a GPU without processes.
//
// It reads ONE sample, what -c 1 prints. The command name ends each line and
// is chosen by whoever runs the process: it may hold spaces, and a name with
// a newline prints a line of its own making. So the name is never kept, the
// columns come from the first header only (a forged later header changes
// nothing), and a (gpu, pid) listed twice has its figure dropped, both
// lines' (a forged line cannot replace another process's figure). Output of
// -c N with N > 1 lists every process N times and so reads as all missing:
// ask for one sample.
//
// Failing means no header with gpu, pid and sm columns (pmon not supported,
// the driver down) or more than MaxProcesses processes.
func ParsePmon(out []byte) (PmonReport, error) {
	p := pmonParser{seen: map[[2]int]int{}}
	for n, line := range splitLines(out) {
		p.line(n+1, line)
		if p.err != nil {
			return PmonReport{}, p.err
		}
	}
	if p.cols == nil {
		msg := "no pmon header with gpu, pid and sm columns in the nvidia-smi output"
		if first := hosttext.FirstLine(string(out)); first != "" {
			msg += ": " + first
		}
		return PmonReport{}, fmt.Errorf("%s", msg)
	}
	return PmonReport{Samples: p.samples, Skipped: p.t.skipped, MoreSkipped: p.t.moreSkipped}, nil
}

// pmonColumns are the positions of the columns pmon's lines are read by.
type pmonColumns struct {
	gpu, pid, sm int
	width        int // columns in the header
	// need is how many fields a process line has at least: the columns
	// before the command (which may be empty).
	need int
}

type pmonParser struct {
	cols    *pmonColumns
	t       table // only its skipped-line bookkeeping
	samples []PmonSample
	seen    map[[2]int]int // (gpu, pid) -> index in samples
	err     error
}

func (p *pmonParser) line(n int, line string) {
	trimmed := strings.TrimSpace(line)
	if trimmed == "" {
		return
	}
	skip := func(format string, args ...any) {
		p.t.skip(LineError{Line: n, Text: hosttext.Clip(hosttext.Printable(trimmed), maxLineText), Reason: fmt.Sprintf(format, args...)})
	}
	if strings.HasPrefix(trimmed, "#") {
		if p.cols == nil {
			p.cols = pmonHeader(trimmed)
		}
		// pmon prints its header again every so many lines; units
		// ("# Idx # C/G % …") and repeats say nothing new.
		return
	}
	if p.cols == nil {
		skip("not a pmon line (before the header)")
		return
	}
	fields := strings.Fields(trimmed)
	if len(fields) < p.cols.need {
		skip("%d fields where the header has %d", len(fields), p.cols.width)
		return
	}
	gpu, ok := parseInt(fields[p.cols.gpu])
	if !ok {
		skip("gpu %q is not a GPU index", hosttext.Clip(fields[p.cols.gpu], 40))
		return
	}
	if fields[p.cols.pid] == "-" {
		return // a GPU without processes
	}
	pid, ok := parseInt(fields[p.cols.pid])
	if !ok {
		skip("pid %q is not a process id", hosttext.Clip(fields[p.cols.pid], 40))
		return
	}
	key := [2]int{gpu, pid}
	if i, dup := p.seen[key]; dup {
		p.samples[i].SMPct = Number{}
		skip("pid %d listed twice on GPU %d: its figure is not believed", pid, gpu)
		return
	}
	if len(p.samples) == MaxProcesses {
		p.err = fmt.Errorf("nvidia-smi pmon listed more than %d processes, more than fetch believes one host runs", MaxProcesses)
		return
	}
	p.seen[key] = len(p.samples)
	p.samples = append(p.samples, PmonSample{GPU: gpu, PID: pid, SMPct: parsePercent(fields[p.cols.sm])})
}

// pmonHeader reads "# gpu pid type sm …" (with -o DT, "#Date Time gpu …"),
// or returns nil for a line without the three columns read.
func pmonHeader(line string) *pmonColumns {
	names := strings.Fields(strings.TrimPrefix(line, "#"))
	c := pmonColumns{gpu: -1, pid: -1, sm: -1, width: len(names), need: len(names)}
	for i, name := range names {
		switch name {
		case "gpu":
			c.gpu = i
		case "pid":
			c.pid = i
		case "sm":
			c.sm = i
		case "command":
			// The command may hold spaces: only the columns before it can
			// be found by position.
			c.need = min(c.need, i)
		}
	}
	if c.gpu < 0 || c.pid < 0 || c.sm < 0 || max(c.gpu, c.pid, c.sm) >= c.need {
		return nil
	}
	return &c
}

// parsePercent reads a whole percentage, 0 to 100; "-" and anything else
// are missing.
func parsePercent(field string) Number {
	x := parseCount(field)
	if !x.Valid || x.Value > 100 {
		return Number{}
	}
	return x
}
