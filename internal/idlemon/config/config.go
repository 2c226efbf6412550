// Package config reads idlemon's config file: the ini file of the older
// Python tool (gpu_mon) as it is ([defaults] interval_seconds, [gpu-*],
// [process-*], [tty]), plus the keys idlemon adds (devices,
// min_idle_seconds, grace_seconds, user, state_file). It is read the way
// Python's configparser reads it (keys case-insensitive, '#'/';' comment
// lines, no inline comments) and checked strictly: an unknown section or key,
// or a value that does not parse, is an error naming the file, the line and
// the key, before anything starts.
package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/ignore"
	"github.com/gpumon/gpumon/internal/inifile"
	"gopkg.in/ini.v1"
)

// DefaultPath is where idlemon looks for its config without -c.
const DefaultPath = "/etc/idlemon.ini"

// Defaults, documented in idlemon.example.ini.
const (
	DefaultInterval = 10 * time.Second
	DefaultMinIdle  = 30 * time.Second
	DefaultGrace    = 10 * time.Second
	DefaultTTYIdle  = 300 * time.Second
	DefaultDevices  = "/dev/nvidia[0-9]*"
)

// Config is the whole file, validated.
type Config struct {
	Path string // the file it came from, for messages

	Interval  time.Duration // [defaults] interval_seconds: the fallback scan period
	MinIdle   time.Duration // min_idle_seconds: how long a GPU stays idle before a job starts
	Grace     time.Duration // grace_seconds: SIGTERM to SIGKILL
	Devices   string        // glob of the GPU device files
	User      string        // run jobs as this user; "" = not set
	StateFile string

	GPUs []GPUSection // [gpu-*]
	Jobs []JobSection // [process-*]
	TTY  TTY

	lines map[string]int
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
}

// TTY is the [tty] section.
type TTY struct {
	Enabled   bool
	Whitelist []string
	Idle      time.Duration
}

// An Error points at the place in the file that is wrong.
type Error struct {
	File     string
	Line     int
	Key      string
	Msg      string
	HintText string
}

// Hint is the line that tells the fix, or "".
func (e *Error) Hint() string { return e.HintText }

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

var (
	defaultsKeys = []string{"interval_seconds", "devices", "min_idle_seconds", "grace_seconds", "user", "state_file"}
	gpuKeys      = []string{"gpus", "ignore_programs"}
	processKeys  = []string{"dir", "cmd", "gpus", "log"}
	ttyKeys      = []string{"enabled", "whitelist", "idle_seconds"}
)

func keysFor(section string) ([]string, bool) {
	switch {
	case section == "defaults":
		return defaultsKeys, true
	case section == "tty":
		return ttyKeys, true
	case strings.HasPrefix(section, "gpu"):
		return gpuKeys, true
	case strings.HasPrefix(section, "process"):
		return processKeys, true
	}
	return nil, false
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, path)
}

// Parse reads and validates a config from r; name is used in messages and
// to resolve relative paths (relative to the file's folder).
func Parse(r io.Reader, name string) (*Config, error) {
	src, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	f, lines, err := inifile.Parse(src)
	if err != nil {
		return nil, &Error{File: name, Msg: err.Error()}
	}
	errAt := func(section, key, format string, args ...any) *Error {
		return &Error{File: name, Line: lines[section+"."+key], Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	c := &Config{
		Path:      name,
		Interval:  DefaultInterval,
		MinIdle:   DefaultMinIdle,
		Grace:     DefaultGrace,
		Devices:   DefaultDevices,
		StateFile: idlestate.DefaultPath,
		TTY:       TTY{Idle: DefaultTTYIdle},
		lines:     lines,
	}
	dir := filepath.Dir(name)
	seenGPU := map[int]string{} // gpu index -> job section, for overlaps
	allJob := ""
	for _, sec := range f.Sections() {
		sname := sec.Name()
		if sname == ini.DefaultSection {
			if len(sec.Keys()) == 0 {
				continue
			}
			k := sec.Keys()[0].Name()
			return nil, &Error{File: name, Line: lines[sname+"."+k], Key: k, Msg: "a key before the first section",
				HintText: "put it under [defaults]"}
		}
		allowed, ok := keysFor(sname)
		if !ok {
			return nil, &Error{File: name, Line: lines[sname+"."], Msg: fmt.Sprintf("unknown section [%s]", sname),
				HintText: "known sections: [defaults], [gpu-NAME], [process-NAME], [tty]"}
		}
		for _, k := range sec.Keys() {
			if !slices.Contains(allowed, k.Name()) {
				e := errAt(sname, k.Name(), "unknown key in [%s]", sname)
				e.HintText = "known keys: " + strings.Join(allowed, ", ")
				return nil, e
			}
		}
		get := func(key string) (string, bool) {
			if !sec.HasKey(key) {
				return "", false
			}
			return strings.TrimSpace(sec.Key(key).String()), true
		}
		seconds := func(key string, min float64, dst *time.Duration) error {
			v, ok := get(key)
			if !ok {
				return nil
			}
			s, err := strconv.ParseFloat(strings.TrimSuffix(v, "s"), 64)
			if err != nil || s < min || s > 86400*365 {
				if min > 0 {
					return errAt(sname, key, "%q is not a number of seconds above 0", v)
				}
				return errAt(sname, key, "%q is not a number of seconds (0 or more)", v)
			}
			*dst = time.Duration(s * float64(time.Second))
			return nil
		}
		switch {
		case sname == "defaults":
			if err := seconds("interval_seconds", 0.001, &c.Interval); err != nil {
				return nil, err
			}
			if err := seconds("min_idle_seconds", 0, &c.MinIdle); err != nil {
				return nil, err
			}
			if err := seconds("grace_seconds", 0, &c.Grace); err != nil {
				return nil, err
			}
			if v, ok := get("devices"); ok {
				if v == "" {
					return nil, errAt(sname, "devices", "empty: a glob of device files is needed, e.g. %s", DefaultDevices)
				}
				v = resolvePath(dir, v)
				if _, err := filepath.Match(v, ""); err != nil {
					return nil, errAt(sname, "devices", "%q is not a valid glob: %v", v, err)
				}
				c.Devices = v
			}
			if v, ok := get("user"); ok {
				if v == "" {
					return nil, errAt(sname, "user", "empty: name the user the jobs run as")
				}
				c.User = v
			}
			if v, ok := get("state_file"); ok {
				if v == "" {
					return nil, errAt(sname, "state_file", "empty")
				}
				c.StateFile = resolvePath(dir, v)
			}
		case sname == "tty":
			if v, ok := get("enabled"); ok {
				b, ok := parseBool(v)
				if !ok {
					return nil, errAt(sname, "enabled", "%q is not a boolean (true/false, yes/no, on/off, 1/0)", v)
				}
				c.TTY.Enabled = b
			}
			if v, ok := get("whitelist"); ok {
				c.TTY.Whitelist = splitList(v)
			}
			if err := seconds("idle_seconds", 0, &c.TTY.Idle); err != nil {
				return nil, err
			}
		case strings.HasPrefix(sname, "gpu"):
			g := GPUSection{Name: sname}
			v, ok := get("gpus")
			if !ok {
				return nil, &Error{File: name, Line: lines[sname+"."], Key: "gpus", Msg: fmt.Sprintf("missing in [%s]", sname),
					HintText: "gpus = ALL, or indices like 0,1,3"}
			}
			all, idx, err := ParseGPUs(v)
			if err != nil {
				return nil, errAt(sname, "gpus", "%v", err)
			}
			g.All, g.GPUs = all, idx
			if v, ok := get("ignore_programs"); ok {
				g.Ignore = splitList(v)
			}
			c.GPUs = append(c.GPUs, g)
		case strings.HasPrefix(sname, "process"):
			j := JobSection{Name: sname, Dir: "/"}
			v, ok := get("cmd")
			if !ok || v == "" {
				return nil, &Error{File: name, Line: lines[sname+"."], Key: "cmd", Msg: fmt.Sprintf("missing in [%s]", sname),
					HintText: "cmd is the command line to run on idle GPUs"}
			}
			j.Cmd = v
			v, ok = get("gpus")
			if !ok {
				return nil, &Error{File: name, Line: lines[sname+"."], Key: "gpus", Msg: fmt.Sprintf("missing in [%s]", sname),
					HintText: "gpus = ALL, or indices like 0,1,3"}
			}
			all, idx, err := ParseGPUs(v)
			if err != nil {
				return nil, errAt(sname, "gpus", "%v", err)
			}
			j.All, j.GPUs = all, idx
			if all {
				if allJob != "" {
					return nil, errAt(sname, "gpus", "ALL is already the GPUs of [%s]", allJob)
				}
				allJob = sname
			}
			for _, i := range idx {
				if other, ok := seenGPU[i]; ok {
					return nil, errAt(sname, "gpus", "gpu %d is already in [%s]", i, other)
				}
				seenGPU[i] = sname
			}
			if v, ok := get("dir"); ok && v != "" {
				j.Dir = resolvePath(dir, v)
			}
			if v, ok := get("log"); ok && v != "" {
				j.Log = resolvePath(dir, v)
			}
			c.Jobs = append(c.Jobs, j)
		}
	}
	return c, nil
}

// ParseGPUs reads "ALL" or a comma-separated list of indices.
func ParseGPUs(v string) (all bool, idx []int, err error) {
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

// ErrorAt returns an error pointing at section's key, for problems found
// after parsing (a user that does not exist, a GPU without a device file).
func (c *Config) ErrorAt(section, key, format string, args ...any) *Error {
	line := c.lines[section+"."+key]
	if line == 0 {
		line = c.lines[section+"."]
	}
	return &Error{File: c.Path, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)}
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

func parseBool(v string) (bool, bool) {
	switch strings.ToLower(v) {
	case "1", "yes", "true", "on":
		return true, true
	case "0", "no", "false", "off":
		return false, true
	}
	return false, false
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func resolvePath(dir, p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return p
}
