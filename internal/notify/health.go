package notify

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// The kinds of a GPU's health: one episode per GPU while it is failed, or
// degraded, by the [health] policy.
const (
	gpuFailed   Kind = "gpu_failed"
	gpuDegraded Kind = "gpu_degraded"
)

// kinds are the kinds of episodes, as [notify] events names them.
var kinds = []Kind{idleHeld, hostDown, allDown, gpuFailed, gpuDegraded, unreservedUse}

// GPUHealth is a GPU that is failed or degraded at the newest snapshot.
type GPUHealth struct {
	Host, GPU, Model string
	State            string    // health.Failed or health.Degraded
	Since            time.Time // the start of its oldest condition of that severity going on
	Findings         []health.Finding
}

// maxDetail bounds a finding's words in a message: a lost GPU's are the
// host's own error text.
const maxDetail = 200

// healthKind is the kind of episode of a GPU in state, "" for none.
func healthKind(state string) Kind {
	switch state {
	case health.Failed:
		return gpuFailed
	case health.Degraded:
		return gpuDegraded
	}
	return ""
}

func isHealthKind(k Kind) bool { return k == gpuFailed || k == gpuDegraded }

// healthGPUs steps each GPU's gpu_failed and gpu_degraded episodes: one
// fires while the GPU is in its state (gpu_degraded once it has lasted
// DegradedAfter), with the findings of the newest snapshot; it resolves
// when a snapshot shows the GPU out of it (a GPU that goes from degraded
// to failed fires gpu_failed and resolves gpu_degraded). A GPU whose host is down is not known to be well: its
// episode waits, untold, as an idle-held GPU's does. unseen tells whether
// a host's GPUs went unseen.
func (s *stepper) healthGPUs(unseen func(host string) bool) {
	now := make(map[string]bool, len(s.obs.Health))
	for _, g := range s.obs.Health {
		kind := healthKind(g.State)
		if kind == "" {
			continue
		}
		e := Episode{Kind: kind, Host: g.Host, GPU: g.GPU, Model: g.Model, Since: g.Since, Findings: g.Findings}
		if e.Since.IsZero() {
			e.Since = s.obs.DataTime
		}
		now[e.key()] = true
		old, isOpen := s.open[e.key()]
		if !isOpen {
			if kind == gpuFailed || s.obs.DataTime.Sub(e.Since) >= s.p.DegradedAfter {
				s.fire(e, nil)
			}
			continue
		}
		// it goes on, though history's episodes began again after a gap
		e.Since, e.Notified = old.Since, old.Notified
		s.remind(e, nil)
	}
	for k, e := range s.open {
		if isHealthKind(e.Kind) && !now[k] && !unseen(e.Host) {
			s.resolve(e)
		}
	}
}

// healthTitle is e, a GPU health event, in a few words.
func healthTitle(e Event) string {
	host, gpu := name(e.Host), name(e.GPU)
	state := "failed"
	if e.Kind == gpuDegraded {
		state = "degraded"
	}
	if e.State == Firing {
		return fmt.Sprintf("GPU %s on %s %s", gpu, host, state)
	}
	return fmt.Sprintf("GPU %s on %s no longer %s", gpu, host, state)
}

// healthText is e, a GPU health event, as one sentence or two: the GPU,
// its model, and each finding's words.
func healthText(e Event, loc *time.Location) string {
	host, gpu := name(e.Host), name(e.GPU)
	model := ""
	if e.Model != "" {
		model = " (" + name(e.Model) + ")"
	}
	verb, state, offered := "has failed", "failed", "It is offered to nobody."
	if e.Kind == gpuDegraded {
		verb, state, offered = "is degraded", "degraded", "It is still offered, after the healthy GPUs."
	}
	since := clock(e.Since, loc)
	if e.State != Firing {
		return fmt.Sprintf("GPU %s on %s%s is no longer %s (it was for %s, since %s).", gpu, host, model, state, hours(e.Duration()), since)
	}
	still := ""
	if e.reminder {
		still = "Still: "
	}
	return fmt.Sprintf("%sGPU %s on %s%s %s (for %s, since %s): %s. %s", still, gpu, host, model, verb,
		hours(e.Duration()), since, findingWords(e.Findings), offered)
}

// findingWords are the findings' details, each made printable and cut.
func findingWords(fs []health.Finding) string {
	if len(fs) == 0 {
		return "no finding recorded"
	}
	words := make([]string, 0, len(fs))
	for _, f := range fs {
		w := f.Detail
		if w == "" {
			w = f.Condition
		}
		words = append(words, hosttext.Clip(hosttext.Printable(w), maxDetail))
	}
	return strings.Join(words, "; ")
}

// webhookFinding is a finding as a webhook receives it.
type webhookFinding struct {
	Condition string `json:"condition"`
	Severity  string `json:"severity"`
	Detail    string `json:"detail"`
}

func webhookFindings(fs []health.Finding) []webhookFinding {
	out := make([]webhookFinding, 0, len(fs))
	for _, f := range fs {
		out = append(out, webhookFinding{Condition: name(f.Condition), Severity: name(f.Severity),
			Detail: hosttext.Clip(hosttext.Printable(f.Detail), maxDetail)})
	}
	return out
}

// parseKinds reads [notify] events: kind names, each one of kinds.
func parseKinds(list []string) ([]Kind, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("no kind: want one or more of %s (leave the key out for all)", kindNames())
	}
	var out []Kind
	for _, s := range list {
		k := Kind(strings.ToLower(s))
		if !slices.Contains(kinds, k) {
			return nil, fmt.Errorf("%q is not a kind of event: want %s", s, kindNames())
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// tells reports whether p tells episodes of kind k.
func (p Params) tells(k Kind) bool { return p.Events == nil || slices.Contains(p.Events, k) }

// untold drops the events and episodes of the kinds p does not tell: they
// are never opened, so turning a kind on later fires what is going on then.
func (s *stepper) untold() {
	if s.p.Events == nil {
		return
	}
	s.events = slices.DeleteFunc(s.events, func(e Event) bool { return !s.p.tells(e.Kind) })
	for k, e := range s.next {
		if !s.p.tells(e.Kind) {
			delete(s.next, k)
		}
	}
}
