package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/ignore"
)

// Render's defaults, documented in config.example.ini.
const (
	DefaultTitle      = "GPU status"
	DefaultHTML       = "index.html"
	DefaultJSON       = "status.json"
	DefaultProm       = "metrics.prom"
	DefaultStaleAfter = 15 * time.Minute
	DefaultRefresh    = 60 * time.Second
	DefaultFreeMemMiB = 1024
)

var renderKeys = []string{
	"title", "input", "html", "json", "prom", "stale_after", "free_memory_mib",
	"ignore_processes", "refresh", "reservations",
}

// Render is what the render command reads: [render], [host_names] and
// [gpu_names]. [common] is checked for unknown keys only (its output key is
// render's default input); a file without [common] is fine.
type Render struct {
	Path string // the file it came from, "" for defaults

	Title        string
	Input        string        // load_data.csv to read
	HTML         string        // "" means not written
	JSON         string        // "" means not written; default beside HTML
	Prom         string        // "" means not written; default beside HTML
	StaleAfter   time.Duration // data older than this gets a banner
	Refresh      time.Duration // the page reloads itself this often
	FreeMemMiB   float64       // a GPU using this much memory or more is busy
	Ignore       []string      // programs that never make a GPU busy: ignore.Default plus ignore_processes
	Reservations string        // reservations JSON file, "" for none

	// JSONSet and PromSet tell an explicit path (even an empty one) from the
	// default, which follows HTML (and so -o).
	JSONSet, PromSet bool

	HostNames map[string]string // lower-case host name -> display name
	GPUNames  map[string]string // lower-case nvidia-smi name -> short name
}

// DefaultRender is the configuration used when there is no config file:
// every file in the current folder.
func DefaultRender() *Render {
	return &Render{
		Title:      DefaultTitle,
		Input:      DefaultOutput,
		HTML:       DefaultHTML,
		JSON:       DefaultJSON,
		Prom:       DefaultProm,
		StaleAfter: DefaultStaleAfter,
		Refresh:    DefaultRefresh,
		FreeMemMiB: DefaultFreeMemMiB,
		Ignore:     ignore.With(),
		HostNames:  map[string]string{},
		GPUNames:   map[string]string{},
	}
}

// LoadRender reads render's settings from the file at path.
func LoadRender(path string) (*Render, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseRender(f, path)
}

// ParseRender reads render's settings from r; name is used in messages and
// to resolve relative paths (relative to the file's folder).
func ParseRender(r io.Reader, name string) (*Render, error) {
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
	c := DefaultRender()
	c.Path = name
	dir := filepath.Dir(name)
	c.Input = resolvePath(dir, DefaultOutput)
	c.HTML = resolvePath(dir, DefaultHTML)
	if common, err := f.GetSection("common"); err == nil && common.HasKey("output") {
		if v := strings.TrimSpace(common.Key("output").String()); v != "" {
			c.Input = resolvePath(dir, v)
		}
	}
	if sec, err := f.GetSection("render"); err == nil {
		get := func(key string) (string, bool) {
			if !sec.HasKey(key) {
				return "", false
			}
			return strings.TrimSpace(sec.Key(key).String()), true
		}
		if v, ok := get("title"); ok && v != "" {
			c.Title = v
		}
		if v, ok := get("input"); ok && v != "" {
			c.Input = resolvePath(dir, v)
		}
		if v, ok := get("html"); ok {
			if v == "" {
				return nil, errAt("render", "html", "empty: the page is render's main output")
			}
			c.HTML = resolvePath(dir, v)
		}
		if v, ok := get("json"); ok {
			c.JSON, c.JSONSet = optionalPath(dir, v), true
		}
		if v, ok := get("prom"); ok {
			c.Prom, c.PromSet = optionalPath(dir, v), true
		}
		if v, ok := get("stale_after"); ok {
			d, err := parseSeconds(v)
			if err != nil || d <= 0 {
				return nil, errAt("render", "stale_after", "%q is not a duration (e.g. 900, 900s or 15m)", v)
			}
			c.StaleAfter = d
		}
		if v, ok := get("refresh"); ok {
			d, err := parseSeconds(v)
			if err != nil || d < 0 {
				return nil, errAt("render", "refresh", "%q is not a duration (e.g. 60, 60s or 1m; 0 for never)", v)
			}
			if d > 0 && d < time.Second {
				return nil, errAt("render", "refresh", "%q is under a second", v)
			}
			c.Refresh = d
		}
		if v, ok := get("free_memory_mib"); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || n < 0 || n != n {
				return nil, errAt("render", "free_memory_mib", "%q is not a number of MiB", v)
			}
			c.FreeMemMiB = n
		}
		if v, ok := get("ignore_processes"); ok {
			c.Ignore = ignore.With(splitNames(v)...)
		}
		if v, ok := get("reservations"); ok && v != "" {
			c.Reservations = resolvePath(dir, v)
		}
	}
	for _, m := range []struct {
		section string
		into    map[string]string
	}{{"host_names", c.HostNames}, {"gpu_names", c.GPUNames}} {
		sec, err := f.GetSection(m.section)
		if err != nil {
			continue
		}
		for _, k := range sec.Keys() {
			v := strings.TrimSpace(k.String())
			if v == "" {
				return nil, errAt(m.section, k.Name(), "no name after =")
			}
			m.into[strings.ToLower(strings.TrimSpace(k.Name()))] = v
		}
	}
	return c, nil
}

// optionalPath resolves a path that may be left empty to turn an output off.
func optionalPath(dir, v string) string {
	if v == "" {
		return ""
	}
	return resolvePath(dir, v)
}

// parseSeconds reads "90" (seconds), "90s", "15m" or "1h30m".
func parseSeconds(v string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs != secs || secs > 1e9 || secs < -1e9 {
			return 0, fmt.Errorf("out of range")
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

// splitNames splits a list of names separated by commas or new lines.
func splitNames(v string) []string {
	out := []string{}
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '\n' }) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
