package sshdtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gpumon/gpumon/internal/sshdtest"
	"github.com/gpumon/gpumon/internal/testenv"
)

const gpuQuery = "nvidia-smi --query-gpu=index --format=csv"

// fleet is a fake nvidia-smi and a client key, shared by the servers of a test.
type fleet struct {
	bin, data string
	signer    ssh.Signer
	keyPath   string
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	sshdtest.Require(t)
	f := &fleet{bin: sshdtest.TempDir(t), data: sshdtest.TempDir(t)}
	sshdtest.WriteFakeNvidiaSMI(t, f.bin, f.data)
	f.signer, f.keyPath = sshdtest.NewUserKey(t, t.TempDir())
	return f
}

func (f *fleet) start(t *testing.T, addr string, mod func(*sshdtest.Options)) *sshdtest.Server {
	t.Helper()
	o := sshdtest.Options{Addr: addr, AuthorizedKeys: []ssh.PublicKey{f.signer.PublicKey()}, FakeBin: f.bin}
	if mod != nil {
		mod(&o)
	}
	s := sshdtest.Start(t, o)
	t.Logf("sshd on %s up in %v", s.Addr(), s.StartupTime())
	return s
}

// dial connects with cb as the host key check.
func dial(t *testing.T, addr, user string, signer ssh.Signer, cb ssh.HostKeyCallback, algos ...string) (*ssh.Client, error) {
	t.Helper()
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User:              user,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback:   cb,
		HostKeyAlgorithms: algos,
		Timeout:           5 * time.Second,
	})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// run runs cmd in a new session and returns stdout, stderr and exit status.
func run(t *testing.T, c *ssh.Client, cmd string) (stdout, stderr string, code int) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer sess.Close()
	var o, e bytes.Buffer
	sess.Stdout, sess.Stderr = &o, &e
	err = sess.Run(cmd)
	var exit *ssh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitStatus()
	default:
		t.Fatalf("run %q: %v", cmd, err)
	}
	return o.String(), e.String(), code
}

func knownHostsCallback(t *testing.T, lines string) ssh.HostKeyCallback {
	t.Helper()
	file := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(file)
	if err != nil {
		t.Fatal(err)
	}
	return cb
}

func TestTwoHostsAnswerTheirOwnOutput(t *testing.T) {
	f := newFleet(t)
	a := f.start(t, "127.0.0.11", nil)
	b := f.start(t, "127.0.0.12", nil)
	sshdtest.SetHostOutput(t, f.data, a.Host(), "gpu", "index\n0\n", 0)
	sshdtest.SetHostOutput(t, f.data, b.Addr(), "gpu", "index\n0\n1\n", 3) // a port is ignored

	// Host a: a fixed ed25519 key. Host b: known_hosts lines for all its keys.
	ca, err := dial(t, a.Addr(), "root", f.signer,
		ssh.FixedHostKey(a.HostKey("ed25519")), ssh.KeyAlgoED25519)
	if err != nil {
		t.Fatalf("dial %s: %v\n%s", a.Addr(), err, a.Log())
	}
	cb, err := dial(t, b.Addr(), "root", f.signer, knownHostsCallback(t, b.KnownHostsLines()))
	if err != nil {
		t.Fatalf("dial %s: %v\n%s", b.Addr(), err, b.Log())
	}

	for _, tc := range []struct {
		c    *ssh.Client
		cmd  string
		out  string
		code int
	}{
		{ca, gpuQuery, "index\n0\n", 0},
		{cb, gpuQuery, "index\n0\n1\n", 3},
		// Host dir exists but nothing prepared for this query.
		{cb, "nvidia-smi --query-compute-apps=pid --format=csv", "No devices were found\n", 6},
		// Not "echo $PATH": bash reads ~/.bashrc for ssh commands, and a
		// developer's may prepend to PATH; FakeBin still beats /usr/bin.
		{ca, "command -v nvidia-smi", f.bin + "/nvidia-smi\n", 0},
		{cb, "case :$PATH: in *:" + f.bin + ":/usr/bin:/bin:*) echo ok;; esac", "ok\n", 0},
	} {
		out, stderr, code := run(t, tc.c, tc.cmd)
		if out != tc.out || code != tc.code {
			t.Errorf("%s: %q: got %q exit %d (stderr %q), want %q exit %d",
				tc.c.RemoteAddr(), tc.cmd, out, code, stderr, tc.out, tc.code)
		}
	}
	if got, want := sshdtest.Calls(t, f.data, a.Host()), []string{"--query-gpu=index --format=csv"}; !slicesEqual(got, want) {
		t.Errorf("calls on a: %q, want %q", got, want)
	}
	if got := sshdtest.Calls(t, f.data, b.Host()); len(got) != 2 {
		t.Errorf("calls on b: %q, want 2", got)
	}

	// The same key file opens both hosts, and the servers are distinct.
	if a.Port() == 0 || a.Addr() == b.Addr() {
		t.Errorf("addresses %s %s", a.Addr(), b.Addr())
	}
	if !strings.Contains(a.Log(), "Accepted publickey for root") {
		t.Errorf("sshd log lacks the login:\n%s", a.Log())
	}
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}

// The script on its own, no sshd (runs without root too).
func TestFakeNvidiaSMIScript(t *testing.T) {
	bin, data := t.TempDir(), t.TempDir()
	sshdtest.WriteFakeNvidiaSMI(t, bin, data)
	sshdtest.SetHostOutput(t, data, "127.0.0.21", "apps", "pid, used_memory [MiB]\n42, 100 MiB\n", 0)
	sshdtest.SetHostOutput(t, data, "127.0.0.21", "gpu", "oops\n", 9)
	sshdtest.SetQueryHang(t, data, "127.0.0.22", "apps")
	for _, tc := range []struct {
		conn, arg, out string
		code           int
	}{
		{"10.0.0.1 5555 127.0.0.21 22", "--query-compute-apps=pid,used_memory", "pid, used_memory [MiB]\n42, 100 MiB\n", 0},
		{"10.0.0.1 5555 127.0.0.21 22", "--query-gpu=index", "oops\n", 9},
		{"10.0.0.1 5555 127.0.0.21 22", "-L", "No devices were found\n", 6},
		{"10.0.0.1 5555 127.0.0.99 22", "--query-gpu=index", "No devices were found\n", 6},
		{"10.0.0.1 5555 127.0.0.22 22", "--query-gpu=index", "No devices were found\n", 6},
		{"", "--query-gpu=index", "No devices were found\n", 6},
	} {
		cmd := exec.Command(filepath.Join(bin, "nvidia-smi"), tc.arg, "--format=csv")
		cmd.Env = []string{"PATH=/usr/bin:/bin", "SSH_CONNECTION=" + tc.conn}
		out, err := cmd.Output()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if string(out) != tc.out || code != tc.code {
			t.Errorf("%q %s: got %q exit %d, want %q exit %d", tc.conn, tc.arg, out, code, tc.out, tc.code)
		}
	}
	// The apps query hangs on .22.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "nvidia-smi"), "--query-compute-apps=pid")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SSH_CONNECTION=10.0.0.1 5555 127.0.0.22 22"}
	if out, err := cmd.Output(); ctx.Err() == nil || len(out) != 0 {
		t.Errorf("apps on .22 did not hang: %q %v", out, err)
	}
}

func TestHang(t *testing.T) {
	f := newFleet(t)
	s := f.start(t, "127.0.0.11", nil)
	sshdtest.SetHostHang(t, f.data, s.Host())
	c := s.Dial(t, "root", f.signer)

	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var out testenv.SyncBuffer
	sess.Stdout, sess.Stderr = &out, &out
	done := make(chan error, 1)
	begin := time.Now()
	go func() { done <- sess.Run(gpuQuery) }()
	// Wait until the fake has been called (it logs the call, then sleeps),
	// then give it a moment more to answer, which it must not.
	for len(sshdtest.Calls(t, f.data, s.Host())) == 0 {
		if time.Since(begin) > time.Minute {
			t.Fatalf("nvidia-smi was not called within a minute\n%s", s.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	select {
	case err := <-done:
		t.Fatalf("nvidia-smi returned on a hanging host after %v: %v, output %q", time.Since(begin), err, out.String())
	case <-ctx.Done():
	}
	sess.Close()
	if got := out.String(); got != "" {
		t.Errorf("hanging host wrote %q", got)
	}

	// Closing the session leaves the remote sleep running (FIELD-NOTES);
	// `timeout` on the remote side is the cure.
	if pids := s.RemotePIDs(); len(pids) == 0 {
		t.Errorf("expected the hung nvidia-smi still running on the host after closing its session")
	}
	beginTimeout := time.Now()
	stdout, _, code := run(t, c, "timeout 1 "+gpuQuery)
	// the fake sleeps an hour: a minute is proof that timeout cut it,
	// with room for a loaded machine (7 s seen with both cores busy)
	if code != 124 || stdout != "" || time.Since(beginTimeout) > time.Minute {
		t.Errorf("timeout 1 nvidia-smi: exit %d, output %q after %v", code, stdout, time.Since(beginTimeout))
	}

	// Stop cleans up what the sessions left.
	s.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.RemotePIDs()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if pids := s.RemotePIDs(); len(pids) > 0 {
		t.Errorf("processes of stopped server still running: %v", pids)
	}
	if !s.Stopped() {
		t.Errorf("Stopped() false after Stop")
	}
	s.Stop() // idempotent
}

func TestProcessesOfOtherUsers(t *testing.T) {
	f := newFleet(t)
	const user = "gpumt1" // at most 8 characters: ps prints longer names as uids
	sshdtest.EnsureUser(t, user)
	sshdtest.EnsureUser(t, user) // idempotent
	pid := sshdtest.StartProcessAs(t, user, "sleep", "600")

	s := f.start(t, "127.0.0.12", nil)
	sshdtest.SetHostOutput(t, f.data, s.Host(), "gpu", "index\n0\n", 0)
	root := s.Dial(t, "root", f.signer)
	out, stderr, code := run(t, root, "ps -o user= -p "+strconv.Itoa(pid))
	if strings.TrimSpace(out) != user || code != 0 {
		t.Errorf("ps -o user= -p %d: %q exit %d (%s), want %q", pid, out, code, stderr, user)
	}

	// The user itself can log in with a key (its account is not locked) and
	// reach the fake nvidia-smi.
	c := s.Dial(t, user, f.signer)
	out, stderr, code = run(t, c, "id -un; "+gpuQuery)
	if want := user + "\nindex\n0\n"; out != want || code != 0 {
		t.Errorf("as %s: %q exit %d (%s), want %q", user, out, code, stderr, want)
	}
}

func TestHostKeyChangedAndKept(t *testing.T) {
	f := newFleet(t)
	first := f.start(t, "127.0.0.13", nil)
	known := first.KnownHostsLines()
	if n := strings.Count(known, "\n"); n != 3 {
		t.Fatalf("known_hosts lines: %d, want 3:\n%s", n, known)
	}
	if !strings.HasPrefix(known, fmt.Sprintf("[127.0.0.13]:%d ", first.Port())) {
		t.Errorf("known_hosts line %q", known)
	}
	cb := knownHostsCallback(t, known)
	if _, err := dial(t, first.Addr(), "root", f.signer, cb); err != nil {
		t.Fatalf("dial first: %v", err)
	}
	first.Stop()

	// Same address and port, same keys: still known.
	kept := f.start(t, "127.0.0.13", func(o *sshdtest.Options) { o.Port, o.HostKeysFrom = first.Port(), first })
	if _, err := dial(t, kept.Addr(), "root", f.signer, cb); err != nil {
		t.Fatalf("dial restarted server with kept keys: %v", err)
	}
	kept.Stop()

	// Same address and port, new keys: a changed host key.
	changed := f.start(t, "127.0.0.13", func(o *sshdtest.Options) { o.Port = first.Port() })
	if changed.Addr() != first.Addr() {
		t.Fatalf("restarted on %s, want %s", changed.Addr(), first.Addr())
	}
	_, err := dial(t, changed.Addr(), "root", f.signer, cb)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		t.Fatalf("dial server with new keys: %v, want a knownhosts key mismatch", err)
	}
}

func TestOptions(t *testing.T) {
	f := newFleet(t)
	s := f.start(t, "127.0.0.14", func(o *sshdtest.Options) {
		o.HostKeyTypes = []string{"rsa"}
		o.Extra = "LogLevel DEBUG1\nMatch User nobody\n\tPermitTTY no"
	})
	if keys := s.HostKeys(); len(keys) != 1 || keys[0].Type() != ssh.KeyAlgoRSA {
		t.Errorf("host keys %v", keys)
	}
	s.Dial(t, "root", f.signer)
	if !strings.Contains(s.Log(), "debug1:") {
		t.Errorf("LogLevel DEBUG1 did not take:\n%s", s.Log())
	}

	// A key that is not authorized is refused.
	other, _ := sshdtest.NewUserKey(t, t.TempDir())
	if _, err := dial(t, s.Addr(), "root", other, s.HostKeyCallback()); err == nil {
		t.Errorf("unauthorized key accepted")
	}

	// NewUserKey writes an OpenSSH key, 0600, without clobbering.
	dir := t.TempDir()
	_, p1 := sshdtest.NewUserKey(t, dir)
	_, p2 := sshdtest.NewUserKey(t, dir)
	if p1 == p2 {
		t.Errorf("both keys at %s", p1)
	}
	fi, err := os.Stat(p1)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file %s: %v %v", p1, fi.Mode(), err)
	}
	if out, err := exec.Command("ssh-keygen", "-y", "-f", p1).CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "ssh-ed25519 ") {
		t.Errorf("ssh-keygen -y -f %s: %s %v", p1, out, err)
	}
}

// fatalTB records a Fatalf instead of failing the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartFailsWithLog(t *testing.T) {
	sshdtest.Require(t)
	ftb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sshdtest.Start(ftb, sshdtest.Options{Addr: "127.0.0.15", Extra: "NoSuchOption yes"})
	}()
	<-done
	if !strings.Contains(ftb.msg, "NoSuchOption") || !strings.Contains(ftb.msg, "Bad configuration option") {
		t.Errorf("Start did not fail with sshd's complaint; message:\n%s", ftb.msg)
	}
}

func TestStartMany(t *testing.T) {
	f := newFleet(t)
	var opts []sshdtest.Options
	for i := 31; i <= 38; i++ {
		opts = append(opts, sshdtest.Options{Addr: fmt.Sprintf("127.0.0.%d", i),
			AuthorizedKeys: []ssh.PublicKey{f.signer.PublicKey()}, FakeBin: f.bin})
	}
	begin := time.Now()
	servers := sshdtest.StartMany(t, opts...)
	t.Logf("%d servers up in %v", len(servers), time.Since(begin))
	for i, s := range servers {
		sshdtest.SetHostOutput(t, f.data, s.Host(), "gpu", fmt.Sprintf("index\n%d\n", i), 0)
	}
	for i, s := range servers {
		if s.Host() != opts[i].Addr {
			t.Fatalf("server %d on %s, want %s", i, s.Addr(), opts[i].Addr)
		}
		out, _, code := run(t, s.Dial(t, "root", f.signer), gpuQuery)
		if want := fmt.Sprintf("index\n%d\n", i); out != want || code != 0 {
			t.Errorf("%s: %q exit %d, want %q", s.Addr(), out, code, want)
		}
	}
}
