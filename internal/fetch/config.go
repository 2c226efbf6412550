package fetch

import (
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/configini"
	"github.com/gpumon/gpumon/internal/hostrange"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/inifile"
	"github.com/gpumon/gpumon/internal/probe"
)

// Defaults, documented in config.example.ini.
const (
	defaultTimeout     = 20 * time.Second
	defaultConcurrency = 1000
	// defaultPollInterval is cron's usual interval (README's crontab line).
	defaultPollInterval = 5 * time.Minute
	DefaultOutput       = configini.DefaultOutput
	// defaultSystemSSHConfig is the system's ssh_config.
	defaultSystemSSHConfig = "/etc/ssh/ssh_config"
)

// Host-key policies, named as in ssh_config(5).
const (
	strictYes       = "yes"
	StrictAcceptNew = "accept-new"
)

// Config is fetch's part of config.ini: [common], the section users of the
// older Python monitor already have (user, hosts, key_filename) plus the
// keys this project adds. Host lists are not expanded here: see
// ResolveHosts, which may run a command.
type Config struct {
	Path string // the file it came from, for messages

	User         string   // "" means ssh_config's User, then the local user
	Hosts        []string // as written, ranges expanded
	HostsFile    string
	HostsCommand string
	KeyFiles     []string // key_filename, tried before ssh_config's IdentityFile
	SSHConfig    string   // "" means ~/.ssh/config
	// SystemSSHConfig is read after SSHConfig, as ssh does: defaultSystemSSHConfig
	// from a file (a test points it elsewhere; "" reads none).
	SystemSSHConfig       string
	KnownHosts            []string // "" means ssh_config's UserKnownHostsFile, then ~/.ssh/known_hosts
	StrictHostKeyChecking string
	Timeout               time.Duration
	Concurrency           int
	Output                string
	// IdlemonState is idlemon's state file on the hosts, read in the same
	// round trip when it exists; "" to not look.
	IdlemonState string
	// Containers is the engine asked for the names of the containers GPU
	// processes run in: probe.ContainersDocker, probe.ContainersPodman, or
	// "" (containers = none, the default: the account would need the
	// engine's socket, which is root on the host).
	Containers string
	// ProcessUtil asks each host for its processes' own utilization
	// (process_util, default yes).
	ProcessUtil bool
	// KernelLog asks each host for its kernel's XIDs (kernel_log, default
	// yes), those of the last PollInterval and Timeout: PollInterval is
	// how often cron runs fetch (poll_interval); live mode uses its own.
	KernelLog    bool
	PollInterval time.Duration

	file *inifile.File // for errors found later (ResolveHosts)
}

// LoadConfig reads and checks the config file at path; relative paths in
// it are relative to its folder, so cron's working directory does not
// matter.
func LoadConfig(path string) (*Config, error) { return inifile.Decode(path, configFrom) }

func configFrom(f *inifile.File) (*Config, error) {
	if err := f.Check(configini.Layout); err != nil {
		return nil, err
	}
	if !f.Has("common") {
		return nil, &inifile.Error{File: f.Name, Msg: "no [common] section", HintText: "see config.example.ini"}
	}
	c := &Config{
		Path:                  f.Name,
		StrictHostKeyChecking: strictYes,
		Timeout:               defaultTimeout,
		Concurrency:           defaultConcurrency,
		Output:                f.Resolve(DefaultOutput),
		IdlemonState:          idlestate.DefaultPath,
		SystemSSHConfig:       defaultSystemSSHConfig,
		ProcessUtil:           true,
		KernelLog:             true,
		PollInterval:          defaultPollInterval,
		file:                  f,
	}
	common := f.Section("common")
	c.User, _ = common.String("user")
	if v, ok := common.String("hosts"); ok {
		hosts, err := hostrange.Split(v)
		if err != nil {
			return nil, common.ErrorAt("hosts", "%v", err)
		}
		c.Hosts = hosts
	}
	c.HostsFile, _ = common.Path("hosts_file")
	c.HostsCommand, _ = common.String("hosts_command")
	c.KeyFiles, _ = common.Paths("key_filename")
	c.SSHConfig, _ = common.Path("ssh_config")
	c.KnownHosts, _ = common.Paths("known_hosts")
	if err := readStrict(common, &c.StrictHostKeyChecking); err != nil {
		return nil, err
	}
	err := common.Seconds("timeout", inifile.Limits[time.Duration]{
		Min: time.Nanosecond, Max: time.Hour, Want: "a number of seconds above 0, at most 3600",
	}, &c.Timeout)
	if err != nil {
		return nil, err
	}
	if err := common.Int("concurrency", inifile.Limits[int]{Min: 1}, &c.Concurrency); err != nil {
		return nil, err
	}
	if v, _ := common.Path("output"); v != "" {
		c.Output = v
	}
	if v, ok := common.String("idlemon_state"); ok {
		// a path on the GPU hosts, so not relative to this file; empty: off
		if v != "" && !strings.HasPrefix(v, "/") {
			return nil, common.ErrorAt("idlemon_state", "%q is not an absolute path (it is a path on the GPU hosts)", v)
		}
		c.IdlemonState = v
	}
	if v, ok := common.String("containers"); ok {
		switch strings.ToLower(v) {
		case probe.ContainersDocker, probe.ContainersPodman:
			c.Containers = strings.ToLower(v)
		case "none":
		default:
			return nil, common.ErrorAt("containers", "%q is not docker, podman or none", v)
		}
	}
	if err := readHealthKeys(common, c); err != nil {
		return nil, err
	}
	if len(c.Hosts) == 0 && c.HostsFile == "" && c.HostsCommand == "" {
		return nil, common.ErrorAt("hosts", "no hosts: set hosts, hosts_file or hosts_command in [common]")
	}
	return c, nil
}

// readStrict reads strict_host_key_checking, which has no value that skips
// the check.
func readStrict(common inifile.Section, dst *string) error {
	v, ok := common.String("strict_host_key_checking")
	if !ok {
		return nil
	}
	switch strings.ToLower(v) {
	case strictYes:
		*dst = strictYes
	case StrictAcceptNew:
		*dst = StrictAcceptNew
	default:
		e := common.ErrorAt("strict_host_key_checking", "%q is not yes or accept-new", v)
		if strings.EqualFold(v, "no") || strings.EqualFold(v, "off") {
			e.HintText = "fetch never skips host key checks; use accept-new to record hosts seen for the first time"
		}
		return e
	}
	return nil
}

// errorAt returns an error pointing at a key of [common], for problems
// found after reading (a hosts_file that cannot be read, say).
func (c *Config) errorAt(key, format string, args ...any) *inifile.Error {
	return c.file.ErrorAt("common", key, format, args...)
}

// readHealthKeys reads what the probe asks beside the GPUs' own readings:
// process_util, kernel_log and poll_interval.
func readHealthKeys(common inifile.Section, c *Config) error {
	if err := common.Bool("process_util", &c.ProcessUtil); err != nil {
		return err
	}
	if err := common.Bool("kernel_log", &c.KernelLog); err != nil {
		return err
	}
	return common.Duration("poll_interval", inifile.Limits[time.Duration]{
		Min: time.Second, Max: 24 * time.Hour, Want: "a duration from 1s to 24h (how often cron runs fetch, e.g. 5m)",
	}, &c.PollInterval)
}

// KernelLogWindow is how far back each poll reads the kernel log (0: not
// at all): the interval between polls and a host's timeout, so that
// consecutive polls overlap, and an XID logged while the last poll ran is
// not missed. render counts an XID seen twice once.
func (c *Config) KernelLogWindow(every time.Duration) time.Duration {
	if !c.KernelLog {
		return 0
	}
	return every + c.Timeout
}
