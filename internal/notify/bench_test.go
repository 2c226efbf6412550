package notify

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A render's notification step at 1,000 hosts: 2,000 GPUs idle-held (of
// 8,000) and 50 hosts down, to a webhook, the admins and 100 holders. The
// first run fires everything (a digest per target); a steady run, the
// same observations five minutes later, tells nothing. Sending is not
// measured (it is the receivers' time).
func BenchmarkAdvance(b *testing.B) {
	obs := Observations{Hosts: 1000, Up: 950}
	for h := range 1000 {
		if h < 50 {
			obs.Down = append(obs.Down, DownHost{Host: fmt.Sprintf("gpu%04d", h), Since: at(-60)})
			continue
		}
		for g := range 2 {
			obs.IdleHeld = append(obs.IdleHeld, IdleGPU{Host: fmt.Sprintf("gpu%04d", h), GPU: fmt.Sprint(g),
				Model: "NVIDIA H100 80GB HBM3", Users: []string{fmt.Sprintf("user%03d", h%100)}, Since: at(-300), MemMiB: 70000})
		}
	}
	tg := Targets{Webhooks: []string{"https://hooks.example.org/x"}, MailTo: []string{"admins@example.org"}, UserDomain: "example.org"}
	benchAdvance(b, obs, tg, func(n int) bool { return n > 0 })
}

// benchAdvance times Advance over obs, in a first run (which fires
// everything: wantFirst says whether its n events are right) and a steady
// one, the same observations five minutes later (which tells nothing).
func benchAdvance(b *testing.B, obs Observations, tg Targets, wantFirst func(n int) bool) {
	route := func(ev []Event) []Item {
		items, _ := Route(ev, tg, obs.Now, time.UTC, "monitor")
		return items
	}
	for _, name := range []string{"first", "steady"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				box := newOutbox(b)
				o := obs
				o.Now, o.DataTime = at(0), at(0)
				if name == "steady" {
					if _, err := box.Advance(context.Background(), o, DefaultParams, route); err != nil {
						b.Fatal(err)
					}
					o.Now, o.DataTime = at(5), at(5)
				}
				b.StartTimer()
				events, err := box.Advance(context.Background(), o, DefaultParams, route)
				if err != nil {
					b.Fatal(err)
				}
				if name == "first" && !wantFirst(len(events)) || name == "steady" && len(events) > 0 {
					b.Fatalf("%s run: %d events", name, len(events))
				}
			}
		})
	}
}
