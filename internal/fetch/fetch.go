// Package fetch polls every GPU host at once, one SSH connection and one
// session each, and turns the answers into load_data.csv rows.
package fetch

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumon/gpumon/internal/attrib"
	"github.com/gpumon/gpumon/internal/bytesize"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/kernlog"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/nvsmi"
	"github.com/gpumon/gpumon/internal/probe"
	"github.com/gpumon/gpumon/internal/remote"
)

// localHost is the host name that runs the probe on this machine, no SSH.
const localHost = "local"

// Runner is what reaches a host; *remote.Client is the real one.
type Runner interface {
	Run(ctx context.Context, alias, command string, stdin []byte) ([]byte, error)
}

// MaxRowBytes bounds the rows of one run, all hosts together, in bytes of
// load_data.csv. A fleet of 10,000 eight-GPU hosts writes some 60 MB; render
// reads at most 512 MiB.
const MaxRowBytes = 256 << 20

// Poller polls hosts.
type Poller struct {
	Runner      Runner
	Timeout     time.Duration // per host: dial, handshake and command
	Concurrency int
	Now         func() time.Time
	StateFile   string // idlemon's state file on the hosts, "" for none
	// Containers is the engine asked for container names
	// (probe.Request.Containers): "docker", "podman" or "" for none.
	Containers string
	// ProcessUtil asks each host for its processes' own utilization
	// (nvidia-smi pmon, about a second beside the probe's other commands).
	ProcessUtil bool
	// KernelLogWindow asks each host for the XIDs its kernel logged this
	// long ago or later (0: none): the interval between polls and the
	// timeout, so that consecutive polls overlap and miss nothing.
	KernelLogWindow time.Duration
	// MaxRowBytes bounds the run's rows (0: the package's MaxRowBytes): a
	// host whose rows would go past it is failed instead of kept.
	MaxRowBytes int64
	// RecordsOnly keeps each host's rows as CSV records (Result.Records)
	// instead of Rows, for a run that only writes them: at 10,000 hosts,
	// 60 MB of Rows less for the collector to trace while the run goes on.
	RecordsOnly bool

	rowBytes atomic.Int64 // kept so far in this Poll

	// driverGPUs stands in for the driver's GPU folder on the hosts
	// (probe.Request.DriverGPUs) in tests: "" for the real one.
	driverGPUs string
	// kfd stands in for the AMD driver's KFD folder (probe.Request.KFD)
	// in tests: "" for the real one.
	kfd string
}

// Result is one host's outcome.
type Result struct {
	Host   string
	Status hoststatus.Status
	Error  string // why it failed; for an ok host, warnings
	Rows   []loaddata.Row
	// Records are Rows as CSV records (loaddata.Records) where the Poller
	// keeps only those; Rows is then nil.
	Records []byte
	Took    time.Duration
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
	p.rowBytes.Store(0)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = p.recordsOnly(p.keep(p.pollHost(ctx, hosts[i])))
			}
		}()
	}
	// Once ctx is done, the hosts not yet started are not started: each
	// would only fail at once, and with a long list that alone takes time.
	next := 0
feed:
	for ; next < len(hosts) && ctx.Err() == nil; next++ {
		select {
		case work <- next:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	for i := next; i < len(hosts); i++ {
		results[i] = failed(hosts[i], p.now().UTC().Format(loaddata.TimeFormat),
			&nvsmi.HostError{Status: hoststatus.Timeout, Message: "not polled: the run was stopped (" + context.Cause(ctx).Error() + ")"})
	}
	return results
}

// recordsOnly makes res's rows records, where the Poller keeps only those.
func (p *Poller) recordsOnly(res Result) Result {
	if !p.RecordsOnly || len(res.Rows) == 0 {
		return res
	}
	if rec, err := loaddata.Records(res.Rows); err == nil {
		res.Records, res.Rows = rec, nil
	}
	return res
}

// WriteResults replaces path with the results' rows, whether kept as Rows
// or as Records.
func WriteResults(path string, results []Result) error {
	parts := make([][]byte, len(results))
	for i, r := range results {
		parts[i] = r.Records
		if r.Records == nil && len(r.Rows) > 0 {
			rec, err := loaddata.Records(r.Rows)
			if err != nil {
				return err
			}
			parts[i] = rec
		}
	}
	return loaddata.WriteFileRecords(path, parts)
}

// keep counts res's rows against the run's bound, and fails the host in
// their place where they would go past it: one host cannot make the file
// too big to write or to read, nor fetch's memory grow with it.
func (p *Poller) keep(res Result) Result {
	limit := p.MaxRowBytes
	if limit <= 0 {
		limit = MaxRowBytes
	}
	var size int64
	for i := range res.Rows {
		size += rowBytes(&res.Rows[i])
	}
	if p.rowBytes.Add(size) <= limit || len(res.Rows) == 1 {
		return res
	}
	p.rowBytes.Add(-size)
	msg := fmt.Sprintf("its %d rows (%s) would take load_data.csv past %s; fetch keeps the hosts that answered first",
		len(res.Rows), bytesize.About(size), bytesize.Exact(limit))
	f := failed(res.Host, res.Rows[0].Timestamp, &nvsmi.HostError{Status: hoststatus.Error, Message: msg})
	p.rowBytes.Add(rowBytes(&f.Rows[0]))
	f.Took = res.Took
	return f
}

// rowBytes is about what r takes in load_data.csv: its text cells, and room
// for the numbers and separators.
func rowBytes(r *loaddata.Row) int64 {
	return int64(len(r.Timestamp)+len(r.Host)+len(r.HostError)+len(r.GPUUUID)+len(r.GPUName)+
		len(r.GPUBusID)+len(r.GPUError)+len(r.User)+len(r.Command)+len(r.SlurmJob)+len(r.SlurmJobName)+
		len(r.SlurmPartition)+len(r.SlurmAccount)+len(r.Container)+len(r.ContainerName)+len(r.Pod)+
		len(r.ECCMode)+len(r.ClockEvents)+len(r.XIDs)+len(r.RecoveryAction)+len(r.KernelLog)) + 200
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
	req.Containers = p.Containers
	req.HealthFields = nvsmi.HealthFields
	req.ProcessUtil = p.ProcessUtil
	req.KernelLogSince = int((p.KernelLogWindow + time.Second - 1) / time.Second)
	if p.driverGPUs != "" {
		req.DriverGPUs = p.driverGPUs
	}
	if p.kfd != "" {
		req.KFD = p.kfd
	}
	script := []byte(req.Script())
	var out []byte
	var err error
	if host == localHost {
		out, err = remote.RunLocal(ctx, probe.Command, script)
	} else {
		out, err = p.Runner.Run(ctx, host, probe.Command, script)
	}
	res := buildResult(host, req.Nonce, out, err, p.now())
	if !p.RecordsOnly {
		detach(res.Rows)
	}
	res.Took = p.now().Sub(start)
	return res
}

// detach copies the rows' text into one string of their own. Parsed, the
// cells are slices of the host's whole answer, which would otherwise stay
// in memory as long as the rows: at 10,000 hosts, a run held every answer
// (several KiB each) until the CSV was written, and the collector, near
// fetch's memory limit, ran without pause.
func detach(rows []loaddata.Row) {
	fields := func(r *loaddata.Row) [20]*string {
		return [...]*string{&r.Timestamp, &r.Host, &r.HostError, &r.GPUUUID, &r.GPUName, &r.GPUBusID, &r.GPUError,
			&r.User, &r.Command, &r.SlurmJob, &r.SlurmJobName, &r.SlurmPartition, &r.SlurmAccount, &r.Container, &r.ContainerName, &r.Pod,
			&r.ECCMode, &r.ClockEvents, &r.XIDs, &r.KernelLog}
	}
	at := map[string]int{} // each distinct text once, at its offset
	var b strings.Builder
	for i := range rows {
		for _, f := range fields(&rows[i]) {
			if _, ok := at[*f]; !ok && *f != "" {
				at[*f] = b.Len()
				b.WriteString(*f)
			}
		}
	}
	all := b.String()
	for i := range rows {
		for _, f := range fields(&rows[i]) {
			if *f != "" {
				off := at[*f]
				*f = all[off : off+len(*f)]
			}
		}
	}
}

// buildResult turns one host's raw answer (or failure) into rows. It must
// never panic, whatever the host sent (its fuzz target holds it to that).
func buildResult(host, nonce string, out []byte, runErr error, at time.Time) Result {
	ts := at.UTC().Format(loaddata.TimeFormat)
	po := probe.ParseOutput(nonce, out)
	if f := hostFailure(po, runErr); f != nil {
		return failed(host, ts, f)
	}
	var w warnings
	tools := probe.ParseTools(po)
	nv, nvErr := readNVIDIA(po, tools, &w)
	var amd amdPart
	var amdErr *nvsmi.HostError
	if tools.AMD() {
		amd, amdErr = readAMD(po, tools, nextIndex(nv.gpus.GPUs), &w)
	}
	if f := vendorFailure(tools, nv.ran, nvErr, amdErr, &w); f != nil {
		return failed(host, ts, f)
	}
	base := hostRow(ts, host, probe.ParseHost(po.Sections[probe.SectionHost].Body))
	var events []kernlog.Event
	base.KernelLog, events = readKernelLog(po)
	d := processDetails{ps: readPS(po, len(nv.procs)+len(amd.procs) > 0, &w), attrib: readAttribution(po, nonce, &w),
		jobPIDs: readIdlemon(po, &w), smPct: readPmon(po, nv.gpus.GPUs, &w)}
	var rows []loaddata.Row
	if nvErr == nil && nv.ran {
		rows = gpuRows(base, nv.gpus, nv.procs, d, nvidiaSource)
		rows = append(rows, lostGPURows(base, nv.gpus, readDriverGPUs(po), &w)...)
		markXIDs(rows, events, &w)
	}
	if room := max(nvsmi.MaxProcesses-len(nv.procs), 0); len(amd.procs) > room {
		w.add("KFD lists %d GPU processes, more than a host runs; the first %d are kept", len(amd.procs), room)
		amd.procs = amd.procs[:room]
	}
	if amdErr == nil && len(amd.gpus) > 0 {
		d.smPct = nil // pmon is NVIDIA's
		rows = append(rows, gpuRows(base, nvsmi.GPUReport{GPUs: amd.gpus}, amd.procs, d, amdSource(tools))...)
	}
	if len(rows) == 0 {
		return failed(host, ts, &nvsmi.HostError{Status: hoststatus.Driver, Message: "nvidia-smi listed no GPU"})
	}
	msg := w.String()
	for i := range rows {
		rows[i].HostError = msg
	}
	return Result{Host: host, Status: hoststatus.OK, Error: msg, Rows: rows}
}

// hostRow is the cells every row of an ok host shares.
func hostRow(ts, host string, hi probe.HostInfo) loaddata.Row {
	return loaddata.Row{Timestamp: ts, Host: host, HostStatus: hoststatus.OK,
		CPUs: intOrMissing(hi.CPUs), Load1: numOrMissing(hi.Load1),
		HostMemUsedMiB: mibOrMissing(hi.MemUsedKiB()), HostMemTotalMiB: mibOrMissing(hi.MemTotalKiB)}
}

// failed is a host without usable GPU data: one row that says why.
func failed(host, ts string, why *nvsmi.HostError) Result {
	msg := hosttext.Clip(why.Message, maxHostError)
	return Result{Host: host, Status: why.Status, Error: msg, Rows: []loaddata.Row{{
		Timestamp: ts, Host: host, HostStatus: why.Status, HostError: msg,
	}}}
}

// hostFailure says why the host's answer holds no usable GPU list, or nil
// when it does.
func hostFailure(po probe.Output, runErr error) *nvsmi.HostError {
	g, hasGPUs := po.Sections[probe.SectionGPUs]
	if runErr != nil {
		// A host whose nvidia-smi hung answers with exit 124 from `timeout`;
		// say that rather than a bare connection timeout when we have it.
		if hasGPUs {
			if he := nvsmi.Diagnose(g.Body, g.ExitCode); he != nil && he.Status == hoststatus.Timeout {
				return he
			}
		}
		status := hoststatus.Error
		if re, ok := runErr.(*remote.Error); ok {
			status = re.Status
		}
		return &nvsmi.HostError{Status: status, Message: runErr.Error()}
	}
	hasAny := hasGPUs || po.Has(probe.SectionTools)
	if !hasAny || !po.Complete {
		msg := "the output ended early (connection dropped or the script was killed)"
		if !hasAny && len(po.Stray) > 0 {
			msg = "unexpected output instead of the probe's: " + hosttext.FirstLine(string(po.Stray))
		}
		return &nvsmi.HostError{Status: hoststatus.Error, Message: msg}
	}
	return nil
}

// Bounds on host_error, which every row of a host repeats: a host that
// goes wrong in many ways is named for the first few.
const (
	maxHostError = 4096 // bytes of a failed host's message
	maxWarnings  = 8    // warnings of an ok host named; the rest are counted
	maxWarning   = 400  // bytes of one warning
	maxListed    = 5    // GPUs named in one warning
)

// warnings are what went wrong on a host that still answered: they go into
// every row's host_error.
type warnings struct {
	list []string
	more int
}

func (w *warnings) add(format string, args ...any) {
	if len(w.list) == maxWarnings {
		w.more++
		return
	}
	w.list = append(w.list, hosttext.Clip(fmt.Sprintf(format, args...), maxWarning))
}

func (w *warnings) String() string {
	s := strings.Join(w.list, "; ")
	if w.more > 0 {
		s += fmt.Sprintf("; and %d more warnings", w.more)
	}
	return s
}

func (w *warnings) skipped(what string, lines []nvsmi.LineError, more int) {
	for _, s := range lines {
		w.add("%s line %d skipped: %s", what, s.Line, s.Reason)
	}
	if more > 0 {
		w.add("%s: %d more lines skipped", what, more)
	}
}

// listed is at most maxListed of names, then how many more.
func listed(names []string) string {
	if len(names) <= maxListed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxListed], ", "), len(names)-maxListed)
}

// duplicateIndexes reports GPUs that nvidia-smi gave the same index: their
// rows stay apart by gpu_uuid and gpu_bus_id, but anything that goes by
// host and index alone would take them for one GPU.
func (w *warnings) duplicateIndexes(gpus []nvsmi.GPU) {
	byIndex := map[int][]string{}
	var order []int
	for _, g := range gpus {
		if len(byIndex[g.Index]) == 0 {
			order = append(order, g.Index)
		}
		byIndex[g.Index] = append(byIndex[g.Index], orUnknown(g.UUID))
	}
	for _, i := range order {
		if uuids := byIndex[i]; len(uuids) > 1 {
			w.add("nvidia-smi gave GPU index %d to %d GPUs (%s); their rows differ by gpu_uuid", i, len(uuids), listed(uuids))
		}
	}
}

// sharedUUIDs reports GPUs that nvidia-smi gave the same UUID. A process
// names its GPU by UUID only, so it cannot say which of them it is on: it
// is shown on the first (see gpuRows), never on each, which would let one
// host multiply its rows.
func (w *warnings) sharedUUIDs(gpus []nvsmi.GPU) {
	byUUID := map[string][]string{}
	var order []string
	for _, g := range gpus {
		if g.UUID == "" {
			continue
		}
		if len(byUUID[g.UUID]) == 0 {
			order = append(order, g.UUID)
		}
		byUUID[g.UUID] = append(byUUID[g.UUID], fmt.Sprint(g.Index))
	}
	for _, u := range order {
		if idx := byUUID[u]; len(idx) > 1 {
			w.add("nvidia-smi gave UUID %s to %d GPUs (indexes %s); its processes are shown on the first", u, len(idx), listed(idx))
		}
	}
}

func orUnknown(uuid string) string {
	if uuid == "" {
		return "no uuid"
	}
	return uuid
}

// readApps reads nvidia-smi's process list: which processes exist, on which
// GPU, with how much memory. Nothing in it is chosen by a user (see
// probe.AppFields): a process's name and command come from ps.
func readApps(po probe.Output, w *warnings) []nvsmi.Process {
	a, ok := po.Sections[probe.SectionApps]
	if !ok {
		w.add("process list unavailable")
		return nil
	}
	if he := nvsmi.Diagnose(a.Body, a.ExitCode); he != nil {
		w.add("process list unavailable: %s", he.Message)
		return nil
	}
	rep, err := nvsmi.ParseProcesses(a.Body)
	if err != nil {
		w.add("process list unavailable: %s", err.Error())
		return nil
	}
	w.skipped("nvidia-smi --query-compute-apps", rep.Skipped, rep.MoreSkipped)
	return rep.Processes
}

// readPS reads who runs each GPU process and its command. The script runs
// ps only when nvidia-smi listed a process.
func readPS(po probe.Output, hasProcs bool, w *warnings) map[int]probe.PSProcess {
	sec, ok := po.Sections[probe.SectionPS]
	if !ok {
		if hasProcs {
			w.add("ps did not run; users and commands unknown")
		}
		return nil
	}
	rep, err := probe.ParsePS(sec)
	if err != nil {
		// its lines are then its complaint, already in the message
		w.add("%s; users and commands unknown", err.Error())
		return rep.Processes
	}
	for _, s := range rep.Skipped {
		w.add("ps line %d skipped: %s", s.Line, s.Reason)
	}
	if rep.MoreSkipped > 0 {
		w.add("ps: %d more lines skipped", rep.MoreSkipped)
	}
	return rep.Processes
}

// readIdlemon reads which pids are idlemon's idle-time job, where the host
// has its state file.
func readIdlemon(po probe.Output, w *warnings) map[int]bool {
	sec, ok := po.Sections[probe.SectionIdlemon]
	if !ok {
		return nil
	}
	st, err := idlestate.Decode(bytes.NewReader(sec.Body))
	if err != nil || sec.ExitCode != 0 {
		w.add("idlemon state file unreadable: %s", hosttext.FirstLine(orText(err, string(sec.Body))))
		return nil
	}
	return st.JobPIDs()
}

// processDetails is what a process row takes from outside nvidia-smi.
type processDetails struct {
	ps      map[int]probe.PSProcess
	attrib  map[int]attrib.Attribution
	jobPIDs map[int]bool
	smPct   map[pmonKey]loaddata.Number // by GPU index and pid
}

// A gpuSource is whose tool listed a host's GPUs, and how its processes
// name their GPU: nvidia-smi's by UUID, KFD's by amdKey, or by PCI
// address where the tool did not list the GPU.
type gpuSource struct {
	vendor string
	tool   string // as gpu_error names it
	amd    bool
}

var nvidiaSource = gpuSource{vendor: loaddata.VendorNVIDIA, tool: "--query-gpu"}

func amdSource(t probe.Tools) gpuSource {
	tool := "amd-smi"
	if t.AMDSMI == "" {
		tool = "rocm-smi"
	}
	return gpuSource{vendor: loaddata.VendorAMD, tool: tool, amd: true}
}

// key is what src's processes name gpu by.
func (src gpuSource) key(gpu nvsmi.GPU) string {
	if src.amd {
		return amdKey(gpu.Index)
	}
	return gpu.UUID
}

// gpuRows is one row per GPU and process on it (one row for an idle GPU),
// in index order; then a row per GPU nvidia-smi could not read; then the
// processes on GPUs the tool did not list.
func gpuRows(base loaddata.Row, gpus nvsmi.GPUReport, procs []nvsmi.Process, d processDetails, src gpuSource) []loaddata.Row {
	byUUID := map[string][]nvsmi.Process{}
	for _, pr := range procs {
		byUUID[pr.GPUUUID] = append(byUUID[pr.GPUUUID], pr)
	}
	sort.SliceStable(gpus.GPUs, func(i, j int) bool { return gpus.GPUs[i].Index < gpus.GPUs[j].Index })
	rows := make([]loaddata.Row, 0, len(gpus.GPUs)+len(procs)+len(gpus.Faults))
	listed := map[string]bool{}
	base.GPUVendor = src.vendor
	for _, gpu := range gpus.GPUs {
		r := gpuRow(base, gpu)
		k := src.key(gpu)
		var on []nvsmi.Process
		if !listed[k] {
			on = byUUID[k] // a second GPU with this key shows none
		}
		listed[k] = true
		if len(on) == 0 {
			rows = append(rows, r)
		}
		for _, pr := range on {
			rows = append(rows, d.processRow(r, pr))
		}
	}
	for _, f := range gpus.Faults {
		r := base
		r.GPUBusID, r.GPUError = f.BusID, f.Message
		rows = append(rows, r)
	}
	for _, pr := range procs {
		if !listed[pr.GPUUUID] {
			r := base
			if src.amd {
				r.GPUBusID = pr.GPUUUID
			} else {
				r.GPUUUID = pr.GPUUUID
			}
			r.GPUError = "process on a GPU that " + src.tool + " did not list"
			rows = append(rows, d.processRow(r, pr))
		}
	}
	return rows
}

func gpuRow(base loaddata.Row, gpu nvsmi.GPU) loaddata.Row {
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
	healthCells(&r, gpu)
	return r
}

// processRow is r with pr's cells. User and command come from ps only: a
// process that ended before ps ran keeps its pid and memory, and empty
// user and command cells.
func (d processDetails) processRow(r loaddata.Row, pr nvsmi.Process) loaddata.Row {
	r.PID = loaddata.IntOf(int64(pr.PID))
	r.Preemptible = loaddata.Flag(d.jobPIDs[pr.PID])
	r.ProcessMemMiB = loaddata.Number(pr.UsedMemMiB)
	if r.GPUIndex.Valid {
		r.ProcessSMPct = d.smPct[pmonKey{int(r.GPUIndex.Value), pr.PID}]
	}
	if p, ok := d.ps[pr.PID]; ok {
		r.User, r.Command = p.User, p.Command
		r.ProcessElapsedS = loaddata.IntOf(p.ElapsedS)
	}
	if a, ok := d.attrib[pr.PID]; ok {
		r.SlurmJob, r.SlurmJobName, r.SlurmPartition, r.SlurmAccount = a.SlurmJob, a.SlurmJobName, a.SlurmPartition, a.SlurmAccount
		r.Container, r.ContainerName, r.Pod = a.Container, a.ContainerName, a.Pod
	}
	return r
}

// intOrMissing, numOrMissing and mibOrMissing turn probe's -1 for "unknown"
// into an empty cell.
func intOrMissing(n int64) loaddata.Int {
	if n < 0 {
		return loaddata.Int{}
	}
	return loaddata.IntOf(n)
}

func numOrMissing(v float64) loaddata.Number {
	if v < 0 {
		return loaddata.Number{}
	}
	return loaddata.Num(v)
}

func mibOrMissing(kib int64) loaddata.Number {
	if kib < 0 {
		return loaddata.Number{}
	}
	return loaddata.Num(float64(kib / 1024))
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
