package fetch

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/nvsmi"
)

// PublishGrace bounds a round's publishing once live mode is told to stop:
// within systemd's TimeoutStopSec (30 s) with room for the polls to end.
const PublishGrace = 20 * time.Second

// MinEvery is the shortest interval live mode takes.
const MinEvery = 5 * time.Second

// Live is fetch's live mode: it polls every host once per interval over
// connections it keeps (the Poller's Runner is a *remote.Keeper), writes
// load_data.csv after each round and hands the round's rows to Publish.
//
// A round starts on each tick. Every host not still busy with an earlier
// poll is polled, each within the Poller's Timeout; the round then waits
// for its hosts until all have answered or RoundWait has passed, whichever
// is first, and writes the file: a host still busy then gets a row that
// says so (status timeout), and its answer, when it comes, goes into the
// row of the round that sees it. So a slow or hung host delays only
// itself, and one host is never polled twice at once. A round that
// overruns the interval delays the next one; ticks do not pile up.
type Live struct {
	Poller *Poller
	Hosts  []string
	Output string
	Every  time.Duration
	// RoundWait bounds how long a round waits for its hosts (0: see
	// DefaultRoundWait).
	RoundWait time.Duration
	// Ticks start rounds after the first, which starts at once; nil: a
	// ticker at Every. Now is the time of a round (nil: time.Now).
	Ticks <-chan time.Time
	Now   func() time.Time
	// Publish runs after each round's file is written (or failed to be):
	// the render step, given the rows themselves.
	Publish PublishRound
	// Log gets errors and, with Summaries, a line when the round's summary
	// changes; nil: none.
	Log       io.Writer
	Summaries bool

	roundStart atomic.Int64 // UnixNano of the round under way
}

// RoundStart is the time of the round under way (of the last one, between
// rounds).
func (l *Live) RoundStart() time.Time { return time.Unix(0, l.roundStart.Load()) }

// EachRow hands every row of the round to add, host by host, and says
// how many there were: live mode's Poller keeps Rows, never Records.
func (r *Round) EachRow(add func(*loaddata.Row)) (int, error) {
	n := 0
	for i := range r.Results {
		rows := r.Results[i].Rows
		for j := range rows {
			add(&rows[j])
		}
		n += len(rows)
	}
	return n, nil
}

// Round is what one live round did.
type Round struct {
	N        int
	Start    time.Time
	Results  []Result
	Polled   int   // hosts whose poll started in this round
	WriteErr error // load_data.csv could not be written
}

// DefaultRoundWait is how long a round waits for its hosts by default:
// the poll timeout and a second's grace, so that a host's own timeout is
// what its row reports, but at most 90 % of the interval.
func DefaultRoundWait(every, timeout time.Duration) time.Duration {
	return min(timeout+time.Second, every*9/10)
}

type pollDone struct {
	i   int
	res Result
}

// Run runs rounds until ctx is done, then waits for the polls under way
// (cancelled with ctx) and returns nil. A round that ctx ends before it
// writes writes nothing.
func (l *Live) Run(ctx context.Context) error {
	now := l.Now
	if now == nil {
		now = time.Now
	}
	ticks := l.Ticks
	if ticks == nil {
		t := time.NewTicker(l.Every)
		defer t.Stop()
		ticks = t.C
	}
	wait := l.RoundWait
	if wait <= 0 {
		wait = DefaultRoundWait(l.Every, l.Poller.Timeout)
	}
	n := len(l.Hosts)
	s := &liveState{
		l: l, done: make(chan pollDone, n), busy: make([]bool, n), since: make([]time.Time, n),
		last: make([]Result, n), sem: make(chan struct{}, max(1, min(n, l.Poller.Concurrency))),
	}
	if l.Poller.Concurrency <= 0 {
		s.sem = make(chan struct{}, max(1, n))
	}
	defer s.drain()
	for round := 1; ; round++ {
		start := now()
		l.roundStart.Store(start.UnixNano())
		if !s.round(ctx, round, start, wait) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
		}
	}
}

type liveState struct {
	l        *Live
	done     chan pollDone
	busy     []bool
	since    []time.Time
	last     []Result
	inflight int
	sem      chan struct{}
	summary  string
}

func (s *liveState) apply(d pollDone) {
	s.busy[d.i] = false
	s.last[d.i] = d.res
	s.inflight--
}

// drain waits for every poll under way (ctx is done: they end soon).
func (s *liveState) drain() {
	for s.inflight > 0 {
		s.apply(<-s.done)
	}
}

// round runs one round; false when ctx ended it.
func (s *liveState) round(ctx context.Context, n int, start time.Time, wait time.Duration) bool {
	l := s.l
	for more := true; more; {
		select {
		case d := <-s.done:
			s.apply(d)
		default:
			more = false
		}
	}
	polled := 0
	for i, host := range l.Hosts {
		if s.busy[i] {
			continue
		}
		s.busy[i], s.since[i] = true, start
		s.inflight++
		polled++
		go func() {
			s.sem <- struct{}{}
			res := l.Poller.pollHost(ctx, host)
			<-s.sem
			s.done <- pollDone{i, res}
		}()
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
collect:
	for s.inflight > 0 {
		select {
		case d := <-s.done:
			s.apply(d)
		case <-timer.C:
			break collect
		case <-ctx.Done():
			return false
		}
	}
	if ctx.Err() != nil {
		return false
	}
	ts := start.UTC().Format(loaddata.TimeFormat)
	results := make([]Result, len(l.Hosts))
	l.Poller.rowBytes.Store(0)
	for i, host := range l.Hosts {
		if s.busy[i] {
			results[i] = failed(host, ts, &nvsmi.HostError{Status: hoststatus.Timeout, Message: fmt.Sprintf(
				"still answering the poll started at %s (live mode polls a host again only once it has answered; timeout %s)",
				s.since[i].UTC().Format("15:04:05 UTC"), l.Poller.Timeout)})
			continue
		}
		results[i] = l.Poller.keep(s.last[i])
	}
	r := &Round{N: n, Start: start, Results: results, Polled: polled}
	if err := WriteResults(l.Output, results); err != nil {
		r.WriteErr = fmt.Errorf("writing %s: %w", l.Output, err)
		if l.Log != nil {
			cli.Print("fetch", r.WriteErr, l.Log)
		}
	} else if sum := Summary(results); l.Summaries && sum != s.summary {
		s.summary = sum
		s.logf("fetch: %s", sum)
	}
	// the page does not depend on the CSV: a full disk under the CSV
	// costs the CSV, not the page, the history or the notifications
	if l.Publish != nil {
		// a stop (SIGTERM) during the round's publishing lets it finish,
		// within PublishGrace: cut off, it would leave "context canceled"
		// on the page as the history's failure, until the next start
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PublishGrace)
		if err := l.Publish(pctx, r); err != nil && l.Log != nil {
			cli.Print("fetch", err, l.Log)
		}
		cancel()
	}
	return true
}

func (s *liveState) logf(format string, args ...any) {
	if s.l.Log != nil {
		fmt.Fprintf(s.l.Log, format+"\n", args...)
	}
}
