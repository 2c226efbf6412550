// Package notify tells people what history knows, without anyone watching
// the page: a GPU held idle for hours (to its holder and the admins), a
// host down for a while, every host down. Each is an episode that fires
// once, is repeated after remind_after while it lasts, and resolves once;
// one render run after another never repeats a message.
//
// The decision is step, a pure function of (open episodes, observations,
// params); Route turns its events into messages for each target; the
// outbox (outbox.go) keeps them in the history database until a target
// accepts them, so a receiver that is down loses nothing; Deliver (send.go)
// sends what is due within a fixed time budget.
package notify

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/health"
)

// Kind is what an episode is about.
type Kind string

// The kinds of episodes, and Test for `render -notify-test`.
const (
	idleHeld Kind = "idle_held" // a GPU held idle by a user for idle_after: one episode per holder
	hostDown Kind = "host_down" // a host that has not answered for host_down_after
	allDown  Kind = "all_down"  // no host answered
	Test     Kind = "test"
)

// order is the kinds' order in a batch of events: the widest first.
var order = map[Kind]int{allDown: 0, hostDown: 1, gpuFailed: 2, gpuDegraded: 3, idleHeld: 4, unreservedUse: 5, Test: 6}

// State is an event's state, in Alertmanager's words.
type State string

// An event either starts (or repeats) an episode, or ends it.
const (
	Firing   State = "firing"
	resolved State = "resolved"
)

// Params are [notify]'s timings.
type Params struct {
	// HostDownAfter is how long a host must have failed before it is
	// told; a host that misses one run is not news.
	HostDownAfter time.Duration
	// RemindAfter repeats a still-firing episode this long after it was
	// last told; 0 never repeats.
	RemindAfter time.Duration
	// Events are the kinds told; nil tells every kind.
	Events []Kind
	// DegradedAfter is how long a GPU must have been degraded before it
	// is told: a clock slowdown that comes and goes is not news.
	DegradedAfter time.Duration
	// UnreservedAfter is how long a holder must have been seen on a GPU
	// reserved for someone else before it is told; 0 tells the first
	// snapshot that shows it.
	UnreservedAfter time.Duration
}

// DefaultParams are the documented defaults.
var DefaultParams = Params{HostDownAfter: 15 * time.Minute, RemindAfter: 24 * time.Hour, DegradedAfter: time.Hour}

// Observations are what render knows at a run: the newest snapshot as
// history folded it.
type Observations struct {
	Now      time.Time // the clock, for reminders
	DataTime time.Time // when the newest snapshot was taken
	Hosts    int       // hosts in it
	Up       int       // hosts that answered
	IdleHeld []IdleGPU // holders idle-held at it, one each
	// HeldIdle are the holders idle at it however short their spell so
	// far (Host, GPU and Users only): a spell starts again after a gap in
	// the data (a host or the monitor down), and the episode of a holder
	// still idle on the GPU goes on across it.
	HeldIdle []IdleGPU
	Down     []DownHost
	// Health are the GPUs failed or degraded at it, on hosts that answered.
	Health []GPUHealth
	// Unreserved are the holders of GPUs reserved for someone else at it,
	// one per holder and GPU, on hosts that answered.
	Unreserved []UnreservedGPU
}

// IdleGPU is a holder who holds a GPU idle at the newest snapshot.
type IdleGPU struct {
	Host, GPU, Model string
	Users            []string  // the holder: one user
	Working          []string  // the GPU's other holders who use it now (a shared GPU)
	Since            time.Time // the spell's first idle reading
	MemMiB           float64   // the memory the holder's processes use
	Commands         []string  // the holder's; sent only where [notify] commands = yes
}

// DownHost is a host that did not answer, since its first failed snapshot.
type DownHost struct {
	Host  string
	Since time.Time
}

// Episode is something that fired and has not resolved: what is kept
// between runs.
type Episode struct {
	Kind     Kind      `json:"k"`
	Host     string    `json:"h,omitempty"`
	GPU      string    `json:"g,omitempty"`
	Model    string    `json:"m,omitempty"`
	Users    []string  `json:"u,omitempty"`
	Working  []string  `json:"working,omitempty"` // idleHeld: the GPU's other holders, who use it
	Since    time.Time `json:"s"`
	MemMiB   float64   `json:"mem,omitempty"`
	Hosts    int       `json:"n,omitempty"` // allDown: the hosts polled
	Notified time.Time `json:"t"`           // when it was last told (fired or reminded)
	// Findings are a failed or degraded GPU's conditions, as last seen.
	Findings []health.Finding `json:"f,omitempty"`
	// Reservation is, for unreserved_use, the reservation its holder
	// (Users) uses the GPU in, as last seen.
	Reservation *Reserved `json:"r,omitempty"`
}

// key names an episode: one per holder of a GPU (and, for unreserved_use,
// per reservation owner), per GPU, per host, or for the fleet.
func (e Episode) key() string {
	k := string(e.Kind) + "\x00" + e.Host + "\x00" + e.GPU
	switch e.Kind {
	case idleHeld:
		k += "\x00" + strings.Join(e.Users, "\x00")
	case unreservedUse:
		k += "\x00" + strings.Join(e.Users, "\x00") + "\x00" + e.Reservation.owner()
	}
	return k
}

// Event is one thing to tell.
type Event struct {
	Episode
	State    State
	reminder bool
	// At is when it was seen: the snapshot that showed it (for a resolved
	// idle-held GPU, the first reading without the spell).
	At       time.Time
	Commands []string
}

// Duration is how long the episode has lasted at the event.
func (e Event) Duration() time.Duration {
	if e.Since.IsZero() || e.At.Before(e.Since) {
		return 0
	}
	return e.At.Sub(e.Since)
}

// step decides what to tell, given the episodes open after the last run
// and what is seen now. It returns the episodes open now and the events,
// in a stable order. Running it again on the same observations tells
// nothing new (reminders aside, which follow the clock).
//
//   - all_down fires when no host has answered for HostDownAfter (since
//     the last one stopped), and resolves when one does.
//     While it is open no host_down fires: a thousand messages would say
//     what one says. Hosts still down when it resolves fire then.
//   - host_down fires once a host has failed for HostDownAfter, and
//     resolves when it answers (or is no longer polled).
//   - idle_held fires for each holder who holds a GPU idle (on a shared
//     GPU, alice's episode runs while bob works), and resolves when a
//     snapshot shows the holder gone or working. A GPU whose host is down
//     is not known to be released: its episode waits, untold, for the
//     host; if the host (or the monitor) comes back to the GPU held idle
//     by the same holder, the episode goes on, though history's spell
//     starts again.
//   - gpu_failed and gpu_degraded: one per GPU while it is in that state
//     (see healthGPUs).
//   - unreserved_use: one per holder of a GPU reserved for someone else,
//     and that someone (see unreservedGPUs).
//
// Kinds that p.Events leaves out are neither told nor kept open.
func step(open map[string]Episode, obs Observations, p Params) (map[string]Episode, []Event) {
	open = idleEpisodesPerHolder(open)
	s := &stepper{open: open, next: make(map[string]Episode, len(open)), obs: obs, p: p}
	for k, e := range open {
		s.next[k] = e
	}
	noneUp := obs.Hosts > 0 && obs.Up == 0
	s.fleetDown(noneUp)
	down := make(map[string]bool, len(obs.Down))
	for _, d := range obs.Down {
		down[d.Host] = true
	}
	if !noneUp {
		s.hostsDown(down)
	}
	s.idleGPUs(func(host string) bool { return noneUp || down[host] })
	s.healthGPUs(func(host string) bool { return noneUp || down[host] })
	s.unreservedGPUs(func(host string) bool { return noneUp || down[host] })
	s.untold()
	slices.SortStableFunc(s.events, func(a, b Event) int {
		return cmp.Or(cmp.Compare(order[a.Kind], order[b.Kind]), cmp.Compare(a.Host, b.Host),
			compareGPU(a.GPU, b.GPU), cmp.Compare(stateOrder(a.State), stateOrder(b.State)),
			// two holders of one GPU, whose resolutions come from a map
			slices.Compare(a.Users, b.Users), cmp.Compare(a.Reservation.owner(), b.Reservation.owner()))
	})
	return s.next, s.events
}

// stepper is one step: the episodes open before it (open) and after it
// (next), and the events it tells.
type stepper struct {
	open, next map[string]Episode
	events     []Event
	obs        Observations
	p          Params
}

// fire opens (or opens again) e and tells it.
func (s *stepper) fire(e Episode, commands []string) {
	e.Notified = s.obs.Now
	s.next[e.key()] = e
	s.events = append(s.events, Event{Episode: e, State: Firing, At: s.obs.DataTime, Commands: commands})
}

// remind keeps e open, and tells it again once RemindAfter has passed
// since it was last told.
func (s *stepper) remind(e Episode, commands []string) {
	if s.p.RemindAfter <= 0 || s.obs.Now.Sub(e.Notified) < s.p.RemindAfter {
		s.next[e.key()] = e
		return
	}
	e.Notified = s.obs.Now
	s.next[e.key()] = e
	s.events = append(s.events, Event{Episode: e, State: Firing, reminder: true, At: s.obs.DataTime, Commands: commands})
}

// resolve closes e and tells it.
func (s *stepper) resolve(e Episode) {
	delete(s.next, e.key())
	s.events = append(s.events, Event{Episode: e, State: resolved, At: s.obs.DataTime})
}

// fleetDown steps the fleet's all_down episode; noneUp is whether no
// host answered.
func (s *stepper) fleetDown(noneUp bool) {
	all := Episode{Kind: allDown, Hosts: s.obs.Hosts}
	if e, ok := s.open[all.key()]; ok {
		if noneUp {
			e.Hosts = s.obs.Hosts
			s.remind(e, nil)
		} else {
			s.resolve(e)
		}
		return
	}
	if !noneUp {
		return
	}
	for _, d := range s.obs.Down {
		if d.Since.After(all.Since) {
			all.Since = d.Since // the last host to go down
		}
	}
	if all.Since.IsZero() {
		all.Since = s.obs.DataTime
	}
	// one missed run (the monitor's own network) is not news either
	if s.obs.DataTime.Sub(all.Since) >= s.p.HostDownAfter {
		s.fire(all, nil)
	}
}

// hostsDown steps each host's host_down episode, while some host answers;
// down names the hosts that did not.
func (s *stepper) hostsDown(down map[string]bool) {
	for _, d := range s.obs.Down {
		e := Episode{Kind: hostDown, Host: d.Host, Since: d.Since}
		old, isOpen := s.open[e.key()]
		if isOpen && !old.Since.Equal(d.Since) {
			s.resolve(old) // it answered in between, unseen: a new episode
			isOpen = false
		}
		switch {
		case isOpen:
			s.remind(old, nil)
		case s.obs.DataTime.Sub(d.Since) >= s.p.HostDownAfter:
			s.fire(e, nil)
		}
	}
	for _, e := range s.open {
		if e.Kind == hostDown && !down[e.Host] {
			s.resolve(e)
		}
	}
}

// idleGPUs steps each GPU's idle_held episode; unseen tells whether a
// host's GPUs went unseen (the host, or every host, down).
func (s *stepper) idleGPUs(unseen func(host string) bool) {
	s.idleGone(s.idleSeen(), unseen)
}

// idleSeen fires, goes on with or reminds the episode of each GPU
// idle-held now, and returns their keys.
func (s *stepper) idleSeen() map[string]bool {
	idle := make(map[string]bool, len(s.obs.IdleHeld))
	for _, g := range s.obs.IdleHeld {
		e := Episode{Kind: idleHeld, Host: g.Host, GPU: g.GPU, Model: g.Model,
			Users: g.Users, Working: g.Working, Since: g.Since, MemMiB: g.MemMiB}
		idle[e.key()] = true
		old, isOpen := s.open[e.key()]
		if isOpen && !old.Since.Equal(g.Since) {
			if slices.Equal(old.Users, g.Users) {
				// the same holders: the spell began again after a gap in
				// the data, and the episode goes on
				e.Since = old.Since
			} else {
				s.resolve(old)
				isOpen = false
			}
		}
		if isOpen {
			e.Notified = old.Notified
			s.remind(e, g.Commands)
		} else {
			s.fire(e, g.Commands)
		}
	}
	return idle
}

// idleGone resolves the open idle_held episodes of GPUs not idle-held
// now (idle), unless their host went unseen or the same users still hold
// them idle in a spell that began again.
func (s *stepper) idleGone(idle map[string]bool, unseen func(host string) bool) {
	heldIdle := make(map[string][]string, len(s.obs.HeldIdle))
	for _, g := range s.obs.HeldIdle {
		heldIdle[Episode{Kind: idleHeld, Host: g.Host, GPU: g.GPU, Users: g.Users}.key()] = g.Users
	}
	for k, e := range s.open {
		if e.Kind != idleHeld || idle[k] {
			continue
		}
		if unseen(e.Host) {
			continue // not seen: not known to be released
		}
		if users, ok := heldIdle[k]; ok && slices.Equal(users, e.Users) {
			continue // still held idle by them, in a spell that began again after a gap
		}
		s.resolve(e)
	}
}

// idleEpisodesPerHolder is open with each idle_held episode keyed by its
// holder. Those stored before episodes were per holder were one per GPU,
// for its whole holder set: each holder gets the episode as it stood, so
// nobody is told again, and the next step goes on with each one's own.
func idleEpisodesPerHolder(open map[string]Episode) map[string]Episode {
	out := make(map[string]Episode, len(open))
	for _, e := range open {
		if e.Kind != idleHeld || len(e.Users) < 2 {
			out[e.key()] = e
			continue
		}
		for _, u := range e.Users {
			one := e
			one.Users = []string{u}
			one.MemMiB = e.MemMiB / float64(len(e.Users))
			out[one.key()] = one
		}
	}
	return out
}

// stateOrder puts an episode's end before the start of the next on the
// same GPU.
func stateOrder(s State) int {
	if s == resolved {
		return 0
	}
	return 1
}

// compareGPU orders GPU ids as numbers when both are (2 before 10).
func compareGPU(a, b string) int {
	if len(a) != len(b) && allDigits(a) && allDigits(b) {
		return cmp.Compare(len(a), len(b))
	}
	return cmp.Compare(a, b)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
