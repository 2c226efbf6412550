package render

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/accounting"
	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/configini"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hostrange"
	"github.com/gpumon/gpumon/internal/ignore"
	"github.com/gpumon/gpumon/internal/inifile"
	"github.com/gpumon/gpumon/internal/notify"
)

// Render's defaults, documented in config.example.ini.
const (
	DefaultTitle    = "GPU status"
	DefaultHTML     = "index.html"
	DefaultJSON     = "status.json"
	DefaultProm     = "metrics.prom"
	DefaultText     = "index.txt"
	DefaultFreeText = "free.txt"
	// PageState is the small file beside the page that the page's script
	// fetches to update itself in place; not configurable, as the page
	// (and its group pages, one folder down) name it by a relative URL.
	PageState         = "page-state.json"
	DefaultStaleAfter = 15 * time.Minute
	DefaultRefresh    = 60 * time.Second
	DefaultFreeMemMiB = 1024
)

// Config is what the render command reads from config.ini: [render],
// [health], [host_names] and [gpu_names], and [common] output (fetch's output is
// render's default input). The rest of the file is checked for unknown
// keys only; a file without [common] is fine.
type Config struct {
	Path string // the file it came from, "" for defaults

	Title        string
	Input        string        // load_data.csv to read
	HTML         string        // never "": the page is render's main output
	JSON         string        // "" means not written; default beside HTML
	Prom         string        // "" means not written; default beside HTML
	Text         string        // index.txt, the -text table: "" means not written; default beside HTML
	FreeText     string        // free.txt, the free GPUs a line per host: "" means not written; default beside HTML
	StaleAfter   time.Duration // data older than this gets a banner
	Refresh      time.Duration // the page reloads itself this often; 0 never
	RefreshSet   bool          // refresh is in the file
	FreeMemMiB   float64       // a GPU using this much memory or more is busy
	Ignore       []string      // programs that never make a GPU busy: ignore.Default plus ignore_processes
	Reservations string        // reservations JSON file, "" for none
	// LiveEvery is fetch's live-mode interval when render runs inside it
	// (not a config.ini key); 0 otherwise.
	LiveEvery time.Duration

	// JSONSet and PromSet tell an explicit path (even an empty one) from the
	// default, which follows HTML (and so -o).
	JSONSet, PromSet, TextSet, FreeTextSet bool

	// Privacy of the published files (page, group pages, page-state.json,
	// status.json, metrics.prom, index.txt, free.txt); -text on a terminal
	// shows everything, as whoever runs it can read load_data.csv.
	Commands     string // CommandsShow, CommandsProgram or CommandsHide
	Users        string // UsersShow or UsersHide (a stable pseudonym each)
	PseudonymKey string // the secret file keying the pseudonyms; default beside Input

	History history.Config
	Notify  notify.Config
	Health  health.Policy // [health]: what makes a GPU failed or degraded
	// Accounting is [accounting], [gpu_hour_prices], [teams] and
	// [team_leads]: prices, CO2 and teams of the reports.
	Accounting accounting.Config
	// TeamProblems are the [teams] unix groups that could not be read
	// this run (a name service down answers "no such group" as well):
	// their users are in no team. The page is still made, with a warning;
	// a report by team refuses to run.
	TeamProblems []error

	Groups []groupRule // [groups], in the file's order

	PromDetail string // metrics.prom's series: PromGPU, PromHost or PromFleet

	HostNames map[string]string // lower-case host name -> display name
	GPUNames  map[string]string // lower-case full name (nvidia-smi's, amd-smi's) -> short name
}

// DefaultConfig is the configuration used when there is no config file:
// every file in the current folder.
func DefaultConfig() *Config {
	return &Config{
		Title:      DefaultTitle,
		Input:      configini.DefaultOutput,
		HTML:       DefaultHTML,
		JSON:       DefaultJSON,
		Prom:       DefaultProm,
		Text:       DefaultText,
		FreeText:   DefaultFreeText,
		Commands:   CommandsShow,
		Users:      UsersShow,
		StaleAfter: DefaultStaleAfter,
		Refresh:    DefaultRefresh,
		FreeMemMiB: DefaultFreeMemMiB,
		PromDetail: promGPU,
		Ignore:     ignore.With(),
		History:    history.DefaultConfig(),
		Notify:     notify.DefaultConfig(),
		Health:     health.DefaultPolicy(),
		Accounting: accounting.DefaultConfig(),
		HostNames:  map[string]string{},
		GPUNames:   map[string]string{},
	}
}

// teamsUnread is the error of a report by team while TeamProblems
// leave some users out of their teams: its figures would be wrong.
func (c *Config) teamsUnread() error {
	if len(c.TeamProblems) == 0 {
		return nil
	}
	return cli.WithHint(errors.Join(c.TeamProblems...), "check the name service (getent group), or list the users in [teams]; nothing was reported")
}

// groupLookup resolves [teams]' @unix-groups; tests replace it.
var groupLookup accounting.GroupLookup = accounting.SystemGroups

// LoadConfig reads render's settings from the file at path.
func LoadConfig(path string) (*Config, error) { return inifile.Decode(path, configFrom) }

// ParseConfig reads render's settings from r; name is used in messages and
// to resolve relative paths (relative to the file's folder).
func ParseConfig(r io.Reader, name string) (*Config, error) {
	return inifile.DecodeReader(r, name, configFrom)
}

func configFrom(f *inifile.File) (*Config, error) {
	if err := f.Check(configini.Layout); err != nil {
		return nil, err
	}
	c := DefaultConfig()
	c.Path = f.Name
	c.Input = f.Resolve(configini.DefaultOutput)
	c.HTML = f.Resolve(DefaultHTML)
	if v, _ := f.Section("common").Path("output"); v != "" {
		c.Input = v
	}
	if err := readRender(f.Section("render"), c); err != nil {
		return nil, err
	}
	if err := history.ReadConfig(f, &c.History); err != nil {
		return nil, err
	}
	if err := notify.ReadConfig(f, &c.Notify, c.History.DB != ""); err != nil {
		return nil, err
	}
	if err := health.ReadConfig(f, &c.Health); err != nil {
		return nil, err
	}
	lookup := func(group string) ([]string, error) {
		users, err := groupLookup(group)
		if err != nil {
			c.TeamProblems = append(c.TeamProblems, fmt.Errorf("%s: [teams] @%s: %v: its users are in no team this run", f.Name, group, err))
			return nil, nil
		}
		return users, nil
	}
	acc, err := accounting.Read(f, lookup)
	if err != nil {
		return nil, err
	}
	c.Accounting = acc
	if err := readNames(f.Section("host_names"), c.HostNames); err != nil {
		return nil, err
	}
	if err := readNames(f.Section("gpu_names"), c.GPUNames); err != nil {
		return nil, err
	}
	if err := readGroups(f.Section("groups"), &c.Groups); err != nil {
		return nil, err
	}
	return c, nil
}

// readRender reads [render] into c.
func readRender(sec inifile.Section, c *Config) error {
	if v, _ := sec.String("title"); v != "" {
		c.Title = v
	}
	if v, _ := sec.Path("input"); v != "" {
		c.Input = v
	}
	if v, ok := sec.Path("html"); ok {
		if v == "" {
			return sec.ErrorAt("html", "empty: the page is render's main output")
		}
		c.HTML = v
	}
	// an empty json or prom turns that output off
	c.JSON, c.JSONSet = pathOr(sec, "json", c.JSON)
	c.Prom, c.PromSet = pathOr(sec, "prom", c.Prom)
	c.Text, c.TextSet = pathOr(sec, "text", c.Text)
	c.FreeText, c.FreeTextSet = pathOr(sec, "free_text", c.FreeText)
	if err := readPrivacy(sec, c); err != nil {
		return err
	}
	err := sec.Duration("stale_after", inifile.Limits[time.Duration]{
		Min: time.Nanosecond, Want: "a duration (e.g. 900, 900s or 15m)",
	}, &c.StaleAfter)
	if err != nil {
		return err
	}
	if err := readRefresh(sec, &c.Refresh); err != nil {
		return err
	}
	_, c.RefreshSet = sec.String("refresh")
	err = sec.Float("free_memory_mib", inifile.Limits[float64]{Want: "a number of MiB"}, &c.FreeMemMiB)
	if err != nil {
		return err
	}
	if names, ok := sec.List("ignore_processes"); ok {
		c.Ignore = ignore.With(names...)
	}
	c.Reservations, _ = sec.Path("reservations")
	if v, ok := sec.String("prom_detail"); ok {
		switch v {
		case promGPU, promHost, promFleet:
			c.PromDetail = v
		default:
			return sec.ErrorAt("prom_detail", "%q: want gpu, host or fleet", v)
		}
	}
	return nil
}

// metrics.prom's detail ([render] prom_detail): a series per GPU, per
// host, or for the fleet only.
const (
	promGPU   = "gpu"
	promHost  = "host"
	promFleet = "fleet"
)

// [render] commands and users: what the published files show.
const (
	CommandsShow    = "show"    // the whole command line
	CommandsProgram = "program" // the program's name only (python, not its arguments)
	CommandsHide    = "hide"    // nothing of it
	UsersShow       = "show"
	UsersHide       = "hide" // a stable pseudonym per user
)

// readPrivacy reads [render] commands, users and pseudonym_key.
func readPrivacy(sec inifile.Section, c *Config) error {
	if v, ok := sec.String("commands"); ok {
		switch v {
		case CommandsShow, CommandsProgram, CommandsHide:
			c.Commands = v
		default:
			return sec.ErrorAt("commands", "%q: want show, program or hide", v)
		}
	}
	if v, ok := sec.String("users"); ok {
		switch v {
		case UsersShow, UsersHide:
			c.Users = v
		default:
			return sec.ErrorAt("users", "%q: want show or hide", v)
		}
	}
	c.PseudonymKey, _ = sec.Path("pseudonym_key")
	return nil
}

// pathOr returns the key's path and true when the key is there (even
// empty), else def and false.
func pathOr(sec inifile.Section, key, def string) (string, bool) {
	if v, ok := sec.Path(key); ok {
		return v, true
	}
	return def, false
}

// readRefresh reads refresh: 0 for never, else a second or more, as a
// browser reloading faster would hammer the server.
func readRefresh(sec inifile.Section, dst *time.Duration) error {
	err := sec.Duration("refresh", inifile.Limits[time.Duration]{
		Want: "a duration (e.g. 60, 60s or 1m; 0 for never)",
	}, dst)
	if err != nil {
		return err
	}
	if *dst > 0 && *dst < time.Second {
		v, _ := sec.String("refresh")
		return sec.ErrorAt("refresh", "%q is under a second", v)
	}
	return nil
}

// readNames reads a section of name = display name ([host_names],
// [gpu_names]) into m, keyed by the lower-case name.
func readNames(sec inifile.Section, m map[string]string) error {
	for _, k := range sec.Keys() {
		v, _ := sec.String(k)
		if v == "" {
			return sec.ErrorAt(k, "no name after =")
		}
		m[strings.ToLower(strings.TrimSpace(k))] = v
	}
	return nil
}

// groupRule is one line of [groups]: a group's name and its hosts, ranges
// expanded as fetch expands its hosts (hostrange).
type groupRule struct {
	Name  string
	Hosts []string
}

// readGroups reads [groups] (name = host ranges) in the file's order.
func readGroups(sec inifile.Section, dst *[]groupRule) error {
	for _, k := range sec.Keys() {
		v, _ := sec.String(k)
		name := strings.TrimSpace(k)
		if strings.TrimSpace(v) == "" {
			return sec.ErrorAt(k, "no hosts after =")
		}
		hosts, err := hostrange.Split(v)
		if err != nil {
			return sec.ErrorAt(k, "%v", err)
		}
		*dst = append(*dst, groupRule{Name: name, Hosts: hosts})
	}
	return nil
}
