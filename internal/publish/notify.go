package publish

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/notify"
)

// tell sends what the history says, once the files are written: sending
// never delays the page. What a target refuses stays in the outbox, in the
// history's own database, for the next run; the error says so.
func tell(ctx context.Context, cfg Config, rec *recording, run Run) error {
	nc := cfg.Notify
	if nc.Targets.Empty() || rec.store == nil || rec.summary == nil {
		return nil
	}
	if !rec.summary.Newest.Equal(run.Cluster.DataTime) {
		// older data than the history's newest: what it shows is not now
		return nil
	}
	box, err := notify.OpenOutbox(ctx, rec.store.DB())
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	sender, _ := os.Hostname()
	obs := observations(run, rec, cfg.History.Params.IdleUtilPct)
	var problems []string
	_, err = box.Advance(ctx, obs, nc.Params, func(events []notify.Event) []notify.Item {
		items, p := notify.Route(events, nc.Targets, run.Now, run.Loc, sender)
		problems = p
		return items
	})
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	for _, p := range problems {
		run.logf("notify: %s", p)
	}
	if err := drop(ctx, box, nc, run); err != nil {
		return err
	}
	results, err := notify.Deliver(ctx, box, Senders(nc), run.Now)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return deliveryErrors(results, run)
}

// drop drops the messages of targets no longer configured, and those a
// target refused for MaxOutboxAge, saying so.
func drop(ctx context.Context, box *notify.Outbox, nc notify.Config, run Run) error {
	gone, old, err := box.Drop(ctx, nc.Targets.Configured, run.Now, notify.MaxOutboxAge)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	for _, t := range slices.Sorted(maps.Keys(gone)) {
		run.logf("notify: %d messages for %s dropped: it is no longer in [notify]", gone[t], notify.TargetName(t))
	}
	for _, t := range slices.Sorted(maps.Keys(old)) {
		run.logf("notify: %d messages for %s dropped: it refused them for %s", old[t], notify.TargetName(t), "7 days")
	}
	return nil
}

// deliveryErrors is an error per target that failed, and one for all
// those out of time.
func deliveryErrors(results []notify.Result, run Run) error {
	var failed []error
	late, lateWaiting := 0, 0
	for _, r := range results {
		for _, d := range r.Dropped {
			run.logf("notify: %s refused a message, which is dropped (sending it again cannot help): %s", notify.TargetName(r.Target), d)
		}
		switch {
		case r.Err == nil:
		case errors.Is(r.Err, notify.ErrOutOfTime):
			late++
			lateWaiting += r.Waiting
		default:
			what := ""
			if r.Failed != "" {
				what = " (" + r.Failed + ")"
			}
			failed = append(failed, fmt.Errorf("notify: %s%s: %v; %d messages wait for the next run",
				notify.TargetName(r.Target), what, r.Err, r.Waiting))
		}
	}
	if late > 0 {
		failed = append(failed, fmt.Errorf("notify: %d targets not reached within %s: %d messages wait for the next run",
			late, notify.Budget, lateWaiting))
	}
	if len(failed) == 0 {
		return nil
	}
	last := len(failed) - 1
	failed[last] = cli.WithHint(failed[last], "`render -notify-test` tries every target and says what each answered")
	return cli.Join(failed...)
}

// Senders are the ways notify reaches targets, as nc configures them.
func Senders(nc notify.Config) notify.Senders {
	return notify.Senders{"webhook": notify.NewWebhook(), "mail": &notify.Sendmail{Argv: nc.Sendmail}}
}

// observations are the run's snapshot as notify sees it, with each
// idle-held GPU's model and its holder's commands from the cluster, and
// the GPU's other holders who use it (from the history's snapshot); and
// the holders of GPUs reserved for someone else, from the cluster.
func observations(run Run, rec *recording, idleLimitPct float64) notify.Observations {
	sum := rec.summary
	obs := notify.Observations{Now: run.Now, DataTime: sum.Newest, Hosts: len(run.Cluster.Hosts)}
	type ref struct{ host, gpu string }
	gpus := map[ref]*cluster.GPU{}
	for _, h := range run.Cluster.Hosts {
		if h.Up() {
			obs.Up++
		}
		for _, g := range h.GPUs {
			gpus[ref{h.Name, g.ID()}] = g
		}
	}
	working := map[ref][]string{}
	for _, h := range rec.snap.Hosts {
		for i := range h.GPUs {
			if w := workingHolders(&h.GPUs[i], idleLimitPct); len(w) > 0 {
				working[ref{h.Name, h.GPUs[i].ID}] = w
			}
		}
	}
	for _, sp := range sum.IdleHeld {
		r := ref{sp.Host, sp.GPU}
		g := notify.IdleGPU{Host: sp.Host, GPU: sp.GPU, Users: sp.Users, Since: time.Unix(sp.Start, 0), MemMiB: sp.MemMiB}
		if cg := gpus[r]; cg != nil {
			g.Model, g.Commands = cg.Name, holderCommands(cg, sp.Users)
		}
		g.Working = slices.DeleteFunc(slices.Clone(working[r]), func(u string) bool { return slices.Contains(sp.Users, u) })
		obs.IdleHeld = append(obs.IdleHeld, g)
	}
	obs.HeldIdle = heldIdleNow(rec.snap, idleLimitPct)
	obs.Health = healthNow(rec.snap, sum.Health)
	obs.Unreserved = unreservedNow(run.Cluster)
	for name, h := range sum.Down {
		obs.Down = append(obs.Down, notify.DownHost{Host: name, Since: time.Unix(h.DownSince, 0)})
	}
	slices.SortFunc(obs.Down, func(a, b notify.DownHost) int { return strings.Compare(a.Host, b.Host) })
	return obs
}

// holderCommands are the commands of g's processes that users hold it with.
func holderCommands(g *cluster.GPU, users []string) []string {
	var out []string
	for _, p := range g.Procs {
		if p.Holds() && p.Command != "" && slices.Contains(users, p.User) {
			out = append(out, p.Command)
		}
	}
	return out
}

// workingHolders are g's holders who are not idle on it: on a busy GPU,
// those who use it (or whose share pmon could not tell).
func workingHolders(g *history.GPU, limitPct float64) []string {
	idle := g.IdleHolders(limitPct)
	var out []string
	for _, u := range g.Users() {
		if !slices.Contains(idle, u) {
			out = append(out, u)
		}
	}
	return out
}

// heldIdleNow is the holders idle in this snapshot, one each, however
// short their spell, by history's own test: an episode goes on across a
// gap in the data as history's spells do.
func heldIdleNow(snap *history.Snapshot, limitPct float64) []notify.IdleGPU {
	var out []notify.IdleGPU
	for _, h := range snap.Hosts {
		if !h.Up {
			continue
		}
		for _, g := range h.GPUs {
			for _, u := range g.IdleHolders(limitPct) {
				out = append(out, notify.IdleGPU{Host: h.Name, GPU: g.ID, Users: []string{u}})
			}
		}
	}
	return out
}

func (run Run) logf(format string, args ...any) {
	if run.Log != nil {
		fmt.Fprintf(run.Log, "%s: "+format+"\n", append([]any{run.Prog}, args...)...)
	}
}
