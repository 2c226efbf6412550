package remote

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gpumon/gpumon/internal/hoststatus"
)

// What one host may send. A healthy host's answer is a few KiB (tens with
// hundreds of GPU processes); the caps only stop a broken or hostile host
// (a ForceCommand that prints forever, an rc file that cats a log) from
// filling the monitor's memory.
const (
	MaxOutput = 16 << 20 // standard output
	MaxStderr = 64 << 10 // standard error: only its first line is ever shown
)

// DefaultBudget bounds the answers held at once across all the hosts of a
// run: 1,000 hosts that all flood at once cost at most this much, not
// 1,000 × MaxOutput.
const DefaultBudget = 256 << 20

// A Budget is memory shared by every host's output in one run. The zero
// value and nil are unlimited.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

func (b *Budget) take(n int) bool {
	if b == nil || b.max <= 0 {
		return true
	}
	if b.used.Add(int64(n)) > b.max {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

func (b *Budget) give(n int) {
	if b != nil && b.max > 0 {
		b.used.Add(-int64(n))
	}
}

// capture collects one output stream of a host up to max bytes and cuts the
// host off (abort) the moment it sends more, instead of reading on until the
// deadline. It deliberately has no ReadFrom: io.Copy, which both
// x/crypto/ssh and os/exec use to fill it, would call that and bypass Write.
type capture struct {
	max    int
	stream string // "output" or "error output", for the message
	budget *Budget
	abort  func()

	mu   sync.Mutex
	buf  []byte
	held int // bytes of budget taken: cap(buf), charged as it grows
	err  *Error
}

func newCapture(max int, stream string, budget *Budget, abort func()) *capture {
	return &capture{max: max, stream: stream, budget: budget, abort: abort}
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if len(p) > c.max-len(c.buf) {
		return 0, c.fail(fmt.Sprintf("the host sent more than %s of %s (the limit for one host); "+
			"something on it prints without end: its sshd ForceCommand or the account's shell start-up files?", size(c.max), c.stream))
	}
	if need := len(c.buf) + len(p); need > cap(c.buf) {
		grown := max(2*cap(c.buf), need, 4096)
		grown = min(grown, c.max)
		if !c.budget.take(grown - c.held) {
			return 0, c.fail(fmt.Sprintf("fetch's memory for hosts' answers (%s across all hosts) ran out while this host was sending: "+
				"other hosts sent large answers at the same time", size(int(c.budget.max))))
		}
		next := make([]byte, len(c.buf), grown)
		copy(next, c.buf)
		c.buf, c.held = next, grown
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

func (c *capture) fail(msg string) error {
	c.err = &Error{Status: hoststatus.Error, Msg: msg}
	if c.abort != nil {
		c.abort()
	}
	return c.err
}

// failed returns the error that cut the host off, or nil.
func (c *capture) failed() *Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// bytes returns what was captured. The caller owns it after release.
func (c *capture) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf
}

// release gives the capture's memory back to the budget: the answer is
// parsed into rows at once and then dropped.
func (c *capture) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budget.give(c.held)
	c.held = 0
}

func (c *capture) String() string { return string(c.bytes()) }

func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
