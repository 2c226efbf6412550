package idlemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/gpumon/gpumon/internal/supervisor"
)

// daemonizingJob is a job whose worker daemonizes (a double fork and
// setsid, as tmux new -d or screen -dm do), ignores SIGTERM and holds
// the GPU; it writes its pid to pidfile. The job's first process holds
// the GPU too and ignores SIGTERM as well.
func daemonizingJob(dev, pidfile string) string {
	return fmt.Sprintf(`trap '' TERM; (setsid sh -c 'trap "" TERM; exec 3<%[1]s; echo $$ >%[2]s.tmp; mv %[2]s.tmp %[2]s; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &); exec 3<%[1]s; while :; do sleep 1; done`, dev, pidfile)
}

func readPIDFile(t testing.TB, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(string(waitFile(t, path, patience))))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A worker that daemonizes is still the job's: it does not preempt its own
// job, it is listed as the job's, and it is stopped with the job, by a
// preemption and by idlemon's own shutdown, SIGTERM or not.
func TestDaemonizedWorker(t *testing.T) {
	e := newEnv(t, 2)
	sshdtest.EnsureUser(t, "idlejob")
	dev0 := e.devs[0]
	stop := e.start(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0
grace_seconds = 0.5
user = idlejob
[process-tmux]
gpus = 0
cmd = %s
`, daemonizingJob(dev0, e.path("worker"))), options{})

	worker := readPIDFile(t, e.path("worker"))
	f := e.waitState("the daemonized worker listed as the job's", patience, func(f *idlestate.File) bool {
		j := jobInfo(f, "process-tmux")
		return j.Running && slices.Contains(j.PIDs, worker)
	})
	job := jobInfo(f, "process-tmux")
	w, err := holders.ReadProc("", worker)
	if err != nil {
		t.Fatal(err)
	}
	if w.SID == job.PGID || w.PPID == job.PGID {
		t.Fatalf("the worker did not leave the job's session: %+v, job pgid %d", w, job.PGID)
	}
	if f.GPUs[0].State != idlestate.Job || len(f.GPUs[0].Holders) != 0 {
		t.Errorf("gpu 0 held by the job only: %+v", f.GPUs[0])
	}
	if n := e.countLog("stopped job"); n != 0 {
		t.Fatalf("the job preempted itself")
	}

	alice := foreign(t, "alice", dev0)
	e.waitLog(`gpu 0: stopped job process-tmux \(pid \d+\) - preempted by alice pid `+strconv.Itoa(alice), 1, patience)
	e.waitLog(`gpu 0: job process-tmux \(pid \d+\) outlived SIGTERM by 500ms: killed`, 1, patience)
	if pidAlive(worker) || pidAlive(job.PGID) {
		t.Errorf("after the stop: worker alive %v, first process alive %v", pidAlive(worker), pidAlive(job.PGID))
	}
	if !pidAlive(alice) {
		t.Fatal("alice's process was touched")
	}

	// alice leaves; the job comes back, and goes with idlemon
	os.Remove(e.path("worker"))
	syscall.Kill(-alice, syscall.SIGKILL)
	worker = readPIDFile(t, e.path("worker"))
	e.waitState("the new worker listed", patience, func(f *idlestate.File) bool {
		return slices.Contains(jobInfo(f, "process-tmux").PIDs, worker)
	})
	stop()
	if pidAlive(worker) {
		t.Errorf("the daemonized worker %d outlived idlemon", worker)
	}
	if left := marked(t, e); len(left) != 0 {
		t.Errorf("processes with the job's mark outlived idlemon: %+v", left)
	}
}

// marked lists the runs of e's idlemon that have processes alive, the
// jobs' user being idlejob or root.
func marked(t testing.TB, e *env) []*supervisor.Leftover {
	t.Helper()
	var out []*supervisor.Leftover
	for _, name := range []string{"idlejob", "root"} {
		uid, _ := lookupIDs(t, name)
		s := &supervisor.Supervisor{Instance: supervisor.InstanceOf(e.statePath()), UID: uid}
		out = append(out, s.Leftovers(nil)...)
	}
	return out
}

// A state file that another user could have written is not believed: it
// names root's own process as a job's leftover, and root's idlemon leaves
// that process alone. Nor does a state file root wrote make idlemon touch
// a process that is not the jobs' user's.
func TestForgedStateFile(t *testing.T) {
	e := newEnv(t, 1)
	sshdtest.EnsureUser(t, "bob")
	bobUID, bobGID := lookupIDs(t, "bob")
	victim := exec.Command("sleep", "600") // root's, a session of its own
	victim.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	bobsCmd := exec.Command("sleep", "600") // bob's, the leader of a session of its own
	bobsCmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(bobUID), Gid: uint32(bobGID)}}
	if err := bobsCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bobsCmd.Process.Kill(); bobsCmd.Wait() })
	bobs := bobsCmd.Process.Pid
	forged := func(pids ...int) []byte {
		t.Helper()
		f := idlestate.File{Version: idlestate.Version, PID: 1}
		for _, pid := range pids {
			p, err := holders.ReadProc("", pid)
			if err != nil {
				t.Fatal(err)
			}
			f.Jobs = append(f.Jobs, idlestate.JobInfo{Name: "process-x", GPUs: []int{0}, PGID: p.SID, Running: true, LeaderStart: p.Start,
				PIDs: []int{pid}, Procs: []idlestate.ProcStart{{PID: pid, Start: p.Start}}})
		}
		b, _ := json.Marshal(f)
		return b
	}
	body := `min_idle_seconds = 3600
user = root
[process-x]
gpus = 0
cmd = sleep 600
`
	// bob's folder, bob's file
	bobDir := e.path("bob")
	os.Mkdir(bobDir, 0o755)
	os.Chown(bobDir, bobUID, bobGID)
	state := filepath.Join(bobDir, "state.json")
	os.WriteFile(state, forged(victim.Process.Pid), 0o644)
	os.Chown(state, bobUID, bobGID)
	for _, tc := range []struct {
		name, dir, why string
		mode           os.FileMode
	}{
		{"bob's file in bob's folder", bobDir, `it belongs to uid ` + strconv.Itoa(bobUID) + `, not to idlemon's uid 0; its folder belongs to uid ` + strconv.Itoa(bobUID), 0o644},
		{"root's file, writable by all", e.path("run"), `others may write it \(mode 0666\)`, 0o666},
		{"root's file in a folder anyone can write", e.path("tmp"), `others may write its folder \(mode 1777\)`, 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Mkdir(e.path("tmp"), 0o777)
			os.Chmod(e.path("tmp"), 0o777|os.ModeSticky)
			path := filepath.Join(tc.dir, "state.json")
			if tc.dir != bobDir {
				os.WriteFile(path, forged(victim.Process.Pid), tc.mode)
				os.Chmod(path, tc.mode)
			}
			log := runUntilStarted(t, e, body, path)
			if !regexp.MustCompile(regexp.QuoteMeta(path) + `: not used to find what an earlier idlemon left running: ` + tc.why).MatchString(log) {
				t.Errorf("no warning saying why:\n%s", log)
			}
			if !pidAlive(victim.Process.Pid) {
				t.Fatalf("root's process %d was killed on the word of a file others can write:\n%s", victim.Process.Pid, log)
			}
		})
	}
	t.Run("root's file naming bob's process", func(t *testing.T) {
		path := e.statePath()
		os.WriteFile(path, forged(bobs), 0o644)
		os.Chmod(path, 0o644)
		log := runUntilStarted(t, e, body, path)
		if strings.Contains(log, "not used") || strings.Contains(log, "left running") {
			t.Errorf("log:\n%s", log)
		}
		if !pidAlive(bobs) {
			t.Fatalf("bob's process was killed: it is not the jobs' user's")
		}
	})
}

// runUntilStarted runs idlemon with body and state file path until it has
// looked for leftovers (it says "idlemon started" after that), then stops
// it; it returns its log.
func runUntilStarted(t *testing.T, e *env, body, path string) string {
	t.Helper()
	cfg := e.path("forged.ini")
	src := e.defaults(path) + body
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "forged-" + strings.NewReplacer(" ", "-", "'", "").Replace(t.Name()[strings.LastIndex(t.Name(), "/")+1:]) + ".log"
	cmd := e.startBinary(cfg, name)
	waitFileMatch(t, e.path(name), `idlemon started`, 1)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	b, _ := os.ReadFile(e.path(name))
	return string(b)
}

// idlemon SIGKILLed in the middle of a stop (SIGTERM sent, the job ignores
// it, SIGKILL not yet due): the next idlemon finishes the stop before
// anything else, and does not start the job on a GPU someone holds.
func TestKilledMidStop(t *testing.T) {
	e := newEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	config := func(grace string) string {
		return e.config(fmt.Sprintf("interval_seconds = 10\nmin_idle_seconds = 0\ngrace_seconds = %s\nuser = idlejob\n[process-a]\ngpus = 0\ncmd = %s\n",
			grace, daemonizingJob(e.devs[0], e.path("worker"))))
	}
	first := e.startBinary(config("20"), "first.log")
	worker := readPIDFile(t, e.path("worker"))
	waitStateAt(t, e.statePath(), "the worker listed", patience, func(f *idlestate.File) bool {
		return slices.Contains(jobInfo(f, "process-a").PIDs, worker)
	})
	alice := foreign(t, "alice", e.devs[0])
	waitFileMatch(t, e.path("first.log"), `gpu 0: stopped job process-a .* preempted by alice`, 1)
	first.Process.Kill()
	first.Wait()
	if !pidAlive(worker) {
		t.Fatal("the worker ignored SIGTERM, yet it is gone: nothing to test")
	}
	// the next one's grace is short: its SIGKILL ends the stop
	e.startBinary(config("0.1"), "second.log")
	waitFileMatch(t, e.path("second.log"), `idlemon started`, 1)
	b, _ := os.ReadFile(e.path("second.log"))
	if !regexp.MustCompile(`gpu 0: job process-a: stopped \d+ processes \(pids [0-9,]*\b` + strconv.Itoa(worker) + `\b[0-9,]*\) left running by an earlier idlemon \(pid \d+\), SIGKILL after 100ms`).Match(b) {
		t.Errorf("second idlemon's log:\n%s", b)
	}
	if pidAlive(worker) {
		t.Errorf("worker %d alive", worker)
	}
	f := waitStateAt(t, e.statePath(), "gpu 0 busy with alice", patience, func(f *idlestate.File) bool {
		return len(f.GPUs) == 1 && f.GPUs[0].State == idlestate.Busy
	})
	if jobRunning("process-a")(f) || !pidAlive(alice) {
		t.Errorf("job started on alice's GPU, or alice touched: %+v", f)
	}
}

// A job process that forks and exits in a loop, ignoring SIGTERM, is never
// where a walk of /proc looks; it still goes with the job (SIGKILL to the
// job's process group). Every process of the job holds the write end of a
// fifo: the test's read end sees the end of file once they are all gone.
func TestForkWalker(t *testing.T) {
	e := newEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	fifo := e.path("alive")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(fifo, 0o666)
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// each incarnation lives half a millisecond (perl-base is in every
	// Debian)
	e.start(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0
grace_seconds = 0.2
user = idlejob
[process-walk]
gpus = 0
cmd = exec 3<%s 4>%s; echo walking >&4; perl -e '$SIG{TERM} = "IGNORE"; while (1) { exit 0 if fork; select(undef, undef, undef, 0.0005) }'; exec sleep 600
`, e.devs[0], fifo), options{})
	r.SetReadDeadline(time.Now().Add(patience))
	buf := make([]byte, 64)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			break // the job holds the write end
		}
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("the job never wrote to the fifo: %v", err)
		}
		time.Sleep(time.Millisecond) // no writer yet: a read says end of file at once
	}
	e.waitState("the job running", patience, jobRunning("process-walk"))
	foreign(t, "alice", e.devs[0])
	e.waitLog(`gpu 0: stopped job process-walk .* preempted by alice`, 1, patience)
	e.waitState("the job stopped", patience, func(f *idlestate.File) bool { return !jobRunning("process-walk")(f) })
	for {
		_, err := r.Read(buf)
		if errors.Is(err, io.EOF) {
			return // every process of the job is gone
		}
		if err != nil {
			t.Fatalf("after the stop, a process of the job still holds the fifo: %v", err)
		}
	}
}

// A daemonized worker that rewrites its process title (setproctitle,
// Perl's $0) overwrites its environment, the mark with it: seen with the
// mark when it opened the GPU, it stays the job's, and goes with it
// (SIGTERM ignored or not).
func TestWorkerRewritesTitle(t *testing.T) {
	e := newEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	ready, rename, renamed := e.path("ready"), e.path("rename"), e.path("renamed")
	stop := e.start(fmt.Sprintf(`interval_seconds = 30
min_idle_seconds = 0
grace_seconds = 0.2
user = idlejob
[process-title]
gpus = 0
cmd = (setsid perl -e '$SIG{TERM} = "IGNORE"; open(F, "<", "%s") or die; open(W, ">", "%s.tmp"); print W "$$"; close W; rename("%s.tmp", "%s"); select(undef, undef, undef, 0.005) until -e "%s"; $0 = "worker " . "x" x 4000; open(W, ">", "%s"); print W "done"; close W; sleep 600' </dev/null >/dev/null 2>&1 &); exec sleep 600
`, e.devs[0], ready, ready, ready, rename, renamed), options{})
	worker := readPIDFile(t, ready)
	e.waitState("the worker listed as the job's", patience, func(f *idlestate.File) bool {
		return slices.Contains(jobInfo(f, "process-title").PIDs, worker)
	})
	if err := os.WriteFile(rename, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, renamed, patience)
	if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", worker)); strings.Contains(string(env), supervisor.MarkVar) {
		t.Fatalf("the worker's environment still shows the mark: nothing to test")
	}
	// a scan: an open by this process (idlemon's own) cannot preempt
	opened := time.Now()
	if fh, err := os.Open(e.devs[0]); err == nil {
		fh.Close()
	}
	f := e.waitState("a scan after the rename", patience, func(f *idlestate.File) bool { return f.Updated.After(opened) })
	if n := e.countLog("stopped job"); n != 0 || !slices.Contains(jobInfo(f, "process-title").PIDs, worker) {
		t.Errorf("the renamed worker is no longer the job's: %+v", jobInfo(f, "process-title"))
	}
	stop()
	if pidAlive(worker) {
		t.Errorf("the renamed worker %d outlived idlemon", worker)
	}
}

// The same worker, first seen while its parent still ran in the job's
// tree, leaves the tree (its parent exits) and then rewrites its title
// before idlemon looks again: remembered when it was seen in the tree, it
// stays the job's.
func TestWorkerLeavesTreeThenRewritesTitle(t *testing.T) {
	e := newEnv(t, 1)
	sshdtest.EnsureUser(t, "idlejob")
	ready, release, rename, renamed := e.path("ready"), e.path("release"), e.path("rename"), e.path("renamed")
	stop := e.start(fmt.Sprintf(`interval_seconds = 3600
min_idle_seconds = 0
grace_seconds = 0.2
user = idlejob
[process-title]
gpus = 0
cmd = (setsid perl -e '$SIG{TERM} = "IGNORE"; open(F, "<", "%s") or die; open(W, ">", "%s.tmp"); print W "$$"; close W; rename("%s.tmp", "%s"); select(undef, undef, undef, 0.005) until -e "%s"; $0 = "worker " . "x" x 4000; open(W, ">", "%s"); print W "done"; close W; sleep 600' </dev/null >/dev/null 2>&1 & until [ -e %s ]; do sleep 0.01; done); exec sleep 600
`, e.devs[0], ready, ready, ready, rename, renamed, release), options{})
	worker := readPIDFile(t, ready)
	e.waitState("the worker listed as the job's", patience, func(f *idlestate.File) bool {
		return slices.Contains(jobInfo(f, "process-title").PIDs, worker)
	})
	inTree := parentOf(t, worker)
	if err := os.WriteFile(release, nil, 0o644); err != nil { // its parent leaves the job's tree
		t.Fatal(err)
	}
	for deadline := time.Now().Add(patience); parentOf(t, worker) == inTree; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker's parent %d is still there after %s", inTree, patience)
		}
	}
	if err := os.WriteFile(rename, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, renamed, patience)
	opened := time.Now()
	if fh, err := os.Open(e.devs[0]); err == nil {
		fh.Close()
	}
	f := e.waitState("a scan after the rename", patience, func(f *idlestate.File) bool { return f.Updated.After(opened) })
	if n := e.countLog("stopped job"); n != 0 || !slices.Contains(jobInfo(f, "process-title").PIDs, worker) {
		t.Errorf("the worker that left the tree and renamed itself is no longer the job's: %+v", jobInfo(f, "process-title"))
	}
	stop()
	if pidAlive(worker) {
		t.Errorf("the worker %d outlived idlemon", worker)
	}
}

// parentOf is pid's parent, 0 when it cannot be read.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	var state string
	var ppid int
	fmt.Sscanf(rest, "%s %d", &state, &ppid)
	return ppid
}
