// Package config reads config.ini, the file users of the older Python
// monitor already have ([common] user, hosts, key_filename), plus the keys
// this project adds. It is read the way Python's configparser reads it (keys
// case-insensitive, no inline comments, indented continuation lines), and
// checked strictly: an unknown key or a value that does not parse is an error
// naming the file, the line and the key.
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

	"gopkg.in/ini.v1"

	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/inifile"
)

// Defaults, documented in config.example.ini.
const (
	DefaultTimeout     = 20 * time.Second
	DefaultConcurrency = 1000
	DefaultOutput      = "load_data.csv"
)

// Host-key policies, named as in ssh_config(5).
const (
	StrictYes       = "yes"
	StrictAcceptNew = "accept-new"
)

// Config is the [common] section, validated. Host lists are not expanded
// here: see Hosts, which may run a command.
type Config struct {
	Path string // the file it came from, for messages

	User                  string   // "" means ssh_config's User, then the local user
	Hosts                 []string // as written, ranges not yet expanded
	HostsFile             string
	HostsCommand          string
	KeyFiles              []string // key_filename, tried before ssh_config's IdentityFile
	SSHConfig             string   // "" means ~/.ssh/config
	KnownHosts            []string // "" means ssh_config's UserKnownHostsFile, then ~/.ssh/known_hosts
	StrictHostKeyChecking string
	Timeout               time.Duration
	Concurrency           int
	Output                string
	// IdlemonState is idlemon's state file on the hosts, read in the same
	// round trip when it exists; "" to not look.
	IdlemonState string

	lines map[string]int // "section.key" -> line, for later messages
}

// An Error points at the place in the file that is wrong.
type Error struct {
	File     string
	Line     int // 0 when unknown
	Key      string
	Msg      string
	HintText string // a line telling the fix, when one is known
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

// knownKeys lists every key of every section; render's and others' sections
// join here as they are built.
var knownKeys = map[string][]string{
	"common": {
		"user", "hosts", "hosts_file", "hosts_command", "key_filename",
		"ssh_config", "known_hosts", "strict_host_key_checking",
		"timeout", "concurrency", "output", "idlemon_state",
	},
	"render": renderKeys,
}

// freeSections take any key: their keys are names, not settings.
var freeSections = map[string]bool{
	"host_names": true, // host = display name
	"gpu_names":  true, // full nvidia-smi name = short name
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

// Parse reads and validates a config from r; name is used in messages and to
// resolve relative paths (relative to the file's folder, so cron's working
// directory does not matter).
func Parse(r io.Reader, name string) (*Config, error) {
	src, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	f, lines, err := parseINI(src, name)
	if err != nil {
		return nil, err
	}
	errAt := func(section, key, format string, args ...any) *Error {
		return &Error{File: name, Line: lines[section+"."+key], Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	common, err := f.GetSection("common")
	if err != nil {
		return nil, &Error{File: name, Msg: "no [common] section", HintText: "see config.example.ini"}
	}
	c := &Config{
		Path:                  name,
		StrictHostKeyChecking: StrictYes,
		Timeout:               DefaultTimeout,
		Concurrency:           DefaultConcurrency,
		Output:                DefaultOutput,
		IdlemonState:          idlestate.DefaultPath,
		lines:                 lines,
	}
	dir := filepath.Dir(name)
	get := func(key string) (string, bool) {
		if !common.HasKey(key) {
			return "", false
		}
		return strings.TrimSpace(common.Key(key).String()), true
	}
	if v, ok := get("user"); ok {
		c.User = v
	}
	if v, ok := get("hosts"); ok {
		hosts, err := SplitHosts(v)
		if err != nil {
			return nil, errAt("common", "hosts", "%v", err)
		}
		c.Hosts = hosts
	}
	if v, ok := get("hosts_file"); ok && v != "" {
		c.HostsFile = resolvePath(dir, v)
	}
	if v, ok := get("hosts_command"); ok {
		c.HostsCommand = v
	}
	if v, ok := get("key_filename"); ok {
		for _, p := range splitList(v) {
			c.KeyFiles = append(c.KeyFiles, resolvePath(dir, p))
		}
	}
	if v, ok := get("ssh_config"); ok && v != "" {
		c.SSHConfig = resolvePath(dir, v)
	}
	if v, ok := get("known_hosts"); ok {
		for _, p := range splitList(v) {
			c.KnownHosts = append(c.KnownHosts, resolvePath(dir, p))
		}
	}
	if v, ok := get("strict_host_key_checking"); ok {
		switch strings.ToLower(v) {
		case StrictYes:
			c.StrictHostKeyChecking = StrictYes
		case StrictAcceptNew:
			c.StrictHostKeyChecking = StrictAcceptNew
		default:
			e := errAt("common", "strict_host_key_checking", "%q is not yes or accept-new", v)
			if strings.EqualFold(v, "no") || strings.EqualFold(v, "off") {
				e.HintText = "fetch never skips host key checks; use accept-new to record hosts seen for the first time"
			}
			return nil, e
		}
	}
	if v, ok := get("timeout"); ok {
		secs, err := strconv.ParseFloat(strings.TrimSuffix(v, "s"), 64)
		if err != nil || secs <= 0 || secs > 3600 {
			return nil, errAt("common", "timeout", "%q is not a number of seconds between 0 and 3600", v)
		}
		c.Timeout = time.Duration(secs * float64(time.Second))
	}
	if v, ok := get("concurrency"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, errAt("common", "concurrency", "%q is not a whole number of at least 1", v)
		}
		c.Concurrency = n
	}
	if v, ok := get("output"); ok && v != "" {
		c.Output = resolvePath(dir, v)
	}
	if v, ok := get("idlemon_state"); ok {
		// a path on the GPU hosts, so not relative to this file; empty: off
		if v != "" && !strings.HasPrefix(v, "/") {
			return nil, errAt("common", "idlemon_state", "%q is not an absolute path (it is a path on the GPU hosts)", v)
		}
		c.IdlemonState = v
	}
	if len(c.Hosts) == 0 && c.HostsFile == "" && c.HostsCommand == "" {
		return nil, &Error{File: name, Key: "hosts", Msg: "no hosts: set hosts, hosts_file or hosts_command in [common]"}
	}
	return c, nil
}

// parseINI reads src as configparser would and checks every section and key
// name against knownKeys (the sections in freeSections take any key), so a
// typo in any section is an error for every command that reads the file.
func parseINI(src []byte, name string) (*ini.File, map[string]int, error) {
	f, lines, err := inifile.Parse(src)
	if err != nil {
		return nil, nil, &Error{File: name, Msg: err.Error()}
	}
	for _, sec := range f.Sections() {
		sname := sec.Name()
		if sname == ini.DefaultSection && len(sec.Keys()) == 0 {
			continue
		}
		allowed, ok := knownKeys[sname]
		if !ok && !freeSections[sname] {
			known := make([]string, 0, len(knownKeys)+len(freeSections))
			for k := range knownKeys {
				known = append(known, "["+k+"]")
			}
			for k := range freeSections {
				known = append(known, "["+k+"]")
			}
			sort.Strings(known)
			e := &Error{File: name, Line: lines[sname+"."], Msg: fmt.Sprintf("unknown section [%s]", sname),
				HintText: "known sections: " + strings.Join(known, ", ")}
			if sname == ini.DefaultSection {
				e.Msg = "a key before the first section"
				e.Line = lines[sname+"."+sec.Keys()[0].Name()]
				e.HintText = "put it under [common]"
			}
			return nil, nil, e
		}
		if freeSections[sname] {
			continue
		}
		for _, k := range sec.Keys() {
			if !slices.Contains(allowed, k.Name()) {
				e := &Error{File: name, Line: lines[sname+"."+k.Name()], Key: k.Name(),
					Msg:      fmt.Sprintf("unknown key in [%s]", sname),
					HintText: "known keys: " + strings.Join(allowed, ", ")}
				return nil, nil, e
			}
		}
	}
	return f, lines, nil
}

// ErrorAt returns an error pointing at a key of [common], for problems found
// after parsing (a hosts_file that cannot be read, say).
func (c *Config) ErrorAt(key, format string, args ...any) *Error {
	return &Error{File: c.Path, Line: c.lines["common."+key], Key: key, Msg: fmt.Sprintf(format, args...)}
}

// splitList splits a comma-separated list of paths.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// resolvePath expands ~ and makes a relative path relative to the config
// file's folder.
func resolvePath(dir, p string) string {
	p = ExpandHome(p)
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return p
}

// ExpandHome replaces a leading ~ or ~/ with the home folder.
func ExpandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
	}
	return p
}
