package fetch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/remote"
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
	wantStatus(t, by["flood"], hoststatus.Error, "the host sent more than 6 MiB of output")
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

// Many hosts that flood in every way at once, with a budget small enough
// that they fill it many times over: hosts that send just under the cap
// and then hold it, `yes`, and answers that look valid to the end (the
// nonce read from the script). Every healthy host beside them is ok, the
// ones with a 4,000-process answer (well past remote.Guaranteed) too: a
// host that floods only ever cuts off itself or a larger one.
func TestRealSSHDFloodsSpareHealthyHosts(t *testing.T) {
	s := newRealSite(t)
	script := filepath.Join(s.bin, "hostile.sh")
	if err := os.WriteFile(script, []byte(hostileProbe), 0o755); err != nil {
		t.Fatal(err)
	}
	var healthy []string
	for i := range 8 {
		name := fmt.Sprintf("healthy%d", i)
		s.add([]string{name}, []string{fmt.Sprintf("127.0.4.%d", 10+i)}, "")
		apps := realAppsHeader
		if i%2 == 1 {
			apps += repeat(4000, func(j int) string { return fmt.Sprintf("%d, GPU-real-%d, 10\n", 200000+j, j%2) })
		}
		s.setGPUs(name, realGPUs, apps)
		healthy = append(healthy, name)
	}
	floods := map[string]string{
		"hold":  "head -c 4000000 /dev/zero; sleep 30",
		"yes":   "yes",
		"valid": "sh " + script + " 3000000",
	}
	var flooding []string
	n := 0
	for kind, cmd := range floods {
		for i := range 4 {
			name := fmt.Sprintf("%s%d", kind, i)
			s.add([]string{name}, []string{fmt.Sprintf("127.0.4.%d", 100+n)}, "ForceCommand "+cmd)
			flooding = append(flooding, name)
			n++
		}
	}
	s.writeFiles("")
	by, stderr := s.pollWithBudget(8<<20, 10*time.Second)
	for _, name := range healthy {
		if rows := by[name]; len(rows) == 0 || rows[0].HostStatus != hoststatus.OK {
			t.Errorf("healthy host %s: %v\n%s", name, firstErr(rows), stderr)
		}
	}
	for _, name := range flooding {
		rows := by[name]
		if strings.HasPrefix(name, "valid") {
			// 3 MB of junk process lines: ok or not, its rows stay few
			if len(rows) > 10 {
				t.Errorf("%s: %d rows", name, len(rows))
			}
			continue
		}
		if len(rows) != 1 || rows[0].HostStatus == hoststatus.OK {
			t.Errorf("flooding host %s: %v", name, firstErr(rows))
		} else if !strings.Contains(rows[0].HostError, "sent more than") && rows[0].HostStatus != hoststatus.Timeout {
			t.Errorf("flooding host %s: %v, want it cut off for sending too much", name, firstErr(rows))
		}
	}
}

// pollWithBudget polls the site's hosts as fetch does, through a Client
// whose hosts' answers share a budget of budget bytes (fetch's is
// remote.DefaultBudget), each host within timeout; it returns the rows by
// host and the failed hosts' errors, one a line.
func (s *realSite) pollWithBudget(budget int64, timeout time.Duration) (map[string][]loaddata.Row, string) {
	s.t.Helper()
	sc, err := remote.LoadSSHConfig(filepath.Join(s.home, ".ssh", "config"), "")
	if err != nil {
		s.t.Fatal(err)
	}
	client := &remote.Client{SSHConfig: sc, HostKeys: remote.NewHostKeys(false), Keys: remote.NewKeys(""), Home: s.home,
		Timeout: timeout, Budget: remote.NewBudget(budget)}
	defer client.Close()
	p := &Poller{Runner: client, Timeout: timeout}
	by := map[string][]loaddata.Row{}
	var failed strings.Builder
	for _, res := range p.Poll(context.Background(), s.hostList) {
		by[res.Host] = res.Rows
		if res.Status != hoststatus.OK {
			fmt.Fprintf(&failed, "%s: %s: %s\n", res.Host, res.Status, res.Error)
		}
	}
	return by, failed.String()
}
