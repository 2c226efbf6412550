package sshdtest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procEntry is what /proc/PID/stat says about a process.
type procEntry struct {
	pid, ppid, pgrp int
	state           byte
}

func readProcs() []procEntry {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procEntry
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		out = append(out, procEntry{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]})
	}
	return out
}

// GroupMembers lists the live (not zombie) processes of process group pgid.
func GroupMembers(pgid int) []int {
	var out []int
	for _, p := range readProcs() {
		if p.pgrp == pgid && p.state != 'Z' {
			out = append(out, p.pid)
		}
	}
	return out
}

// WaitGroupGone fails the test unless every process of group pgid is gone
// within a deadline generous enough for a loaded machine (a killed group
// goes at once; the deadline only bounds a failing test).
func WaitGroupGone(t testing.TB, pgid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		left := GroupMembers(pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("process group %d is still running: %v", pgid, left)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// descendants lists the live descendants of pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	for _, p := range readProcs() {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var out []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// sessionPIDs lists live processes whose environment has SSH_CONNECTION with
// server address host and port port (its third and fourth fields).
func sessionPIDs(host, port string) []int {
	var out []int
	for _, p := range readProcs() {
		if p.state == 'Z' || p.state == 'X' {
			continue
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			v, ok := bytes.CutPrefix(kv, []byte("SSH_CONNECTION="))
			if !ok {
				continue
			}
			f := strings.Fields(string(v))
			if len(f) == 4 && f[2] == host && f[3] == port {
				out = append(out, p.pid)
			}
			break
		}
	}
	return out
}

// StartProcessAs starts args (e.g. "sleep", "600") as user, with the user's
// groups and a plain environment (HOME, USER, LOGNAME, PATH), in its own
// process group, and returns its pid. The group is killed at Cleanup.
func StartProcessAs(t testing.TB, username string, args ...string) (pid int) {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("sshdtest: StartProcessAs(%q) without a command", username)
	}
	u, err := user.Lookup(username)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		// A test must not depend on another package's test having made the
		// user first: on a new machine it may run before it.
		EnsureUser(t, username)
		u, err = user.Lookup(username)
	}
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("sshdtest: user %s: %v", username, err)
	}
	var groups []uint32
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	if groups == nil {
		groups = []uint32{uint32(gid)}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{
		"HOME=" + u.HomeDir, "USER=" + username, "LOGNAME=" + username,
		"PATH=/usr/local/bin:/usr/bin:/bin",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups},
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("sshdtest: start %q as %s: %v", args, username, err)
	}
	pid = cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return pid
}
