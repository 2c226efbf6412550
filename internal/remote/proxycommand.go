package remote

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// proxyTokens are the tokens ssh_config(5) allows in ProxyCommand.
const proxyTokens = "hnpr%"

// checkProxyTokens refuses what ssh refuses: a token ProxyCommand does not
// take, or a lone % at the end.
func checkProxyTokens(command string) error {
	for i := 0; i < len(command); i++ {
		if command[i] != '%' {
			continue
		}
		if i+1 == len(command) {
			return errors.New("a lone % at the end (write %% for a percent sign)")
		}
		i++
		if !strings.ContainsRune(proxyTokens, rune(command[i])) {
			return fmt.Errorf("unknown token %%%c (ProxyCommand takes %%h %%p %%r %%n and %%%%)", command[i])
		}
	}
	return nil
}

// expandProxyCommand fills in ProxyCommand's tokens for t: %h the host name
// to reach (HostName), %p the port, %r the remote user, %n the host as named
// in the host list (without user@ and :port), %% a percent sign.
func expandProxyCommand(t Target) string {
	_, name, _ := splitAlias(t.Alias)
	return expandTokens(t.ProxyCommand, map[byte]string{
		'h': t.HostName, 'p': strconv.Itoa(t.Port), 'r': t.User, 'n': name,
	})
}

// proxyProgram is the command's first word, to name it in messages without
// the rest of the line (paths, options, perhaps a token), since host errors
// end up on the status page.
func proxyProgram(command string) string {
	f := strings.Fields(command)
	if len(f) == 0 {
		return "ProxyCommand"
	}
	return "ProxyCommand " + f[0]
}

// maxProxyStderr bounds what is kept of the proxy's stderr.
const maxProxyStderr = 64 << 10

// proxyExitGrace is how long a connection whose proxy closed its end waits
// for the proxy to exit, so that its exit status and stderr can be told.
const proxyExitGrace = 2 * time.Second

// proxyConn is a connection through a ProxyCommand: what is written goes to
// its stdin, what is read comes from its stdout. It runs in a process group
// of its own, killed whole by Close: a proxy that forks (a shell script, ssh
// -W with a ControlMaster) leaves nothing behind.
type proxyConn struct {
	cmd  *exec.Cmd
	name string // for messages: "ProxyCommand nc"
	// deadlineMsg says what a deadline cut short, for cutOff; "" says nothing.
	deadlineMsg string
	toProxy     *os.File // its stdin
	server      *os.File // its stdout
	stderr      *cappedBuffer

	exited  chan struct{} // closed once cmd.Wait returned
	waitErr error

	closing   atomic.Bool
	closeOnce sync.Once
}

// startProxyCommand runs command as OpenSSH does: "exec command" through
// $SHELL (/bin/sh when unset), so that no shell lingers between us and it.
func startProxyCommand(command string) (*proxyConn, error) {
	shell := os.Getenv("SHELL")
	if shell == "" {
		shell = "/bin/sh"
	}
	p := &proxyConn{name: proxyProgram(command), stderr: &cappedBuffer{max: maxProxyStderr}, exited: make(chan struct{})}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	p.cmd = exec.Command(shell, "-c", "exec "+command)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The group is killed before Wait; this only bounds a stderr held open
	// by a process that left the group.
	p.cmd.WaitDelay = time.Second
	err = p.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("%s: cannot start it with %s: %v", p.name, shell, err)
	}
	p.toProxy, p.server = inW, outR
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *proxyConn) Read(b []byte) (int, error) {
	n, err := p.server.Read(b)
	return n, p.explain(err)
}

func (p *proxyConn) Write(b []byte) (int, error) {
	n, err := p.toProxy.Write(b)
	return n, p.explain(err)
}

// explain puts the proxy's own words on the errors that end the connection.
func (p *proxyConn) explain(err error) error {
	switch {
	case err == nil:
		return nil
	case p.closing.Load():
		return p.cutOff(err)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.EPIPE):
		return p.ended(err)
	}
	return err
}

// ended explains the proxy's closing its end: its exit status and the first
// line of its stderr, when it failed. A proxy that exited cleanly and said
// nothing leaves err as it is (the server hung up).
func (p *proxyConn) ended(err error) error {
	select {
	case <-p.exited:
	case <-time.After(proxyExitGrace):
		return err
	}
	if p.closing.Load() { // the deadline came meanwhile: that is the news
		return p.cutOff(err)
	}
	said := p.said()
	var exit *exec.ExitError
	switch {
	case errors.As(p.waitErr, &exit) && said != "":
		return &proxyError{status: hoststatus.Unreachable, msg: fmt.Sprintf("%s exited with status %d: %s", p.name, exit.ExitCode(), said), cause: err}
	case errors.As(p.waitErr, &exit):
		return &proxyError{status: hoststatus.Unreachable, msg: fmt.Sprintf("%s exited with status %d", p.name, exit.ExitCode()), cause: err}
	case said != "":
		return &proxyError{status: hoststatus.Unreachable, msg: fmt.Sprintf("%s ended the connection: %s", p.name, said), cause: err}
	}
	return err
}

// cutOff explains a read or write that Close cut short: the deadline passed
// while the proxy had not connected. What it said by then often tells why: a
// login it waits for, a name it cannot resolve.
func (p *proxyConn) cutOff(err error) error {
	said := p.said()
	if said == "" || p.deadlineMsg == "" {
		return err
	}
	return &proxyError{status: hoststatus.Timeout, msg: p.deadlineMsg + "; the proxy said: " + said, cause: err}
}

func (p *proxyConn) said() string {
	return hosttext.FirstLine(strings.TrimSpace(p.stderr.String()))
}

// Close kills the proxy's process group and waits for the proxy to exit.
func (p *proxyConn) Close() error {
	p.closeOnce.Do(func() {
		p.closing.Store(true)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		// and the proxy itself, should it have left its group: Wait needs it
		_ = p.cmd.Process.Kill()
		p.toProxy.Close()
		p.server.Close()
		<-p.exited
	})
	return nil
}

// The addresses are zero, as on a connection through a jump host: known_hosts
// is searched by the target's name, and a zero address matches no line.
var zeroAddr = &net.TCPAddr{IP: net.IPv4zero}

func (p *proxyConn) LocalAddr() net.Addr  { return zeroAddr }
func (p *proxyConn) RemoteAddr() net.Addr { return zeroAddr }

func (p *proxyConn) SetDeadline(t time.Time) error {
	return errors.Join(p.server.SetReadDeadline(t), p.toProxy.SetWriteDeadline(t))
}
func (p *proxyConn) SetReadDeadline(t time.Time) error  { return p.server.SetReadDeadline(t) }
func (p *proxyConn) SetWriteDeadline(t time.Time) error { return p.toProxy.SetWriteDeadline(t) }

// proxyError is a failed proxy in its own words. It is also an *Error for
// the host's status and message, through x/crypto/ssh's wrapping, and still
// the io.EOF or broken pipe that ended the connection.
type proxyError struct {
	status hoststatus.Status
	msg    string
	cause  error
}

func (e *proxyError) Error() string { return e.msg }
func (e *proxyError) Unwrap() error { return e.cause }

func (e *proxyError) As(target any) bool {
	if t, ok := target.(**Error); ok {
		*t = &Error{Status: e.status, Msg: e.msg}
		return true
	}
	return false
}

// cappedBuffer keeps the first max bytes written and drops the rest while
// still taking them, so a chatty proxy never blocks on its stderr. It has no
// ReadFrom on purpose: io.Copy would use it and bypass the cap.
type cappedBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *cappedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
