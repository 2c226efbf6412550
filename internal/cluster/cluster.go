// Package cluster turns load_data.csv's rows into hosts and GPUs, and says
// which GPUs are free, busy, reserved or failed.
//
// A GPU is free when no process holds it and it uses less memory than a
// threshold. Processes in the ignore list (ignore.Default: the persistence
// daemon, DCGM, a display server, nvidia-smi; plus the config's names) and
// processes of idlemon's idle-time job (preemptible) do not hold a GPU, and
// their memory is not counted. Utilization is never a reason: an idle L40S
// has reported 100 % with no process. A free GPU under a current reservation
// is reserved; a busy GPU stays busy and only shows the reservation. A GPU
// of a host that failed, or one the driver could not read (gpu_error), is
// failed.
//
// Each GPU's health readings are assessed by the [health] policy
// (Options.Health, package health): a failed Health makes the GPU failed
// (offered to nobody, its findings the reason); a degraded one leaves it
// free, busy or reserved, and is counted apart (Degraded).
//
// GPUs of every vendor are GPUs alike: an AMD GPU is classified, counted
// and named as an NVIDIA one is (Vendor says whose it is), and a reading
// its tool does not give is not known, as under MIG.
package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/ignore"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
)

// States of a GPU.
const (
	Free     = "free"
	Busy     = "busy"
	Reserved = "reserved"
	Failed   = "failed"
)

// States lists the states in display order.
var States = []string{Free, Busy, Reserved, Failed}

// Notes a GPU may carry.
const (
	noteIdleJob    = "idle-time job running"
	noteMemNoProc  = "memory in use but no process visible (another container?)"
	noteMemUnknown = "memory use unknown"
)

// Options decide the classification.
type Options struct {
	FreeMemMiB   float64  // a GPU using this much (not counting ignored processes) is busy
	Ignore       []string // programs that never hold a GPU, matched by ignore.Match on the command line
	Reservations []reservations.Reservation
	HostNames    map[string]string // lower-case host -> display name
	GPUNames     map[string]string // lower-case full name -> short name
	Now          time.Time         // for reservations' end dates
	Health       health.Policy     // [health]: what makes a GPU failed or degraded
}

// Cluster is everything one CSV says.
type Cluster struct {
	Hosts    []*Host
	Vendors  []string  // the vendors of its GPUs (GPU.Vendor), sorted
	DataTime time.Time // the newest timestamp in the CSV; zero if none parsed
	BadTime  string    // the first timestamp that did not parse, with its host ("" if none)
	Users    []*User
	Models   []*Model
	Count    map[string]int // GPUs per state
	GPUs     int            // GPUs known (down hosts' GPUs are not)
	Degraded int            // GPUs whose health is degraded, whatever their state
	Down     int            // hosts that did not answer
}

// Host is one GPU host.
type Host struct {
	Name      string // as in the CSV
	Display   string // from [host_names], else Name
	Status    hoststatus.Status
	Error     string // why it failed; warnings for an ok host
	Time      time.Time
	CPUs      loaddata.Int
	Load1     loaddata.Number
	MemUsed   loaddata.Number
	MemTotal  loaddata.Number
	GPUs      []*GPU
	Reserved  *reservations.Reservation // a whole-host reservation, for a down host's card
	Count     map[string]int
	Degraded  int    // GPUs whose health is degraded
	ModelName string // the GPUs' full name when they all share it
	KernelLog string // load_data.csv's kernel_log: where XIDs were read, or why not
}

// Up reports whether the host answered.
func (h *Host) Up() bool { return h.Status == hoststatus.OK }

// GPU is one GPU and what runs on it.
type GPU struct {
	Index    int  // the vendor tool's index (AMD's after NVIDIA's on a host with both); see HasIndex
	HasIndex bool // false for a GPU the driver lost, known by its bus id only
	// sharedIndex: another GPU of the host has the same index (a broken
	// driver); ID is then the UUID, so that each GPU keeps its own name
	// in metrics.prom and in the history.
	sharedIndex bool
	UUID        string
	Name        string // the full name, as the vendor's tool gives it
	Short       string
	Vendor      string // loaddata.VendorNVIDIA or VendorAMD (see vendorOf)
	BusID       string
	Error       string
	Util        loaddata.Number
	MemUtil     loaddata.Number
	MemUsed     loaddata.Number
	MemTotal    loaddata.Number
	Temp        loaddata.Number
	Power       loaddata.Number
	PowerLimit  loaddata.Number
	Fan         loaddata.Number
	// The health readings (load_data.csv's health columns) and what the
	// [health] policy made of them (Options.Health): a failed Health makes
	// the GPU Failed; a degraded one leaves its state and warns.
	PState              loaddata.Int
	ECCMode             string
	ECCUncorrected      loaddata.Number
	RetiredPagesPending loaddata.Tri
	RemappedRowsPending loaddata.Tri
	RemappedRowsFailure loaddata.Tri
	ClockEvents         string
	XIDs                string
	RecoveryAction      string
	Health              health.Health
	Procs               []*Proc
	State               string
	Notes               []string
	Reservation         *reservations.Reservation // current, whatever the state
}

// ID is the GPU's index, else its bus id (a lost GPU has no index), else "?".
func (g *GPU) ID() string {
	switch {
	case g.sharedIndex && g.UUID != "":
		return g.UUID
	case g.HasIndex:
		return strconv.Itoa(g.Index)
	case g.BusID != "":
		return g.BusID
	case g.UUID != "":
		return g.UUID
	}
	return "?"
}

// Proc is one process on a GPU.
type Proc struct {
	PID         loaddata.Int
	User        string
	Command     string
	MemMiB      loaddata.Number
	ElapsedS    loaddata.Int
	SMPct       loaddata.Number // its own SM utilization (pmon); not known under MIG
	Preemptible bool
	Ignored     bool

	// Who the process runs for, as load_data.csv says (empty when not
	// known; see loaddata.Row). Every one of them is chosen by a user
	// (a job's or a container's name) or read from a cgroup path: text
	// to escape, never to trust.
	SlurmJob       string // "1233_5", or the bare job id
	SlurmJobName   string
	SlurmPartition string
	SlurmAccount   string // the job's Slurm account (squeue %a), for billing
	Container      string // 12 hex digits
	ContainerName  string
	Pod            string // the Kubernetes pod's uid
}

// Holds reports whether the process makes its GPU busy.
func (p *Proc) Holds() bool { return !p.Preemptible && !p.Ignored }

// ContainerLabel names the process's container: its name, else its short
// id; "" outside a container.
func (p *Proc) ContainerLabel() string {
	if p.ContainerName != "" {
		return p.ContainerName
	}
	return p.Container
}

// Holder is who a GPU's cell says holds it for this process: its user,
// but for root in a container the container (Docker and most images run
// as root, so "root" would tell nobody whose work it is). A user's own
// container (rootless, or --user) keeps the user's name, which says more.
func (p *Proc) Holder() string {
	if p.User == "root" {
		if c := p.ContainerLabel(); c != "" {
			return c
		}
	}
	return p.User
}

// User is what one user holds across the cluster.
type User struct {
	Name   string // "" when ps could not tell
	GPUs   int
	MemMiB float64
	Procs  int      // distinct processes: a pid on 8 GPUs of a host is one
	Hosts  []string // raw host names, sorted
	// The Slurm jobs and containers (ContainerLabel) the user's processes
	// run in, each once, in natural order ("998" before "1233_5");
	// for root, which containers hold GPUs.
	Jobs       []string
	Containers []string
}

// Model counts the GPUs of one short name. A GPU the driver lost has no
// name: it counts under its host's model when all the host's other GPUs
// share one, else under the model named "" (unknown). So the models' totals
// add up to the cluster's GPUs.
type Model struct {
	Name string
	// Vendor is its GPUs' vendor; "" when they are not all one vendor's
	// ([gpu_names] can give two vendors' models one short name).
	Vendor              string
	Free, Failed, Total int // Total counts every GPU of the model, failed ones too
}

// Builder builds a Cluster one row at a time, so that a caller reading the
// CSV need not hold all its rows: Add each row, then call Cluster once.
type Builder struct {
	o      Options
	c      *Cluster
	hosts  map[string]*Host
	gpus   map[string]map[string]*GPU // host -> gpuKey -> GPU
	n      int                        // rows added
	lastTS string                     // the last timestamp parsed, and its time
	lastT  time.Time
	lastOK bool
	short  map[nameOf]string // full GPU name and vendor -> shortName
	// the host of the last row, and its GPUs by gpuKey: a host's rows
	// follow one another, found without hashing its name
	last     *Host
	lastGPUs map[string]*GPU
	// where hosts, GPUs and processes are made: a block at a time rather
	// than 15,000 allocations at 1,000 hosts
	hostSlab slab[Host]
	gpuSlab  slab[GPU]
	procSlab slab[Proc]
}

// nameOf is a GPU's full name and vendor, which make its short name.
type nameOf struct{ name, vendor string }

// slab hands out new zero values of T from blocks of them.
type slab[T any] struct{ free []T }

// new is a new zero T.
func (s *slab[T]) new() *T {
	if len(s.free) == 0 {
		s.free = make([]T, 128)
	}
	p := &s.free[0]
	s.free = s.free[1:]
	return p
}

// NewBuilder starts a cluster.
func NewBuilder(o Options) *Builder {
	return &Builder{o: o, c: &Cluster{Count: map[string]int{}}, hosts: map[string]*Host{}, gpus: map[string]map[string]*GPU{},
		short: map[nameOf]string{}}
}

// Add adds one row. The Builder keeps the row's strings, not the row.
func (b *Builder) Add(r *loaddata.Row) {
	row := b.n
	b.n++
	h := b.host(r)
	b.noteTime(h, r.Timestamp)
	if r.HostStatus != hoststatus.OK {
		// a failed host's row has no GPU cells; one failed row makes the host failed
		h.Status, h.Error = r.HostStatus, r.HostError
		return
	}
	key, ok := gpuKey(r, row)
	if !ok {
		return // an ok host without GPU cells: nothing to show
	}
	gpus := b.lastGPUs // h's
	g := gpus[key]
	if g != nil && r.GPUUUID != "" && g.UUID != "" && g.UUID != r.GPUUUID {
		// the tool gave two GPUs one index (fetch warns on the host):
		// keep them apart, each with its own processes
		key += "|" + r.GPUUUID
		g = gpus[key]
	}
	if g == nil {
		g = b.newGPU(r)
		gpus[key] = g
		h.GPUs = append(h.GPUs, g)
	}
	if r.PID.Valid || r.Command != "" {
		p := b.procSlab.new()
		*p = Proc{PID: r.PID, User: r.User, Command: r.Command, MemMiB: r.ProcessMemMiB, SMPct: smPct(r.ProcessSMPct),
			ElapsedS: r.ProcessElapsedS, Preemptible: bool(r.Preemptible), Ignored: ignore.Ignored(ignore.Process{Args: r.Command, UID: ignore.Unknown, MemMiB: memOr(r.ProcessMemMiB, ignore.Unknown)}, b.o.Ignore),
			SlurmJob: r.SlurmJob, SlurmJobName: r.SlurmJobName, SlurmPartition: r.SlurmPartition, SlurmAccount: r.SlurmAccount,
			Container: r.Container, ContainerName: r.ContainerName, Pod: r.Pod}
		g.Procs = append(g.Procs, p)
	}
}

// host is r's host, made from its first row.
func (b *Builder) host(r *loaddata.Row) *Host {
	if b.last != nil && b.last.Name == r.Host {
		return b.last
	}
	if h := b.hosts[r.Host]; h != nil {
		b.last, b.lastGPUs = h, b.gpus[r.Host]
		return h
	}
	h := b.hostSlab.new()
	*h = Host{Name: r.Host, Display: lookup(b.o.HostNames, r.Host, r.Host), Status: r.HostStatus,
		Error: r.HostError, CPUs: r.CPUs, Load1: r.Load1, MemUsed: r.HostMemUsedMiB, MemTotal: r.HostMemTotalMiB,
		KernelLog: r.KernelLog, Count: map[string]int{}}
	b.hosts[r.Host] = h
	b.gpus[r.Host] = map[string]*GPU{}
	b.c.Hosts = append(b.c.Hosts, h)
	b.last, b.lastGPUs = h, b.gpus[r.Host]
	return h
}

// noteTime moves the host's and the cluster's time to ts if it is later.
// A timestamp that does not parse is left out.
func (b *Builder) noteTime(h *Host, ts string) {
	if ts != b.lastTS { // rows of a host share their timestamp: parse once
		t, err := time.Parse(loaddata.TimeFormat, ts)
		b.lastTS, b.lastT, b.lastOK = ts, t, err == nil
	}
	if !b.lastOK {
		if b.c.BadTime == "" {
			b.c.BadTime = fmt.Sprintf("%s: %q", h.Name, hosttextClip(ts))
		}
		return
	}
	if b.lastT.After(h.Time) {
		h.Time = b.lastT
	}
	if b.lastT.After(b.c.DataTime) {
		b.c.DataTime = b.lastT
	}
}

// gpuKey tells r's GPU apart from its host's others: by index, else bus id,
// else UUID; a GPU known only by its error is its own (row is r's number).
// ok is false for a row without GPU cells.
func gpuKey(r *loaddata.Row, row int) (key string, ok bool) {
	switch {
	case r.GPUIndex.Valid:
		if r.GPUIndex.Value >= 0 && r.GPUIndex.Value < int64(len(indexKeys)) {
			return indexKeys[r.GPUIndex.Value], true
		}
		return "i" + strconv.FormatInt(r.GPUIndex.Value, 10), true
	case r.GPUBusID != "":
		return "b" + r.GPUBusID, true
	case r.GPUUUID != "":
		return "u" + r.GPUUUID, true
	case r.GPUError != "":
		return "r" + strconv.Itoa(row), true
	}
	return "", false
}

// indexKeys are the map keys of the usual GPU indexes, made once.
var indexKeys = func() []string {
	k := make([]string, 64)
	for i := range k {
		k[i] = "i" + strconv.Itoa(i)
	}
	return k
}()

// newGPU is r's GPU, from the first of its rows.
func (b *Builder) newGPU(r *loaddata.Row) *GPU {
	g := b.gpuSlab.new()
	*g = GPU{Index: int(r.GPUIndex.Value), HasIndex: r.GPUIndex.Valid, UUID: r.GPUUUID, Name: r.GPUName, Vendor: vendorOf(r.GPUVendor),
		BusID: r.GPUBusID, Error: r.GPUError,
		Util: r.GPUUtilPct, MemUtil: r.MemUtilPct, MemUsed: r.MemUsedMiB, MemTotal: r.MemTotalMiB,
		Temp: r.TempC, Power: r.PowerW, PowerLimit: r.PowerLimitW, Fan: r.FanPct,
		PState: r.PState, ECCMode: r.ECCMode, ECCUncorrected: r.ECCUncorrected,
		RetiredPagesPending: r.RetiredPagesPending, RemappedRowsPending: r.RemappedRowsPending,
		RemappedRowsFailure: r.RemappedRowsFailure, ClockEvents: r.ClockEvents, XIDs: r.XIDs,
		RecoveryAction: r.RecoveryAction}
	key := nameOf{g.Name, g.Vendor}
	short, ok := b.short[key]
	if !ok {
		short = shortName(g.Name, g.Vendor, b.o.GPUNames)
		b.short[key] = short
	}
	g.Short = short
	return g
}

// Cluster classifies every GPU and returns the cluster. Call it once, after
// the last Add.
func (b *Builder) Cluster() *Cluster {
	c, o := b.c, b.o
	b.hosts, b.gpus, b.last, b.lastGPUs = nil, nil, nil, nil
	resv := activeReservations(o.Reservations, o.Now)
	t := newTally(c, o.GPUNames)
	for _, h := range c.Hosts {
		sortGPUs(h.GPUs)
		hr := hostReservations(resv, h.Name)
		h.Reserved = wholeHost(hr)
		if !h.Up() {
			c.Down++
			h.GPUs = nil
			continue
		}
		h.ModelName = commonName(h.GPUs)
		markSharedIndexes(h.GPUs)
		for _, g := range h.GPUs {
			g.Reservation = gpuReservation(hr, g)
			g.Health = health.Assess(readingsOf(g), o.Health)
			classify(g, o.FreeMemMiB)
			h.Count[g.State]++
			if g.Health.State == health.Degraded {
				h.Degraded++
			}
			t.add(h, g)
		}
	}
	t.sort()
	return c
}

// activeReservations are those not ended at now, by host.
func activeReservations(list []reservations.Reservation, now time.Time) map[string][]reservations.Reservation {
	resv := map[string][]reservations.Reservation{}
	for _, r := range list {
		if r.Active(now) {
			resv[r.Host] = append(resv[r.Host], r)
		}
	}
	return resv
}

// hostReservations are host's; host names are case-insensitive.
func hostReservations(resv map[string][]reservations.Reservation, host string) []reservations.Reservation {
	if hr, ok := resv[host]; ok {
		return hr
	}
	for name, list := range resv {
		if strings.EqualFold(name, host) {
			return list
		}
	}
	return nil
}

// wholeHost is the first of hr that reserves the whole host, or nil.
func wholeHost(hr []reservations.Reservation) *reservations.Reservation {
	for i := range hr {
		if hr[i].GPUs == nil {
			return &hr[i]
		}
	}
	return nil
}

// gpuReservation is the first of hr that covers g (a whole-host one covers
// a GPU without an index too), or nil.
func gpuReservation(hr []reservations.Reservation, g *GPU) *reservations.Reservation {
	for i := range hr {
		if g.HasIndex && hr[i].Covers(g.Index) || hr[i].GPUs == nil {
			return &hr[i]
		}
	}
	return nil
}

// sortGPUs puts GPUs in index order, those without an index last.
func sortGPUs(gpus []*GPU) {
	sort.SliceStable(gpus, func(i, j int) bool {
		a, b := gpus[i], gpus[j]
		if a.HasIndex != b.HasIndex {
			return a.HasIndex
		}
		return a.Index < b.Index
	})
}

// commonName is the GPUs' full name when all that have one share it; a lost
// GPU has no name.
func commonName(gpus []*GPU) string {
	name := ""
	for _, g := range gpus {
		switch {
		case g.Name == "":
		case name == "":
			name = g.Name
		case g.Name != name:
			return ""
		}
	}
	return name
}

// A tally adds up the cluster's models and users, GPU by GPU.
type tally struct {
	c        *Cluster
	gpuNames map[string]string
	models   map[string]*Model
	users    map[string]*User
	// the pids counted on procsOf's GPUs so far: a pid on several GPUs of
	// a host is one process. add is given a host's GPUs one after
	// another, so the host's pids alone are kept.
	procsOf *Host
	procs   map[int64]bool
}

func newTally(c *Cluster, gpuNames map[string]string) *tally {
	return &tally{c: c, gpuNames: gpuNames, models: map[string]*Model{}, users: map[string]*User{}, procs: map[int64]bool{}}
}

// add counts classified g of h: in the cluster's totals, its model and its
// users.
func (t *tally) add(h *Host, g *GPU) {
	t.c.Count[g.State]++
	t.c.GPUs++
	if !slices.Contains(t.c.Vendors, g.Vendor) { // one or two of them
		t.c.Vendors = append(t.c.Vendors, g.Vendor)
	}
	if g.Health.State == health.Degraded {
		t.c.Degraded++
	}
	t.addModel(h, g)
	t.addUsers(h, g)
}

// addModel counts g under its model; a lost GPU under its host's.
func (t *tally) addModel(h *Host, g *GPU) {
	name := g.Short
	if g.Name == "" && h.ModelName != "" {
		name = shortName(h.ModelName, g.Vendor, t.gpuNames)
	}
	m := t.models[name]
	switch {
	case m == nil:
		m = &Model{Name: name, Vendor: g.Vendor}
		t.models[name] = m
		t.c.Models = append(t.c.Models, m)
	case m.Vendor != g.Vendor: // g.Vendor is never "": once mixed, "" stays
		m.Vendor = ""
	}
	m.Total++
	switch g.State {
	case Free:
		m.Free++
	case Failed:
		m.Failed++
	}
}

// addUsers counts g's holding processes under their users: the GPU once for
// each user, a process once per host however many GPUs it holds.
func (t *tally) addUsers(h *Host, g *GPU) {
	// users g is counted for: found among the processes before, unless
	// there are many (a map per GPU cost more than the rest of the count)
	var seen map[string]bool
	if len(g.Procs) > 8 {
		seen = make(map[string]bool, len(g.Procs))
	}
	if t.procsOf != h {
		t.procsOf = h
		if len(t.procs) > 64 {
			t.procs = map[int64]bool{} // clear would sweep its size for every host after
		} else {
			clear(t.procs)
		}
	}
	for i, p := range g.Procs {
		if !p.Holds() {
			continue
		}
		u := t.user(p.User)
		if !p.PID.Valid {
			u.Procs++ // no pid: nothing to tell it apart by
		} else if !t.procs[p.PID.Value] {
			t.procs[p.PID.Value] = true
			u.Procs++
		}
		if p.MemMiB.Valid {
			u.MemMiB += p.MemMiB.Value
		}
		if seen != nil {
			if !seen[p.User] {
				seen[p.User] = true
				u.GPUs++
			}
		} else if !heldBy(g.Procs[:i], p.User) {
			u.GPUs++
		}
		if len(u.Hosts) == 0 || u.Hosts[len(u.Hosts)-1] != h.Name {
			u.Hosts = append(u.Hosts, h.Name)
		}
		// a job's processes follow one another: most repeats stop here,
		// the rest at sort
		if j := p.SlurmJob; j != "" && (len(u.Jobs) == 0 || u.Jobs[len(u.Jobs)-1] != j) {
			u.Jobs = append(u.Jobs, j)
		}
		if c := p.ContainerLabel(); c != "" && (len(u.Containers) == 0 || u.Containers[len(u.Containers)-1] != c) {
			u.Containers = append(u.Containers, c)
		}
	}
}

// heldBy reports whether one of procs that holds its GPU is user's.
func heldBy(procs []*Proc, user string) bool {
	for _, p := range procs {
		if p.Holds() && p.User == user {
			return true
		}
	}
	return false
}

func (t *tally) user(name string) *User {
	u := t.users[name]
	if u == nil {
		u = &User{Name: name}
		t.users[name] = u
		t.c.Users = append(t.c.Users, u)
	}
	return u
}

// sort puts the users with the most GPUs first, and the biggest models
// first with the unknown one last.
func (t *tally) sort() {
	c := t.c
	slices.Sort(c.Vendors)
	for _, u := range c.Users {
		sort.Strings(u.Hosts)
		u.Hosts = slices.Compact(u.Hosts)
		slices.SortFunc(u.Jobs, naturalCompare)
		u.Jobs = slices.Compact(u.Jobs)
		slices.SortFunc(u.Containers, naturalCompare)
		u.Containers = slices.Compact(u.Containers)
	}
	sort.SliceStable(c.Users, func(i, j int) bool {
		a, b := c.Users[i], c.Users[j]
		if a.GPUs != b.GPUs {
			return a.GPUs > b.GPUs
		}
		return a.Name < b.Name
	})
	sort.SliceStable(c.Models, func(i, j int) bool {
		a, b := c.Models[i], c.Models[j]
		if (a.Name == "") != (b.Name == "") {
			return b.Name == ""
		}
		if a.Total != b.Total {
			return a.Total > b.Total
		}
		return a.Name < b.Name
	})
}

// classify sets g's state and notes. A GPU that could not be read is
// failed whatever the policy: it has no readings to offer it by.
func classify(g *GPU, freeMiB float64) {
	g.Notes = nil
	if g.Error != "" || g.Health.State == health.Failed {
		g.State = Failed
		return
	}
	holders := false
	idleJob := false
	used := g.MemUsed.Value
	memKnown := g.MemUsed.Valid
	for _, p := range g.Procs {
		switch {
		case p.Holds():
			holders = true
		case p.MemMiB.Valid:
			used -= p.MemMiB.Value
		case p.Preemptible:
			memKnown = false // its memory is the job's, but how much is not known
		}
		if p.Preemptible {
			idleJob = true
		}
	}
	switch {
	case holders:
		g.State = Busy
	case memKnown && used >= freeMiB:
		g.State = Busy
		g.Notes = append(g.Notes, noteMemNoProc)
	default:
		g.State = Free
		if !g.MemUsed.Valid {
			g.Notes = append(g.Notes, noteMemUnknown)
		}
		if idleJob {
			g.Notes = append(g.Notes, noteIdleJob)
		}
		if g.Reservation != nil {
			g.State = Reserved
		}
	}
}

// vendorMax bounds a vendor that is not one of loaddata's: fetch writes
// only those, but the CSV may come from elsewhere (-import).
const vendorMax = 16

// vendorOf is a GPU's vendor from its row's gpu_vendor cell, in lower case.
// An empty cell is NVIDIA's: a file from before the column was written by
// a fetch that read nvidia-smi alone, so each of its GPUs is NVIDIA's,
// and an NVIDIA-only fleet's outputs stay as they were.
func vendorOf(cell string) string {
	switch cell { // what fetch writes: known without lowering it
	case "", loaddata.VendorNVIDIA:
		return loaddata.VendorNVIDIA
	case loaddata.VendorAMD:
		return loaddata.VendorAMD
	}
	v := strings.ToLower(strings.TrimSpace(cell))
	switch v {
	case "", loaddata.VendorNVIDIA:
		return loaddata.VendorNVIDIA
	case loaddata.VendorAMD:
		return loaddata.VendorAMD
	}
	if v = hosttext.Clip(hosttext.Printable(v), vendorMax); v == "" {
		return loaddata.VendorNVIDIA
	}
	return v
}

// shortName is the [gpu_names] name for full, else full without its
// vendor's words: "NVIDIA H100 80GB HBM3" is "H100 80GB HBM3", "NVIDIA
// GeForce RTX 2080 SUPER" is "RTX 2080 SUPER", "Tesla V100-SXM2-16GB" is
// "V100-SXM2-16GB"; "AMD Instinct MI300X" is "MI300X", "AMD Radeon RX
// 6700 XT" is "RX 6700 XT". "Radeon" goes only before "RX": RX alone names
// AMD's gaming line as RTX names NVIDIA's, but the workstation line's name
// is "Radeon Pro", and "Pro W7900" would read as a model of nobody's; so
// "AMD Radeon Pro W7900" is "Radeon Pro W7900".
//
// Older rocm-smi gives the PCI database's name, the chip's code name with
// the cards it may be in brackets: "Arcturus GL-XL [Instinct MI100]". The
// cards are what a user knows, so an AMD GPU's short name is the bracketed
// part, each of its "/"-separated names without the vendor words:
// "Vega 20 [Radeon Pro VII/Radeon Instinct MI50 32GB]" is
// "Radeon Pro VII/MI50 32GB". The words are the vendor's only: two
// vendors' names never become one model by a rule meant for the other.
func shortName(full, vendor string, names map[string]string) string {
	if s, ok := names[strings.ToLower(strings.TrimSpace(full))]; ok {
		return s
	}
	s := strings.TrimSpace(full)
	switch vendor {
	case loaddata.VendorNVIDIA:
		return withoutWords(s, nvidiaWords)
	case loaddata.VendorAMD:
		return amdShortName(cardsOfChip(s))
	}
	return s
}

// nvidiaWords and amdWords are the words that lead a vendor's GPU names
// and say only whose they are, dropped in this order.
var (
	nvidiaWords = []string{"NVIDIA ", "GeForce ", "Tesla ", "Quadro "}
	amdWords    = []string{"AMD ", "Radeon Instinct ", "Instinct "}
)

// amdShortName is an AMD name without its vendor words, each of its
// "/"-separated names on its own ("Radeon Pro VII/Radeon Instinct MI50").
func amdShortName(s string) string {
	parts := strings.Split(s, "/")
	for i, p := range parts {
		lead := len(p) - len(strings.TrimLeftFunc(p, unicode.IsSpace)) // " 6800M" keeps its space
		rest := withoutWords(p[lead:], amdWords)
		if r := trimWord(rest, "Radeon "); len(r) > len("RX ") && strings.EqualFold(r[:len("RX ")], "RX ") {
			rest = r
		}
		parts[i] = p[:lead] + rest
	}
	return strings.Join(parts, "/")
}

// cardsOfChip is the bracketed part of a PCI database name, "Navi 22
// [Radeon RX 6700/6700 XT/6750 XT / 6800M/6850M XT]"; else name.
func cardsOfChip(name string) string {
	open := strings.Index(name, " [")
	if open <= 0 || !strings.HasSuffix(name, "]") {
		return name
	}
	cards := strings.TrimSpace(name[open+2 : len(name)-1])
	if cards == "" || strings.ContainsAny(cards, "[]") {
		return name
	}
	return cards
}

// withoutWords is s without the leading words, in their order; a name
// that is nothing but one ("NVIDIA") stays.
func withoutWords(s string, words []string) string {
	for _, p := range words {
		s = trimWord(s, p)
	}
	return s
}

// trimWord is s without the leading word p (any case) and the spaces
// after it, when something follows it. Spaces at s's end stay: "MI250X /
// MI250" keeps its spacing around the "/".
func trimWord(s, p string) string {
	if len(s) > len(p) && strings.EqualFold(s[:len(p)], p) {
		return strings.TrimLeftFunc(s[len(p):], unicode.IsSpace)
	}
	return s
}

func lookup(m map[string]string, key, def string) string {
	if v, ok := m[strings.ToLower(key)]; ok {
		return v
	}
	return def
}

// memOr is n's value, or def when it is not known.
func memOr(n loaddata.Number, def float64) float64 {
	if !n.Valid {
		return def
	}
	return n.Value
}

// markSharedIndexes marks the GPUs whose index another GPU of the host has.
func markSharedIndexes(gpus []*GPU) {
	seen := make(map[int]int, len(gpus))
	for _, g := range gpus {
		if g.HasIndex {
			seen[g.Index]++
		}
	}
	for _, g := range gpus {
		g.sharedIndex = g.HasIndex && seen[g.Index] > 1
	}
}

// naturalCompare orders strings with their runs of digits by value:
// Slurm job "998" before "1233", "1233_5" before "1233_10", "gpu2" before
// "gpu10". Strings that differ only in leading zeros are ordered as bytes,
// so the order is total.
func naturalCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			// compare the two numbers: without leading zeros, the
			// longer is the greater; of equal length, as text
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			na, nb := strings.TrimLeft(a[si:i], "0"), strings.TrimLeft(b[sj:j], "0")
			if len(na) != len(nb) {
				return cmp.Compare(len(na), len(nb))
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			continue
		}
		if a[i] != b[j] {
			return cmp.Compare(a[i], b[j])
		}
		i++
		j++
	}
	if c := cmp.Compare(len(a)-i, len(b)-j); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// hosttextClip keeps a timestamp cell short and printable for a message.
func hosttextClip(s string) string { return hosttext.Clip(hosttext.Printable(s), 40) }

// Subset is a cluster of some of c's hosts (render's group pages), as
// classified already: its counts, models and users are theirs alone.
// gpuNames is the Options' GPUNames, which named c's models.
func (c *Cluster) Subset(hosts []*Host, gpuNames map[string]string) *Cluster {
	s := &Cluster{Hosts: hosts, DataTime: c.DataTime, BadTime: c.BadTime, Count: map[string]int{}}
	t := newTally(s, gpuNames)
	for _, h := range hosts {
		if !h.Up() {
			s.Down++
			continue
		}
		for _, g := range h.GPUs {
			t.add(h, g)
		}
	}
	t.sort()
	return s
}

// Bounds on what a host's health cells may cost: a poll logs a handful of
// XIDs, and every clock event name fits in well under 256 bytes.
const (
	xidsMax        = 32
	clockEventsMax = 256
)

// eccMax is the largest uncorrected ECC count believed: nvidia-smi's
// "not available" comes as 2^64-1 from some drivers, which no GPU logs.
const eccMax = 1 << 53

// readingsOf is g's health readings for health.Assess: a reading not
// known, or absurd, is left out, so it is never a condition.
func readingsOf(g *GPU) health.Readings {
	ecc := g.ECCUncorrected
	clock := g.ClockEvents
	if len(clock) > clockEventsMax {
		clock = clock[:clockEventsMax]
	}
	return health.Readings{
		Lost:                g.Error,
		ECCUncorrected:      ecc.Value,
		ECCUncorrectedValid: ecc.Valid && ecc.Value >= 0 && ecc.Value < eccMax,
		RetiredPagesPending: g.RetiredPagesPending.Valid && g.RetiredPagesPending.Value,
		RemapPending:        g.RemappedRowsPending.Valid && g.RemappedRowsPending.Value,
		RemapFailure:        g.RemappedRowsFailure.Valid && g.RemappedRowsFailure.Value,
		ClockEvents:         clock,
		XIDs:                parseXIDs(g.XIDs),
		RecoveryAction:      hosttextClip(g.RecoveryAction),
	}
}

// smPct is a process's SM utilization when it is one (0 to 100 %), else
// not known: a broken pmon's 1e300 is no reading.
func smPct(n loaddata.Number) loaddata.Number {
	if !n.Valid || n.Value < 0 || n.Value > 100 {
		return loaddata.Number{}
	}
	return n
}

// parseXIDs reads the xids cell ("13,79"): the first xidsMax distinct
// codes that are whole numbers from 1 to 65535 (fetch writes each once; a
// cell of forty 13s before a 79 keeps the 79); anything else is skipped.
func parseXIDs(cell string) []int {
	var xids []int
	for cell != "" && len(xids) < xidsMax {
		var item string
		item, cell, _ = strings.Cut(cell, ",")
		n, err := strconv.Atoi(strings.TrimSpace(item))
		if err == nil && n >= 1 && n <= 65535 && !slices.Contains(xids, n) {
			xids = append(xids, n)
		}
	}
	return xids
}

// FailedReason is why the [health] policy failed g: its failed findings'
// details, "; " between them; "" when it did not.
func (g *GPU) FailedReason() string {
	var parts []string
	for _, f := range g.Health.Findings {
		if f.Severity == health.Failed && f.Condition != health.Lost {
			parts = append(parts, f.Detail)
		}
	}
	return strings.Join(parts, "; ")
}
