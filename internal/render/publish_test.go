package render

import (
	"github.com/gpumon/gpumon/internal/loaddata"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/testenv"
)

// site is a render whose every output has a folder of its own, so that
// each can be broken alone: the page (www), status.json (data),
// metrics.prom (prom), index.txt (txt), free.txt (free), the history
// (hist), and a webhook.
type site struct {
	dir, ini, csv string
	hook          *webhookLog
}

func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{dir: t.TempDir(), hook: &webhookLog{}}
	srv := httptest.NewServer(s.hook)
	t.Cleanup(srv.Close)
	for _, d := range []string{"www", "data", "prom", "txt", "free", "hist"} {
		if err := os.Mkdir(s.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.ini = s.path("config.ini")
	s.csv = s.path("load_data.csv")
	os.WriteFile(s.ini, []byte("[render]\nhtml = www/index.html\njson = data/status.json\nprom = prom/metrics.prom\n"+
		"text = txt/index.txt\nfree_text = free/free.txt\n"+
		"[history]\ndb = hist/history.db\n[notify]\nwebhook = "+srv.URL+"/hook\nhost_down_after = 0\n"), 0o644)
	return s
}

func (s *site) path(rel string) string { return filepath.Join(s.dir, rel) }

// run renders the fleet as it is at minute m (gpu02 goes down at minute
// 5), and returns the error and what the command printed.
func (s *site) run(t *testing.T, start time.Time, m int) (error, string) {
	t.Helper()
	at := start.Add(time.Duration(m) * time.Minute)
	fleetAt(t, s.csv, at, false, m >= 5, false)
	_, stderr, err := renderMainAt(t, func() time.Time { return at.Add(20 * time.Second) }, "-c", s.ini, "-i", s.csv)
	return err, stderr
}

var siteOutputs = map[string]string{"page": "www/index.html", "status.json": "data/status.json", "metrics.prom": "prom/metrics.prom",
	"index.txt": "txt/index.txt", "free.txt": "free/free.txt"}

func (s *site) read(t *testing.T) map[string]string {
	t.Helper()
	got := map[string]string{}
	for name, rel := range siteOutputs {
		b, _ := os.ReadFile(s.path(rel))
		got[name] = string(b)
	}
	return got
}

// Each output of a run fails alone: with its folder missing, read-only or
// on a full file system, the error names it and the fix, the last good
// file stays, and every other output is written, the history recorded and
// the notification sent (gpu02 went down).
func TestOutputsFailAlone(t *testing.T) {
	type breaker struct {
		name string
		root bool
		fn   func(t *testing.T, dir string)
		want string // in the error or its hint
	}
	breakers := []breaker{
		{"missing folder", false, func(t *testing.T, dir string) { os.RemoveAll(dir) }, "does not exist"},
		{"read-only folder", true, func(t *testing.T, dir string) { testenv.MountReadOnly(t, dir) }, "read-only"},
		{"full file system", true, func(t *testing.T, dir string) { testenv.FillFileSystem(t, dir) }, "is full"},
	}
	start := time.Now().Truncate(time.Hour).Add(-time.Hour)
	for _, out := range []string{"page", "status.json", "metrics.prom", "index.txt", "free.txt", "history"} {
		for _, b := range breakers {
			t.Run(out+"/"+b.name, func(t *testing.T) {
				if b.root {
					testenv.NeedRoot(t)
				}
				s := newSite(t)
				folder := map[string]string{"page": "www", "status.json": "data", "metrics.prom": "prom",
					"index.txt": "txt", "free.txt": "free", "history": "hist"}[out]
				if b.name == "full file system" {
					testenv.MountTmpfs(t, s.path(folder), "1m")
				}
				if err, stderr := s.run(t, start, 0); err != nil {
					t.Fatalf("first run: %v\n%s", err, stderr)
				}
				before := s.read(t)
				b.fn(t, s.path(folder))
				err, stderr := s.run(t, start, 5)
				if err == nil {
					t.Fatalf("render with %s's folder broken (%s) succeeded", out, b.name)
				}
				checkBrokenAlone(t, s, out, folder, before, err, stderr, b.want)
			})
		}
	}
}

func checkBrokenAlone(t *testing.T, s *site, out, folder string, before map[string]string, err error, stderr, want string) {
	t.Helper()
	// the broken output's error, and its siblings' in its folder (the
	// page's page-state.json)
	for _, l := range strings.Split(strings.TrimSpace(testenv.GrepLines(stderr, "render: error:")), "\n") {
		if !strings.Contains(l, s.path(folder)+"/") {
			t.Errorf("an error outside the broken folder %s: %s\nall:\n%s", folder, l, stderr)
		}
	}
	if !strings.Contains(err.Error(), s.path(folder)) || !strings.Contains(err.Error()+" hint: "+cli.Hint(err), want) {
		t.Errorf("error %q (hint %q) does not name %s and say %q", err, cli.Hint(err), s.path(folder), want)
	}
	if cli.Hint(err) == "" {
		t.Errorf("error %q has no hint", err)
	}
	after := s.read(t)
	for name := range siteOutputs {
		switch {
		case name == out && after[name] != "" && after[name] != before[name]: // "": gone with its folder
			t.Errorf("%s: the last good file was not kept", name)
		case name != out && after[name] == before[name]:
			t.Errorf("%s was not rewritten when %s failed", name, out)
		}
	}
	if out != "history" {
		if !strings.Contains(after["status.json"]+after["page"], `"snapshots": 2`) && !strings.Contains(after["page"], "2 snapshots") &&
			out != "status.json" && !strings.Contains(after["status.json"], `"snapshots":2`) {
			t.Errorf("the history did not record the second run:\n%s", testenv.GrepLines(after["status.json"], "snapshots"))
		}
		if ev := strings.Join(s.hook.events(), "\n"); !strings.Contains(ev, "host_down firing gpu02") {
			t.Errorf("webhook got %q, want gpu02 down", ev)
		}
	}
	if tmp, _ := filepath.Glob(filepath.Join(s.path(folder), ".*")); out != "history" && len(tmp) > 0 {
		t.Errorf("temporary files left in %s: %v", folder, tmp)
	}
}

// A webhook that refuses costs only the notification: every file is
// written and the history recorded, the message waits for the next run.
func TestNotifyFailsAlone(t *testing.T) {
	s := newSite(t)
	start := time.Now().Truncate(time.Hour).Add(-time.Hour)
	if err, stderr := s.run(t, start, 0); err != nil {
		t.Fatalf("first run: %v\n%s", err, stderr)
	}
	before := s.read(t)
	s.hook.mu.Lock()
	s.hook.refusing = true
	s.hook.mu.Unlock()
	err, stderr := s.run(t, start, 5)
	if err == nil || !strings.Contains(err.Error(), "notify: webhook") || !strings.Contains(err.Error(), "1 messages wait for the next run") {
		t.Fatalf("error %v, want the webhook's refusal\n%s", err, stderr)
	}
	for name, b := range s.read(t) {
		if b == before[name] {
			t.Errorf("%s was not rewritten when the webhook refused", name)
		}
	}
}

// A groups folder that is a link (to the web folder itself, or to another
// folder) is refused: nothing is written or removed through it, and
// render says so when it has group pages to write; a small fleet's page,
// which links to none, is written, and the link is none of its business.
func TestGroupsLinkRefused(t *testing.T) {
	for _, tt := range []struct {
		name   string
		hosts  int
		target string // the link's target, relative to the web folder
	}{
		{"to the web folder, one page", 50, "."},
		{"to the web folder, group pages", 1500, "."},
		{"elsewhere, group pages", 1500, "../elsewhere"},
		{"elsewhere, one page", 50, "../elsewhere"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			www, elsewhere := filepath.Join(dir, "www"), filepath.Join(dir, "elsewhere")
			for _, d := range []string{www, elsewhere} {
				os.Mkdir(d, 0o755)
				os.WriteFile(filepath.Join(d, "index.html"), []byte("old"), 0o644)
				os.WriteFile(filepath.Join(d, "about.html"), []byte("about"), 0o644)
			}
			if err := os.Symlink(tt.target, filepath.Join(www, groupsDir)); err != nil {
				t.Fatal(err)
			}
			csv := filepath.Join(dir, "load_data.csv")
			if err := loaddata.WriteFile(csv, fleetRows(tt.hosts, 8)); err != nil {
				t.Fatal(err)
			}
			ini := filepath.Join(dir, "config.ini")
			os.WriteFile(ini, []byte("[groups]\nlab a = gpu[0000-0099]\n[history]\ndb =\n"), 0o644)
			_, stderr, err := renderMainAt(t, time.Now, "-c", ini, "-i", csv, "-o", filepath.Join(www, "index.html"))
			onePage := tt.hosts <= 100
			if onePage && err != nil {
				t.Errorf("a small fleet's render failed: %v\n%s", err, stderr)
			}
			if !onePage && (err == nil || !strings.Contains(err.Error(), "link")) {
				t.Errorf("error %v, want one about the link\n%s", err, stderr)
			}
			if b, _ := os.ReadFile(filepath.Join(elsewhere, "index.html")); string(b) != "old" {
				t.Errorf("the link's target's index.html was replaced")
			}
			for _, d := range []string{www, elsewhere} {
				if b, _ := os.ReadFile(filepath.Join(d, "about.html")); string(b) != "about" {
					t.Errorf("%s/about.html was removed or changed", filepath.Base(d))
				}
			}
			page, _ := os.ReadFile(filepath.Join(www, "index.html"))
			if onePage == (string(page) == "old") {
				t.Errorf("index.html replaced: %v, want %v (a page linking to group pages that could not be written stays the last good one)", string(page) != "old", onePage)
			}
		})
	}
}

// When the new index cannot be written, the group pages the old one links
// to stay; they go once an index that no longer links to them is in place.
func TestEarlierPagesStayWithTheirIndex(t *testing.T) {
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	os.Mkdir(www, 0o755)
	csv := filepath.Join(dir, "load_data.csv")
	ini := filepath.Join(dir, "config.ini")
	os.WriteFile(ini, []byte("[history]\ndb =\n"), 0o644)
	render := func(rows []loaddata.Row) error {
		t.Helper()
		if err := loaddata.WriteFile(csv, rows); err != nil {
			t.Fatal(err)
		}
		_, _, err := renderMainAt(t, time.Now, "-c", ini, "-i", csv, "-o", filepath.Join(www, "index.html"))
		return err
	}
	if err := render(fleetRows(1500, 8)); err != nil {
		t.Fatal(err)
	}
	linked := func() []string {
		index, _ := os.ReadFile(filepath.Join(www, "index.html"))
		var missing []string
		for _, m := range regexp.MustCompile(`href=groups/([a-z0-9_-]+\.html)`).FindAllStringSubmatch(string(index), -1) {
			if _, err := os.Stat(filepath.Join(www, groupsDir, m[1])); err != nil && !slices.Contains(missing, m[1]) {
				missing = append(missing, m[1])
			}
		}
		return missing
	}
	// a folder in the index's way: the new index cannot be written
	os.Rename(filepath.Join(www, "index.html"), filepath.Join(dir, "index.html.keep"))
	os.Mkdir(filepath.Join(www, "index.html"), 0o755)
	if err := render(fleetRows(50, 8)); err == nil {
		t.Fatal("render succeeded with a folder where index.html goes")
	}
	os.Remove(filepath.Join(www, "index.html"))
	os.Rename(filepath.Join(dir, "index.html.keep"), filepath.Join(www, "index.html"))
	if m := linked(); len(m) > 0 {
		t.Errorf("the kept index links to pages that were removed: %v", m)
	}
	if err := render(fleetRows(50, 8)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(www, groupsDir)); !os.IsNotExist(err) {
		t.Errorf("the group pages stay once the index no longer links to them (%v)", err)
	}
}
