// Package simfleet is a simulated fleet of GPU hosts: in-process SSH servers
// on loopback addresses (127.0.X.Y, one per host) that answer fetch's probe
// script (internal/probe) by replaying real nvidia-smi captures
// (internal/captures), each host with its own GPUs, processes and users, the
// health its driver and kernel log tell (GPUHealth, DriverOnlyGPUs,
// KernelLog), or with one of the ways a real host fails (Failure).
//
// Tests and benchmarks use Start; the demo program (cmd/simfleet) uses Launch.
// WriteClientFiles writes what a client needs to reach the fleet: a key, an
// ssh_config, a known_hosts and a gpumon config.ini.
package simfleet

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumon/gpumon/internal/probe"
	"golang.org/x/crypto/ssh"
)

// Failure is how a simulated host misbehaves.
type Failure int

const (
	None Failure = iota
	// Refuse: nothing listens on the port; connecting gets ECONNREFUSED.
	Refuse
	// Silent accepts TCP connections and never says a word of SSH.
	Silent
	// AuthReject rejects every key.
	AuthReject
	// HangNvidiaSMI: nvidia-smi never returns, so `timeout` on the host ends
	// it: the gpus section arrives after the request's NVTimeout seconds,
	// empty, exit 124; apps and ps are skipped; host and done follow.
	HangNvidiaSMI
	// HangForever accepts the session and never answers (a host without
	// `timeout` whose nvidia-smi hangs).
	HangForever
	// DropMidOutput writes part of the gpus section, then drops the TCP connection.
	DropMidOutput
	// DriverNotLoaded: nvidia-smi cannot talk to the driver (exit 9).
	DriverNotLoaded
	// NoDevices: "No devices were found" (exit 6).
	NoDevices
	// GPULost: one GPU (index GPUs/2) is lost; its row is replaced by the
	// driver's message and nvidia-smi exits 15; the other rows are good.
	GPULost
	// WrongHostKey: the host presents a key other than the one that the
	// known_hosts written by WriteClientFiles holds for it.
	WrongHostKey
	// Flood answers every command with endless output ("y" lines, as a
	// ForceCommand of `yes` would) until the client goes away.
	Flood
	// FloodStderr is Flood on standard error.
	FloodStderr
)

var failureNames = []string{"None", "Refuse", "Silent", "AuthReject", "HangNvidiaSMI", "HangForever",
	"DropMidOutput", "DriverNotLoaded", "NoDevices", "GPULost", "WrongHostKey", "Flood", "FloodStderr"}

func (f Failure) String() string {
	if f >= 0 && int(f) < len(failureNames) {
		return failureNames[f]
	}
	return "Failure(" + strconv.Itoa(int(f)) + ")"
}

// Failures lists every Failure but None.
func Failures() []Failure {
	out := make([]Failure, 0, len(failureNames)-1)
	for f := Refuse; int(f) < len(failureNames); f++ {
		out = append(out, f)
	}
	return out
}

// Process is one process on one GPU. A process on several GPUs is one
// Process per GPU, with the same PID (User, Command and ElapsedS are taken
// from the first).
type Process struct {
	PID      int
	User     string
	Command  string // the full command line, as ps prints it (args)
	GPU      int    // index of the GPU on its host
	MemMiB   int
	ElapsedS int
	// Name is what nvidia-smi prints as process_name; "" means the first
	// word of Command. A comma in it is printed as '?', as modern drivers do.
	Name string
	// Cgroup is its /proc/PID/cgroup ("" for a login session's): see
	// slurmCgroup, dockerCgroup, podCgroup.
	Cgroup string
	// Idle holds memory and computes nothing (a notebook left open): its
	// GPU keeps the capture's idle readings (with State ""), and pmon has
	// no sample of it ("-").
	Idle bool
	// SMPct is what pmon says of a busy process's SM utilization; 0 gives
	// each busy process on the GPU an even share of the GPU's.
	SMPct int
}

func (p *Process) processName() string {
	if p.Name != "" {
		return p.Name
	}
	for i := 0; i < len(p.Command); i++ {
		if p.Command[i] == ' ' {
			return p.Command[:i]
		}
	}
	return p.Command
}

// HostSpec describes one simulated host. Zero fields get defaults: Capture
// "h200" (any unique substring of a capture name works), GPUs 8, CPUs 64,
// MemTotalMiB 512 GiB.
type HostSpec struct {
	Name    string
	Capture string // a captures.Names() entry, or a unique substring of one
	// State picks the capture row every GPU takes its values from: "idle" or
	// "load". "" picks per GPU: "load" for a GPU with processes, else "idle".
	State     string
	GPUs      int
	Processes []Process
	Failure   Failure
	CPUs      int
	Load1     float64
	// MemTotalMiB and MemUsedMiB are the host's RAM.
	MemTotalMiB, MemUsedMiB int
	// Idlemon, when not empty, is the content of the idlemon state file: it
	// is printed when the request names a state file.
	Idlemon string
	// Slurm, when not nil, makes the host a Slurm node: it has squeue,
	// which knows these jobs.
	Slurm []SlurmJob
	// ContainerEngine is the container command the host has ("docker",
	// "podman", "" for none); its ps lists Containers.
	ContainerEngine string
	Containers      []Container
	// DriverOnlyGPUs are GPUs past GPUs that the driver lists and
	// nvidia-smi leaves out without a word (lost GPUs): "driver lists 8,
	// nvidia-smi reports 7" is GPUs 7, DriverOnlyGPUs 1.
	DriverOnlyGPUs int
	// Health is what is wrong with some of its GPUs.
	Health []GPUHealth
	// KernelLog is how its kernel log reads for the monitor account:
	// KernelLogJournal (the default), KernelLogDmesg or KernelLogUnreadable.
	KernelLog string
	// PmonDelay is how long its nvidia-smi pmon samples before it prints
	// (a real one about a second): an answer with pmon in it comes no
	// sooner than that after the script arrived. 0 answers at once.
	PmonDelay time.Duration
	// AMD, when not empty, makes the host an AMD one: it has amd-smi or
	// rocm-smi and no nvidia-smi, and its tool answers from this capture
	// ("amd-smi/mi210", "rocm-smi/mi100x4": the tool, then a unique
	// substring of a captures.AMDNames entry), with the capture's GPUs
	// and their readings: as many as the capture has where GPUs is 0,
	// else GPUs, the capture's repeated (loadedAnswers). Its processes are in its
	// KFD folder. Only the failures of its connection apply (amdFailure).
	AMD string
}

// HostInfo is where a simulated host listens.
type HostInfo struct {
	Name    string
	Host    string // IP address
	Port    int
	HostKey ssh.PublicKey // the key the host presents
	Failure Failure
}

// Addr is host:port.
func (h HostInfo) Addr() string { return net.JoinHostPort(h.Host, strconv.Itoa(h.Port)) }

// Stats counts what the fleet served.
type Stats struct {
	Accepted int64 // TCP connections accepted
	Authed   int64 // SSH handshakes completed (authenticated)
	Sessions int64 // session channels opened
	Execs    int64 // exec requests served
}

type counters struct{ accepted, authed, sessions, execs atomic.Int64 }

func (c *counters) stats() Stats {
	return Stats{c.accepted.Load(), c.authed.Load(), c.sessions.Load(), c.execs.Load()}
}

// handshakeTimeout bounds a connection's SSH handshake (and authentication):
// a client that connects and stalls is dropped after it.
const handshakeTimeout = 20 * time.Second

type host struct {
	spec        HostSpec
	ip          string
	port        int
	signer      ssh.Signer
	knownKey    ssh.PublicKey // what known_hosts says
	keyMu       sync.Mutex    // guards signer and cfg, which RotateHostKey replaces
	ln          net.Listener
	reserved    io.Closer // Refuse: the bound, non-listening socket
	cfg         *ssh.ServerConfig
	model       *capModel
	gpus        []simGPU
	hidden      []simGPU // DriverOnlyGPUs: the driver lists them, nvidia-smi does not
	started     time.Time
	procsByGPU  [][]*Process
	procByPID   map[int]*Process
	lostGPU     int
	hostBody    []byte
	pmon        rendered  // nvidia-smi pmon -c 1 -s u
	driverNames []byte    // the driver_gpus section of a host whose driver is loaded
	amd         *amdModel // HostSpec.AMD's capture, nil on an NVIDIA host
	kfd         []byte    // an AMD host's kfd section
	amdBus      []string  // an AMD host's GPUs' PCI addresses (amdBusIDs)
	// an AMD host's answers, its load in them (loadedAnswers)
	amdStatic, amdMetric, rocmSMI []byte
	containers                    []byte // the engine's ps, recordMark for the record prefix
	cache                         answers
	count                         counters
}

// Fleet is a running simulated fleet.
type Fleet struct {
	hosts     []*host
	byName    map[string]*host
	clientKey ed25519.PrivateKey
	clientPub []byte // wire form of the accepted public key
	signer    ssh.Signer

	done      chan struct{}
	mu        sync.Mutex
	closed    bool
	conns     map[net.Conn]*host
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Launch starts one SSH server per spec, each on its own loopback address.
// Close stops them all.
func Launch(specs []HostSpec) (*Fleet, error) {
	f := &Fleet{
		byName: make(map[string]*host, len(specs)),
		done:   make(chan struct{}),
		conns:  make(map[net.Conn]*host),
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	f.clientKey = priv
	if f.signer, err = ssh.NewSignerFromKey(priv); err != nil {
		return nil, err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	f.clientPub = sshPub.Marshal()

	for i := range specs {
		h, err := f.newHost(i, specs[i])
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		f.hosts = append(f.hosts, h)
		f.byName[h.spec.Name] = h
	}
	for _, h := range f.hosts {
		if h.ln != nil {
			f.wg.Add(1)
			go f.acceptLoop(h)
		}
	}
	return f, nil
}

// loopbackOnly is set once binding 127.0.X.Y has failed (systems that,
// unlike Linux, do not route all of 127/8 to lo): every host then shares
// 127.0.0.1, on distinct ports.
var loopbackOnly atomic.Bool

func hostIP(i int) string {
	if loopbackOnly.Load() {
		return "127.0.0.1"
	}
	return fmt.Sprintf("127.0.%d.%d", 1+i/254, 1+i%254)
}

func (f *Fleet) newHost(i int, spec HostSpec) (*host, error) {
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("gpu%04d", i+1)
	}
	if _, dup := f.byName[spec.Name]; dup {
		return nil, fmt.Errorf("host name %q used twice", spec.Name)
	}
	gpusGiven := spec.GPUs > 0
	if !gpusGiven {
		spec.GPUs = 8
	}
	if spec.CPUs <= 0 {
		spec.CPUs = 64
	}
	if spec.MemTotalMiB <= 0 {
		spec.MemTotalMiB = 512 * 1024
	}
	if spec.State != "" && spec.State != "idle" && spec.State != "load" {
		return nil, fmt.Errorf("host %s: state %q is neither idle nor load", spec.Name, spec.State)
	}
	if spec.DriverOnlyGPUs < 0 {
		return nil, fmt.Errorf("host %s: %d driver-only GPUs", spec.Name, spec.DriverOnlyGPUs)
	}
	switch spec.KernelLog {
	case KernelLogJournal, KernelLogDmesg, KernelLogUnreadable:
	default:
		return nil, fmt.Errorf("host %s: kernel log %q is none of journal (\"\"), dmesg, unreadable", spec.Name, spec.KernelLog)
	}
	switch spec.ContainerEngine {
	case "", probe.ContainersDocker, probe.ContainersPodman:
	default:
		return nil, fmt.Errorf("host %s: container engine %q is neither docker nor podman", spec.Name, spec.ContainerEngine)
	}
	for _, c := range spec.Containers {
		if len(c.ID) != 64 || strings.Trim(c.ID, "0123456789abcdef") != "" || strings.ContainsAny(c.Names, "\n ") {
			return nil, fmt.Errorf("host %s: container %q %q: want 64 hex digits and names without spaces", spec.Name, c.ID, c.Names)
		}
	}
	var amd *amdModel
	if spec.AMD != "" {
		var err error
		if amd, err = resolveAMD(spec.AMD); err != nil {
			return nil, fmt.Errorf("host %s: %v", spec.Name, err)
		}
		if !amdFailure(spec.Failure) {
			return nil, fmt.Errorf("host %s: failure %v is nvidia-smi's, not simulated on an AMD host", spec.Name, spec.Failure)
		}
		if !gpusGiven {
			spec.GPUs = len(amd.busIDs)
		}
		if spec.GPUs > 64 {
			return nil, fmt.Errorf("host %s: %d AMD GPUs, more than fetch believes a host has", spec.Name, spec.GPUs)
		}
	}
	name, err := resolveCapture(spec.Capture)
	if err != nil {
		return nil, fmt.Errorf("host %s: %v", spec.Name, err)
	}
	spec.Capture = name
	h := &host{spec: spec, lostGPU: spec.GPUs / 2, amd: amd}
	if h.model, err = loadModel(name); err != nil {
		return nil, fmt.Errorf("host %s: %v", spec.Name, err)
	}
	h.procsByGPU = make([][]*Process, spec.GPUs)
	h.procByPID = make(map[int]*Process)
	// copy: the caller's slice stays the caller's
	spec.Processes = append([]Process(nil), spec.Processes...)
	h.spec.Processes = spec.Processes
	for j := range spec.Processes {
		p := &spec.Processes[j]
		if p.GPU < 0 || p.GPU >= spec.GPUs {
			return nil, fmt.Errorf("host %s: process %d is on GPU %d of %d", spec.Name, p.PID, p.GPU, spec.GPUs)
		}
		if p.PID <= 0 {
			return nil, fmt.Errorf("host %s: process pid %d", spec.Name, p.PID)
		}
		h.procsByGPU[p.GPU] = append(h.procsByGPU[p.GPU], p)
		if _, seen := h.procByPID[p.PID]; !seen {
			h.procByPID[p.PID] = p
		}
	}
	h.spec.Health = append([]GPUHealth(nil), spec.Health...)
	if err := h.checkHealth(); err != nil {
		return nil, fmt.Errorf("host %s: %v", spec.Name, err)
	}
	all := makeGPUs(&h.spec, h.model)
	h.gpus, h.hidden = all[:spec.GPUs], all[spec.GPUs:]
	h.started = time.Now()
	h.hostBody = h.renderHost()
	h.pmon = h.renderPmon()
	h.driverNames = h.listDriverGPUs()
	h.containers = h.renderContainers()
	if h.amd != nil {
		h.amdBus = amdBusIDs(h.amd, spec.GPUs)
		h.kfd = h.renderKFD()
		h.amdStatic, h.amdMetric, h.rocmSMI = h.loadedAnswers()
	}

	_, hpriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if h.signer, err = ssh.NewSignerFromKey(hpriv); err != nil {
		return nil, err
	}
	h.knownKey = h.signer.PublicKey()
	if spec.Failure == WrongHostKey {
		other, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		if h.knownKey, err = ssh.NewPublicKey(other); err != nil {
			return nil, err
		}
	}
	h.cfg = &ssh.ServerConfig{
		Config:        ssh.Config{KeyExchanges: []string{ssh.KeyExchangeCurve25519, ssh.KeyExchangeECDHP256}},
		ServerVersion: "SSH-2.0-OpenSSH_9.6p1 simfleet",
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if h.spec.Failure != AuthReject && bytes.Equal(key.Marshal(), f.clientPub) {
				return nil, nil
			}
			return nil, errors.New("simfleet: key not accepted")
		},
	}
	h.cfg.AddHostKey(h.signer)

	h.ip = hostIP(i)
	if spec.Failure == Refuse {
		h.port, h.reserved, err = reservePort(h.ip)
		if err != nil && !loopbackOnly.Load() {
			loopbackOnly.Store(true)
			h.ip = hostIP(i)
			h.port, h.reserved, err = reservePort(h.ip)
		}
		if err != nil {
			return nil, fmt.Errorf("host %s: %v", spec.Name, err)
		}
		return h, nil
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort(h.ip, "0"))
	if err != nil && !loopbackOnly.Load() {
		loopbackOnly.Store(true)
		h.ip = hostIP(i)
		ln, err = net.Listen("tcp4", net.JoinHostPort(h.ip, "0"))
	}
	if err != nil {
		return nil, fmt.Errorf("host %s: %v", spec.Name, err)
	}
	h.ln = ln
	h.port = ln.Addr().(*net.TCPAddr).Port
	return h, nil
}

// Hosts lists the hosts in the order of the specs.
func (f *Fleet) Hosts() []HostInfo {
	out := make([]HostInfo, len(f.hosts))
	for i, h := range f.hosts {
		out[i] = h.info()
	}
	return out
}

func (h *host) info() HostInfo {
	h.keyMu.Lock()
	defer h.keyMu.Unlock()
	return HostInfo{Name: h.spec.Name, Host: h.ip, Port: h.port, HostKey: h.signer.PublicKey(), Failure: h.spec.Failure}
}

// Host returns one host by name.
func (f *Fleet) Host(name string) (HostInfo, bool) {
	h, ok := f.byName[name]
	if !ok {
		return HostInfo{}, false
	}
	return h.info(), true
}

// Spec returns the spec a host runs with, defaults filled in.
func (f *Fleet) Spec(name string) (HostSpec, bool) {
	h, ok := f.byName[name]
	if !ok {
		return HostSpec{}, false
	}
	return h.spec, true
}

// GPUUUID is the uuid the host's GPU index reports.
func (f *Fleet) GPUUUID(name string, index int) string {
	h, ok := f.byName[name]
	if !ok || index < 0 || index >= len(h.gpus) {
		return ""
	}
	return h.gpus[index].uuid
}

// Signer is the client key the fleet accepts (the one WriteClientFiles writes).
func (f *Fleet) Signer() ssh.Signer { return f.signer }

// Stats sums what every host served.
func (f *Fleet) Stats() Stats {
	var s Stats
	for _, h := range f.hosts {
		t := h.count.stats()
		s.Accepted += t.Accepted
		s.Authed += t.Authed
		s.Sessions += t.Sessions
		s.Execs += t.Execs
	}
	return s
}

// HostStats is what one host served.
func (f *Fleet) HostStats(name string) Stats {
	if h, ok := f.byName[name]; ok {
		return h.count.stats()
	}
	return Stats{}
}

// Close stops every listener, drops every connection (hung sessions too)
// and waits for every goroutine the fleet started.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		f.closed = true
		close(f.done)
		for c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
		for _, h := range f.hosts {
			if h.ln != nil {
				_ = h.ln.Close()
			}
			if h.reserved != nil {
				_ = h.reserved.Close()
			}
		}
	})
	f.wg.Wait()
	return nil
}

func (f *Fleet) acceptLoop(h *host) {
	defer f.wg.Done()
	var delay time.Duration
	for {
		c, err := h.ln.Accept()
		if err != nil {
			select {
			case <-f.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off and retry, as net/http does
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
			case <-f.done:
				return
			}
			continue
		}
		delay = 0
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			_ = c.Close()
			return
		}
		f.conns[c] = h
		f.wg.Add(1)
		f.mu.Unlock()
		h.count.accepted.Add(1)
		go f.serveConn(h, c)
	}
}

func (f *Fleet) untrack(c net.Conn) {
	_ = c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

func (f *Fleet) serveConn(h *host, c net.Conn) {
	defer f.wg.Done()
	defer f.untrack(c)
	if h.spec.Failure == Silent {
		// hold the connection, say nothing, until the client or Close ends it
		_, _ = io.Copy(io.Discard, c)
		return
	}
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	h.keyMu.Lock()
	cfg := h.cfg
	h.keyMu.Unlock()
	sconn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sconn.Close()
	_ = c.SetDeadline(time.Time{})
	h.count.authed.Add(1)
	connDone := make(chan struct{})
	defer close(connDone)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		ssh.DiscardRequests(reqs)
	}()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions here")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		h.count.sessions.Add(1)
		f.wg.Add(1)
		go f.serveSession(h, c, connDone, ch, creqs)
	}
}

// serveSession answers a session's requests; an exec runs in its own goroutine.
func (f *Fleet) serveSession(h *host, c net.Conn, connDone <-chan struct{}, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer f.wg.Done()
	sessDone := make(chan struct{})
	defer close(sessDone)
	execd := false
	for req := range reqs {
		ok := false
		switch req.Type {
		case "exec":
			var p struct{ Command string }
			if execd || ssh.Unmarshal(req.Payload, &p) != nil {
				break
			}
			ok, execd = true, true
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer ch.Close()
				f.exec(h, c, p.Command, ch, connDone, sessDone)
			}()
		case "env", "pty-req", "shell", "subsystem":
			// sshd without AcceptEnv refuses env; no shells or subsystems here
		}
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
	if !execd {
		_ = ch.Close()
	}
}

// yes is what `yes` prints, 64 KiB at a time.
var yes = bytes.Repeat([]byte("y\n"), 32<<10)

// flood writes until the channel is closed: the client hung up, or the
// connection or the fleet was closed.
func flood(w io.Writer) {
	for {
		if _, err := w.Write(yes); err != nil {
			return
		}
	}
}

func exitStatus(ch ssh.Channel, code int) {
	_ = ch.CloseWrite()
	_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
}

// exec runs one command: the probe script, or (anything else) a failure.
func (f *Fleet) exec(h *host, c net.Conn, cmd string, ch ssh.Channel, connDone, sessDone <-chan struct{}) {
	h.count.execs.Add(1)
	wait := func(d time.Duration) bool {
		var t <-chan time.Time
		if d > 0 {
			timer := time.NewTimer(d)
			defer timer.Stop()
			t = timer.C
		}
		select {
		case <-t:
			return true
		case <-f.done:
		case <-connDone:
		case <-sessDone:
		}
		return false
	}
	if h.spec.Failure == HangForever {
		wait(0)
		return
	}
	if h.spec.Failure == Flood || h.spec.Failure == FloodStderr {
		var w io.Writer = ch
		if h.spec.Failure == FloodStderr {
			w = ch.Stderr()
		}
		flood(w)
		return
	}
	if cmd != probe.Command {
		fmt.Fprintf(ch.Stderr(), "sh: 1: %s: not found\n", cmd)
		exitStatus(ch, 127)
		return
	}
	script, err := io.ReadAll(io.LimitReader(ch, 1<<20))
	if err != nil {
		return
	}
	start := time.Now()
	req, err := parseScript(string(script))
	if err != nil {
		fmt.Fprintf(ch.Stderr(), "simfleet: %v\n", err)
		exitStatus(ch, 2)
		return
	}
	var out bytes.Buffer
	out.Grow(4096)
	w := probe.Writer{W: &out, Nonce: req.Nonce}
	if h.amd != nil {
		h.answerAMD(w, req)
		if _, err := ch.Write(out.Bytes()); err == nil {
			exitStatus(ch, 0)
		}
		return
	}
	gpusRun := rendered{}
	if h.spec.Failure == HangNvidiaSMI {
		// timeout(1) on the host ends nvidia-smi after T seconds; T <= 0
		// (`timeout 0`) never does
		if req.NVTimeout <= 0 || !wait(time.Duration(req.NVTimeout)*time.Second) {
			return
		}
		gpusRun.code = exitTimeout
	} else {
		gpusRun = h.gpusAnswer(h.queryFields(req))
	}
	_ = w.Section(probe.SectionGPUs, gpusRun.body, gpusRun.code)
	if h.spec.Failure == DropMidOutput {
		part := out.Bytes()[:out.Len()*2/3]
		_, _ = ch.Write(part)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		_ = c.Close()
		return
	}
	hasPIDs := false
	if gpusRun.code != exitTimeout && gpusRun.code != 137 {
		a := h.appsAnswer(req.AppFields)
		_ = w.Section(probe.SectionApps, a.apps.body, a.apps.code)
		if hasPIDs = a.hasPS; hasPIDs {
			_ = w.Section(probe.SectionPS, a.ps.body, a.ps.code)
			h.writeAttrib(w, req, a.attrib)
		}
	}
	_ = w.Section(probe.SectionHost, h.hostBody, 0)
	if req.StateFile != "" && h.spec.Idlemon != "" {
		_ = w.Section(probe.SectionIdlemon, []byte(h.spec.Idlemon), 0)
	}
	h.writeHealth(w, req, hasPIDs)
	if req.ProcessUtil && hasPIDs && h.spec.PmonDelay > 0 {
		// the script started pmon first thing, beside everything else
		if left := h.spec.PmonDelay - time.Since(start); left > 0 && !wait(left) {
			return
		}
	}
	_ = w.Done()
	if _, err := ch.Write(out.Bytes()); err != nil {
		return
	}
	exitStatus(ch, 0)
}

// parseScript is probe.ParseScript, run first on the lines before the body
// (the variables come first): the regexp over the whole script costs more
// than the rest of the answer.
func parseScript(script string) (probe.Request, error) {
	if i := strings.Index(script, "\nexport "); i > 0 {
		if req, err := probe.ParseScript(script[:i+1]); err == nil {
			return req, nil
		}
	}
	return probe.ParseScript(script)
}
