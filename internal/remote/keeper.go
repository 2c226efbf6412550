package remote

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
)

// maxBackoff is the longest a Keeper waits before dialing a failing host again.
const maxBackoff = 5 * time.Minute

// Keeper keeps one SSH connection per host for many commands (fetch's live
// mode): Run opens a new session on the host's connection, and dials again
// (host key checked, as on every dial) when the connection is gone. A host
// whose dials fail is dialed again only after a back-off that doubles with
// each failure in a row, up to maxBackoff; until then Run fails at once
// with the last failure's status and message. Runs of one host are one at
// a time; of different hosts, concurrent.
type Keeper struct {
	Client *Client
	// Backoff is the first wait after a failed dial (0: one minute).
	Backoff time.Duration
	Now     func() time.Time // nil: time.Now

	dials atomic.Int64
	mu    sync.Mutex
	hosts map[string]*kept
}

type kept struct {
	mu      sync.Mutex
	conn    *Conn
	fails   int       // failed dials in a row
	retryAt time.Time // no dial before this after a failure
	last    *Error
}

// Dials is how many SSH connections the Keeper has attempted.
func (p *Keeper) Dials() int64 { return p.dials.Load() }

func (p *Keeper) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Keeper) host(alias string) *kept {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hosts == nil {
		p.hosts = map[string]*kept{}
	}
	h := p.hosts[alias]
	if h == nil {
		h = &kept{}
		p.hosts[alias] = h
	}
	return h
}

// Run runs command on alias over its kept connection, dialing it first
// when there is none. A kept connection that turns out to be gone (the
// host rebooted, a NAT forgot it) is dialed again once, within ctx.
func (p *Keeper) Run(ctx context.Context, alias, command string, stdin []byte) ([]byte, error) {
	h := p.host(alias)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil && !h.conn.Alive() {
		h.drop()
	}
	fresh := false
	if h.conn == nil {
		if err := p.dial(ctx, alias, h); err != nil {
			return nil, err
		}
		fresh = true
	}
	out, opened, err := h.conn.run(ctx, command, stdin)
	if err != nil && !opened && !fresh && ctx.Err() == nil {
		h.drop()
		if err := p.dial(ctx, alias, h); err != nil {
			return nil, err
		}
		out, _, err = h.conn.run(ctx, command, stdin)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// cut off at its deadline (which closed the connection): a host
		// that takes the session and never answers waits its back-off as
		// one that cannot be reached does, rather than costing a new
		// handshake every other round
		h.drop()
		p.failed(h, err)
	case err != nil && !h.conn.Alive():
		h.drop()
	default:
		h.fails = 0 // it answered: whatever it said, it is reachable
	}
	return out, err
}

// failed counts a failed attempt of h's in a row and sets when the next
// may be.
func (p *Keeper) failed(h *kept, err error) {
	e, ok := err.(*Error)
	if !ok {
		e = &Error{Status: hoststatus.Error, Msg: err.Error()}
	}
	h.fails++
	h.last = e
	h.retryAt = p.now().Add(p.backoff(h.fails))
}

func (h *kept) drop() {
	if h.conn != nil {
		h.conn.Close()
		h.conn = nil
	}
}

// dial connects h, or says why not: now, or (during a back-off) the last time.
func (p *Keeper) dial(ctx context.Context, alias string, h *kept) error {
	now := p.now()
	if h.fails > 0 && now.Before(h.retryAt) {
		attempts := "attempts"
		if h.fails == 1 {
			attempts = "attempt"
		}
		return &Error{Status: h.last.Status, Msg: fmt.Sprintf("%s (live mode: %d failed %s in a row; next attempt at %s)",
			h.last.Msg, h.fails, attempts, h.retryAt.UTC().Format("15:04:05 UTC"))}
	}
	p.dials.Add(1)
	conn, err := p.Client.Connect(ctx, alias)
	if err != nil {
		p.failed(h, err)
		return h.last
	}
	h.conn = conn // fails counts on until the host answers
	return nil
}

// backoff is the wait after the n-th failed dial in a row: Backoff,
// doubling, at most maxBackoff.
func (p *Keeper) backoff(n int) time.Duration {
	d := p.Backoff
	if d <= 0 {
		d = time.Minute
	}
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// Close closes every kept connection; the Keeper must not be used after.
func (p *Keeper) Close() {
	p.mu.Lock()
	hosts := p.hosts
	p.hosts = nil
	p.mu.Unlock()
	for _, h := range hosts {
		h.mu.Lock()
		h.drop()
		h.mu.Unlock()
	}
}
