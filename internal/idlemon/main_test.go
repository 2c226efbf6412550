package idlemon

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpumon/gpumon/internal/idlestate"
)

// What a state file says reaches the terminal as plain text: no control
// sequence, no bidi override that would reorder the line, no half of a
// character where a long command line is cut.
func TestStatusShowsHostText(t *testing.T) {
	pad := strings.Repeat("x", maxCommand-4) // the next 4 bytes end at the cut
	tests := []struct {
		name, in, want string
	}{
		{"plain", "python train.py", "python train.py"},
		{"right-to-left override", "evil\u202egnp.exe", "evil?gnp.exe"},
		{"bidi isolate and mark", "a\u2067b\u2069c\u200fd", "a?b?c?d"},
		{"terminal escape", "x\x1b[31mred\u009b0m", "x?[31mred?0m"},
		{"invalid UTF-8", "a\xffb\xc3", "a?b?"},
		{"4-byte character at the cut", pad + "😀" + "tail", pad + "…"},
		{"4-byte character before the cut", pad[3:] + "😀" + "tail", pad[3:] + "😀…"},
		{"exactly the limit", pad + "😀", pad + "😀"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &idlestate.File{PID: os.Getpid(), Host: "gpu07", GPUs: []idlestate.GPU{{
				Index: 0, State: idlestate.Busy,
				Holders: []idlestate.Holder{{PID: 7, User: "mallory", Command: tt.in}},
			}}}
			var out bytes.Buffer
			printStatus(&out, f, time.Now())
			line := lineWith(t, out.String(), "mallory pid 7 ")
			if got := strings.TrimPrefix(line[strings.Index(line, "mallory"):], "mallory pid 7 "); got != tt.want {
				t.Errorf("command shown as %q, want %q", got, tt.want)
			}
			assertPlainText(t, out.String())
		})
	}
}

// Each field of the state file that status prints goes through the same
// filter as the holders' command lines.
func TestStatusFieldsAreFiltered(t *testing.T) {
	const evil = "\u202e\x1b]0;pwned\x07\xff"
	f := &idlestate.File{PID: os.Getpid(), Host: evil, Paused: evil,
		GPUs: []idlestate.GPU{{Index: 0, State: idlestate.Job,
			Holders: []idlestate.Holder{{PID: 7, User: evil, Command: evil}}}},
		Jobs: []idlestate.JobInfo{{Name: evil, GPUs: []int{0}, PGID: 9, Running: true}, {Name: evil, GPUs: []int{1}}},
	}
	var out bytes.Buffer
	printStatus(&out, f, time.Now())
	assertPlainText(t, out.String())
	if n := strings.Count(out.String(), "??]0;pwned??"); n != 7 {
		t.Errorf("%d fields shown filtered, want 7 (host, paused, user, command, the job in the GPU row and its two lines):\n%s", n, out.String())
	}
}

// lineWith returns the line of out that contains s.
func lineWith(t testing.TB, out, s string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	t.Fatalf("no line with %q in:\n%s", s, out)
	return ""
}

// assertPlainText fails unless out is valid UTF-8 without control or
// format characters (bidi overrides are format characters) but newlines.
func assertPlainText(t testing.TB, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("not valid UTF-8: %q", out)
	}
	for _, r := range out {
		if r != '\n' && (unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r)) {
			t.Errorf("%U reaches the terminal: %q", r, out)
		}
	}
}

// status says why a job waits, and where a running one's group is.
func TestStatusSaysWhyAJobWaits(t *testing.T) {
	f := &idlestate.File{PID: os.Getpid(), Host: "gpu07", Jobs: []idlestate.JobInfo{
		{Name: "process-a", GPUs: []int{0}, Waiting: "busy_gpu"},
		{Name: "process-b", GPUs: []int{1}},
		{Name: "process-c", GPUs: []int{2}, Running: true, PGID: 42, Cgroup: "/sys/fs/cgroup/x/0123456789abcdef.process-c"},
	}}
	var out bytes.Buffer
	printStatus(&out, f, time.Now())
	for _, want := range []string{
		"job process-a on gpu 0: not running (somebody else holds one of its GPUs)\n",
		"job process-b on gpu 1: not running\n",
		"job process-c on gpu 2: running since -, pid 42, no process listed yet, cgroup /sys/fs/cgroup/x/0123456789abcdef.process-c\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}
