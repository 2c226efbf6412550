// Package config reads idlemon's config file: the ini file of the older
// Python tool (gpu_mon) as it is ([defaults] interval_seconds, [gpu-*],
// [process-*], [tty]), plus the keys idlemon adds (devices,
// min_idle_seconds, grace_seconds, user, state_file, and for AMD hosts
// vendor, kfd_device, kfd_sysfs). It is read the way
// Python's configparser reads it (keys case-insensitive, '#'/';' comment
// lines, no inline comments) and checked strictly: an unknown section or key,
// or a value that does not parse, is an error naming the file, the line and
// the key, before anything starts.
package config

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/ignore"
	"github.com/gpumon/gpumon/internal/inifile"
)

// DefaultPath is where idlemon looks for its config without -c.
const DefaultPath = "/etc/idlemon.ini"

// Defaults, documented in idlemon.example.ini.
const (
	defaultInterval = 10 * time.Second
	defaultMinIdle  = 30 * time.Second
	defaultGrace    = 10 * time.Second
	defaultTTYIdle  = 300 * time.Second
	defaultDevices  = "/dev/nvidia[0-9]*"
)

// Vendors: which GPUs idlemon watches. Auto picks by the device files
// found (see the hostPlan's resolve).
const (
	VendorAuto   = "auto"
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
)

// Config is the whole file, validated.
type Config struct {
	Path string // the file it came from, for messages

	Interval  time.Duration // [defaults] interval_seconds: the fallback scan period
	MinIdle   time.Duration // min_idle_seconds: how long a GPU stays idle before a job starts
	Grace     time.Duration // grace_seconds: SIGTERM to SIGKILL
	Devices   string        // glob of the GPU device files (NVIDIA's default unless DevicesSet)
	User      string        // run jobs as this user; "" = not set
	StateFile string

	Vendor     string // VendorAuto, VendorNVIDIA or VendorAMD
	DevicesSet bool   // devices is in the file (else each vendor's default)
	KFDDevice  string // AMD: /dev/kfd
	KFDSysfs   string // AMD: the KFD driver's sysfs folder

	// Cgroup is where the jobs' cgroups go: CgroupAuto (the cgroup v2
	// group idlemon runs in, as systemd's Delegate=yes gives it), CgroupOff
	// (marks only), or an absolute folder inside a cgroup2 mount.
	Cgroup      string
	Limits      Limits // [defaults]' limits: every job's unless its section sets its own
	TextfileDir string // node_exporter's textfile folder: idlemon.prom goes there; "" = none

	GPUs []GPUSection // [gpu-*]
	Jobs []JobSection // [process-*]
	TTY  TTY

	file *inifile.File // for ErrorAt
}

// GPUSection is a [gpu-*] section: programs to ignore on some GPUs.
type GPUSection struct {
	Name   string
	All    bool  // gpus = ALL
	GPUs   []int // when not All
	Ignore []string
}

// JobSection is a [process-*] section: the job to run on idle GPUs.
type JobSection struct {
	Name string // the section name, e.g. process-miner
	Dir  string // working folder ("" = /)
	Cmd  string // run with /bin/sh -c
	All  bool   // gpus = ALL: runs only when every GPU is idle
	GPUs []int  // when not All
	Log  string // appended to; "" = idlemon's own stdout
	// Limits are [defaults]' with this section's own keys over them.
	Limits Limits
}

// Cgroup modes besides a folder.
const (
	CgroupAuto = "auto"
	CgroupOff  = "off"
)

// Limits bound what one run of a job may take of the host. 0 means not set
// (no limit), except CPUWeight, which defaults to the lowest.
type Limits struct {
	CPUWeight  int   // cgroup v2 cpu.weight, 1 to 10000 (v1: cpu.shares scaled); default 1
	MemoryHigh int64 // bytes: memory.high, throttled and reclaimed above it
	MemoryMax  int64 // bytes: memory.max, the job's OOM killer above it
	PidsMax    int64 // pids.max: fork fails above it
}

// DefaultCPUWeight is the lowest weight: the job gets CPU time only when
// nobody else wants it.
const DefaultCPUWeight = 1

// TTY is the [tty] section.
type TTY struct {
	Enabled   bool
	Whitelist []string
	Idle      time.Duration
}

// layout is the file's layout. Any section whose name starts with gpu or
// process is one of those, as in gpu_mon ([gpus] included).
var layout = inifile.Layout{
	Sections: []inifile.SectionRule{
		{Name: "defaults", Keys: append([]string{"interval_seconds", "devices", "min_idle_seconds", "grace_seconds", "user", "state_file", "vendor", "kfd_device", "kfd_sysfs", "cgroup", "textfile_dir"}, limitKeys...)},
		{Name: "gpu", Prefix: true, Shown: "[gpu-NAME]", Keys: []string{"gpus", "ignore_programs"}},
		{Name: "process", Prefix: true, Shown: "[process-NAME]", Keys: append([]string{"dir", "cmd", "gpus", "log"}, limitKeys...)},
		{Name: "tty", Keys: []string{"enabled", "whitelist", "idle_seconds"}},
	},
	Home: "defaults",
}

// Limits of the *_seconds keys: a scan needs a period, the others may be 0;
// a year is more than anyone means.
var (
	aboveZero  = inifile.Limits[time.Duration]{Min: time.Millisecond, Max: 365 * 24 * time.Hour, Want: "a number of seconds above 0"}
	zeroOrMore = inifile.Limits[time.Duration]{Max: 365 * 24 * time.Hour, Want: "a number of seconds (0 or more)"}
)

const gpusHint = "gpus = ALL, or indices like 0,1,3"

// Load reads and validates the file at path.
func Load(path string) (*Config, error) { return inifile.Decode(path, configFrom) }

// Parse reads and validates a config from r; name is used in messages and
// to resolve relative paths (relative to the file's folder).
func Parse(r io.Reader, name string) (*Config, error) {
	return inifile.DecodeReader(r, name, configFrom)
}

func configFrom(f *inifile.File) (*Config, error) {
	if err := f.Check(layout); err != nil {
		return nil, err
	}
	c := &Config{
		Path:      f.Name,
		Interval:  defaultInterval,
		MinIdle:   defaultMinIdle,
		Grace:     defaultGrace,
		Devices:   defaultDevices,
		StateFile: idlestate.DefaultPath,
		TTY:       TTY{Idle: defaultTTYIdle},
		Vendor:    VendorAuto,
		KFDDevice: holders.DefaultKFDDevice,
		KFDSysfs:  holders.DefaultKFDSysfs,
		Cgroup:    CgroupAuto,
		Limits:    Limits{CPUWeight: DefaultCPUWeight},
		file:      f,
	}
	// [defaults]' limits first: every job section starts from them,
	// wherever [defaults] is in the file.
	if err := readLimits(f.Section("defaults"), &c.Limits); err != nil {
		return nil, err
	}
	for _, sec := range f.Sections() {
		var err error
		switch rule, _ := layout.Rule(sec.Name()); rule.Name {
		case "defaults":
			err = c.readDefaults(sec)
		case "tty":
			err = c.readTTY(sec)
		case "gpu":
			err = c.readGPU(sec)
		case "process":
			err = c.readJob(sec)
		}
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Config) readDefaults(sec inifile.Section) error {
	if err := sec.Seconds("interval_seconds", aboveZero, &c.Interval); err != nil {
		return err
	}
	if err := sec.Seconds("min_idle_seconds", zeroOrMore, &c.MinIdle); err != nil {
		return err
	}
	if err := sec.Seconds("grace_seconds", zeroOrMore, &c.Grace); err != nil {
		return err
	}
	if v, ok := sec.Path("devices"); ok {
		if v == "" {
			return sec.ErrorAt("devices", "empty: a glob of device files is needed, e.g. %s", defaultDevices)
		}
		if _, err := filepath.Match(v, ""); err != nil {
			return sec.ErrorAt("devices", "%q is not a valid glob: %v", v, err)
		}
		c.Devices, c.DevicesSet = v, true
	}
	if err := c.readVendor(sec); err != nil {
		return err
	}
	if v, ok := sec.Path("cgroup"); ok {
		switch raw, _ := sec.String("cgroup"); {
		case strings.EqualFold(raw, CgroupAuto) || strings.EqualFold(raw, CgroupOff):
			c.Cgroup = strings.ToLower(raw)
		case !filepath.IsAbs(raw):
			e := sec.ErrorAt("cgroup", "%q is not auto, off or an absolute folder in the cgroup v2 hierarchy", raw)
			e.HintText = "auto (the default) uses the cgroup systemd gives idlemon (Delegate=yes in the unit)"
			return e
		default:
			c.Cgroup = filepath.Clean(v)
		}
	}
	if v, ok := sec.Path("textfile_dir"); ok {
		if v == "" {
			return sec.ErrorAt("textfile_dir", "empty: name node_exporter's textfile folder, or remove the key")
		}
		c.TextfileDir = v
	}
	if v, ok := sec.String("user"); ok {
		if v == "" {
			return sec.ErrorAt("user", "empty: name the user the jobs run as")
		}
		c.User = v
	}
	if v, ok := sec.Path("state_file"); ok {
		if v == "" {
			return sec.ErrorAt("state_file", "empty")
		}
		c.StateFile = v
	}
	return nil
}

// readVendor reads vendor and the AMD keys.
func (c *Config) readVendor(sec inifile.Section) error {
	if v, ok := sec.String("vendor"); ok {
		v = strings.ToLower(strings.TrimSpace(v))
		if v != VendorAuto && v != VendorNVIDIA && v != VendorAMD {
			e := sec.ErrorAt("vendor", "%q is not auto, nvidia or amd", v)
			e.HintText = "auto (the default) watches NVIDIA's GPUs where /dev/nvidia0... exist, else AMD's where /dev/kfd does"
			return e
		}
		c.Vendor = v
	}
	for _, k := range []struct {
		key string
		dst *string
	}{{"kfd_device", &c.KFDDevice}, {"kfd_sysfs", &c.KFDSysfs}} {
		if v, ok := sec.Path(k.key); ok {
			if v == "" {
				return sec.ErrorAt(k.key, "empty")
			}
			*k.dst = v
		}
	}
	return nil
}

func (c *Config) readTTY(sec inifile.Section) error {
	if err := sec.Bool("enabled", &c.TTY.Enabled); err != nil {
		return err
	}
	if names, ok := sec.List("whitelist"); ok {
		c.TTY.Whitelist = names
	}
	return sec.Seconds("idle_seconds", zeroOrMore, &c.TTY.Idle)
}

func (c *Config) readGPU(sec inifile.Section) error {
	g := GPUSection{Name: sec.Name()}
	var err error
	if g.All, g.GPUs, err = readGPUs(sec); err != nil {
		return err
	}
	g.Ignore, _ = sec.List("ignore_programs")
	c.GPUs = append(c.GPUs, g)
	return nil
}

// readJob reads a [process-*] section; no two jobs share a GPU.
func (c *Config) readJob(sec inifile.Section) error {
	j := JobSection{Name: sec.Name(), Dir: "/"}
	if j.Cmd, _ = sec.String("cmd"); j.Cmd == "" {
		return sec.MissingKey("cmd", "cmd is the command line to run on idle GPUs")
	}
	var err error
	if j.All, j.GPUs, err = readGPUs(sec); err != nil {
		return err
	}
	for _, other := range c.Jobs {
		if j.All && other.All {
			return sec.ErrorAt("gpus", "ALL is already the GPUs of [%s]", other.Name)
		}
		for _, i := range j.GPUs {
			if slices.Contains(other.GPUs, i) {
				return sec.ErrorAt("gpus", "gpu %d is already in [%s]", i, other.Name)
			}
		}
	}
	if v, _ := sec.Path("dir"); v != "" {
		j.Dir = v
	}
	j.Log, _ = sec.Path("log")
	j.Limits = c.Limits
	if err := readLimits(sec, &j.Limits); err != nil {
		return err
	}
	c.Jobs = append(c.Jobs, j)
	return nil
}

// readGPUs reads the gpus key a [gpu-*] or [process-*] section must have.
func readGPUs(sec inifile.Section) (all bool, idx []int, err error) {
	v, ok := sec.String("gpus")
	if !ok {
		return false, nil, sec.MissingKey("gpus", gpusHint)
	}
	if all, idx, err = parseGPUs(v); err != nil {
		return false, nil, sec.ErrorAt("gpus", "%v", err)
	}
	return all, idx, nil
}

// parseGPUs reads "ALL" or a comma-separated list of indices.
func parseGPUs(v string) (all bool, idx []int, err error) {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "all") {
		return true, nil, nil
	}
	seen := map[int]bool{}
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 1023 {
			return false, nil, fmt.Errorf("%q is not ALL or a list of GPU indices like 0,1,3", v)
		}
		if !seen[n] {
			seen[n] = true
			idx = append(idx, n)
		}
	}
	sort.Ints(idx)
	return false, idx, nil
}

// ErrorAt returns an error pointing at section's key (or its header when
// the key is not in the file), for problems found after parsing: a user
// that does not exist, a GPU without a device file.
func (c *Config) ErrorAt(section, key, format string, args ...any) *inifile.Error {
	return c.file.ErrorAt(section, key, format, args...)
}

// IgnoreFor returns the programs that do not make gpu busy: ignore.Default
// (the list render uses too) followed by the ignore_programs of every
// [gpu-*] section that covers it, each name once.
func (c *Config) IgnoreFor(gpu int) []string {
	var extra []string
	for _, g := range c.GPUs {
		if g.All || slices.Contains(g.GPUs, gpu) {
			extra = append(extra, g.Ignore...)
		}
	}
	return ignore.With(extra...)
}

// limitKeys are the keys of Limits, in [defaults] and in each [process-*].
var limitKeys = []string{"cpu_weight", "memory_high", "memory_max", "pids_max"}

// readLimits reads sec's limit keys over l. A size or count of "max" (or
// "infinity", systemd's word) removes a limit [defaults] set.
func readLimits(sec inifile.Section, l *Limits) error {
	if err := sec.Int("cpu_weight", inifile.Limits[int]{Min: 1, Max: 10000}, &l.CPUWeight); err != nil {
		e := err.(*inifile.Error)
		e.HintText = "1 (the default) is the lowest: the job gets CPU time only when nobody else wants it; 100 is a normal process's"
		return e
	}
	for _, k := range []struct {
		key string
		dst *int64
	}{{"memory_high", &l.MemoryHigh}, {"memory_max", &l.MemoryMax}} {
		v, ok := sec.String(k.key)
		if !ok {
			continue
		}
		n, err := ParseSize(v)
		if err != nil {
			e := sec.ErrorAt(k.key, "%q is not a size: %v", v, err)
			e.HintText = "a size such as 512M, 8G or 1.5GiB (K, M, G, T count in 1024s), or max for no limit"
			return e
		}
		*k.dst = n
	}
	if v, ok := sec.String("pids_max"); ok {
		if isUnlimited(v) {
			l.PidsMax = 0
		} else if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil || n < 1 || n > 1<<22 {
			return sec.ErrorAt("pids_max", "%q is not a number of processes from 1 to %d, or max", v, 1<<22)
		} else {
			l.PidsMax = n
		}
	}
	_, ownHigh := sec.String("memory_high")
	_, ownMax := sec.String("memory_max")
	if l.MemoryHigh > 0 && l.MemoryMax > 0 && l.MemoryHigh >= l.MemoryMax {
		if !ownHigh || !ownMax {
			l.MemoryHigh = 0 // an inherited memory_high above this section's memory_max: never reached
			return nil
		}
		return sec.ErrorAt("memory_high", "%d bytes is above memory_max (%d bytes): the job would be killed before it is ever throttled", l.MemoryHigh, l.MemoryMax)
	}
	return nil
}

func isUnlimited(v string) bool {
	v = strings.TrimSpace(v)
	return strings.EqualFold(v, "max") || strings.EqualFold(v, "infinity")
}

// ParseSize reads a size in bytes as systemd's MemoryMax= does: a number
// with an optional K, M, G or T (powers of 1024; KiB, MB... are read the
// same), or max / infinity for none (0). At least one page, at most 2^62.
func ParseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if isUnlimited(v) {
		return 0, nil
	}
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' })
	if i < 0 {
		i = len(v)
	}
	num := v[:i]
	unit := strings.ToUpper(strings.TrimSpace(v[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	mult := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q", strings.TrimSpace(v[i:]))
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f != f || f < 0 {
		return 0, fmt.Errorf("not a number")
	}
	b := f * mult
	if b < 4096 || b > 1<<62 {
		return 0, fmt.Errorf("out of range (4 KiB to 4 EiB)")
	}
	return int64(b), nil
}
