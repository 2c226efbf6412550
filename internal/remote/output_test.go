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
)

// io.Copy (used by x/crypto/ssh and os/exec to fill stdout) calls ReadFrom
// when the writer has one; a capture with ReadFrom would never see its cap.
func TestCaptureHasNoReadFrom(t *testing.T) {
	if _, ok := any(newCapture(10, "output", nil, nil)).(io.ReaderFrom); ok {
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
		{"one byte over", []int{6, 5}, 6, "the host sent more than 10 bytes of output"},
		{"one huge write", []int{1 << 20}, 0, "the host sent more than 10 bytes of output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			aborted := 0
			c := newCapture(10, "output", nil, func() { aborted++ })
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

// The budget is shared: what one host holds, another cannot take, and it
// comes back when the first releases its answer.
func TestCaptureBudget(t *testing.T) {
	b := NewBudget(64 << 10)
	big := newCapture(1<<20, "output", b, func() {})
	if _, err := big.Write(make([]byte, 60<<10)); err != nil {
		t.Fatalf("first host within the budget: %v", err)
	}
	small := newCapture(1<<20, "output", b, func() {})
	if _, err := small.Write(make([]byte, 8<<10)); err == nil || !strings.Contains(err.Error(), "64 KiB across all hosts") {
		t.Fatalf("second host past the budget: err %v, want the budget's message", err)
	}
	big.release()
	again := newCapture(1<<20, "output", b, func() {})
	if _, err := again.Write(make([]byte, 8<<10)); err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.release()
	if used := b.used.Load(); used != 0 {
		t.Errorf("%d bytes of budget still taken after every release", used)
	}
}

// The host named "local" is bounded the same way: a probe that floods is
// killed at the cap, long before its deadline.
func TestRunLocalFlood(t *testing.T) {
	tests := []struct{ name, command, want string }{
		{"stdout", "yes", "more than 16 MiB of output"},
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
