package render

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hosttext"
)

// healthReport prints the GPUs with health episodes in the span back from
// now: `render -health 30d`, the list a sysadmin sends to the vendor.
func healthReport(ctx context.Context, cfg *Config, span, format string, now time.Time, stdout io.Writer) error {
	d, store, err := spanHistory(cfg, "-health", span, "24h, 30d or 1d12h")
	if err != nil {
		return err
	}
	defer store.Close()
	from, to := now.Add(-d), now
	gpus, err := store.Health(ctx, from, to)
	if err != nil {
		return fmt.Errorf("history %s: %w", cfg.History.DB, err)
	}
	switch format {
	case "csv":
		return healthCSV(stdout, gpus)
	case "json":
		return healthJSON(stdout, gpus, from, to)
	}
	return healthText(stdout, gpus, from, to)
}

// healthGPU is one GPU of `render -health -format json`.
type healthGPU struct {
	Host       string            `json:"host"`
	GPU        string            `json:"gpu"`
	Model      string            `json:"model"`
	UUID       string            `json:"uuid,omitempty"`
	State      string            `json:"state"` // at the newest snapshot: ok, degraded or failed
	Conditions []healthCondition `json:"conditions"`
}

// healthCondition is one condition of a GPU over the span.
type healthCondition struct {
	Condition string  `json:"condition"`
	Severity  string  `json:"severity"`
	Episodes  int     `json:"episodes"`
	Hours     float64 `json:"hours"`
	FirstSeen string  `json:"first_seen"`
	LastSeen  string  `json:"last_seen"`
	Ongoing   bool    `json:"ongoing"`
	Detail    string  `json:"detail"`
}

func healthRows(gpus []history.GPUHealth) []healthGPU {
	out := make([]healthGPU, 0, len(gpus))
	for _, g := range gpus {
		hg := healthGPU{Host: g.Host, GPU: g.GPU, Model: g.Model, UUID: g.UUID, State: stateNow(g)}
		for _, c := range g.Conditions {
			hg.Conditions = append(hg.Conditions, healthCondition{Condition: c.Condition, Severity: c.Severity,
				Episodes: c.Episodes, Hours: round(c.Seconds/3600, 3), FirstSeen: c.First.UTC().Format(time.RFC3339),
				LastSeen: c.Last.UTC().Format(time.RFC3339), Ongoing: c.Ongoing, Detail: c.Detail})
		}
		out = append(out, hg)
	}
	return out
}

// stateNow is g's state at the newest snapshot, by its conditions going
// on: "ok" when none is.
func stateNow(g history.GPUHealth) string {
	state := "ok"
	for _, c := range g.Conditions {
		switch {
		case !c.Ongoing:
		case c.Severity == health.Failed:
			return health.Failed
		case c.Severity == health.Degraded:
			state = health.Degraded
		}
	}
	return state
}

func healthJSON(w io.Writer, gpus []history.GPUHealth, from, to time.Time) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		From string      `json:"from"`
		To   string      `json:"to"`
		GPUs []healthGPU `json:"gpus"`
	}{from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), healthRows(gpus)})
}

// healthCSV writes a line per GPU and condition, with a header line.
func healthCSV(w io.Writer, gpus []history.GPUHealth) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"host", "gpu", "model", "uuid", "state", "condition", "severity", "episodes", "hours",
		"first_seen", "last_seen", "ongoing", "detail"})
	for _, g := range healthRows(gpus) {
		for _, c := range g.Conditions {
			cw.Write([]string{csvCell(g.Host), csvCell(g.GPU), csvCell(g.Model), csvCell(g.UUID), g.State,
				csvCell(c.Condition), csvCell(c.Severity), strconv.Itoa(c.Episodes), strconv.FormatFloat(c.Hours, 'f', 3, 64),
				c.FirstSeen, c.LastSeen, strconv.FormatBool(c.Ongoing), csvCell(c.Detail)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvCell is a value from a host on one printable line (a terminal that
// shows the file runs no escape), quoted with a leading ' where a
// spreadsheet would run it as a formula.
func csvCell(s string) string {
	s = hosttext.Printable(s)
	if s != "" && strings.ContainsRune("=+-@", rune(s[0])) {
		return "'" + s
	}
	return s
}

// healthText is a block per GPU: the GPU, then a line per condition.
func healthText(w io.Writer, gpus []history.GPUHealth, from, to time.Time) error {
	const stamp = "2006-01-02 15:04"
	b := bufio.NewWriter(w)
	span := fmt.Sprintf("from %s to %s UTC", from.UTC().Format(stamp), to.UTC().Format(stamp))
	if len(gpus) == 0 {
		fmt.Fprintf(b, "no GPU health problem recorded %s\n", span)
		return b.Flush()
	}
	fmt.Fprintf(b, "GPU health %s: %d GPUs with problems\n", span, len(gpus))
	for _, g := range gpus {
		fmt.Fprintf(b, "\n%s GPU %s", clean(g.Host, 40), clean(g.GPU, 40))
		for _, s := range []string{clean(g.Model, 40), clean(g.UUID, 48)} {
			if s != "" {
				fmt.Fprintf(b, ", %s", s)
			}
		}
		fmt.Fprintf(b, ": now %s\n", stateNow(g))
		width := len("condition")
		for _, c := range g.Conditions {
			width = max(width, strWidth(clean(c.Condition, 24)))
		}
		fmt.Fprintf(b, "  %s  %-8s  %8s  %10s  %-16s  %-16s  %s\n", pad("condition", width), "severity", "episodes",
			"time", "first seen", "last seen", "latest detail")
		for _, c := range g.Conditions {
			last := c.Last.UTC().Format(stamp)
			if c.Ongoing {
				last += "*"
			}
			fmt.Fprintf(b, "  %s  %-8s  %8d  %10s  %-16s  %-17s %s\n", pad(clean(c.Condition, 24), width), clean(c.Severity, 8),
				c.Episodes, ageText(time.Duration(c.Seconds)*time.Second), c.First.UTC().Format(stamp), last, clean(c.Detail, 120))
		}
	}
	fmt.Fprintln(b, "\n* going on at the newest snapshot; time counts within the span")
	return b.Flush()
}
