package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/notify"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"github.com/gpumon/gpumon/internal/testenv"
)

// hookLog is a webhook receiver that keeps each event as one line.
type hookLog struct {
	mu     sync.Mutex
	events []string
	bodies []map[string]any
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m map[string]any
	json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&m)
	s := fmt.Sprintf("%v %v", m["event"], m["state"])
	if m["reminder"] == true {
		s += " again"
	}
	if host, _ := m["host"].(string); host != "" {
		s += " " + host
	}
	if gpu, _ := m["gpu"].(string); gpu != "" {
		s += "/" + gpu
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, s)
	h.bodies = append(h.bodies, m)
}

// mailSubjects empties user's mailbox for the test and returns a function
// that reads the subjects delivered to it since.
func mailSubjects(t testing.TB, user string) func() ([]string, []*mail.Message) {
	t.Helper()
	testenv.NeedRoot(t)
	if _, err := os.Stat("/usr/sbin/exim4"); err != nil {
		testenv.Need(t, "needs exim4 (apt-get install exim4-daemon-light)")
	}
	sshdtest.EnsureUser(t, user)
	path := "/var/mail/" + user
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return func() ([]string, []*mail.Message) {
		data, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var subjects []string
		var msgs []*mail.Message
		for _, m := range strings.Split(string(data), "\nFrom ") {
			if strings.TrimSpace(m) == "" {
				continue
			}
			_, rest, _ := strings.Cut(m, "\n") // the mbox "From " line
			msg, err := mail.ReadMessage(strings.NewReader(rest))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			subjects = append(subjects, msg.Header.Get("Subject"))
			msgs = append(msgs, msg)
		}
		return subjects, msgs
	}
}

// healthFleet is the cluster at minute m of TestHealthToldAndRemembered:
// gpu01's GPU 3 degraded (a remap pending) from minute 10, failed (the
// remap failed) from 40, repaired at 90; gpu02's other GPU lost all along,
// gpu02 not answering from minute 60 to 80.
func healthFleet(at time.Time, m int) *cluster.Cluster {
	gpu := func(i int, r health.Readings) *cluster.GPU {
		g := &cluster.GPU{Index: i, HasIndex: true, UUID: fmt.Sprintf("GPU-%d", i), Name: "NVIDIA H100 80GB HBM3",
			State: cluster.Free, Health: health.Assess(r, health.DefaultPolicy())}
		if g.Health.State == health.Failed {
			g.State = cluster.Failed
		}
		return g
	}
	var r3 health.Readings
	switch {
	case m >= 10 && m < 40:
		r3.RemapPending = true
	case m >= 40 && m < 90:
		r3.RemapPending, r3.RemapFailure = true, true
	}
	gpu01 := &cluster.Host{Name: "gpu01", Status: hoststatus.OK, GPUs: []*cluster.GPU{gpu(0, health.Readings{}), gpu(3, r3)}}
	lost := gpu(0, health.Readings{Lost: "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error"})
	lost.HasIndex, lost.BusID, lost.UUID = false, "00000000:3B:00.0", ""
	gpu02 := &cluster.Host{Name: "gpu02", Status: hoststatus.OK, GPUs: []*cluster.GPU{gpu(0, health.Readings{}), lost}}
	if m >= 60 && m < 80 {
		gpu02 = &cluster.Host{Name: "gpu02", Status: hoststatus.Unreachable}
	}
	return &cluster.Cluster{DataTime: at, Hosts: []*cluster.Host{gpu01, gpu02}}
}

// Runs every 5 minutes for two hours and more, with a real webhook
// receiver and mail delivered by exim: each GPU's gpu_failed and
// gpu_degraded episodes fire, remind and resolve once and only once (a GPU
// going from degraded to failed fires gpu_failed and resolves
// gpu_degraded; a GPU on a host that stops answering waits), the messages
// name the GPU, its model and the findings' words, and the history keeps
// each condition's episodes.
func TestHealthToldAndRemembered(t *testing.T) {
	adminMail := mailSubjects(t, "hltadmin")
	hook := &hookLog{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	db := filepath.Join(t.TempDir(), "history.db")
	cfg := Config{
		History: history.Config{DB: db, Params: history.DefaultParams, KeepDays: 14},
		Notify: notify.Config{Targets: notify.Targets{Webhooks: []string{srv.URL + "/hook"}, MailTo: []string{"hltadmin@localhost"}},
			Params:   notify.Params{HostDownAfter: 15 * time.Minute, RemindAfter: 2 * time.Hour},
			Sendmail: []string{"/usr/sbin/sendmail", "-t", "-i", "-odi"}},
	}
	start := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	for m := 0; m <= 130; m += 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		runs := 1
		if m%30 == 0 {
			runs = 2 // the same data rendered twice tells nothing new
		}
		for range runs {
			var log strings.Builder
			err := Publish(context.Background(), cfg, Run{Cluster: healthFleet(at, m), Now: at.Add(20 * time.Second), Loc: time.UTC,
				Log: &log, Prog: "render", Files: func(History) []File { return nil }})
			if err != nil {
				t.Fatalf("minute %d: %v\n%s", m, err, log.String())
			}
		}
	}
	lost := "gpu02/00000000:3B:00.0"
	wantHook := []string{
		"gpu_failed firing " + lost,
		"gpu_degraded firing gpu01/3",
		"gpu_failed firing gpu01/3", "gpu_degraded resolved gpu01/3",
		"host_down firing gpu02",
		"host_down resolved gpu02",
		"gpu_failed resolved gpu01/3",
		"gpu_failed firing again " + lost,
	}
	if diff := cmp.Diff(wantHook, hook.events); diff != "" {
		t.Errorf("webhook received (-want +got):\n%s", diff)
	}
	wantAdmin := []string{
		"[gpumon] GPU 00000000:3B:00.0 on gpu02 failed",
		"[gpumon] GPU 3 on gpu01 degraded",
		"[gpumon] 1 GPU failed, 1 GPU no longer degraded",
		"[gpumon] gpu02 down for 15 min",
		"[gpumon] resolved: gpu02 answers again",
		"[gpumon] resolved: GPU 3 on gpu01 no longer failed",
		"[gpumon] still: GPU 00000000:3B:00.0 on gpu02 failed",
	}
	subjects, msgs := adminMail()
	if diff := cmp.Diff(wantAdmin, subjects); diff != "" {
		t.Errorf("admin's mailbox (-want +got):\n%s", diff)
	}
	if len(msgs) >= 3 {
		body, _ := io.ReadAll(quotedprintable.NewReader(msgs[2].Body))
		for _, want := range []string{
			"GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) has failed (for 0 min, since ",
			"a row remapping failed: the GPU needs service; a row remapping is pending: reset the GPU when idle. It is offered to nobody.",
			"GPU 3 on gpu01 (NVIDIA H100 80GB HBM3) is no longer degraded (it was for 30 min, since ",
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("the mail of minute 40 lacks %q:\n%s", want, body)
			}
		}
	}
	if len(hook.bodies) > 0 {
		if f, _ := hook.bodies[0]["findings"].([]any); len(f) != 1 || !strings.Contains(fmt.Sprint(f[0]), "Unable to determine the device handle") {
			t.Errorf("the first webhook's findings: %v", hook.bodies[0]["findings"])
		}
	}
	checkHealthHistory(t, cfg.History, start)
}

// checkHealthHistory: what TestHealthToldAndRemembered's history keeps.
func checkHealthHistory(t testing.TB, c history.Config, start time.Time) {
	t.Helper()
	store, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	got, err := store.Health(context.Background(), start, start.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		GPU, Condition string
		Episodes       int
		Minutes        float64
	}
	var rows []row
	for _, g := range got {
		for _, c := range g.Conditions {
			rows = append(rows, row{g.Host + "/" + g.GPU, c.Condition, c.Episodes, c.Seconds / 60})
		}
	}
	want := []row{
		{"gpu01/3", health.RemapFailure, 1, 50},
		{"gpu01/3", health.RemapPending, 1, 80},
		// the host down from minute 60 to 80 ends the first; the second
		// goes on, counted to its latest sighting
		{"gpu02/00000000:3B:00.0", health.Lost, 2, 60 + 50},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("the history's health (-want +got):\n%s", diff)
	}
}
