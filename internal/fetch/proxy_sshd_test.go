package fetch

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testProxyEnv makes this test binary a ProxyCommand, the way a lab's proxy
// (nc, ssh -W, a cloud CLI) is one: it connects to the address in the
// variable, records the tokens it was given and its pid, and relays its
// stdin and stdout. The names the hosts have in ~/.ssh/config do not
// resolve, so only the proxy can reach them.
const testProxyEnv = "GPUMON_TEST_PROXY"

func init() {
	if to := os.Getenv(testProxyEnv); to != "" {
		os.Exit(runTestProxy(to, os.Args[1:]))
	}
}

// runTestProxy: args are the record file, then the expanded tokens.
func runTestProxy(to string, args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "test proxy: no record file")
		return 2
	}
	record := args[0]
	os.WriteFile(record, []byte(strings.Join(args[1:], "\n")+"\n"), 0o644)
	os.WriteFile(record+".pid", []byte(strconv.Itoa(os.Getpid())), 0o644)
	conn, err := net.Dial("tcp", to)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test proxy:", err)
		return 1
	}
	go func() {
		io.Copy(conn, os.Stdin)
		conn.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(os.Stdout, conn)
	return 0
}

// proxySite is a realSite whose ~/.ssh/config reaches hosts by ProxyCommand.
type proxySite struct {
	*realSite
	testBin string
}

func newProxySite(t *testing.T) *proxySite {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &proxySite{realSite: newRealSite(t), testBin: bin}
}

// proxied names a host that only the test proxy reaches; its record file
// will hold the tokens the proxy was given.
func (s *proxySite) proxied(alias string, srv *sshdtest.Server, knownKeys ...ssh.PublicKey) (record string) {
	s.t.Helper()
	record = filepath.Join(s.dir, alias+".proxy")
	hostName := alias + ".proxied.invalid"
	fmt.Fprintf(&s.sshCfg, "Host %s\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n  ProxyCommand env %s=%s %s %s %%h %%p %%r %%n %%%%\n\n",
		alias, hostName, srv.Port(), loginUser, s.keyPath, testProxyEnv, srv.Addr(), s.testBin, record)
	if len(knownKeys) == 0 {
		knownKeys = srv.HostKeys()
	}
	for _, k := range knownKeys {
		s.known.WriteString(knownhosts.Line([]string{knownhosts.Normalize(net.JoinHostPort(hostName, strconv.Itoa(srv.Port())))}, k) + "\n")
	}
	s.servers[alias] = srv
	s.hostList = append(s.hostList, alias)
	return record
}

// direct adds a host by its address, with extra ssh_config lines.
func (s *proxySite) direct(alias string, srv *sshdtest.Server, extra string) {
	fmt.Fprintf(&s.sshCfg, "Host %s\n  %s\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n\n", alias, extra, srv.Host(), srv.Port(), loginUser, s.keyPath)
	s.known.WriteString(srv.KnownHostsLines())
	s.servers[alias] = srv
	s.hostList = append(s.hostList, alias)
}

// withProxyCommand adds a host whose ProxyCommand is command (%-tokens as is).
func (s *proxySite) withProxyCommand(alias, command string) {
	fmt.Fprintf(&s.sshCfg, "Host %s\n  HostName %s.proxied.invalid\n  User %s\n  IdentityFile %s\n  ProxyCommand %s\n\n", alias, alias, loginUser, s.keyPath, command)
	s.hostList = append(s.hostList, alias)
}

// Hosts reached only through ProxyCommand, in one run with the ways a proxy
// fails: the tokens it gets, a proxy that hangs, one that fails at once,
// "ProxyCommand none", and a host key checked through the proxy as directly.
func TestProxyCommandSSHD(t *testing.T) {
	s := newProxySite(t)
	srvs := sshdtest.StartMany(t,
		sshdtest.Options{Addr: "127.0.0.61", AuthorizedKeys: []ssh.PublicKey{s.key.PublicKey()}, FakeBin: s.bin},
		sshdtest.Options{Addr: "127.0.0.64", AuthorizedKeys: []ssh.PublicKey{s.key.PublicKey()}, FakeBin: s.bin},
		sshdtest.Options{Addr: "127.0.0.65", AuthorizedKeys: []ssh.PublicKey{s.key.PublicKey()}, FakeBin: s.bin},
	)
	record := s.proxied("gpu01", srvs[0])
	s.setGPUs("gpu01", realGPUs, "pid, gpu_uuid, process_name, used_gpu_memory [MiB]\n")

	hangPID := filepath.Join(s.dir, "hang.pid")
	s.withProxyCommand("gpu02", `sh -c 'sleep 600 & echo $$ > `+hangPID+`; echo "Open https://login.example/device to log in" >&2; sleep 601'`)
	s.withProxyCommand("gpu03", `sh -c 'echo "channel 0: open failed: connect failed: Name or service not known" >&2; exit 255'`)

	// "none" obtained first wins over the ProxyCommand of Host * below
	s.direct("gpu04", srvs[1], "ProxyCommand none")
	s.setGPUs("gpu04", realGPUs, "pid, gpu_uuid, process_name, used_gpu_memory [MiB]\n")

	// known_hosts holds another key under the name the proxy is asked for
	other := sshdtest.Start(t, sshdtest.Options{Addr: "127.0.0.66"})
	record5 := s.proxied("gpu05", srvs[2], other.HostKeys()...)

	// a proxied host whose key is not on record at all: the hint is ssh
	// itself, since ssh-keyscan cannot reach it
	fmt.Fprintf(&s.sshCfg, "Host gpu06\n  HostName gpu06.proxied.invalid\n  Port %d\n  User %s\n  IdentityFile %s\n  ProxyCommand env %s=%s %s %s %%h %%p %%r %%n %%%%\n\n",
		srvs[0].Port(), loginUser, s.keyPath, testProxyEnv, srvs[0].Addr(), s.testBin, filepath.Join(s.dir, "gpu06.proxy"))
	s.hostList = append(s.hostList, "gpu06")

	s.sshCfg.WriteString("Host *\n  ProxyCommand sh -c 'echo the catch-all proxy ran >&2; exit 9'\n")

	start := time.Now()
	by, stderr := s.fetch(s.writeFiles(""))
	took := time.Since(start)

	if r := by["gpu01"]; len(r) != 2 || r[0].HostStatus != hoststatus.OK {
		t.Errorf("gpu01 through the proxy: %+v\n%s", r, stderr)
	}
	got, _ := os.ReadFile(record)
	if want := fmt.Sprintf("gpu01.proxied.invalid\n%d\n%s\ngpu01\n%%\n", srvs[0].Port(), loginUser); string(got) != want {
		t.Errorf("the proxy got tokens %q, want %q", got, want)
	}
	wantStatus(t, by["gpu02"], hoststatus.Timeout, "no answer within 6s (while SSH handshake with gpu02.proxied.invalid:22 through ProxyCommand sh); the proxy said: Open https://login.example/device to log in")
	wantStatus(t, by["gpu03"], hoststatus.Unreachable, "ProxyCommand sh exited with status 255: channel 0: open failed: connect failed: Name or service not known")
	if r := by["gpu04"]; len(r) != 2 || r[0].HostStatus != hoststatus.OK {
		t.Errorf("gpu04 with ProxyCommand none: %+v\n%s", r, stderr)
	}
	wantStatus(t, by["gpu05"], hoststatus.HostKey, "HOST KEY CHANGED for [gpu05.proxied.invalid]:")
	wantStatus(t, by["gpu06"], hoststatus.HostKey, "then add it: ssh -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile="+filepath.Join(s.home, ".ssh", "known_hosts")+" gpu06 true")
	if _, err := os.Stat(record5); err != nil {
		t.Errorf("gpu05 was not reached through its proxy: %v", err)
	}
	if took > 30*time.Second {
		t.Errorf("the run took %v with a 6 s timeout: the hung proxy held it up", took)
	}

	// nothing of any proxy is left: the hung one's group, the working ones
	for _, pidFile := range []string{hangPID, record + ".pid", record5 + ".pid"} {
		b, err := os.ReadFile(pidFile)
		pgid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pgid == 0 {
			t.Errorf("%s: %q %v", pidFile, b, err)
			continue
		}
		sshdtest.WaitGroupGone(t, pgid)
	}
}

// A jump host reached by its own ProxyCommand, and the target behind it by
// ProxyJump: the jump's proxy lives as long as the run, then goes.
func TestProxyCommandJumpHostSSHD(t *testing.T) {
	s := newProxySite(t)
	srvs := sshdtest.StartMany(t,
		sshdtest.Options{Addr: "127.0.0.71", AuthorizedKeys: []ssh.PublicKey{s.key.PublicKey()}, FakeBin: s.bin, Extra: "LogLevel DEBUG1"},
		sshdtest.Options{Addr: "127.0.0.72", AuthorizedKeys: []ssh.PublicKey{s.key.PublicKey()}, FakeBin: s.bin},
	)
	record := s.proxied("bastion", srvs[0])
	s.direct("gpu01", srvs[1], "ProxyJump bastion")
	s.setGPUs("gpu01", realGPUs, "pid, gpu_uuid, process_name, used_gpu_memory [MiB]\n")
	s.hostList = []string{"gpu01"}

	by, stderr := s.fetch(s.writeFiles(""))
	if r := by["gpu01"]; len(r) != 2 || r[0].HostStatus != hoststatus.OK {
		t.Fatalf("through the proxied jump host: %+v\n%s", r, stderr)
	}
	if log := srvs[0].Log(); !strings.Contains(log, fmt.Sprintf("to %s port %d", srvs[1].Host(), srvs[1].Port())) {
		t.Errorf("the jump host did not forward to the target; its log:\n%s", log)
	}
	b, err := os.ReadFile(record + ".pid")
	pgid, _ := strconv.Atoi(string(b))
	if err != nil || pgid == 0 {
		t.Fatalf("the jump host's proxy left no pid: %v", err)
	}
	sshdtest.WaitGroupGone(t, pgid)
}
