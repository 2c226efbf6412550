package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/testenv"
)

// newTree opens a tree of the test's own under the v2 mount, removed with
// its groups (killed first) when the test ends. It needs root.
func newTree(t testing.TB) *Tree {
	t.Helper()
	testenv.NeedRoot(t)
	h, err := Mounted()
	if err != nil {
		t.Fatal(err)
	}
	if h.V2 == "" {
		testenv.Need(t, "no cgroup v2 hierarchy mounted")
	}
	dir := filepath.Join(h.V2, "gpumon-test-"+randomHex(t, 6))
	tr, err := Open(h, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(t, tr) })
	return tr
}

// removeTree kills what runs in tr's groups, then removes every folder of
// tr, children first, v2 and v1 alike: the groups, foreign folders a test
// made, the tree. Nothing runs in them then to make more.
func removeTree(t testing.TB, tr *Tree) {
	t.Helper()
	entries, _ := os.ReadDir(tr.Dir)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		g := &Group{Dir: filepath.Join(tr.Dir, e.Name())}
		if procs, _ := g.Procs(); slices.Contains(procs, os.Getpid()) {
			t.Errorf("cleanup: the test itself is in %s: tree left", g.Dir)
			return
		}
		if err := g.Kill(); err != nil {
			t.Errorf("cleanup: kill %s: %v", g.Dir, err)
		}
		if !g.WaitEmpty(time.Now().Add(5 * time.Second)) {
			t.Errorf("cleanup: %s still holds processes", g.Dir)
		}
	}
	roots := []string{tr.Dir}
	for _, mount := range tr.H.V1 {
		roots = append(roots, filepath.Join(mount, tr.Rel))
	}
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, dir := range slices.Backward(dirs) {
			if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("cleanup: %v", err)
			}
		}
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newName is a fresh group name for job.
func newName(t testing.TB, job string) string {
	t.Helper()
	return GroupName(randomHex(t, 8), job)
}

// create makes a group in tr, failing the test on an error.
func create(t testing.TB, tr *Tree, job string, l Limits) *Group {
	t.Helper()
	g, err := tr.Create(newName(t, job), l)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// job is a shell script started in a group.
type job struct {
	cmd    *exec.Cmd
	waited chan error // the shell's exit, reaped at once
}

// startIn starts script under sh in g: the shell waits for a line on its
// stdin, sent once it is in g, so nothing of the script runs outside g.
// The test's cleanup kills the shell should it still run.
func startIn(t testing.TB, g *Group, script string) *job {
	t.Helper()
	cmd := exec.Command("sh", "-c", "read go; "+script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := &job{cmd: cmd, waited: make(chan error, 1)}
	go func() { j.waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-j.waited
	})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	_ = stdin.Close()
	return j
}

// wait waits up to 10 s for the job's shell to exit.
func (j *job) wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-j.waited:
		j.waited <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still running after 10 s", strings.Join(j.cmd.Args, " "))
		return nil
	}
}
