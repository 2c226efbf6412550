package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/inifile"
)

// healthRun is one render run as the health episodes see it: the hosts
// polled and answering, those down, the GPUs failed or degraded.
type healthRun struct {
	min   int
	hosts int
	down  []DownHost
	gpus  []GPUHealth
}

func (r healthRun) obs() Observations {
	return Observations{Now: at(r.min), DataTime: at(r.min), Hosts: r.hosts, Up: r.hosts - len(r.down), Down: r.down, Health: r.gpus}
}

// ill is GPU gpu on host in state, since minute sinceMin, with a finding
// of each condition.
func ill(host, gpu, state string, sinceMin int, conditions ...string) GPUHealth {
	g := GPUHealth{Host: host, GPU: gpu, Model: "NVIDIA H100 80GB HBM3", State: state, Since: at(sinceMin)}
	for _, c := range conditions {
		g.Findings = append(g.Findings, health.Finding{Condition: c, Severity: state, Detail: c + " seen"})
	}
	return g
}

// Each GPU is one gpu_failed or gpu_degraded episode while it is in that
// state: fired once, reminded per remind_after, resolved when it clears.
func TestStepHealth(t *testing.T) {
	p := Params{HostDownAfter: 15 * time.Minute, RemindAfter: 24 * time.Hour}
	failed := func(sinceMin int) GPUHealth { return ill("gpu01", "3", health.Failed, sinceMin, health.RemapFailure) }
	degraded := func(sinceMin int) GPUHealth { return ill("gpu01", "3", health.Degraded, sinceMin, health.RemapPending) }
	every5 := func(from, to int, f func(m int) healthRun) []healthRun {
		var rs []healthRun
		for m := from; m <= to; m += 5 {
			rs = append(rs, f(m))
		}
		return rs
	}
	tests := []struct {
		name string
		p    Params
		runs []healthRun
		want []string
	}{
		{
			name: "failed for a day and a half: fired once, reminded once, resolved once",
			p:    p,
			runs: append(every5(0, 36*60, func(m int) healthRun { return healthRun{min: m, hosts: 1, gpus: []GPUHealth{failed(0)}} }),
				healthRun{min: 36*60 + 5, hosts: 1}, healthRun{min: 36*60 + 10, hosts: 1}),
			want: []string{"0 gpu_failed firing gpu01/3", "1440 gpu_failed firing again gpu01/3", "2165 gpu_failed resolved gpu01/3"},
		},
		{
			name: "degraded, then failed, then degraded again",
			p:    p,
			runs: []healthRun{
				{min: 0, hosts: 1, gpus: []GPUHealth{degraded(0)}},
				{min: 5, hosts: 1, gpus: []GPUHealth{degraded(0)}},
				{min: 10, hosts: 1, gpus: []GPUHealth{failed(10)}},
				{min: 15, hosts: 1, gpus: []GPUHealth{failed(10)}},
				{min: 20, hosts: 1, gpus: []GPUHealth{degraded(20)}},
			},
			want: []string{
				"0 gpu_degraded firing gpu01/3",
				"10 gpu_failed firing gpu01/3", "10 gpu_degraded resolved gpu01/3",
				"20 gpu_failed resolved gpu01/3", "20 gpu_degraded firing gpu01/3",
			},
		},
		{
			name: "its findings change, its state does not: nothing new",
			p:    p,
			runs: []healthRun{
				{min: 0, hosts: 1, gpus: []GPUHealth{ill("gpu01", "3", health.Degraded, 0, health.HWSlowdown)}},
				{min: 5, hosts: 1, gpus: []GPUHealth{ill("gpu01", "3", health.Degraded, 0, health.HWSlowdown, health.RemapPending)}},
				{min: 10, hosts: 1, gpus: []GPUHealth{ill("gpu01", "3", health.Degraded, 5, health.RemapPending)}},
			},
			want: []string{"0 gpu_degraded firing gpu01/3"},
		},
		{
			name: "its host down: it waits, untold; back still failed, it goes on",
			p:    p,
			runs: []healthRun{
				{min: 0, hosts: 2, gpus: []GPUHealth{failed(0)}},
				{min: 5, hosts: 2, down: []DownHost{down("gpu01", 5)}},
				{min: 30, hosts: 2, down: []DownHost{down("gpu01", 5)}},
				{min: 35, hosts: 2, gpus: []GPUHealth{failed(35)}},
				{min: 40, hosts: 2},
			},
			want: []string{"0 gpu_failed firing gpu01/3", "30 host_down firing gpu01", "35 host_down resolved gpu01", "40 gpu_failed resolved gpu01/3"},
		},
		{
			name: "every host down: it waits",
			p:    p,
			runs: []healthRun{
				{min: 0, hosts: 1, gpus: []GPUHealth{failed(0)}},
				{min: 5, hosts: 1, down: []DownHost{down("gpu01", 5)}},
				{min: 10, hosts: 1, gpus: []GPUHealth{failed(10)}},
			},
			want: []string{"0 gpu_failed firing gpu01/3"},
		},
		{
			name: "a host no longer polled resolves",
			p:    p,
			runs: []healthRun{{min: 0, hosts: 2, gpus: []GPUHealth{failed(0)}}, {min: 5, hosts: 1}},
			want: []string{"0 gpu_failed firing gpu01/3", "5 gpu_failed resolved gpu01/3"},
		},
		{
			name: "failed before degraded, GPUs in number order",
			p:    p,
			runs: []healthRun{{min: 0, hosts: 1, gpus: []GPUHealth{
				ill("gpu01", "10", health.Degraded, 0, health.HWThermal), ill("gpu01", "2", health.Degraded, 0, health.HWThermal),
				ill("gpu01", "7", health.Failed, 0, health.Lost)}}},
			want: []string{"0 gpu_failed firing gpu01/7", "0 gpu_degraded firing gpu01/2", "0 gpu_degraded firing gpu01/10"},
		},
		{
			name: "degraded_after: a slowdown that comes and goes is not told",
			p:    withDegradedAfter(p, time.Hour),
			runs: every5(0, 180, func(m int) healthRun {
				if m%20 == 15 {
					return healthRun{min: m, hosts: 1}
				}
				return healthRun{min: m, hosts: 1, gpus: []GPUHealth{ill("gpu01", "3", health.Degraded, m-m%20, health.HWSlowdown)}}
			}),
			want: nil,
		},
		{
			name: "degraded_after: degraded for an hour is told then; failed is told at once",
			p:    withDegradedAfter(p, time.Hour),
			runs: append(every5(0, 90, func(m int) healthRun {
				return healthRun{min: m, hosts: 1, gpus: []GPUHealth{degraded(0), ill("gpu02", "0", health.Failed, 0, health.Lost)}}
			}), healthRun{min: 95, hosts: 1}),
			want: []string{"0 gpu_failed firing gpu02/0", "60 gpu_degraded firing gpu01/3",
				"95 gpu_failed resolved gpu02/0", "95 gpu_degraded resolved gpu01/3"},
		},
		{
			name: "gpu_degraded turned off: only gpu_failed is told",
			p:    Params{HostDownAfter: 15 * time.Minute, Events: []Kind{gpuFailed, hostDown}},
			runs: []healthRun{
				{min: 0, hosts: 1, gpus: []GPUHealth{degraded(0)}},
				{min: 5, hosts: 1, gpus: []GPUHealth{failed(5)}},
				{min: 10, hosts: 1, gpus: []GPUHealth{degraded(10)}},
				{min: 15, hosts: 1},
			},
			want: []string{"5 gpu_failed firing gpu01/3", "10 gpu_failed resolved gpu01/3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, got := stepRuns(tt.runs, tt.p, told)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			for _, e := range open {
				if !tt.p.tells(e.Kind) {
					t.Errorf("an episode of %s, which is not told, is kept open", e.Kind)
				}
			}
		})
	}
}

// A kind turned on later fires what is going on then: nothing of it was
// kept while it was off.
func TestKindTurnedOnLater(t *testing.T) {
	g := ill("gpu01", "0", health.Degraded, 0, health.HWSlowdown)
	obs := healthRun{min: 0, hosts: 1, gpus: []GPUHealth{g}}.obs()
	open, events := step(map[string]Episode{}, obs, Params{Events: []Kind{idleHeld}})
	if len(open) != 0 || len(events) != 0 {
		t.Fatalf("with gpu_degraded off: open %v, events %v", open, events)
	}
	obs = healthRun{min: 5, hosts: 1, gpus: []GPUHealth{g}}.obs()
	if _, events = step(open, obs, Params{}); len(events) != 1 || told(events[0]) != "5 gpu_degraded firing gpu01/0" {
		t.Errorf("turned on: %v", events)
	}
}

// A health message names the host, the GPU, its model and each finding's
// words; a reminder and a resolution say for how long.
func TestHealthText(t *testing.T) {
	e := Event{Episode: Episode{Kind: gpuFailed, Host: "gpu01", GPU: "3", Model: "NVIDIA H100 80GB HBM3", Since: at(-90),
		Findings: []health.Finding{
			{Condition: health.RemapFailure, Severity: health.Failed, Detail: "a row remapping failed: the GPU needs service"},
			{Condition: health.ECCUncorrected, Severity: health.Degraded, Detail: "3 uncorrectable ECC errors since the driver loaded"},
		}}, State: Firing, At: at(0)}
	tests := []struct {
		name        string
		kind        Kind
		state       State
		reminder    bool
		title, text string
	}{
		{"failed", gpuFailed, Firing, false, "GPU 3 on gpu01 failed",
			"GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) has failed (for 1.5 h, since 2026-11-25 06:30 UTC): a row remapping failed: the GPU needs service; 3 uncorrectable ECC errors since the driver loaded. It is offered to nobody."},
		{"failed, reminded", gpuFailed, Firing, true, "GPU 3 on gpu01 failed",
			"Still: GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) has failed (for 1.5 h, since 2026-11-25 06:30 UTC): a row remapping failed: the GPU needs service; 3 uncorrectable ECC errors since the driver loaded. It is offered to nobody."},
		{"no longer failed", gpuFailed, resolved, false, "GPU 3 on gpu01 no longer failed",
			"GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) is no longer failed (it was for 1.5 h, since 2026-11-25 06:30 UTC)."},
		{"degraded", gpuDegraded, Firing, false, "GPU 3 on gpu01 degraded",
			"GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) is degraded (for 1.5 h, since 2026-11-25 06:30 UTC): a row remapping failed: the GPU needs service; 3 uncorrectable ECC errors since the driver loaded. It is still offered, after the healthy GPUs."},
		{"no longer degraded", gpuDegraded, resolved, false, "GPU 3 on gpu01 no longer degraded",
			"GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) is no longer degraded (it was for 1.5 h, since 2026-11-25 06:30 UTC)."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e
			e.Kind, e.State, e.reminder = tt.kind, tt.state, tt.reminder
			if got := e.title(); got != tt.title {
				t.Errorf("title %q, want %q", got, tt.title)
			}
			if got := e.Text(time.UTC, false); got != tt.text {
				t.Errorf("text:\n got %s\nwant %s", got, tt.text)
			}
		})
	}
}

// A lost GPU's detail is the host's own text: in a message it is printable,
// cut, and cannot ping a channel; the webhook carries each finding.
func TestHealthHostileDetail(t *testing.T) {
	detail := "Unable to determine the device handle <!channel>\n\x1b[31m" + strings.Repeat("x", 1000)
	e := Event{Episode: Episode{Kind: gpuFailed, Host: "gpu01", GPU: "0000:3B:00.0", Since: at(0),
		Findings: []health.Finding{{Condition: health.Lost, Severity: health.Failed, Detail: detail}}}, State: Firing, At: at(0)}
	var body struct {
		Text     string
		Event    string
		Findings []webhookFinding
	}
	if err := json.Unmarshal(WebhookBody(e, Targets{}, time.UTC), &body); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(body.Text, "<!channel>") || strings.ContainsAny(body.Text, "\n\x1b") || len(body.Text) > 600 {
		t.Errorf("webhook text: %q", body.Text)
	}
	if body.Event != "gpu_failed" || len(body.Findings) != 1 || body.Findings[0].Condition != health.Lost ||
		strings.ContainsAny(body.Findings[0].Detail, "\n\x1b") || len(body.Findings[0].Detail) > maxDetail {
		t.Errorf("webhook fields: %+v", body)
	}
	mail := string(Mail([]string{"a@example.org"}, "", "[gpumon] "+e.title(), e.Text(time.UTC, false), "", "mon", at(0)))
	if strings.Contains(mail, "\x1b") {
		t.Errorf("mail holds an escape:\n%s", mail)
	}
}

// [notify] events chooses the kinds told; a kind it does not know is an
// error naming the key and the kinds there are.
func TestConfigEvents(t *testing.T) {
	tests := []struct {
		value string
		want  []Kind
		err   string
	}{
		{"gpu_failed, host_down, all_down", []Kind{gpuFailed, hostDown, allDown}, ""},
		{"GPU_Failed,gpu_failed", []Kind{gpuFailed}, ""},
		{"unreserved_use, idle_held", []Kind{unreservedUse, idleHeld}, ""},
		{"gpu_broken", nil, `"gpu_broken" is not a kind of event: want idle_held, host_down, all_down, gpu_failed, gpu_degraded, unreserved_use`},
		{"", nil, "no kind: want one or more of idle_held, host_down, all_down, gpu_failed, gpu_degraded, unreserved_use (leave the key out for all)"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			f, err := inifile.Read(strings.NewReader("[notify]\nevents = "+tt.value+"\n"), "config.ini")
			if err != nil {
				t.Fatal(err)
			}
			c := DefaultConfig()
			err = ReadConfig(f, &c, true)
			switch {
			case tt.err == "" && err != nil:
				t.Fatal(err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want %q", err, tt.err)
			}
			if diff := cmp.Diff(tt.want, c.Params.Events); tt.err == "" && diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
	if c := DefaultConfig(); c.Params.Events != nil {
		t.Errorf("by default the events are %v, want every kind (nil)", c.Params.Events)
	}
}

func withDegradedAfter(p Params, d time.Duration) Params {
	p.DegradedAfter = d
	return p
}

// [notify] degraded_after: 1h unless set, 0 to 30d.
func TestConfigDegradedAfter(t *testing.T) {
	tests := []struct {
		ini  string
		want time.Duration
		err  string
	}{
		{"[notify]\n", time.Hour, ""},
		{"[notify]\ndegraded_after = 0\n", 0, ""},
		{"[notify]\ndegraded_after = 1d6h\n", 30 * time.Hour, ""},
		{"[notify]\ndegraded_after = 31d\n", 0, "a duration from 0 to 30d"},
	}
	for _, tt := range tests {
		t.Run(tt.ini, func(t *testing.T) {
			f, err := inifile.Read(strings.NewReader(tt.ini), "config.ini")
			if err != nil {
				t.Fatal(err)
			}
			c := DefaultConfig()
			err = ReadConfig(f, &c, true)
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error %v, want %q", err, tt.err)
				}
			case err != nil:
				t.Fatal(err)
			case c.Params.DegradedAfter != tt.want:
				t.Errorf("degraded_after %s, want %s", c.Params.DegradedAfter, tt.want)
			}
		})
	}
}

// The notification step at 1,000 hosts with 1 GPU in 100 failed and 2 in
// 100 degraded (of 8,000): the first run fires them all (one digest per
// target), a steady run tells nothing.
func BenchmarkAdvanceHealth(b *testing.B) {
	obs := Observations{Hosts: 1000, Up: 1000}
	for h := range 1000 {
		host := fmt.Sprintf("gpu%04d", h)
		switch h % 100 {
		case 0, 1, 2, 3, 4, 5, 6, 7:
			obs.Health = append(obs.Health, ill(host, "0", health.Failed, -120, health.RemapFailure, health.RemapPending))
		case 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25:
			obs.Health = append(obs.Health, ill(host, "1", health.Degraded, -120, health.ECCUncorrected))
		}
	}
	tg := Targets{Webhooks: []string{"https://hooks.example.org/x"}, MailTo: []string{"admins@example.org"}}
	benchAdvance(b, obs, tg, func(n int) bool { return n == len(obs.Health) })
}
