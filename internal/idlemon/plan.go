package idlemon

import (
	"errors"
	"fmt"
	"io"
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
	Devices []holders.Device
	Jobs    []jobPlan
	Ignore  map[int][]string // GPU -> programs that do not make it busy
	RunAs   string           // user the jobs run as ("" = idlemon's own)
	JobUID  int              // the jobs' real uid
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
	return p, nil
}

// findDevices finds the config's device files, and so the GPUs.
func (p *hostPlan) findDevices() error {
	cfg := p.Cfg
	devs, err := holders.Find(cfg.Devices)
	if err != nil {
		return cfg.ErrorAt("defaults", "devices", "%v", err)
	}
	if len(devs) == 0 {
		e := cfg.ErrorAt("defaults", "devices", "no device files match %s", cfg.Devices)
		e.HintText = "is the NVIDIA driver loaded (ls /dev/nvidia*)? set devices in [defaults] if they are elsewhere"
		return e
	}
	p.Devices = devs
	for _, d := range devs {
		p.Ignore[d.Index] = cfg.IgnoreFor(d.Index)
	}
	return nil
}

// allGPUs lists the indices of the GPUs found.
func (p *hostPlan) allGPUs() []int {
	all := make([]int, len(p.Devices))
	for i, d := range p.Devices {
		all[i] = d.Index
	}
	return all
}

// checkGPUs says which of the gpus that section names has no device file.
func (p *hostPlan) checkGPUs(section string, gpus []int) error {
	for _, i := range gpus {
		if !slices.ContainsFunc(p.Devices, func(d holders.Device) bool { return d.Index == i }) {
			e := p.Cfg.ErrorAt(section, "gpus", "gpu %d has no device file among %s", i, p.Cfg.Devices)
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
		Env: jobEnv(userEnv, j.GPUs),
	}
	return j, nil
}

func jobEnv(userEnv []string, gpus []int) []string {
	base := os.Environ()
	set := append([]string(nil), userEnv...)
	if os.Getenv("PATH") == "" {
		set = append(set, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if os.Getenv("CUDA_DEVICE_ORDER") == "" {
		// so that CUDA's indices are nvidia-smi's (and the device files')
		set = append(set, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	}
	set = append(set, "CUDA_VISIBLE_DEVICES="+joinInts(gpus))
	return supervisor.Env(base, set...)
}

// describe prints what the plan will do.
func (p *hostPlan) describe(w io.Writer) {
	c := p.Cfg
	fmt.Fprintf(w, "%s: ok\n", c.Path)
	var ds []string
	for _, d := range p.Devices {
		ds = append(ds, fmt.Sprintf("%d=%s", d.Index, d.Path))
	}
	fmt.Fprintf(w, "gpus: %s (devices %s)\n", strings.Join(ds, " "), c.Devices)
	fmt.Fprintf(w, "scan: on every open of a device file (inotify), and every %s\n", fmtDur(c.Interval))
	for _, d := range p.Devices {
		fmt.Fprintf(w, "gpu %d: ignored programs: %s\n", d.Index, strings.Join(p.Ignore[d.Index], ", "))
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
		fmt.Fprintf(w, "job %s: when %s for %s, runs /bin/sh -c %q in %s as %s with CUDA_VISIBLE_DEVICES=%s; output %s; stopped by SIGTERM to each of its processes, SIGKILL after %s\n",
			j.Sec.Name, when, fmtDur(c.MinIdle), j.Sec.Cmd, j.Sec.Dir, runAs, joinInts(j.GPUs), out, fmtDur(c.Grace))
	}
	if c.TTY.Enabled {
		wl := "nobody"
		if len(c.TTY.Whitelist) > 0 {
			wl = strings.Join(c.TTY.Whitelist, ", ")
		}
		fmt.Fprintf(w, "tty: every job pauses while a user types at a terminal within %s (whitelisted: %s)\n", fmtDur(c.TTY.Idle), wl)
	} else {
		fmt.Fprintf(w, "tty: not watched\n")
	}
	fmt.Fprintf(w, "state file: %s\n", c.StateFile)
	if warn := folderWarning(c.StateFile); warn != "" {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}
