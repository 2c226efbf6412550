package render

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/notify"
)

// mailReports is render -report SPAN: the span's reports mailed through
// [notify]'s sendmail, each once per span.
func mailReports(ctx context.Context, cfg *Config, spanArg string, now time.Time, stdout, stderr io.Writer, sender notify.Sender) error {
	span, err := parseReportSpan(spanArg, now, time.Local)
	if err != nil {
		return err
	}
	store, err := openHistory(cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	l, err := store.LedgerOf(ctx, span.From, span.To, history.LedgerUsers|history.LedgerJobs) // no hosts: nobody's report
	if err != nil {
		return fmt.Errorf("history %s: %w", cfg.History.DB, err)
	}
	log, err := openSentLog(ctx, store.DB())
	if err != nil {
		return fmt.Errorf("history %s: %w", cfg.History.DB, err)
	}
	mails := reportMails(l, &cfg.Accounting, cfg.Notify.Targets, span)
	if len(mails) == 0 {
		fmt.Fprintf(stdout, "render: no GPU-hours %s: no reports to send\n", spanWords(span))
		return nil
	}
	if cfg.Notify.Targets.UserDomain == "" && !slices.ContainsFunc(mails, func(m reportMail) bool { return m.To != "" }) {
		return cli.WithHint(errors.New("no report can be mailed: [notify] mail_users is not set"),
			"set mail_users = @your.domain in [notify] (users are mailed as USER@your.domain), or give [team_leads] addresses")
	}
	host, _ := os.Hostname()
	send := func(ctx context.Context, m reportMail) error {
		ctx, cancel := context.WithTimeout(ctx, reportTimeout)
		defer cancel()
		return sender.Send(ctx, reportItem(m, cfg.Notify.Targets, host, now))
	}
	return sendReports(ctx, log, span, mails, send, now, stdout, stderr)
}

// reportItem is m as notify's mail target takes it: notify's message,
// whose headers no value can add a line to.
func reportItem(m reportMail, t notify.Targets, host string, now time.Time) notify.Item {
	to := []string{m.To}
	return notify.Item{Target: notify.MailTarget(to), Summary: m.Subject,
		Body: notify.Mail(to, t.MailFrom, m.Subject, m.Body, t.PageURL, host, now)}
}

// sendReports sends the mails not sent yet for the span, each recorded
// once its target accepted it: a run after a partial failure sends only
// what is missing. Each recipient gets a line on stdout, then the counts;
// the error, when any mail failed, makes cron mail the output.
func sendReports(ctx context.Context, log sentLog, span mailSpan, mails []reportMail,
	send func(context.Context, reportMail) error, now time.Time, stdout, stderr io.Writer) error {
	var sent, already, skipped int
	var errs []error
	for _, m := range mails {
		who := clean(m.Recipient, 80)
		done, err := log.sent(ctx, span, m.Recipient)
		switch {
		case err != nil:
			errs = append(errs, err)
			fmt.Fprintf(stdout, "failed        %s: %v\n", who, err)
		case done:
			already++
			fmt.Fprintf(stdout, "already sent  %s\n", who)
		case m.Skip != "":
			skipped++
			fmt.Fprintf(stdout, "skipped       %s: %s\n", who, m.Skip)
			fmt.Fprintf(stderr, "render: %s is not mailed a report: %s\n", who, m.Skip)
		default:
			err := send(ctx, m)
			if err == nil {
				err = log.mark(ctx, span, m, now)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", who, err))
				fmt.Fprintf(stdout, "failed        %s <%s>: %v\n", who, m.To, err)
				continue
			}
			sent++
			fmt.Fprintf(stdout, "sent          %s <%s>\n", who, m.To)
		}
	}
	fmt.Fprintf(stdout, "render: %d sent, %d already sent, %d skipped, %d failed\n", sent, already, skipped, len(errs))
	if len(errs) == 0 {
		return nil
	}
	errs[len(errs)-1] = cli.WithHint(errs[len(errs)-1], "run the same -report again: it sends only the reports not sent")
	return cli.Join(errs...)
}

// sentLog is the record of the reports sent, a table of the history
// database: (span, recipient) once.
type sentLog struct{ db *sql.DB }

const sentLogSchema = `CREATE TABLE IF NOT EXISTS report_mails (
	span_from INTEGER NOT NULL,
	span_to INTEGER NOT NULL,
	recipient TEXT NOT NULL,
	address TEXT NOT NULL,
	sent INTEGER NOT NULL,
	PRIMARY KEY (span_from, span_to, recipient)
)`

// openSentLog makes the table in db (history's writing connection) if
// need be.
func openSentLog(ctx context.Context, db *sql.DB) (sentLog, error) {
	if _, err := db.ExecContext(ctx, sentLogSchema); err != nil {
		return sentLog{}, fmt.Errorf("reports sent: %w", err)
	}
	return sentLog{db: db}, nil
}

// sent reports whether the span's report to recipient was sent.
func (s sentLog) sent(ctx context.Context, span mailSpan, recipient string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM report_mails WHERE span_from = ? AND span_to = ? AND recipient = ?`,
		span.From.Unix(), span.To.Unix(), recipient).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reports sent: %w", err)
	}
	return true, nil
}

// mark records m as sent: its target accepted it.
func (s sentLog) mark(ctx context.Context, span mailSpan, m reportMail, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO report_mails (span_from, span_to, recipient, address, sent) VALUES (?, ?, ?, ?, ?)`,
		span.From.Unix(), span.To.Unix(), m.Recipient, m.To, now.Unix())
	if err != nil {
		return cli.WithHint(fmt.Errorf("sent, but not recorded as sent: %w", err), "the next run sends it again")
	}
	return nil
}
