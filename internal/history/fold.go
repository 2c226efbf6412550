package history

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// Params are the accounting's settings: [history] in config.ini.
type Params struct {
	// MaxGap is how long one snapshot's readings stand for at most: until
	// the next snapshot, but no longer than this. A longer gap is time
	// nobody knows about: not counted, and it ends every idle spell.
	MaxGap time.Duration
	// IdleUtilPct and IdleAfter: a user holds a GPU idle once their
	// processes have held it for IdleAfter, idle (GPU.IdleHolders) in every
	// reading; one reading where they use it ends the spell.
	IdleUtilPct float64
	IdleAfter   time.Duration
}

// DefaultParams are the documented defaults.
var DefaultParams = Params{MaxGap: 15 * time.Minute, IdleUtilPct: 5, IdleAfter: 2 * time.Hour}

// foldState is what the fold knows after a snapshot, and all the next one
// needs: the readings whose span is counted when the next snapshot tells
// how long they stood, the spells in progress, and each host's last known
// GPUs. It is saved with each snapshot (a checkpoint), so that the fold
// can go on from any hour's end.
type foldState struct {
	Version int                   `json:"v,omitempty"` // foldVersion; 0: saved before spells were per holder
	Time    int64                 `json:"t"`           // Unix seconds of the last snapshot folded; 0 before the first
	Prev    readings              `json:"p"`
	Spells  map[string]*Spell     `json:"s"` // by spellKey: held and idle now, long enough or not yet
	Hosts   map[string]*HostState `json:"h"`
	// Health are the health episodes going on, by healthKey.
	Health map[string]*HealthEpisode `json:"x,omitempty"`
	// ledger is the accounting's rates of the snapshot at Time. Not
	// saved: a checkpoint holding the rates of 1,000 hosts took longer
	// to write and read than the snapshot takes to decode, and the store
	// makes them again from it (writer.prevLedger).
	ledger *ledgerRates
}

// foldVersion 1: a spell is one holder's (spellKey). Version 0 had one
// spell per GPU for all its holders together; decodeState turns those into
// one spell per holder, each going on from the same start.
const foldVersion = 1

// newFoldState is the state before any snapshot.
func newFoldState() *foldState {
	return &foldState{Version: foldVersion, Spells: map[string]*Spell{}, Hosts: map[string]*HostState{}}
}

// readings is one snapshot's readings as the accounting counts them.
type readings struct {
	UserShare map[string]float64 `json:"u,omitempty"` // GPUs held: a GPU held by n users is 1/n to each
	UserGPUs  map[string]int     `json:"g,omitempty"` // GPUs the user holds, shared ones whole (for peaks)
	States    map[string]int     `json:"s,omitempty"` // GPUs per state
	IdleJob   int                `json:"j,omitempty"` // GPUs used by idlemon's job and nobody else
}

// Spell is a GPU held idle by one holder: readings no further apart than
// MaxGap, the holder idle in every one of them (GPU.IdleHolders). On a
// shared GPU each holder has a spell of their own: alice's goes on while
// bob works.
type Spell struct {
	Host   string   `json:"h"`
	GPU    string   `json:"g"`
	Users  []string `json:"u"`           // the holder (a list: spells of old stores were a GPU's whole holder set)
	Start  int64    `json:"s"`           // the first idle reading
	Last   int64    `json:"l"`           // the newest idle reading
	End    int64    `json:"e,omitempty"` // once over: Last plus the span its reading stood for
	MemMiB float64  `json:"m"`           // memory the holder uses, at the newest reading
	// Share is the holder's share of the GPU at the newest reading (1/n
	// of n holders), and Held the GPU-seconds the spell has counted to
	// the holder so far, each reading's span times its share: idle-held
	// GPU-hours are a share of GPU-hours, never more (a GPU alice and
	// bob hold is half of each one's, idle or not). Share is 0 in a
	// spell of an older store, which counted Seconds shared among Users.
	Share float64 `json:"f,omitempty"`
	Held  float64 `json:"w,omitempty"`
	// Pending are Held by the hour each part is counted to (spanHour, as
	// GPU-hours are), while the spell has not yet lasted idle_after; once
	// it has (Counted), they and every later part go to the hours'
	// idle-held figures (effects.IdleHeld), so that a span's idle-held
	// hours are a part of its GPU-hours, hour by hour.
	Pending map[int64]float64 `json:"hp,omitempty"`
	Counted bool              `json:"c,omitempty"`
	// Account, Job and Model are the holder's at the newest reading.
	Account string `json:"a,omitempty"`
	Job     string `json:"j,omitempty"`
	Model   string `json:"md,omitempty"`
}

// idleKey names an hour's idle-held GPU-seconds of one holder.
type idleKey struct {
	Hour                      int64
	User, Account, Job, Model string
}

// hold adds the GPU-seconds of the holder's reading before t, counted to
// hour: to the hours' figures once the spell counts, else kept pending.
func (s *Spell) hold(seconds float64, hour int64, idle map[idleKey]float64) {
	if seconds <= 0 {
		return
	}
	s.Held += seconds
	if s.Counted {
		idle[s.idleKey(hour)] += seconds
		return
	}
	if s.Pending == nil {
		s.Pending = map[int64]float64{}
	}
	s.Pending[hour] += seconds
}

// count makes the spell count once it has lasted idle_after: its pending
// hours go to the hours' figures.
func (s *Spell) count(idleAfter int64, idle map[idleKey]float64) {
	if s.Counted || s.Seconds() < idleAfter {
		return
	}
	s.Counted = true
	for h, sec := range s.Pending {
		idle[s.idleKey(h)] += sec
	}
	s.Pending = nil
}

func (s *Spell) idleKey(hour int64) idleKey {
	return idleKey{Hour: hour, User: s.Users[0], Account: s.Account, Job: s.Job, Model: s.Model}
}

// Seconds is how long the spell has lasted: to its end, or while it goes
// on, to its newest reading.
func (s *Spell) Seconds() int64 {
	if s.End != 0 {
		return s.End - s.Start
	}
	return s.Last - s.Start
}

// GPUSeconds is the idle-held GPU-seconds the spell counts, to its users
// together: its holder's share of the GPU over the spell so far.
func (s *Spell) GPUSeconds() float64 {
	if s.Share == 0 {
		return float64(s.Seconds())
	}
	return s.Held
}

// HostState is what history remembers of a host between snapshots.
type HostState struct {
	DownSince int64      `json:"d,omitempty"` // first snapshot it failed in since it last answered; 0 while up
	LastUp    int64      `json:"u,omitempty"`
	GPUs      []KnownGPU `json:"g,omitempty"` // as last seen
}

// KnownGPU is a GPU as last seen.
type KnownGPU struct {
	ID   string `json:"i"`
	Name string `json:"n"`
}

// effects are what folding one snapshot adds to the store.
type effects struct {
	Hour int64 // the snapshot's hour (Unix seconds), for the peaks
	// SpanHour is the hour the counted span goes to (spanHour).
	SpanHour int64
	// Span is the previous snapshot's span, in seconds, and what it adds.
	Span           float64
	UserSeconds    map[string]float64
	StateSeconds   map[string]float64
	IdleJobSeconds float64
	// UserGPUs is this snapshot's GPUs per user, for the hour's peaks.
	UserGPUs map[string]int
	// Ended are the idle-held spells that ended here (only those that
	// lasted IdleAfter), by host, GPU and start.
	Ended  []Spell
	Counts counts // this snapshot, for the fleet's plots
	// HealthEnded are the health episodes that ended here.
	HealthEnded []HealthEpisode
	// Ledger is what the span adds to the accounting; IdleHeld the
	// idle-held GPU-seconds by hour and holder (Spell.hold).
	Ledger   ledgerEffects
	IdleHeld map[idleKey]float64
}

// earliest is the earliest hour e writes to: SpanHour, or an hour before
// it that a spell reaching idle_after counts (Spell.count).
func (e *effects) earliest() int64 {
	h := e.SpanHour
	for k := range e.IdleHeld {
		h = min(h, k.Hour)
	}
	return h
}

// counts are one snapshot's totals.
type counts struct {
	Hosts, HostsDown int
	States           map[string]int // GPUs per state, Down included
	IdleHeld         int            // GPUs with a holder idle-held at this snapshot
}

func gpuKey(host, id string) string { return host + "\x00" + id }

// spellKey names a holder's spell on a GPU.
func spellKey(host, id, user string) string { return host + "\x00" + id + "\x00" + user }

// hourOf is the start of t's hour.
func hourOf(t int64) int64 { return t - ((t%3600)+3600)%3600 }

// spanHour is the hour the span of the readings at prev, ended by a
// snapshot at t, is counted to: t's, so that a replay from the end of an
// hour touches no earlier one; but after a gap over max gap, prev's: the
// readings stood for the time just after prev, and a span never reaches
// across the gap into another hour (a snapshot dated far back would
// otherwise add its span to the hour of the next one).
func spanHour(prev, t, gap int64) int64 {
	if t-prev > gap {
		return hourOf(prev)
	}
	return hourOf(t)
}

// step folds snapshot s into st, which it changes, and says what that adds.
// s must be newer than st.Time: the store replays out-of-order snapshots
// from an earlier checkpoint instead.
//
// The previous snapshot's readings are counted for the time until s, at
// most MaxGap, into s's hour: a span never goes to an hour before the
// snapshot that closed it, so replaying from the end of an hour touches
// no earlier hour.
func step(st *foldState, s *Snapshot, p Params) effects {
	t := s.Time.Unix()
	gap := int64(p.MaxGap / time.Second)
	eff := effects{Hour: hourOf(t), SpanHour: hourOf(t), UserSeconds: map[string]float64{}, StateSeconds: map[string]float64{}}
	if st.Time != 0 {
		span := float64(min(t-st.Time, gap))
		eff.Span, eff.SpanHour = span, spanHour(st.Time, t, gap)
		if st.ledger != nil {
			eff.Ledger = st.ledger.times(span)
		}
		for u, share := range st.Prev.UserShare {
			eff.UserSeconds[u] = share * span
		}
		for state, n := range st.Prev.States {
			eff.StateSeconds[state] = float64(n) * span
		}
		eff.IdleJobSeconds = float64(st.Prev.IdleJob) * span
	}
	eff.Ended, eff.IdleHeld = stepSpells(st, s, p, t, gap)
	stepHosts(st, s, t)
	eff.HealthEnded = stepHealth(st, s, t, gap)
	st.Prev = aggregate(st, s)
	rates := ledgerOf(s)
	st.Time, st.ledger = t, &rates
	eff.UserGPUs = st.Prev.UserGPUs
	eff.Counts = counts{Hosts: len(s.Hosts), States: st.Prev.States, IdleHeld: idleHeldNow(st, p)}
	for _, h := range s.Hosts {
		if !h.Up {
			eff.Counts.HostsDown++
		}
	}
	return eff
}

// stepSpells extends, starts and ends the spells; it returns those that
// ended having lasted IdleAfter, and the idle-held GPU-seconds of the
// spells that count, by hour.
func stepSpells(st *foldState, s *Snapshot, p Params, t, gap int64) ([]Spell, map[idleKey]float64) {
	var ended []Spell
	idle := map[idleKey]float64{}
	idleAfter := int64(p.IdleAfter / time.Second)
	end := func(sp *Spell) {
		sp.End = sp.Last + min(t-sp.Last, gap)
		sp.hold(float64(sp.End-sp.Last)*sp.Share, spanHour(sp.Last, t, gap), idle)
		sp.count(idleAfter, idle)
		if sp.End-sp.Start >= idleAfter {
			ended = append(ended, *sp)
		}
	}
	seen := make(map[string]bool, len(st.Spells))
	for _, h := range s.Hosts {
		if !h.Up {
			continue
		}
		for i := range h.GPUs {
			g := &h.GPUs[i]
			for j := range g.Holders {
				hd := &g.Holders[j]
				if !g.holderIdle(hd, p.IdleUtilPct) {
					continue
				}
				key := spellKey(h.Name, g.ID, hd.User)
				seen[key] = true
				share := 1 / float64(len(g.Holders))
				sp, ok := st.Spells[key]
				if ok && t-sp.Last <= gap {
					sp.hold(float64(t-sp.Last)*sp.Share, hourOf(t), idle)
					sp.Last, sp.MemMiB, sp.Share = t, hd.MemMiB, share
					sp.Account, sp.Job, sp.Model = hd.Account, hd.Job, g.Name
					sp.count(idleAfter, idle)
					continue
				}
				if ok {
					end(sp)
				}
				st.Spells[key] = &Spell{Host: h.Name, GPU: g.ID, Users: []string{hd.User}, Start: t, Last: t, MemMiB: hd.MemMiB,
					Share: share, Account: hd.Account, Job: hd.Job, Model: g.Name}
				st.Spells[key].count(idleAfter, idle) // idle_after of 0: counted at once
			}
		}
	}
	for key, sp := range st.Spells {
		if !seen[key] {
			end(sp)
			delete(st.Spells, key)
		}
	}
	slices.SortFunc(ended, func(a, b Spell) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.Start, b.Start),
			slices.Compare(a.Users, b.Users))
	})
	return ended, idle
}

// stepHosts notes which hosts answered, since when the others are down,
// and each one's GPUs as last seen. A host no longer in the data is
// forgotten: it is no longer polled.
func stepHosts(st *foldState, s *Snapshot, t int64) {
	hosts := make(map[string]*HostState, len(s.Hosts))
	for _, h := range s.Hosts {
		hs := st.Hosts[h.Name]
		if hs == nil {
			hs = &HostState{}
		}
		if h.Up {
			hs.DownSince, hs.LastUp = 0, t
			hs.GPUs = hs.GPUs[:0]
			for _, g := range h.GPUs {
				hs.GPUs = append(hs.GPUs, KnownGPU{ID: g.ID, Name: g.Name})
			}
		} else if hs.DownSince == 0 {
			hs.DownSince = t
		}
		hosts[h.Name] = hs
	}
	st.Hosts = hosts
}

// aggregate counts s's GPUs per state and per user; a down host's GPUs as
// last seen count as Down.
func aggregate(st *foldState, s *Snapshot) readings {
	a := readings{UserShare: map[string]float64{}, UserGPUs: map[string]int{}, States: map[string]int{}}
	for _, h := range s.Hosts {
		if !h.Up {
			if n := len(st.Hosts[h.Name].GPUs); n > 0 {
				a.States[Down] += n
			}
			continue
		}
		for i := range h.GPUs {
			g := &h.GPUs[i]
			a.States[g.State]++
			if n := len(g.Holders); n > 0 {
				for _, hd := range g.Holders {
					a.UserShare[hd.User] += 1 / float64(n)
					a.UserGPUs[hd.User]++
				}
			} else if g.IdleJob {
				a.IdleJob++
			}
		}
	}
	return a
}

// idleHeldSpells lists the holders idle-held at st's newest snapshot,
// longest first.
func idleHeldSpells(st *foldState, p Params) []Spell {
	var out []Spell
	for _, sp := range st.Spells {
		if sp.Last == st.Time && sp.Seconds() >= int64(p.IdleAfter/time.Second) {
			out = append(out, *sp)
		}
	}
	slices.SortFunc(out, func(a, b Spell) int {
		return cmp.Or(cmp.Compare(b.Seconds(), a.Seconds()), cmp.Compare(a.Host, b.Host), compareIDs(a.GPU, b.GPU),
			slices.Compare(a.Users, b.Users))
	})
	return out
}

// idleHeldNow counts the GPUs idle-held at st's newest snapshot: what
// idleHeldGPUs(idleHeldSpells(st, p)) says, without copying and sorting
// every spell of the fleet at each snapshot.
func idleHeldNow(st *foldState, p Params) int {
	gpus := map[string]bool{}
	for _, sp := range st.Spells {
		if sp.Last == st.Time && sp.Seconds() >= int64(p.IdleAfter/time.Second) {
			gpus[gpuKey(sp.Host, sp.GPU)] = true
		}
	}
	return len(gpus)
}

// idleHeldGPUs counts the GPUs among spells: a GPU two holders hold idle
// is one GPU.
func idleHeldGPUs(spells []Spell) int {
	gpus := make(map[string]bool, len(spells))
	for _, sp := range spells {
		gpus[gpuKey(sp.Host, sp.GPU)] = true
	}
	return len(gpus)
}

// compareIDs orders GPU ids as numbers when both are (2 before 10), else
// as text.
func compareIDs(a, b string) int {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return cmp.Compare(x, y)
	}
	return cmp.Compare(a, b)
}
