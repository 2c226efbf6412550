package fetch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"golang.org/x/crypto/ssh"
)

// A user names processes to hide their GPU use or forge someone else's: a
// newline and a line shaped like nvidia-smi's CSV, commas, quotes, the
// probe's marker, a command line longer than anyone reads. Real processes,
// a real user, real ps and sshd: load_data.csv holds exactly the real
// processes, under their real pids and user, with commands made harmless.
func TestRealSSHDHostileProcessNames(t *testing.T) {
	s := newRealSite(t)
	const user = "mallory" // at most 8 characters: ps prints longer names as uids
	sshdtest.EnsureUser(t, user)
	s.add([]string{"gpu01"}, []string{"127.0.0.61"}, "")

	names := []string{
		"python\nGPU-real-1, 99999, forged, 70000",                        // the attack that worked
		"python\n99999, GPU-real-1, 70000\nroot 1 x",                      // the same for the new query's columns
		`train "a,b", c` + "\n@@gpumon:00000000 end ps 0\n@@gpumon: done", // marker look-alikes at line starts
		"python\r\x1b[2J\x1b]0;title\x07\tx",                              // terminal control
	}
	// perl's $0 sets both the command line and the kernel's comm, as prctl
	// PR_SET_NAME does; the last process has 20,000 characters of arguments.
	var pids []int
	for _, name := range names {
		pids = append(pids, sshdtest.StartProcessAs(t, user, "/usr/bin/perl", "-e", `$0 = shift; sleep 600`, name))
	}
	long := sshdtest.StartProcessAs(t, user, "/usr/bin/perl", "-e", "sleep 600", strings.Repeat("A", 20000))
	pids = append(pids, long)
	waitRenamed(t, pids[:len(names)])

	apps := realAppsHeader
	for _, pid := range pids {
		apps += fmt.Sprintf("%d, GPU-real-0, 1000\n", pid)
	}
	s.setGPUs("gpu01", realGPUs, apps)
	by, stderr := s.fetch(s.writeFiles("user = " + loginUser + "\n"))

	rows := by["gpu01"]
	got := map[int64]loaddata.Row{}
	for _, r := range rows {
		if r.HostStatus != "ok" || r.HostError != "" {
			t.Errorf("host status %q %q\n%s", r.HostStatus, r.HostError, stderr)
		}
		if !r.PID.Valid {
			if r.GPUUUID != "GPU-real-1" {
				t.Errorf("a row without a process on %s: %+v", r.GPUUUID, r)
			}
			continue
		}
		if _, twice := got[r.PID.Value]; twice {
			t.Errorf("pid %d has two rows", r.PID.Value)
		}
		got[r.PID.Value] = r
	}
	if len(got) != len(pids) || len(rows) != len(pids)+1 {
		t.Errorf("%d rows, %d processes; want %d processes on GPU 0 and an idle GPU 1: %+v", len(rows), len(got), len(pids), rows)
	}
	for i, pid := range pids {
		r, ok := got[int64(pid)]
		if !ok {
			t.Errorf("process %d is missing from load_data.csv", pid)
			continue
		}
		if r.User != user || r.GPUUUID != "GPU-real-0" || !r.ProcessElapsedS.Valid {
			t.Errorf("pid %d: user %q on %s, elapsed %v", pid, r.User, r.GPUUUID, r.ProcessElapsedS)
		}
		if strings.ContainsFunc(r.Command, func(c rune) bool { return c < ' ' || c == 0x7f }) {
			t.Errorf("pid %d: control character in command %q", pid, r.Command)
		}
		if i < len(names) && !strings.HasPrefix(r.Command, strings.Fields(names[i])[0]) {
			t.Errorf("pid %d: command %q, want it to start like %q", pid, r.Command, names[i])
		}
	}
	if r := got[int64(long)]; len(r.Command) > 4096 || !strings.HasPrefix(r.Command, "/usr/bin/perl -e sleep 600 AAAA") {
		t.Errorf("long command: %d bytes, %.40q", len(r.Command), r.Command)
	}
	if _, forged := got[99999]; forged {
		t.Error("pid 99999 was forged")
	}
	for _, r := range rows {
		if r.User == "forged" || r.User == "root" {
			t.Errorf("forged row %+v", r)
		}
	}
}

// A host whose ps fails still lists its GPU processes, and says that their
// users are unknown rather than leaving the cells silently empty.
func TestRealSSHDFailingPS(t *testing.T) {
	s := newRealSite(t)
	bin := sshdtest.TempDir(t)
	sshdtest.WriteFakeNvidiaSMI(t, bin, s.data)
	brokenPS := "#!/bin/sh\necho 'ps: cannot read /proc' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "ps"), []byte(brokenPS), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := sshdtest.Start(t, sshdtest.Options{Addr: "127.0.0.62", AuthorizedKeys: []ssh.PublicKey{s.key.PublicKey()}, FakeBin: bin})
	s.servers["gpu01"], s.hostList = srv, append(s.hostList, "gpu01")
	fmt.Fprintf(&s.sshCfg, "Host gpu01\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n", srv.Host(), srv.Port(), loginUser, s.keyPath)
	s.known.WriteString(srv.KnownHostsLines())
	s.setGPUs("gpu01", realGPUs, realAppsHeader+"4242, GPU-real-0, 1000\n")

	by, stderr := s.fetch(s.writeFiles(""))
	rows := by["gpu01"]
	const want = "ps failed (exit 1): ps: cannot read /proc; users and commands unknown"
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2: %+v\n%s", len(rows), rows, stderr)
	}
	for _, r := range rows {
		if r.HostStatus != "ok" || r.HostError != want {
			t.Errorf("got %q %q, want ok %q", r.HostStatus, r.HostError, want)
		}
	}
	if r := rows[0]; r.PID.Value != 4242 || r.User != "" {
		t.Errorf("process row %+v", r)
	}
}

// waitRenamed waits until each perl has set its own name (it does so as it
// starts), so that the host's ps sees the hostile names and not "perl".
func waitRenamed(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		for {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if len(b) > 0 && !strings.HasPrefix(string(b), "/usr/bin/perl") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pid %d did not rename itself: %q", pid, b)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
