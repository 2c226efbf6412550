package idlemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/holders"
	"github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/idlestate"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"golang.org/x/sys/unix"
)

// The attacks of issue 23 on a running idlemon: device files replaced
// under it, a grace period systemd does not wait for, a holder that
// changed its uid.

// replacements are the ways a device file is made again under its name, as
// a driver reload does. Plain files stand for the devices, so the new file
// must be a new inode: the old one is kept alive (held open by the test's
// process, which is idlemon's own and no holder), or the new file is made
// before the old one goes.
var replacements = []struct {
	name    string
	replace func(t *testing.T, path string)
}{
	{"removed and created", func(t *testing.T, path string) {
		old, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { old.Close() })
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, 0o666)
	}},
	{"renamed into place", func(t *testing.T, path string) {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(tmp, 0o666)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}},
}

// A device file made again is watched again: its opens and closes raise
// events (a close is looked for: an open is also what the watch reports
// when it asks for a scan after the replacement).
func TestInotifyFollowsRecreatedDevice(t *testing.T) {
	for _, tc := range replacements {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nvidia0")
			if err := os.WriteFile(path, nil, 0o666); err != nil {
				t.Fatal(err)
			}
			in, err := newInotify([]holders.Device{{Index: 0, Path: path}})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			go in.run()
			tc.replace(t, path)
			deadline := time.Now().Add(atOnce)
			for {
				if fh, err := os.Open(path); err == nil {
					fh.Close()
				}
				select {
				case <-in.events:
				case <-time.After(20 * time.Millisecond):
				}
				if in.take()&unix.IN_CLOSE_NOWRITE != 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %s no close of the new %s was seen", atOnce, path)
				}
			}
		})
	}
}

// A device file made again is the GPU's: a foreign open of the new file
// stops the job at once, with the periodic scan an hour away.
func TestRecreatedDeviceStillPreempts(t *testing.T) {
	for _, tc := range replacements {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			job := e.startSleeper()
			tc.replace(t, e.devs[0])
			alice := foreign(t, "alice", e.devs[0])
			e.waitLog(`gpu 0: stopped job process-miner \(pid `+strconv.Itoa(job.PGID)+`\) - preempted by alice pid `+strconv.Itoa(alice)+` `, 1, atOnce)
			sessionGone(t, job.PGID, patience)
		})
	}
}

// A device path replaced by a fifo blocks nothing and hides nobody: a
// foreign holder of the fifo stops the job at once, so does one of the
// original device (reached through another link), and the log says once
// that the path is odd.
func TestDeviceReplacedByFifo(t *testing.T) {
	e := newEnv(t, 1)
	job := e.startSleeper()
	original := e.path("dev/real-gpu0") // the device, still reachable
	if err := os.Link(e.devs[0], original); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.devs[0]); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(e.devs[0], 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(e.devs[0], 0o666)
	// read and write: the open does not wait for a writer
	alice := sshdtest.StartProcessAs(t, "alice", "/bin/sh", "-c", "exec 3<>"+e.devs[0]+"; exec sleep 600")
	e.waitLog(`gpu 0: stopped job process-miner \(pid `+strconv.Itoa(job.PGID)+`\) - preempted by alice pid `+strconv.Itoa(alice)+` `, 1, atOnce)
	sessionGone(t, job.PGID, patience)

	syscall.Kill(alice, syscall.SIGKILL)
	e.waitLog(`gpu 0: started job process-miner`, 2, patience)
	job = jobInfo(e.waitState("the job running again", patience, func(f *idlestate.File) bool {
		return jobRunning("process-miner")(f) && jobInfo(f, "process-miner").PGID != job.PGID
	}), "process-miner")
	bob := foreign(t, "bob", original)
	e.waitLog(`gpu 0: stopped job process-miner \(pid `+strconv.Itoa(job.PGID)+`\) - preempted by bob pid `+strconv.Itoa(bob)+` `, 1, atOnce)
	if n := e.countLog(`warning: .*` + e.devs[0] + `.* a fifo`); n != 1 {
		t.Errorf("%d warnings that %s is a fifo, want 1:\n%s", n, e.devs[0], e.log.String())
	}
}

// A process that opened the GPU as root and then took another user's uid
// without exec (setuid in a running process, which makes it not
// dumpable: its /proc files are root's) is that user's, not root's; named
// like a program that never makes a GPU busy (when root's), it is not
// ignored either.
func TestSetuidHolderNamed(t *testing.T) {
	for _, tc := range []struct{ name, comm string }{
		{"plain", ""},
		{"named like an ignored program", "nvidia-smi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			sshdtest.EnsureUser(t, "alice")
			u, err := user.Lookup("alice")
			if err != nil {
				t.Fatal(err)
			}
			e.start("interval_seconds = 3600\n", options{})
			e.waitState("gpu 0 idle", patience, func(f *idlestate.File) bool {
				return len(f.GPUs) == 1 && f.GPUs[0].State == idlestate.Idle
			})
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "IDLEMON_TEST_HELPER=setuid", "DEV="+e.devs[0], "SETUID_UID="+u.Uid,
				"READY_FILE="+e.path("ready"), "COMM="+tc.comm)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			pid := e.readPID("ready")
			f := e.waitState("the setuid process holding gpu 0", patience, func(f *idlestate.File) bool {
				return f.GPUs[0].State == idlestate.Busy && len(f.GPUs[0].Holders) == 1 && f.GPUs[0].Holders[0].PID == pid
			})
			if got := f.GPUs[0].Holders[0].User; got != "alice" {
				t.Errorf("holder pid %d is %q, want alice", pid, got)
			}
		})
	}
}

// helperSetuid opens $DEV as root, names itself $COMM if set, becomes
// $SETUID_UID without exec, writes its pid to $READY_FILE and sleeps.
func helperSetuid() {
	f, err := os.Open(os.Getenv("DEV"))
	if err != nil {
		os.Exit(2)
	}
	defer f.Close()
	if comm := os.Getenv("COMM"); comm != "" {
		// the thread group leader's name, which /proc/PID/stat shows
		if err := os.WriteFile("/proc/self/comm", []byte(comm), 0); err != nil {
			os.Exit(2)
		}
	}
	uid, err := strconv.Atoi(os.Getenv("SETUID_UID"))
	if err != nil {
		os.Exit(2)
	}
	if err := syscall.Setuid(uid); err != nil { // every thread, since Go 1.16
		os.Exit(3)
	}
	tmp := os.Getenv("READY_FILE") + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.Exit(4)
	}
	os.Rename(tmp, os.Getenv("READY_FILE"))
	time.Sleep(10 * time.Minute)
	os.Exit(0)
}

// runCheck runs `idlemon -c cfg check` (this test binary) with PATH set
// to path, and returns its output and exit error.
func runCheck(t testing.TB, cfg, path string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-c", cfg, "check")
	cmd.Env = append(os.Environ(), "IDLEMON_TEST_MAIN=1", "PATH="+path)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fakeSystemctl puts a systemctl that prints lines (shell builtins only:
// PATH is its folder alone) into a new folder and returns the folder.
func fakeSystemctl(t testing.TB, lines ...string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\nprintf '%s\\n' '" + strings.Join(lines, "' '") + "'\n"
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// `idlemon check` refuses a grace_seconds that the unit's TimeoutStopSec
// does not leave room for (systemd would kill idlemon in the middle of a
// stop), whether systemctl tells the unit's or idlemon assumes the
// shipped unit's 30 s; it names the line and the fix.
func TestCheckRefusesGraceOverStopTimeout(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config("grace_seconds = 60\n")
	line := 0
	src, _ := os.ReadFile(cfg)
	for i, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, "grace_seconds") {
			line = i + 1
		}
	}
	for _, tc := range []struct {
		name, path, says string
	}{
		{"unit says 30s", fakeSystemctl(t, "LoadState=loaded", "TimeoutStopUSec=30s"), "TimeoutStopSec of idlemon.service (30s)"},
		{"not installed", fakeSystemctl(t, "LoadState=not-found", "TimeoutStopUSec=1min 30s"), "the shipped unit's TimeoutStopSec (30s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCheck(t, cfg, tc.path)
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("check exited with %v, want a failure:\n%s", err, out)
			}
			for _, want := range []string{fmt.Sprintf("%s:%d: grace_seconds: ", cfg, line), tc.says, "systemctl edit idlemon", "TimeoutStopSec=75s"} {
				if !strings.Contains(out, want) {
					t.Errorf("check's output lacks %q:\n%s", want, out)
				}
			}
		})
	}
	// without systemd nothing cuts a stop short
	if out, err := runCheck(t, cfg, t.TempDir()); err != nil || !strings.Contains(out, "stop: no stop timeout (no systemctl)") {
		t.Errorf("grace 60 without systemctl: %v\n%s", err, out)
	}
	// what fits is accepted
	ok := e.config("grace_seconds = 20\n")
	if out, err := runCheck(t, ok, fakeSystemctl(t, "LoadState=loaded", "TimeoutStopUSec=30s")); err != nil {
		t.Errorf("grace 20 with TimeoutStopSec 30s: %v\n%s", err, out)
	}
}

func TestParseTimespan(t *testing.T) {
	for _, tc := range []struct {
		in       string
		d        time.Duration
		infinite bool
		bad      bool
	}{
		{in: "30s", d: 30 * time.Second},
		{in: "1min 30s", d: 90 * time.Second},
		{in: "1h 2min 3s 400ms", d: time.Hour + 2*time.Minute + 3*time.Second + 400*time.Millisecond},
		{in: "1.500000s", d: 1500 * time.Millisecond},
		{in: "2d", d: 48 * time.Hour},
		{in: "0", d: 0},
		{in: "infinity", infinite: true},
		{in: "", bad: true},
		{in: "30", bad: true},
		{in: "30 s", bad: true},
		{in: "30parsecs", bad: true},
		{in: "s", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, inf, err := parseTimespan(tc.in)
			if (err != nil) != tc.bad || d != tc.d || inf != tc.infinite {
				t.Errorf("parseTimespan(%q) = %s, %v, %v; want %s, %v, bad %v", tc.in, d, inf, err, tc.d, tc.infinite, tc.bad)
			}
		})
	}
}

// What systemctl answers decides which grace_seconds resolve accepts:
// the unit's stop timeout when it is loaded, else the shipped unit's 30 s.
func TestGraceAgainstStopTimeout(t *testing.T) {
	dir := t.TempDir()
	notBooted := &exec.ExitError{Stderr: []byte("System has not been booted with systemd as init system (PID 1). Can't operate.\nFailed to connect to bus: Host is down\n")}
	for _, tc := range []struct {
		name  string
		out   string
		err   error
		grace string
		want  string // in the error; "" for none
	}{
		{"fits", "LoadState=loaded\nTimeoutStopUSec=30s\n", nil, "25", ""},
		{"over by a second", "LoadState=loaded\nTimeoutStopUSec=30s\n", nil, "25.5", "25.5s and a 5s margin do not fit in the TimeoutStopSec of idlemon.service (30s)"},
		{"a longer unit timeout", "TimeoutStopUSec=1min 30s\nLoadState=loaded\n", nil, "60", ""},
		{"infinity", "LoadState=loaded\nTimeoutStopUSec=infinity\n", nil, "3600", ""},
		{"not installed: systemd's default is not the unit's", "LoadState=not-found\nTimeoutStopUSec=1min 30s\n", nil, "60",
			`the shipped unit's TimeoutStopSec (30s): systemd would kill idlemon in the middle of a stop (assumed: idlemon.service is not loaded (LoadState="not-found"))`},
		// nothing kills an idlemon without systemd in the middle of a stop
		{"no systemd", "", notBooted, "60", ""},
		{"no systemctl", "", exec.ErrNotFound, "60", ""},
		{"systemctl fails otherwise", "", errors.New("exit status 1"), "60", "(assumed: systemctl: exit status 1)"},
		{"an answer not understood", "LoadState=loaded\nTimeoutStopUSec=soon\n", nil, "26", `(assumed: TimeoutStopUSec: "soon" is not a time span)`},
		{"the default grace", "", exec.ErrNotFound, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "[defaults]\n"
			if tc.grace != "" {
				body += "grace_seconds = " + tc.grace + "\n"
			}
			path := filepath.Join(dir, "idlemon.ini")
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			defer func(old func(string) (string, error)) { systemctlShow = old }(systemctlShow)
			systemctlShow = func(unit string) (string, error) {
				if unit != "idlemon.service" {
					t.Errorf("asked about %s", unit)
				}
				return tc.out, tc.err
			}
			err = checkStopTimeout(cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("accepted, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q lacks %q", err, tc.want)
			case tc.want != "" && !strings.HasPrefix(err.Error(), path+":2: grace_seconds: "):
				t.Errorf("error %q does not name %s:2 grace_seconds", err, path)
			}
		})
	}
}
