// Package sshdtest runs Debian's real OpenSSH server (/usr/sbin/sshd) for
// tests, one sshd per 127.0.0.N address, with a fake nvidia-smi on the remote
// PATH that answers differently for each address, and helpers for users and
// processes owned by them.
//
// It is a normal package so that the tests of other packages can import it;
// nothing here is meant for production code. Everything needs root and
// /usr/sbin/sshd: call Require (Start does) so that a test skips on a
// developer machine without them and fails under CI=true.
//
// Typical use:
//
//	sshdtest.Require(t)
//	bin, data := sshdtest.TempDir(t), sshdtest.TempDir(t)
//	sshdtest.WriteFakeNvidiaSMI(t, bin, data)
//	signer, keyPath := sshdtest.NewUserKey(t, t.TempDir())
//	srv := sshdtest.Start(t, sshdtest.Options{Addr: "127.0.0.11",
//		AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}, FakeBin: bin})
//	sshdtest.SetHostOutput(t, data, srv.Host(), "gpu", "0, NVIDIA H100\n", 0)
package sshdtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/testenv"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// sshdPath is the server binary. An absolute path: sshd re-executes itself.
const sshdPath = "/usr/sbin/sshd"

// startTimeout bounds how long Start waits for sshd to listen.
const startTimeout = 10 * time.Second

// defaultHostKeyTypes are the host key types a server gets unless
// Options.HostKeyTypes says otherwise. Several on purpose: clients must cope
// with a server that has keys of types their known_hosts does not hold
// (Go issue 29286, see FIELD-NOTES).
var defaultHostKeyTypes = []string{"ed25519", "ecdsa", "rsa"}

// whyNoSSHD returns why a real sshd cannot run here, or "" when it can.
func whyNoSSHD() string {
	var why []string
	if os.Geteuid() != 0 {
		why = append(why, fmt.Sprintf("not running as root (euid %d)", os.Geteuid()))
	}
	if fi, err := os.Stat(sshdPath); err != nil || fi.IsDir() {
		why = append(why, sshdPath+" is missing (apt-get install openssh-server)")
	} else if _, err := user.Lookup("sshd"); err != nil {
		why = append(why, "privilege separation user sshd is missing (reinstall openssh-server)")
	}
	return strings.Join(why, "; ")
}

// Require skips the test, or fails it under CI (testenv.Need), when sshd or
// root is not available, saying why.
func Require(t testing.TB) {
	t.Helper()
	if why := whyNoSSHD(); why != "" {
		testenv.Need(t, "sshdtest: a real sshd is needed: "+why)
	}
}

// Options describe one sshd.
type Options struct {
	// Addr is the address to listen on, e.g. "127.0.0.11" (any 127.0.0.0/8
	// address works on Linux without setup). Default "127.0.0.1".
	Addr string
	// Port to listen on; 0 picks a free one. Set it to the Port() of a
	// stopped server to play "the same host, restarted".
	Port int
	// AuthorizedKeys are accepted for every user (one AuthorizedKeysFile,
	// readable by all users).
	AuthorizedKeys []ssh.PublicKey
	// FakeBin, when set, is put first on the remote PATH
	// (SetEnv PATH=FakeBin:/usr/bin:/bin). For logins as users other than
	// root it must be readable by them: use TempDir, not t.TempDir.
	FakeBin string
	// HostKeyTypes: any of "ed25519", "ecdsa", "rsa". Default
	// defaultHostKeyTypes. Ignored when HostKeysFrom is set.
	HostKeyTypes []string
	// HostKeysFrom, when set, gives this server the same host keys as that
	// one (a restart that keeps its keys). Leave nil for fresh keys, which is
	// what a "host key changed" test wants.
	HostKeysFrom *Server
	// Extra sshd_config lines, e.g. "LogLevel DEBUG1". sshd takes the first
	// value it reads for most keywords, so Extra lines are put before the
	// defaults here (they win); lines from the first "Match" on go last.
	Extra string
}

type hostKey struct {
	typ  string
	pem  []byte
	pub  ssh.PublicKey
	file string
}

// Server is a running sshd. Start registers its Stop with t.Cleanup.
type Server struct {
	t    testing.TB
	host string
	port int
	dir  string
	keys []hostKey
	cfg  string

	cmd     *exec.Cmd
	log     testenv.SyncBuffer
	done    chan struct{}
	waitErr error
	stop    sync.Once
	started time.Duration
}

// Start runs sshd with o and waits until it listens (at most startTimeout).
// The test fails with sshd's stderr if it does not come up; it skips or fails
// first (see Require) when sshd cannot run here. t.Cleanup stops it.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	return start(t, o, nil)
}

// StartMany starts one server per Options, as Start does, generating their
// host keys in parallel (RSA key generation is most of Start's time): for a
// fleet of many hosts.
func StartMany(t testing.TB, opts ...Options) []*Server {
	t.Helper()
	Require(t)
	keys := make([][]hostKey, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() { keys[i], errs[i] = hostKeysFor(o) })
	}
	wg.Wait()
	servers := make([]*Server, len(opts))
	for i, o := range opts {
		if errs[i] != nil {
			t.Fatalf("sshdtest: host keys for %s: %v", o.Addr, errs[i])
		}
		servers[i] = start(t, o, keys[i])
	}
	return servers
}

func start(t testing.TB, o Options, keys []hostKey) *Server {
	t.Helper()
	Require(t)
	if o.Addr == "" {
		o.Addr = "127.0.0.1"
	}
	ip := net.ParseIP(o.Addr)
	if ip == nil {
		t.Fatalf("sshdtest: Options.Addr %q is not an IP address", o.Addr)
	}
	host := ip.String()
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // privilege separation dir
		t.Fatalf("sshdtest: %v", err)
	}
	begin := time.Now()
	dir := TempDir(t) // world-readable: sshd reads authorized_keys as the user
	var err error
	if keys == nil {
		if keys, err = hostKeysFor(o); err != nil {
			t.Fatalf("sshdtest: host keys: %v", err)
		}
	}
	for i := range keys {
		keys[i].file = filepath.Join(dir, "ssh_host_"+keys[i].typ+"_key")
		if err := os.WriteFile(keys[i].file, keys[i].pem, 0o600); err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
	}
	var ak bytes.Buffer
	for _, k := range o.AuthorizedKeys {
		ak.Write(ssh.MarshalAuthorizedKey(k))
	}
	akFile := filepath.Join(dir, "authorized_keys")
	if err := writeFileMode(akFile, ak.Bytes(), 0o644); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}

	const attempts = 5
	for attempt := 1; ; attempt++ {
		port := o.Port
		if port == 0 {
			if port, err = freePort(host); err != nil {
				t.Fatalf("sshdtest: no free port on %s: %v", host, err)
			}
		}
		s := &Server{t: t, host: host, port: port, dir: dir, keys: keys, done: make(chan struct{})}
		s.cfg = filepath.Join(dir, "sshd_config")
		if err := os.WriteFile(s.cfg, []byte(s.config(o, akFile)), 0o644); err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
		err := s.run()
		if err == nil {
			s.started = time.Since(begin)
			t.Cleanup(s.Stop)
			return s
		}
		log := s.Log()
		// Another process took the port between freePort and sshd's bind.
		if o.Port == 0 && attempt < attempts && strings.Contains(log, "Address already in use") {
			continue
		}
		t.Fatalf("sshdtest: sshd on %s: %v\nconfig %s:\n%s\nsshd stderr:\n%s", s.Addr(), err, s.cfg, s.config(o, akFile), log)
	}
}

func (s *Server) config(o Options, akFile string) string {
	var b strings.Builder
	extra, match := splitExtra(o.Extra)
	if extra != "" {
		b.WriteString("# Options.Extra\n" + extra + "\n")
	}
	fmt.Fprintf(&b, "ListenAddress %s\n", net.JoinHostPort(s.host, strconv.Itoa(s.port)))
	for _, k := range s.keys {
		fmt.Fprintf(&b, "HostKey %s\n", k.file)
	}
	fmt.Fprintf(&b, "PidFile %s\n", filepath.Join(s.dir, "sshd.pid"))
	fmt.Fprintf(&b, "AuthorizedKeysFile %s\n", akFile)
	b.WriteString(`UsePAM no
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AcceptEnv none
MaxStartups 200:30:400
`)
	if o.FakeBin != "" {
		fmt.Fprintf(&b, "SetEnv PATH=%s:/usr/bin:/bin\n", o.FakeBin)
	}
	if match != "" {
		b.WriteString("# Options.Extra, Match blocks\n" + match + "\n")
	}
	return b.String()
}

// splitExtra splits sshd_config text at its first Match line.
func splitExtra(extra string) (head, match string) {
	lines := strings.Split(strings.TrimSpace(extra), "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && strings.EqualFold(f[0], "Match") {
			return strings.Join(lines[:i], "\n"), strings.Join(lines[i:], "\n")
		}
	}
	return strings.TrimSpace(extra), ""
}

func (s *Server) run() error {
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", s.cfg)
	cmd.Stdout = &s.log
	cmd.Stderr = &s.log
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Stray writers of our log pipe must not make Wait hang.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()

	listening := fmt.Sprintf("Server listening on %s port %d", s.host, s.port)
	begin := time.Now()
	deadline := begin.Add(startTimeout)
	for {
		if strings.Contains(s.log.String(), listening) {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("sshd exited before listening: %v", s.waitErr)
		default:
		}
		// With a quiet LogLevel there is no "Server listening" line: dial.
		if time.Since(begin) > 500*time.Millisecond {
			if c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
				c.Close()
				return nil
			}
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("sshd did not listen within %v", startTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stop kills sshd, every process of every session it served (the processes
// whose SSH_CONNECTION names this server, even when their session is gone),
// and waits for sshd to exit. The address and port are free again after.
// Safe to call more than once; Start's t.Cleanup calls it.
func (s *Server) Stop() {
	s.stop.Do(s.kill)
}

func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pid := s.cmd.Process.Pid
	victims := descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL) // its process group, sshd included
	_ = s.cmd.Process.Kill()
	for _, p := range victims {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	<-s.done
	// Sessions whose sshd parent is gone were reparented: find them by their
	// environment. Twice, in case one forked while we looked.
	for i := 0; i < 2; i++ {
		for _, p := range s.RemotePIDs() {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// Stopped reports whether sshd has exited.
func (s *Server) Stopped() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Addr is "HOST:PORT", e.g. "127.0.0.11:40123".
func (s *Server) Addr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

// Host is the listen address, e.g. "127.0.0.11".
func (s *Server) Host() string { return s.host }

// Port is the TCP port sshd listens on.
func (s *Server) Port() int { return s.port }

// StartupTime is how long Start took for this server (keys, config, listen).
func (s *Server) StartupTime() time.Duration { return s.started }

// HostKeys are the server's public host keys, in Options.HostKeyTypes order.
func (s *Server) HostKeys() []ssh.PublicKey {
	out := make([]ssh.PublicKey, len(s.keys))
	for i, k := range s.keys {
		out[i] = k.pub
	}
	return out
}

// HostKey returns the server's public host key of the given type ("ed25519",
// "ecdsa", "rsa"), or nil.
func (s *Server) HostKey(typ string) ssh.PublicKey {
	for _, k := range s.keys {
		if k.typ == typ {
			return k.pub
		}
	}
	return nil
}

// KnownHostsLines are known_hosts lines for this server ("[127.0.0.11]:PORT",
// or the bare address on port 22) for every host key, each ending in "\n".
func (s *Server) KnownHostsLines() string {
	return s.KnownHostsLinesFor(s.HostKeys()...)
}

// KnownHostsLinesFor is KnownHostsLines for some of the keys only (e.g. only
// the RSA key, as an old known_hosts would hold).
func (s *Server) KnownHostsLinesFor(keys ...ssh.PublicKey) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(s.Addr())}, k) + "\n")
	}
	return b.String()
}

// HostKeyCallback accepts exactly this server's host keys.
func (s *Server) HostKeyCallback() ssh.HostKeyCallback {
	keys := s.HostKeys()
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		for _, k := range keys {
			if bytes.Equal(k.Marshal(), key.Marshal()) {
				return nil
			}
		}
		return fmt.Errorf("sshdtest: host key %s %s is not one of %s's", key.Type(), ssh.FingerprintSHA256(key), s.Addr())
	}
}

// Dial connects as user with signer, checking the host key with
// HostKeyCallback; the client is closed at Cleanup. It fails the test on error.
func (s *Server) Dial(t testing.TB, user string, signer ssh.Signer) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: s.HostKeyCallback(),
		Timeout:         5 * time.Second,
	})
	if err != nil {
		t.Fatalf("sshdtest: ssh %s@%s: %v\nsshd log:\n%s", user, s.Addr(), err, s.Log())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Log is sshd's stderr so far (sshd -D -e logs there, its per-connection
// children too).
func (s *Server) Log() string { return s.log.String() }

// RemotePIDs lists the live processes started for sessions on this server:
// those whose SSH_CONNECTION names this server's address and port. Use it to
// check that nothing was left running on the "host" (closing an SSH session
// does not stop its remote command).
func (s *Server) RemotePIDs() []int {
	return sessionPIDs(s.host, strconv.Itoa(s.port))
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TempDir makes a temporary directory that every local user can read and
// traverse (t.TempDir's are 0700 below a 0700 parent, which users other than
// root cannot enter). Removed at Cleanup.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sshdtest-")
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	return dir
}

// writeFileMode writes data and sets mode regardless of the umask.
func writeFileMode(name string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(name, data, mode); err != nil {
		return err
	}
	return os.Chmod(name, mode)
}
