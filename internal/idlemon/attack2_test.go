package idlemon

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/sshdtest"
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
	if !strings.Contains(string(b), "started job process-second") {
		return // it refused the folder: nothing shared
	}
	// it runs beside the first: GPU 0 is somebody else's, not a stray run of its own
	waitStateAt(t, e.path("run/second.json"), "gpu 0 busy (the first idlemon's job)", patience, func(f *idlestate.File) bool {
		return f.PID == second.Process.Pid && len(f.GPUs) == 2 && f.GPUs[0].State == idlestate.Busy
	})
	if !pidAlive(job) || first.ProcessState != nil {
		b, _ := os.ReadFile(e.path("second.log"))
		t.Fatalf("the first idlemon's job (pid %d) was stopped by the second:\n%s", job, b)
	}
}
