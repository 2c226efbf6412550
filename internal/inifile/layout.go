package inifile

import (
	"slices"
	"sort"
	"strings"

	"gopkg.in/ini.v1"
)

// Layout is which sections a file may have and which keys each may hold.
type Layout struct {
	Sections []SectionRule
	// Home is the section a key written before the first header belongs
	// in, for the hint.
	Home string
}

// SectionRule allows one section, or a family of them.
type SectionRule struct {
	Name   string   // the section's name; with Prefix, how names start
	Prefix bool     // any section whose name starts with Name ([gpu-a], [gpu-b])
	Shown  string   // the name in the hint, e.g. "[gpu-NAME]"; default "[Name]"
	Keys   []string // the keys it may hold, in the order the hint lists them
	AnyKey bool     // its keys are names, not settings ([host_names])
}

func (r SectionRule) matches(name string) bool {
	if r.Prefix {
		return strings.HasPrefix(name, r.Name)
	}
	return name == r.Name
}

func (r SectionRule) shown() string {
	if r.Shown != "" {
		return r.Shown
	}
	return "[" + r.Name + "]"
}

// Rule returns the rule a section name falls under.
func (l Layout) Rule(section string) (SectionRule, bool) {
	for _, r := range l.Sections {
		if r.matches(section) {
			return r, true
		}
	}
	return SectionRule{}, false
}

// Check reports the first key before any section header, unknown section
// or unknown key, in the file's order, with its line and a hint listing
// what is known. Every command that reads a file checks all of it, so that
// a typo anywhere is an error whichever command meets it first.
func (f *File) Check(l Layout) error {
	for _, sec := range f.ini.Sections() {
		name := sec.Name()
		if name == ini.DefaultSection {
			if keys := sec.KeyStrings(); len(keys) > 0 {
				e := f.ErrorAt(name, keys[0], "a key before the first section")
				e.Section = ""
				e.HintText = "put it under [" + l.Home + "]"
				return e
			}
			continue
		}
		rule, ok := l.Rule(name)
		if !ok {
			e := f.ErrorAt(name, "", "unknown section [%s]", name)
			e.HintText = "known sections: " + strings.Join(l.shownSections(), ", ")
			return e
		}
		if rule.AnyKey {
			continue
		}
		for _, k := range sec.KeyStrings() {
			if !slices.Contains(rule.Keys, k) {
				e := f.ErrorAt(name, k, "unknown key in [%s]", name)
				e.HintText = "known keys: " + strings.Join(rule.Keys, ", ")
				return e
			}
		}
	}
	return nil
}

func (l Layout) shownSections() []string {
	out := make([]string, 0, len(l.Sections))
	for _, r := range l.Sections {
		out = append(out, r.shown())
	}
	sort.Strings(out)
	return out
}
