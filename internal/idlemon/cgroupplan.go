package idlemon

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/supervisor"
	"golang.org/x/sys/unix"
)

// Cgroup modes, as check, the log and the textfile name them.
const (
	modeV2    = "v2"    // every limit set goes through cgroup v2
	modeV2V1  = "v2+v1" // groups in v2, some limits through v1 controllers
	modeMarks = "marks" // no cgroups: marks, sessions and remembered pids
)

// cgroupPlan is where the jobs' groups go, as resolve found it, before
// anything is made.
type cgroupPlan struct {
	Mode string
	Why  string // marks: why no group can be made; else how Dir was chosen
	Dir  string
	Tree *cgroup.Tree // inspected, not opened: runDaemon opens it
	// Unit: Dir is systemd's group of this unit, not a folder of idlemon's
	// own (which a clean stop removes).
	Unit bool
	// Enforce lists, per job (parallel to hostPlan.Jobs), how each limit
	// set is enforced, or why not.
	Enforce [][]cgroup.Enforcement
}

// resolveCgroup finds the jobs' groups' place for cfg: the cgroup v2
// hierarchy, and in it the folder the cgroup key names (auto: the unit's
// own group under systemd, which Delegate=yes hands to idlemon; else
// idlemon-INSTANCE at the top of the hierarchy).
//
// A folder the config names that cannot be used is an error: whoever wrote
// it wants its limits. In auto mode idlemon falls back to marks, and check
// and the log say why.
func (p *hostPlan) resolveCgroup() error {
	p.findCgroup()
	cfg, c := p.Cfg, &p.Cgroup
	if c.Tree == nil && cfg.Cgroup != config.CgroupAuto && cfg.Cgroup != config.CgroupOff {
		e := cfg.ErrorAt("defaults", "cgroup", "%s cannot hold the jobs' groups: %s", cfg.Cgroup, c.Why)
		if strings.Contains(c.Why, cfg.Cgroup) {
			e.Msg = c.Why // it names the folder already
		}
		e.HintText = "name a folder in the cgroup v2 hierarchy (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host), or cgroup = auto"
		return e
	}
	return nil
}

// findCgroup fills p.Cgroup.
func (p *hostPlan) findCgroup() {
	cfg := p.Cfg
	c := &p.Cgroup
	c.Mode = modeMarks
	if cfg.Cgroup == config.CgroupOff {
		c.Why = "cgroup = off in " + cfg.Path
		return
	}
	h, err := cgroup.Mounted()
	if err != nil || h.V2 == "" {
		c.Why = "no cgroup v2 hierarchy is mounted (/proc/self/mountinfo has no cgroup2 file system)"
		if err != nil {
			c.Why = fmt.Sprintf("cannot read the mounts: %v", err)
		}
		return
	}
	c.Dir, c.Why, c.Unit = autoCgroupDir(h, cfg)
	if !writable(c.Dir) {
		c.Why = fmt.Sprintf("%s is not writable (a read-only cgroup file system, as in a container?)", c.Dir)
		c.Dir = ""
		return
	}
	t, err := cgroup.Inspect(h, c.Dir)
	if err != nil {
		c.Why, c.Dir = err.Error(), ""
		return
	}
	c.Tree, c.Mode = t, modeV2
	for _, j := range p.Jobs {
		enf := t.Plan(cgroupLimits(j.Sec.Limits))
		for _, e := range enf {
			if e.Why == "" && strings.Contains(e.File, "v1") {
				c.Mode = modeV2V1
			}
		}
		c.Enforce = append(c.Enforce, enf)
	}
}

// autoCgroupDir is the folder the cgroup key names, and how it was chosen.
func autoCgroupDir(h cgroup.Hierarchies, cfg *config.Config) (dir, why string, unit bool) {
	if cfg.Cgroup != config.CgroupAuto {
		return cfg.Cgroup, "cgroup = " + cfg.Cgroup, false
	}
	if os.Getenv("INVOCATION_ID") != "" {
		if m, err := cgroup.ReadMembership("/proc", os.Getpid()); err == nil && m.V2 != "/" && m.V2 != "" {
			own := strings.TrimSuffix(m.V2, "/supervisor") // where an earlier start moved itself
			return filepath.Join(h.V2, own), "systemd's group of this unit (Delegate=yes)", true
		}
	}
	return filepath.Join(h.V2, "idlemon-"+supervisor.InstanceOf(cfg.StateFile)), "not run by systemd: a group of its own at the top of the hierarchy; under systemd, the unit's own group (Delegate=yes)", false
}

// writable says whether dir, or the nearest folder above it that exists,
// may be written (a cgroup file system may be mounted read-only).
func writable(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			return unix.Access(d, unix.W_OK) == nil
		}
		if d == filepath.Dir(d) {
			return false
		}
	}
}

// cgroupLimits is a job's config limits as the cgroup package takes them.
func cgroupLimits(l config.Limits) cgroup.Limits {
	return cgroup.Limits{CPUWeight: l.CPUWeight, MemoryHigh: l.MemoryHigh, MemoryMax: l.MemoryMax, PidsMax: l.PidsMax}
}

// describeCgroup prints the mode, and per job how each limit is enforced.
func (p *hostPlan) describeCgroup(w io.Writer) {
	c := p.Cgroup
	if c.Tree == nil {
		fmt.Fprintf(w, "cgroup: none (marks only): %s; a job process that leaves its session and clears its environment is not found, and no limit is enforced\n", c.Why)
		for _, j := range p.Jobs {
			if l := j.Sec.Limits; l.MemoryHigh > 0 || l.MemoryMax > 0 || l.PidsMax > 0 || l.CPUWeight != config.DefaultCPUWeight {
				fmt.Fprintf(w, "warning: job %s: its limits are not enforced without cgroups\n", j.Sec.Name)
			}
		}
		return
	}
	stop := "cgroup.kill"
	if !c.Tree.CanKill {
		stop = "freeze, SIGKILL to each process, thaw (no cgroup.kill before Linux 5.14)"
	}
	fmt.Fprintf(w, "cgroup: %s, a group per run under %s (%s); stop: SIGTERM to every process of the group, then %s\n", c.Mode, c.Dir, c.Why, stop)
	for i, j := range p.Jobs {
		var on, off []string
		for _, e := range c.Enforce[i] {
			if e.Why == "" {
				on = append(on, fmt.Sprintf("%s %s (%s)", e.Limit, e.Value, e.File))
			} else {
				off = append(off, fmt.Sprintf("%s %s: %s", e.Limit, e.Value, e.Why))
			}
		}
		if len(on) > 0 {
			fmt.Fprintf(w, "job %s: limits %s\n", j.Sec.Name, strings.Join(on, ", "))
		}
		for _, o := range off {
			fmt.Fprintf(w, "warning: job %s: NOT ENFORCED: %s\n", j.Sec.Name, o)
		}
	}
}

// openCgroup makes the plan's tree for the daemon; on failure the daemon
// runs with marks only, and says so.
func (p *hostPlan) openCgroup() (t *cgroup.Tree, warn string) {
	c := p.Cgroup
	if c.Tree == nil {
		if p.Cfg.Cgroup == config.CgroupOff {
			return nil, ""
		}
		return nil, "no cgroups, marks only: " + c.Why
	}
	t, err := cgroup.Open(c.Tree.H, c.Dir)
	if err != nil {
		return nil, fmt.Sprintf("no cgroups, marks only: cannot use %s: %v", c.Dir, err)
	}
	return t, ""
}

// closeTree removes the tree's folders (v2 and the v1 ones) on a clean
// stop, once its groups are gone: a folder of its own when run by hand
// or named in the config. The unit's own group and its v1 folders stay
// (systemd's), and so does a folder that still holds something.
func (p *hostPlan) closeTree(t *cgroup.Tree) {
	if t == nil || p.Cgroup.Unit {
		return
	}
	for _, m := range t.H.V1 {
		if dir := filepath.Join(m, t.Rel); dir != m {
			os.Remove(dir)
		}
	}
	if t.Dir != t.H.V2 {
		os.Remove(t.Dir)
	}
}
