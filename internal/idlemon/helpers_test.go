package idlemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"github.com/gpumon/gpumon/internal/supervisor"
	"github.com/gpumon/gpumon/internal/testenv"
)

// TestMain doubles as the idlemon binary (IDLEMON_TEST_MAIN=1) and as small
// helper processes for the benchmarks (IDLEMON_TEST_HELPER).
func TestMain(m *testing.M) {
	switch os.Getenv("IDLEMON_TEST_HELPER") {
	case "":
	case "term":
		helperTerm()
	case "opener":
		helperOpener()
	case "setuid":
		helperSetuid()
	}
	if os.Getenv("IDLEMON_TEST_MAIN") == "1" {
		if step := os.Getenv("IDLEMON_TEST_DIE_AT"); step != "" {
			supervisor.StopHook = func(s string) {
				if s == step {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
					select {} // the signal is on its way
				}
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(cli.Exit("idlemon", err, os.Stderr))
	}
	os.Exit(m.Run())
}

// patience bounds the wait for what must happen: long enough for a
// machine with every core busy, and paid only when a test fails.
const patience = time.Minute

// env is a fake GPU host: plain files as device files in a temp folder.
type env struct {
	t    testing.TB
	dir  string
	devs []string // each GPU's device file (AMD: its render node)
	log  *testenv.SyncBuffer

	cgroup string // the jobs' cgroup tree (v2), removed at the end; "" = off

	amd    bool     // an AMD host: newAMDEnv
	kfd    string   // AMD: the plain file standing for /dev/kfd
	sysfs  string   // AMD: the fake KFD folder (/sys/class/kfd/kfd)
	gpuIDs []uint32 // AMD: each GPU's KFD gpu_id
}

func newEnv(t testing.TB, ngpu int) *env {
	e := newCgroupEnv(t, ngpu)
	if os.Getenv("IDLEMON_TEST_CGROUP") == "off" {
		e.cgroup = "" // the whole package again on marks alone (make test)
	}
	return e
}

// newCgroupEnv is newEnv in cgroup mode always: for what needs cgroups.
func newCgroupEnv(t testing.TB, ngpu int) *env {
	testenv.NeedRoot(t) // other users' processes, jobs run as another user
	dir := t.TempDir()
	// other users (the foreign openers, the job's user) must reach the files
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chmod(dir, 0o777)
	e := &env{t: t, dir: dir, log: &testenv.SyncBuffer{}, cgroup: testTree(t)}
	os.Mkdir(filepath.Join(dir, "dev"), 0o755)
	os.Mkdir(filepath.Join(dir, "run"), 0o755) // the state file's: only root writes there
	for i := 0; i < ngpu; i++ {
		p := filepath.Join(dir, "dev", "nvidia"+strconv.Itoa(i))
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o666)
		e.devs = append(e.devs, p)
	}
	return e
}

func (e *env) path(name string) string { return filepath.Join(e.dir, name) }

func (e *env) statePath() string { return e.path("run/state.json") }

// newAMDEnv is a fake AMD host with ngpu GPUs: plain files as /dev/kfd and
// the render nodes, and a KFD folder whose topology lists a CPU and the
// GPUs. Anybody may write a process entry into it (kfdEntry).
func newAMDEnv(t testing.TB, ngpu int) *env {
	e := newEnv(t, 0)
	e.amd = true
	e.kfd = e.path("dev/kfd")
	e.sysfs = e.path("sys/kfd")
	os.MkdirAll(e.path("dev/dri"), 0o755)
	writeTestFile(t, e.kfd, "")
	os.Chmod(e.kfd, 0o666)
	writeNode := func(n int, gpuID uint32, props string) {
		dir := filepath.Join(e.sysfs, "topology", "nodes", strconv.Itoa(n))
		os.MkdirAll(dir, 0o755)
		writeTestFile(t, filepath.Join(dir, "gpu_id"), fmt.Sprintf("%d\n", gpuID))
		writeTestFile(t, filepath.Join(dir, "properties"), props)
	}
	writeNode(0, 0, "cpu_cores_count 16\nsimd_count 0\ndrm_render_minor 0\n")
	for i := 0; i < ngpu; i++ {
		id := uint32(40000 + 1111*i)
		minor := 128 + i
		writeNode(i+1, id, fmt.Sprintf("simd_count 304\ndrm_render_minor %d\nlocation_id %d\ndomain 0\n", minor, (0xc1+i)<<8))
		p := e.path("dev/dri/renderD" + strconv.Itoa(minor))
		writeTestFile(t, p, "")
		os.Chmod(p, 0o666)
		e.devs = append(e.devs, p)
		e.gpuIDs = append(e.gpuIDs, id)
	}
	os.MkdirAll(filepath.Join(e.sysfs, "proc"), 0o777)
	os.Chmod(filepath.Join(e.sysfs, "proc"), 0o777)
	return e
}

func writeTestFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// kfdEntry is a shell command that writes the KFD entry of the shell
// running it ($$, which exec keeps): vram[i] bytes on GPU i, as the
// kernel shows a ROCm process.
func (e *env) kfdEntry(vram ...uint64) string {
	dir := filepath.Join(e.sysfs, "proc", "$$")
	cmd := "mkdir -p " + dir
	for i, v := range vram {
		cmd += fmt.Sprintf("; echo %d > %s/vram_%d", v, dir, e.gpuIDs[i])
	}
	return cmd
}

// defaults is the [defaults] section's lines that point idlemon at the
// fake host's files.
func (e *env) defaults(state string) string {
	group := "cgroup = off\n"
	if e.cgroup != "" {
		group = "cgroup = " + e.cgroup + "\n"
	}
	if e.amd {
		return fmt.Sprintf("[defaults]\nvendor = amd\ndevices = %s\nkfd_device = %s\nkfd_sysfs = %s\nstate_file = %s\n%s",
			e.path("dev/dri/renderD*"), e.kfd, e.sysfs, state, group)
	}
	return fmt.Sprintf("[defaults]\ndevices = %s\nstate_file = %s\n%s", e.path("dev/nvidia[0-9]*"), state, group)
}

// scanner is a /proc scanner for the fake host's device files.
func (e *env) scanner() *holders.Scanner {
	e.t.Helper()
	if e.amd {
		h, err := holders.FindAMD(e.kfd, e.path("dev/dri/renderD*"), e.sysfs)
		if err != nil {
			e.t.Fatal(err)
		}
		return holders.NewAMDScanner(h)
	}
	devs, err := holders.Find(e.path("dev/nvidia[0-9]*"))
	if err != nil {
		e.t.Fatal(err)
	}
	return holders.NewScanner(devs)
}

// config writes an ini with the test's devices and state file, then body.
func (e *env) config(body string) string {
	src := e.defaults(e.statePath()) + body
	p := e.path("idlemon.ini")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// prepare resolves body's config on this fake host and points the daemon's
// log at e.log and its jobs' output at the file "stdout".
func (e *env) prepare(body string, opt options) (*hostPlan, options, *os.File) {
	e.t.Helper()
	cfg, err := config.Load(e.config(body))
	if err != nil {
		e.t.Fatal(err)
	}
	plan, err := resolve(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	opt.Log = e.log
	out, err := os.OpenFile(e.path("stdout"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	opt.JobStdout = out
	return plan, opt, out
}

// start runs the daemon in this process until the test ends, or until
// the function it returns is called (as SIGTERM would: runDaemon stops the jobs
// and returns).
func (e *env) start(body string, opt options) (stop func()) {
	e.t.Helper()
	plan, opt, out := e.prepare(body, opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDaemon(ctx, plan, opt) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run: %v", err)
				}
			case <-time.After(patience):
				e.t.Errorf("Run did not return")
			}
		})
	}
	e.t.Cleanup(func() {
		stop()
		out.Close()
		if e.t.Failed() {
			e.t.Logf("idlemon log:\n%s", e.log.String())
		}
	})
	return stop
}

// startBinary runs idlemon (this test binary, re-executed) with config
// cfg, its output to the file name; the test's end stops it with SIGTERM.
func (e *env) startBinary(cfg, name string) *exec.Cmd {
	e.t.Helper()
	return e.startBinaryEnv(cfg, name)
}

// startBinaryEnv is startBinary with more environment variables, such as
// IDLEMON_TEST_DIE_AT=STEP: the idlemon kills itself with SIGKILL at that
// step of a cgroup stop (supervisor.StopHook).
func (e *env) startBinaryEnv(cfg, name string, env ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-c", cfg)
	cmd.Env = append(append(os.Environ(), "IDLEMON_TEST_MAIN=1"), env...)
	logf, err := os.Create(e.path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
		if e.t.Failed() {
			b, _ := os.ReadFile(e.path(name))
			e.t.Logf("%s:\n%s", name, b)
		}
	})
	return cmd
}

// waitFileMatch waits until the file at path has n lines matching re.
func waitFileMatch(t testing.TB, path, re string, n int) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(patience)
	for {
		b, _ := os.ReadFile(path)
		var got []string
		for _, l := range strings.Split(string(b), "\n") {
			if rx.MatchString(l) {
				got = append(got, l)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s %s has %d lines matching %q, want %d:\n%s", patience, path, len(got), re, n, b)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// daemon sets up a daemon for body without running it: the test calls its
// step itself. Its jobs are stopped when the test ends.
func (e *env) daemon(body string, opt options) *daemon {
	e.t.Helper()
	plan, opt, out := e.prepare(body, opt)
	d := newDaemon(plan, opt)
	e.t.Cleanup(func() {
		d.stopAll(context.Background())
		out.Close()
		if e.t.Failed() {
			e.t.Logf("idlemon log:\n%s", e.log.String())
		}
	})
	return d
}

// readState reads the state file.
func (e *env) readState() *idlestate.File {
	e.t.Helper()
	fh, err := os.Open(e.statePath())
	if err != nil {
		e.t.Fatal(err)
	}
	defer fh.Close()
	f, err := idlestate.Decode(fh)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

// waitHolder waits until pid holds the device file of gpu.
func (e *env) waitHolder(gpu, pid int, timeout time.Duration) {
	e.t.Helper()
	sc := e.scanner()
	deadline := time.Now().Add(timeout)
	for {
		if snap, err := sc.Scan(); err == nil && slices.Contains(snap.Holders[gpu], pid) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("after %s pid %d does not hold gpu %d", timeout, pid, gpu)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLog waits until the log holds at least n lines matching re.
func (e *env) waitLog(re string, n int, timeout time.Duration) []string {
	e.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for {
		var got []string
		for _, l := range strings.Split(e.log.String(), "\n") {
			if rx.MatchString(l) {
				got = append(got, l)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("after %s the log has %d lines matching %q, want %d:\n%s", timeout, len(got), re, n, e.log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) countLog(re string) int {
	rx := regexp.MustCompile(re)
	n := 0
	for _, l := range strings.Split(e.log.String(), "\n") {
		if rx.MatchString(l) {
			n++
		}
	}
	return n
}

// waitState polls the state file until cond holds.
func (e *env) waitState(what string, timeout time.Duration, cond func(*idlestate.File) bool) *idlestate.File {
	e.t.Helper()
	return waitStateAt(e.t, e.statePath(), what, timeout, cond)
}

func waitStateAt(t testing.TB, path, what string, timeout time.Duration, cond func(*idlestate.File) bool) *idlestate.File {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *idlestate.File
	for {
		if fh, err := os.Open(path); err == nil {
			f, err := idlestate.Decode(fh)
			fh.Close()
			if err == nil {
				last = f
				if cond(f) {
					return f
				}
			}
		}
		if time.Now().After(deadline) {
			var b bytes.Buffer
			if last != nil {
				idlestate.Encode(&b, last)
			}
			t.Fatalf("after %s: state never showed %s; last:\n%s", timeout, what, b.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitFile(t testing.TB, path string, timeout time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s still missing or empty", timeout, path)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func jobRunning(name string) func(*idlestate.File) bool {
	return func(f *idlestate.File) bool {
		for _, j := range f.Jobs {
			if j.Name == name && j.Running && j.PGID > 1 {
				return true
			}
		}
		return false
	}
}

func jobInfo(f *idlestate.File, name string) idlestate.JobInfo {
	for _, j := range f.Jobs {
		if j.Name == name {
			return j
		}
	}
	return idlestate.JobInfo{}
}

// alive reports whether pid runs (not a zombie).
func pidAlive(pid int) bool {
	p, err := holders.ReadProc("", pid)
	return err == nil && p.State != 'Z' && p.State != 'X'
}

// sessionGone waits until no process of session sid is left.
func sessionGone(t testing.TB, sid int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := holders.Members("", func(p *holders.Proc) bool { return p.SID == sid || p.PGID == sid })
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d processes of job session %d are alive", timeout, len(left), sid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// foreign starts a process of another user that holds dev open.
func foreign(t testing.TB, user, dev string) int {
	t.Helper()
	sshdtest.EnsureUser(t, user)
	return sshdtest.StartProcessAs(t, user, "/bin/sh", "-c", "exec 3<"+dev+"; exec sleep 600")
}

// helperTerm is a job that records when SIGTERM arrives (unix ns) in
// $TERM_FILE, then exits; it says it is ready in $READY_FILE. With
// $OPEN_DEV it holds that file open (a ROCm job holds /dev/kfd).
func helperTerm() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	if dev := os.Getenv("OPEN_DEV"); dev != "" {
		f, err := os.Open(dev)
		if err != nil {
			os.Exit(2)
		}
		defer f.Close()
	}
	os.WriteFile(os.Getenv("READY_FILE"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	<-c
	now := time.Now().UnixNano()
	os.WriteFile(os.Getenv("TERM_FILE"), []byte(strconv.FormatInt(now, 10)), 0o644)
	os.Exit(0)
}

// helperOpener reads commands on stdin: "open" opens $DEV and prints the
// unix ns just before open(2); "close" closes it and prints "closed".
// With $KFD_PROC it first writes its KFD entry there, with no VRAM on the
// GPUs of $KFD_GPU_IDS, as the kernel does at a ROCm program's first open.
func helperOpener() {
	if proc := os.Getenv("KFD_PROC"); proc != "" {
		dir := filepath.Join(proc, strconv.Itoa(os.Getpid()))
		os.MkdirAll(dir, 0o755)
		for _, id := range strings.Split(os.Getenv("KFD_GPU_IDS"), ",") {
			os.WriteFile(filepath.Join(dir, "vram_"+id), []byte("0\n"), 0o644)
		}
	}
	var f *os.File
	buf := make([]byte, 64)
	for {
		n, err := os.Stdin.Read(buf)
		if err != nil || n == 0 {
			os.Exit(0)
		}
		switch strings.TrimSpace(string(buf[:n])) {
		case "open":
			t0 := time.Now().UnixNano()
			f, err = os.Open(os.Getenv("DEV"))
			if err != nil {
				fmt.Println("error", err)
				continue
			}
			fmt.Println(t0)
		case "close":
			if f != nil {
				f.Close()
				f = nil
			}
			fmt.Println("closed")
		}
	}
}

// handSteps drives a daemon's scans by hand, on a clock of its own.
type handSteps struct {
	e   *env
	d   *daemon
	now time.Time
}

// step scans after the given time and returns the state file that scan
// wrote (it is written at most once a second: a step a second or more
// after the last one writes it).
func (h *handSteps) step(after time.Duration) *idlestate.File {
	h.e.t.Helper()
	h.now = h.now.Add(after)
	h.d.step(h.now)
	f := h.e.readState()
	if !f.Updated.Equal(h.now) {
		h.e.t.Fatalf("state file written at %s, not by the step at %s", f.Updated, h.now)
	}
	return f
}

// listedIn says whether job's processes in f include pid; its pids and
// procs must agree.
func listedIn(t testing.TB, f *idlestate.File, job string, pid int) bool {
	t.Helper()
	j := jobInfo(f, job)
	in := slices.Contains(j.PIDs, pid)
	if in != slices.ContainsFunc(j.Procs, func(p idlestate.ProcStart) bool { return p.PID == pid }) {
		t.Fatalf("pids and procs disagree about %d: %+v", pid, j)
	}
	return in
}

// writeFifo writes a line into the fifo at path (a job reading it goes on).
func writeFifo(t testing.TB, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
}

// readPID waits for the file name in the test's folder and reads the pid
// in it.
func (e *env) readPID(name string) int {
	e.t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(string(waitFile(e.t, e.path(name), patience))))
	if err != nil {
		e.t.Fatal(err)
	}
	return pid
}

// holdOpen starts a process of this test's user that holds dev open until
// the test ends.
func holdOpen(t testing.TB, dev string) *exec.Cmd {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := exec.Command("sleep", "600")
	c.ExtraFiles = []*os.File{f}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}
