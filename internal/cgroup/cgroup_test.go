package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/testenv"
)

// readTrim reads a cgroup file, failing the test on an error.
func readTrim(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestCreateWritesLimitsWherePlanSays(t *testing.T) {
	tr := newTree(t)
	l := Limits{CPUWeight: 1, MemoryHigh: 64 << 20, MemoryMax: 128 << 20, PidsMax: 50}
	g := create(t, tr, "limits", l)
	if !isDir(g.Dir) {
		t.Fatalf("no v2 folder %s", g.Dir)
	}
	want := map[string]string{ // file as Plan names it -> what it holds
		"cgroup v2 cpu.weight": "1", "cgroup v2 memory.high": "67108864", "cgroup v2 memory.max": "134217728",
		"cgroup v2 pids.max": "50", "cgroup v1 cpu.shares": "10", "cgroup v1 memory.limit_in_bytes": "134217728",
		"cgroup v1 pids.max": "50",
	}
	for _, e := range tr.Plan(l) {
		if e.File == "" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(e.File, "cgroup v2 "), "cgroup v1 "), " ")
		dir := g.Dir
		if strings.HasPrefix(e.File, "cgroup v1 ") {
			controller, _, _ := strings.Cut(name, ".")
			dir = g.V1[controller]
			if wantDir := filepath.Join(tr.H.V1[controller], tr.Rel, g.Name); dir != wantDir {
				t.Errorf("%s: v1 folder %q, want %q", e.Limit, dir, wantDir)
			}
		}
		key, _, _ := strings.Cut(e.File, " (")
		if got := readTrim(t, filepath.Join(dir, name)); got != want[key] {
			t.Errorf("%s: %s holds %q, want %q", e.Limit, filepath.Join(dir, name), got, want[key])
		}
	}
	if !slices.Contains(tr.Controllers, "memory") {
		// The hybrid test machines: say memory_high is not enforced, and why.
		if e := tr.Plan(l)[1]; e.Limit != "memory_high" || e.File != "" || e.Why == "" {
			t.Errorf("memory_high without a v2 memory controller: %+v, want not enforced with a why", e)
		}
	} else if got := readTrim(t, filepath.Join(g.Dir, "memory.oom.group")); got != "1" {
		t.Errorf("memory.oom.group %q, want 1", got)
	}
	if _, err := tr.Create(g.Name, l); err == nil || !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create of an existing group: %v, want it exists", err)
	}
}

func TestCreateRemovesWhatItMadeOnFailure(t *testing.T) {
	tr := newTree(t)
	if len(tr.H.V1["pids"]) == 0 || slices.Contains(tr.Controllers, "pids") {
		testenv.Need(t, "needs pids through cgroup v1 (the hybrid layout of the test machines)")
	}
	name := newName(t, "fails")
	// A v1 folder left in the way (say, by a crash): Create must fail, naming it.
	blocker := filepath.Join(tr.H.V1["pids"], tr.Rel, name)
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := tr.Create(name, Limits{CPUWeight: 1, MemoryMax: 64 << 20, PidsMax: 10})
	if err == nil || !strings.Contains(err.Error(), blocker) {
		t.Fatalf("Create over a leftover v1 folder: %v, want an error naming %s", err, blocker)
	}
	for _, dir := range []string{filepath.Join(tr.Dir, name), filepath.Join(tr.H.V1["cpu"], tr.Rel, name), filepath.Join(tr.H.V1["memory"], tr.Rel, name)} {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left after the failed Create (%v)", dir, err)
		}
	}
	if !isDir(blocker) {
		t.Errorf("the folder Create did not make (%s) was removed", blocker)
	}
}

func TestAddProcsGroupOf(t *testing.T) {
	tr := newTree(t)
	g := create(t, tr, "sleeper", Limits{PidsMax: 20})
	j := startIn(t, g, "exec sleep 60")
	pid := j.cmd.Process.Pid
	if procs, err := g.Procs(); err != nil || !slices.Equal(procs, []int{pid}) {
		t.Errorf("Procs = %v, %v; want [%d]", procs, err, pid)
	}
	m, err := ReadMembership("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := tr.GroupOf(m); !ok || name != g.Name {
		t.Errorf("GroupOf(%+v) = %q, %v; want %q", m, name, ok, g.Name)
	}
	if dir := g.V1["pids"]; dir != "" {
		if want := tr.Rel + "/" + g.Name; m.V1["pids"] != want {
			t.Errorf("v1 pids membership %q, want %q", m.V1["pids"], want)
		}
	}
	self, err := ReadMembership("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := tr.GroupOf(self); ok {
		t.Errorf("the test itself is in group %q", name)
	}
	if populated, err := g.Populated(); err != nil || !populated {
		t.Errorf("Populated = %v, %v; want true", populated, err)
	}
}

// procState is the state letter of /proc/PID/stat (R running, S
// sleeping...) and the user CPU ticks.
func procState(t testing.TB, pid int) (string, int) {
	t.Helper()
	stat := readTrim(t, "/proc/"+strconv.Itoa(pid)+"/stat")
	fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+2:])
	utime, _ := strconv.Atoi(fields[11])
	return fields[0], utime
}

func TestFreezeThaw(t *testing.T) {
	tr := newTree(t)
	g := create(t, tr, "spinner", Limits{})
	j := startIn(t, g, "while :; do :; done")
	pid := j.cmd.Process.Pid
	if err := g.Freeze(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if ev := readTrim(t, filepath.Join(g.Dir, "cgroup.events")); !strings.Contains(ev, "frozen 1") {
		t.Errorf("after Freeze cgroup.events says %q", ev)
	}
	// A spinning shell is R; frozen it sleeps in the kernel and gets no CPU.
	state, ticks := procState(t, pid)
	if state != "S" {
		t.Errorf("frozen spinner's state %q, want S", state)
	}
	if err := g.Thaw(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, now := procState(t, pid); now > ticks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the thawed spinner got no CPU in 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ev := readTrim(t, filepath.Join(g.Dir, "cgroup.events")); !strings.Contains(ev, "frozen 0") {
		t.Errorf("after Thaw cgroup.events says %q", ev)
	}
}

func TestKill(t *testing.T) {
	jobs := map[string]string{
		"ignores SIGTERM":    "trap '' TERM; sleep 60 & sleep 60 & wait",
		"forks in a loop":    "while :; do sleep 1 & done",
		"leaves its session": "setsid sh -c 'trap \"\" TERM HUP; exec sleep 60' & setsid sleep 60 & wait",
	}
	for _, way := range []string{"cgroup.kill", "cgroup.kill when frozen", "freeze and signal"} {
		for name, script := range jobs {
			t.Run(way+"/"+name, func(t *testing.T) {
				tr := newTree(t)
				if way != "freeze and signal" && !tr.CanKill {
					testenv.Need(t, "no cgroup.kill (Linux 5.14) here")
				}
				tr.CanKill = way != "freeze and signal"
				g := create(t, tr, "victim", Limits{})
				if g.noKillFile != (way == "freeze and signal") {
					t.Fatalf("Tree.CanKill %v made a group that kills by cgroup.kill: %v", tr.CanKill, !g.noKillFile)
				}
				bystander := exec.Command("sleep", "60")
				if err := bystander.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = bystander.Process.Kill(); _ = bystander.Wait() })
				j := startIn(t, g, script)
				waitProcs(t, g, 2) // the job has forked
				if way == "cgroup.kill when frozen" {
					if err := g.Freeze(time.Now().Add(5 * time.Second)); err != nil {
						t.Fatal(err)
					}
				}
				if err := g.Kill(); err != nil {
					t.Fatal(err)
				}
				if !g.WaitEmpty(time.Now().Add(5 * time.Second)) {
					procs, _ := g.Procs()
					t.Fatalf("still in the group 5 s after Kill: %v", procs)
				}
				if err := j.wait(t); err == nil || !strings.Contains(err.Error(), "killed") {
					t.Errorf("the job's shell ended with %v, want killed", err)
				}
				if err := g.Remove(); err != nil {
					t.Fatal(err)
				}
				for _, dir := range append([]string{g.Dir}, g.v1Dirs()...) {
					if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s after Remove: %v", dir, err)
					}
				}
				if state, _ := procState(t, bystander.Process.Pid); state == "Z" {
					t.Error("a process outside the group was killed")
				}
			})
		}
	}
}

// waitProcs waits up to 5 s for g to hold at least n processes.
func waitProcs(t testing.TB, g *Group, n int) []int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs, err := g.Procs()
		if err != nil {
			t.Fatal(err)
		}
		if len(procs) >= n {
			return procs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes in the group after 5 s, want %d", len(procs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMemoryMaxKillsTheJob(t *testing.T) {
	tr := newTree(t)
	l := Limits{MemoryMax: 32 << 20}
	if e := tr.Plan(l); e[0].File == "" {
		testenv.Need(t, "memory_max not enforced here: "+e[0].Why)
	}
	g := create(t, tr, "hog", l)
	// tail keeps a line whole until its newline: 200 MiB of zeros, 32 MiB allowed.
	j := startIn(t, g, "head -c 200M /dev/zero | tail >/dev/null")
	if err := j.wait(t); err == nil || !strings.Contains(err.Error(), "exit status 137") {
		t.Errorf("the job ended with %v, want its tail killed (exit status 137)", err)
	}
	if u := g.Usage(); u.OOMKills < 1 {
		t.Errorf("Usage %+v: want OOMKills >= 1", u)
	}
}

// WaitEmpty is called before the supervisor reaps its job: a zombie must
// not hold the group populated.
func TestZombieDoesNotHoldTheGroup(t *testing.T) {
	tr := newTree(t)
	g := create(t, tr, "zombie", Limits{})
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if err := g.Add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if !g.WaitEmpty(time.Now().Add(5 * time.Second)) {
		t.Fatal("the killed, unreaped sleep holds the group after 5 s")
	}
	if state, _ := procState(t, cmd.Process.Pid); state != "Z" {
		t.Errorf("state %q, want Z (not reaped yet)", state)
	}
	if err := g.Remove(); err != nil {
		t.Errorf("Remove with a zombie left: %v", err)
	}
}

func TestPidsMaxStopsAForkBomb(t *testing.T) {
	tr := newTree(t)
	l := Limits{PidsMax: 10}
	if e := tr.Plan(l); e[0].File == "" {
		testenv.Need(t, "pids_max not enforced here: "+e[0].Why)
	}
	g := create(t, tr, "bomb", l)
	// The shell fails to fork its 10th sleeper ("Cannot fork") and exits.
	j := startIn(t, g, "for i in $(seq 200); do sleep 60 & done; wait")
	if err := j.wait(t); err == nil {
		t.Error("the shell started 200 sleepers under pids_max 10")
	}
	procs, err := g.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) == 0 || len(procs) > int(l.PidsMax) {
		t.Errorf("%d processes in the group, want 1 to %d", len(procs), l.PidsMax)
	}
	if u := g.Usage(); u.PidsMaxHits < 1 {
		t.Errorf("Usage %+v: want PidsMaxHits >= 1", u)
	}
}

func TestGroupsFindsLeftoversOnly(t *testing.T) {
	earlier := newTree(t)
	l := Limits{CPUWeight: 5, PidsMax: 30}
	left := create(t, earlier, "left", l)
	for _, foreign := range []string{"supervisor", "user.slice", "0123ABCD0123ABCD.x"} {
		if err := os.Mkdir(filepath.Join(earlier.Dir, foreign), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	later, err := Open(earlier.H, earlier.Dir)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := later.Groups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Name != left.Name || groups[0].Dir != left.Dir {
		t.Fatalf("Groups = %+v, want only %s", groups, left.Name)
	}
	if diff := cmp.Diff(left.V1, groups[0].V1); diff != "" {
		t.Errorf("v1 folders (-made +found)\n%s", diff)
	}
	// What Groups returns is a group to stop: its processes die.
	j := startIn(t, groups[0], "exec sleep 60")
	if err := groups[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if !groups[0].WaitEmpty(time.Now().Add(5*time.Second)) || j.wait(t) == nil {
		t.Error("the leftover group's job was not killed")
	}
	if err := groups[0].Remove(); err != nil {
		t.Error(err)
	}
}

// Under systemd with Delegate=yes idlemon starts in its own group: Open
// moves it out, into supervisor, so that the group may have children with
// controllers.
func TestOpenMovesTheCallerOut(t *testing.T) {
	self, err := ReadMembership("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	tr := newTree(t)
	if now, err := ReadMembership("/proc", os.Getpid()); err != nil || now.V2 != self.V2 {
		t.Fatalf("Open of a tree the caller is not in moved it from %q to %q (%v)", self.V2, now.V2, err)
	}
	back := filepath.Join(tr.H.V2, self.V2, "cgroup.procs")
	t.Cleanup(func() { // before the tree's removal
		if err := writeFile(back, strconv.Itoa(os.Getpid())); err != nil {
			t.Errorf("moving the test back: %v", err)
		}
	})
	if err := writeFile(filepath.Join(tr.Dir, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(tr.H, tr.Dir); err != nil {
		t.Fatal(err)
	}
	now, err := ReadMembership("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if want := tr.Rel + "/supervisor"; now.V2 != want {
		t.Errorf("after Open the caller is in %q, want %q", now.V2, want)
	}
	if name, ok := tr.GroupOf(now); ok {
		t.Errorf("the supervisor's group is taken for job group %q", name)
	}
}

// cpuTime is the CPU the test process has used.
func cpuTime(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestWaitSleepsOnInotify(t *testing.T) {
	tr := newTree(t)
	g := create(t, tr, "waited", Limits{})
	g.poll = time.Hour // only inotify can wake the waits
	j := startIn(t, g, "exec sleep 60")
	cpu, start := cpuTime(t), time.Now()
	if g.WaitEmpty(start.Add(300 * time.Millisecond)) {
		t.Fatal("WaitEmpty says a group with a sleep in it is empty")
	}
	if waited, used := time.Since(start), cpuTime(t)-cpu; waited < 300*time.Millisecond || used > 50*time.Millisecond {
		t.Errorf("WaitEmpty of 300 ms took %v and used %v of CPU: want the whole wait, asleep", waited, used)
	}
	if err := g.Freeze(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatalf("Freeze woken by inotify only: %v", err)
	}
	if err := g.Thaw(); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { _ = j.cmd.Process.Kill() })
	if !g.WaitEmpty(time.Now().Add(5 * time.Second)) {
		t.Fatal("WaitEmpty woken by inotify only: not empty after 5 s")
	}
}

// A job run as root may make groups below its own and move into them:
// still the job's, listed, found, killed and removed.
func TestGroupBelowAJobsGroup(t *testing.T) {
	for _, way := range []string{"cgroup.kill", "freeze and signal"} {
		t.Run(way, func(t *testing.T) {
			tr := newTree(t)
			tr.CanKill = tr.CanKill && way == "cgroup.kill"
			g := create(t, tr, "nested", Limits{PidsMax: 20})
			sub := filepath.Join(g.Dir, "sub")
			startIn(t, g, "mkdir '"+sub+"' && sh -c 'echo $$ > \"$1/cgroup.procs\"; exec sleep 60' _ '"+sub+"' & exec sleep 60")
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if b, _ := os.ReadFile(filepath.Join(sub, "cgroup.procs")); len(b) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the job did not move into the group below its own in 5 s")
				}
			}
			procs := waitProcs(t, g, 2)
			var below []int
			for _, pid := range procs {
				m, err := ReadMembership("/proc", pid)
				if err != nil {
					t.Fatal(err)
				}
				if name, ok := tr.GroupOf(m); !ok || name != g.Name {
					t.Errorf("pid %d in %q: GroupOf = %q, %v; want %q", pid, m.V2, name, ok, g.Name)
				}
				if strings.HasSuffix(m.V2, "/sub") {
					below = append(below, pid)
				}
			}
			if len(below) != 1 {
				t.Fatalf("Procs %v: %d in the group below, want 1", procs, len(below))
			}
			if err := g.Kill(); err != nil {
				t.Fatal(err)
			}
			if !g.WaitEmpty(time.Now().Add(5 * time.Second)) {
				t.Fatal("not empty 5 s after Kill")
			}
			if err := g.Remove(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(g.Dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s after Remove: %v", g.Dir, err)
			}
		})
	}
}
