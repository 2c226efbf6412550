package idlemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cgroup"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"github.com/gpumon/gpumon/internal/testenv"
)

// The ways out of a job that marks alone could not close (issue 23), on
// real processes and real cgroups. Each ends with nothing of the job left
// running and no foreign process signalled.

// A job process that leaves the job's session and process group and clears
// its environment before idlemon ever sees it is still the job's: it does
// not make its GPU busy, it is listed as the job's, and it goes with the
// job.
func TestEscapeSessionAndEnvironment(t *testing.T) {
	e := newCgroupEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	pidfile := e.path("escaped")
	// a double fork, setsid, and env -i: nothing of the job's is left on it
	cmd := fmt.Sprintf(`(setsid env -i /bin/sh -c 'exec 3<%[1]s; echo $$ >%[2]s.tmp; /bin/mv %[2]s.tmp %[2]s; while :; do /bin/sleep 1; done' </dev/null >/dev/null 2>&1 &); while :; do sleep 1; done`, e.devs[0], pidfile)
	e.start(fmt.Sprintf("interval_seconds = 30\nmin_idle_seconds = 0\ngrace_seconds = 0.5\nuser = idlejob\n[process-escape]\ngpus = 0\ncmd = %s\n", cmd), options{})
	escaped := readPIDFile(t, pidfile)
	if b, _ := os.ReadFile("/proc/" + strconv.Itoa(escaped) + "/environ"); len(b) != 0 {
		t.Fatalf("the escaped process kept an environment: %q", b)
	}
	f := e.waitState("the escaped process listed as the job's", patience, func(f *idlestate.File) bool {
		return slices.Contains(jobInfo(f, "process-escape").PIDs, escaped)
	})
	if f.GPUs[0].State != idlestate.Job || e.countLog("stopped job") != 0 {
		t.Fatalf("the escaped process made its own job's GPU busy: %+v\n%s", f.GPUs[0], e.log.String())
	}
	if job := jobInfo(f, "process-escape"); job.Cgroup == "" || !strings.HasPrefix(job.Cgroup, e.cgroup+"/") {
		t.Errorf("the job's cgroup in the state file: %q, want one under %s", job.Cgroup, e.cgroup)
	}
	alice := foreign(t, "alice", e.devs[0])
	e.waitLog(`gpu 0: stopped job process-escape .* preempted by alice`, 1, patience)
	e.waitState("the job stopped", patience, func(f *idlestate.File) bool { return !jobRunning("process-escape")(f) })
	if pidAlive(escaped) {
		t.Errorf("the escaped process %d outlived its job's stop", escaped)
	}
	if !pidAlive(alice) {
		t.Error("alice's process was signalled")
	}
	if gs := groupsIn(t, e.cgroup); len(gs) != 0 {
		t.Errorf("groups left after the stop: %v", gs)
	}
}

// A job that fills memory past its memory_max is stopped by the kernel
// inside its group (the OOM killer of that group): the host never runs
// short. tail -n 1 keeps a line without a newline whole in memory.
func TestMemoryCeiling(t *testing.T) {
	e := newCgroupEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	out := e.path("hog")
	e.start(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0
user = idlejob
memory_max = 64M
[process-hog]
gpus = 0
cmd = head -c 400M /dev/zero | tail -n 1 >/dev/null; echo "tail $?" >%[1]s.tmp; mv %[1]s.tmp %[1]s
`, out), options{})
	got := strings.TrimSpace(string(waitFile(t, out, patience)))
	if got != "tail 137" {
		t.Fatalf("the job's 400 MiB in a 64 MiB group: %q, want tail killed (tail 137)", got)
	}
	// the run ends; the log says why
	e.waitLog(`gpu 0: job process-hog \(pid \d+\) ended by itself \(.*; the OOM killer killed 1 of its processes at its memory limit\)`, 1, patience)
}

// A fork bomb inside a job meets its pids_max, not the host's limit.
func TestForkBombMeetsCeiling(t *testing.T) {
	e := newCgroupEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	done := e.path("bombed")
	e.start(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0
grace_seconds = 0.2
user = idlejob
pids_max = 20
[process-bomb]
gpus = 0
cmd = (i=0; while [ $i -lt 200 ]; do sleep 600 & i=$((i+1)); done) 2>/dev/null; echo done >%[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 600
`, done), options{})
	waitFile(t, done, patience)
	f := e.waitState("the job listed whole", patience, func(f *idlestate.File) bool {
		return len(jobInfo(f, "process-bomb").PIDs) > 1
	})
	n := countIn(t, jobInfo(f, "process-bomb").Cgroup)
	if n > 20 || n < 5 {
		t.Errorf("%d processes in the job's group, want between 5 and pids_max (20)", n)
	}
}

// countIn counts the processes in the group dir (v2).
func countIn(t testing.TB, dir string) int {
	t.Helper()
	if dir == "" {
		t.Fatal("the job has no cgroup")
	}
	pids, err := (&cgroup.Group{Dir: dir}).Procs()
	if err != nil {
		t.Fatal(err)
	}
	return len(pids)
}

// A job cannot move itself out of its group, not even into a group its
// user owns (as systemd delegates user@UID.service to each user): moving a
// process needs write access to the cgroup.procs of the lowest common
// ancestor of both groups, and that is root's.
func TestJobCannotLeaveItsGroup(t *testing.T) {
	e := newCgroupEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	uid, gid := lookupIDs(t, "idlejob")
	own := testTree(t) // a group of idlejob's own, outside idlemon's tree
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{own, filepath.Join(own, "cgroup.procs")} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	report := e.path("moved")
	e.start(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0
grace_seconds = 0.2
user = idlejob
[process-mover]
gpus = 0
cmd = exec 3<%[1]s; perl -e 'open(F, ">", $ARGV[0]) or die "open: $!\n"; syswrite(F, getppid()) or die "write: $!\n"' %[2]s/cgroup.procs 2>%[3]s.err; echo "status $?" >>%[3]s.err; mv %[3]s.err %[3]s; exec sleep 600
`, e.devs[0], own, report), options{})
	got := string(waitFile(t, report, patience))
	if got != "write: Permission denied\nstatus 13\n" {
		t.Errorf("the job's move into its user's own group: %q, want permission denied", got)
	}
	f := e.waitState("the job listed", patience, func(f *idlestate.File) bool { return jobInfo(f, "process-mover").PGID > 0 })
	job := jobInfo(f, "process-mover")
	if n := countIn(t, job.Cgroup); n == 0 {
		t.Errorf("nothing left in the job's group %s", job.Cgroup)
	}
	if b, _ := os.ReadFile(filepath.Join(own, "cgroup.procs")); len(b) != 0 {
		t.Errorf("processes moved into idlejob's group: %s", b)
	}
	alice := foreign(t, "alice", e.devs[0])
	e.waitLog(`gpu 0: stopped job process-mover .* preempted by alice`, 1, patience)
	e.waitState("the job stopped", patience, func(f *idlestate.File) bool { return !jobRunning("process-mover")(f) })
	if pidAlive(job.PGID) || !pidAlive(alice) {
		t.Errorf("after the stop: job alive %v, alice alive %v", pidAlive(job.PGID), pidAlive(alice))
	}
}

// A fork-walker (a process that forks and exits in a loop, ignoring
// SIGTERM) left by an idlemon killed with SIGKILL has no leader to hold
// its process group: the next idlemon stops it by its group.
func TestForkWalkerAfterSIGKILL(t *testing.T) {
	e := newCgroupEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	cfg := e.config(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0
grace_seconds = 0.2
user = idlejob
[process-walk]
gpus = 0
cmd = exec 3<%s; perl -e '$SIG{TERM} = "IGNORE"; while (1) { exit 0 if fork; select(undef, undef, undef, 0.0005) }'
`, e.devs[0]))
	first := e.startBinary(cfg, "first.log")
	f := waitStateAt(t, e.statePath(), "the walker running", patience, jobRunning("process-walk"))
	group := jobInfo(f, "process-walk").Cgroup
	first.Process.Kill()
	first.Wait()
	if countIn(t, group) == 0 {
		t.Fatal("the walker died with idlemon: nothing to test")
	}
	alice := foreign(t, "alice", e.devs[0])
	e.startBinary(cfg, "second.log")
	waitFileMatch(t, e.path("second.log"), `idlemon started`, 1)
	b, _ := os.ReadFile(e.path("second.log"))
	if !strings.Contains(string(b), "gpu 0: job process-walk: stopped") || !strings.Contains(string(b), "left running by an earlier idlemon") {
		t.Errorf("second idlemon's log:\n%s", b)
	}
	if _, err := os.Stat(group); err == nil {
		t.Errorf("the walker's group %s is still there", group)
	}
	if !pidAlive(alice) {
		t.Error("alice's process was signalled")
	}
}

// idlemon killed with SIGKILL at each step of a stop (the job ignores
// SIGTERM), or with the job's group left frozen (as an idlemon killed in
// the middle of a kill without cgroup.kill leaves it): the next idlemon
// finishes the stop and removes the group; nobody else's process is
// touched.
func TestKilledAtEveryStepOfAStop(t *testing.T) {
	for _, step := range []string{"term-known", "termed", "killed", "left frozen"} {
		t.Run(step, func(t *testing.T) {
			e := newCgroupEnv(t, 1)
			sshdtest.EnsureUser(t, "idlejob")
			cfg := e.config(fmt.Sprintf("interval_seconds = 30\nmin_idle_seconds = 0\ngrace_seconds = 0.3\nuser = idlejob\n[process-a]\ngpus = 0\ncmd = %s\n", daemonizingJob(e.devs[0], e.path("worker"))))
			first := e.startBinaryEnv(cfg, "first.log", "IDLEMON_TEST_DIE_AT="+step)
			worker := readPIDFile(t, e.path("worker"))
			f := waitStateAt(t, e.statePath(), "the worker listed", patience, func(f *idlestate.File) bool {
				return slices.Contains(jobInfo(f, "process-a").PIDs, worker)
			})
			group := jobInfo(f, "process-a").Cgroup
			if step == "left frozen" {
				first.Process.Kill()
				if err := os.WriteFile(filepath.Join(group, "cgroup.freeze"), []byte("1"), 0); err != nil {
					t.Fatal(err)
				}
			}
			alice := foreign(t, "alice", e.devs[0])
			if err := waitCmd(first, patience); err == nil || !strings.Contains(err.Error(), "killed") {
				b, _ := os.ReadFile(e.path("first.log"))
				t.Fatalf("the first idlemon did not die at %s: %v\n%s", step, err, b)
			}
			e.startBinary(cfg, "second.log")
			waitFileMatch(t, e.path("second.log"), `idlemon started`, 1)
			if pidAlive(worker) {
				t.Errorf("the worker %d is alive after the second idlemon started", worker)
			}
			if _, err := os.Stat(group); err == nil {
				t.Errorf("the group %s is still there", group)
			}
			if !pidAlive(alice) {
				t.Error("alice's process was signalled")
			}
			if left := marked(t, e); len(left) != 0 {
				t.Errorf("processes with the job's mark left: %+v", left)
			}
		})
	}
}

// The textfile from a real run: a job in its group, with a memory limit,
// preempted by alice. node_exporter's folder gets idlemon-nvidia.prom,
// which promtool accepts, and which tells the preemption, its latency, the
// run's memory and the cgroup mode.
func TestTextfileFromARealRun(t *testing.T) {
	testenv.Promtool(t) // before anything starts
	e := newCgroupEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	dir := e.path("textfile")
	os.Mkdir(dir, 0o755)
	e.start(fmt.Sprintf("interval_seconds = 30\nmin_idle_seconds = 0\ngrace_seconds = 0.5\nuser = idlejob\nmemory_max = 256M\ntextfile_dir = %s\n[process-a]\ngpus = 0\ncmd = exec 3<%s; exec sleep 600\n", dir, e.devs[0]), options{})
	e.waitState("the job running", patience, jobRunning("process-a"))
	foreign(t, "alice", e.devs[0])
	e.waitLog(`gpu 0: stopped job process-a .* preempted by alice`, 1, patience)
	prom := filepath.Join(dir, "idlemon-nvidia.prom")
	waitFileMatch(t, prom, `^idlemon_job_stops_total\{name="process-a",reason="preempted",vendor="nvidia"\} 1$`, 1)
	b, _ := os.ReadFile(prom)
	for _, want := range []string{
		`idlemon_info{cgroup_mode="v2+v1",`,
		`idlemon_job_starts_total{name="process-a",vendor="nvidia"} 1`,
		`idlemon_preemption_seconds_count{name="process-a",vendor="nvidia"} 1`,
		`idlemon_job_memory_bytes{name="process-a",vendor="nvidia"} `,
		`idlemon_job_running{name="process-a",vendor="nvidia"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q:\n%s", prom, want, b)
		}
	}
	testenv.CheckMetrics(t, b)
}

// waitCmd waits for cmd to exit, at most timeout; then it kills it.
func waitCmd(cmd *exec.Cmd, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("still running after %s", timeout)
	}
}
