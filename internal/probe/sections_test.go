package probe

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParsePS(t *testing.T) {
	tests := []struct {
		name    string
		sec     Section
		want    map[int]PSProcess
		skipped []SkippedLine
		err     string // "" for none
	}{
		{
			name: "procps columns, inner spacing of the command kept",
			sec: Section{Body: []byte("  901 gpumon                               0 sh -s\n" +
				" 4242 alice                             7260 python train.py --lr 0.1   --epochs 3\n" +
				"1234567 1000123                            5 /opt/my app/run, with \"quotes\", and commas\n")},
			want: map[int]PSProcess{
				901:     {PID: 901, User: "gpumon", ElapsedS: 0, Command: "sh -s"},
				4242:    {PID: 4242, User: "alice", ElapsedS: 7260, Command: "python train.py --lr 0.1   --epochs 3"},
				1234567: {PID: 1234567, User: "1000123", ElapsedS: 5, Command: "/opt/my app/run, with \"quotes\", and commas"},
			},
		},
		{
			name: "what procps prints for a name with a newline, a tab, an escape and UTF-8",
			sec:  Section{Body: []byte(" 5784 alice    3 python GPU-a, 99999, forged, 70000..[31m\"q\"??\n")},
			want: map[int]PSProcess{5784: {PID: 5784, User: "alice", ElapsedS: 3, Command: "python GPU-a, 99999, forged, 70000..[31m\"q\"??"}},
		},
		{
			name: "control characters a ps let through become '?'",
			sec:  Section{Body: []byte(" 77 bob 1 evil\x1b[2J\x00\rname\xff\r\n")},
			want: map[int]PSProcess{77: {PID: 77, User: "bob", ElapsedS: 1, Command: "evil?[2J??name?"}},
		},
		{
			name: "a forged line after a newline a ps let through: neither line of that pid counts",
			sec:  Section{Body: []byte(" 4242 alice 60 python\n 4242 root 60 forged\n 5151 bob 9 ok\n")},
			want: map[int]PSProcess{5151: {PID: 5151, User: "bob", ElapsedS: 9, Command: "ok"}},
			skipped: []SkippedLine{
				{Line: 2, Reason: "pid 4242 listed again (first on line 1): neither line is used"},
			},
		},
		{
			name: "a kernel thread's command is its name in brackets; a bare pid line is skipped",
			sec:  Section{Body: []byte("    2 root 99 [kthreadd]\n   17\n")},
			want: map[int]PSProcess{2: {PID: 2, User: "root", ElapsedS: 99, Command: "[kthreadd]"}},
			skipped: []SkippedLine{
				{Line: 2, Reason: "no user"},
			},
		},
		{
			name: "a user name with a space shifts the columns: the line is not guessed at",
			sec:  Section{Body: []byte(" 88 DOMAIN user 60 python\n 89 carol 60 python\n")},
			want: map[int]PSProcess{89: {PID: 89, User: "carol", ElapsedS: 60, Command: "python"}},
			skipped: []SkippedLine{
				{Line: 1, Reason: `elapsed time "user" is not a number of seconds`},
			},
		},
		{
			name: "not a pid",
			sec:  Section{Body: []byte("ps: warning\n+12 alice 5 x\n-3 alice 5 x\n 12 alice -5 x\n")},
			want: map[int]PSProcess{},
			skipped: []SkippedLine{
				{Line: 1, Reason: `"ps:" is not a pid`},
				{Line: 2, Reason: `"+12" is not a pid`},
				{Line: 3, Reason: `"-3" is not a pid`},
				{Line: 4, Reason: `elapsed time "-5" is not a number of seconds`},
			},
			err: "ps listed no process: ps: warning",
		},
		{
			name: "ps missing",
			sec:  Section{Body: []byte("sh: 1: ps: not found\n"), ExitCode: 127},
			want: map[int]PSProcess{},
			skipped: []SkippedLine{
				{Line: 1, Reason: `"sh:" is not a pid`},
			},
			err: "ps failed (exit 127): sh: 1: ps: not found",
		},
		{
			name: "ps failed without a word",
			sec:  Section{ExitCode: 1},
			want: map[int]PSProcess{},
			err:  "ps failed (exit 1)",
		},
		{
			name: "ps printed nothing and exited 0",
			sec:  Section{Body: []byte("\n")},
			want: map[int]PSProcess{},
			err:  "ps listed no process",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ParsePS(tt.sec)
			if diff := cmp.Diff(tt.want, rep.Processes); diff != "" {
				t.Errorf("processes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.skipped, rep.Skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.err {
				t.Errorf("error %q, want %q", got, tt.err)
			}
		})
	}
}

// One line longer than bufio.Scanner's limit costs that line's length only:
// the lines after it are still read.
// A long command is kept to MaxCommand bytes, ending in an ellipsis.
func TestParsePSLongLine(t *testing.T) {
	body := " 10 alice 5 " + strings.Repeat("x", 2<<20) + "\n 11 bob 6 y\n"
	rep, err := ParsePS(Section{Body: []byte(body)})
	if err != nil || len(rep.Processes) != 2 || rep.Processes[11].User != "bob" {
		t.Errorf("err %v, %d processes, 11 = %+v", err, len(rep.Processes), rep.Processes[11])
	}
	if c := rep.Processes[10].Command; len(c) > MaxCommand || !strings.HasSuffix(c, "…") {
		t.Errorf("command of %d bytes kept, want at most %d ending in …", len(c), MaxCommand)
	}
}

// However many lines a host prints as ps, what is kept is bounded: past
// maxPSLines the section is refused, and bad lines past maxSkipped are
// only counted.
func TestParsePSBounds(t *testing.T) {
	var many, bad strings.Builder
	for i := 1; i <= maxPSLines+1; i++ {
		fmt.Fprintf(&many, " %d alice 5 x\n", i)
	}
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&bad, "garbage %d\n", i)
	}
	bad.WriteString(" 7 bob 1 y\n")

	if _, err := ParsePS(Section{Body: []byte(many.String())}); err == nil || err.Error() != "ps printed more than 8192 lines, more than the script asked for" {
		t.Errorf("%d lines: err %v", maxPSLines+1, err)
	}
	rep, err := ParsePS(Section{Body: []byte(bad.String())})
	if err != nil || len(rep.Processes) != 1 || len(rep.Skipped) != maxSkipped || rep.MoreSkipped != 1000-maxSkipped {
		t.Errorf("err %v, %d processes, %d skipped, %d more; want nil, 1, %d, %d",
			err, len(rep.Processes), len(rep.Skipped), rep.MoreSkipped, maxSkipped, 1000-maxSkipped)
	}
	long := " 8 " + strings.Repeat("u", 1000) + " 1 z\n"
	rep, _ = ParsePS(Section{Body: []byte(long)})
	if u := rep.Processes[8].User; len(u) > maxUser {
		t.Errorf("user of %d bytes kept, want at most %d", len(u), maxUser)
	}
}

func TestParseHost(t *testing.T) {
	unknown := HostInfo{CPUs: -1, Load1: -1, MemTotalKiB: -1, MemAvailableKiB: -1}
	tests := []struct {
		name    string
		body    string
		want    HostInfo
		usedKiB int64
	}{
		{
			name:    "what the script prints",
			body:    "cpus 64\nload 3.52 2.10 1.00\nmem_total_kib 2097152\nmem_available_kib 1048576\n",
			want:    HostInfo{CPUs: 64, Load1: 3.52, MemTotalKiB: 2097152, MemAvailableKiB: 1048576},
			usedKiB: 1048576,
		},
		{
			name:    "empty values where getconf and /proc were not there",
			body:    "cpus \nload \nmem_total_kib \nmem_available_kib \n",
			want:    unknown,
			usedKiB: -1,
		},
		{
			name:    "nonsense is unknown, never zero",
			body:    "cpus 0\nload NaN\nmem_total_kib -5\nmem_available_kib x\n",
			want:    unknown,
			usedKiB: -1,
		},
		{
			name:    "more available than total: used is unknown",
			body:    "mem_total_kib 100\nmem_available_kib 200\nfuture_key 1\n",
			want:    HostInfo{CPUs: -1, Load1: -1, MemTotalKiB: 100, MemAvailableKiB: 200},
			usedKiB: -1,
		},
		{
			name:    "an idle machine",
			body:    "load 0.00 0.00 0.00\r\nmem_total_kib 100\nmem_available_kib 100\n",
			want:    HostInfo{CPUs: -1, Load1: 0, MemTotalKiB: 100, MemAvailableKiB: 100},
			usedKiB: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseHost([]byte(tt.body))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if u := got.MemUsedKiB(); u != tt.usedKiB {
				t.Errorf("MemUsedKiB = %d, want %d", u, tt.usedKiB)
			}
		})
	}
}

// Processes whose names carry a newline and a forged nvidia-smi line, in
// argv (any program can set its argv[0]) and in comm (perl's $0 sets both),
// go through the real script and the real ps: each is one process, under
// its own pid, with a command that holds no control character.
func TestScriptHostileProcessNames(t *testing.T) {
	const hostile = "python\nGPU-a, 99999, forged, 70000\t\x1b[31m\"q\" @@gpumon:x end ps 0"
	argv := exec.Command("/bin/sleep", "600")
	argv.Args[0] = hostile
	perl := exec.Command("/usr/bin/perl", "-e", `$0 = shift; sleep 600`, hostile)
	var pids []int
	for _, cmd := range []*exec.Cmd{argv, perl} {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pids = append(pids, cmd.Process.Pid)
	}
	waitForComm(t, pids[1], "python")
	// A zombie has no command line: ps prints its comm, which the process
	// set itself before it exited, in brackets.
	zombie := startZombie(t, "py\nGPU-a, 99999")
	pids = append(pids, zombie)

	bin := t.TempDir()
	var apps strings.Builder
	apps.WriteString("echo 'pid, gpu_uuid, used_gpu_memory [MiB]'\n")
	for _, pid := range pids {
		fmt.Fprintf(&apps, "echo '%d, GPU-a, 10'\n", pid)
	}
	fake := "#!/bin/sh\ncase \"$1\" in\n--query-gpu=*) echo index; echo 0 ;;\n--query-compute-apps=*)\n" + apps.String() + ";;\nesac\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	req := NewRequest(3)
	cmd := exec.Command("sh", "-c", Command)
	cmd.Stdin = strings.NewReader(req.Script())
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	o := ParseOutput(req.Nonce, out)
	if !o.Complete || !o.Has(SectionPS) || !o.Has(SectionHost) {
		t.Fatalf("sections missing:\n%s", out)
	}
	rep, err := ParsePS(o.Sections[SectionPS])
	if err != nil || len(rep.Skipped) > 0 {
		t.Fatalf("ParsePS: %v, skipped %+v\n%s", err, rep.Skipped, o.Sections[SectionPS].Body)
	}
	// the three processes and the script's own shell
	if len(rep.Processes) != 4 {
		t.Errorf("%d processes, want 3:\n%s", len(rep.Processes), o.Sections[SectionPS].Body)
	}
	if _, forged := rep.Processes[99999]; forged {
		t.Error("pid 99999 forged")
	}
	if got, want := rep.Processes[zombie].Command, "[py.GPU-a, 99999] <defunct>"; got != want && got != "[py?GPU-a, 99999] <defunct>" {
		t.Errorf("zombie: command %q, want %q", got, want)
	}
	for _, pid := range pids {
		p := rep.Processes[pid]
		if pid != zombie && (!strings.HasPrefix(p.Command, "python") || !strings.Contains(p.Command, "forged")) {
			t.Errorf("pid %d: command %q", pid, p.Command)
		}
		if strings.ContainsFunc(p.Command, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Errorf("pid %d: control character in %q", pid, p.Command)
		}
	}
}

// startZombie starts a perl whose child names itself comm, exits and is
// never reaped, and returns the child's pid.
func startZombie(t *testing.T, comm string) int {
	t.Helper()
	const script = `my $pid = fork();
if ($pid == 0) { open(my $f, ">", "/proc/self/comm") or die; print $f $ARGV[0]; close $f; exit 0 }
$| = 1; print "$pid\n"; sleep 600;`
	cmd := exec.Command("/usr/bin/perl", "-e", script, comm)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	if _, err := fmt.Fscan(stdout, &pid); err != nil {
		t.Fatalf("perl did not say its child's pid: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i:]), ") Z") {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not become a zombie: %q", pid, stat)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForComm waits until pid has set its own name (perl does so as it
// starts), so that ps sees the hostile comm and not "perl".
func waitForComm(t *testing.T, pid int, prefix string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if strings.HasPrefix(string(b), prefix) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d did not rename itself", pid)
}

// Whatever a host prints as its ps section, ParsePS never panics, every
// process has a pid of its own line, and no string it returns holds a
// control character.
func FuzzParsePS(f *testing.F) {
	f.Add([]byte(" 4242 alice 7260 python train.py\n  901 gpumon 0 sh -s\n"), 0)
	f.Add([]byte(" 1 a 1 x\n 1 b 2 y\n\x00 2 c 3 \x1b[2J\n"), 1)
	f.Fuzz(func(t *testing.T, body []byte, exitCode int) {
		rep, _ := ParsePS(Section{Body: body, ExitCode: exitCode})
		for pid, p := range rep.Processes {
			if pid != p.PID || pid <= 0 || p.ElapsedS < 0 {
				t.Errorf("process %d: %+v", pid, p)
			}
			if len(p.User) > maxUser || len(p.Command) > MaxCommand || len(rep.Skipped) > maxSkipped {
				t.Errorf("process %d: user %d bytes, command %d, %d skipped kept: over the bounds", pid, len(p.User), len(p.Command), len(rep.Skipped))
			}
			for _, s := range []string{p.User, p.Command} {
				if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
					t.Errorf("control character in %q", s)
				}
			}
		}
	})
}
