// Package testenv holds what the project's tests share: the CI rule (a
// missing prerequisite skips a test on a developer machine and fails it under
// CI), a buffer that several goroutines may write, golden files, and a
// simulated fleet that closes with the test.
//
// It is a normal package so that the tests of other packages can import it;
// nothing but tests may. Importing it registers the -update flag of
// `go test`: a test package must not define its own.
package testenv

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/simfleet"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// inCI reports whether the CI environment variable asks for strict mode,
// where missing prerequisites fail tests instead of skipping them: CI is set
// to anything but "", "0" or "false" (any case).
func inCI() bool {
	v := strings.TrimSpace(os.Getenv("CI"))
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}

// Need stops the test when why, the reason a prerequisite is missing, is not
// "": it skips the test, or fails it under CI (see inCI), which must provide
// every prerequisite. With why == "" it does nothing.
func Need(t testing.TB, why string) {
	t.Helper()
	if why == "" {
		return
	}
	if inCI() {
		t.Fatalf("%s and CI is set: it must provide it", why)
	}
	t.Skip(why)
}

// NeedRoot is Need for a test that must run as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if euid := os.Geteuid(); euid != 0 {
		Need(t, fmt.Sprintf("needs root (euid %d)", euid))
	}
}

// SyncBuffer is a bytes.Buffer that goroutines may write and read at once,
// e.g. a child process's stdout and stderr together. The zero value is an
// empty buffer ready to use.
type SyncBuffer struct {
	// Max, when above 0, is the most bytes the buffer keeps: writes beyond
	// it are dropped (and still reported written in full).
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p (what fits under Max), and returns len(p), nil.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	if s.Max > 0 {
		p = p[:min(len(p), max(s.Max-s.b.Len(), 0))]
	}
	s.b.Write(p)
	return n, nil
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Golden compares got with the golden file at path (e.g.
// testdata/page.html.golden) and fails the test with the difference. Under
// `go test -update` it writes got to path instead, making its folder if need
// be.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

// StartFleet launches a simulated fleet for a test or benchmark and closes it
// when tb ends. It lives here, not in simfleet, so that the demo and simfleet
// binaries do not link the testing package.
func StartFleet(tb testing.TB, specs []simfleet.HostSpec) *simfleet.Fleet {
	tb.Helper()
	f, err := simfleet.Launch(specs)
	if err != nil {
		tb.Fatalf("simfleet: %v", err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	return f
}

// GrepLines is the lines of s that contain sub, for a failure message that
// shows only what matters of a long output.
func GrepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// MountTmpfs mounts a tmpfs of size (e.g. "64k", "1m") on dir until the
// test ends, and returns dir; it needs root.
func MountTmpfs(t testing.TB, dir, size string) string {
	t.Helper()
	NeedRoot(t)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		Need(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// MountReadOnly makes dir read-only (a read-only bind mount of itself)
// until the test ends: what is there stays readable, nothing can be
// written; it needs root.
func MountReadOnly(t testing.TB, dir string) {
	t.Helper()
	NeedRoot(t)
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		Need(t, "cannot bind-mount: "+err.Error())
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
}

// FillFileSystem writes a file in dir until its file system has not a
// byte left.
func FillFileSystem(t testing.TB, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for _, n := range []int{len(block), 1} { // blocks, then the last bytes
		for {
			_, err := f.Write(block[:n])
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Promtool is the path of Prometheus's own checker (Debian's prometheus
// package, which CI installs); Need stops the test without it.
func Promtool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		Need(t, "promtool not found (apt-get install prometheus)")
	}
	return p
}

// CheckMetrics runs `promtool check metrics` on an exposition text: it
// must print nothing.
func CheckMetrics(t testing.TB, metrics []byte) {
	t.Helper()
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(metrics)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
