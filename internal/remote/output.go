package remote

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gpumon/gpumon/internal/bytesize"
	"github.com/gpumon/gpumon/internal/hoststatus"
)

// What one host may send. The probe script bounds each of its sections on
// the host (see probe.MaxAnswer: at most about 5.5 MiB, whatever the host's
// nvidia-smi and ps print); a real answer is a few KiB, about 1 MB for 64
// GPUs and 4,096 processes. The caps only stop a broken or hostile host (a
// ForceCommand that prints forever, an rc file that cats a log) from
// filling the monitor's memory.
const (
	MaxOutput = 6 << 20  // standard output
	maxStderr = 64 << 10 // standard error: only its first line is ever shown
)

// DefaultBudget bounds the answers held at once across all the hosts of a
// run, on top of each host's Guaranteed: 1,000 hosts that all flood at once
// cost at most this much plus 1,000 × Guaranteed, not 1,000 × MaxOutput.
// (A test that wants another gives its Client a Budget of its own.)
const DefaultBudget = 32 << 20

// Guaranteed is what every host may hold whatever the others do: a
// typical answer (8 GPUs, a few dozen processes) fits in it, so no flood
// elsewhere can refuse it.
const Guaranteed = 32 << 10

// Buffers grow by doubling up to chunkMax, then chunkMax at a time, and
// are never copied while the host sends: what a host holds is what it was
// charged for, and a flood leaves no trail of outgrown buffers behind.
const (
	chunkMin = 4 << 10
	chunkMax = 256 << 10
)

// chunks of chunkMax bytes that a host no longer needs (cut off, or copied
// into its answer) are used again by the next, so floods that follow each
// other do not leave the garbage collector a trail of buffers.
var chunkPool = sync.Pool{New: func() any { return new([chunkMax]byte) }}

func newChunk(size int) []byte {
	if size == chunkMax {
		return chunkPool.Get().(*[chunkMax]byte)[:0:chunkMax]
	}
	return make([]byte, 0, size)
}

// recycle hands full-size chunks back; chunks must not be used after.
func recycle(chunks [][]byte) {
	for _, ch := range chunks {
		if cap(ch) == chunkMax {
			chunkPool.Put((*[chunkMax]byte)(ch[:chunkMax]))
		}
	}
}

// A Budget is memory shared by every host's output in one run. nil and a
// budget of 0 are unlimited.
//
// Where it runs short, the host that holds the most gives way: a host that
// needs more memory cuts off the hosts holding more than it would, largest
// first, and is cut off itself only when no host holds more. A host that
// floods therefore only ever cuts off hosts that sent more than it did; an
// answer of S bytes is refused only if hosts holding S or more each fill
// the whole budget at that moment (a 1 MB answer: 32 such hosts at once).
type Budget struct {
	max int64

	mu      sync.Mutex
	used    int64
	holders map[*account]struct{}
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// An account is what one host holds, all its streams together.
type account struct {
	budget *Budget
	abort  func()
	held   int64                 // guarded by budget.mu
	sent   atomic.Int64          // bytes received, all streams
	cut    atomic.Pointer[Error] // set when another host made it give way
}

func newAccount(b *Budget, abort func()) *account { return &account{budget: b, abort: abort} }

// grow charges n more bytes to a, or says why it cannot have them.
func (a *account) grow(n int) *Error {
	b := a.budget
	if e := a.cut.Load(); e != nil {
		return e
	}
	if b == nil || b.max <= 0 {
		return nil
	}
	var victims []*account
	defer func() {
		for _, v := range victims {
			if v.abort != nil {
				v.abort()
			}
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := a.cut.Load(); e != nil {
		return e
	}
	want := a.held + int64(n)
	for want > Guaranteed && b.used+int64(n) > b.max {
		var v *account
		for h := range b.holders {
			if h != a && h.held > want && (v == nil || h.held > v.held) {
				v = h
			}
		}
		if v == nil {
			return &Error{Status: hoststatus.Error, Msg: fmt.Sprintf("the host sent more than %s while fetch's memory for hosts' answers "+
				"(%s in all) was full of answers at least as large: it was cut off", bytesize.About(a.sent.Load()), bytesize.Exact(b.max))}
		}
		v.cut.Store(&Error{Status: hoststatus.Error, Msg: fmt.Sprintf("the host sent more than %s, the most of all the hosts answering "+
			"while fetch's memory for hosts' answers (%s in all) was full: it was cut off to make room for smaller answers", bytesize.About(v.sent.Load()), bytesize.Exact(b.max))})
		b.used -= v.held
		v.held = 0
		delete(b.holders, v)
		victims = append(victims, v)
	}
	if b.holders == nil {
		b.holders = map[*account]struct{}{}
	}
	b.holders[a] = struct{}{}
	b.used += int64(n)
	a.held = want
	return nil
}

// release gives what a holds back to the budget: the answer is parsed
// into rows at once and then dropped.
func (a *account) release() {
	b := a.budget
	if b == nil || b.max <= 0 {
		a.held = 0
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.holders[a]; ok {
		b.used -= a.held
		delete(b.holders, a)
	}
	a.held = 0
}

// capture collects one output stream of a host up to max bytes and cuts the
// host off (abort) the moment it sends more, instead of reading on until the
// deadline. It deliberately has no ReadFrom: io.Copy, which both
// x/crypto/ssh and os/exec use to fill it, would call that and bypass Write.
type capture struct {
	max    int
	stream string // "output" or "error output", for the message
	acct   *account

	mu     sync.Mutex
	chunks [][]byte // each full to its capacity but the last
	n      int      // bytes captured
	err    *Error
}

func newCapture(max int, stream string, acct *account) *capture {
	return &capture{max: max, stream: stream, acct: acct}
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if e := c.acct.cut.Load(); e != nil {
		return 0, c.fail(e)
	}
	if len(p) > c.max-c.n {
		return 0, c.fail(&Error{Status: hoststatus.Error, Msg: fmt.Sprintf("the host sent more than %s of %s (the limit for one host); "+
			"something on it prints without end: its sshd ForceCommand or the account's shell start-up files?", bytesize.Exact(int64(c.max)), c.stream)})
	}
	written := len(p)
	for len(p) > 0 {
		last := len(c.chunks) - 1
		if last < 0 || len(c.chunks[last]) == cap(c.chunks[last]) {
			size := chunkMin
			if last >= 0 {
				size = min(2*cap(c.chunks[last]), chunkMax)
			}
			size = min(size, c.max-c.n)
			if e := c.acct.grow(size); e != nil {
				return 0, c.fail(e)
			}
			c.chunks = append(c.chunks, newChunk(size))
			last++
		}
		k := min(len(p), cap(c.chunks[last])-len(c.chunks[last]))
		c.chunks[last] = append(c.chunks[last], p[:k]...)
		p = p[k:]
		c.n += k
		c.acct.sent.Add(int64(k))
	}
	return written, nil
}

// fail records why the host was cut off, drops what it sent and cuts it off.
func (c *capture) fail(e *Error) error {
	c.err = e
	recycle(c.chunks)
	c.chunks = nil
	if c.acct.abort != nil {
		c.acct.abort()
	}
	return c.err
}

// failed returns the error that cut the host off, or nil.
func (c *capture) failed() *Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		if e := c.acct.cut.Load(); e != nil {
			c.err = e
			recycle(c.chunks)
			c.chunks = nil
		}
	}
	return c.err
}

// bytes returns what was captured, in one piece (one copy where it came in
// more than one chunk). The caller owns it.
func (c *capture) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch len(c.chunks) {
	case 0:
		return nil
	case 1:
		return c.chunks[0]
	}
	out := make([]byte, 0, c.n)
	for _, ch := range c.chunks {
		out = append(out, ch...)
	}
	recycle(c.chunks)
	c.chunks = [][]byte{out}
	return out
}

func (c *capture) String() string { return string(c.bytes()) }
