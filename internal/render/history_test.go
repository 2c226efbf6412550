package render

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/gpumon/gpumon/internal/cli"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/testenv"
)

// csvAt is testdata/load_data.csv moved to m minutes after 14:05 (every
// row's time shifted alike).
func csvAt(t testing.TB, dir string, m int) string {
	t.Helper()
	data, err := os.ReadFile("testdata/load_data.csv")
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 23, 14, 5, 0, 0, time.UTC)
	s := string(data)
	for _, old := range []string{"2026-11-23T14:04:58Z", "2026-11-23T14:05:00Z", "2026-11-23T14:05:20Z"} {
		tt, _ := time.Parse(time.RFC3339, old)
		s = strings.ReplaceAll(s, old, tt.Add(time.Duration(m)*time.Minute).Format(time.RFC3339))
	}
	path := filepath.Join(dir, fmt.Sprintf("load_data-%s.csv", base.Add(time.Duration(m)*time.Minute).Format("150405")))
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func renderMain(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return renderMainAt(t, time.Now, args...)
}

// renderMainAt is render run at the time clock says.
func renderMainAt(t testing.TB, clock func() time.Time, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = mainAt(context.Background(), args, &o, &e, clock)
	if err != nil {
		cli.Print("render", err, &e)
	}
	return o.String(), e.String(), err
}

// cron's fetch && render, every 5 minutes for an hour: each run records
// its snapshot; status.json and metrics.prom carry the hours; the same
// CSV rendered twice is counted once; -usage prints them.
func TestHistoryThroughRender(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
	for m := 0; m <= 60; m += 5 {
		in := csvAt(t, dir, m)
		for range 2 { // the second run of the same data records nothing
			if _, stderr, err := renderMain(t, "-c", ini, "-i", in); err != nil {
				t.Fatalf("render at minute %d: %v\n%s", m, err, stderr)
			}
		}
	}
	var st status
	data, _ := os.ReadFile(filepath.Join(dir, "status.json"))
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	if st.History == nil || st.History.Snapshots != 13 {
		t.Fatalf("history = %+v, want 13 snapshots", st.History)
	}
	hours := map[string]float64{}
	for _, u := range st.Users {
		if u.GPUHoursByWindow == nil {
			t.Fatalf("user %q has no gpu_hours", u.User)
		}
		hours[u.User] = u.GPUHoursByWindow.D30
	}
	// for the hour (12 spans of 5 min), alice shares gpu01's GPU 1 with
	// bob and mig01's GPU 0 with a user ps could not name (testdata)
	if hours["alice"] != 1 || hours["bob"] != 0.5 || hours[""] != 0.5 {
		t.Errorf("GPU-hours in 30d = %v, want alice 1, bob 0.5, unknown 0.5", hours)
	}
	for _, h := range st.Hosts {
		// down in every snapshot: since when is not known, and no GPU was seen
		if !h.Up && (h.DownSince != nil || h.LastKnownGPUs == nil || len(h.LastKnownGPUs) != 0) {
			t.Errorf("host %s, down all along: down_since %v, last_known_gpus %v; want null and []", h.Name, h.DownSince, h.LastKnownGPUs)
		}
	}
	prom, _ := os.ReadFile(filepath.Join(dir, "metrics.prom"))
	if !bytes.Contains(prom, []byte(`gpumon_user_gpu_seconds_total{user="alice"} 3600`)) {
		t.Errorf("metrics.prom lacks alice's 3600 GPU-seconds:\n%s", testenv.GrepLines(string(prom), "gpu_seconds_total"))
	}
	// -usage at the data's time: the clock is the test's, so look far back
	out, stderr, err := renderMain(t, "-c", ini, "-usage", "3650d", "-format", "csv")
	if err != nil {
		t.Fatalf("-usage: %v\n%s", err, stderr)
	}
	if want := "user,gpu_hours,idle_held_gpu_hours,peak_gpus,share\nalice,1.000,0.000,2,"; !strings.HasPrefix(out, want) {
		t.Errorf("-usage csv:\n%s\nwant it to start with\n%s", out, want)
	}
}

// A backfill in any order with a bad file among them: the others are
// recorded, the bad one is named, the exit is an error; importing again
// records nothing twice.
func TestImport(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
	var files []string
	for m := 60; m >= 0; m -= 5 { // newest first
		files = append(files, csvAt(t, dir, m))
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("not,a,load_data\n1,2,3\n"), 0o644)
	args := append([]string{"-c", ini, "-import", bad}, files...)
	out, stderr, err := renderMain(t, args...)
	if err == nil || !strings.Contains(stderr, "render: error: "+bad) {
		t.Errorf("import with a bad file: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "13 recorded, 0 already recorded, 1 failed") {
		t.Errorf("import said %q", out)
	}
	out, _, err = renderMain(t, append([]string{"-c", ini, "-import"}, files...)...)
	if err != nil || !strings.Contains(out, "0 recorded, 13 already recorded, 0 failed") {
		t.Errorf("second import: %v, %q", err, out)
	}
	out, _, err = renderMain(t, "-c", ini, "-usage", "3650d", "-format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var u struct{ Users []usageRow }
	if err := json.Unmarshal([]byte(out), &u); err != nil || len(u.Users) < 2 || u.Users[0].GPUHours != 1 {
		t.Errorf("usage after import: %v %s", err, out)
	}
}

// -import names what is not a file, and goes on with the others: a FIFO
// nobody writes would block it for ever, SIGTERM or not.
func TestImportNotAFile(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
	fifo := filepath.Join(dir, "fifo.csv")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	csv := csvAt(t, dir, 0)
	done := make(chan struct{})
	var out, stderr string
	var err error
	go func() {
		defer close(done)
		out, stderr, err = renderMain(t, "-c", ini, "-import", fifo, dir, csv)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("render -import of a FIFO still waits after a minute")
	}
	for _, want := range []string{fifo + ": not a regular file", dir + ": not a regular file"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if err == nil || !strings.Contains(out, "1 recorded, 0 already recorded, 2 failed") {
		t.Errorf("import: %v, said %q", err, out)
	}
}

// A history database that is not one: the page is still written, it says
// why history is missing, and render exits 1 for cron's mail.
func TestBrokenHistoryKeepsThePage(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "history.db"), bytes.Repeat([]byte("garbage "), 512), 0o600)
	_, stderr, err := renderMain(t, "-c", ini, "-i", csvAt(t, dir, 0))
	if err == nil || !strings.Contains(err.Error(), "history") {
		t.Errorf("render with a broken history: %v, want an error naming the history", err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if !bytes.Contains(page, []byte("History (")) {
		t.Errorf("the page does not say why history is missing; stderr:\n%s", stderr)
	}
	var st status
	data, _ := os.ReadFile(filepath.Join(dir, "status.json"))
	if err := json.Unmarshal(data, &st); err != nil || st.History != nil || st.Summary.GPUs == 0 {
		t.Errorf("status.json without history: %v, history %+v, %d GPUs", err, st.History, st.Summary.GPUs)
	}
}

// What can happen to the database between or during runs: truncated, or
// deleted (a new one is made, or the open one goes on unlinked), two
// renders at once, and a CSV older than the newest recorded (a clock that
// went back): the page is always written, and nothing is counted twice.
func TestHistoryFaults(t *testing.T) {
	setup := func(t *testing.T) (dir, ini string) {
		dir = t.TempDir()
		ini = filepath.Join(dir, "config.ini")
		os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
		return dir, ini
	}
	alice := func(t *testing.T, dir string) float64 {
		t.Helper()
		var st status
		data, _ := os.ReadFile(filepath.Join(dir, "status.json"))
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatal(err)
		}
		for _, u := range st.Users {
			if u.User == "alice" && u.GPUHoursByWindow != nil {
				return u.GPUHoursByWindow.D30
			}
		}
		return -1
	}
	t.Run("truncated", func(t *testing.T) {
		dir, ini := setup(t)
		for _, m := range []int{0, 5} {
			if _, stderr, err := renderMain(t, "-c", ini, "-i", csvAt(t, dir, m)); err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
		}
		db := filepath.Join(dir, "history.db")
		os.Remove(db + "-wal")
		os.Remove(db + "-shm")
		if err := os.Truncate(db, 1000); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "index.html"))
		_, _, err := renderMain(t, "-c", ini, "-i", csvAt(t, dir, 10))
		if err == nil {
			t.Error("a truncated database gave no error")
		}
		if _, err := os.Stat(filepath.Join(dir, "index.html")); err != nil {
			t.Errorf("no page with a truncated database: %v", err)
		}
	})
	t.Run("deleted between runs", func(t *testing.T) {
		dir, ini := setup(t)
		renderMain(t, "-c", ini, "-i", csvAt(t, dir, 0))
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(filepath.Join(dir, "history.db"+suffix))
		}
		if _, stderr, err := renderMain(t, "-c", ini, "-i", csvAt(t, dir, 5)); err != nil {
			t.Fatalf("after the database was deleted: %v\n%s", err, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "history.db")); err != nil {
			t.Errorf("no new database: %v", err)
		}
	})
	t.Run("clock back", func(t *testing.T) {
		dir, ini := setup(t)
		for _, m := range []int{0, 5, 10, 20, 15, 15, 25} { // 15 after 20, then twice
			if _, stderr, err := renderMain(t, "-c", ini, "-i", csvAt(t, dir, m)); err != nil {
				t.Fatalf("minute %d: %v\n%s", m, err, stderr)
			}
		}
		// 5 spans of 5 minutes; alice holds half of two GPUs
		if got := alice(t, dir); got != round(25.0/60, 3) {
			t.Errorf("alice's GPU-hours = %v, want %v", got, round(25.0/60, 3))
		}
	})
	t.Run("two at once", func(t *testing.T) {
		dir, ini := setup(t)
		inputs := []string{}
		for m := 0; m <= 55; m += 5 {
			inputs = append(inputs, csvAt(t, dir, m))
		}
		errs := make(chan error, 2*len(inputs))
		done := make(chan bool)
		for range 2 {
			go func() {
				for _, in := range inputs {
					if _, stderr, err := renderMain(t, "-c", ini, "-i", in); err != nil {
						errs <- fmt.Errorf("%v: %s", err, stderr)
					}
				}
				done <- true
			}()
		}
		<-done
		<-done
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		renderMain(t, "-c", ini, "-i", inputs[len(inputs)-1])
		if got := alice(t, dir); got != round(55.0/60, 3) {
			t.Errorf("alice's GPU-hours = %v, want %v (each snapshot once)", got, round(55.0/60, 3))
		}
	})
}

// Data dated ahead of this machine's clock (year 9999) is stale with a
// reason, and is not recorded: it would push the whole history out.
func TestDataFromTheFuture(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
	renderMain(t, "-c", ini, "-i", csvAt(t, dir, 0))
	data, _ := os.ReadFile(csvAt(t, dir, 0))
	future := filepath.Join(dir, "future.csv")
	os.WriteFile(future, []byte(strings.ReplaceAll(string(data), "2026-11-23T", "9999-11-23T")), 0o644)
	_, _, err := renderMain(t, "-c", ini, "-i", future)
	if err == nil || !strings.Contains(err.Error(), "ahead of this machine's clock") {
		t.Errorf("render of data from 9999: %v, want an error saying it was not recorded", err)
	}
	var st status
	raw, _ := os.ReadFile(filepath.Join(dir, "status.json"))
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if !st.Stale || st.AgeSeconds != nil || st.History == nil || st.History.Snapshots != 1 {
		t.Errorf("status: stale %v, age %v, history %+v; want stale, no age, the 1 earlier snapshot", st.Stale, st.AgeSeconds, st.History)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if !bytes.Contains(page, []byte("ahead of this machine")) {
		t.Error("the page does not say the data is dated ahead of the clock")
	}
}

// A database that cannot be written (immutable, as root's own chattr +i
// makes it: permissions do not stop root): the page is still written, with
// the history there is, and render exits 1.
func TestReadOnlyHistory(t *testing.T) {
	testenv.NeedRoot(t)
	if _, err := exec.LookPath("chattr"); err != nil {
		testenv.Need(t, "chattr (e2fsprogs) is needed: "+err.Error())
	}
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
	for _, m := range []int{0, 5} {
		if _, stderr, err := renderMain(t, "-c", ini, "-i", csvAt(t, dir, m)); err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
	}
	db := filepath.Join(dir, "history.db")
	if out, err := exec.Command("chattr", "+i", db).CombinedOutput(); err != nil {
		testenv.Need(t, fmt.Sprintf("chattr +i on %s: %v %s", dir, err, out))
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", db).Run() })
	os.Remove(filepath.Join(dir, "index.html"))
	_, _, err := renderMain(t, "-c", ini, "-i", csvAt(t, dir, 10))
	if err == nil || !strings.Contains(err.Error(), "history") {
		t.Errorf("render with a read-only history: %v, want an error naming the history", err)
	}
	page, rerr := os.ReadFile(filepath.Join(dir, "index.html"))
	if rerr != nil || !bytes.Contains(page, []byte("this snapshot was not recorded")) {
		t.Errorf("no page, or no warning on it: %v", rerr)
	}
}

func TestOneModeAtATime(t *testing.T) {
	for _, args := range [][]string{{"-usage", "24h", "-import", "x.csv"}, {"-text", "-usage", "7d"}, {"-free", "-import", "x.csv"}} {
		_, _, err := renderMain(t, args...)
		if err == nil || !strings.Contains(err.Error(), "use one of them") {
			t.Errorf("render %q: %v, want a usage error", args, err)
		}
	}
}

// On a history's first day, -usage says why it shows no hours yet rather
// than an empty table: only whole hours count.
func TestUsageFirstHour(t *testing.T) {
	dir := t.TempDir()
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[render]\nhtml = index.html\n"), 0o644)
	csv := filepath.Join(dir, "load_data.csv")
	at := time.Now().UTC().Truncate(time.Hour).Add(23 * time.Minute)
	fleetAt(t, csv, at, false, false, false)
	if _, stderr, err := renderMainAt(t, func() time.Time { return at.Add(time.Minute) }, "-c", ini, "-i", csv); err != nil {
		t.Fatalf("render: %v\n%s", err, stderr)
	}
	out, _, err := renderMainAt(t, func() time.Time { return at.Add(5 * time.Minute) }, "-c", ini, "-usage", "7d")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("the history began at %s UTC, and -usage counts whole hours only: its first hour shows from %s UTC",
		at.Format("15:04"), at.Truncate(time.Hour).Add(time.Hour).Format("15:04"))
	if !strings.Contains(out, want) {
		t.Errorf("-usage 7d on the first hour:\n%s\nwant %q", out, want)
	}
}
