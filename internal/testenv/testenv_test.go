package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInCI(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"", false},
		{"0", false},
		{"false", false},
		{"FALSE", false},
		{" False ", false},
		{"  ", false},
		{"true", true},
		{"1", true},
		{"yes", true},
		{"TRUE", true},
	} {
		t.Setenv("CI", c.v)
		if got := inCI(); got != c.want {
			t.Errorf("CI=%q: inCI() = %v, want %v", c.v, got, c.want)
		}
	}
	os.Unsetenv("CI") // t.Setenv restores it at the end
	if inCI() {
		t.Error("CI unset: inCI() = true")
	}
}

// fakeT records what a helper does to its test. Fatal and Skip end the
// goroutine, as testing's do: run calls the helper in one of its own.
type fakeT struct {
	testing.TB
	failed, skipped bool
	msgs            []string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.failed = true
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}
func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}
func (f *fakeT) Skip(args ...any) {
	f.skipped = true
	f.msgs = append(f.msgs, fmt.Sprint(args...))
	runtime.Goexit()
}

func run(t *testing.T, helper func(testing.TB)) *fakeT {
	f := &fakeT{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { helper(f) })
	wg.Wait()
	return f
}

func TestNeed(t *testing.T) {
	t.Setenv("CI", "")
	f := run(t, func(t testing.TB) { Need(t, "") })
	if f.failed || f.skipped {
		t.Errorf(`Need(""): failed %v, skipped %v, want neither`, f.failed, f.skipped)
	}
	f = run(t, func(t testing.TB) { Need(t, "gizmo not found") })
	if f.failed || !f.skipped || len(f.msgs) != 1 || f.msgs[0] != "gizmo not found" {
		t.Errorf("Need outside CI: failed %v, skipped %v, %q; want a skip saying why", f.failed, f.skipped, f.msgs)
	}

	t.Setenv("CI", "true")
	f = run(t, func(t testing.TB) { Need(t, "") })
	if f.failed || f.skipped {
		t.Errorf(`Need("") under CI: failed %v, skipped %v, want neither`, f.failed, f.skipped)
	}
	f = run(t, func(t testing.TB) { Need(t, "gizmo not found") })
	if !f.failed || f.skipped || len(f.msgs) != 1 || f.msgs[0] != "gizmo not found and CI is set: it must provide it" {
		t.Errorf("Need under CI: failed %v, skipped %v, %q; want a failure saying why", f.failed, f.skipped, f.msgs)
	}

	f = run(t, NeedRoot)
	if root := os.Geteuid() == 0; f.failed == root || f.skipped {
		t.Errorf("NeedRoot under CI, euid %d: failed %v, skipped %v", os.Geteuid(), f.failed, f.skipped)
	}
	if os.Geteuid() != 0 && !strings.Contains(strings.Join(f.msgs, ""), fmt.Sprintf("needs root (euid %d)", os.Geteuid())) {
		t.Errorf("NeedRoot: %q, want it to name the euid", f.msgs)
	}
}

func TestSyncBuffer(t *testing.T) {
	const writers, writes = 8, 200
	line := "0123456789\n"
	var b, capped SyncBuffer
	capped.Max = 1000
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range writes {
				if n, err := b.Write([]byte(line)); n != len(line) || err != nil {
					t.Errorf("Write: %d, %v", n, err)
				}
				if n, err := capped.Write([]byte(line)); n != len(line) || err != nil {
					t.Errorf("capped Write: %d, %v", n, err)
				}
				_ = b.String() // reads while others write
			}
		})
	}
	wg.Wait()
	want := strings.Repeat(line, writers*writes)
	if got := b.String(); got != want {
		t.Errorf("got %d bytes, want %d lines of %q", len(got), writers*writes, line)
	}
	if got := capped.String(); got != want[:1000] {
		t.Errorf("Max 1000: got %d bytes %q..., want the first 1000", len(got), got[:min(len(got), 40)])
	}
}

func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.golden")
	defer func(old bool) { *update = old }(*update) // go test -update ./... runs this too
	*update = false

	f := run(t, func(t testing.TB) { Golden(t, path, []byte("a\n")) })
	if !f.failed || !strings.Contains(strings.Join(f.msgs, ""), "go test -update creates it") {
		t.Errorf("missing golden file: failed %v, %q; want a failure with the hint", f.failed, f.msgs)
	}

	*update = true
	f = run(t, func(t testing.TB) { Golden(t, path, []byte("a\nb\n")) })
	if f.failed {
		t.Fatalf("-update: %q", f.msgs)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "a\nb\n" {
		t.Fatalf("-update wrote %q, %v", b, err)
	}

	*update = false
	f = run(t, func(t testing.TB) { Golden(t, path, []byte("a\nb\n")) })
	if f.failed {
		t.Errorf("same content: %q", f.msgs)
	}
	f = run(t, func(t testing.TB) { Golden(t, path, []byte("a\nc\n")) })
	msg := strings.Join(f.msgs, "")
	if !f.failed || !strings.Contains(msg, "-want +got; go test -update rewrites it") ||
		!strings.Contains(msg, cmp.Diff("a\nb\n", "a\nc\n")) {
		t.Errorf("different content: failed %v, %q; want a failure with the diff", f.failed, f.msgs)
	}
}
