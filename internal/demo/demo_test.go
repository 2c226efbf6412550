package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/testenv"
)

// TestOnce runs the whole pipeline a newcomer sees, without serving: the
// simulated fleet, fetch, render. The page must show what the demo fleet
// holds: busy, free, reserved and failed GPUs, each where it belongs.
func TestOnce(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := Main(context.Background(), []string{"-once", "-dir", dir}, &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	page, err := os.ReadFile(filepath.Join(dir, "www", "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"status.json", "metrics.prom"} {
		if _, err := os.Stat(filepath.Join(dir, "www", f)); err != nil {
			t.Errorf("render did not write %s: %v", f, err)
		}
	}
	// the page's markup is minified: attribute values may be unquoted
	attr := func(tag, name string) string {
		m := regexp.MustCompile(`\s` + name + `=(?:"([^"]*)"|([^\s>"]*))`).FindStringSubmatch(tag)
		if m == nil {
			return ""
		}
		return m[1] + m[2]
	}
	cells := map[string]string{} // "host/gpu" -> state; a cell's host is its card's
	host := ""
	for _, tag := range regexp.MustCompile(`<[a-z]+\s[^>]*>`).FindAllString(string(page), -1) {
		class := " " + attr(tag, "class") + " "
		switch {
		case strings.Contains(class, " host "):
			host = attr(tag, "data-host")
		case strings.Contains(class, " gpu "):
			cells[host+"/"+attr(tag, "data-gpu")] = attr(tag, "data-state")
		}
	}
	state := func(host, gpu string) string { return cells[host+"/"+gpu] }
	tests := []struct{ host, gpu, want string }{
		{"h100-a01", "0", "busy"},     // alice's 8-GPU pretraining
		{"h200-b03", "0", "free"},     // idle host
		{"h200-b03", "2", "reserved"}, // reserved for alice until in 3 days
		{"h200-b03", "3", "free"},     // its reservation ended yesterday
		{"h100-a02", "0", "free"},     // only idlemon's preemptible job
		{"ws-c02", "0", "reserved"},   // the whole host is reserved
		{"h200-b04", "1", "busy"},     // heidi, on the host with a lost GPU
		{"h200-b03", "5", "failed"},   // its row remapping failed
		{"h200-b02", "6", "failed"},   // XIDs 48 and 79
		{"h200-b01", "6", "busy"},     // degraded, alice's run goes on
		{"ws-c03", "0", "free"},       // driver 465 lacks fields, not health
	}
	for _, tt := range tests {
		if got := state(tt.host, tt.gpu); got != tt.want {
			t.Errorf("%s GPU %s: state %q, want %q", tt.host, tt.gpu, got, tt.want)
		}
	}
	for _, want := range []string{"h200-b05", "refused", "lost", "the driver lists this GPU", "kernel log unreadable", "remap pending"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page does not mention %q", want)
		}
	}
	if !strings.Contains(stderr.String(), "h200-b05: unreachable") {
		t.Errorf("fetch's report of the failed host is missing:\n%s", stderr.String())
	}
	// the week of history says h200-b05 has been down all along: render
	// tells the demo's webhook once, with the others down since
	for _, told := range []string{"demo: webhook: Host h200-b05 has not answered for", "demo: webhook: GPU 1 on ws-c01 (NVIDIA GeForce RTX 2080 SUPER) has been held idle by judy for"} {
		if n := strings.Count(stdout.String(), told); n != 1 {
			t.Errorf("the webhook was told %q %d times, want once:\n%s", told, n, testenv.GrepLines(stdout.String(), "webhook"))
		}
	}
}

// A new demo has a week of history: the seeded snapshots are recorded and
// status.json says so; running it again on the same folder seeds nothing.
func TestOnceSeedsAWeek(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	for run := range 2 {
		var stdout, stderr bytes.Buffer
		if err := Main(context.Background(), []string{"-once", "-dir", dir}, &stdout, &stderr); err != nil {
			t.Fatalf("demo: %v\n%s", err, stderr.String())
		}
		seeded := strings.Contains(stdout.String(), "render -import")
		if seeded != (run == 0) {
			t.Errorf("run %d: seeded %v", run, seeded)
		}
	}
	var st struct {
		History *struct{ Snapshots int }
	}
	data, _ := os.ReadFile(filepath.Join(dir, "www", "status.json"))
	if err := json.Unmarshal(data, &st); err != nil || st.History == nil || st.History.Snapshots < 7*24*4 {
		t.Errorf("status.json's history: %v %+v, want a week of snapshots", err, st.History)
	}
}

// What demo refuses, it refuses before starting the fleet, with the usage
// or a hint.
func TestMainRefuses(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name  string
		args  []string
		usage bool   // a usage error
		want  string // in the error, and its hint
	}{
		{"an argument", []string{"-once", "now"}, true, `unexpected argument "now"`},
		{"an unknown flag", []string{"-fast"}, true, "flag provided but not defined: -fast"},
		{"-every under a second", []string{"-once", "-every", "500ms"}, true, "-every must be at least 1s"},
		{"an address in use", []string{"-addr", busy.Addr().String()}, false, "is in use: pick another address: make demo ADDR="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			// ended already: a demo that does not refuse fails at once
			// instead of serving
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var stdout, stderr bytes.Buffer
			err := Main(ctx, append(tt.args, "-dir", dir), &stdout, &stderr)
			var usage *cli.UsageError
			if err == nil || errors.As(err, &usage) != tt.usage {
				t.Fatalf("error %v, want a usage error: %v", err, tt.usage)
			}
			msg := err.Error()
			var hinted interface{ Hint() string }
			if errors.As(err, &hinted) {
				msg += ": " + hinted.Hint()
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q, want %q", msg, tt.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				t.Errorf("demo wrote %d files before refusing", len(entries))
			}
		})
	}
	var stdout bytes.Buffer
	if err := Main(context.Background(), []string{"-h"}, &stdout, io.Discard); !errors.Is(err, flag.ErrHelp) || stdout.String() != usage {
		t.Errorf("-h: %v, printed %q", err, stdout.String())
	}
}

// The seeded week gives each health condition a past: episodes that
// start, and some that end, not one that has lasted all week.
func TestPastHealth(t *testing.T) {
	now := loaddata.Row{XIDs: "48,79", RemappedRowsFailure: loaddata.TriOf(true), RemappedRowsPending: loaddata.TriOf(true),
		ECCUncorrected: loaddata.Num(2), ClockEvents: "sw_power_cap hw_slowdown"}
	type health struct {
		XIDs, ClockEvents string
		Failure, Pending  bool
		ECCUncorrected    float64
	}
	tests := []struct {
		name string
		age  time.Duration
		day  bool
		want health
	}{
		{"an hour ago, by day", time.Hour, true, health{"48,79", "sw_power_cap hw_slowdown", true, true, 2}},
		{"an hour ago, by night", time.Hour, false, health{"48,79", "sw_power_cap", true, true, 2}},
		{"a day and a half ago", 36 * time.Hour, true, health{"", "sw_power_cap hw_slowdown", true, false, 0}},
		{"three days ago, the first XIDs", 72*time.Hour + 10*time.Minute, true, health{"48,79", "sw_power_cap hw_slowdown", false, false, 0}},
		{"four days ago", 96 * time.Hour, false, health{"", "sw_power_cap", false, false, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := now
			pastHealth(&r, tt.age, tt.day)
			got := health{r.XIDs, r.ClockEvents, r.RemappedRowsFailure.Value, r.RemappedRowsPending.Value, r.ECCUncorrected.Value}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	r := loaddata.Row{ClockEvents: "hw_slowdown"}
	if pastHealth(&r, time.Hour, false); r.ClockEvents != "none" {
		t.Errorf("hw_slowdown alone at night became %q, want none", r.ClockEvents)
	}
}
