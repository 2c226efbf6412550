package render

import (
	"encoding/json"
	"fmt"
	"github.com/gpumon/gpumon/internal/notify"
	"io"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/sshdtest"
	"github.com/gpumon/gpumon/internal/testenv"
)

// needExim stops a test that needs Debian's exim4 as the local MTA (its
// sendmail delivers local users' mail to /var/mail/USER).
func needExim(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t)
	if _, err := os.Stat("/usr/sbin/exim4"); err != nil {
		testenv.Need(t, "needs exim4 (apt-get install exim4-daemon-light)")
	}
}

// mailbox is a local user's mailbox, emptied for the test.
func mailbox(t testing.TB, user string) string {
	t.Helper()
	sshdtest.EnsureUser(t, user)
	path := "/var/mail/" + user
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return path
}

// readMails splits an mbox into its messages.
func readMails(t testing.TB, path string) []*mail.Message {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []*mail.Message
	for _, m := range strings.Split(string(data), "\nFrom ")[0:] {
		if strings.TrimSpace(m) == "" {
			continue
		}
		_, rest, _ := strings.Cut(m, "\n") // the mbox "From " line
		msg, err := mail.ReadMessage(strings.NewReader(rest))
		if err != nil {
			t.Fatalf("%s: %v\n%s", path, err, m)
		}
		out = append(out, msg)
	}
	return out
}

func subjects(msgs []*mail.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Header.Get("Subject"))
	}
	return out
}

// webhookLog is a webhook receiver on 127.0.0.1 that refuses (500) while
// refusing is set, and keeps what it accepted.
type webhookLog struct {
	mu       sync.Mutex
	refusing bool
	bodies   []map[string]any
	raw      [][]byte
}

func (w *webhookLog) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refusing {
		http.Error(rw, "maintenance", http.StatusInternalServerError)
		return
	}
	var m map[string]any
	json.Unmarshal(body, &m)
	w.bodies = append(w.bodies, m)
	w.raw = append(w.raw, body)
}

func (w *webhookLog) events() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.bodies {
		s := fmt.Sprintf("%v %v", m["event"], m["state"])
		if m["reminder"] == true {
			s += " again"
		}
		if h, _ := m["host"].(string); h != "" {
			s += " " + h
		}
		if g, _ := m["gpu"].(string); g != "" {
			s += "/" + g
		}
		out = append(out, s)
	}
	return out
}

// fleetAt is the CSV of two hosts at time at: gpu01's GPU 0 held by
// nfyalice (idle, 70 GB), unless released; gpu02 answering unless down;
// neither answering when allDown.
func fleetAt(t testing.TB, path string, at time.Time, released, gpu02Down, allDown bool) {
	t.Helper()
	ts := at.UTC().Format(loaddata.TimeFormat)
	gpu := func(host string, idx int64) loaddata.Row {
		return loaddata.Row{Timestamp: ts, Host: host, HostStatus: hoststatus.OK, GPUIndex: loaddata.IntOf(idx),
			GPUUUID: fmt.Sprintf("GPU-%s-%d", host, idx), GPUName: "NVIDIA H100 80GB HBM3", GPUBusID: fmt.Sprintf("00000000:%02d:00.0", idx+1),
			GPUUtilPct: loaddata.Num(0), MemUtilPct: loaddata.Num(0), MemUsedMiB: loaddata.Num(1), MemTotalMiB: loaddata.Num(81559)}
	}
	down := func(host string) loaddata.Row {
		return loaddata.Row{Timestamp: ts, Host: host, HostStatus: hoststatus.Unreachable, HostError: "connect: connection refused"}
	}
	var rows []loaddata.Row
	switch {
	case allDown:
		rows = append(rows, down("gpu01"))
	case released:
		rows = append(rows, gpu("gpu01", 0))
	default:
		r := gpu("gpu01", 0)
		r.MemUsedMiB = loaddata.Num(70000)
		r.PID, r.User, r.Command, r.ProcessMemMiB = loaddata.IntOf(4242), "nfyalice", "python train.py", loaddata.Num(70000)
		rows = append(rows, r)
	}
	if allDown || gpu02Down {
		rows = append(rows, down("gpu02"))
	} else {
		rows = append(rows, gpu("gpu02", 0))
	}
	if err := loaddata.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
}

// Cron's fetch && render every 5 minutes for five and a half hours, with
// a real webhook receiver that is down for a while and mail delivered by
// exim into local mailboxes: each episode fires, is reminded and resolves
// once and only once, in order, and nothing refused is lost.
func TestNotifyThroughRender(t *testing.T) {
	needExim(t)
	adminBox, aliceBox := mailbox(t, "nfyadmin"), mailbox(t, "nfyalice")
	hook := &webhookLog{}
	srv := httptest.NewServer(hook)
	defer srv.Close()

	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte(fmt.Sprintf(`[render]
html = index.html
[history]
idle_after = 1h
[notify]
webhook = %s/hooks/T000/B000/secret
mail_to = nfyadmin@localhost
mail_users = @localhost
sendmail = /usr/sbin/sendmail -t -i -odi
host_down_after = 15m
remind_after = 2h
page_url = https://gpus.example.org/
`, srv.URL)), 0o644)
	csv := filepath.Join(dir, "load_data.csv")
	start := time.Now().Truncate(time.Hour).Add(-6 * time.Hour)
	for m := 0; m <= 330; m += 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		clock := func() time.Time { return at.Add(20 * time.Second) }
		hook.mu.Lock()
		hook.refusing = m >= 100 && m <= 115 // the receiver is down for four runs
		hook.mu.Unlock()
		fleetAt(t, csv, at, m >= 270, m >= 90 && m < 240, m >= 300 && m < 325)
		runs := 1
		if m%30 == 0 {
			runs = 2 // cron's runs overlapping, or someone running render by hand
		}
		for range runs {
			_, stderr, err := renderMainAt(t, clock, "-c", ini, "-i", csv)
			refused := m >= 105 && m <= 115
			switch {
			case refused && (err == nil || !strings.Contains(err.Error(), "answered 500 Internal Server Error: maintenance")):
				t.Fatalf("minute %d, the receiver down: err %v, want its 500\n%s", m, err, stderr)
			case refused && strings.Contains(err.Error()+stderr, "secret"):
				t.Fatalf("minute %d: the webhook URL's secret path is shown: %v\n%s", m, err, stderr)
			case !refused && err != nil:
				t.Fatalf("minute %d: %v\n%s", m, err, stderr)
			}
		}
	}
	wantHook := []string{
		"idle_held firing gpu01/0",
		"host_down firing gpu02", // refused at 105..115, sent at 120
		"idle_held firing again gpu01/0",
		"host_down firing again gpu02",
		"host_down resolved gpu02",
		"idle_held resolved gpu01/0",
		"all_down firing",
		"all_down resolved",
	}
	if diff := cmp.Diff(wantHook, hook.events()); diff != "" {
		t.Errorf("webhook received (-want +got):\n%s", diff)
	}
	wantAdmin := []string{
		"[gpumon] GPU 0 on gpu01 idle-held for 1.0 h",
		"[gpumon] gpu02 down for 15 min",
		"[gpumon] still: GPU 0 on gpu01 idle-held for 3.0 h",
		"[gpumon] still: gpu02 down for 2.2 h",
		"[gpumon] resolved: gpu02 answers again",
		"[gpumon] resolved: GPU 0 on gpu01 released",
		"[gpumon] no host answers",
		"[gpumon] resolved: hosts answer again",
	}
	if diff := cmp.Diff(wantAdmin, subjects(readMails(t, adminBox))); diff != "" {
		t.Errorf("admin's mailbox (-want +got):\n%s", diff)
	}
	wantAlice := []string{
		"[gpumon] your GPU 0 on gpu01 has been idle for 1.0 h",
		"[gpumon] your GPU 0 on gpu01 has been idle for 3.0 h",
	}
	alice := readMails(t, aliceBox)
	if diff := cmp.Diff(wantAlice, subjects(alice)); diff != "" {
		t.Errorf("nfyalice's mailbox (-want +got):\n%s", diff)
	}
	if len(alice) > 0 {
		body, _ := io.ReadAll(quotedprintable.NewReader(alice[0].Body))
		for _, want := range []string{"held idle by nfyalice for 1.0 h", "68.4 GiB in use", "https://gpus.example.org/"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("nfyalice's mail lacks %q:\n%s", want, body)
			}
		}
		// no command line unless [notify] commands = yes
		if strings.Contains(string(body), "train.py") {
			t.Errorf("the mail holds the command line:\n%s", body)
		}
		if os.Getenv("GPUMON_SHOW_NOTES") != "" {
			raw, _ := os.ReadFile(aliceBox)
			t.Logf("as received by nfyalice:\n%s\nfirst webhook body:\n%s", raw, hook.raw[0])
		}
	}
}

// -notify-test tries every target at once and says what each answered.
func TestNotifyTestFlag(t *testing.T) {
	needExim(t)
	box := mailbox(t, "nfyadmin")
	good := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer good.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such hook", http.StatusNotFound)
	}))
	defer bad.Close()
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte(fmt.Sprintf("[notify]\nwebhook = %s/ok, %s/services/XYZ\nmail_to = nfyadmin@localhost\nmail_users = @example.org\nsendmail = /usr/sbin/sendmail -t -i -odi\n",
		good.URL, bad.URL)), 0o644)
	out, _, err := renderMain(t, "-c", ini, "-notify-test")
	want := fmt.Sprintf(`webhook %s/…: accepted
webhook %s/…: failed: answered 404 Not Found: no such hook
mail nfyadmin@localhost: handed to /usr/sbin/sendmail -t -i -odi
mail_users: the holder of an idle-held GPU, and a reservation's owner and its other holders, are mailed as USER@example.org (not tried here)
`, good.URL, bad.URL)
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if err == nil || err.Error() != "1 of 3 notification targets failed" {
		t.Errorf("error %v", err)
	}
	if got := subjects(readMails(t, box)); len(got) != 1 || got[0] != "[gpumon] test message" {
		t.Errorf("mailbox: %q", got)
	}
}

// A mailbox that refuses the mail (here, exim finds a folder where the
// mailbox should be) is the mail system's to retry: exim accepted the
// message and keeps it queued, so render's run is fine and nothing is lost.
func TestMailboxThatRefuses(t *testing.T) {
	needExim(t)
	box := mailbox(t, "nfybob")
	if err := os.Mkdir(box, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(box) })
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n[history]\nidle_after = 5m\n[notify]\nmail_users = @localhost\nsendmail = /usr/sbin/sendmail -t -i -odi\n"), 0o644)
	csv := filepath.Join(dir, "load_data.csv")
	start := time.Now().Add(-time.Hour)
	for m := 0; m <= 10; m += 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		clock := func() time.Time { return at }
		fleetAt(t, csv, at, false, false, false)
		data, _ := os.ReadFile(csv)
		os.WriteFile(csv, []byte(strings.ReplaceAll(string(data), "nfyalice", "nfybob")), 0o644)
		if _, stderr, err := renderMainAt(t, clock, "-c", ini, "-i", csv); err != nil {
			t.Fatalf("minute %d: %v\n%s", m, err, stderr)
		}
	}
	out, err := exec.Command("/usr/sbin/exim4", "-bp").CombinedOutput()
	if err != nil {
		t.Fatalf("exim4 -bp: %v\n%s", err, out)
	}
	var ids []string
	for _, block := range strings.Split(string(out), "\n\n") {
		if strings.Contains(block, "nfybob@localhost") {
			if f := strings.Fields(block); len(f) > 2 {
				ids = append(ids, f[2])
			}
		}
	}
	if len(ids) != 1 {
		t.Fatalf("exim's queue holds %d messages for nfybob, want the one render handed over:\n%s", len(ids), out)
	}
	exec.Command("/usr/sbin/exim4", "-Mrm", ids[0]).Run()
}

// Every host down for 20 minutes (the monitor's network) ends history's
// idle spells; back, the GPU still held idle by the same holder is the
// same episode: no "released" and no second firing an idle_after later.
func TestNotifyAcrossOutage(t *testing.T) {
	hook := &webhookLog{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte(fmt.Sprintf("[render]\nhtml = index.html\n[history]\nidle_after = 1h\n[notify]\nwebhook = %s/hook\n", srv.URL)), 0o644)
	csv := filepath.Join(dir, "load_data.csv")
	start := time.Now().Truncate(time.Hour).Add(-4 * time.Hour)
	for m := 0; m <= 160; m += 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		clock := func() time.Time { return at.Add(20 * time.Second) }
		fleetAt(t, csv, at, false, false, m >= 80 && m < 100)
		if _, stderr, err := renderMainAt(t, clock, "-c", ini, "-i", csv); err != nil {
			t.Fatalf("minute %d: %v\n%s", m, err, stderr)
		}
	}
	want := []string{"idle_held firing gpu01/0", "all_down firing", "all_down resolved"}
	if diff := cmp.Diff(want, hook.events()); diff != "" {
		t.Errorf("webhook received (-want +got):\n%s", diff)
	}
}

// -notify-test tries the targets side by side: a webhook that hangs does
// not spend the time of a sendmail that works (here the receiver hangs
// until the mail is handed over, which a one-by-one test never does).
func TestNotifyTestHangingWebhook(t *testing.T) {
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool")
	called := filepath.Join(dir, "webhook-called")
	// Each target waits for the other: the webhook answers only once the
	// mail is spooled, and sendmail reads the mail only once the webhook
	// was called. Sent one after the other, the first waits until
	// notify.Budget ends the try, and the second is never reached.
	fake := filepath.Join(dir, "sendmail")
	os.WriteFile(fake, []byte("#!/bin/sh\nwhile [ ! -e "+called+" ]; do sleep 0.05; done\ncat > "+spool+".tmp && mv "+spool+".tmp "+spool+"\n"), 0o755)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		os.WriteFile(called, nil, 0o644)
		giveUp := time.After(notify.Budget + 10*time.Second) // render has given up long before
		for {
			if _, err := os.Stat(spool); err == nil {
				break
			}
			select {
			case <-r.Context().Done():
				return
			case <-giveUp:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		http.Error(w, "slow", http.StatusServiceUnavailable)
	}))
	defer hang.Close()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte(fmt.Sprintf("[notify]\nwebhook = %s/hook\nmail_to = admins@example.org\nsendmail = %s -t -i\n", hang.URL, fake)), 0o644)
	out, _, _ := renderMain(t, "-c", ini, "-notify-test")
	if !strings.Contains(out, "mail admins@example.org: handed to "+fake) || !strings.Contains(out, "503") {
		t.Errorf("output:\n%s", out)
	}
}
