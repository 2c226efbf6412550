package idlemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/supervisor"
)

// options are the daemon's knobs that are not in the config file (tests
// point them elsewhere).
type options struct {
	Log         io.Writer     // the one-line log; idlemon's stderr
	JobStdout   *os.File      // where jobs without a log write; idlemon's stdout
	TTYDev      string        // "/dev"
	Utmp        string        // "/var/run/utmp"
	BackoffBase time.Duration // first restart delay of a job that exits by itself (1s)
	BackoffMax  time.Duration // 5 min
	BackoffOK   time.Duration // a run this long resets the back-off (10 min)
	// Rechecks are the delays of the scans after an inotify open event whose
	// first scan found nobody new: the event comes before the opener's fd is
	// installed.
	Rechecks []time.Duration
	// ProcsEvery is how often a scan lists every process of a running job
	// (for the state file), which means reading every process's stat line
	// (60s; more often while the job is younger than 4*ProcsEvery). A scan
	// in between only walks up from the GPU holders; it lists the job again
	// when one of its processes holds a GPU and is not listed.
	ProcsEvery time.Duration
}

func (o *options) defaults() {
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.JobStdout == nil {
		o.JobStdout = os.Stdout
	}
	if o.BackoffBase == 0 {
		o.BackoffBase = time.Second
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = 5 * time.Minute
	}
	if o.BackoffOK == 0 {
		o.BackoffOK = 10 * time.Minute
	}
	if o.Rechecks == nil {
		o.Rechecks = []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}
	}
	if o.ProcsEvery == 0 {
		o.ProcsEvery = time.Minute
	}
}

// hostPlan is a config resolved against this machine: device files found, users
// looked up. Everything that can be wrong is found here, before anything
// starts. It holds no runtime state.
type hostPlan struct {
	Cfg     *config.Config
	Vendor  string           // config.VendorNVIDIA or config.VendorAMD, never auto
	Note    string           // what the choice of vendor left out (a host with both), or ""
	Devices []holders.Device // the device files watched: on AMD /dev/kfd and the render nodes
	GPUs    []int            // the GPUs' indices, sorted
	AMD     *holders.AMDHost // on an AMD host, else nil
	Jobs    []jobPlan
	Ignore  map[int][]string // GPU -> programs that do not make it busy
	RunAs   string           // user the jobs run as ("" = idlemon's own)
	JobUID  int              // the jobs' real uid
	Cgroup  cgroupPlan
	cred    *syscall.Credential
}

// jobPlan is one [process-*] section, resolved.
type jobPlan struct {
	Sec  config.JobSection
	GPUs []int // resolved (ALL = every GPU found)
	Spec supervisor.Spec
}

// resolve checks cfg against this machine.
func resolve(cfg *config.Config) (*hostPlan, error) {
	p := &hostPlan{Cfg: cfg, Ignore: map[int][]string{}, JobUID: os.Getuid()}
	if err := checkStopTimeout(cfg); err != nil {
		return nil, err
	}
	if err := p.findDevices(); err != nil {
		return nil, err
	}
	for _, g := range cfg.GPUs {
		if err := p.checkGPUs(g.Name, g.GPUs); err != nil {
			return nil, err
		}
	}
	var env []string
	if len(cfg.Jobs) > 0 {
		var err error
		if env, err = p.jobUser(); err != nil {
			return nil, err
		}
	}
	for _, sec := range cfg.Jobs {
		j, err := p.resolveJob(sec, env)
		if err != nil {
			return nil, err
		}
		p.Jobs = append(p.Jobs, j)
	}
	if err := p.resolveCgroup(); err != nil {
		return nil, err
	}
	if err := checkTextfileDir(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// checkTextfileDir says what is wrong with textfile_dir: it must be a
// folder that exists (node_exporter's package makes it).
func checkTextfileDir(cfg *config.Config) error {
	if cfg.TextfileDir == "" {
		return nil
	}
	fi, err := os.Stat(cfg.TextfileDir)
	if err == nil && fi.IsDir() {
		return nil
	}
	e := cfg.ErrorAt("defaults", "textfile_dir", "%s is not a folder", cfg.TextfileDir)
	if errors.Is(err, fs.ErrNotExist) {
		e.Msg = cfg.TextfileDir + " does not exist"
	}
	e.HintText = "name node_exporter's --collector.textfile.directory (Debian: /var/lib/prometheus/node-exporter), or remove the key"
	return e
}

// findDevices finds the GPUs and their device files of the vendor the
// config names, or of the one this machine has (chooseVendor).
func (p *hostPlan) findDevices() error {
	cfg := p.Cfg
	nvidia, _ := filepath.Glob(cfg.Devices)
	_, kfdErr := os.Stat(cfg.KFDDevice)
	p.Vendor, p.Note = chooseVendor(cfg.Vendor, cfg.DevicesSet, len(nvidia) > 0, kfdErr == nil, cfg.KFDDevice)
	var err error
	if p.Vendor == config.VendorAMD {
		err = p.findAMD()
	} else {
		err = p.findNVIDIA()
	}
	if err != nil {
		return err
	}
	for _, i := range p.GPUs {
		p.Ignore[i] = cfg.IgnoreFor(i)
		if p.Vendor == config.VendorAMD {
			for _, name := range amdIgnore {
				if !slices.Contains(p.Ignore[i], name) {
					p.Ignore[i] = append(p.Ignore[i], name)
				}
			}
		}
	}
	return nil
}

// amdIgnore are AMD's monitors, never busy on an AMD host: amd-smi and
// rocm-smi open the GPUs' device files while they run, /dev/kfd too on
// an MI300, without VRAM (fetch runs one of them every round).
var amdIgnore = []string{"amd-smi", "rocm-smi"}

// chooseVendor is the vendor a config watches: the one it names; else
// NVIDIA where devices is set (the glob names NVIDIA's files, as in
// gpu_mon) or NVIDIA's device files exist, so that a config that worked
// goes on working on a host that also has an AMD GPU (an APU's, say); else
// AMD where kfd (/dev/kfd) exists; else NVIDIA, whose missing files are
// then the error. note says what a host with both leaves out.
func chooseVendor(named string, devicesSet, nvidiaFiles, kfdExists bool, kfd string) (vendor, note string) {
	switch {
	case named != config.VendorAuto:
		return named, ""
	case (devicesSet || nvidiaFiles) && kfdExists:
		return config.VendorNVIDIA, "this host has AMD GPUs too (" + kfd + "): not watched; one idlemon watches one vendor (a second one with vendor = amd and its own state_file watches them)"
	case devicesSet || nvidiaFiles || !kfdExists:
		return config.VendorNVIDIA, ""
	}
	return config.VendorAMD, ""
}

// findNVIDIA finds the device files of the devices glob: one per GPU, the
// index in its name.
func (p *hostPlan) findNVIDIA() error {
	cfg := p.Cfg
	devs, err := holders.Find(cfg.Devices)
	if err != nil {
		return cfg.ErrorAt("defaults", "devices", "%v", err)
	}
	if len(devs) == 0 {
		e := cfg.ErrorAt("defaults", "devices", "no device files match %s", cfg.Devices)
		e.HintText = "is the NVIDIA driver loaded (ls /dev/nvidia*)? set devices in [defaults] if they are elsewhere; vendor = amd for AMD GPUs (/dev/kfd)"
		return e
	}
	p.Devices = devs
	for _, d := range devs {
		p.GPUs = append(p.GPUs, d.Index)
	}
	return nil
}

// findAMD reads the KFD topology (the GPUs, numbered as ROCm numbers
// them) and finds /dev/kfd and the GPUs' render nodes.
func (p *hostPlan) findAMD() error {
	cfg := p.Cfg
	if _, err := os.Stat(cfg.KFDDevice); err != nil {
		e := cfg.ErrorAt("defaults", "kfd_device", "%v", err)
		if errors.Is(err, fs.ErrNotExist) {
			e.Msg = "no " + cfg.KFDDevice
		}
		e.HintText = "is the amdgpu driver loaded with ROCm's KFD (ls -l /dev/kfd)? vendor = nvidia for NVIDIA GPUs"
		return e
	}
	h, err := holders.FindAMD(cfg.KFDDevice, p.renderGlob(), cfg.KFDSysfs)
	if err != nil {
		e := cfg.ErrorAt("defaults", "kfd_sysfs", "%v", err)
		e.HintText = "idlemon numbers the GPUs as ROCm does from " + cfg.KFDSysfs + "/topology/nodes; set kfd_sysfs if it is elsewhere"
		return e
	}
	p.AMD, p.Devices = h, h.Devices()
	for _, g := range h.GPUs {
		p.GPUs = append(p.GPUs, g.Index)
	}
	return nil
}

// renderGlob is the glob of an AMD host's render nodes.
func (p *hostPlan) renderGlob() string {
	if p.Cfg.DevicesSet {
		return p.Cfg.Devices
	}
	return holders.DefaultRenderGlob
}

// allGPUs lists the indices of the GPUs found.
func (p *hostPlan) allGPUs() []int { return slices.Clone(p.GPUs) }

// checkGPUs says which of the gpus that section names this host has not.
func (p *hostPlan) checkGPUs(section string, gpus []int) error {
	for _, i := range gpus {
		if !slices.Contains(p.GPUs, i) {
			e := p.Cfg.ErrorAt(section, "gpus", "gpu %d has no device file among %s", i, p.Cfg.Devices)
			if p.AMD != nil {
				e.Msg = fmt.Sprintf("gpu %d is not among the GPUs of %s/topology", i, p.AMD.Sysfs)
			}
			e.HintText = "found gpus " + joinInts(p.allGPUs())
			return e
		}
	}
	return nil
}

// jobUser checks who the jobs run as, and can, and returns the
// environment that user's jobs get (HOME, USER...); nil when they run as
// idlemon's own user.
func (p *hostPlan) jobUser() (env []string, err error) {
	cfg := p.Cfg
	euid := os.Geteuid()
	if cfg.User == "" {
		if euid != 0 {
			return nil, nil
		}
		e := cfg.ErrorAt("defaults", "user", "no user to run the jobs as, and idlemon runs as root")
		if e.Line == 0 {
			e.Key = ""
			e.Msg = "no user to run the jobs as ([defaults] user), and idlemon runs as root"
		}
		e.HintText = "add user = NAME to [defaults] (e.g. a system user made with useradd --system idlejob); user = root runs them as root"
		return nil, e
	}
	cred, env, err := supervisor.Credential(cfg.User)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		e := cfg.ErrorAt("defaults", "user", "no such user %s", cfg.User)
		e.HintText = "create it (useradd --system " + cfg.User + "), or name another"
		return nil, e
	}
	if err != nil {
		return nil, cfg.ErrorAt("defaults", "user", "%v", err)
	}
	if euid != 0 && int(cred.Uid) != euid {
		e := cfg.ErrorAt("defaults", "user", "idlemon runs as uid %d and cannot start jobs as %s", euid, cfg.User)
		e.HintText = "run idlemon as root (the systemd unit does), or remove user"
		return nil, e
	}
	p.RunAs, p.JobUID = cfg.User, int(cred.Uid)
	if euid == 0 {
		p.cred = cred // else already that user; setgroups would need root
	}
	return env, nil
}

// resolveJob checks a [process-*] section against this machine: its GPUs,
// its folder, its log's folder. userEnv is the jobs' user's environment.
func (p *hostPlan) resolveJob(sec config.JobSection, userEnv []string) (jobPlan, error) {
	j := jobPlan{Sec: sec, GPUs: sec.GPUs}
	if sec.All {
		j.GPUs = p.allGPUs()
	}
	if err := p.checkGPUs(sec.Name, j.GPUs); err != nil {
		return j, err
	}
	if fi, err := os.Stat(sec.Dir); err != nil || !fi.IsDir() {
		return j, p.Cfg.ErrorAt(sec.Name, "dir", "%s is not a folder", sec.Dir)
	}
	if sec.Log != "" {
		if fi, err := os.Stat(filepath.Dir(sec.Log)); err != nil || !fi.IsDir() {
			return j, p.Cfg.ErrorAt(sec.Name, "log", "the folder of %s does not exist", sec.Log)
		}
	}
	j.Spec = supervisor.Spec{
		Name: sec.Name, Cmd: sec.Cmd, Dir: sec.Dir, Log: sec.Log, Cred: p.cred, Grace: p.Cfg.Grace,
		Env: jobEnv(os.Environ(), userEnv, p.Vendor, j.GPUs), Limits: cgroupLimits(sec.Limits),
	}
	return j, nil
}

// rocmSelectors are the variables that pick GPUs among those ROCr shows a
// HIP or OpenCL program: inherited, they would index within the job's
// ROCR_VISIBLE_DEVICES and hide its GPUs or pick the wrong one.
var rocmSelectors = []string{"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"}

// jobEnv is a job's environment: base (idlemon's) with the jobs' user's
// variables and the ones that show the job its GPUs, and only those.
// NVIDIA: CUDA_VISIBLE_DEVICES, in nvidia-smi's order. AMD:
// ROCR_VISIBLE_DEVICES, which ROCm's runtime counts as the KFD topology
// does (idlemon's indices), and which every ROCm program honours; HIP's
// HIP_VISIBLE_DEVICES (and CUDA_VISIBLE_DEVICES, its alias) count within
// that list, so they are left unset rather than given the same indices.
func jobEnv(base, userEnv []string, vendor string, gpus []int) []string {
	set := append([]string(nil), userEnv...)
	if envValue(base, "PATH") == "" {
		set = append(set, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if vendor == config.VendorAMD {
		base = slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
			name, _, _ := strings.Cut(kv, "=")
			return slices.Contains(rocmSelectors, name)
		})
		return supervisor.Env(base, append(set, "ROCR_VISIBLE_DEVICES="+joinInts(gpus))...)
	}
	if envValue(base, "CUDA_DEVICE_ORDER") == "" {
		// so that CUDA's indices are nvidia-smi's (and the device files')
		set = append(set, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	}
	set = append(set, "CUDA_VISIBLE_DEVICES="+joinInts(gpus))
	return supervisor.Env(base, set...)
}

// envValue is name's value in env ("" when unset).
func envValue(env []string, name string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// visibleVar is the variable that shows a job its GPUs.
func (p *hostPlan) visibleVar() string {
	if p.Vendor == config.VendorAMD {
		return "ROCR_VISIBLE_DEVICES"
	}
	return "CUDA_VISIBLE_DEVICES"
}

// describe prints what the plan will do.
func (p *hostPlan) describe(w io.Writer) {
	c := p.Cfg
	fmt.Fprintf(w, "%s: ok\n", c.Path)
	p.describeGPUs(w)
	if p.Note != "" {
		fmt.Fprintf(w, "note: %s\n", p.Note)
	}
	fmt.Fprintf(w, "scan: on every open of a device file (inotify), and every %s\n", fmtDur(c.Interval))
	for _, i := range p.GPUs {
		fmt.Fprintf(w, "gpu %d: ignored programs: %s\n", i, strings.Join(p.Ignore[i], ", "))
	}
	if len(p.Jobs) == 0 {
		fmt.Fprintf(w, "jobs: none (idlemon only watches and writes the state file)\n")
	}
	runAs := p.RunAs
	if runAs == "" {
		runAs = "idlemon's own user"
	}
	for _, j := range p.Jobs {
		when := "gpu " + joinInts(j.GPUs) + " idle"
		if j.Sec.All {
			when = "every gpu (" + joinInts(j.GPUs) + ") idle"
		}
		out := "idlemon's stdout"
		if j.Sec.Log != "" {
			out = "appended to " + j.Sec.Log
		}
		fmt.Fprintf(w, "job %s: when %s for %s, runs /bin/sh -c %q in %s as %s with %s=%s; output %s; stopped by SIGTERM to each of its processes, SIGKILL after %s\n",
			j.Sec.Name, when, fmtDur(c.MinIdle), j.Sec.Cmd, j.Sec.Dir, runAs, p.visibleVar(), joinInts(j.GPUs), out, fmtDur(c.Grace))
	}
	p.describeCgroup(w)
	if c.TTY.Enabled {
		wl := "nobody"
		if len(c.TTY.Whitelist) > 0 {
			wl = strings.Join(c.TTY.Whitelist, ", ")
		}
		fmt.Fprintf(w, "tty: every job pauses while a user types at a terminal within %s (whitelisted: %s)\n", fmtDur(c.TTY.Idle), wl)
	} else {
		fmt.Fprintf(w, "tty: not watched\n")
	}
	describeStopTimeout(w, c.Grace)
	fmt.Fprintf(w, "state file: %s\n", c.StateFile)
	if warn := folderWarning(c.StateFile); warn != "" {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

// describeGPUs prints the vendor, the GPUs and the device files that tell
// who uses them.
func (p *hostPlan) describeGPUs(w io.Writer) {
	if p.AMD == nil {
		var ds []string
		for _, d := range p.Devices {
			ds = append(ds, fmt.Sprintf("%d=%s", d.Index, d.Path))
		}
		fmt.Fprintf(w, "gpus: %s (NVIDIA, devices %s)\n", strings.Join(ds, " "), p.Cfg.Devices)
		return
	}
	h := p.AMD
	render := map[int]string{}
	for _, d := range h.Render {
		render[d.Index] = d.Path
	}
	var gs []string
	for _, g := range h.GPUs {
		r := render[g.Index]
		if r == "" {
			r = "no render node"
		}
		gs = append(gs, fmt.Sprintf("%d=%s (%s, gpu_id %d)", g.Index, r, orDash(g.BusID), g.GPUID))
	}
	fmt.Fprintf(w, "gpus: %s (AMD, render nodes %s)\n", strings.Join(gs, " "), p.renderGlob())
	fmt.Fprintf(w, "amd: %s, shared by every GPU: a process holds the GPUs its KFD entry (%s/proc/PID) shows VRAM on, every GPU until it has some\n", h.KFD.Path, h.Sysfs)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
