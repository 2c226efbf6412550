package health

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpumon/gpumon/internal/inifile"
)

// ConfigKeys are the keys of config.ini's [health].
var ConfigKeys = []string{"failed", "degraded", "fatal_xids", "warning_xids"}

// maxXID bounds an XID in [health]: NVIDIA's catalogue ends in the low
// hundreds, and a typo of six digits is a typo.
const maxXID = 9999

// ReadConfig reads [health] into p, which holds the defaults
// (DefaultPolicy). A list written replaces the default one; a condition
// (or an XID) written in one list leaves the other list's default, so
// that `failed = ..., remap_pending` alone moves remap_pending from
// degraded to failed. Written in both lists, it is an error: which one
// was meant is not known.
func ReadConfig(f *inifile.File, p *Policy) error {
	sec := f.Section("health")
	failed, failedSet, err := conditionList(sec, "failed")
	if err != nil {
		return err
	}
	degraded, degradedSet, err := conditionList(sec, "degraded")
	if err != nil {
		return err
	}
	if err := settle(sec, "failed", "degraded", &p.Failed, &p.Degraded, failed, degraded, failedSet, degradedSet, strings.Clone); err != nil {
		return err
	}
	fatal, fatalSet, err := xidList(sec, "fatal_xids")
	if err != nil {
		return err
	}
	warning, warningSet, err := xidList(sec, "warning_xids")
	if err != nil {
		return err
	}
	return settle(sec, "fatal_xids", "warning_xids", &p.FatalXIDs, &p.WarningXIDs, fatal, warning, fatalSet, warningSet, strconv.Itoa)
}

// settle puts two lists written (or not) into *a and *b: one not written
// keeps its default less what the other names; an item in both written
// lists is an error at the second key.
func settle[T comparable](sec inifile.Section, keyA, keyB string, a, b *[]T, listA, listB []T, setA, setB bool, show func(T) string) error {
	if setA && setB {
		for _, v := range listB {
			if slices.Contains(listA, v) {
				return sec.ErrorAt(keyB, "%s is in %s too: a GPU cannot be both", show(v), keyA)
			}
		}
	}
	switch {
	case setA && setB:
		*a, *b = listA, listB
	case setA:
		*a, *b = listA, without(*b, listA)
	case setB:
		*a, *b = without(*a, listB), listB
	}
	return nil
}

func without[T comparable](list, drop []T) []T {
	return slices.DeleteFunc(slices.Clone(list), func(v T) bool { return slices.Contains(drop, v) })
}

// conditionList reads a list of condition names (an empty value is an
// empty list: nothing is failed, or degraded).
func conditionList(sec inifile.Section, key string) ([]string, bool, error) {
	names, ok := sec.List(key)
	if !ok {
		return nil, false, nil
	}
	out := []string{}
	for _, n := range names {
		n = strings.ToLower(n)
		if !slices.Contains(Conditions, n) {
			e := sec.ErrorAt(key, "%q is not a condition", n)
			e.HintText = "known conditions: " + strings.Join(Conditions, ", ")
			return nil, true, e
		}
		if n == Lost && key == "degraded" {
			e := sec.ErrorAt(key, "lost cannot be degraded: a GPU nvidia-smi cannot read is offered to nobody")
			e.HintText = "leave lost out of degraded (it is always failed)"
			return nil, true, e
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, true, nil
}

// xidList reads a list of XID codes.
func xidList(sec inifile.Section, key string) ([]int, bool, error) {
	items, ok := sec.List(key)
	if !ok {
		return nil, false, nil
	}
	out := []int{}
	for _, s := range items {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxXID {
			e := sec.ErrorAt(key, "%q is not an XID (a whole number from 1 to %d)", s, maxXID)
			e.HintText = "write XID codes as NVIDIA's XID catalogue numbers them, comma-separated: 48, 79"
			return nil, true, e
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, true, nil
}
