package notify

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var hook = Targets{Webhooks: []string{"https://hooks.example.org/x"}}

// pending is how many messages wait in box, for all targets.
func pending(t testing.TB, box *Outbox) int {
	t.Helper()
	p, err := box.pending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range p {
		n += c
	}
	return n
}

func toldAll(events []Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, told(e))
	}
	return out
}

// Recording a snapshot and advancing the outbox are two transactions: a
// render killed between them (or whose Advance failed) has told nothing of
// its snapshot. Advance works from the observations, not from what was
// recorded since it last ran: the next run tells what is true then, and a
// run that reads the same snapshot again (cron's next render, when fetch
// wrote nothing new) tells nothing twice.
func TestAdvanceAfterAKilledRun(t *testing.T) {
	box := newOutbox(t)
	gpu := idle("gpu01", "0", -120, "alice")
	advance(t, box, hook, 0)
	// the run at minute 5 recorded the GPU idle-held, and was killed before
	// it advanced the outbox
	runs := []struct {
		min  int
		want []string
	}{
		{10, []string{"10 idle_held firing gpu01/0"}},
		{10, nil}, // the same snapshot again
		{10, nil},
		{15, nil},
	}
	for _, r := range runs {
		if diff := cmp.Diff(r.want, toldAll(advance(t, box, hook, r.min, gpu))); diff != "" {
			t.Errorf("run at minute %d told (-want +got):\n%s", r.min, diff)
		}
	}
	if n := pending(t, box); n != 1 {
		t.Errorf("%d messages queued, want the one", n)
	}
}

// A render killed inside Advance leaves the episodes and the outbox as
// they were: the next run tells it all, once.
func TestAdvanceKilledMidway(t *testing.T) {
	box := newOutbox(t)
	gpus := []IdleGPU{idle("gpu01", "0", -120, "alice"), idle("gpu01", "1", -120, "bob")}
	obs := run{min: 0, hosts: 2, up: 2, idle: gpus}.obs()
	ctx, kill := context.WithCancel(context.Background())
	_, err := box.Advance(ctx, obs, DefaultParams, func(ev []Event) []Item {
		items, _ := Route(ev, hook, obs.Now, time.UTC, "monitor")
		kill() // as the messages are queued
		return items
	})
	if err == nil {
		t.Fatal("Advance went on after its context ended")
	}
	if n := pending(t, box); n != 0 {
		t.Errorf("%d messages queued by the killed run", n)
	}
	want := []string{"0 idle_held firing gpu01/0", "0 idle_held firing gpu01/1"}
	if diff := cmp.Diff(want, toldAll(advance(t, box, hook, 0, gpus...))); diff != "" {
		t.Errorf("the next run told (-want +got):\n%s", diff)
	}
	if n := pending(t, box); n != 2 {
		t.Errorf("%d messages queued, want 2", n)
	}
}
