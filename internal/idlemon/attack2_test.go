package idlemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"github.com/gpumon/gpumon/internal/supervisor"
)

// Attacks on cgroup mode (issue 23), second round: what a tired sysadmin's
// config does to the jobs of another idlemon.

// Two idlemons given the same cgroup folder (one per vendor on a mixed
// host, or a copied config with another state file) must not take each
// other's runs for their own: neither as leftovers at start nor as strays
// holding a GPU. Either the second refuses the folder, or it leaves the
// first's job alone and sees its GPU as somebody else's.
func TestTwoIdlemonsShareACgroupFolder(t *testing.T) {
	e := newCgroupEnv(t, 2)
	sshdtest.EnsureUser(t, "idlejob")
	pidfile := e.path("first-job")
	cfgA := e.config(fmt.Sprintf(`interval_seconds = 0.1
min_idle_seconds = 0
user = idlejob
[process-first]
gpus = 0
cmd = exec 3<%s; echo $$ >%[2]s.tmp; mv %[2]s.tmp %[2]s; exec sleep 600
`, e.devs[0], pidfile))
	first := e.startBinary(cfgA, "first.log")
	job := readPIDFile(t, pidfile)

	// the same devices and cgroup folder, another state file
	cfgB := e.path("second.ini")
	writeTestFile(t, cfgB, e.defaults(e.path("run/second.json"))+`interval_seconds = 0.1
min_idle_seconds = 0
user = idlejob
[process-second]
gpus = 1
cmd = exec sleep 600
`)
	second := e.startBinary(cfgB, "second.log")
	waitFileMatch(t, e.path("second.log"), `started job process-second|error`, 1)
	b, _ := os.ReadFile(e.path("second.log"))
	if strings.Contains(string(b), "left running by an earlier idlemon") || !pidAlive(job) {
		t.Fatalf("the second idlemon (same cgroup %s, another state file) stopped the first's job (pid %d) as its leftover:\n%s", e.cgroup, job, b)
	}
	// a folder the config names is the config's wish: refused, not marks
	if err := waitCmd(second, patience); err == nil || !strings.Contains(string(b), "in use by another idlemon") {
		t.Errorf("the second idlemon (exit %v) did not refuse the folder:\n%s", err, b)
	}
	if !pidAlive(job) || first.ProcessState != nil {
		t.Fatalf("the first idlemon's job (pid %d) was stopped by the second:\n%s", job, b)
	}
}

// A job's first process is in its run's group from its first instruction,
// not only from idlemon's write to cgroup.procs a moment after exec: in
// that moment any other process of the jobs' user (another job) may
// ptrace the gate and make it fork a child that stays in idlemon's own
// group, found by no stop and held by no limit.
func TestGateIsBornInItsGroup(t *testing.T) {
	e := newCgroupEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	marker := "born-in-group-" + filepath.Base(e.dir)
	seen := make(chan string, 1)
	supervisor.StopHook = func(step string) {
		if step == "gate" {
			select {
			case seen <- groupOfCmdline(marker):
			default:
			}
		}
	}
	t.Cleanup(func() { supervisor.StopHook = nil })
	e.start(fmt.Sprintf("interval_seconds = 30\nmin_idle_seconds = 0\nuser = idlejob\n[process-born]\ngpus = 0\ncmd = exec sleep 600 # %s\n", marker), options{})
	select {
	case got := <-seen:
		rel := strings.TrimPrefix(e.cgroup, filepath.Dir(e.cgroup)) // "/gpumon-test-..." below the v2 mount
		if !strings.HasPrefix(got, rel+"/") || !strings.HasSuffix(got, ".process-born") {
			t.Errorf("before idlemon moved it, the gate was in %q, want its run's group under %s", got, rel)
		}
	case <-time.After(patience):
		t.Fatal("no job start reached the gate step")
	}
}

// groupOfCmdline is the v2 group of the process whose command line holds
// marker, or why none was found.
func groupOfCmdline(marker string) string {
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline"); strings.Contains(string(b), marker) {
			m, err := cgroup.ReadMembership("/proc", pid)
			if err != nil {
				return err.Error()
			}
			return m.V2
		}
	}
	return "no process with " + marker
}
