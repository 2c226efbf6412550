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
	if err := cfg.teamsUnread(); err != nil {
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
// what is missing, and two runs at once send each mail once. Each
// recipient gets a line on stdout, then the counts; the error, when any
// mail failed, makes cron mail the output.
func sendReports(ctx context.Context, log sentLog, span mailSpan, mails []reportMail,
	send func(context.Context, reportMail) error, now time.Time, stdout, stderr io.Writer) error {
	var sent, already, skipped int
	var errs []error
	for _, m := range mails {
		who := clean(m.Recipient, 80)
		done, err := log.sent(ctx, span, m.Recipient)
		if err == nil && !done && m.Skip == "" {
			switch taken, err := sendOnce(ctx, log, span, m, send, now); {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", who, err))
				fmt.Fprintf(stdout, "failed        %s <%s>: %v\n", who, m.To, err)
			case taken:
				already++
				fmt.Fprintf(stdout, "already sent  %s (by another render -report)\n", who)
			default:
				sent++
				fmt.Fprintf(stdout, "sent          %s <%s>\n", who, m.To)
			}
			continue
		}
		switch {
		case err != nil:
			errs = append(errs, err)
			fmt.Fprintf(stdout, "failed        %s: %v\n", who, err)
		case done:
			already++
			fmt.Fprintf(stdout, "already sent  %s\n", who)
		default:
			skipped++
			fmt.Fprintf(stdout, "skipped       %s: %s\n", who, m.Skip)
			fmt.Fprintf(stderr, "render: %s is not mailed a report: %s\n", who, m.Skip)
		}
	}
	fmt.Fprintf(stdout, "render: %d sent, %d already sent, %d skipped, %d failed\n", sent, already, skipped, len(errs))
	if len(errs) == 0 {
		return nil
	}
	errs[len(errs)-1] = cli.WithHint(errs[len(errs)-1], "run the same -report again: it sends only the reports not sent")
	return cli.Join(errs...)
}

// sendOnce sends m unless another run claimed it first (taken: it sends
// it, or has); a claim is dropped when the mail fails, and recorded as
// sent when its target accepts it.
func sendOnce(ctx context.Context, log sentLog, span mailSpan, m reportMail,
	send func(context.Context, reportMail) error, now time.Time) (taken bool, err error) {
	claimed, err := log.claim(ctx, span, m, time.Now())
	if err != nil || !claimed {
		return !claimed, err
	}
	if err := send(ctx, m); err != nil {
		log.release(ctx, span, m)
		return false, err
	}
	return false, log.mark(ctx, span, m, now)
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

// A row of report_mails is a mail sent (sent: its time, above 0) or one
// a run is sending (sent: minus the time of its claim). A claim older than
// claimStale is of a run that stopped before the mail went: another run
// takes it over.
const claimStale = 5 * time.Minute

// sent reports whether the span's report to recipient was sent.
func (s sentLog) sent(ctx context.Context, span mailSpan, recipient string) (bool, error) {
	var at int64
	err := s.db.QueryRowContext(ctx, `SELECT sent FROM report_mails WHERE span_from = ? AND span_to = ? AND recipient = ?`,
		span.From.Unix(), span.To.Unix(), recipient).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reports sent: %w", err)
	}
	return at > 0, nil
}

// claim takes m's sending for this run, at: false when another run has
// it, or sent it since sent was asked.
func (s sentLog) claim(ctx context.Context, span mailSpan, m reportMail, at time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO report_mails (span_from, span_to, recipient, address, sent) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (span_from, span_to, recipient) DO UPDATE SET address = excluded.address, sent = excluded.sent
		WHERE report_mails.sent < 0 AND -report_mails.sent < ?`,
		span.From.Unix(), span.To.Unix(), m.Recipient, m.To, -at.Unix(), at.Add(-claimStale).Unix())
	if err != nil {
		return false, fmt.Errorf("reports sent: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// release drops a claim whose mail failed, so that the next run sends it.
func (s sentLog) release(ctx context.Context, span mailSpan, m reportMail) {
	// best effort: a claim left goes stale
	s.db.ExecContext(ctx, `DELETE FROM report_mails WHERE span_from = ? AND span_to = ? AND recipient = ? AND sent < 0`,
		span.From.Unix(), span.To.Unix(), m.Recipient)
}

// mark records m as sent: its target accepted it.
func (s sentLog) mark(ctx context.Context, span mailSpan, m reportMail, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO report_mails (span_from, span_to, recipient, address, sent) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (span_from, span_to, recipient) DO UPDATE SET address = excluded.address, sent = excluded.sent`,
		span.From.Unix(), span.To.Unix(), m.Recipient, m.To, now.Unix())
	if err != nil {
		return cli.WithHint(fmt.Errorf("sent, but not recorded as sent: %w", err), "the next run sends it again")
	}
	return nil
}
