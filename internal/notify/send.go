package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/gpumon/gpumon/internal/hosttext"
)

// Budget is the most a run spends sending, all targets together: a
// receiver that hangs delays render by this much at most, and what it did
// not take waits for the next run.
const Budget = 10 * time.Second

// A Sender hands one message to its target.
type Sender interface {
	Send(ctx context.Context, it Item) error
}

// Webhook POSTs messages as JSON.
type Webhook struct {
	Client *http.Client
}

// NewWebhook is a Webhook that follows no redirect: a POST redirected
// becomes a GET without its body at most receivers, and a webhook URL that
// redirects is one to correct, not to follow.
func NewWebhook() *Webhook {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &Webhook{Client: &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

// maxAnswer is what is read of a receiver's answer (its error text).
const maxAnswer = 4 << 10

// Send POSTs it.Body to it.dest(); any 2xx answer is success.
func (w *Webhook) Send(ctx context.Context, it Item) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, it.dest(), bytes.NewReader(it.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpumon-render")
	resp, err := w.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, which may hold a secret
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return errors.New("no answer within the time render gives all notifications (10s)")
		}
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		to := "(no Location)"
		if loc, err := resp.Location(); err == nil { // resolved against the request's URL
			to = RedactURL(loc.String())
		}
		return fmt.Errorf("answered %s, a redirect (to %s): redirects are not followed; set the webhook URL to where it leads",
			hosttext.Clip(hosttext.Printable(resp.Status), 80), to)
	}
	msg := fmt.Sprintf("answered %s", hosttext.Clip(hosttext.Printable(resp.Status), 80))
	if a := hosttext.FirstLine(string(answer)); a != "" {
		msg += ": " + hosttext.Clip(hosttext.Printable(a), 200)
	}
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return &refusedError{errors.New(msg)}
	}
	return errors.New(msg)
}

// RedactURL shows a webhook URL without what makes it a secret (Slack's
// and Mattermost's are a key in the path or query; some services, such as
// Pipedream, put it in the host name): scheme and host only, and of the
// host, no label that looks like a key.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(an unreadable URL)"
	}
	labels := strings.Split(u.Hostname(), ".")
	for i, l := range labels {
		if looksLikeKey(l) {
			labels[i] = "…"
		}
	}
	host := strings.Join(labels, ".")
	if strings.Contains(host, ":") { // an IPv6 literal
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" {
		host += ":" + p
	}
	out := u.Scheme + "://" + host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		out += "/…"
	}
	return hosttext.Printable(out)
}

// looksLikeKey: a host label of 12 characters or more that mixes letters
// and digits (a token, an id), unlike the words people name hosts with.
func looksLikeKey(label string) bool {
	if len(label) < 12 {
		return false
	}
	letters, digits := false, false
	for _, r := range label {
		switch {
		case r >= '0' && r <= '9':
			digits = true
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			letters = true
		}
	}
	return letters && digits
}

// Sendmail hands mail to a sendmail-compatible command (`sendmail -t -i`:
// the recipients are read from the message's To, and a line of one dot
// does not end it).
type Sendmail struct {
	Argv []string
}

// killGrace is how long a sendmail killed at the deadline (or a child of
// it holding its pipes) is waited for.
const killGrace = time.Second

// maxStderr is what is kept of sendmail's complaint.
const maxStderr = 4 << 10

// Send runs the command with the message on its standard input; exit 0 is
// success (the mail system has it: a mailbox that refuses it later is the
// mail system's to retry or bounce).
func (s *Sendmail) Send(ctx context.Context, it Item) error {
	if len(s.Argv) == 0 {
		return errors.New("no sendmail command")
	}
	cmd := exec.CommandContext(ctx, s.Argv[0], s.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(it.Body)
	var errOut capped
	cmd.Stdout, cmd.Stderr = &errOut, &errOut
	cmd.WaitDelay = killGrace // a child holding the pipes open does not hold render
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s did not finish within the time render gives all notifications (10s)", s.Argv[0])
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		msg := fmt.Sprintf("%s failed (%s)", s.Argv[0], ee.ProcessState)
		if l := hosttext.FirstLine(errOut.String()); l != "" {
			msg += ": " + hosttext.Clip(hosttext.Printable(l), 200)
		}
		return errors.New(msg)
	}
	return err
}

// capped keeps the first maxStderr bytes written. It has no ReadFrom, so
// os/exec's copy goes through Write (see FIELD-NOTES: io.Copy).
type capped struct {
	mu  sync.Mutex
	buf []byte
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := maxStderr - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf)
}

// maxParallel is the most targets sent to at once: a first run over a
// large fleet mails hundreds of holders, and each sendmail is an MTA
// process.
const maxParallel = 8

// ErrOutOfTime is a target whose messages were not all tried within the
// budget: they wait for the next run.
var ErrOutOfTime = errors.New("out of time: the rest waits for the next run")

// A refusedError is a message its target refuses for what it is (too
// large, malformed: HTTP 400, 413, 422), not for the target's state:
// sending it again cannot succeed, and keeping it would hold back every
// message after it. It is dropped, and said so.
type refusedError struct{ Err error }

func (e *refusedError) Error() string { return e.Err.Error() }
func (e *refusedError) Unwrap() error { return e.Err }

// Senders are the senders by target kind.
type Senders map[string]Sender

// Result is what became of one target's messages in a run.
type Result struct {
	Target  string
	Sent    int
	Waiting int   // still in the outbox after the run
	Err     error // the failure that held the rest back, if any
	Failed  string
	Dropped []string // messages the target refused for what they are (refusedError), dropped
}

// Deliver sends the messages due, each target's in order and the targets
// side by side (maxParallel at once), within Budget (or ctx's deadline if
// sooner). A message a target refuses stays, with the ones after it, for
// the next run. The results are by target, in the order of their oldest
// message.
func Deliver(ctx context.Context, o *Outbox, senders Senders, now time.Time) ([]Result, error) {
	// sends stop a little before the budget: a sendmail killed at the
	// deadline is given killGrace to go
	ctx, cancel := context.WithTimeout(ctx, Budget-killGrace)
	defer cancel()
	items, err := o.claim(ctx, now, Budget+time.Minute)
	if err != nil {
		return nil, err
	}
	targets, queues := byTarget(items)
	results := make([]Result, len(targets))
	d := &delivery{o: o}
	slots := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i, t := range targets {
		results[i].Target = t
		queue := queues[t]
		s := senders[queue[0].Kind()]
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-ctx.Done():
			}
			d.send(ctx, s, queue, &results[i])
		})
	}
	wg.Wait()
	pending, err := o.pending(context.WithoutCancel(ctx))
	if err != nil {
		return results, errors.Join(d.err, err)
	}
	for i := range results {
		results[i].Waiting = pending[results[i].Target]
	}
	return results, d.err
}

// byTarget is items' targets, in the order of their oldest message, and
// each one's messages in order.
func byTarget(items []Item) ([]string, map[string][]Item) {
	var targets []string
	queues := map[string][]Item{}
	for _, it := range items {
		if queues[it.Target] == nil {
			targets = append(targets, it.Target)
		}
		queues[it.Target] = append(queues[it.Target], it)
	}
	return targets, queues
}

// delivery is one Deliver's outbox, and the errors of writing to it from
// the targets' goroutines.
type delivery struct {
	o   *Outbox
	mu  sync.Mutex
	err error
}

func (d *delivery) keep(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = errors.Join(d.err, err)
}

// send sends one target's queue with s (nil: none for its kind), in order,
// until a message fails or the time is out; what is not sent is given
// back for the next run. The outcome goes in r.
func (d *delivery) send(ctx context.Context, s Sender, queue []Item, r *Result) {
	bg := context.WithoutCancel(ctx) // the outbox is written even out of time
	for j, it := range queue {
		if ctx.Err() != nil {
			r.Err = ErrOutOfTime
			d.keep(d.o.release(bg, ids(queue[j:])))
			return
		}
		err := fmt.Errorf("no sender for %s", it.Kind())
		if s != nil {
			err = s.Send(ctx, it)
		}
		var refused *refusedError
		switch {
		case err == nil:
			r.Sent++
			d.keep(d.o.sent(bg, it.ID))
		case errors.As(err, &refused):
			r.Dropped = append(r.Dropped, it.Summary+": "+err.Error())
			d.keep(d.o.sent(bg, it.ID))
		default:
			r.Err, r.Failed = err, it.Summary
			d.keep(d.o.failed(bg, it.ID, err.Error()))
			d.keep(d.o.release(bg, ids(queue[j+1:])))
			return
		}
	}
}

func ids(items []Item) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// TargetName is a target as reports show it: a webhook's URL redacted.
func TargetName(target string) string {
	kind, dest, _ := strings.Cut(target, " ")
	if kind == "webhook" {
		return "webhook " + RedactURL(dest)
	}
	return target
}
