package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/render"
)

// seedDays and seedStep: a week of past snapshots, one every 15 minutes
// (max_gap's default, so that every hour counts).
const (
	seedDays = 7
	seedStep = 15 * time.Minute
)

// seedHistory gives a new demo a week to show: it writes past load_data.csv
// files made from the first fetch's (people going home at night, training
// runs rising and falling, a GPU left idle staying idle) and records them with
// `render -import`, the command a lab backfills its old files with. Only
// for a new demo folder: a history that is there is left as it is.
func (s *site) seedHistory(ctx context.Context, now time.Time, stdout, stderr io.Writer) error {
	rows, err := loaddata.ReadFile(s.csv)
	if err != nil {
		return err
	}
	dir := filepath.Join(s.dir, "seed")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// the newest past snapshot is less than max_gap before the first
	// fetch's, so that what goes on (a GPU left idle) goes on into it
	first := now
	for _, r := range rows {
		if t, err := time.Parse(loaddata.TimeFormat, r.Timestamp); err == nil && t.Before(first) {
			first = t
		}
	}
	var files []string
	for t := first.Add(-seedDays*24*time.Hour + 5*time.Minute); t.Before(first.Add(-seedStep / 2)); t = t.Add(seedStep) {
		f := filepath.Join(dir, t.UTC().Format("20060102T150405")+".csv")
		if err := loaddata.WriteFile(f, pastRows(rows, t, first)); err != nil {
			return err
		}
		files = append(files, f)
	}
	fmt.Fprintf(stdout, "\n== render -import %s/*.csv   (%d past snapshots, a week, to give the plots a history)\n", s.rel(dir), len(files))
	return render.Main(ctx, append([]string{"-c", s.config, "-import"}, files...), stdout, stderr)
}

// pastRows is rows as they might have been at t, the first fetch's being
// at first. Working hours are from 8 to 20 local time; at night most jobs
// are gone, and the rest run at lower utilization. Lost GPUs and failed
// hosts stay as they are; the GPUs' health has a past (pastHealth).
func pastRows(rows []loaddata.Row, t, first time.Time) []loaddata.Row {
	hour := float64(t.Hour()) + float64(t.Minute())/60
	day := hour >= 8 && hour < 20
	wave := 0.5 + 0.5*math.Sin(2*math.Pi*hour/24+float64(t.YearDay()))
	out := make([]loaddata.Row, 0, len(rows))
	for i, r := range rows {
		r.Timestamp = t.UTC().Format(loaddata.TimeFormat)
		pastHealth(&r, first.Sub(t), day)
		held := r.PID.Valid && !bool(r.Preemptible)
		// a job goes home at night, except every third one and alice's; a
		// GPU left idle (judy's notebook) stays held day and night
		idle := r.GPUUtilPct.Valid && r.GPUUtilPct.Value <= 5
		if held && !day && i%3 != 0 && r.User != "alice" && !idle {
			r.PID, r.User, r.Command, r.ProcessMemMiB, r.ProcessElapsedS = loaddata.Int{}, "", "", loaddata.Number{}, loaddata.Int{}
			r.GPUUtilPct, r.MemUsedMiB = loaddata.Num(0), loaddata.Num(3)
		} else if held && r.GPUUtilPct.Valid {
			if r.GPUUtilPct.Value > 5 { // one left idle stays idle (idle-held)
				r.GPUUtilPct = loaddata.Num(math.Round(40 + 59*wave))
			}
		}
		out = append(out, r)
	}
	return out
}

// pastHealth is how a GPU's health readings were age before the first
// fetch: the XIDs it logs now were logged in the last two hours and once,
// for half an hour, three days ago; a row remap failed two days ago; the
// remap pending and its ECC errors are a day old; hardware slowdown holds
// its clocks down in working hours only (the room is hot then). So the
// history has episodes to show, each with a start and, but for the
// present ones, an end.
func pastHealth(r *loaddata.Row, age time.Duration, day bool) {
	const hour = time.Hour
	if r.XIDs != "" && age > 2*hour && (age < 72*hour || age > 72*hour+30*time.Minute) {
		r.XIDs = ""
	}
	if r.RemappedRowsFailure.Value && age > 48*hour {
		r.RemappedRowsFailure = loaddata.TriOf(false)
	}
	if r.RemappedRowsPending.Value && age > 24*hour {
		r.RemappedRowsPending = loaddata.TriOf(false)
		r.ECCUncorrected = loaddata.Num(0)
	}
	if !day && strings.Contains(r.ClockEvents, health.HWSlowdown) {
		var rest []string
		for _, e := range strings.Fields(r.ClockEvents) {
			if e != health.HWSlowdown {
				rest = append(rest, e)
			}
		}
		r.ClockEvents = "none"
		if len(rest) > 0 {
			r.ClockEvents = strings.Join(rest, " ")
		}
	}
}
