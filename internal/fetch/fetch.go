// Package fetch polls every GPU host at once, one SSH connection and one
// session each, and turns the answers into load_data.csv rows.
package fetch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/remote"
)

// LocalHost is the host name that runs the probe on this machine, no SSH.
const LocalHost = "local"

// Runner is what reaches a host; *remote.Client is the real one.
type Runner interface {
	Run(ctx context.Context, alias, command string, stdin []byte) ([]byte, error)
}

// Poller polls hosts.
type Poller struct {
	Runner      Runner
	Timeout     time.Duration // per host: dial, handshake and command
	Concurrency int
	Now         func() time.Time
	StateFile   string // idlemon's state file on the hosts, "" for none
}

// Result is one host's outcome.
type Result struct {
	Host   string
	Status hoststatus.Status
	Error  string // why it failed; for an ok host, warnings
	Rows   []loaddata.Row
	Took   time.Duration
}

// Poll polls every host, at most Concurrency at once, and returns the results
// in the order of hosts. It returns once every host has answered or reached
// its deadline; cancelling ctx ends them all early.
func (p *Poller) Poll(ctx context.Context, hosts []string) []Result {
	results := make([]Result, len(hosts))
	n := p.Concurrency
	if n < 1 || n > len(hosts) {
		n = len(hosts)
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = p.pollHost(ctx, hosts[i])
			}
		}()
	}
	for i := range hosts {
		work <- i
	}
	close(work)
	wg.Wait()
	return results
}

// nvTimeout leaves room for both nvidia-smi runs and the rest of the script
// inside the host's deadline, so a hung nvidia-smi is reported as such by the
// host's own `timeout` before fetch gives up on the connection.
func nvTimeout(d time.Duration) int {
	s := int(d.Seconds() * 0.35)
	if s < 1 {
		s = 1
	}
	return s
}

func (p *Poller) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Poller) pollHost(ctx context.Context, host string) Result {
	start := p.now()
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	req := probe.NewRequest(nvTimeout(p.Timeout))
	req.StateFile = p.StateFile
	script := []byte(req.Script())
	var out []byte
	var err error
	if host == LocalHost {
		out, err = remote.RunLocal(ctx, probe.Command, script)
	} else {
		out, err = p.Runner.Run(ctx, host, probe.Command, script)
	}
	res := Build(host, req.Nonce, out, err, p.now())
	res.Took = p.now().Sub(start)
	return res
}

// Build turns one host's raw answer (or failure) into rows. Exported for
// tests and the fuzz target: it must never panic, whatever the host sent.
func Build(host, nonce string, out []byte, runErr error, at time.Time) Result {
	ts := at.UTC().Format(loaddata.TimeFormat)
	fail := func(status hoststatus.Status, msg string) Result {
		return Result{Host: host, Status: status, Error: msg, Rows: []loaddata.Row{{
			Timestamp: ts, Host: host, HostStatus: status, HostError: msg,
		}}}
	}
	po := probe.ParseOutput(nonce, out)
	if runErr != nil {
		kind, msg := hoststatus.Error, runErr.Error()
		if re, ok := runErr.(*remote.Error); ok {
			kind = re.Status
		}
		// A host whose nvidia-smi hung answers with exit 124 from `timeout`;
		// say that rather than a bare connection timeout when we have it.
		if g, ok := po.Sections[probe.SectionGPUs]; ok {
			if he := nvsmi.Diagnose(g.Body, g.ExitCode); he != nil && he.Status == hoststatus.Timeout {
				return fail(hoststatus.Timeout, he.Message)
			}
		}
		return fail(kind, msg)
	}
	g, ok := po.Sections[probe.SectionGPUs]
	if !ok || !po.Complete {
		msg := "the output ended early (connection dropped or the script was killed)"
		if !ok && len(po.Stray) > 0 {
			msg = "unexpected output instead of the probe's: " + firstLine(string(po.Stray))
		}
		return fail(hoststatus.Error, msg)
	}
	if he := nvsmi.Diagnose(g.Body, g.ExitCode); he != nil {
		return fail(he.Status, he.Message)
	}
	gpus, err := nvsmi.ParseGPUs(g.Body)
	if err != nil {
		return fail(hoststatus.Error, err.Error())
	}
	var warnings []string
	for _, s := range gpus.Skipped {
		warnings = append(warnings, fmt.Sprintf("nvidia-smi --query-gpu line %d skipped: %s", s.Line, s.Reason))
	}

	var procs []nvsmi.Process
	if a, ok := po.Sections[probe.SectionApps]; ok {
		if he := nvsmi.Diagnose(a.Body, a.ExitCode); he != nil {
			warnings = append(warnings, "process list unavailable: "+he.Message)
		} else if rep, err := nvsmi.ParseProcesses(a.Body); err != nil {
			warnings = append(warnings, "process list unavailable: "+err.Error())
		} else {
			procs = rep.Processes
			for _, s := range rep.Skipped {
				warnings = append(warnings, fmt.Sprintf("nvidia-smi --query-compute-apps line %d skipped: %s", s.Line, s.Reason))
			}
		}
	} else {
		warnings = append(warnings, "process list unavailable")
	}
	ps := parsePS(po.Sections[probe.SectionPS].Body)
	hi := parseHostInfo(po.Sections[probe.SectionHost].Body)
	var jobPIDs map[int]bool
	if sec, ok := po.Sections[probe.SectionIdlemon]; ok {
		if st, err := idlestate.Decode(bytes.NewReader(sec.Body)); err != nil || sec.ExitCode != 0 {
			warnings = append(warnings, "idlemon state file unreadable: "+firstLine(orText(err, string(sec.Body))))
		} else {
			jobPIDs = st.JobPIDs()
		}
	}

	base := loaddata.Row{
		Timestamp: ts, Host: host, HostStatus: hoststatus.OK,
		CPUs: hi.cpus, Load1: hi.load1, HostMemUsedMiB: hi.memUsed, HostMemTotalMiB: hi.memTotal,
	}
	byUUID := map[string][]nvsmi.Process{}
	for _, pr := range procs {
		byUUID[pr.GPUUUID] = append(byUUID[pr.GPUUUID], pr)
	}
	sort.SliceStable(gpus.GPUs, func(i, j int) bool { return gpus.GPUs[i].Index < gpus.GPUs[j].Index })
	rows := make([]loaddata.Row, 0, len(gpus.GPUs)+len(procs)+len(gpus.Faults))
	known := map[string]bool{}
	for _, gpu := range gpus.GPUs {
		known[gpu.UUID] = true
		r := base
		r.GPUIndex = loaddata.IntOf(int64(gpu.Index))
		r.GPUUUID, r.GPUName, r.GPUBusID = gpu.UUID, gpu.Name, gpu.BusID
		r.GPUUtilPct = loaddata.Number(gpu.UtilGPU)
		r.MemUtilPct = loaddata.Number(gpu.UtilMem)
		r.MemUsedMiB = loaddata.Number(gpu.MemUsedMiB)
		r.MemTotalMiB = loaddata.Number(gpu.MemTotalMiB)
		r.TempC = loaddata.Number(gpu.TempC)
		r.PowerW = loaddata.Number(gpu.PowerW)
		r.PowerLimitW = loaddata.Number(gpu.PowerLimitW)
		r.FanPct = loaddata.Number(gpu.FanPct)
		ps4gpu := byUUID[gpu.UUID]
		if len(ps4gpu) == 0 {
			rows = append(rows, r)
			continue
		}
		for _, pr := range ps4gpu {
			rows = append(rows, withProcess(r, pr, ps, jobPIDs))
		}
	}
	for _, f := range gpus.Faults {
		r := base
		r.GPUBusID, r.GPUError = f.BusID, f.Message
		rows = append(rows, r)
	}
	for _, pr := range procs {
		if !known[pr.GPUUUID] {
			r := base
			r.GPUUUID, r.GPUError = pr.GPUUUID, "process on a GPU that --query-gpu did not list"
			rows = append(rows, withProcess(r, pr, ps, jobPIDs))
		}
	}
	if len(rows) == 0 {
		return fail(hoststatus.Driver, "nvidia-smi listed no GPU")
	}
	if len(warnings) > 0 {
		w := strings.Join(warnings, "; ")
		for i := range rows {
			rows[i].HostError = w
		}
	}
	return Result{Host: host, Status: hoststatus.OK, Error: strings.Join(warnings, "; "), Rows: rows}
}

func withProcess(r loaddata.Row, pr nvsmi.Process, ps map[int]psEntry, jobPIDs map[int]bool) loaddata.Row {
	r.PID = loaddata.IntOf(int64(pr.PID))
	r.Preemptible = loaddata.Flag(jobPIDs[pr.PID])
	r.Command = pr.Name
	r.ProcessMemMiB = loaddata.Number(pr.UsedMemMiB)
	if e, ok := ps[pr.PID]; ok {
		r.User = e.user
		r.ProcessElapsedS = e.elapsed
		if e.args != "" {
			r.Command = e.args
		}
	}
	return r
}

type psEntry struct {
	user    string
	elapsed loaddata.Int
	args    string
}

// parsePS reads `ps -o pid=,user:32=,etimes=,args=`. A pid that ended
// between nvidia-smi and ps is simply absent: its user stays empty.
func parsePS(body []byte) map[int]psEntry {
	m := map[int]psEntry{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid <= 0 {
			continue
		}
		e := psEntry{user: f[1]}
		if s, err := strconv.ParseInt(f[2], 10, 64); err == nil && s >= 0 {
			e.elapsed = loaddata.IntOf(s)
		}
		// args is the rest of the line, its inner spacing kept
		line := sc.Text()
		for i := 0; i < 3; i++ {
			line = strings.TrimLeft(line, " \t")
			j := strings.IndexAny(line, " \t")
			if j < 0 {
				line = ""
				break
			}
			line = line[j:]
		}
		e.args = strings.TrimSpace(line)
		m[pid] = e
	}
	return m
}

type hostInfo struct {
	cpus              loaddata.Int
	load1             loaddata.Number
	memUsed, memTotal loaddata.Number
}

func parseHostInfo(body []byte) hostInfo {
	var hi hostInfo
	var total, avail int64 = -1, -1
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "cpus":
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && n > 0 {
				hi.cpus = loaddata.IntOf(n)
			}
		case "load":
			if v, err := strconv.ParseFloat(f[1], 64); err == nil && v >= 0 {
				hi.load1 = loaddata.Num(v)
			}
		case "mem_total_kib":
			total, _ = strconv.ParseInt(f[1], 10, 64)
		case "mem_available_kib":
			avail, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if total > 0 {
		hi.memTotal = loaddata.Num(float64(total / 1024))
		if avail >= 0 && avail <= total {
			hi.memUsed = loaddata.Num(float64((total - avail) / 1024))
		}
	}
	return hi
}

// Rows flattens results into file order: hosts as listed.
func Rows(results []Result) []loaddata.Row {
	var n int
	for _, r := range results {
		n += len(r.Rows)
	}
	rows := make([]loaddata.Row, 0, n)
	for _, r := range results {
		rows = append(rows, r.Rows...)
	}
	return rows
}

// Summary is the one line for stderr:
// "40 hosts: 38 ok, 2 failed: gpu07 timeout, gpu12 hostkey".
func Summary(results []Result) string {
	var failed []string
	for _, r := range results {
		if r.Status != hoststatus.OK {
			failed = append(failed, r.Host+" "+string(r.Status))
		}
	}
	s := fmt.Sprintf("%d hosts: %d ok", len(results), len(results)-len(failed))
	if len(results) == 1 {
		s = fmt.Sprintf("1 host: %d ok", 1-len(failed))
	}
	if len(failed) == 0 {
		return s
	}
	const show = 10
	s += fmt.Sprintf(", %d failed: ", len(failed))
	if len(failed) > show {
		return s + strings.Join(failed[:show], ", ") + fmt.Sprintf(" and %d more", len(failed)-show)
	}
	return s + strings.Join(failed, ", ")
}

// orText is err's text, or s when err is nil.
func orText(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
