package cgroup

import (
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is what g has used, for the textfile: each field is -1 when not
// known (no such controller).
type Usage struct {
	CPUSeconds  float64 // cpu.stat usage_usec (v2, always there) / 1e6
	MemoryBytes int64   // memory.current (v2) or memory.usage_in_bytes (v1)
	OOMKills    int64   // memory.events oom_kill (v2) or memory.oom_control oom_kill (v1)
	PidsMaxHits int64   // pids.events max (v2 and v1): forks refused at pids.max
}

// Usage reads g's use. On a hybrid host the v1 figures are known where g
// has a v1 folder of that controller, i.e. where a limit went through v1.
func (g *Group) Usage() Usage {
	u := Usage{-1, -1, -1, -1}
	if usec := stat(g.Dir, "cpu.stat", "usage_usec"); usec >= 0 {
		u.CPUSeconds = float64(usec) / 1e6
	}
	u.MemoryBytes = single(filepath.Join(g.Dir, "memory.current"))
	u.OOMKills = stat(g.Dir, "memory.events", "oom_kill")
	u.PidsMaxHits = stat(g.Dir, "pids.events", "max")
	if dir := g.V1["memory"]; dir != "" {
		if u.MemoryBytes < 0 {
			u.MemoryBytes = single(filepath.Join(dir, "memory.usage_in_bytes"))
		}
		if u.OOMKills < 0 {
			u.OOMKills = stat(dir, "memory.oom_control", "oom_kill")
		}
	}
	if dir := g.V1["pids"]; dir != "" && u.PidsMaxHits < 0 {
		u.PidsMaxHits = stat(dir, "pids.events", "max")
	}
	return u
}

// stat is key's figure in the "key value" file dir/name, or -1.
func stat(dir, name, key string) int64 {
	b, err := readBounded(filepath.Join(dir, name))
	if err != nil {
		return -1
	}
	return parseCount(keyValues(string(b))[key])
}

// single is the one figure the file path holds, or -1.
func single(path string) int64 {
	b, err := readBounded(path)
	if err != nil {
		return -1
	}
	return parseCount(strings.TrimSpace(string(b)))
}

func parseCount(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}
