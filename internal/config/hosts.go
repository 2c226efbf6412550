package config

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// maxExpanded bounds what one range may expand to: a typo such as
// gpu[1-1000000] should be an error, not a million SSH connections.
const maxExpanded = 100000

// SplitHosts splits a hosts value on commas and white space (newlines of a
// continued value too), keeping commas inside brackets (gpu[1-4,7]) and
// expanding ranges.
func SplitHosts(v string) ([]string, error) {
	var out []string
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
		out = append(out, names...)
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
	return out, nil
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
		if b-a >= maxExpanded {
			return nil, fmt.Errorf("%q: range %s expands to more than %d hosts", s, item, maxExpanded)
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
	if len(parts)*len(tails) > maxExpanded {
		return nil, fmt.Errorf("%q expands to more than %d hosts", s, maxExpanded)
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

// ResolveHosts returns every host to poll: hosts, then hosts_file, then the
// output of hosts_command, duplicates removed, order kept.
func (c *Config) ResolveHosts(ctx context.Context) ([]string, error) {
	var all []string
	all = append(all, c.Hosts...)
	if c.HostsFile != "" {
		data, err := os.ReadFile(c.HostsFile)
		if err != nil {
			return nil, c.ErrorAt("hosts_file", "%v", err)
		}
		hosts, err := parseHostLines(data, c.HostsFile)
		if err != nil {
			return nil, err
		}
		all = append(all, hosts...)
	}
	if c.HostsCommand != "" {
		ctx, cancel := context.WithTimeout(ctx, c.Timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.HostsCommand)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			msg := strings.TrimSpace(stderr.String())
			if ctx.Err() != nil {
				msg = fmt.Sprintf("did not finish within %s", c.Timeout)
			}
			if msg == "" {
				msg = err.Error()
			}
			return nil, c.ErrorAt("hosts_command", "`%s` failed: %s", c.HostsCommand, firstLine(msg))
		}
		hosts, err := parseHostLines(out, "hosts_command output")
		if err != nil {
			return nil, err
		}
		if len(hosts) == 0 {
			return nil, c.ErrorAt("hosts_command", "`%s` printed no host", c.HostsCommand)
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
		return nil, c.ErrorAt("hosts", "no hosts to poll")
	}
	return out, nil
}

// parseHostLines reads one host (or range) a line; '#' starts a comment.
func parseHostLines(data []byte, name string) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		hosts, err := SplitHosts(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, n, err)
		}
		out = append(out, hosts...)
	}
	return out, sc.Err()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
