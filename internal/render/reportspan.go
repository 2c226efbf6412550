package render

import (
	"fmt"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/inifile"
)

// mailSpan is the span a -report covers: whole local days, so that every
// run on one day (cron twice, a retry after a failure) reports the same
// span, and the once-per-span record knows it.
type mailSpan struct {
	From, To time.Time
	// Label names the span in a subject: "November 2026", "the week of
	// 2026-11-16", "2026-10-27 to 2026-11-25".
	Label string
}

// parseReportSpan reads -report's SPAN at now in loc: "month" is the last
// whole calendar month, "week" the last whole Monday-to-Sunday week, and
// a number of days ("30d") that many whole days ending at today's
// midnight.
func parseReportSpan(span string, now time.Time, loc *time.Location) (mailSpan, error) {
	now = now.In(loc)
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	switch span {
	case "month":
		to := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, loc)
		from := time.Date(now.Year(), now.Month()-1, 1, 0, 0, 0, 0, loc) // January's -1 is last December
		return mailSpan{From: from, To: to, Label: from.Format("January 2006")}, nil
	case "week":
		sinceMonday := (int(today.Weekday()) + 6) % 7
		to := time.Date(today.Year(), today.Month(), today.Day()-sinceMonday, 0, 0, 0, 0, loc)
		from := time.Date(to.Year(), to.Month(), to.Day()-7, 0, 0, 0, 0, loc)
		return mailSpan{From: from, To: to, Label: "the week of " + from.Format(time.DateOnly)}, nil
	}
	d, ok := inifile.ParseDuration(span)
	const day = 24 * time.Hour
	if !ok || d <= 0 || d%day != 0 || d > 3660*day {
		return mailSpan{}, &cli.UsageError{Msg: fmt.Sprintf("-report %q: want month, week or a number of whole days (7d, 30d)", span)}
	}
	from := time.Date(today.Year(), today.Month(), today.Day()-int(d/day), 0, 0, 0, 0, loc)
	last := time.Date(today.Year(), today.Month(), today.Day()-1, 0, 0, 0, 0, loc)
	label := from.Format(time.DateOnly) + " to " + last.Format(time.DateOnly)
	if from.Equal(last) {
		label = from.Format(time.DateOnly)
	}
	return mailSpan{From: from, To: today, Label: label}, nil
}
