// Package remote runs one command on a GPU host over one SSH connection, the
// way a careful OpenSSH user would: the host resolved through ~/.ssh/config,
// its key checked against known_hosts, keys from files and ssh-agent, an
// optional ProxyJump, and a single deadline that covers the dial, the
// handshake and the command.
package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// Error is a host's failure in plain words.
type Error struct {
	Status hoststatus.Status
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Client connects to hosts. One Client serves a whole run, concurrently.
type Client struct {
	SSHConfig *SSHConfig
	HostKeys  *HostKeys
	Keys      *Keys
	// User and KeyFiles come from config.ini and win over ssh_config.
	User     string
	KeyFiles []string
	// KnownHosts from config.ini replaces UserKnownHostsFile.
	KnownHosts []string
	Home       string
	// Timeout is the per-host deadline, for messages only.
	Timeout time.Duration
	// Budget bounds the answers held at once across all hosts (nil: no
	// bound beyond each host's MaxOutput).
	Budget *Budget

	mu    sync.Mutex
	jumps map[string]*jump
}

type jump struct {
	ready  chan struct{}
	client *ssh.Client
	err    error
	at     time.Time     // when the dial ended
	dead   chan struct{} // closed when client's connection is gone
}

// stale says whether a finished jump dial should be made again: its
// connection is gone (live mode keeps a Client for days), or it failed
// longer than jumpTimeout ago (within one run, a failure is shared).
func (j *jump) stale() bool {
	select {
	case <-j.ready:
	default:
		return false
	}
	if j.err != nil {
		return time.Since(j.at) > jumpTimeout
	}
	select {
	case <-j.dead:
		return true
	default:
		return false
	}
}

// Close ends shared jump-host connections and the agent connection.
func (c *Client) Close() {
	c.mu.Lock()
	for _, j := range c.jumps {
		select {
		case <-j.ready:
			if j.client != nil {
				j.client.Close()
			}
		default:
		}
	}
	c.mu.Unlock()
	if c.Keys != nil {
		c.Keys.Close()
	}
}

// Run resolves alias, connects, runs command with stdin and returns its
// standard output. ctx's deadline covers everything; when it passes, the
// connection is closed and the error is hoststatus.Timeout, naming the phase.
func (c *Client) Run(ctx context.Context, alias, command string, stdin []byte) ([]byte, error) {
	k, err := c.connect(ctx, alias, false)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	return k.Run(ctx, command, stdin)
}

// Conn is one host's SSH connection, kept open for many commands (live
// mode); each Run opens a session of its own.
type Conn struct {
	c      *Client
	t      Target
	conn   net.Conn
	client *ssh.Client
	dead   chan struct{} // closed once the connection is gone
}

// Connect resolves alias, dials it and completes the SSH handshake (host
// key checked, as for Run) under ctx's deadline.
func (c *Client) Connect(ctx context.Context, alias string) (*Conn, error) {
	return c.connect(ctx, alias, true)
}

// connect is Connect; watch says whether Alive will be asked (a goroutine
// a connection, which one command on it does not need).
func (c *Client) connect(ctx context.Context, alias string, watch bool) (*Conn, error) {
	t, err := c.SSHConfig.Resolve(alias)
	if err != nil {
		return nil, &Error{Status: hoststatus.Error, Msg: err.Error()}
	}
	if c.User != "" && !strings.Contains(alias, "@") {
		t.User = c.User
	}
	conn, route, err := c.dial(ctx, t)
	if err != nil {
		return nil, err
	}
	// Closing the connection is the one thing that unblocks every phase of
	// x/crypto/ssh (Timeout covers only the TCP connect, and a channel over a
	// jump host takes no deadline).
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	client, err := c.handshake(conn, t)
	stopped := stop()
	if err == nil && !stopped {
		// the deadline passed as the handshake ended: the connection is closed
		client.Close()
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, c.classify(ctx, "SSH handshake with "+t.Addr()+route, err, t)
	}
	k := &Conn{c: c, t: t, conn: conn, client: client, dead: make(chan struct{})}
	if watch {
		go func() {
			client.Wait()
			close(k.dead)
		}()
	}
	return k, nil
}

// Alive reports whether the connection is still open, as far as is known
// without a round trip.
func (k *Conn) Alive() bool {
	select {
	case <-k.dead:
		return false
	default:
		return true
	}
}

// Close closes the connection.
func (k *Conn) Close() {
	k.client.Close()
	k.conn.Close()
}

// Run opens a session, runs command with stdin and returns its standard
// output. When ctx's deadline passes (or the host sends more than it may),
// the whole connection is closed: sessions take no context.
func (k *Conn) Run(ctx context.Context, command string, stdin []byte) ([]byte, error) {
	out, _, err := k.run(ctx, command, stdin)
	return out, err
}

// run is Run that also says whether the host opened a session: a kept
// connection that died unseen fails before that.
func (k *Conn) run(ctx context.Context, command string, stdin []byte) (out []byte, opened bool, err error) {
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	defer stop()
	sess, err := k.client.NewSession()
	if err != nil {
		return nil, false, k.c.classify(ctx, "opening a session", err, k.t)
	}
	defer sess.Close()
	out, err = k.c.runCommand(ctx, sess, k.conn, command, stdin, k.t)
	return out, true, err
}

// runCommand runs command in sess and returns its standard output, cut off
// the moment the host sends more than it may.
func (c *Client) runCommand(ctx context.Context, sess *ssh.Session, conn net.Conn, command string, stdin []byte, t Target) ([]byte, error) {
	cutOff := func() { conn.Close() }
	acct := newAccount(c.Budget, cutOff)
	defer acct.release()
	stdout := newCapture(MaxOutput, "output", acct)
	stderr := newCapture(maxStderr, "error output", acct)
	err := runCopying(sess, command, stdin, stdout, stderr)
	for _, stream := range []*capture{stdout, stderr} {
		if e := stream.failed(); e != nil {
			return nil, e
		}
	}
	if ctx.Err() != nil {
		return stdout.bytes(), c.classify(ctx, "running the probe", ctx.Err(), t)
	}
	var exitErr *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return stdout.bytes(), nil
	case errors.As(err, &exitErr):
		return stdout.bytes(), exitError(exitErr.ExitStatus(), stdout.bytes(), stderr.bytes())
	case errors.As(err, &missing), errors.Is(err, io.EOF):
		return stdout.bytes(), &Error{Status: hoststatus.Error, Msg: "the connection closed before the output was complete"}
	}
	return stdout.bytes(), c.classify(ctx, "running the probe", err, t)
}

// copyBuffers are the buffers that carry a session's output into its
// captures. Left to itself, x/crypto/ssh copies each stream with io.Copy,
// which makes a 32 KiB buffer per stream and session: in live mode, 64 MB
// of garbage per round of 1,000 hosts, and a sixth of fetch's CPU spent
// collecting it. 8 KiB each: a whole answer takes a few reads, and with
// 1,000 hosts at once the buffers in use stay small.
var copyBuffers = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

const copyBufferSize = 8 << 10

// copyInto fills dst from src until src ends or fails. A copy cut short is
// the capture cutting the host off, or the connection failing: Wait says so.
func copyInto(dst *capture, src io.Reader) {
	buf := copyBuffers.Get().(*[copyBufferSize]byte)
	defer copyBuffers.Put(buf)
	io.CopyBuffer(dst, src, buf[:])
}

// runCopying is sess.Run(command) with stdin written straight to the
// channel and stdout and stderr filled through pooled buffers. The
// captures' Write still sees every byte (they have no ReadFrom, and a
// channel has no WriteTo), so their caps hold. (Given an io.Reader as
// Stdin, x/crypto/ssh would start two goroutines and a pipe and make a
// 32 KiB buffer to copy it: 0.3 GB of garbage at 10,000 hosts.)
func runCopying(sess *ssh.Session, command string, stdin []byte, stdout, stderr *capture) error {
	inPipe, err := sess.StdinPipe()
	if err != nil {
		return err
	}
	outPipe, err := sess.StdoutPipe()
	if err != nil {
		return err
	}
	errPipe, err := sess.StderrPipe()
	if err != nil {
		return err
	}
	if err := sess.Start(command); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// a write cut short is the connection failing: Wait says so
		if _, err := inPipe.Write(stdin); err == nil {
			inPipe.Close()
		}
	})
	wg.Go(func() { copyInto(stderr, errPipe) })
	copyInto(stdout, outPipe)
	wg.Wait()
	return sess.Wait()
}

// exitError explains a remote command that failed: the first line it
// printed, or, when it printed nothing, the usual cause.
func exitError(status int, stdout, stderr []byte) *Error {
	msg := hosttext.FirstLine(strings.TrimSpace(string(stderr)))
	if msg == "" {
		msg = hosttext.FirstLine(strings.TrimSpace(string(stdout)))
	}
	if msg == "" {
		// sshd runs the command through the account's login shell; /bin/false
		// exits 1 without a word (nologin at least says so).
		return &Error{Status: hoststatus.Error, Msg: fmt.Sprintf(
			"remote command exited with status %d and printed nothing: is the account's login shell /bin/false? "+
				"the monitor account needs a shell such as /bin/sh", status)}
	}
	return &Error{Status: hoststatus.Error, Msg: fmt.Sprintf("remote command exited with status %d: %s", status, msg)}
}

func (c *Client) handshake(conn net.Conn, t Target) (*ssh.Client, error) {
	files := t.KnownHostsFiles
	if len(c.KnownHosts) > 0 {
		files = c.KnownHosts
	}
	if len(files) == 0 {
		files = []string{c.Home + "/.ssh/known_hosts"}
	}
	hkcb, algos, err := c.HostKeys.Config(t.KnownHostsName(), files)
	if err != nil {
		return nil, err
	}
	signers, notes := c.Keys.Signers(c.KeyFiles, t, c.Home)
	if len(signers) == 0 {
		msg := "no SSH key to offer: set key_filename, IdentityFile in ~/.ssh/config, or run ssh-agent"
		if len(notes) > 0 {
			msg += " (" + strings.Join(notes, "; ") + ")"
		}
		return nil, &Error{Status: hoststatus.Auth, Msg: msg}
	}
	cfg := &ssh.ClientConfig{
		User:              t.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signers...)},
		HostKeyCallback:   hkcb,
		HostKeyAlgorithms: algos,
		ClientVersion:     "SSH-2.0-gpumon-fetch",
	}
	cc, chans, reqs, err := ssh.NewClientConn(conn, t.KnownHostsName(), cfg)
	if err != nil {
		if strings.Contains(err.Error(), "unable to authenticate") {
			msg := fmt.Sprintf("no key accepted for user %s (offered %s)", t.User, describeKeys(signers))
			if len(notes) > 0 {
				msg += "; " + strings.Join(notes, "; ")
			}
			msg += fmt.Sprintf("; check that ~%s/.ssh/authorized_keys on the host holds the public key, that the account is not locked "+
				"(usermod -p '*' %s; sshd without PAM refuses keys to a locked account), and the host's sshd log", t.User, t.User)
			return nil, &Error{Status: hoststatus.Auth, Msg: msg}
		}
		return nil, err
	}
	return ssh.NewClient(cc, chans, reqs), nil
}

// jumpClient returns a connection to the last hop of a ProxyJump chain,
// shared by every target behind the same chain for the whole run.
func (c *Client) jumpClient(ctx context.Context, hops []string) (*ssh.Client, error) {
	key := strings.Join(hops, ",")
	c.mu.Lock()
	if c.jumps == nil {
		c.jumps = map[string]*jump{}
	}
	j, ok := c.jumps[key]
	if ok && j.stale() {
		if j.client != nil {
			j.client.Close()
		}
		ok = false
	}
	if !ok {
		j = &jump{ready: make(chan struct{}), dead: make(chan struct{})}
		c.jumps[key] = j
		c.mu.Unlock()
		j.client, j.err = c.dialChain(hops)
		j.at = time.Now()
		if j.client != nil {
			go func() {
				j.client.Wait()
				close(j.dead)
			}()
		}
		close(j.ready)
	} else {
		c.mu.Unlock()
	}
	select {
	case <-j.ready:
	case <-ctx.Done():
		return nil, &Error{Status: hoststatus.Timeout, Msg: fmt.Sprintf("no answer from jump host %s in time", hops[len(hops)-1])}
	}
	if j.err != nil {
		return nil, &Error{Status: statusOf(j.err), Msg: fmt.Sprintf("jump host %s: %v", hops[len(hops)-1], j.err)}
	}
	return j.client, nil
}

// jumpTimeout bounds connecting to a jump host; it outlives any one target's
// deadline because every target behind it shares it.
const jumpTimeout = 30 * time.Second

func (c *Client) dialChain(hops []string) (*ssh.Client, error) {
	var prev *ssh.Client
	for _, hop := range hops {
		t, err := c.SSHConfig.Resolve(hop)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), jumpTimeout)
		var conn net.Conn
		if prev == nil {
			conn, err = c.dialHop(ctx, t)
		} else {
			conn, err = prev.DialContext(ctx, "tcp", t.Addr())
		}
		if err != nil {
			err = c.classify(ctx, "connecting to "+t.Addr(), err, t) // before cancel: ctx.Err() means a timeout
			cancel()
			closeClient(prev)
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		client, err := c.handshake(conn, t)
		stop()
		if err != nil {
			conn.Close()
			err = c.classify(ctx, "SSH handshake with "+t.Addr(), err, t)
			cancel()
			closeClient(prev)
			return nil, err
		}
		cancel()
		prev = client
	}
	return prev, nil
}

// closeClient closes an earlier hop of a chain that failed further on: its
// connection (and its ProxyCommand) would otherwise outlive the run.
func closeClient(c *ssh.Client) {
	if c != nil {
		c.Close()
	}
}

func (c *Client) timeoutText() string {
	if c.Timeout <= 0 {
		return "the timeout"
	}
	return c.Timeout.String()
}

func statusOf(err error) hoststatus.Status {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return hoststatus.Error
}

// classify turns an error into a host status and a sentence.
func (c *Client) classify(ctx context.Context, phase string, err error, t Target) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var hk *HostKeyError
	if errors.As(err, &hk) {
		hk.Alias = t.Alias
		hk.Indirect = len(t.ProxyJump) > 0 || t.ProxyCommand != "" || t.HostKeyAlias != ""
		return &Error{Status: hoststatus.HostKey, Msg: hk.Error()}
	}
	if ctx.Err() != nil {
		return &Error{Status: hoststatus.Timeout, Msg: fmt.Sprintf("no answer within %s (while %s)", c.timeoutText(), phase)}
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return &Error{Status: hoststatus.Unreachable, Msg: fmt.Sprintf("host name %s not found", t.HostName)}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &Error{Status: hoststatus.Unreachable, Msg: fmt.Sprintf("connection refused by %s (is sshd running?)", t.Addr())}
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return &Error{Status: hoststatus.Unreachable, Msg: fmt.Sprintf("no route to %s", t.Addr())}
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		// the address once: the phase names it too
		during := strings.Replace(strings.TrimPrefix(phase, "the "), " with "+t.Addr(), "", 1)
		msg := fmt.Sprintf("connection closed by %s during %s", t.Addr(), during)
		if strings.HasPrefix(during, "SSH handshake") {
			msg += " (the host's sshd log says why)"
		}
		return &Error{Status: hoststatus.Error, Msg: msg}
	}
	msg := strings.TrimPrefix(err.Error(), "ssh: ")
	if strings.Contains(msg, "jump") || strings.HasPrefix(phase, "connecting") {
		return &Error{Status: hoststatus.Unreachable, Msg: fmt.Sprintf("%s: %s", phase, msg)}
	}
	return &Error{Status: hoststatus.Error, Msg: fmt.Sprintf("%s: %s", phase, msg)}
}

// RunLocal runs command with stdin on this machine, for the host named
// "local": same script, no SSH. The whole process group is killed at the
// deadline so a wedged nvidia-smi does not outlive the run.
func RunLocal(ctx context.Context, command string, stdin []byte) ([]byte, error) {
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var pgid atomic.Int64
	cutOff := func() {
		if p := pgid.Load(); p > 0 {
			syscall.Kill(-int(p), syscall.SIGKILL)
		}
	}
	acct := newAccount(nil, cutOff)
	stdout := newCapture(MaxOutput, "output", acct)
	stderr := newCapture(maxStderr, "error output", acct)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, &Error{Status: hoststatus.Error, Msg: err.Error()}
	}
	pgid.Store(int64(cmd.Process.Pid))
	stop := context.AfterFunc(ctx, cutOff)
	defer stop()
	err := cmd.Wait()
	pgid.Store(0) // reaped: the group id may be anyone's now
	for _, stream := range []*capture{stdout, stderr} {
		if e := stream.failed(); e != nil {
			return nil, e
		}
	}
	if ctx.Err() != nil {
		return stdout.bytes(), &Error{Status: hoststatus.Timeout, Msg: "no answer within the timeout (while running the probe locally)"}
	}
	if err != nil {
		msg := hosttext.FirstLine(strings.TrimSpace(stderr.String()))
		return stdout.bytes(), &Error{Status: hoststatus.Error, Msg: fmt.Sprintf("local probe failed: %v: %s", err, msg)}
	}
	return stdout.bytes(), nil
}

// HomeDir is $HOME, for ~ in paths and ssh's default files.
func HomeDir() string {
	h, _ := os.UserHomeDir()
	return h
}
