package supervisor

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumon/gpumon/internal/testenv"
)

func TestParseMark(t *testing.T) {
	tests := []struct {
		in   string
		want Mark
		ok   bool
	}{
		{"a1b2c3/0011223344556677/process-miner", Mark{"a1b2c3", "0011223344556677", "process-miner"}, true},
		{"a1b2c3/00/process-with/slash", Mark{"a1b2c3", "00", "process-with/slash"}, true},
		{"a1b2c3/00/", Mark{}, false},
		{"a1b2c3//job", Mark{}, false},
		{"/00/job", Mark{}, false},
		{"nothing", Mark{}, false},
		{"", Mark{}, false},
	}
	for _, tt := range tests {
		got, ok := parseMark(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseMark(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
		if ok && got.String() != tt.in {
			t.Errorf("%q round-trips to %q", tt.in, got.String())
		}
	}
}

func TestMarkIn(t *testing.T) {
	tests := []struct {
		name    string
		environ string
		want    Mark
	}{
		{"last", "PATH=/bin\x00HOME=/\x00IDLEMON_JOB=i/n/job\x00", Mark{"i", "n", "job"}},
		{"first wins, as for getenv", "IDLEMON_JOB=i/n/a\x00IDLEMON_JOB=x/y/b\x00", Mark{"i", "n", "a"}},
		{"no final NUL", "A=1\x00IDLEMON_JOB=i/n/job", Mark{"i", "n", "job"}},
		{"a longer name is another variable", "IDLEMON_JOBS=i/n/job\x00XIDLEMON_JOB=i/n/job\x00", Mark{}},
		{"in a value only", "A=IDLEMON_JOB=i/n/job\x00", Mark{}},
		{"none", "", Mark{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := markIn([]byte(tt.environ))
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestInstanceOf(t *testing.T) {
	a, b := InstanceOf("/run/idlemon/state.json"), InstanceOf("/run/idlemon2/state.json")
	if a == b || len(a) != 12 || a != InstanceOf("/run/idlemon/state.json") {
		t.Errorf("instances %q %q", a, b)
	}
}

// What the supervisor signals: a process of the jobs' user with the job's
// mark, or in the job's session; never one of another user that claims
// the mark, never one of the jobs' user without it.
func TestSignalsOnlyTheJobs(t *testing.T) {
	testenv.NeedRoot(t)
	s := &Supervisor{Instance: "test" + strconv.Itoa(os.Getpid()), UID: 0}
	job, err := s.Start(Spec{Name: "process-t", Cmd: "sleep 600 & exec sleep 600", Dir: "/", Env: os.Environ(), Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := func(uid uint32, env ...string) *exec.Cmd {
		c := exec.Command("sleep", "600")
		c.Env = append(os.Environ(), env...)
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	// the job's mark, claimed by nobody (uid 65534), and by root without
	// being the job's
	claim := start(65534, job.Mark.Env())
	unmarked := start(0)
	otherRun := start(0, Mark{Instance: s.Instance, Nonce: "0000", Job: "process-t"}.Env())
	var pids []int
	deadline := time.Now().Add(time.Minute)
	for len(pids) < 2 {
		pids = pids[:0]
		for _, m := range s.Members(job) {
			pids = append(pids, m.PID)
		}
		if time.Now().After(deadline) {
			t.Fatalf("members of the job: %v, want the first process and its child", pids)
		}
		time.Sleep(time.Millisecond)
	}
	for _, c := range []*exec.Cmd{claim, unmarked, otherRun} {
		if _, ok := s.signalPID(c.Process.Pid, job.target(), syscall.SIGTERM); ok {
			t.Errorf("pid %d signalled as the job's", c.Process.Pid)
		}
	}
	killed, left := s.Stop(job, nil)
	if killed || len(left) != 0 {
		t.Errorf("Stop: killed %v, left %v", killed, left)
	}
	if got := s.Members(job); len(got) != 0 {
		t.Errorf("after Stop: %+v", got)
	}
	for _, c := range []*exec.Cmd{claim, unmarked, otherRun} {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("pid %d is gone: %v", c.Process.Pid, err)
		}
	}
	// A recorded session counts only while its leader is the recorded
	// one: once that pid is another process's, its session is a
	// stranger's, even of the jobs' user.
	leader, err := s.read(unmarked.Process.Pid, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.find(target{SID: leader.PID, SIDStart: leader.Start - 1}); len(got) != 0 {
		t.Errorf("a session whose leader was started at another time: %+v", got)
	}
	if got := s.find(target{SID: leader.PID, SIDStart: leader.Start}); len(got) != 1 || got[0].PID != leader.PID {
		t.Errorf("the recorded session with its leader: %+v", got)
	}
	// the other run of this instance is a leftover; the claim is not
	var got []int
	for _, l := range s.Leftovers(nil) {
		for _, m := range l.Members {
			got = append(got, m.PID)
		}
	}
	if diff := cmp.Diff([]int{otherRun.Process.Pid}, got); diff != "" {
		t.Errorf("leftovers (-want +got):\n%s", diff)
	}
}
