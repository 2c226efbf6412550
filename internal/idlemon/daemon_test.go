package idlemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"github.com/gpumon/gpumon/internal/testenv"
	"golang.org/x/sys/unix"
)

// A job whose children open the GPU does not preempt itself; a foreign user's
// open stops the whole job group (at once: TestOpenStopsJobAtOnce), and the
// job comes back when the GPU is idle again. Processes that are not
// idlemon's are never signalled.
func TestPreemptAndRestart(t *testing.T) {
	e := newEnv(t, 2)
	sshdtest.EnsureUser(t, "idlejob")
	bystander := sshdtest.StartProcessAs(t, "bob", "sleep", "600") // its own group
	dev0 := e.devs[0]
	e.start(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0.1
grace_seconds = 5
user = idlejob
[process-miner]
dir = %s
gpus = 0
log = %s
cmd = trap 'echo term $$ >> %s; exit 0' TERM; echo "id=$(id -un) groups=$(id -G) cvd=$CUDA_VISIBLE_DEVICES home=$HOME"; (exec 3<%s; sleep 600) & (exec 4<%s; sleep 600) & wait
`, e.dir, e.path("job.log"), e.path("term"), dev0, dev0), options{})

	f := e.waitState("the job and its two children holding gpu 0", patience, func(f *idlestate.File) bool {
		return jobRunning("process-miner")(f) && len(jobInfo(f, "process-miner").PIDs) >= 3 && f.GPUs[0].State == idlestate.Job
	})
	job := jobInfo(f, "process-miner")
	// Its children's opens raised inotify events and scans (and rechecks up to
	// 50 ms later): still one start, no stop.
	devs, err := holders.Find(e.path("dev/nvidia[0-9]*"))
	if err != nil {
		t.Fatal(err)
	}
	sc := holders.NewScanner(devs)
	deadline := time.Now().Add(patience)
	for {
		snap, _ := sc.Scan()
		if len(snap.Holders[0]) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's children never opened the device: %v", snap.Holders)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// An open by idlemon's own process (this test) is one more event and
	// scan that cannot preempt: the state written after it has seen the
	// children holding the GPU for sure.
	opened := time.Now()
	if fh, err := os.Open(dev0); err == nil {
		fh.Close()
	}
	e.waitState("a scan after the children's opens", patience, func(g *idlestate.File) bool {
		return g.Updated.After(opened.Add(60 * time.Millisecond))
	})
	if n := e.countLog("stopped job"); n != 0 {
		t.Fatalf("the job preempted itself:\n%s", e.log.String())
	}
	out := string(waitFile(t, e.path("job.log"), patience))
	if !strings.Contains(out, "id=idlejob") || !strings.Contains(out, "cvd=0 ") || !strings.Contains(out, "home=/home/idlejob") {
		t.Errorf("job environment: %q", out)
	}
	if f.GPUs[1].State != idlestate.Idle {
		t.Errorf("gpu 1: %+v", f.GPUs[1])
	}

	alice := foreign(t, "alice", dev0)
	// alice's process opens the device as sh, then execs sleep: the scan
	// may catch it either side of the exec.
	e.waitLog(`^.*gpu 0: stopped job process-miner \(pid `+strconv.Itoa(job.PGID)+`\) - preempted by alice pid `+strconv.Itoa(alice)+` (sh|sleep)$`, 1, patience)
	waitFile(t, e.path("term"), patience)
	sessionGone(t, job.PGID, patience)
	f = e.waitState("gpu 0 busy with alice", patience, func(f *idlestate.File) bool {
		return f.GPUs[0].State == idlestate.Busy && len(f.GPUs[0].Holders) == 1 && f.GPUs[0].Holders[0].User == "alice"
	})
	if !pidAlive(alice) {
		t.Fatal("alice's process was touched")
	}

	// alice is done: the job comes back.
	syscall.Kill(-alice, syscall.SIGKILL)
	e.waitLog(`gpu 0: started job process-miner \(pid \d+\) - idle for`, 2, patience)
	e.waitState("the job running again", patience, jobRunning("process-miner"))
	if !pidAlive(bystander) {
		t.Fatal("bob's process was signalled")
	}
}

// atOnce bounds how long a foreign open may take to stop a job when the
// periodic scan is an hour away: only the scan an inotify event starts can
// see the opener in time. The stop itself takes milliseconds; the rest is
// room for a machine with every core busy.
const atOnce = 5 * time.Second

// A foreign user's open of a job's GPU stops the job at once: idlemon
// watches the device files with inotify, and does not wait for its
// periodic scan.
func TestOpenStopsJobAtOnce(t *testing.T) {
	e := newEnv(t, 1)
	job := e.startSleeper()
	alice := foreign(t, "alice", e.devs[0])
	e.waitHolder(0, alice, patience)
	e.waitLog(`gpu 0: stopped job process-miner \(pid `+strconv.Itoa(job.PGID)+`\) - preempted by alice pid `+strconv.Itoa(alice)+` `, 1, atOnce)
	sessionGone(t, job.PGID, patience)
}

// startSleeper runs idlemon with a job that sleeps on gpu 0 (process-miner,
// as root, grace 1 s) and the periodic scan an hour away, so that only
// inotify can stop the job promptly; it returns the job once it runs.
func (e *env) startSleeper() idlestate.JobInfo {
	e.t.Helper()
	e.start(`interval_seconds = 3600
min_idle_seconds = 0
grace_seconds = 1
user = root
[process-miner]
gpus = 0
cmd = exec sleep 600
`, options{})
	return jobInfo(e.waitState("the job running", patience, jobRunning("process-miner")), "process-miner")
}

// A job that ignores SIGTERM, and whose children do too, is killed after the
// grace period: nothing of it is left.
func TestIgnoresSIGTERM(t *testing.T) {
	e := newEnv(t, 1)
	e.start(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0
grace_seconds = 0.3
user = root
[process-stubborn]
gpus = 0
cmd = trap '' TERM; sh -c "trap '' TERM; exec 3<%s; while :; do sleep 1; done" & sh -c "trap '' TERM; sleep 600" & wait; wait
`, e.devs[0]), options{})
	f := e.waitState("the job running", patience, func(f *idlestate.File) bool {
		return jobRunning("process-stubborn")(f) && len(jobInfo(f, "process-stubborn").PIDs) >= 5
	})
	job := jobInfo(f, "process-stubborn")
	foreign(t, "alice", e.devs[0])
	e.waitLog(`gpu 0: stopped job process-stubborn .* - preempted by alice`, 1, patience)
	e.waitLog(`gpu 0: job process-stubborn \(pid \d+\) outlived SIGTERM by 300ms: killed`, 1, patience)
	sessionGone(t, job.PGID, patience)
	for _, pid := range job.PIDs {
		if pidAlive(pid) {
			t.Errorf("pid %d of the job is alive", pid)
		}
	}
}

// A job that crashes is restarted with a growing back-off.
func TestCrashLoop(t *testing.T) {
	e := newEnv(t, 1)
	e.start(`interval_seconds = 30
min_idle_seconds = 0
user = root
[process-crash]
gpus = 0
cmd = echo crashing; exit 3
`, options{BackoffBase: time.Millisecond})
	lines := e.waitLog(`gpu 0: job process-crash \(pid \d+\) ended by itself \(exit status 3\) after .* - restart in `, 4, patience)
	for i, want := range []string{"1ms", "2ms", "4ms", "8ms"} {
		if !strings.HasSuffix(lines[i], "restart in "+want) {
			t.Errorf("exit %d: %q, want restart in %s", i+1, lines[i], want)
		}
	}
	starts := e.waitLog(`started job process-crash`, 4, patience)
	if len(starts) < 4 {
		t.Errorf("starts: %q", starts)
	}
	if out, _ := os.ReadFile(e.path("stdout")); !strings.Contains(string(out), "crashing") {
		t.Errorf("job output without log = idlemon's stdout: %q", out)
	}
}

// An active terminal of a user who is not whitelisted pauses every job;
// idle again, they run again.
func TestTTYPausesJobs(t *testing.T) {
	e := newEnv(t, 2)
	sshdtest.EnsureUser(t, "alice")
	// a real pty, handed to alice, seen through a private /dev
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts := "/dev/pts/" + strconv.Itoa(n)
	uid, gid := lookupIDs(t, "alice")
	if err := os.Chown(pts, uid, gid); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(pts, old, old)
	devDir := e.path("ttydev")
	os.MkdirAll(filepath.Join(devDir, "pts"), 0o755)
	os.Symlink(pts, filepath.Join(devDir, "pts", strconv.Itoa(n)))

	e.start(`interval_seconds = 0.05
min_idle_seconds = 0
user = root
[process-a]
gpus = 0
cmd = exec sleep 600
[process-b]
gpus = 1
cmd = exec sleep 600
[tty]
enabled = yes
whitelist = root, bob
idle_seconds = 60
`, options{TTYDev: devDir, Utmp: e.path("no-utmp")})
	e.waitState("both jobs running", patience, func(f *idlestate.File) bool {
		return jobRunning("process-a")(f) && jobRunning("process-b")(f)
	})
	// alice types
	now := time.Now()
	os.Chtimes(pts, now, now)
	e.waitLog(`gpu 0: stopped job process-a \(pid \d+\) - user alice active on pts/`+strconv.Itoa(n), 1, patience)
	e.waitLog(`gpu 1: stopped job process-b \(pid \d+\) - user alice active on pts/`, 1, patience)
	f := e.waitState("paused", patience, func(f *idlestate.File) bool {
		return strings.HasPrefix(f.Paused, "user alice active") && !jobRunning("process-a")(f) && !jobRunning("process-b")(f)
	})
	if f.GPUs[0].State != idlestate.Idle {
		t.Errorf("a paused GPU is still free for people: %+v", f.GPUs[0])
	}
	// alice left an hour ago
	os.Chtimes(pts, old, old)
	e.waitLog(`started job process-a`, 2, patience)
	e.waitLog(`started job process-b`, 2, patience)
}

func lookupIDs(t testing.TB, name string) (int, int) {
	out, err := exec.Command("id", "-u", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	out, _ = exec.Command("id", "-g", name).Output()
	gid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return uid, gid
}

// idlemon killed with SIGKILL leaves its job running; started again, it
// stops that job first, so the GPU never runs two copies.
func TestKilledHardThenRestarted(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config(fmt.Sprintf(`interval_seconds = 0.1
min_idle_seconds = 0
grace_seconds = 2
user = root
[process-one]
gpus = 0
cmd = exec 3<%s; sleep 600 & sleep 600 & wait
`, e.devs[0]))
	first := e.startBinary(cfg, "first.log")
	f := e.waitState("the job running with its children", patience, func(f *idlestate.File) bool {
		return f.PID == first.Process.Pid && jobRunning("process-one")(f) && len(jobInfo(f, "process-one").PIDs) >= 3
	})
	old := jobInfo(f, "process-one")
	first.Process.Kill()
	first.Wait()
	if !pidAlive(old.PGID) {
		t.Fatal("the job died with idlemon: nothing to test")
	}
	second := e.startBinary(cfg, "second.log")
	f = e.waitState("a new job from the second idlemon", patience, func(f *idlestate.File) bool {
		return f.PID == second.Process.Pid && jobRunning("process-one")(f) && jobInfo(f, "process-one").PGID != old.PGID
	})
	sessionGone(t, old.PGID, 0) // stopped before the new one started
	b, _ := os.ReadFile(e.path("second.log"))
	if !regexp.MustCompile(fmt.Sprintf(`gpu 0: job process-one: stopped 3 processes \(pids [0-9,]+\) left running by an earlier idlemon \(pid %d\)\n(.*\n)*.*gpu 0: started job process-one`, first.Process.Pid)).Match(b) {
		t.Errorf("second idlemon's log:\n%s", b)
	}
	// one copy: the device is held by the new job only
	holders := jobInfo(f, "process-one").PIDs
	for _, p := range old.PIDs {
		for _, q := range holders {
			if p == q {
				t.Errorf("old pid %d still part of the job", p)
			}
		}
	}
	// SIGTERM: the job goes with it
	second.Process.Signal(syscall.SIGTERM)
	second.Wait()
	sessionGone(t, jobInfo(f, "process-one").PGID, patience)
}

// Running as root without user = is refused before anything starts.
func TestRootNeedsUser(t *testing.T) {
	e := newEnv(t, 1)
	p := e.config("[process-x]\ngpus = 0\ncmd = true\n")
	err := Main(t.Context(), []string{"-c", p, "check"}, &testenv.SyncBuffer{}, &testenv.SyncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "no user to run the jobs as") {
		t.Fatalf("err = %v", err)
	}
}

// The state file lists a running job's processes (fetch marks the ones on
// a GPU preemptible; a restarted idlemon stops what they left): a child
// that opens a GPU is listed after the next scan, together with the
// children started since the last full listing; once the job is no longer
// young, a child that holds no GPU is listed by the periodic full listing
// (ProcsEvery), not by every scan.
func TestJobProcsInState(t *testing.T) {
	e := newEnv(t, 2)
	fifo1, fifo2 := e.path("go1"), e.path("go2")
	for _, p := range []string{fifo1, fifo2} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	every := time.Hour
	d := e.daemon(fmt.Sprintf(`interval_seconds = 10
min_idle_seconds = 0
grace_seconds = 2
user = root
[process-kids]
gpus = 0
cmd = read _ <%[1]s; sleep 600 & echo $! >%[3]s.tmp; mv %[3]s.tmp %[3]s; read _ <%[2]s; (exec 3<%[5]s; exec sleep 600) & echo $! >%[4]s.tmp; mv %[4]s.tmp %[4]s; wait
`, fifo1, fifo2, e.path("plain"), e.path("gpu"), e.devs[0]), options{ProcsEvery: every})
	h := &handSteps{e: e, d: d, now: time.Now()}
	listed := func(f *idlestate.File, pid int) bool { return listedIn(t, f, "process-kids", pid) }
	f := h.step(0)
	if !jobRunning("process-kids")(f) {
		t.Fatalf("job not started:\n%s", e.log.String())
	}
	leader := jobInfo(f, "process-kids").PGID
	f = h.step(2 * time.Second)
	if !listed(f, leader) {
		t.Fatalf("leader %d not listed: %+v", leader, jobInfo(f, "process-kids"))
	}
	h.step(100 * time.Second) // the job is no longer young: the next full listing is 25s away

	writeFifo(t, fifo1)
	plain := e.readPID("plain")
	f = h.step(2 * time.Second)
	if listed(f, plain) {
		t.Errorf("child %d without a GPU listed by a scan before the full listing is due: every scan reads every process", plain)
	}
	f = h.step(every)
	if !listed(f, plain) || !listed(f, leader) {
		t.Errorf("after %s: %+v, want the leader %d and child %d", every, jobInfo(f, "process-kids"), leader, plain)
	}

	writeFifo(t, fifo2)
	gpu := e.readPID("gpu")
	e.waitHolder(0, gpu, patience)
	f = h.step(2 * time.Second) // one scan, the full listing not due
	if !listed(f, gpu) {
		t.Errorf("child %d holding gpu 0 is not in the job's pids after a scan: %+v", gpu, jobInfo(f, "process-kids"))
	}
	if !listed(f, plain) || !listed(f, leader) {
		t.Errorf("%+v: want the leader %d and child %d too", jobInfo(f, "process-kids"), leader, plain)
	}
	if f.GPUs[0].State != idlestate.Job || len(f.GPUs[0].Holders) != 0 {
		t.Errorf("gpu 0 with only the job on it: %+v", f.GPUs[0])
	}
	if n := e.countLog("stopped job"); n != 0 {
		t.Fatalf("the job preempted itself:\n%s", e.log.String())
	}

	// A listed pid that now holds a GPU for someone else (the pid was
	// reused) is off the list after a scan: fetch would take it for the
	// job's.
	other := holdOpen(t, e.devs[1])
	e.waitHolder(1, other.Process.Pid, patience)
	j := d.runs[0]
	i, _ := findProc(j.procs, other.Process.Pid)
	j.procs = slices.Insert(j.procs, i, idlestate.ProcStart{PID: other.Process.Pid, Start: 1})
	f = h.step(2 * time.Second)
	if listed(f, other.Process.Pid) {
		t.Errorf("pid %d holding gpu 1, not the job's, listed as the job's: %+v", other.Process.Pid, jobInfo(f, "process-kids"))
	}
	if !listed(f, gpu) || !listed(f, plain) || !listed(f, leader) {
		t.Errorf("%+v: want the leader %d and children %d %d", jobInfo(f, "process-kids"), leader, plain, gpu)
	}
	if f.GPUs[1].State != idlestate.Busy || f.GPUs[0].State != idlestate.Job {
		t.Errorf("gpus: %+v", f.GPUs)
	}
}
