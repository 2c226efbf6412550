// Package hostrange expands host lists with Slurm-style ranges
// (gpu[01-16], node[1-3,7], rack[1-2]-gpu[1-4]): fetch's hosts and
// render's [groups] read them alike.
package hostrange

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds the hosts of one run, and what one range may expand to: a
// typo such as gpu[1-1000000], or a hosts file of many such ranges, should
// be an error, not a million SSH connections.
const MaxHosts = 100000

// Split splits a hosts value on commas and white space (newlines of a
// continued value too), keeping commas inside brackets (gpu[1-4,7]) and
// expanding ranges.
func Split(v string) ([]string, error) {
	var set Set
	depth, start := 0, 0
	flush := func(end int) error {
		item := strings.TrimSpace(v[start:end])
		if item == "" {
			return nil
		}
		names, err := expandChecked(item)
		if err != nil {
			return err
		}
		if !set.Add(names) {
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
	return set.Names, nil
}

// Set is names in the order first seen, each once: a name listed twice
// does not count twice against MaxHosts.
type Set struct {
	Names []string
	seen  map[string]bool
}

// Add adds names; false when that makes more than MaxHosts.
func (s *Set) Add(names []string) bool {
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	for _, n := range names {
		if !s.seen[n] {
			s.seen[n] = true
			s.Names = append(s.Names, n)
		}
	}
	return len(s.Names) <= MaxHosts
}

// expandChecked expands Slurm-style ranges: gpu[01-16] keeps the zero padding,
// node[1-3,7] lists, and several brackets multiply (rack[1-2]-gpu[1-4]).
func expandChecked(s string) ([]string, error) {
	names, err := expand(s)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if err := checkName(n); err != nil {
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

// checkName refuses what cannot be a host alias: it would otherwise reach
// ssh_config patterns or, for names starting with '-', look like an option.
func checkName(s string) error {
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
