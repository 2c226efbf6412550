package notify

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Each webhook gets every event; the admins one mail for the run; each
// holder one mail for their GPUs. A holder who cannot be mailed is
// reported, never guessed at.
func TestRoute(t *testing.T) {
	events := []Event{
		{Episode: Episode{Kind: hostDown, Host: "gpu09", Since: at(-20)}, State: Firing, At: at(0)},
		{Episode: Episode{Kind: idleHeld, Host: "gpu01", GPU: "0", Users: []string{"alice"}, Since: at(-130)}, State: Firing, At: at(0)},
		{Episode: Episode{Kind: idleHeld, Host: "gpu01", GPU: "1", Users: []string{"alice", "bob"}, Since: at(-130)}, State: Firing, At: at(0)},
		{Episode: Episode{Kind: idleHeld, Host: "gpu02", GPU: "0", Users: []string{"carol"}, Since: at(-300)}, State: resolved, At: at(0)},
		{Episode: Episode{Kind: idleHeld, Host: "gpu03", GPU: "0", Users: []string{"root", "4000123", "x y", ""}, Since: at(-130)}, State: Firing, At: at(0)},
	}
	tg := Targets{Webhooks: []string{"https://a.example/h", "https://b.example/h"}, MailTo: []string{"admins@example.org"}, UserDomain: "example.org"}
	items, problems := Route(events, tg, at(0), time.UTC, "monitor")
	var got []string
	for _, it := range items {
		got = append(got, it.Target+" | "+it.Summary)
	}
	want := []string{
		"webhook https://a.example/h | host_down firing: gpu09",
		"webhook https://a.example/h | idle_held firing: gpu01 GPU 0",
		"webhook https://a.example/h | idle_held firing: gpu01 GPU 1",
		"webhook https://a.example/h | idle_held resolved: gpu02 GPU 0",
		"webhook https://a.example/h | idle_held firing: gpu03 GPU 0",
		"webhook https://b.example/h | host_down firing: gpu09",
		"webhook https://b.example/h | idle_held firing: gpu01 GPU 0",
		"webhook https://b.example/h | idle_held firing: gpu01 GPU 1",
		"webhook https://b.example/h | idle_held resolved: gpu02 GPU 0",
		"webhook https://b.example/h | idle_held firing: gpu03 GPU 0",
		"mail admins@example.org | [gpumon] 1 host down, 3 GPUs idle-held, 1 GPU released",
		"mail alice@example.org | [gpumon] 2 of your GPUs have been idle for hours",
		"mail bob@example.org | [gpumon] your GPU 1 on gpu01 has been idle for 2.2 h",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
	wantProblems := []string{
		`user "root" is not mailed about GPU 0 on gpu03: root is not a person; the admins are told`,
		`user "4000123" is not mailed about GPU 0 on gpu03: ps printed a uid, not a name`,
		`user "x y" is not mailed about GPU 0 on gpu03: the name is not a mail local part`,
		`the holder (user unknown) is not mailed about GPU 0 on gpu03: ps did not say who runs the process`,
	}
	if diff := cmp.Diff(wantProblems, problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// Names from hosts cannot ping a Slack channel, add a mail header or a
// recipient, or break the JSON.
func TestHostileNames(t *testing.T) {
	e := Event{Episode: Episode{Kind: idleHeld, Host: "gpu01 <!channel>", GPU: "0\r\nBcc: evil@example.com",
		Users: []string{"<script>alert(1)</script>", "a\"b"}, Since: at(-130)}, State: Firing, At: at(0),
		Commands: []string{"python x.py\n<!everyone> & ```"}}
	tg := Targets{Webhooks: []string{"https://a.example/h"}, MailTo: []string{"admins@example.org"}, Commands: true}
	body := WebhookBody(e, tg, time.UTC)
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, body)
	}
	text := m["text"].(string)
	for _, bad := range []string{"<!channel>", "<!everyone>", "<script>", "\n", "\r"} {
		if strings.Contains(text, bad) {
			t.Errorf("webhook text holds %q: %s", bad, text)
		}
	}
	if !strings.Contains(text, "&lt;!channel&gt;") || !strings.Contains(text, "&amp;") {
		t.Errorf("webhook text not escaped for Slack: %s", text)
	}
	items, _ := Route([]Event{e}, tg, at(0), time.UTC, "monitor")
	msg, err := mail.ReadMessage(strings.NewReader(string(items[1].Body)))
	if err != nil {
		t.Fatalf("mail does not parse: %v\n%s", err, items[1].Body)
	}
	if len(msg.Header) != 8 || msg.Header.Get("Bcc") != "" || msg.Header.Get("To") != "admins@example.org" {
		t.Errorf("headers: %v", msg.Header)
	}
	dec := new(mime.WordDecoder)
	if s, _ := dec.DecodeHeader(msg.Header.Get("Subject")); strings.ContainsAny(s, "\r\n") || !strings.Contains(s, "Bcc: evil") {
		t.Errorf("subject %q", s)
	}
}

func TestNotMailable(t *testing.T) {
	for _, u := range []string{"alice", "j.smith", "o'brien", "a+b", "Bob_2"} {
		if why := notMailable(u); why != "" {
			t.Errorf("%q: %s", u, why)
		}
	}
	for _, u := range []string{"", "root", "1000", ".a", "a..b", "a b", "a@b", "a<b>", "é", strings.Repeat("a", 65)} {
		if notMailable(u) == "" {
			t.Errorf("%q is mailable", u)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T0/B0/XXXX": "https://hooks.slack.com/…",
		"https://mm.example.org/hooks/abc":            "https://mm.example.org/…",
		"http://127.0.0.1:9000":                       "http://127.0.0.1:9000",
		"https://x.example/?token=s3cret":             "https://x.example/…",
		"https://user:pass@x.example/":                "https://x.example",
		"not a url":                                   "(an unreadable URL)",
		"https://eo1a2b3c4d5e6f7.m.pipedream.net":     "https://….m.pipedream.net",
		"https://0f8fad5b-d9cb-469f.hooks.example/x":  "https://….hooks.example/…",
		"https://gpu-alerts.example.org:8443/hook":    "https://gpu-alerts.example.org:8443/…",
		"http://[::1]:9000/":                          "http://[::1]:9000",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Messages are kept only for targets config.ini still has: a holder's
// mail counts as long as mail_users keeps the domain.
func TestConfigured(t *testing.T) {
	tg := Targets{Webhooks: []string{"https://a.example/h"}, MailTo: []string{"x@example.org", "y@example.org"}, UserDomain: "example.org"}
	for target, want := range map[string]bool{
		"webhook https://a.example/h":        true,
		"webhook https://b.example/h":        false,
		"mail x@example.org, y@example.org":  true,
		"mail x@example.org":                 true, // a holder named x
		"mail alice@example.org":             true,
		"mail alice@other.example":           false,
		"mail root@example.org":              false,
		"mail x@example.org, z@example.org":  false,
		"carrier-pigeon https://a.example/h": false,
	} {
		if got := tg.Configured(target); got != want {
			t.Errorf("Configured(%q) = %v, want %v", target, got, want)
		}
	}
}

// Past maxWebhookEvents in one run, a webhook gets one digest: the text
// lists the first ones, events holds them all.
func TestWebhookDigest(t *testing.T) {
	var events []Event
	for i := range 45 {
		events = append(events, Event{Episode: Episode{Kind: hostDown, Host: fmt.Sprintf("gpu%02d", i), Since: at(-20)}, State: Firing, At: at(0)})
	}
	tg := Targets{Webhooks: []string{"https://a.example/h"}, PageURL: "https://gpus.example.org/"}
	items, _ := Route(events, tg, at(0), time.UTC, "monitor")
	if len(items) != 1 {
		t.Fatalf("%d items, want one digest", len(items))
	}
	var d struct {
		Text   string           `json:"text"`
		Event  string           `json:"event"`
		Events []map[string]any `json:"events"`
	}
	if err := json.Unmarshal(items[0].Body, &d); err != nil {
		t.Fatal(err)
	}
	if d.Event != "digest" || len(d.Events) != 45 || d.Events[44]["host"] != "gpu44" {
		t.Errorf("digest: event %q, %d events", d.Event, len(d.Events))
	}
	lines := strings.Split(d.Text, "\n")
	if lines[0] != "45 hosts down:" || len(lines) != 1+maxWebhookEvents+2 || lines[21] != "… and 25 more" || lines[22] != "https://gpus.example.org/" {
		t.Errorf("digest text:\n%s", d.Text)
	}
}

// A mail lists at most maxMailLines events, whatever the run told.
func TestMailIsBounded(t *testing.T) {
	var events []Event
	for i := range 3000 {
		events = append(events, Event{Episode: Episode{Kind: idleHeld, Host: fmt.Sprintf("gpu%04d", i), GPU: "0",
			Users: []string{"alice"}, Since: at(-200)}, State: Firing, At: at(0)})
	}
	items, _ := Route(events, Targets{MailTo: []string{"a@example.org"}, UserDomain: "example.org"}, at(0), time.UTC, "monitor")
	for _, it := range items {
		if n := strings.Count(string(it.Body), "\n- "); n != maxMailLines+1 || len(it.Body) > 40<<10 {
			t.Errorf("%s: %d lines, %d bytes", it.Target, n, len(it.Body))
		}
		if !strings.Contains(string(it.Body), "- ... and 2900 more: see the status page") {
			t.Errorf("%s does not say how many more", it.Target)
		}
	}
}

// A mail's lines stay within what SMTP carries (998 bytes; quoted-printable
// keeps them at 76), however long the commands and names.
func TestMailLinesAreShort(t *testing.T) {
	long := strings.Repeat("x", 4000)
	var users []string
	for i := range 20 {
		users = append(users, fmt.Sprintf("user%02d%s", i, strings.Repeat("y", 60)))
	}
	e := Event{Episode: Episode{Kind: idleHeld, Host: long, GPU: "0", Model: long, Users: users, Since: at(-200)},
		State: Firing, At: at(0), Commands: []string{long, long, long, long, long, long, long, long, long}}
	items, _ := Route([]Event{e}, Targets{MailTo: []string{"a@example.org"}, Commands: true}, at(0), time.UTC, "monitor")
	header, body, _ := strings.Cut(string(items[0].Body), "\r\n\r\n")
	for i, line := range strings.Split(header, "\r\n") {
		if len(line) > 998 {
			t.Errorf("header line %d is %d bytes", i+1, len(line))
		}
	}
	for i, line := range strings.Split(body, "\r\n") {
		if len(line) > 78 {
			t.Errorf("body line %d is %d bytes", i+1, len(line))
		}
	}
	msg, err := mail.ReadMessage(strings.NewReader(string(items[0].Body)))
	if err != nil {
		t.Fatal(err)
	}
	decoded, _ := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if !strings.Contains(string(decoded), "user07yyyy") || !strings.Contains(string(decoded), "12 more") {
		t.Errorf("decoded body:\n%s", decoded)
	}
}

// A digest carries at most maxDigestEvents events as fields, and counts
// the rest: a first run over a large fleet posts kilobytes, not megabytes.
func TestWebhookDigestIsBounded(t *testing.T) {
	var events []Event
	for i := range 8000 {
		events = append(events, Event{Episode: Episode{Kind: idleHeld, Host: fmt.Sprintf("gpu%04d", i), GPU: "0",
			Users: []string{"alice"}, Since: at(-200)}, State: Firing, At: at(0)})
	}
	body := webhookDigestBody(events, Targets{}, time.UTC)
	var d struct {
		Events []json.RawMessage
		More   int
	}
	if err := json.Unmarshal(body, &d); err != nil || len(d.Events) != maxDigestEvents || d.More != 8000-maxDigestEvents || len(body) > 64<<10 {
		t.Errorf("digest: %d events, more %d, %d bytes (%v)", len(d.Events), d.More, len(body), err)
	}
}
