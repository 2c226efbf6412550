package render

import (
	"fmt"
	"strings"

	"github.com/gpumon/gpumon/internal/cluster"
)

// hostGroup is a group of hosts: one of [groups], or the hosts whose
// names share a prefix (groupPrefix). Its hosts keep the cluster's order.
type hostGroup struct {
	Name  string
	File  string // its pages' file name without ".html" (pageFile), unique
	Hosts []*cluster.Host
}

// groupsWarnMax is how many hosts a warning about [groups] names.
const groupsWarnMax = 5

// groupHosts sorts the cluster's hosts into groups: [groups] first, in the
// file's order (a host in two groups is in the first), then the rest by
// the prefix of their names, in the order of each prefix's first host.
// The warnings say what [groups] named that is not in the data, and which
// hosts it named twice.
func groupHosts(c *cluster.Cluster, rules []GroupRule) ([]*hostGroup, []string) {
	var warnings []string
	byName := make(map[string]*cluster.Host, len(c.Hosts))
	for _, h := range c.Hosts {
		byName[h.Name] = h
	}
	in := map[string]*hostGroup{} // host name -> its group
	var groups []*hostGroup
	named := map[string]*hostGroup{} // group name -> group
	var twice []string
	for _, r := range rules {
		g := named[r.Name]
		if g == nil {
			g = &hostGroup{Name: r.Name}
			named[r.Name] = g
			groups = append(groups, g)
		}
		var unknown []string
		for _, n := range r.Hosts {
			if byName[n] == nil {
				unknown = append(unknown, n)
				continue
			}
			if first := in[n]; first != nil {
				if first != g {
					twice = append(twice, fmt.Sprintf("%s (in %s and %s)", n, first.Name, g.Name))
				}
				continue
			}
			in[n] = g
		}
		if len(unknown) > 0 {
			warnings = append(warnings, fmt.Sprintf("[groups] %s: %s not in the data, ignored: %s",
				r.Name, countOf(len(unknown), "host"), someOf(unknown)))
		}
	}
	if len(twice) > 0 {
		warnings = append(warnings, fmt.Sprintf("[groups]: %s in two groups, shown in the first: %s",
			countOf(len(twice), "host"), someOf(twice)))
	}
	prefixed := map[string]*hostGroup{}
	for _, h := range c.Hosts {
		g := in[h.Name]
		if g == nil {
			p := groupPrefix(h.Name)
			g = prefixed[p]
			if g == nil {
				if g = named[p]; g == nil { // a prefix that [groups] also names is that group
					g = &hostGroup{Name: p}
					groups = append(groups, g)
				}
				prefixed[p] = g
			}
		}
		g.Hosts = append(g.Hosts, h)
	}
	out := groups[:0]
	for _, g := range groups {
		if len(g.Hosts) > 0 { // a group of unknown hosts only is left out
			out = append(out, g)
		}
	}
	return out, warnings
}

// groupPrefix is the group of a host that [groups] does not name: its
// name before the first dot, without its trailing digits and dashes
// (gpu-0001 is in gpu, h100-a01 in h100-a); "other" when nothing is left.
func groupPrefix(name string) string {
	if i := strings.IndexByte(name, '.'); i > 0 {
		name = name[:i]
	}
	if p := strings.TrimRight(name, "0123456789-_"); p != "" {
		return p
	}
	return "other"
}

// pageFileMax bounds a page's file name (without "-N.html").
const pageFileMax = 60

// pageFile is a group's name as a safe file name: lower-case letters,
// digits, "-" and "_" only (anything else is "_"), at most pageFileMax
// bytes, never empty and never starting with "-". Two groups may make
// the same one: groupFiles tells them apart.
func pageFile(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '_':
			b.WriteRune(r)
		case r == '-' && b.Len() > 0:
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= pageFileMax {
			break
		}
	}
	if b.Len() == 0 {
		return "group"
	}
	return b.String()
}

// countOf is "1 host", "3 hosts".
func countOf(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// someOf is the first groupsWarnMax names, and how many more.
func someOf(names []string) string {
	if len(names) <= groupsWarnMax {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:groupsWarnMax], ", ") + fmt.Sprintf(" and %d more", len(names)-groupsWarnMax)
}
