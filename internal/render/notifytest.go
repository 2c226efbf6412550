package render

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/notify"
	"github.com/gpumon/gpumon/internal/publish"
)

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
	s := publish.Senders(nc)
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
		fmt.Fprintf(stdout, "mail_users: the holder of an idle-held GPU, and a reservation's owner and its other holders, are mailed as USER@%s (not tried here)\n", hosttext.Printable(d))
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
