package notify

import (
	"fmt"
	"time"

	"github.com/gpumon/gpumon/internal/hosttext"
)

// unreservedUse is a GPU held during someone else's reservation: one
// episode per (host, GPU, holder, reservation owner).
const unreservedUse Kind = "unreserved_use"

// Reserved is a reservation as an unreserved_use episode names it: the
// reservations file's values, made printable and cut there.
type Reserved struct {
	Owner   string    `json:"o"`
	Until   time.Time `json:"until,omitzero"` // zero: no end date
	Comment string    `json:"c,omitempty"`
}

func (r *Reserved) owner() string {
	if r == nil {
		return ""
	}
	return r.Owner
}

// UnreservedGPU is a holder of a GPU reserved for someone else (a holder
// whose user name is not, exactly, the reservation's) at the newest
// snapshot.
type UnreservedGPU struct {
	Host, GPU, Model string
	User             string  // the holder
	MemMiB           float64 // the memory the holder's processes use
	Commands         []string
	Reservation      Reserved
}

// unreservedGPUs steps the unreserved_use episodes. One fires once its
// holder has been seen on the GPU for UnreservedAfter (0: the first
// snapshot that shows it; until then it is kept, untold, with Notified
// zero, to count the time), is reminded as the others are, and resolves
// when a snapshot shows the holder gone or the reservation over (ended,
// removed, or given to another owner, which is another episode). A GPU
// whose host is down is not known to be released: its episode waits, as
// an idle-held GPU's does, unless its reservation has ended by the clock.
func (s *stepper) unreservedGPUs(unseen func(host string) bool) {
	seen := make(map[string]bool, len(s.obs.Unreserved))
	for _, g := range s.obs.Unreserved {
		resv := g.Reservation
		e := Episode{Kind: unreservedUse, Host: g.Host, GPU: g.GPU, Model: g.Model, Users: []string{g.User},
			MemMiB: g.MemMiB, Since: s.obs.DataTime, Reservation: &resv}
		k := e.key()
		seen[k] = true
		old, isOpen := s.open[k]
		if isOpen {
			e.Since, e.Notified = old.Since, old.Notified
		}
		switch {
		case isOpen && !old.Notified.IsZero():
			s.remind(e, g.Commands)
		case s.obs.DataTime.Sub(e.Since) >= s.p.UnreservedAfter:
			s.fire(e, g.Commands)
		default:
			s.next[k] = e // seen, not yet told
		}
	}
	for k, e := range s.open {
		if e.Kind != unreservedUse || seen[k] {
			continue
		}
		ended := e.Reservation != nil && !e.Reservation.Until.IsZero() && !s.obs.Now.Before(e.Reservation.Until)
		switch {
		case unseen(e.Host) && !ended:
			// not seen: not known to be released
		case e.Notified.IsZero():
			delete(s.next, k) // never told: nothing to resolve
		default:
			s.resolve(e)
		}
	}
}

// unreservedTitle is e, an unreserved_use event, in a few words.
func unreservedTitle(e Event) string {
	if e.State == Firing {
		return fmt.Sprintf("GPU %s on %s, reserved for %s, used by %s", name(e.GPU), name(e.Host), name(e.Reservation.owner()), users(e.Users))
	}
	return fmt.Sprintf("GPU %s on %s no longer used by %s in %s's reservation", name(e.GPU), name(e.Host), users(e.Users), name(e.Reservation.owner()))
}

// unreservedText is e, an unreserved_use event, as a sentence: the GPU,
// the reservation (owner, end, comment) and the holder with their memory.
func unreservedText(e Event, loc *time.Location, commands bool) string {
	host, gpu := name(e.Host), name(e.GPU)
	if e.State != Firing {
		return fmt.Sprintf("GPU %s on %s is no longer used by %s in %s's reservation (it was for %s, since %s).",
			gpu, host, users(e.Users), name(e.Reservation.owner()), hours(e.Duration()), clock(e.Since, loc))
	}
	model, still := "", ""
	if e.Model != "" {
		model = " (" + name(e.Model) + ")"
	}
	if e.reminder {
		still = "Still: "
	}
	s := fmt.Sprintf("%sGPU %s on %s%s is %s, and %s uses it (%s in use, seen for %s, since %s).",
		still, gpu, host, model, reservationWords(e.Reservation, loc), users(e.Users), mib(e.MemMiB),
		hours(e.Duration()), clock(e.Since, loc))
	if commands && len(e.Commands) > 0 {
		s += " Processes: " + commandList(e.Commands) + "."
	}
	return s
}

// reservationWords are "reserved for alice until 2026-12-01 18:00 UTC
// (ICML)", the comment made printable and cut.
func reservationWords(r *Reserved, loc *time.Location) string {
	if r == nil {
		return "reserved"
	}
	s := "reserved for " + name(r.Owner)
	if r.Until.IsZero() {
		s += " with no end date"
	} else {
		s += " until " + clock(r.Until, loc)
	}
	if r.Comment != "" {
		s += " (" + hosttext.Clip(hosttext.Printable(r.Comment), maxDetail) + ")"
	}
	return s
}

// webhookReservation is the reservation as a webhook receives it.
type webhookReservation struct {
	Owner   string `json:"owner"`
	Until   string `json:"until,omitempty"`
	Comment string `json:"comment,omitempty"`
}

func webhookReservationOf(r *Reserved) *webhookReservation {
	if r == nil {
		return nil
	}
	w := &webhookReservation{Owner: name(r.Owner), Comment: hosttext.Clip(hosttext.Printable(r.Comment), maxDetail)}
	if !r.Until.IsZero() {
		w.Until = r.Until.UTC().Format(time.RFC3339)
	}
	return w
}

// userRecipients are the users mailed about e as themselves (mail_users):
// the holders of an idle-held GPU while it fires; the holder of a GPU in
// someone else's reservation while it fires, and the reservation's owner
// then and when it resolves (they may use their GPU again).
func userRecipients(e Event) []string {
	switch {
	case e.Kind == idleHeld && e.State == Firing:
		return e.Users
	case e.Kind == unreservedUse && e.State == Firing:
		return append(append([]string(nil), e.Users...), e.Reservation.owner())
	case e.Kind == unreservedUse:
		return []string{e.Reservation.owner()}
	}
	return nil
}
