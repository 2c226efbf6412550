package fetch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"golang.org/x/crypto/ssh"
)

// These tests run fetch against Debian's OpenSSH server on 127.0.0.x, reached
// through a ~/.ssh/config in a temporary HOME, as a user would set it up.
// Under CI=true they fail, never skip, when sshd cannot run.

const loginUser = "gpumon"

type realSite struct {
	t        *testing.T
	home     string
	key      ssh.Signer
	keyPath  string
	bin      string
	data     string
	sshCfg   strings.Builder
	known    strings.Builder
	dir      string
	servers  map[string]*sshdtest.Server
	hostList []string
	// keyTypes are the host key types of the servers add starts (nil:
	// sshdtest's default, three; one is quicker for many hosts)
	keyTypes []string
}

func newRealSite(t *testing.T) *realSite {
	t.Helper()
	sshdtest.Require(t)
	sshdtest.EnsureUser(t, loginUser)
	s := &realSite{t: t, servers: map[string]*sshdtest.Server{}}
	s.home = t.TempDir()
	t.Setenv("HOME", s.home)
	t.Setenv("SSH_AUTH_SOCK", "")
	os.MkdirAll(filepath.Join(s.home, ".ssh"), 0o700)
	s.key, s.keyPath = sshdtest.NewUserKey(t, t.TempDir())
	s.bin, s.data = sshdtest.TempDir(t), sshdtest.TempDir(t)
	sshdtest.WriteFakeNvidiaSMI(t, s.bin, s.data)
	s.dir = t.TempDir()
	return s
}

// add starts sshd for each name on its own address and records it in
// ~/.ssh/config and known_hosts.
func (s *realSite) add(names []string, addrs []string, extra string) {
	s.t.Helper()
	var opts []sshdtest.Options
	for _, a := range addrs {
		opts = append(opts, sshdtest.Options{Addr: a, AuthorizedKeys: []ssh.PublicKey{s.key.PublicKey()}, FakeBin: s.bin, Extra: extra, HostKeyTypes: s.keyTypes})
	}
	for i, srv := range sshdtest.StartMany(s.t, opts...) {
		name := names[i]
		s.servers[name] = srv
		s.hostList = append(s.hostList, name)
		fmt.Fprintf(&s.sshCfg, "Host %s\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n\n", name, srv.Host(), srv.Port(), loginUser, s.keyPath)
		s.known.WriteString(srv.KnownHostsLines())
	}
}

func (s *realSite) writeFiles(common string) string {
	s.t.Helper()
	os.WriteFile(filepath.Join(s.home, ".ssh", "config"), []byte(s.sshCfg.String()), 0o600)
	os.WriteFile(filepath.Join(s.home, ".ssh", "known_hosts"), []byte(s.known.String()), 0o600)
	ini := fmt.Sprintf("[common]\nhosts = %s\ntimeout = 6\n%s", strings.Join(s.hostList, ", "), common)
	path := filepath.Join(s.dir, "config.ini")
	os.WriteFile(path, []byte(ini), 0o644)
	return path
}

// pollOne polls the site's one host, gpu01, as fetch's cron run does
// (its config, SSH), with the Poller's test seams set by seams.
func (s *realSite) pollOne(ctx context.Context, seams func(*Poller)) Result {
	s.t.Helper()
	cfg, err := LoadConfig(s.writeFiles("user = " + loginUser + "\n"))
	if err != nil {
		s.t.Fatal(err)
	}
	client, err := newClient(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	defer client.Close()
	p := &Poller{Runner: client, Timeout: cfg.Timeout, ProcessUtil: cfg.ProcessUtil,
		KernelLogWindow: cfg.KernelLogWindow(cfg.PollInterval)}
	seams(p)
	return p.Poll(ctx, []string{"gpu01"})[0]
}

// fetch runs the command and returns the CSV's rows by host, and stderr.
func (s *realSite) fetch(configPath string) (map[string][]loaddata.Row, string) {
	s.t.Helper()
	out := filepath.Join(s.dir, "load_data.csv")
	var stderr bytes.Buffer
	if err := Main(context.Background(), []string{"-c", configPath, "-o", out, "-v"}, &stderr, &stderr); err != nil {
		s.t.Fatalf("fetch: %v\n%s", err, stderr.String())
	}
	rows, err := loaddata.ReadFile(out)
	if err != nil {
		s.t.Fatal(err)
	}
	by := map[string][]loaddata.Row{}
	for _, r := range rows {
		by[r.Host] = append(by[r.Host], r)
	}
	return by, stderr.String()
}

// setGPUs sets what the host's nvidia-smi prints for the probe's GPU
// and process queries; its pmon (the fake's "other") lists no process.
func (s *realSite) setGPUs(name string, gpus, apps string) {
	s.t.Helper()
	sshdtest.SetHostOutput(s.t, s.data, s.servers[name].Host(), "gpu", gpus, 0)
	sshdtest.SetHostOutput(s.t, s.data, s.servers[name].Host(), "apps", apps, 0)
	sshdtest.SetHostOutput(s.t, s.data, s.servers[name].Host(), "other", pmonHeader, 0)
}

// pmonHeader is what driver 580's `nvidia-smi pmon -c 1 -s u` prints
// first (internal/nvsmi/testdata/h100-580.159.04).
const pmonHeader = "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n" +
	"# Idx           #    C/G      %      %      %      %      %      %    name \n"

// realGPUs is what nvidia-smi prints for probe.GPUFields and
// nvsmi.HealthFields (the fake refuses a header of other fields).
const realGPUs = `index, uuid, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W], fan.speed [%], pstate, ecc.mode.current, ecc.errors.uncorrected.volatile.total, retired_pages.pending, remapped_rows.pending, remapped_rows.failure, clocks_event_reasons.active, clocks_throttle_reasons.active, gpu_recovery_action
0, GPU-real-0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 98, 41, 30000, 81559, 61, 512.00, 700.00, [N/A], P0, Enabled, 0, [N/A], No, No, 0x0000000000000000, 0x0000000000000000, None
1, GPU-real-1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0, 0, 4, 81559, 30, 70.00, 700.00, [N/A], P0, Enabled, 0, [N/A], No, No, 0x0000000000000000, 0x0000000000000000, None
`

// realAppsHeader is what nvidia-smi prints first for probe.AppFields.
const realAppsHeader = "pid, gpu_uuid, used_gpu_memory [MiB]\n"

func wantStatus(t *testing.T, rows []loaddata.Row, status hoststatus.Status, msg string) {
	t.Helper()
	if len(rows) == 0 {
		t.Fatalf("no rows; want %s", status)
	}
	if rows[0].HostStatus != status || !strings.Contains(rows[0].HostError, msg) {
		t.Errorf("got %q %q, want %q containing %q", rows[0].HostStatus, rows[0].HostError, status, msg)
	}
}

// Real processes of two users on one host, a host without a driver, a host
// whose nvidia-smi hangs, a closed port and a refused key, in one run.
func TestRealSSHDFleet(t *testing.T) {
	s := newRealSite(t)
	sshdtest.EnsureUser(t, "alice")
	sshdtest.EnsureUser(t, "bob")
	s.add([]string{"gpu01", "gpu02", "gpu03", "gpu04"}, []string{"127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24"}, "")
	alice := sshdtest.StartProcessAs(t, "alice", "sleep", "600")
	bob := sshdtest.StartProcessAs(t, "bob", "sleep", "601")
	s.setGPUs("gpu01", realGPUs, fmt.Sprintf("%s%d, GPU-real-0, 20000\n%d, GPU-real-0, 10000\n%d, GPU-real-1, 4\n", realAppsHeader, alice, bob, alice))
	sshdtest.SetHostOutput(t, s.data, s.servers["gpu02"].Host(), "gpu",
		"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n", 9)
	sshdtest.SetHostHang(t, s.data, s.servers["gpu03"].Host())
	s.servers["gpu04"].Stop()
	// a host that knows another key than ours
	other, _ := sshdtest.NewUserKey(t, t.TempDir())
	srv5 := sshdtest.Start(t, sshdtest.Options{Addr: "127.0.0.25", AuthorizedKeys: []ssh.PublicKey{other.PublicKey()}, FakeBin: s.bin})
	s.servers["gpu05"], s.hostList = srv5, append(s.hostList, "gpu05")
	fmt.Fprintf(&s.sshCfg, "Host gpu05\n  HostName %s\n  Port %d\n  IdentityFile %s\n", srv5.Host(), srv5.Port(), s.keyPath)
	s.known.WriteString(srv5.KnownHostsLines())

	start := time.Now()
	by, stderr := s.fetch(s.writeFiles("user = " + loginUser + "\n"))
	took := time.Since(start)

	rows := by["gpu01"]
	if len(rows) != 3 {
		t.Fatalf("gpu01: %d rows, want 3: %+v", len(rows), rows)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[fmt.Sprintf("%d/%d", r.GPUIndex.Value, r.PID.Value)] = r.User + " " + r.Command
		if r.HostStatus != "ok" || !r.ProcessElapsedS.Valid {
			t.Errorf("row %+v", r)
		}
	}
	want := map[string]string{
		fmt.Sprintf("0/%d", alice): "alice sleep 600",
		fmt.Sprintf("0/%d", bob):   "bob sleep 601",
		fmt.Sprintf("1/%d", alice): "alice sleep 600",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("gpu01 %s: got %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	wantStatus(t, by["gpu02"], "driver", "driver not loaded")
	wantStatus(t, by["gpu03"], "timeout", "nvidia-smi")
	wantStatus(t, by["gpu04"], "unreachable", "connection refused")
	wantStatus(t, by["gpu05"], "auth", "no key accepted for user gpumon")
	if !strings.Contains(stderr, "5 hosts: 1 ok, 4 failed: gpu02 driver, gpu03 timeout, gpu04 unreachable, gpu05 auth") {
		t.Errorf("summary:\n%s", stderr)
	}
	// the hung host costs one timeout, not one per host
	if took > 30*time.Second {
		t.Errorf("run took %v with a 6 s timeout", took)
	}
	// `timeout` on the host ended the hung nvidia-smi: nothing of ours is left there
	for _, pid := range s.servers["gpu03"].RemotePIDs() {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(cmdline, []byte("sleep")) {
			t.Errorf("the hung nvidia-smi (pid %d) still runs on the host", pid)
		}
	}
}

// Keys from ssh-agent (the real one), no key file anywhere.
func TestRealSSHDAgent(t *testing.T) {
	s := newRealSite(t)
	s.add([]string{"gpu01"}, []string{"127.0.0.31"}, "")
	s.setGPUs("gpu01", realGPUs, realAppsHeader)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	agentCmd := exec.Command("ssh-agent", "-D", "-a", sock)
	if err := agentCmd.Start(); err != nil {
		t.Fatalf("ssh-agent: %v", err)
	}
	t.Cleanup(func() { agentCmd.Process.Kill(); agentCmd.Wait() })
	waitForSocket(t, sock)
	add := exec.Command("ssh-add", s.keyPath)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v\n%s", err, out)
	}
	// the config names no IdentityFile and HOME has no default key
	cfg := strings.ReplaceAll(s.sshCfg.String(), "  IdentityFile "+s.keyPath+"\n", "")
	s.sshCfg.Reset()
	s.sshCfg.WriteString(cfg)
	path := s.writeFiles("")
	t.Setenv("SSH_AUTH_SOCK", sock)
	by, stderr := s.fetch(path)
	if r := by["gpu01"]; len(r) != 2 || r[0].HostStatus != "ok" {
		t.Fatalf("through the agent: %+v\n%s", r, stderr)
	}
	t.Setenv("SSH_AUTH_SOCK", "")
	by, _ = s.fetch(path)
	wantStatus(t, by["gpu01"], "auth", "no SSH key to offer")
}

// waitForSocket waits for ssh-agent to create its socket: it does so before
// it serves, and -D keeps it in the foreground, so the file is the signal.
func waitForSocket(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("ssh-agent did not create %s", path)
}

// ProxyJump through a second sshd: the target is reached over the jump
// host's direct-tcpip channel, and both host keys are checked.
func TestRealSSHDProxyJump(t *testing.T) {
	s := newRealSite(t)
	s.add([]string{"bastion"}, []string{"127.0.0.41"}, "LogLevel DEBUG1")
	s.add([]string{"gpu01"}, []string{"127.0.0.42"}, "")
	s.setGPUs("gpu01", realGPUs, realAppsHeader)
	cfg := strings.Replace(s.sshCfg.String(), "Host gpu01\n", "Host gpu01\n  ProxyJump bastion\n", 1)
	s.sshCfg.Reset()
	s.sshCfg.WriteString(cfg)
	s.hostList = []string{"gpu01"}
	by, stderr := s.fetch(s.writeFiles(""))
	if r := by["gpu01"]; len(r) != 2 || r[0].HostStatus != "ok" {
		t.Fatalf("through the jump host: %+v\n%s", r, stderr)
	}
	target := s.servers["gpu01"]
	if log := s.servers["bastion"].Log(); !strings.Contains(log, fmt.Sprintf("to %s port %d", target.Host(), target.Port())) {
		t.Errorf("the jump host did not forward to the target; its log:\n%s", log)
	}
}

// Unknown host refused with its fingerprint; accept-new records it; a changed
// key is refused even under accept-new.
func TestRealSSHDHostKeys(t *testing.T) {
	s := newRealSite(t)
	s.add([]string{"gpu01"}, []string{"127.0.0.51"}, "")
	s.setGPUs("gpu01", realGPUs, realAppsHeader)
	srv := s.servers["gpu01"]
	s.known.Reset() // nothing known

	path := s.writeFiles("")
	by, _ := s.fetch(path)
	wantStatus(t, by["gpu01"], "hostkey", "is not in")
	if !strings.Contains(by["gpu01"][0].HostError, "SHA256:") {
		t.Errorf("no fingerprint in %q", by["gpu01"][0].HostError)
	}

	path = s.writeFiles("strict_host_key_checking = accept-new\n")
	by, _ = s.fetch(path)
	if by["gpu01"][0].HostStatus != "ok" {
		t.Fatalf("accept-new: %+v", by["gpu01"][0])
	}
	known, _ := os.ReadFile(filepath.Join(s.home, ".ssh", "known_hosts"))
	if !strings.Contains(string(known), fmt.Sprintf("[%s]:%d ", srv.Host(), srv.Port())) {
		t.Errorf("accept-new did not record the host:\n%s", known)
	}

	// the same address and port now answers with new keys
	port := srv.Port()
	srv.Stop()
	s.servers["gpu01"] = sshdtest.Start(t, sshdtest.Options{Addr: "127.0.0.51", Port: port, AuthorizedKeys: []ssh.PublicKey{s.key.PublicKey()}, FakeBin: s.bin})
	// keep the recorded known_hosts: write the ini only
	os.WriteFile(path, []byte(fmt.Sprintf("[common]\nhosts = gpu01\ntimeout = 6\nstrict_host_key_checking = accept-new\n")), 0o644)
	by, _ = s.fetch(path)
	wantStatus(t, by["gpu01"], "hostkey", "HOST KEY CHANGED")
	if !strings.Contains(by["gpu01"][0].HostError, "ssh-keygen -R") {
		t.Errorf("no hint in %q", by["gpu01"][0].HostError)
	}
}
