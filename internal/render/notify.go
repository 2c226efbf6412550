package render

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/inifile"
	"github.com/gpumon/gpumon/internal/notify"
)

// NotifyConfig is [notify].
type NotifyConfig struct {
	Targets  notify.Targets
	Params   notify.Params
	Sendmail []string // the command and its arguments
}

// DefaultSendmail is how mail is handed over, as every MTA's sendmail
// takes it: recipients from the To header (-t), a lone dot not special (-i).
var DefaultSendmail = []string{"/usr/sbin/sendmail", "-t", "-i"}

// MaxOutboxAge is how long a message waits for a target that refuses it
// before it is dropped (and the drop reported).
const MaxOutboxAge = 7 * 24 * time.Hour

func defaultNotify() NotifyConfig {
	return NotifyConfig{Params: notify.DefaultParams, Sendmail: DefaultSendmail}
}

// readNotify reads [notify] into c. Every target is checked here, so a
// typo is a config error naming the line, not a failure each run.
func readNotify(sec inifile.Section, c *NotifyConfig, hist HistoryConfig) error {
	if urls, ok := sec.List("webhook"); ok {
		for _, u := range urls {
			if err := checkURL(u); err != "" {
				return sec.ErrorAt("webhook", "%q: %s", notify.RedactURL(u), err)
			}
			if !slices.Contains(c.Targets.Webhooks, u) {
				c.Targets.Webhooks = append(c.Targets.Webhooks, u)
			}
		}
	}
	if list, ok := sec.List("mail_to"); ok {
		addrs, err := notify.ParseMailAddresses(list)
		if err != nil {
			return sec.ErrorAt("mail_to", "%v", err)
		}
		c.Targets.MailTo = addrs
	}
	if v, ok := sec.String("mail_users"); ok && v != "" {
		domain, found := strings.CutPrefix(v, "@")
		if !found || !mailDomain(domain) {
			return sec.ErrorAt("mail_users", "%q: want @ and a mail domain (e.g. @example.org): each holder is mailed as USER@example.org", v)
		}
		c.Targets.UserDomain = domain
	}
	if v, ok := sec.String("mail_from"); ok && v != "" {
		if _, err := notify.ParseMailAddresses([]string{v}); err != nil {
			return sec.ErrorAt("mail_from", "%v", err)
		}
		c.Targets.MailFrom = v
	}
	if v, ok := sec.String("sendmail"); ok {
		argv := strings.Fields(v)
		if len(argv) == 0 {
			return sec.ErrorAt("sendmail", "empty: leave the key out for %s", strings.Join(DefaultSendmail, " "))
		}
		c.Sendmail = argv
	}
	if v, ok := sec.String("page_url"); ok && v != "" {
		if err := checkURL(v); err != "" {
			return sec.ErrorAt("page_url", "%q: %s", v, err)
		}
		c.Targets.PageURL = v
	}
	if err := sec.Bool("commands", &c.Targets.Commands); err != nil {
		return err
	}
	day := 24 * time.Hour
	if err := sec.Duration("host_down_after", inifile.Limits[time.Duration]{Min: 0, Max: 30 * day,
		Want: "a duration from 0 to 30d (e.g. 15m)"}, &c.Params.HostDownAfter); err != nil {
		return err
	}
	if err := sec.Duration("remind_after", inifile.Limits[time.Duration]{Min: 0, Max: 365 * day,
		Want: "a duration up to 365d (e.g. 24h), or 0 for never"}, &c.Params.RemindAfter); err != nil {
		return err
	}
	if c.Params.RemindAfter > 0 && c.Params.RemindAfter < 10*time.Minute {
		return sec.ErrorAt("remind_after", "%s is a reminder every few runs: want 10m or more, or 0 for never", c.Params.RemindAfter)
	}
	if !c.Targets.Empty() && hist.DB == "" {
		return sec.ErrorAt(firstKey(sec, "webhook", "mail_to", "mail_users"),
			"notifications come from the history, and [history] db is empty: set it, or remove [notify]'s targets")
	}
	return nil
}

func firstKey(sec inifile.Section, keys ...string) string {
	for _, k := range keys {
		if v, ok := sec.String(k); ok && v != "" {
			return k
		}
	}
	return keys[0]
}

// checkURL says what is wrong with an http(s) URL, or "".
func checkURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http:// or https:// URL"
	case u.Host == "":
		return "no host in the URL"
	}
	return ""
}

func mailDomain(d string) bool {
	if d == "" || len(d) > 253 || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") || strings.Contains(d, "..") {
		return false
	}
	for _, c := range d {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// notifyRun tells what the history says (rep.History, just recorded), once
// the outputs are written: sending never delays the page. What a target
// refuses stays in the outbox for the next run; the error returned says
// so (render exits 1, and cron mails it).
func notifyRun(ctx context.Context, rep *Report, stderr io.Writer) error {
	nc := rep.Config.Notify
	if nc.Targets.Empty() || rep.History == nil {
		return nil
	}
	sum := rep.History
	if !sum.Newest.Equal(rep.Cluster.DataTime) {
		// an older CSV than the history's newest: what it shows is not now
		return nil
	}
	store, err := openHistory(rep.Config.History)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	defer store.Close()
	box, err := notify.OpenOutbox(ctx, store.DB())
	if err != nil {
		return err
	}
	sender, _ := os.Hostname()
	obs := observations(rep, sum)
	var problems []string
	_, err = box.Advance(ctx, obs, nc.Params, func(events []notify.Event) []notify.Item {
		items, p := notify.Route(events, nc.Targets, rep.Now, rep.Loc, sender)
		problems = p
		return items
	})
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "render: notify: %s\n", p)
	}
	gone, old, err := box.Drop(ctx, nc.Targets.Configured, rep.Now, MaxOutboxAge)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	for _, t := range sortedKeys(gone) {
		fmt.Fprintf(stderr, "render: notify: %d messages for %s dropped: it is no longer in [notify]\n", gone[t], notify.TargetName(t))
	}
	for _, t := range sortedKeys(old) {
		fmt.Fprintf(stderr, "render: notify: %d messages for %s dropped: it refused them for %s\n", old[t], notify.TargetName(t), "7 days")
	}
	results, err := notify.Deliver(ctx, box, senders(nc), rep.Now)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	var failed []error
	late, lateWaiting := 0, 0 // targets out of time: one line for all, not one each
	for _, r := range results {
		for _, d := range r.Dropped {
			fmt.Fprintf(stderr, "render: notify: %s refused a message, which is dropped (sending it again cannot help): %s\n",
				notify.TargetName(r.Target), d)
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
	for _, e := range failed[:len(failed)-1] {
		fmt.Fprintf(stderr, "render: error: %v\n", e)
	}
	return cli.WithHint(failed[len(failed)-1], "the page was written; `render -notify-test` tries every target and says what each answered")
}

func senders(nc NotifyConfig) notify.Senders {
	return notify.Senders{"webhook": notify.NewWebhook(), "mail": &notify.Sendmail{Argv: nc.Sendmail}}
}

// observations are the history's newest snapshot as notify sees it, with
// each idle-held GPU's model and commands from the page's model.
func observations(rep *Report, sum *history.Summary) notify.Observations {
	obs := notify.Observations{Now: rep.Now, DataTime: sum.Newest, Hosts: len(rep.Cluster.Hosts)}
	type ref struct{ host, gpu string }
	gpus := map[ref][]string{} // model, then commands
	for _, h := range rep.Cluster.Hosts {
		if h.Up() {
			obs.Up++
		}
		for _, g := range h.GPUs {
			info := []string{g.Name}
			for _, p := range g.Procs {
				if p.Holds() && p.Command != "" {
					info = append(info, p.Command)
				}
			}
			gpus[ref{h.Name, g.ID()}] = info
		}
	}
	for _, sp := range sum.IdleHeld {
		g := notify.IdleGPU{Host: sp.Host, GPU: sp.GPU, Users: sp.Users, Since: time.Unix(sp.Start, 0), MemMiB: sp.MemMiB}
		if info := gpus[ref{sp.Host, sp.GPU}]; len(info) > 0 {
			g.Model, g.Commands = info[0], info[1:]
		}
		obs.IdleHeld = append(obs.IdleHeld, g)
	}
	// the GPUs held idle now, however short their spell, as history's
	// spells count them: an episode goes on across a gap in the data
	limit := rep.Config.History.Params.IdleUtilPct
	for _, h := range history.FromCluster(rep.Cluster).Hosts {
		if !h.Up {
			continue
		}
		for _, g := range h.GPUs {
			if len(g.Holders) > 0 && g.HasUtil && !math.IsNaN(g.UtilPct) && g.UtilPct <= limit {
				obs.HeldIdle = append(obs.HeldIdle, notify.IdleGPU{Host: h.Name, GPU: g.ID, Users: g.Users()})
			}
		}
	}
	for name, h := range sum.Down {
		obs.Down = append(obs.Down, notify.DownHost{Host: name, Since: time.Unix(h.DownSince, 0)})
	}
	slices.SortFunc(obs.Down, func(a, b notify.DownHost) int { return strings.Compare(a.Host, b.Host) })
	return obs
}

// notifyTest sends one test message to every target, now, and says what
// each answered. The outbox is not used: nothing is kept or retried.
func notifyTest(ctx context.Context, cfg *Config, now time.Time, stdout io.Writer) error {
	nc := cfg.Notify
	if nc.Targets.Empty() {
		return cli.WithHint(errors.New("no notification targets"), "set [notify] webhook, mail_to or mail_users in %s", configName(cfg))
	}
	ctx, cancel := context.WithTimeout(ctx, notify.Budget)
	defer cancel()
	sender, _ := os.Hostname()
	e := notify.Event{Episode: notify.Episode{Kind: notify.Test, Since: now}, State: notify.Firing, At: now}
	var items []notify.Item
	for _, u := range nc.Targets.Webhooks {
		items = append(items, notify.Item{Target: notify.WebhookTarget(u), Body: notify.WebhookBody(e, nc.Targets, time.Local)})
	}
	if len(nc.Targets.MailTo) > 0 {
		items = append(items, notify.Item{Target: notify.MailTarget(nc.Targets.MailTo),
			Body: notify.Mail(nc.Targets.MailTo, nc.Targets.MailFrom, "[gpumon] test message",
				e.Text(time.Local, false), nc.Targets.PageURL, sender, now)})
	}
	// every target at once: one that hangs does not spend the others' time
	s := senders(nc)
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { errs[i] = s[it.Kind()].Send(ctx, it) })
	}
	wg.Wait()
	failed := 0
	for i, it := range items {
		if err := errs[i]; err != nil {
			failed++
			fmt.Fprintf(stdout, "%s: failed: %v\n", notify.TargetName(it.Target), err)
			continue
		}
		how := "accepted"
		if it.Kind() == "mail" {
			how = "handed to " + strings.Join(nc.Sendmail, " ")
		}
		fmt.Fprintf(stdout, "%s: %s\n", notify.TargetName(it.Target), how)
	}
	if d := nc.Targets.UserDomain; d != "" {
		fmt.Fprintf(stdout, "mail_users: the holder of an idle-held GPU is mailed as USER@%s (not tried here)\n", hosttext.Printable(d))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d notification targets failed", failed, len(items))
	}
	return nil
}

func configName(cfg *Config) string {
	if cfg.Path == "" {
		return "config.ini"
	}
	return cfg.Path
}
