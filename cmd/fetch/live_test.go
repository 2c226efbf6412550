package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/gpumon/gpumon/internal/cli"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/gpumon/gpumon/internal/fetch"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/simfleet"
	"github.com/gpumon/gpumon/internal/testenv"
)

// every is the interval of the tests' fake clock: rounds start when a test
// sends a tick, and the clock moves on by every before each one.
const every = 15 * time.Second

// wait bounds every wait on a condition: generous, as other tests share
// the machine.
const wait = 2 * time.Minute

// harness is a live fetch over a simulated fleet, rounds driven by hand.
type harness struct {
	t      *testing.T
	fleet  *simfleet.Fleet
	dir    string
	ini    string
	live   *fetch.Live
	ticks  chan time.Time
	rounds chan *fetch.Round
	clock  atomic.Int64 // UnixNano
	stop   func()
	stderr *lockedBuffer
}

// startLive starts specs as a fleet and a live fetch over it, whose first
// round runs at once; timeoutS is the per-host timeout; roundWait, when
// not 0, replaces the default cut-off.
func startLive(t *testing.T, specs []simfleet.HostSpec, timeoutS int, roundWait time.Duration) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), ticks: make(chan time.Time), rounds: make(chan *fetch.Round, 1), stderr: &lockedBuffer{}}
	h.fleet, h.ini = fleetConfig(t, specs, timeoutS, h.dir)
	h.clock.Store(time.Now().Truncate(time.Second).UnixNano())
	cfg, err := fetch.LoadConfig(h.ini)
	if err != nil {
		t.Fatal(err)
	}
	l, closeAll, err := fetch.SetupLive(context.Background(), cfg, every, publishing, h.stderr)
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Unix(0, h.clock.Load()) }
	l.Now, l.Poller.Now, l.Ticks, l.RoundWait = now, now, h.ticks, roundWait
	render := l.Publish
	l.Publish = func(ctx context.Context, r *fetch.Round) error {
		err := render(ctx, r)
		if err != nil {
			t.Errorf("round %d: render: %v", r.N, err)
		}
		h.rounds <- r
		return err
	}
	h.live = l
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	h.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return within %s of its context's end", wait)
		}
		closeAll()
	}
	t.Cleanup(func() {
		if h.stop != nil {
			h.stop()
		}
	})
	return h
}

// round waits for the round under way; next starts the next one first.
func (h *harness) round() *fetch.Round {
	h.t.Helper()
	select {
	case r := <-h.rounds:
		return r
	case <-time.After(wait):
		h.t.Fatalf("no round within %s; stderr:\n%s", wait, h.stderr.String())
		return nil
	}
}

func (h *harness) next() *fetch.Round {
	h.t.Helper()
	h.clock.Add(int64(every))
	select {
	case h.ticks <- time.Unix(0, h.clock.Load()):
	case <-time.After(wait):
		h.t.Fatalf("the loop took no tick within %s", wait)
	}
	return h.round()
}

// roundN is round n: the first, which starts by itself, or the next tick's.
func (h *harness) roundN(n int) *fetch.Round {
	h.t.Helper()
	if n == 1 {
		return h.round()
	}
	return h.next()
}

func (h *harness) shutdown() {
	h.stop()
	h.stop = nil
}

func (h *harness) now() time.Time { return time.Unix(0, h.clock.Load()) }

// byHost is the round's results by host name.
func byHost(r *fetch.Round) map[string]fetch.Result {
	m := map[string]fetch.Result{}
	for _, res := range r.Results {
		m[res.Host] = res
	}
	return m
}

// fleetConfig starts specs and writes a config.ini for them into dir, with
// the page, status.json and the history database in dir too.
func fleetConfig(t *testing.T, specs []simfleet.HostSpec, timeoutS int, dir string) (*simfleet.Fleet, string) {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("SSH_AUTH_SOCK", "")
	f := testenv.StartFleet(t, specs)
	cf, err := f.WriteClientFiles(filepath.Join(dir, "client"))
	if err != nil {
		t.Fatal(err)
	}
	ini, err := os.ReadFile(cf.ConfigINI)
	if err != nil {
		t.Fatal(err)
	}
	ini = bytes.Replace(ini, []byte("timeout = 5\n"), fmt.Appendf(nil, "timeout = %d\n", timeoutS), 1)
	ini = fmt.Appendf(ini, "output = %s\n\n[render]\nhtml = %s\n\n[history]\ndb = %s\n",
		filepath.Join(dir, "load_data.csv"), filepath.Join(dir, "index.html"), filepath.Join(dir, "history.db"))
	if err := os.WriteFile(cf.ConfigINI, ini, 0o644); err != nil {
		t.Fatal(err)
	}
	return f, cf.ConfigINI
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLiveRounds: N rounds over 20 hosts take one handshake per host and
// one session per host and round; each round rewrites load_data.csv, the
// page and status.json (which say live, every 15s), and the history gets
// one snapshot per round.
func TestLiveRounds(t *testing.T) {
	const hosts, rounds = 20, 5
	h := startLive(t, simfleet.Generate(hosts, 1), 20, 0)
	var prevPage []byte
	for n := 1; n <= rounds; n++ {
		var r *fetch.Round
		if n == 1 {
			r = h.round()
		} else {
			r = h.next()
		}
		if r.N != n || r.Polled != hosts || r.WriteErr != nil {
			t.Fatalf("round %d: N %d, polled %d, write error %v", n, r.N, r.Polled, r.WriteErr)
		}
		want := h.now().UTC().Format(loaddata.TimeFormat)
		rows, err := loaddata.ReadFile(filepath.Join(h.dir, "load_data.csv"))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, row := range rows {
			seen[row.Host] = true
			if row.HostStatus != hoststatus.OK || row.Timestamp != want {
				t.Fatalf("round %d: %s: status %s at %s (want ok at %s): %s", n, row.Host, row.HostStatus, row.Timestamp, want, row.HostError)
			}
		}
		if len(seen) != hosts {
			t.Fatalf("round %d: %d hosts in the CSV, want %d", n, len(seen), hosts)
		}
		page, err := os.ReadFile(filepath.Join(h.dir, "index.html"))
		if err != nil {
			t.Fatal(err)
		}
		// without JavaScript the page reloads every interval; with it the
		// script rewrites #every to "updates in place every 15 s"
		if !bytes.Contains(page, []byte(`live: fetch polls every 15 s; <span id="every">reloads every 15 s</span>`)) ||
			!bytes.Contains(page, []byte(`<noscript><meta http-equiv="refresh" content="15"></noscript>`)) {
			t.Fatalf("round %d: the page does not say it is live, or does not reload every interval", n)
		}
		if bytes.Equal(page, prevPage) {
			t.Fatalf("round %d: the page was not rewritten", n)
		}
		prevPage = page
		var st struct {
			DataTime string `json:"data_time"`
			Live     *struct {
				EveryS float64 `json:"every_s"`
			} `json:"live"`
		}
		js, err := os.ReadFile(filepath.Join(h.dir, "status.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(js, &st); err != nil {
			t.Fatal(err)
		}
		if st.DataTime != want || st.Live == nil || st.Live.EveryS != 15 {
			t.Fatalf("round %d: status.json data_time %q live %+v, want %s and every_s 15", n, st.DataTime, st.Live, want)
		}
	}
	h.shutdown()
	s := h.fleet.Stats()
	if s.Authed != hosts || s.Sessions != hosts*rounds || s.Execs != hosts*rounds {
		t.Errorf("fleet served %+v, want %d handshakes and %d sessions and execs", s, hosts, hosts*rounds)
	}
	if d := h.live.Poller.Runner.(interface{ Dials() int64 }).Dials(); d != hosts {
		t.Errorf("%d dials, want %d", d, hosts)
	}
	db, err := sql.Open("sqlite", filepath.Join(h.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var snaps int
	if err := db.QueryRow(`SELECT count(*) FROM snapshots`).Scan(&snaps); err != nil {
		t.Fatal(err)
	}
	if snaps != rounds {
		t.Errorf("%d history snapshots, want %d", snaps, rounds)
	}
}

// TestLiveRedial: a host whose connection drops between polls is dialed
// again within its next poll, and answers; the others keep their
// connections.
func TestLiveRedial(t *testing.T) {
	const hosts = 20
	h := startLive(t, simfleet.Generate(hosts, 1), 20, 0)
	h.round()
	const victim = "gpu-0003"
	if n := h.fleet.DropConnections(victim); n != 1 {
		t.Fatalf("dropped %d connections of %s, want 1", n, victim)
	}
	for range 2 {
		r := h.next()
		for _, res := range r.Results {
			if res.Status != hoststatus.OK {
				t.Errorf("round %d: %s: %s: %s", r.N, res.Host, res.Status, res.Error)
			}
		}
	}
	h.shutdown()
	for _, spec := range simfleet.Generate(hosts, 1) {
		want := int64(1)
		if spec.Name == victim {
			want = 2
		}
		if s := h.fleet.HostStats(spec.Name); s.Authed != want || s.Sessions != 3 {
			t.Errorf("%s: %d handshakes, %d sessions; want %d and 3", spec.Name, s.Authed, s.Sessions, want)
		}
	}
}

// TestLiveHostKeyChanged: a host reinstalled with another key while live
// is refused on its next dial and reported in its row; dials back off (one
// interval, then two); the other hosts go on undisturbed.
func TestLiveHostKeyChanged(t *testing.T) {
	const hosts = 20
	h := startLive(t, simfleet.Generate(hosts, 1), 20, 0)
	h.round()
	const victim = "gpu-0005"
	if _, err := h.fleet.RotateHostKey(victim); err != nil {
		t.Fatal(err)
	}
	h.fleet.DropConnections(victim) // the reboot
	// round 2 dials and is refused; round 3, one interval later, dials
	// again; round 4 waits (two intervals after round 3); round 5 dials
	wantAccepted := []int64{2, 3, 3, 4}
	for i, acc := range wantAccepted {
		r := h.next()
		res := byHost(r)
		v := res[victim]
		if v.Status != hoststatus.HostKey || !strings.Contains(v.Error, "HOST KEY CHANGED") {
			t.Errorf("round %d: %s: %s: %s; want hostkey, HOST KEY CHANGED", r.N, victim, v.Status, v.Error)
		}
		if waiting := strings.Contains(v.Error, "next attempt at"); waiting != (i == 2) {
			t.Errorf("round %d: %s: %q: says it waits: %v, want %v", r.N, victim, v.Error, waiting, i == 2)
		}
		if got := h.fleet.HostStats(victim).Accepted; got != acc {
			t.Errorf("round %d: %s accepted %d connections, want %d", r.N, victim, got, acc)
		}
		for name, res := range res {
			if name != victim && res.Status != hoststatus.OK {
				t.Errorf("round %d: %s: %s: %s", r.N, name, res.Status, res.Error)
			}
		}
	}
	rows, err := loaddata.ReadFile(filepath.Join(h.dir, "load_data.csv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.Host == victim && (row.HostStatus != hoststatus.HostKey || !strings.Contains(row.HostError, "HOST KEY CHANGED")) {
			t.Errorf("CSV row of %s: %s %q", victim, row.HostStatus, row.HostError)
		}
	}
	h.shutdown()
	if s := h.fleet.Stats(); s.Authed != hosts {
		t.Errorf("%d handshakes, want %d (every host once; %s's later ones were refused)", s.Authed, hosts, victim)
	}
}

// TestLiveSlowHosts: a tenth of the fleet is dead or hangs (one host
// refuses connections, one never speaks SSH, one never answers its
// command) under a 60 s timeout: each round still ends at its cut-off,
// well within the interval, with every healthy host polled in every round
// (one session each, on the one connection) and its row fresh and ok; the
// hung hosts are reported as still answering and never polled twice at
// once; the dead one is dialed again only as its back-off allows.
func TestLiveSlowHosts(t *testing.T) {
	const hosts, rounds = 30, 5
	specs := simfleet.Generate(hosts, 1)
	const silent, hung, refused = 4, 14, 24
	specs[silent].Failure = simfleet.Silent
	specs[hung].Failure = simfleet.HangForever
	specs[refused].Failure = simfleet.Refuse
	const cutoff = 2 * time.Second
	if cutoff >= every {
		t.Fatal("the cut-off must be shorter than the interval")
	}
	start := time.Now()
	h := startLive(t, specs, 60, cutoff)
	for n := 1; n <= rounds; n++ {
		var r *fetch.Round
		if n == 1 {
			r = h.round()
		} else {
			start = time.Now()
			r = h.next()
		}
		if took := time.Since(start); took > cutoff+30*time.Second {
			t.Errorf("round %d took %s: it waited for the hung hosts (timeout 60s)", n, took)
		}
		if want := map[bool]int{true: hosts, false: hosts - 2}[n == 1]; r.Polled != want {
			t.Errorf("round %d polled %d hosts, want %d (the hung ones are still busy)", n, r.Polled, want)
		}
		ts := r.Start.UTC().Format(loaddata.TimeFormat)
		for i, res := range r.Results {
			switch i {
			case silent, hung:
				if res.Status != hoststatus.Timeout || !strings.Contains(res.Error, "still answering") {
					t.Errorf("round %d: %s: %s: %s; want timeout, still answering", n, res.Host, res.Status, res.Error)
				}
			case refused:
				// dialed in rounds 1 and 2, then one interval and
				// two later (rounds 4 and 8): in rounds 3 and 5 it waits
				waits := n == 3 || n == 5
				if res.Status != hoststatus.Unreachable || strings.Contains(res.Error, "next attempt at") != waits {
					t.Errorf("round %d: %s: %s: %q; want unreachable, waiting for its next attempt: %v", n, res.Host, res.Status, res.Error, waits)
				}
			default:
				if res.Status != hoststatus.OK || len(res.Rows) == 0 || res.Rows[0].Timestamp != ts {
					t.Errorf("round %d: %s: %s: %s, %d rows; want ok and fresh (%s)", n, res.Host, res.Status, res.Error, len(res.Rows), ts)
				}
			}
		}
	}
	for i, spec := range specs {
		s := h.fleet.HostStats(spec.Name)
		switch i {
		case hung:
			if s.Sessions != 1 {
				t.Errorf("%s: %d sessions, want 1: a busy host is not polled again", spec.Name, s.Sessions)
			}
		case silent:
			if s.Accepted != 1 {
				t.Errorf("%s: %d connections, want 1", spec.Name, s.Accepted)
			}
		case refused:
		default:
			if s.Authed != 1 || s.Sessions != rounds {
				t.Errorf("%s: %d handshakes, %d sessions; want 1 and %d (polled every round)", spec.Name, s.Authed, s.Sessions, rounds)
			}
		}
	}
	h.shutdown() // ends the hung polls at once, not after 60 s
}

// TestLiveHungHostBacksOff: a host that takes the session and never
// answers is cut off at its timeout, which closes its connection; it then
// waits the same back-off as a host that cannot be reached (polled in
// rounds 1, 2 and 4 of 5, its row saying when the next attempt is),
// instead of a new handshake every round. The others are polled every
// round on their one connection.
func TestLiveHungHostBacksOff(t *testing.T) {
	const hosts, rounds, hung = 3, 5, 1
	specs := simfleet.Generate(hosts, 1)
	specs[hung].Failure = simfleet.HangForever
	h := startLive(t, specs, 3, 20*time.Second) // timeout 3 s: each round ends when the hung poll does
	for n := 1; n <= rounds; n++ {
		res := h.roundN(n).Results[hung]
		waits := n == 3 || n == 5
		if res.Status != hoststatus.Timeout || strings.Contains(res.Error, "next attempt at") != waits {
			t.Errorf("round %d: %s: %s: %q; want timeout, waiting for its next attempt: %v", n, res.Host, res.Status, res.Error, waits)
		}
	}
	for i, spec := range specs {
		s := h.fleet.HostStats(spec.Name)
		want := map[bool]int64{true: 3, false: rounds}[i == hung]
		if s.Sessions != want {
			t.Errorf("%s: %d sessions, want %d", spec.Name, s.Sessions, want)
		}
	}
	h.shutdown()
}

// TestLiveMain: fetch -every as cron or systemd starts it. It holds the
// lock for its life: a cron fetch meanwhile fails, naming it; when its
// context ends (SIGTERM, SIGINT) it returns nil and the lock is free.
func TestLiveMain(t *testing.T) {
	dir := t.TempDir()
	_, ini := fleetConfig(t, simfleet.Generate(3, 1), 20, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var stderr lockedBuffer
	go func() { done <- fetch.MainWith(ctx, []string{"-c", ini, "-every", "5s"}, &stderr, &stderr, publishing) }()
	page := filepath.Join(dir, "index.html")
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(page); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("live fetch ended: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no page within %s:\n%s", wait, stderr.String())
		}
	}
	// a hang-up, from a closed terminal or a reload asked out of habit,
	// does not end it: it says what to do instead
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(wait); !strings.Contains(stderr.String(), "SIGHUP ignored"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no word of SIGHUP within %s:\n%s", wait, stderr.String())
		}
	}
	var cron bytes.Buffer
	err := fetch.Main(context.Background(), []string{"-c", ini, "-q"}, &cron, &cron)
	if err == nil || !strings.Contains(err.Error(), "fetch -every (live mode, pid "+strconv.Itoa(os.Getpid())+")") || !strings.Contains(cli.Hint(err), "remove this cron line") {
		t.Errorf("cron fetch beside the live one: %v (hint %q), want fetch -every (live mode, pid %d) and to remove the cron line", err, cli.Hint(err), os.Getpid())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("live fetch after its context ended: %v", err)
		}
	case <-time.After(wait):
		t.Fatalf("live fetch still running %s after its context ended", wait)
	}
	if !strings.Contains(stderr.String(), "fetch: live: 3 hosts every 5s") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if err := fetch.Main(context.Background(), []string{"-c", ini, "-q"}, &cron, &cron); err != nil {
		t.Errorf("cron fetch after the live one: %v", err)
	}
}

// -every below the minimum, or without live mode built in, is refused.
func TestLiveFlags(t *testing.T) {
	var out bytes.Buffer
	if err := fetch.MainWith(context.Background(), []string{"-every", "1s"}, &out, &out, publishing); err == nil || !strings.Contains(err.Error(), "at most every 5s") {
		t.Errorf("-every 1s: %v", err)
	}
	dir := t.TempDir()
	_, ini := fleetConfig(t, simfleet.Generate(1, 1), 20, dir)
	if err := fetch.Main(context.Background(), []string{"-c", ini, "-every", "5s"}, &out, &out); err == nil || !strings.Contains(err.Error(), "no live mode") {
		t.Errorf("fetch.Main -every: %v", err)
	}
}
