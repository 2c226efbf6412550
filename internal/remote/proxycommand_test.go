package remote

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/sshdtest"
)

func TestExpandProxyCommand(t *testing.T) {
	tests := []struct {
		name    string
		target  Target
		command string
		want    string
	}{
		{"every token", Target{Alias: "gpu01", HostName: "10.0.0.1", Port: 22, User: "alice"},
			"nc %h %p # %r %n %%", "nc 10.0.0.1 22 # alice gpu01 %"},
		{"alias with user and port", Target{Alias: "bob@gpu01:2022", HostName: "gpu01.lab", Port: 2022, User: "bob"},
			"ssh -W %h:%p -l %r gw-%n", "ssh -W gpu01.lab:2022 -l bob gw-gpu01"},
		{"escaped percent is not a token", Target{Alias: "a", HostName: "h", Port: 1, User: "u"},
			"printf '%%h%%%h'", "printf '%h%h'"},
		{"no tokens", Target{Alias: "a", HostName: "h", Port: 1, User: "u"},
			"/usr/local/bin/lab-proxy", "/usr/local/bin/lab-proxy"},
	}
	for _, tt := range tests {
		tt.target.ProxyCommand = tt.command
		if err := checkProxyTokens(tt.command); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if got := expandProxyCommand(tt.target); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestCheckProxyTokens(t *testing.T) {
	tests := []struct{ command, err string }{
		{"nc %h %p", ""},
		{"nc %h %P", "unknown token %P"},
		{"ssh -W %h:%p %C", "unknown token %C"},
		{"echo 100%", "a lone %"},
		{"echo 100%%", ""},
	}
	for _, tt := range tests {
		err := checkProxyTokens(tt.command)
		if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%q: got %v, want %q", tt.command, err, tt.err)
		}
	}
}

// The command's stdin and stdout are the connection; it runs through $SHELL
// with exec, as OpenSSH runs it.
func TestProxyConnTransport(t *testing.T) {
	dir := t.TempDir()
	shell := writeFile(t, dir, "shell", "#!/bin/sh\nprintf '%s\\n' \"$@\" > "+dir+"/args\nexec /bin/sh \"$@\"\n")
	os.Chmod(shell, 0o755)
	t.Setenv("SHELL", shell)
	p, err := startProxyCommand("cat")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Write([]byte("SSH-2.0-hello\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 15)
	if _, err := io.ReadFull(p, buf); err != nil || string(buf) != "SSH-2.0-hello\r\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if string(args) != "-c\nexec cat\n" {
		t.Errorf("$SHELL got %q, want -c, exec cat", args)
	}
	pgid := p.cmd.Process.Pid
	p.Close()
	sshdtest.WaitGroupGone(t, pgid)
}

// A proxy that fails at once: the host's error is its exit status and the
// first line of its stderr, and the host is unreachable.
func TestProxyConnFailsAtOnce(t *testing.T) {
	p, err := startProxyCommand(`sh -c 'echo "nc: connect to gpu01 port 22 (tcp) failed: Connection refused" >&2; echo second line >&2; exit 3'`)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Read(make([]byte, 10))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v (%T), want an *Error", err, err)
	}
	want := "ProxyCommand sh exited with status 3: nc: connect to gpu01 port 22 (tcp) failed: Connection refused"
	if e.Status != hoststatus.Unreachable || e.Msg != want {
		t.Errorf("got %s %q, want unreachable %q", e.Status, e.Msg, want)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("%v is not io.EOF any more", err)
	}
}

// A proxy that forks and hangs: Close kills its whole process group.
func TestProxyConnCloseKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	p, err := startProxyCommand(`sh -c 'sleep 600 & echo $$ > ` + pidFile + `; sleep 601'`)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pgid := p.cmd.Process.Pid
	waitFor(t, "the proxy to write its pid", func() bool {
		b, _ := os.ReadFile(pidFile)
		return strings.TrimSpace(string(b)) != ""
	})
	if got := sshdtest.GroupMembers(pgid); len(got) < 2 {
		t.Fatalf("the proxy's group %d has %v, want the shell and its sleeps", pgid, got)
	}
	p.Close()
	sshdtest.WaitGroupGone(t, pgid)
}

// A proxy that floods its stderr is not blocked, and only the cap is kept.
func TestProxyConnStderrBounded(t *testing.T) {
	p, err := startProxyCommand(`sh -c 'head -c 3000000 /dev/zero | tr "\0" x >&2; exit 1'`)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Read(make([]byte, 10))
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "exited with status 1: xxx") || len(e.Msg) > 300 {
		t.Errorf("got %v", err)
	}
	if n := len(p.stderr.String()); n != maxProxyStderr {
		t.Errorf("kept %d bytes of stderr, want %d", n, maxProxyStderr)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A proxy that says something and then waits (for a login, say): when the
// deadline closes the connection, the host's message is a timeout that
// carries what the proxy said.
func TestProxyConnCutOffByDeadline(t *testing.T) {
	p, err := startProxyCommand(`sh -c 'echo "Please visit https://login.example/device to authenticate" >&2; exec sleep 600'`)
	if err != nil {
		t.Fatal(err)
	}
	p.deadlineMsg = "no answer within 6s (while SSH handshake with gpu01:22 through ProxyCommand sh)"
	waitFor(t, "the proxy to speak", func() bool { return p.said() != "" })
	read := make(chan error, 1)
	go func() {
		_, err := p.Read(make([]byte, 10))
		read <- err
	}()
	p.Close() // as the deadline's context.AfterFunc does
	err = <-read
	var e *Error
	want := "no answer within 6s (while SSH handshake with gpu01:22 through ProxyCommand sh); the proxy said: Please visit https://login.example/device to authenticate"
	if !errors.As(err, &e) || e.Status != hoststatus.Timeout || e.Msg != want {
		t.Errorf("got %v, want timeout %q", err, want)
	}
}
