package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/hosttext"
)

// MaxHosts bounds the hosts of one run, and what one range may expand to: a
// typo such as gpu[1-1000000], or a hosts file of many such ranges, should
// be an error, not a million SSH connections.
const MaxHosts = 100000

// SplitHosts splits a hosts value on commas and white space (newlines of a
// continued value too), keeping commas inside brackets (gpu[1-4,7]) and
// expanding ranges.
func SplitHosts(v string) ([]string, error) {
	var set hostSet
	depth, start := 0, 0
	flush := func(end int) error {
		item := strings.TrimSpace(v[start:end])
		if item == "" {
			return nil
		}
		names, err := ExpandRange(item)
		if err != nil {
			return err
		}
		if !set.add(names) {
			return fmt.Errorf("more than %d hosts in all", MaxHosts)
		}
		return nil
	}
	for i, r := range v {
		switch {
		case r == '[':
			depth++
		case r == ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("%q: ']' without '['", strings.TrimSpace(v[start:i+1]))
			}
		case depth == 0 && (r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			if err := flush(i); err != nil {
				return nil, err
			}
			start = i + 1
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%q: '[' without ']'", strings.TrimSpace(v[start:]))
	}
	if err := flush(len(v)); err != nil {
		return nil, err
	}
	return set.names, nil
}

// hostSet is names in the order first seen, each once: a name listed twice
// does not count twice against MaxHosts.
type hostSet struct {
	names []string
	seen  map[string]bool
}

// add adds names; false when that makes more than MaxHosts.
func (s *hostSet) add(names []string) bool {
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	for _, n := range names {
		if !s.seen[n] {
			s.seen[n] = true
			s.names = append(s.names, n)
		}
	}
	return len(s.names) <= MaxHosts
}

// ExpandRange expands Slurm-style ranges: gpu[01-16] keeps the zero padding,
// node[1-3,7] lists, and several brackets multiply (rack[1-2]-gpu[1-4]).
func ExpandRange(s string) ([]string, error) {
	names, err := expand(s)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if err := checkHostName(n); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func expand(s string) ([]string, error) {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		if strings.ContainsRune(s, ']') {
			return nil, fmt.Errorf("%q: ']' without '['", s)
		}
		return []string{s}, nil
	}
	closing := strings.IndexByte(s[open:], ']')
	if closing < 0 {
		return nil, fmt.Errorf("%q: '[' without ']'", s)
	}
	closing += open
	prefix, body, rest := s[:open], s[open+1:closing], s[closing+1:]
	var parts []string
	for _, item := range strings.Split(body, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		if !isRange {
			if item == "" || strings.Trim(item, "0123456789") != "" {
				return nil, fmt.Errorf("%q: %q is not a number or a range like 01-16", s, item)
			}
			parts = append(parts, item)
			continue
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%q: %q is not a range like 01-16", s, item)
		}
		// counted before anything is made: many ranges of one bracket
		// must not add up to millions of names first
		if b-a >= MaxHosts || len(parts)+(b-a+1) > MaxHosts {
			return nil, fmt.Errorf("%q: expands to more than %d hosts", s, MaxHosts)
		}
		width := 0
		if len(lo) > 1 && lo[0] == '0' {
			width = len(lo)
		}
		for n := a; n <= b; n++ {
			parts = append(parts, fmt.Sprintf("%0*d", width, n))
		}
	}
	tails, err := expand(rest)
	if err != nil {
		return nil, err
	}
	if len(parts)*len(tails) > MaxHosts {
		return nil, fmt.Errorf("%q expands to more than %d hosts", s, MaxHosts)
	}
	out := make([]string, 0, len(parts)*len(tails))
	for _, p := range parts {
		for _, t := range tails {
			out = append(out, prefix+p+t)
		}
	}
	return out, nil
}

// checkHostName refuses what cannot be a host alias: it would otherwise reach
// ssh_config patterns or, for names starting with '-', look like an option.
func checkHostName(s string) error {
	if s == "" {
		return errors.New("empty host name")
	}
	if s[0] == '-' {
		return fmt.Errorf("%q: a host name cannot start with '-'", s)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(`*?!"'\/;<>|&$`+"`", r) {
			return fmt.Errorf("%q: %q is not allowed in a host name", s, r)
		}
	}
	return nil
}

// maxHostList bounds what hosts_file and hosts_command may hand over: a
// million hosts fit in 16 MiB, and `yes` as hosts_command must not fill
// the memory before its timeout.
const maxHostList = 16 << 20

// ResolveHosts returns every host to poll: hosts, then hosts_file, then the
// output of hosts_command, duplicates removed, order kept.
func (c *Config) ResolveHosts(ctx context.Context) ([]string, error) {
	var all []string
	all = append(all, c.Hosts...)
	if c.HostsFile != "" {
		hosts, err := c.hostsFromFile()
		if err != nil {
			return nil, err
		}
		all = append(all, hosts...)
	}
	if c.HostsCommand != "" {
		hosts, err := c.hostsFromCommand(ctx)
		if err != nil {
			return nil, err
		}
		all = append(all, hosts...)
	}
	seen := make(map[string]bool, len(all))
	out := all[:0]
	for _, h := range all {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil, c.errorAt("hosts", "no hosts to poll")
	}
	if len(out) > MaxHosts {
		return nil, c.errorAt("hosts", "%d hosts from hosts, hosts_file and hosts_command together, more than %d", len(out), MaxHosts)
	}
	return out, nil
}

func (c *Config) hostsFromFile() ([]string, error) {
	f, err := os.Open(c.HostsFile)
	if err != nil {
		return nil, c.errorAt("hosts_file", "%v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHostList+1))
	if err != nil {
		return nil, c.errorAt("hosts_file", "%v", err)
	}
	if len(data) > maxHostList {
		return nil, c.errorAt("hosts_file", "%s is larger than %d MiB", c.HostsFile, maxHostList>>20)
	}
	return parseHostLines(data, c.HostsFile)
}

// hostsFromCommand runs hosts_command with /bin/sh under the config's
// timeout.
func (c *Config) hostsFromCommand(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.HostsCommand)
	// In a group of its own, so that a timeout stops the whole pipeline,
	// and nothing it started outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A child that keeps stdout open must not keep fetch waiting once the
	// shell is gone.
	cmd.WaitDelay = time.Second
	stdout := &cappedBuffer{max: maxHostList}
	stderr := &cappedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // the shell exited 0; what it printed is complete
	}
	if err != nil || stdout.over {
		msg := strings.TrimSpace(stderr.String())
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			msg = fmt.Sprintf("did not finish within %s", c.Timeout)
		case ctx.Err() != nil:
			msg = "interrupted"
		case stdout.over:
			msg = fmt.Sprintf("printed more than %d MiB", maxHostList>>20)
		case msg == "":
			msg = err.Error()
		}
		return nil, c.errorAt("hosts_command", "`%s` failed: %s", c.HostsCommand, hosttext.FirstLine(msg))
	}
	hosts, err := parseHostLines(stdout.Bytes(), "hosts_command output")
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, c.errorAt("hosts_command", "`%s` printed no host", c.HostsCommand)
	}
	return hosts, nil
}

// cappedBuffer keeps the first max bytes written to it and then fails the
// write, which stops os/exec's copy (and the command, by SIGPIPE). It has
// no ReadFrom on purpose: io.Copy would use it and bypass Write.
type cappedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.buf.Write(p[:room])
		b.over = true
		return room, errors.New("output too large")
	}
	return b.buf.Write(p)
}

func (b *cappedBuffer) Bytes() []byte  { return b.buf.Bytes() }
func (b *cappedBuffer) String() string { return b.buf.String() }

// parseHostLines reads one host (or range) a line; '#' starts a comment.
func parseHostLines(data []byte, name string) ([]string, error) {
	var set hostSet
	for i, raw := range strings.Split(string(data), "\n") {
		line, _, _ := strings.Cut(raw, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		hosts, err := SplitHosts(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, i+1, err)
		}
		if !set.add(hosts) {
			return nil, fmt.Errorf("%s:%d: more than %d hosts in all", name, i+1, MaxHosts)
		}
	}
	return set.names, nil
}
