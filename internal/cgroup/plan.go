package cgroup

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Plan says how each limit that is set in l is enforced in t: through v2
// where t.Controllers has its controller, else through the v1 hierarchy
// of it where mounted, else not (Why says so). Pure: reads no file.
func (t *Tree) Plan(l Limits) []Enforcement {
	var out []Enforcement
	if l.CPUWeight > 0 {
		out = append(out, t.enforce("cpu_weight", strconv.Itoa(l.CPUWeight), "cpu", "cpu.weight", "cpu.shares"))
	}
	if l.MemoryHigh > 0 {
		e := t.enforce("memory_high", formatSize(l.MemoryHigh), "memory", "memory.high", "")
		if e.File == "" && t.H.V1["memory"] != "" {
			e.Why = "cgroup v1 has no memory.high; set memory_max for a hard ceiling"
			if l.MemoryMax > 0 {
				e.Why = "cgroup v1 has no memory.high; memory_max is enforced"
			}
		}
		out = append(out, e)
	}
	if l.MemoryMax > 0 {
		out = append(out, t.enforce("memory_max", formatSize(l.MemoryMax), "memory", "memory.max", "memory.limit_in_bytes"))
	}
	if l.PidsMax > 0 {
		out = append(out, t.enforce("pids_max", strconv.FormatInt(l.PidsMax, 10), "pids", "pids.max", "pids.max"))
	}
	return out
}

// enforce is how limit, set to value, is enforced: by v2File where t's
// groups have controller, else by v1File ("" where v1 has none) in the
// v1 hierarchy of controller.
func (t *Tree) enforce(limit, value, controller, v2File, v1File string) Enforcement {
	e := Enforcement{Limit: limit, Value: value}
	switch mount := t.H.V1[controller]; {
	case slices.Contains(t.Controllers, controller):
		e.File = "cgroup v2 " + v2File
	case mount != "" && v1File != "":
		e.File = fmt.Sprintf("cgroup v1 %s (%s)", v1File, mount)
	default:
		e.Why = fmt.Sprintf("no %s controller in the v2 hierarchy (%s) nor a v1 %s hierarchy", controller, t.H.V2, controller)
	}
	return e
}

// v1Limit is a limit written through a v1 hierarchy: file in the group's
// folder of controller.
type v1Limit struct {
	controller, file, value string
}

// v2Limit is a limit written in the group's v2 folder.
type v2Limit struct {
	file, value string
}

// writes are the files Create writes for l in t, per Plan: v2 ones and v1
// ones.
func (t *Tree) writes(l Limits) ([]v2Limit, []v1Limit) {
	var v2 []v2Limit
	var v1 []v1Limit
	add := func(controller, v2File, v2Value, v1File, v1Value string) {
		switch {
		case slices.Contains(t.Controllers, controller):
			v2 = append(v2, v2Limit{v2File, v2Value})
		case t.H.V1[controller] != "" && v1File != "":
			v1 = append(v1, v1Limit{controller, v1File, v1Value})
		}
	}
	if l.CPUWeight > 0 {
		add("cpu", "cpu.weight", strconv.Itoa(l.CPUWeight), "cpu.shares", strconv.Itoa(cpuShares(l.CPUWeight)))
	}
	if l.MemoryHigh > 0 {
		add("memory", "memory.high", strconv.FormatInt(l.MemoryHigh, 10), "", "")
	}
	if l.MemoryMax > 0 {
		max := strconv.FormatInt(l.MemoryMax, 10)
		add("memory", "memory.max", max, "memory.limit_in_bytes", max)
		add("memory", "memory.oom.group", "1", "", "")
	}
	if l.PidsMax > 0 {
		n := strconv.FormatInt(l.PidsMax, 10)
		add("pids", "pids.max", n, "pids.max", n)
	}
	return v2, v1
}

// cpuShares is v1's cpu.shares for a v2 cpu.weight: 100 (a normal
// process's weight) is 1024 (a normal process's shares).
func cpuShares(weight int) int { return max(2, weight*1024/100) }

// formatSize writes bytes as the config means them: in the largest unit
// of 1024s that divides it ("8 GiB", "1536 MiB"), else in bytes.
func formatSize(b int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b%u.size == 0 {
			return fmt.Sprintf("%d %s", b/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d B", b)
}

// GroupName is the folder name of one run's group: "<nonce>.<job>", the
// job name with every byte outside [A-Za-z0-9_.-] replaced by '_' (an
// empty one is "_"), cut to fit a file name. The nonce is lower-case hex
// (supervisor's newNonce), 8 to 64 digits: ParseGroupName takes no other,
// so that a folder such as "user.slice" is never taken for a group.
func GroupName(nonce, job string) string {
	b := []byte(job)
	for i, c := range b {
		if !jobByte(c) {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		b = []byte("_")
	}
	name := nonce + "." + string(b)
	return name[:min(len(name), maxName)]
}

// maxName is the longest file name (NAME_MAX).
const maxName = 255

// ParseGroupName splits a GroupName; ok is false for any other name (not
// a group of ours: left alone).
func ParseGroupName(name string) (nonce, job string, ok bool) {
	nonce, job, found := strings.Cut(name, ".")
	if !found || len(nonce) < 8 || len(nonce) > 64 || job == "" || len(name) > maxName {
		return "", "", false
	}
	for i := 0; i < len(nonce); i++ {
		if c := nonce[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", false
		}
	}
	for i := 0; i < len(job); i++ {
		if !jobByte(job[i]) {
			return "", "", false
		}
	}
	return nonce, job, true
}

func jobByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}
