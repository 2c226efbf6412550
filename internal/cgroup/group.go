package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Group is one run's group: its v2 folder, and its v1 folders (controller
// -> folder) where limits go through v1.
type Group struct {
	Name string
	Dir  string
	V1   map[string]string

	// noKillFile makes Kill freeze and signal even where cgroup.kill
	// exists: a Tree with CanKill false (and tests) sets it.
	noKillFile bool
	// poll replaces pollEvery where set (tests: an hour, so that only
	// inotify wakes a wait).
	poll time.Duration
}

// Create makes the group of name under t with l's limits written (v2 and,
// per Plan, v1), before any process is in it. A group of that name that
// already exists is an error (a nonce is never reused). On any failure
// what it made is removed.
func (t *Tree) Create(name string, l Limits) (g *Group, err error) {
	if _, _, ok := ParseGroupName(name); !ok {
		return nil, fmt.Errorf("cgroup: %q is not a group name (GroupName makes them)", name)
	}
	g = &Group{Name: name, Dir: filepath.Join(t.Dir, name), V1: map[string]string{}, noKillFile: !t.CanKill}
	var made []string // folders, parents first
	defer func() {
		if err != nil {
			for _, dir := range slices.Backward(made) {
				_ = os.Remove(dir)
			}
			g = nil
		}
	}()
	if err := os.Mkdir(g.Dir, 0o755); err != nil {
		return nil, err
	}
	made = append(made, g.Dir)
	v2, v1 := t.writes(l)
	for _, w := range v2 {
		if err := writeFile(filepath.Join(g.Dir, w.file), w.value); err != nil {
			return nil, err
		}
	}
	for _, w := range v1 {
		dir := t.v1Dir(w.controller, name)
		if !slices.Contains(made, dir) {
			m, err := mkdirAll(dir)
			made = append(made, m...)
			if err != nil {
				return nil, err
			}
		}
		g.V1[w.controller] = dir
		if err := writeFile(filepath.Join(dir, w.file), w.value); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// v1Dir is the v1 folder of controller for the group name: at t.Rel/name
// below the controller's mount.
func (t *Tree) v1Dir(controller, name string) string {
	return filepath.Join(t.H.V1[controller], t.Rel, name)
}

// mkdirAll makes dir, which must not exist, and its missing parents
// (0755); it returns the folders it made, parents first.
func mkdirAll(dir string) ([]string, error) {
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || p == filepath.Dir(p) {
			break
		}
		missing = append(missing, p)
	}
	slices.Reverse(missing)
	var made []string
	for _, p := range missing {
		err := os.Mkdir(p, 0o755)
		if errors.Is(err, fs.ErrExist) && p != dir {
			continue // a parent another Create made meanwhile
		}
		if err != nil {
			return made, err
		}
		made = append(made, p)
	}
	if len(missing) == 0 || missing[len(missing)-1] != dir {
		return made, fmt.Errorf("mkdir %s: %w", dir, fs.ErrExist)
	}
	return made, nil
}

// Groups lists the groups of ours in t (by ParseGroupName), with their v1
// folders where they exist: what an earlier idlemon left.
func (t *Tree) Groups() ([]*Group, error) {
	entries, err := os.ReadDir(t.Dir)
	if err != nil {
		return nil, err
	}
	var out []*Group
	for _, e := range entries {
		if _, _, ok := ParseGroupName(e.Name()); !ok || !e.IsDir() {
			continue
		}
		g := &Group{Name: e.Name(), Dir: filepath.Join(t.Dir, e.Name()), V1: map[string]string{}, noKillFile: !t.CanKill}
		for _, c := range limitControllers {
			if t.H.V1[c] == "" || slices.Contains(t.Controllers, c) {
				continue
			}
			if dir := t.v1Dir(c, e.Name()); isDir(dir) {
				g.V1[c] = dir
			}
		}
		out = append(out, g)
	}
	return out, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// Add moves pid into g: the v2 group, then each v1 folder.
func (g *Group) Add(pid int) error {
	if err := writeFile(filepath.Join(g.Dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return err
	}
	for _, dir := range g.v1Dirs() {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// v1Dirs are g's v1 folders, each once (co-mounted controllers, such as
// cpu,cpuacct, share one), sorted.
func (g *Group) v1Dirs() []string {
	var dirs []string
	for _, d := range g.V1 {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	return dirs
}

// Procs lists the pids in g and the groups below it (cgroup.procs),
// sorted.
func (g *Group) Procs() ([]int, error) {
	var pids []int
	err := filepath.WalkDir(g.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != g.Dir && errors.Is(err, fs.ErrNotExist) {
				return nil // a group below removed meanwhile
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := readAtMost(filepath.Join(p, "cgroup.procs"), maxProcs)
		if err != nil {
			if p != g.Dir && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("%s/cgroup.procs: %q is not a pid", p, f)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	slices.Sort(pids)
	return slices.Compact(pids), err
}

// events reads g's cgroup.events ("populated 1", "frozen 0").
func (g *Group) events() (map[string]string, error) {
	b, err := readBounded(filepath.Join(g.Dir, "cgroup.events"))
	if err != nil {
		return nil, err
	}
	return keyValues(string(b)), nil
}

// keyValues reads "key value" lines (cgroup.events, memory.events,
// cpu.stat...).
func keyValues(s string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			kv[k] = strings.TrimSpace(v)
		}
	}
	return kv
}

// Populated reads cgroup.events' populated: whether any process is in g
// or below it.
func (g *Group) Populated() (bool, error) {
	ev, err := g.events()
	if err != nil {
		return false, err
	}
	return ev["populated"] != "0", nil
}

// Freeze freezes g (cgroup.freeze = 1) and waits, until deadline, for
// cgroup.events to say frozen 1. A frozen process receives signals and
// acts on them when thawed; it cannot fork meanwhile. SIGKILL is the
// exception: a frozen process dies of it at once.
func (g *Group) Freeze(deadline time.Time) error {
	if err := writeFile(filepath.Join(g.Dir, "cgroup.freeze"), "1"); err != nil {
		return err
	}
	frozen, err := g.waitEvents(deadline, func(ev map[string]string) bool { return ev["frozen"] == "1" })
	if err != nil {
		return err
	}
	if !frozen {
		return fmt.Errorf("cgroup %s: not frozen by the deadline", g.Dir)
	}
	return nil
}

// Thaw writes cgroup.freeze = 0.
func (g *Group) Thaw() error {
	return writeFile(filepath.Join(g.Dir, "cgroup.freeze"), "0")
}

// freezeForKill bounds the freeze of Kill's second way.
const freezeForKill = 2 * time.Second

// Kill sends SIGKILL to every process in g and the groups below it:
// cgroup.kill where the kernel has it; else Freeze (nothing forks
// meanwhile), SIGKILL to each of Procs, Thaw. A frozen process dies of
// SIGKILL at once (seen on 6.18), and cgroup.kill works on a frozen group.
// It does not wait. When the freeze does not complete in 2 s, it still
// signals and thaws, and says so.
func (g *Group) Kill() error {
	if !g.noKillFile {
		err := writeFile(filepath.Join(g.Dir, "cgroup.kill"), "1")
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	freezeErr := g.Freeze(time.Now().Add(freezeForKill))
	pids, err := g.Procs()
	for _, pid := range pids {
		// Only pids listed in g: a frozen process cannot exit, so no pid
		// is reused by another process meanwhile.
		if kerr := unix.Kill(pid, unix.SIGKILL); kerr != nil && !errors.Is(kerr, unix.ESRCH) {
			err = errors.Join(err, fmt.Errorf("kill %d: %w", pid, kerr))
		}
	}
	return errors.Join(freezeErr, err, g.Thaw())
}

// WaitEmpty waits until g has no process (populated 0) or deadline; it
// says whether g is empty. It sleeps on inotify's modify events of
// cgroup.events (the kernel raises one at each change), with a slow poll
// as a fallback, never a busy loop. A group that is gone is empty.
func (g *Group) WaitEmpty(deadline time.Time) bool {
	empty, err := g.waitEvents(deadline, func(ev map[string]string) bool { return ev["populated"] == "0" })
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	return empty
}

// Remove removes g's folders (v1, then v2), which must be empty of
// processes: the v2 groups below g (a job's own) first. The v2 folder goes
// last: a Remove cut short leaves it, and Groups finds the group by it.
func (g *Group) Remove() error {
	for _, d := range g.v1Dirs() {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	var dirs []string
	err := filepath.WalkDir(g.Dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, d := range slices.Backward(dirs) {
		if err := os.Remove(d); err != nil {
			return err
		}
	}
	return nil
}
