package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/probe"
)

// io.Copy (used by x/crypto/ssh and os/exec to fill stdout) calls ReadFrom
// when the writer has one; a capture with ReadFrom would never see its cap.
func TestCaptureHasNoReadFrom(t *testing.T) {
	if _, ok := any(newCapture(10, "output", newAccount(nil, nil))).(io.ReaderFrom); ok {
		t.Fatal("capture implements io.ReaderFrom: io.Copy would bypass its cap")
	}
}

func TestCaptureCap(t *testing.T) {
	tests := []struct {
		name    string
		writes  []int
		wantLen int
		wantErr string
	}{
		{"under", []int{3, 4}, 7, ""},
		{"exactly the cap", []int{6, 4}, 10, ""},
		{"one byte over", []int{6, 5}, 0, "the host sent more than 10 bytes of output"},
		{"one huge write", []int{1 << 20}, 0, "the host sent more than 10 bytes of output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			aborted := 0
			c := newCapture(10, "output", newAccount(nil, func() { aborted++ }))
			var err error
			for _, n := range tt.writes {
				_, err = io.Copy(c, bytes.NewReader(make([]byte, n)))
			}
			if got := len(c.bytes()); got != tt.wantLen {
				t.Errorf("kept %d bytes, want %d", got, tt.wantLen)
			}
			if tt.wantErr == "" {
				if err != nil || c.failed() != nil || aborted != 0 {
					t.Errorf("err %v, failed %v, aborted %d; want none", err, c.failed(), aborted)
				}
				return
			}
			if e := c.failed(); e == nil || e.Status != hoststatus.Error || !strings.Contains(e.Msg, tt.wantErr) {
				t.Errorf("failed() = %v, want an error containing %q", e, tt.wantErr)
			}
			if aborted != 1 {
				t.Errorf("abort called %d times, want 1: the host must be cut off at once", aborted)
			}
			if _, err := c.Write([]byte("x")); err == nil {
				t.Error("a write after the cap succeeded")
			}
		})
	}
}

// What comes in many writes and chunks comes out whole, and the host is
// charged for its chunks' capacity, never much more than it sent.
func TestCaptureChunks(t *testing.T) {
	b := NewBudget(64 << 20)
	a := newAccount(b, nil)
	c := newCapture(4<<20, "output", a)
	var want []byte
	for i := 0; len(want) < 3<<20; i++ {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*37%70000)
		want = append(want, p...)
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(c.bytes(), want) {
		t.Fatal("captured bytes differ from what was written")
	}
	if a.held < int64(len(want)) || a.held > int64(len(want))+chunkMax {
		t.Errorf("charged %d bytes for %d", a.held, len(want))
	}
	a.release()
	if b.used != 0 || len(b.holders) != 0 {
		t.Errorf("%d bytes, %d holders left after release", b.used, len(b.holders))
	}
}

// The budget is shared: where it runs short, the host holding the most
// gives way to one that holds less, whatever the order they came in; a
// host that holds the most itself is the one cut off; and what a host
// holds comes back when it releases its answer.
func TestCaptureBudget(t *testing.T) {
	b := NewBudget(1 << 20)
	host := func() (*account, *capture, *int) {
		aborted := new(int)
		a := newAccount(b, func() { *aborted++ })
		return a, newCapture(4<<20, "output", a), aborted
	}
	bigA, big, bigAborted := host()
	if _, err := big.Write(make([]byte, 900<<10)); err != nil {
		t.Fatalf("first host within the budget: %v", err)
	}
	midA, mid, _ := host()
	if _, err := mid.Write(make([]byte, 200<<10)); err != nil {
		t.Fatalf("a smaller host when the budget is short: %v, want the larger one cut off", err)
	}
	if e := big.failed(); e == nil || !strings.Contains(e.Msg, "the host sent more than 900.0 KiB, the most of all") || *bigAborted != 1 {
		t.Fatalf("the largest host: failed %v, aborted %d; want it cut off for the smaller one", e, *bigAborted)
	}
	if big.bytes() != nil {
		t.Error("the host cut off kept its output")
	}
	// Every host holds a little: the one that wants more than all others
	// is refused, and only it.
	var small []*capture
	for range 3 {
		_, c, _ := host()
		if _, err := c.Write(make([]byte, 250<<10)); err != nil {
			t.Fatalf("small host: %v", err)
		}
		small = append(small, c)
	}
	if _, err := mid.Write(make([]byte, 300<<10)); err == nil || !strings.Contains(err.Error(), "full of answers at least as large") {
		t.Fatalf("the host past all others: err %v, want it refused", err)
	}
	for _, c := range small {
		if c.failed() != nil {
			t.Errorf("a smaller host was cut off: %v", c.failed())
		}
	}
	// Guaranteed is always there, even with the budget full.
	_, tiny, _ := host()
	if _, err := tiny.Write(make([]byte, Guaranteed)); err != nil {
		t.Fatalf("a host within Guaranteed: %v", err)
	}
	bigA.release()
	midA.release()
	if b.used > b.max {
		t.Errorf("%d bytes in use, budget %d", b.used, b.max)
	}
}

// The host named "local" is bounded the same way: a probe that floods is
// killed at the cap, long before its deadline.
func TestRunLocalFlood(t *testing.T) {
	tests := []struct{ name, command, want string }{
		{"stdout", "yes", "more than 6 MiB of output"},
		{"stderr", "yes >&2", "more than 64 KiB of error output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			out, err := RunLocal(ctx, tt.command, nil)
			var e *Error
			if !errors.As(err, &e) || e.Status != hoststatus.Error || !strings.Contains(e.Msg, tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if ctx.Err() != nil {
				t.Fatal("cut off by the deadline, not by the cap")
			}
			if out != nil {
				t.Errorf("%d bytes of output returned with the error", len(out))
			}
		})
	}
}

func TestExitErrorSilentShell(t *testing.T) {
	tests := []struct {
		name           string
		stdout, stderr string
		want           string
	}{
		{"nologin", "This account is currently not available.\n", "", "remote command exited with status 1: This account is currently not available."},
		{"stderr first", "x\n", "sh: 1: nvidia-smi: not found\n", "remote command exited with status 1: sh: 1: nvidia-smi: not found"},
		{"bin false", "", "", "remote command exited with status 1 and printed nothing: is the account's login shell /bin/false?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := exitError(1, []byte(tt.stdout), []byte(tt.stderr))
			if !strings.HasPrefix(e.Msg, tt.want) {
				t.Errorf("got %q, want it to start with %q", e.Msg, tt.want)
			}
		})
	}
}

// The probe script bounds what it prints on the host: its largest answer
// must fit under the per-host cap, so only a host that does not run it can
// meet the cap.
func TestMaxOutputAboveProbe(t *testing.T) {
	if probe.MaxAnswer >= MaxOutput {
		t.Fatalf("probe.MaxAnswer %d >= MaxOutput %d", probe.MaxAnswer, MaxOutput)
	}
	if maxStderr > MaxOutput || Guaranteed > chunkMax {
		t.Fatal("caps out of order")
	}
}
