package accounting

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Bounds of a group lookup: a directory that hangs or answers without end
// must not hang or fill render.
const (
	lookupTimeout = 10 * time.Second
	maxGetent     = 16 << 20 // bytes of getent's answer
)

// errNoGroup is getent's exit status 2: no such key.
var errNoGroup = errors.New("no such group on this machine (getent group finds none)")

// SystemGroups is the members of a unix group on this machine, as the
// system's name services know them (files, LDAP, sssd; through getent):
// the group's listed members, and the users whose primary group it is
// (of those getent passwd lists: sssd lists no users unless enumerate is
// on). A group that does not exist is an error.
func SystemGroups(group string) ([]string, error) {
	if !plainName(group) || strings.ContainsAny(group, ":") || strings.HasPrefix(group, "-") {
		return nil, fmt.Errorf("%q is not a group's name", group)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	out, err := getent(ctx, "group", group)
	if err != nil {
		return nil, err
	}
	gid, members, err := parseGroup(out, group)
	if err != nil {
		return nil, err
	}
	passwd, err := getent(ctx, "passwd")
	if err != nil {
		return nil, err
	}
	return union(members, primaryMembers(passwd, gid)), nil
}

// getent runs getent with args, its answer bounded in size and time.
func getent(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "getent", args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("getent: %w", err)
	}
	out, readErr := io.ReadAll(io.LimitReader(stdout, maxGetent+1))
	if len(out) > maxGetent {
		// stop it rather than wait for the rest: it is ours, started above
		cmd.Process.Kill()
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case len(out) > maxGetent:
		return nil, fmt.Errorf("getent %s: more than %d MiB", args[0], maxGetent>>20)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("getent %s: no answer in %s", args[0], lookupTimeout)
	case errors.As(err, &exit) && exit.ExitCode() == 2 && len(args) > 1:
		return nil, errNoGroup
	case err != nil:
		return nil, fmt.Errorf("getent %s: %w", args[0], err)
	case readErr != nil:
		return nil, fmt.Errorf("getent %s: %w", args[0], readErr)
	}
	return out, nil
}

// parseGroup reads getent group's line for group: name:password:gid:members.
func parseGroup(out []byte, group string) (gid string, members []string, err error) {
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, ":")
		// a directory may match names without regard to case
		if len(f) != 4 || !strings.EqualFold(f[0], group) {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); plainName(m) {
				members = append(members, m)
			}
		}
		return f[2], members, nil
	}
	return "", nil, errNoGroup
}

// primaryMembers are the users of getent passwd's lines
// (name:password:uid:gid:...) whose primary group is gid.
func primaryMembers(passwd []byte, gid string) []string {
	var out []string
	for line := range bytes.SplitSeq(passwd, []byte("\n")) {
		f := strings.SplitN(string(line), ":", 5)
		if len(f) == 5 && f[3] == gid && plainName(f[0]) {
			out = append(out, f[0])
		}
	}
	return out
}

// union is a's and b's names once each, in their order.
func union(a, b []string) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, n := range slices.Concat(a, b) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
