package notify

import (
	"encoding/json"
	"io"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/inifile"
)

// unreservedRun is one render run for unreserved_use: the clock, the
// hosts down, and the holders seen on GPUs reserved for someone else.
type unreservedRun struct {
	min   int
	hosts int
	down  []DownHost
	use   []UnreservedGPU
}

func (r unreservedRun) obs() Observations {
	return Observations{Now: at(r.min), DataTime: at(r.min), Hosts: r.hosts, Up: r.hosts - len(r.down), Down: r.down, Unreserved: r.use}
}

// using is user holding GPU gpu of host in owner's reservation, which ends
// at minute untilMin (no end date when untilMin is 0).
func using(host, gpu, user, owner string, untilMin int) UnreservedGPU {
	g := UnreservedGPU{Host: host, GPU: gpu, Model: "NVIDIA H100 80GB HBM3", User: user, MemMiB: 12288,
		Reservation: Reserved{Owner: owner, Comment: "ICML"}}
	if untilMin != 0 {
		g.Reservation.Until = at(untilMin)
	}
	return g
}

// toldUnreserved is told with the holder and the reservation's owner.
func toldUnreserved(e Event) string {
	if e.Kind != unreservedUse {
		return told(e)
	}
	return told(e) + " " + strings.Join(e.Users, ",") + " in " + e.Reservation.owner()
}

// runsEvery5 are the runs of minutes from to to, every 5 minutes, each
// seeing use.
func runsEvery5(from, to int, use ...UnreservedGPU) []unreservedRun {
	var rs []unreservedRun
	for m := from; m <= to; m += 5 {
		rs = append(rs, unreservedRun{min: m, hosts: 2, use: use})
	}
	return rs
}

func concatRuns(parts ...[]unreservedRun) []unreservedRun {
	var out []unreservedRun
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Each holder of a GPU during someone else's reservation is one episode:
// it fires when first seen (or once unreserved_after has passed), is
// reminded per remind_after, and resolves once when the holder leaves or
// the reservation ends.
func TestStepUnreserved(t *testing.T) {
	p := Params{HostDownAfter: 15 * time.Minute, RemindAfter: 24 * time.Hour}
	bob := using("gpu01", "3", "bob", "alice", 0)
	carol := using("gpu01", "3", "carol", "alice", 0)
	tests := []struct {
		name  string
		runs  []unreservedRun
		grace time.Duration
		want  []string
	}{
		{
			name: "fires when first seen, resolves once when the holder leaves",
			runs: concatRuns(runsEvery5(0, 60, bob), runsEvery5(65, 90)),
			want: []string{"0 unreserved_use firing gpu01/3 bob in alice", "65 unreserved_use resolved gpu01/3 bob in alice"},
		},
		{
			name: "reminded once a day while it lasts",
			runs: runsEvery5(0, 24*60+30, bob),
			want: []string{"0 unreserved_use firing gpu01/3 bob in alice", "1440 unreserved_use firing again gpu01/3 bob in alice"},
		},
		{
			name: "the reservation ends: resolved",
			runs: concatRuns(runsEvery5(0, 55, using("gpu01", "3", "bob", "alice", 60)), runsEvery5(60, 70)),
			want: []string{"0 unreserved_use firing gpu01/3 bob in alice", "60 unreserved_use resolved gpu01/3 bob in alice"},
		},
		{
			name: "the reservation ends while the host is down: resolved by the clock",
			runs: concatRuns(runsEvery5(0, 20, using("gpu01", "3", "bob", "alice", 60)),
				[]unreservedRun{{min: 25, hosts: 2, down: []DownHost{down("gpu01", 25)}},
					{min: 55, hosts: 2, down: []DownHost{down("gpu01", 25)}},
					{min: 60, hosts: 2, down: []DownHost{down("gpu01", 25)}}}),
			want: []string{"0 unreserved_use firing gpu01/3 bob in alice", "55 host_down firing gpu01",
				"60 unreserved_use resolved gpu01/3 bob in alice"},
		},
		{
			name: "a host down with the holder on it: waits, untold, and goes on",
			runs: concatRuns(runsEvery5(0, 20, bob),
				[]unreservedRun{{min: 25, hosts: 2, down: []DownHost{down("gpu01", 25)}}},
				runsEvery5(30, 40, bob)),
			want: []string{"0 unreserved_use firing gpu01/3 bob in alice"},
		},
		{
			name: "two holders: an episode each, each resolving on its own",
			runs: concatRuns(runsEvery5(0, 10, bob, carol), runsEvery5(15, 20, carol), runsEvery5(25, 30)),
			want: []string{"0 unreserved_use firing gpu01/3 bob in alice", "0 unreserved_use firing gpu01/3 carol in alice",
				"15 unreserved_use resolved gpu01/3 bob in alice", "25 unreserved_use resolved gpu01/3 carol in alice"},
		},
		{
			name: "the reservation passes to another owner: a new episode",
			runs: concatRuns(runsEvery5(0, 10, bob), runsEvery5(15, 20, using("gpu01", "3", "bob", "dave", 0))),
			want: []string{"0 unreserved_use firing gpu01/3 bob in alice",
				"15 unreserved_use resolved gpu01/3 bob in alice", "15 unreserved_use firing gpu01/3 bob in dave"},
		},
		{
			name:  "unreserved_after: told once the holder has stayed that long",
			grace: 30 * time.Minute,
			runs:  runsEvery5(0, 60, bob),
			want:  []string{"30 unreserved_use firing gpu01/3 bob in alice"},
		},
		{
			name:  "unreserved_after: a holder gone before it is never told, nor resolved",
			grace: 30 * time.Minute,
			runs:  concatRuns(runsEvery5(0, 20, bob), runsEvery5(25, 60), runsEvery5(65, 95, bob)),
			want:  []string{"95 unreserved_use firing gpu01/3 bob in alice"},
		},
		{
			name: "two hosts, the widest first, in GPU order",
			runs: []unreservedRun{{min: 0, hosts: 2, use: []UnreservedGPU{using("gpu02", "10", "bob", "alice", 0),
				using("gpu02", "2", "bob", "alice", 0), using("gpu01", "0", "erin", "frank", 0)}}},
			want: []string{"0 unreserved_use firing gpu01/0 erin in frank", "0 unreserved_use firing gpu02/2 bob in alice",
				"0 unreserved_use firing gpu02/10 bob in alice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := p
			p.UnreservedAfter = tt.grace
			_, got := stepRuns(tt.runs, p, toldUnreserved)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// [notify] events without unreserved_use neither tells nor keeps it.
func TestStepUnreservedNotTold(t *testing.T) {
	p := Params{RemindAfter: 24 * time.Hour, Events: []Kind{idleHeld}}
	open, got := stepRuns(runsEvery5(0, 10, using("gpu01", "3", "bob", "alice", 0)), p, toldUnreserved)
	if len(got) != 0 || len(open) != 0 {
		t.Errorf("told %v, kept %d episodes; want nothing", got, len(open))
	}
}

// The message names the host, the GPU, the reservation (owner, end,
// comment) and the holder with their memory; every value from a host or
// the reservations file is made printable.
func TestUnreservedText(t *testing.T) {
	resv := &Reserved{Owner: "alice", Until: time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC), Comment: "ICML\x1b[31m"}
	e := Event{Episode: Episode{Kind: unreservedUse, Host: "gpu01", GPU: "3", Model: "NVIDIA H100 80GB HBM3",
		Users: []string{"bob"}, Since: at(-90), MemMiB: 12288, Reservation: resv}, State: Firing, At: at(0)}
	resolvedEvent := e
	resolvedEvent.State = resolved
	noEnd := e
	noEnd.Reservation = &Reserved{Owner: "alice"}
	tests := []struct{ name, got, want string }{
		{"text", e.Text(time.UTC, false),
			"GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) is reserved for alice until 2026-12-01 18:00 UTC (ICML?[31m), and bob uses it (12.0 GiB in use, seen for 1.5 h, since 2026-11-25 06:30 UTC)."},
		{"no end date", noEnd.Text(time.UTC, false),
			"GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) is reserved for alice with no end date, and bob uses it (12.0 GiB in use, seen for 1.5 h, since 2026-11-25 06:30 UTC)."},
		{"resolved", resolvedEvent.Text(time.UTC, false),
			"GPU 3 on gpu01 is no longer used by bob in alice's reservation (it was for 1.5 h, since 2026-11-25 06:30 UTC)."},
		{"subject", digestSubject([]Event{e}), "[gpumon] GPU 3 on gpu01, reserved for alice, used by bob"},
		{"the holder's mail", subjectOf(userMail("bob", []Event{e}, time.UTC, false)),
			"[gpumon] GPU 3 on gpu01, which you use, is reserved for alice"},
		{"the owner's mail", subjectOf(userMail("alice", []Event{e}, time.UTC, false)),
			"[gpumon] bob uses GPU 3 on gpu01, reserved for you"},
		{"the owner's mail, resolved", subjectOf(userMail("alice", []Event{resolvedEvent}, time.UTC, false)),
			"[gpumon] bob no longer uses GPU 3 on gpu01, reserved for you"},
		{"two", digestSubject([]Event{e, resolvedEvent}),
			"[gpumon] 1 GPU used in another's reservation, 1 reserved GPU no longer used by another"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, tt.got, tt.want)
		}
	}
	var body struct {
		Users       []string
		MemMiB      float64 `json:"memory_mib"`
		Reservation webhookReservation
	}
	if err := json.Unmarshal(WebhookBody(e, Targets{}, time.UTC), &body); err != nil {
		t.Fatal(err)
	}
	want := webhookReservation{Owner: "alice", Until: "2026-12-01T18:00:00Z", Comment: "ICML?[31m"}
	if diff := cmp.Diff(want, body.Reservation); diff != "" || body.MemMiB != 12288 || len(body.Users) != 1 {
		t.Errorf("webhook: users %v, memory %v, reservation (-want +got):\n%s", body.Users, body.MemMiB, diff)
	}
}

func subjectOf(subject, _ string) string { return subject }

// The owner and the holder are each mailed as themselves (mail_users),
// besides the admins: the holder while it fires, the owner also when it
// resolves. One mail per user per run, whatever it tells them.
func TestRouteUnreserved(t *testing.T) {
	resv := &Reserved{Owner: "alice", Comment: "ICML"}
	fire := func(host, gpu, user string) Event {
		return Event{Episode: Episode{Kind: unreservedUse, Host: host, GPU: gpu, Users: []string{user}, Since: at(-10),
			Reservation: resv}, State: Firing, At: at(0)}
	}
	over := fire("gpu01", "1", "carol")
	over.State = resolved
	events := []Event{
		{Episode: Episode{Kind: idleHeld, Host: "gpu01", GPU: "0", Users: []string{"bob"}, Since: at(-130)}, State: Firing, At: at(0)},
		fire("gpu01", "3", "bob"),
		over,
		fire("gpu02", "0", "root"),
	}
	tg := Targets{MailTo: []string{"admins@example.org"}, UserDomain: "example.org"}
	items, problems := Route(events, tg, at(0), time.UTC, "monitor")
	var got []string
	for _, it := range items {
		got = append(got, it.Target+" | "+it.Summary)
	}
	want := []string{
		"mail admins@example.org | [gpumon] 1 GPU idle-held, 2 GPUs used in others' reservations, 1 reserved GPU no longer used by another",
		"mail alice@example.org | [gpumon] 3 notices about your GPUs and reservations",
		"mail bob@example.org | [gpumon] 2 notices about your GPUs and reservations",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
	wantProblems := []string{`user "root" is not mailed about GPU 0 on gpu02: root is not a person; the admins are told`}
	if diff := cmp.Diff(wantProblems, problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	alice := mailText(t, items[1].Body)
	for _, s := range []string{"GPUs reserved for you are, or were, used by someone else", "and bob uses it",
		"no longer used by carol", "and root uses it"} {
		if !strings.Contains(alice, s) {
			t.Errorf("alice's mail lacks %q:\n%s", s, alice)
		}
	}
	bob := mailText(t, items[2].Body)
	for _, s := range []string{"held idle by bob", "your processes use GPUs reserved for someone else", "reserved for alice"} {
		if !strings.Contains(bob, s) {
			t.Errorf("bob's mail lacks %q:\n%s", s, bob)
		}
	}
}

// mailText is a mail's body, decoded.
func mailText(t testing.TB, raw []byte) string {
	t.Helper()
	msg, err := mail.ReadMessage(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil {
		t.Fatal(err)
	}
	return string(decoded)
}

// [notify] unreserved_after: 0 unless set, 0 to 30d.
func TestConfigUnreservedAfter(t *testing.T) {
	tests := []struct {
		ini  string
		want time.Duration
		err  string
	}{
		{"[notify]\n", 0, ""},
		{"[notify]\nunreserved_after = 10m\n", 10 * time.Minute, ""},
		{"[notify]\nunreserved_after = 31d\n", 0, "unreserved_after"},
		{"[notify]\nunreserved_after = soon\n", 0, "unreserved_after"},
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
					t.Errorf("error %v, want one naming %q", err, tt.err)
				}
			case err != nil:
				t.Fatal(err)
			case c.Params.UnreservedAfter != tt.want:
				t.Errorf("unreserved_after %s, want %s", c.Params.UnreservedAfter, tt.want)
			}
		})
	}
}

// A reservation's owner and comment, and the holder, cannot ping a Slack
// channel, nor add a mail header or recipient.
func TestUnreservedHostileNames(t *testing.T) {
	e := Event{Episode: Episode{Kind: unreservedUse, Host: "gpu01", GPU: "3", Users: []string{"<!here>"}, Since: at(-5),
		Reservation: &Reserved{Owner: "alice\r\nBcc: x@evil.example", Comment: "<!channel> <https://evil.example|click>"}},
		State: Firing, At: at(0)}
	var body struct{ Text string }
	if err := json.Unmarshal(WebhookBody(e, Targets{}, time.UTC), &body); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(body.Text, "<>") {
		t.Errorf("webhook text holds < or >: %s", body.Text)
	}
	items, _ := Route([]Event{e}, Targets{MailTo: []string{"admins@example.org"}}, at(0), time.UTC, "monitor")
	msg, err := mail.ReadMessage(strings.NewReader(string(items[0].Body)))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Header["Bcc"]) > 0 || strings.Contains(msg.Header.Get("To"), "evil") {
		t.Errorf("a name added a header or recipient: %v", msg.Header)
	}
}
