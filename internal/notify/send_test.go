package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/history"
)

// newOutbox is an outbox in a new history database, as render uses it.
func newOutbox(t testing.TB) *Outbox {
	t.Helper()
	store, err := history.Open(filepath.Join(t.TempDir(), "history.db"), history.DefaultParams, 14*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	box, err := OpenOutbox(context.Background(), store.DB())
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// receiver is a webhook receiver on 127.0.0.1 that answers with answer(n)
// for its n-th request (from 0) and keeps the bodies it accepted.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	accepted []map[string]any
}

func newReceiver(t testing.TB, answer func(n int, w http.ResponseWriter, r *http.Request) bool) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		n := rc.requests
		rc.requests++
		rc.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		if !answer(n, w, r) {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil || r.Method != http.MethodPost ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d: %s %s %q (%v)", n, r.Method, r.Header.Get("Content-Type"), body, err)
		}
		rc.mu.Lock()
		rc.accepted = append(rc.accepted, m)
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) texts() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for _, m := range rc.accepted {
		out = append(out, m["text"].(string))
	}
	return out
}

func ok(int, http.ResponseWriter, *http.Request) bool { return true }

// advance runs step with the given idle GPUs and queues the messages.
func advance(t testing.TB, box *Outbox, targets Targets, min int, idle ...IdleGPU) []Event {
	t.Helper()
	obs := run{min: min, hosts: 2, up: 2, idle: idle}.obs()
	events, err := box.Advance(context.Background(), obs, DefaultParams, func(ev []Event) []Item {
		items, _ := Route(ev, targets, obs.Now, time.UTC, "monitor")
		return items
	})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func deliver(t testing.TB, ctx context.Context, box *Outbox, s Senders) []Result {
	t.Helper()
	res, err := Deliver(ctx, box, s, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A receiver that answers 500 loses nothing: each run tries again, in
// order, and every message arrives once.
func TestDeliverRetriesInOrder(t *testing.T) {
	down := true
	var mu sync.Mutex
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if down {
			http.Error(w, "receiver overloaded", http.StatusInternalServerError)
			return false
		}
		return true
	})
	box := newOutbox(t)
	tg := Targets{Webhooks: []string{rc.URL + "/hooks/secret-key"}}
	s := Senders{"webhook": NewWebhook()}
	advance(t, box, tg, 0, idle("gpu01", "0", -120, "alice"), idle("gpu01", "1", -120, "bob"))
	res := deliver(t, context.Background(), box, s)
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "answered 500 Internal Server Error: receiver overloaded") {
		t.Errorf("error %v, want the receiver's answer", res[0].Err)
	}
	if res[0].Waiting != 2 || res[0].Sent != 0 {
		t.Errorf("sent %d, waiting %d; want 0 and 2", res[0].Sent, res[0].Waiting)
	}
	if rc.requests != 1 {
		t.Errorf("%d requests: a refused message holds back the ones after it", rc.requests)
	}
	// the GPU 1 is released while the receiver is still down
	advance(t, box, tg, 5, idle("gpu01", "0", -120, "alice"))
	deliver(t, context.Background(), box, s)
	mu.Lock()
	down = false
	mu.Unlock()
	advance(t, box, tg, 10, idle("gpu01", "0", -120, "alice"))
	res = deliver(t, context.Background(), box, s)
	if res[0].Err != nil || res[0].Sent != 3 || res[0].Waiting != 0 {
		t.Errorf("after recovery: %+v", res[0])
	}
	deliver(t, context.Background(), box, s) // nothing left: nothing sent twice
	want := []string{
		"GPU 0 on gpu01 has been held idle by alice for 2.0 h (since 2026-11-25 06:00 UTC), 68.4 GiB in use.",
		"GPU 1 on gpu01 has been held idle by bob for 2.0 h (since 2026-11-25 06:00 UTC), 68.4 GiB in use.",
		"GPU 1 on gpu01 is no longer idle-held by bob (it was for 2.1 h, since 2026-11-25 06:00 UTC).",
	}
	if diff := cmp.Diff(want, rc.texts()); diff != "" {
		t.Errorf("received (-want +got):\n%s", diff)
	}
}

// A webhook that hangs costs one run its budget, no more; the message
// waits for the next run. One that redirects is not followed.
func TestDeliverHangsAndRedirects(t *testing.T) {
	release := make(chan struct{})
	hang := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return false
	})
	defer close(release)
	var loop *receiver
	loop = newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Location", "/again") // relative: resolved against the request
		w.WriteHeader(http.StatusTemporaryRedirect)
		return false
	})
	good := newReceiver(t, ok)
	box := newOutbox(t)
	tg := Targets{Webhooks: []string{hang.URL + "/h", loop.URL + "/r", good.URL + "/g"}}
	advance(t, box, tg, 0, idle("gpu01", "0", -120, "alice"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := deliver(t, ctx, box, Senders{"webhook": NewWebhook()})
	if res[0].Err == nil || res[0].Waiting != 1 {
		t.Errorf("hanging receiver: %+v, want an error and the message kept", res[0])
	}
	if res[1].Err == nil || !strings.Contains(res[1].Err.Error(), "a redirect (to http://127.0.0.1:") ||
		!strings.Contains(res[1].Err.Error(), "redirects are not followed") || loop.requests != 1 {
		t.Errorf("redirecting receiver: %v after %d requests", res[1].Err, loop.requests)
	}
	if strings.Contains(res[1].Err.Error(), "/again") {
		t.Errorf("the redirect's path is shown: %v", res[1].Err)
	}
	if res[2].Err != nil || len(good.texts()) != 1 {
		t.Errorf("the working receiver, beside them: %+v, received %d", res[2], len(good.texts()))
	}
}

// sendmail missing, or failing, keeps the mail for the next run; the mail
// goes once it works.
func TestDeliverSendmailFails(t *testing.T) {
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool")
	fake := filepath.Join(dir, "sendmail")
	write := func(script string) {
		if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	box := newOutbox(t)
	tg := Targets{MailTo: []string{"admins@example.org"}}
	advance(t, box, tg, 0, idle("gpu01", "0", -120, "alice"))

	res := deliver(t, context.Background(), box, Senders{"mail": &Sendmail{Argv: []string{filepath.Join(dir, "missing"), "-t", "-i"}}})
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "no such file") || res[0].Waiting != 1 {
		t.Errorf("missing sendmail: %+v", res[0])
	}
	write("#!/bin/sh\necho 'sendmail: mailbox unavailable' >&2\nexit 75\n")
	res = deliver(t, context.Background(), box, Senders{"mail": &Sendmail{Argv: []string{fake, "-t", "-i"}}})
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "failed (exit status 75): sendmail: mailbox unavailable") || res[0].Waiting != 1 {
		t.Errorf("failing sendmail: %+v", res[0])
	}
	write("#!/bin/sh\ncat >> " + spool + "\n")
	res = deliver(t, context.Background(), box, Senders{"mail": &Sendmail{Argv: []string{fake, "-t", "-i"}}})
	if res[0].Err != nil || res[0].Sent != 1 {
		t.Errorf("working sendmail: %+v", res[0])
	}
	got, _ := os.ReadFile(spool)
	if !strings.Contains(string(got), "To: admins@example.org\r\n") || !strings.Contains(string(got), "held idle by alice") {
		t.Errorf("mail:\n%s", got)
	}
}

// Two renders at once (cron's runs overlapping) do not send a message twice:
// a claimed message is leased.
func TestClaimLeases(t *testing.T) {
	box := newOutbox(t)
	tg := Targets{Webhooks: []string{"http://127.0.0.1:1/h"}}
	advance(t, box, tg, 0, idle("gpu01", "0", -120, "alice"))
	now := time.Now()
	a, err := box.claim(context.Background(), now, time.Minute)
	if err != nil || len(a) != 1 {
		t.Fatalf("first claim: %d items, %v", len(a), err)
	}
	b, err := box.claim(context.Background(), now, time.Minute)
	if err != nil || len(b) != 0 {
		t.Fatalf("second claim, under the lease: %d items, %v", len(b), err)
	}
	// a render killed while sending: the lease runs out, the message is due
	c, err := box.claim(context.Background(), now.Add(2*time.Minute), time.Minute)
	if err != nil || len(c) != 1 {
		t.Fatalf("after the lease: %d items, %v", len(c), err)
	}
}

// A target whose oldest message is leased (a render killed while sending
// it, or one sending now) sends nothing newer until it is done: a
// "resolved" never overtakes its "firing".
func TestClaimKeepsOrderUnderLease(t *testing.T) {
	box := newOutbox(t)
	tg := Targets{Webhooks: []string{"http://127.0.0.1:1/h"}}
	other := Targets{Webhooks: []string{"http://127.0.0.1:1/other"}}
	advance(t, box, tg, 0, idle("gpu01", "0", -120, "alice"))
	now := time.Now()
	if a, err := box.claim(context.Background(), now, time.Minute); err != nil || len(a) != 1 {
		t.Fatalf("first claim: %d items, %v", len(a), err)
	}
	// the next run: the GPU released, its message queued behind the leased one
	advance(t, box, Targets{Webhooks: append(tg.Webhooks, other.Webhooks...)}, 5)
	b, err := box.claim(context.Background(), now.Add(10*time.Second), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range b {
		got = append(got, it.Target+" "+it.Summary)
	}
	want := []string{"webhook http://127.0.0.1:1/other idle_held resolved: gpu01 GPU 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claimed under another's lease (-want +got):\n%s", diff)
	}
	c, err := box.claim(context.Background(), now.Add(2*time.Minute), time.Minute)
	if err != nil || len(c) != 3 || c[0].Summary != "idle_held firing: gpu01 GPU 0" {
		t.Fatalf("after the lease: %d items, %v", len(c), err)
	}
}

// Messages for a target taken out of config.ini are dropped, and said so;
// so are messages refused for MaxOutboxAge.
func TestDrop(t *testing.T) {
	box := newOutbox(t)
	old := Targets{Webhooks: []string{"http://127.0.0.1:1/old"}, MailTo: []string{"a@example.org"}}
	advance(t, box, old, 0, idle("gpu01", "0", -120, "alice"))
	now := at(0)
	gone, stale, err := box.Drop(context.Background(), func(t string) bool { return t == MailTarget(old.MailTo) }, now, 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{WebhookTarget("http://127.0.0.1:1/old"): 1}, gone); diff != "" || len(stale) != 0 {
		t.Errorf("gone (-want +got):\n%s\nstale %v", diff, stale)
	}
	gone, stale, err = box.Drop(context.Background(), func(t string) bool { return t == MailTarget(old.MailTo) }, now.Add(8*24*time.Hour), 7*24*time.Hour)
	if err != nil || len(gone) != 0 || stale[MailTarget(old.MailTo)] != 1 {
		t.Errorf("a week later: gone %v, stale %v, %v", gone, stale, err)
	}
	if p, _ := box.pending(context.Background()); len(p) != 0 {
		t.Errorf("pending after both drops: %v", p)
	}
}

// countingSender accepts every message after a while, noting how many
// sends overlap.
type countingSender struct {
	mu        sync.Mutex
	now, most int
	sent      int
}

func (c *countingSender) Send(ctx context.Context, it Item) error {
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	c.mu.Lock()
	c.now--
	c.sent++
	c.mu.Unlock()
	return nil
}

// A first run over a large fleet mails hundreds of holders: a few
// sendmails run at once, not hundreds (each one an MTA process), so the
// run stays within its time and the machine's means.
func TestDeliverBoundsParallelTargets(t *testing.T) {
	box := newOutbox(t)
	var gpus []IdleGPU
	for i := range 200 {
		gpus = append(gpus, idle(fmt.Sprintf("gpu%03d", i), "0", -120, fmt.Sprintf("user%03d", i)))
	}
	advance(t, box, Targets{UserDomain: "example.org"}, 0, gpus...)
	s := &countingSender{}
	res := deliver(t, context.Background(), box, Senders{"mail": s})
	if len(res) != 200 || s.sent != 200 {
		t.Fatalf("%d targets, %d sent; want 200", len(res), s.sent)
	}
	if s.most > maxParallel {
		t.Errorf("%d sends at once, want at most %d", s.most, maxParallel)
	}
}

// A message the receiver refuses for what it is (413, 400, 422) is dropped
// and reported: sending it again cannot succeed, and the messages after it
// go on. A refusal of the target's own (401, 404, 5xx) keeps everything.
func TestDeliverDropsRefusedMessage(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 0 {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return false
		}
		return true
	})
	box := newOutbox(t)
	tg := Targets{Webhooks: []string{rc.URL + "/h"}}
	advance(t, box, tg, 0, idle("gpu01", "0", -120, "alice"), idle("gpu01", "1", -120, "bob"))
	res := deliver(t, context.Background(), box, Senders{"webhook": NewWebhook()})
	if res[0].Err != nil || res[0].Sent != 1 || res[0].Waiting != 0 || len(res[0].Dropped) != 1 ||
		!strings.Contains(res[0].Dropped[0], "idle_held firing: gpu01 GPU 0: answered 413 Request Entity Too Large: body too large") {
		t.Errorf("result %+v", res[0])
	}
	if got := rc.texts(); len(got) != 1 || !strings.Contains(got[0], "GPU 1 on gpu01") {
		t.Errorf("received %q, want GPU 1's message", got)
	}
}

// hangingSender answers only when the run is out of time.
type hangingSender struct{}

func (hangingSender) Send(ctx context.Context, it Item) error {
	<-ctx.Done()
	return ctx.Err()
}

// A target that gets no turn before the run is out of time (every slot
// held by targets that hang) is told out of time, and its messages wait
// for the next run, as the hanging ones' do, none of them leased.
func TestDeliverOutOfTime(t *testing.T) {
	box := newOutbox(t)
	var gpus []IdleGPU
	for i := range maxParallel + 1 {
		gpus = append(gpus, idle(fmt.Sprintf("gpu%03d", i), "0", -120, fmt.Sprintf("user%03d", i)))
	}
	advance(t, box, Targets{UserDomain: "example.org"}, 0, gpus...)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res := deliver(t, ctx, box, Senders{"mail": hangingSender{}})
	late := 0
	for _, r := range res {
		if errors.Is(r.Err, ErrOutOfTime) {
			late++
		}
		if r.Err == nil || r.Sent != 0 || r.Waiting != 1 {
			t.Errorf("%s: %+v, want an error and the message waiting", r.Target, r)
		}
	}
	if late != 1 {
		t.Errorf("%d targets out of time, want the one without a turn", late)
	}
	s := &countingSender{}
	deliver(t, context.Background(), box, Senders{"mail": s})
	if s.sent != maxParallel+1 {
		t.Errorf("the next run sent %d, want %d", s.sent, maxParallel+1)
	}
}
