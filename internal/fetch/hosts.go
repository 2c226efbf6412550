package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/gpumon/gpumon/internal/hostrange"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// maxHostList bounds what hosts_file and hosts_command may hand over: a
// million hosts fit in 16 MiB, and `yes` as hosts_command must not fill
// the memory before its timeout.
const maxHostList = 16 << 20

// ResolveHosts returns every host to poll: hosts, then hosts_file, then the
// output of hosts_command, duplicates removed, order kept.
func (c *Config) ResolveHosts(ctx context.Context) ([]string, error) {
	var all []string
	all = append(all, c.Hosts...)
	if c.HostsFile != "" {
		hosts, err := c.hostsFromFile()
		if err != nil {
			return nil, err
		}
		all = append(all, hosts...)
	}
	if c.HostsCommand != "" {
		hosts, err := c.hostsFromCommand(ctx)
		if err != nil {
			return nil, err
		}
		all = append(all, hosts...)
	}
	seen := make(map[string]bool, len(all))
	out := all[:0]
	for _, h := range all {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil, c.errorAt("hosts", "no hosts to poll")
	}
	if len(out) > hostrange.MaxHosts {
		return nil, c.errorAt("hosts", "%d hosts from hosts, hosts_file and hosts_command together, more than %d", len(out), hostrange.MaxHosts)
	}
	return out, nil
}

func (c *Config) hostsFromFile() ([]string, error) {
	f, err := os.Open(c.HostsFile)
	if err != nil {
		return nil, c.errorAt("hosts_file", "%v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHostList+1))
	if err != nil {
		return nil, c.errorAt("hosts_file", "%v", err)
	}
	if len(data) > maxHostList {
		return nil, c.errorAt("hosts_file", "%s is larger than %d MiB", c.HostsFile, maxHostList>>20)
	}
	return parseHostLines(data, c.HostsFile)
}

// hostsFromCommand runs hosts_command with /bin/sh under the config's
// timeout.
func (c *Config) hostsFromCommand(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.HostsCommand)
	// In a group of its own, so that a timeout stops the whole pipeline,
	// and nothing it started outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A child that keeps stdout open must not keep fetch waiting once the
	// shell is gone.
	cmd.WaitDelay = time.Second
	stdout := &cappedBuffer{max: maxHostList}
	stderr := &cappedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // the shell exited 0; what it printed is complete
	}
	if err != nil || stdout.over {
		msg := strings.TrimSpace(stderr.String())
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			msg = fmt.Sprintf("did not finish within %s", c.Timeout)
		case ctx.Err() != nil:
			msg = "interrupted"
		case stdout.over:
			msg = fmt.Sprintf("printed more than %d MiB", maxHostList>>20)
		case msg == "":
			msg = err.Error()
		}
		return nil, c.errorAt("hosts_command", "`%s` failed: %s", c.HostsCommand, hosttext.FirstLine(msg))
	}
	hosts, err := parseHostLines(stdout.Bytes(), "hosts_command output")
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, c.errorAt("hosts_command", "`%s` printed no host", c.HostsCommand)
	}
	return hosts, nil
}

// cappedBuffer keeps the first max bytes written to it and then fails the
// write, which stops os/exec's copy (and the command, by SIGPIPE). It has
// no ReadFrom on purpose: io.Copy would use it and bypass Write.
type cappedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.buf.Write(p[:room])
		b.over = true
		return room, errors.New("output too large")
	}
	return b.buf.Write(p)
}

func (b *cappedBuffer) Bytes() []byte  { return b.buf.Bytes() }
func (b *cappedBuffer) String() string { return b.buf.String() }

// parseHostLines reads one host (or range) a line; '#' starts a comment.
func parseHostLines(data []byte, name string) ([]string, error) {
	var set hostrange.Set
	for i, raw := range strings.Split(string(data), "\n") {
		line, _, _ := strings.Cut(raw, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		hosts, err := hostrange.Split(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, i+1, err)
		}
		if !set.Add(hosts) {
			return nil, fmt.Errorf("%s:%d: more than %d hosts in all", name, i+1, hostrange.MaxHosts)
		}
	}
	return set.Names, nil
}
