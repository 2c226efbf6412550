package fetch

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/sshdtest"
)

// Hosts that answer too much, or nothing, through Debian's sshd: a
// ForceCommand that prints forever on stdout, one on stderr, and an account
// whose login shell is /bin/false. Each gets a row saying so, the good host
// beside them is unaffected, and nothing of the flood is left running.
func TestRealSSHDFloodingHosts(t *testing.T) {
	s := newRealSite(t)
	s.add([]string{"good"}, []string{"127.0.0.61"}, "")
	s.add([]string{"flood"}, []string{"127.0.0.62"}, "ForceCommand yes")
	s.add([]string{"flooderr"}, []string{"127.0.0.63"}, "ForceCommand yes >&2")
	s.setGPUs("good", realGPUs, "pid, gpu_uuid, used_gpu_memory [MiB]\n")
	// A small answer that would multiply: 60 GPUs with one UUID and 4,000
	// processes on it once made 240,000 rows; and more GPUs than a host has.
	s.add([]string{"sameuuid"}, []string{"127.0.0.64"}, "")
	s.add([]string{"manygpus"}, []string{"127.0.0.65"}, "")
	s.setGPUs("sameuuid", gpuHeader+repeat(60, func(i int) string { return gpuLine(i, "GPU-same", "NVIDIA H100") }),
		realAppsHeader+repeat(4000, func(i int) string { return fmt.Sprintf("%d, GPU-same, 10\n", 100000+i) }))
	s.setGPUs("manygpus", gpuHeader+repeat(65, func(i int) string { return gpuLine(i, fmt.Sprintf("GPU-%d", i), "x") }), realAppsHeader)
	// the good host again, as an account whose shell is /bin/false
	sshdtest.EnsureUserShell(t, "gpmfalse", "/bin/false")
	good := s.servers["good"]
	fmt.Fprintf(&s.sshCfg, "Host falseshell\n  HostName %s\n  Port %d\n  User gpmfalse\n  IdentityFile %s\n\n", good.Host(), good.Port(), s.keyPath)
	s.hostList = append(s.hostList, "falseshell")

	by, stderr := s.fetch(s.writeFiles(""))

	if rows := by["good"]; len(rows) != 2 || rows[0].HostStatus != hoststatus.OK {
		t.Errorf("good host: %+v\n%s", rows, stderr)
	}
	wantStatus(t, by["flood"], hoststatus.Error, "the host sent more than 16 MiB of output")
	if rows := by["sameuuid"]; len(rows) != 4059 || !strings.Contains(rows[0].HostError, "nvidia-smi gave UUID GPU-same to 60 GPUs") {
		t.Errorf("sameuuid: %d rows (want 4,000 processes on the first GPU and 59 idle GPUs), host_error %q", len(rows), rows[0].HostError)
	}
	wantStatus(t, by["manygpus"], hoststatus.Error, "nvidia-smi listed more than 64 GPUs")
	wantStatus(t, by["flooderr"], hoststatus.Error, "the host sent more than 64 KiB of error output")
	wantStatus(t, by["falseshell"], hoststatus.Error, "exited with status 1 and printed nothing: is the account's login shell /bin/false?")

	// Cut off, the flooding `yes` dies on the host (SIGPIPE once sshd's
	// side of the connection is gone): nothing of ours is left running.
	for _, name := range []string{"flood", "flooderr"} {
		deadline := time.Now().Add(time.Minute)
		for {
			var left []string
			for _, pid := range s.servers[name].RemotePIDs() {
				if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), "yes") {
					left = append(left, fmt.Sprint(pid))
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: yes still runs on the host (pids %v)", name, left)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
