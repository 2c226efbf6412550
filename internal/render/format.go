package render

import (
	"fmt"
	"github.com/gpumon/gpumon/internal/publish"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hosttext"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/reservations"
)

// Report is what one run renders: the classified cluster and the settings
// and clock it was rendered with.
type Report struct {
	Cluster  *cluster.Cluster
	Config   *Config
	Now      time.Time      // when the page is made; data age is Now - DataTime
	Loc      *time.Location // times on the page are shown in this zone
	Warnings []string       // shown on the page (a bad reservations file)
	JSONLink string         // status.json's name when it sits beside the page
	PromLink string
	TextLink string           // index.txt's, the same way
	FreeLink string           // free.txt's
	History  *history.Summary // nil when history is off or could not be read
}

// age is how old the newest reading is; negative when unknown: no time,
// or a time ahead of this machine's clock (a clock set wrong: such data
// would otherwise never be stale).
func (r *Report) age() time.Duration {
	if r.Cluster.DataTime.IsZero() || r.Cluster.DataTime.Sub(r.Now) > publish.MaxAhead {
		return -1
	}
	a := r.Now.Sub(r.Cluster.DataTime)
	if a < 0 {
		return 0
	}
	return a
}

// noTimeText says why data with no time is stale.
const noTimeText = "no reading has a timestamp that could be read, so the data's age is unknown"

// unknownAgeText says why the data's age is unknown.
func (r *Report) unknownAgeText() string {
	if t := r.Cluster.DataTime; !t.IsZero() {
		return fmt.Sprintf("the newest reading is dated %s, ahead of this machine's clock (%s): check the clocks of the hosts and of this machine",
			t.UTC().Format(loaddata.TimeFormat), r.Now.UTC().Format(loaddata.TimeFormat))
	}
	if r.Cluster.BadTime != "" {
		return noTimeText + " (the first that could not: " + r.Cluster.BadTime + ")"
	}
	return noTimeText
}

// stale reports whether the data is older than stale_after (or has no time).
func (r *Report) stale() bool {
	a := r.age()
	return a < 0 || a > r.Config.StaleAfter
}

// ageText is "under a minute", "12 min", "3 h 5 min" or "4 days"; a known
// age only (see Age): the callers say "unknown" in a sentence of their own.
func ageText(d time.Duration) string {
	m := int(d / time.Minute)
	switch {
	case m < 1:
		return "under a minute"
	case m < 60:
		return fmt.Sprintf("%d min", m)
	case m < 48*60:
		return fmt.Sprintf("%d h %d min", m/60, m%60)
	}
	return fmt.Sprintf("%d days", m/60/24)
}

// durText is a setting's duration: "15 min", "60 s", "1 h".
func durText(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// elapsedText is a process's running time: "45 s", "12 min", "3 h 02", "5 d 4 h".
func elapsedText(n loaddata.Int) string {
	if !n.Valid {
		return "?"
	}
	s := n.Value
	switch {
	case s < 60:
		return fmt.Sprintf("%d s", s)
	case s < 3600:
		return fmt.Sprintf("%d min", s/60)
	case s < 86400:
		return fmt.Sprintf("%d h %02d", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%d d %d h", s/86400, s%86400/3600)
}

// gib writes MiB as GiB: "0.4", "9.5", "80".
func gib(mib float64) string {
	g := mib / 1024
	if g < 9.95 {
		return strconv.FormatFloat(g, 'f', 1, 64)
	}
	return strconv.FormatFloat(g, 'f', 0, 64)
}

// appendGib is gib appended to b.
func appendGib(b []byte, mib float64) []byte {
	g := mib / 1024
	if g < 9.95 {
		return strconv.AppendFloat(b, g, 'f', 1, 64)
	}
	return strconv.AppendFloat(b, g, 'f', 0, 64)
}

// memText is "30/80G", or "" when nothing is known.
func memText(used, total loaddata.Number) string { return string(appendMemText(nil, used, total)) }

// appendMemText is memText appended to b.
func appendMemText(b []byte, used, total loaddata.Number) []byte {
	switch {
	case used.Valid && total.Valid:
		b = appendGib(b, used.Value)
		b = append(b, '/')
		b = appendGib(b, total.Value)
		return append(b, 'G')
	case used.Valid:
		return append(appendGib(b, used.Value), "G used"...)
	case total.Valid:
		return append(appendGib(append(b, "?/"...), total.Value), 'G')
	}
	return b
}

// memPct is the share of memory used, 0-100.
func memPct(used, total loaddata.Number) int {
	if !used.Valid || !total.Valid || total.Value <= 0 {
		return 0
	}
	p := int(used.Value/total.Value*100 + 0.5)
	return max(0, min(100, p))
}

func num(n loaddata.Number, unit string) string {
	if !n.Valid {
		return ""
	}
	return strconv.FormatFloat(n.Value, 'f', -1, 64) + unit
}

// sensors is "51°C · 412/700W · fan 30%", leaving out what is unknown.
func sensors(g *cluster.GPU) string {
	var buf [64]byte
	b := buf[:0]
	const sep = " · "
	if g.Temp.Valid {
		b = append(appendFloat(b, g.Temp.Value), "°C"...)
	}
	if g.Power.Valid {
		if len(b) > 0 {
			b = append(b, sep...)
		}
		b = strconv.AppendFloat(b, g.Power.Value, 'f', 0, 64) // fmt's %.0f
		if g.PowerLimit.Valid {
			b = strconv.AppendFloat(append(b, '/'), g.PowerLimit.Value, 'f', 0, 64)
		}
		b = append(b, 'W')
	}
	if g.Fan.Valid {
		if len(b) > 0 {
			b = append(b, sep...)
		}
		b = append(appendFloat(append(b, "fan "...), g.Fan.Value), '%')
	}
	return string(b)
}

// userName shows a process owner ps could not name, and cuts a name too
// long for a table cell (status.json has it whole).
func userName(u string) string {
	if u == "" {
		return "(unknown)"
	}
	return hosttext.Clip(u, 64)
}

// shorten cuts a long command line for the page; status.json has it whole.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// reasonText is the first clause of an error, for a small cell: "GPU is
// lost; reboot the system..." is "GPU is lost". At most n characters.
func reasonText(s string, n int) string {
	if i := strings.IndexAny(s, ";\n"); i > 0 {
		s = s[:i]
	}
	if i := strings.Index(s, " ("); i > 0 {
		s = s[:i]
	}
	return shorten(strings.TrimSpace(s), n)
}

// timeText is a time for people: "2026-11-23 14:10 UTC".
func timeText(t time.Time, loc *time.Location) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.In(loc).Format("2006-01-02 15:04 MST")
}

// reservationText is "reserved by alice until 2026-12-01 18:00: ICML", for
// the terminal.
func reservationText(r *reservations.Reservation, loc *time.Location) string {
	return reservationWith(r, func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04") })
}

// reservationWith is reservationText with the end written by until.
func reservationWith(r *reservations.Reservation, until func(time.Time) string) string {
	if r == nil {
		return ""
	}
	s := "reserved"
	if r.Name != "" {
		s += " by " + r.Name
	}
	if !r.Until.IsZero() {
		s += " until " + until(r.Until)
	}
	if r.Comment != "" {
		s += ": " + r.Comment
	}
	return s
}

// appendFloat appends v as strconv.AppendFloat(b, v, 'f', -1, 64) does,
// faster for a whole number (most readings are: MiB, watts, °C, 0).
func appendFloat(b []byte, v float64) []byte {
	// below 2^53 a whole number's shortest form is its digits; -0 is "-0"
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 && (v != 0 || !math.Signbit(v)) {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}
