package render

import (
	"fmt"
	"strings"

	"github.com/gpumon/gpumon/internal/cluster"
)

// hostGroup is a group of hosts: one of [groups], or the hosts whose
// names share a prefix (groupPrefix). Its hosts keep the cluster's order.
type hostGroup struct {
	name  string
	file  string // its pages' file name without ".html" (pageFile), unique
	hosts []*cluster.Host
}

// groupsWarnMax is how many hosts a warning about [groups] names.
const groupsWarnMax = 5

// groupHosts sorts the cluster's hosts into groups: [groups] first, in the
// file's order (a host in two groups is in the first), then the rest by
// the prefix of their names, in the order of each prefix's first host.
// The warnings say what [groups] named that is not in the data, and which
// hosts it named twice.
func groupHosts(c *cluster.Cluster, rules []groupRule) ([]*hostGroup, []string) {
	g := ruleGroups(c, rules)
	prefixed := map[string]*hostGroup{}
	for _, h := range c.Hosts {
		in := g.of[h.Name]
		if in == nil {
			p := groupPrefix(h.Name)
			in = prefixed[p]
			if in == nil {
				if in = g.named[p]; in == nil { // a prefix that [groups] also names is that group
					in = &hostGroup{name: p}
					g.groups = append(g.groups, in)
				}
				prefixed[p] = in
			}
		}
		in.hosts = append(in.hosts, h)
	}
	out := g.groups[:0]
	for _, gr := range g.groups {
		if len(gr.hosts) > 0 { // a group of unknown hosts only is left out
			out = append(out, gr)
		}
	}
	return out, g.warnings
}

// ruledGroups is what [groups] makes of the data: its groups, by name,
// and each host it names in the data, by host name (not in the groups'
// Hosts yet).
type ruledGroups struct {
	groups   []*hostGroup
	named    map[string]*hostGroup // by group name
	of       map[string]*hostGroup // by host name
	warnings []string
}

// ruleGroups applies [groups] to the cluster's hosts.
func ruleGroups(c *cluster.Cluster, rules []groupRule) *ruledGroups {
	byName := make(map[string]*cluster.Host, len(c.Hosts))
	for _, h := range c.Hosts {
		byName[h.Name] = h
	}
	g := &ruledGroups{named: map[string]*hostGroup{}, of: map[string]*hostGroup{}}
	var twice []string
	for _, r := range rules {
		grp := g.named[r.Name]
		if grp == nil {
			grp = &hostGroup{name: r.Name}
			g.named[r.Name] = grp
			g.groups = append(g.groups, grp)
		}
		var unknown []string
		for _, n := range r.Hosts {
			if byName[n] == nil {
				unknown = append(unknown, n)
				continue
			}
			if first := g.of[n]; first != nil {
				if first != grp {
					twice = append(twice, fmt.Sprintf("%s (in %s and %s)", n, first.name, grp.name))
				}
				continue
			}
			g.of[n] = grp
		}
		if len(unknown) > 0 {
			g.warnings = append(g.warnings, fmt.Sprintf("[groups] %s: %s not in the data, ignored: %s",
				r.Name, countOf(len(unknown), "host"), someOf(unknown)))
		}
	}
	if len(twice) > 0 {
		g.warnings = append(g.warnings, fmt.Sprintf("[groups]: %s in two groups, shown in the first: %s",
			countOf(len(twice), "host"), someOf(twice)))
	}
	return g
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
