package sitefiles

import (
	"errors"
	"fmt"
	"github.com/gpumon/gpumon/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// run is one syncFolder of web/groups in a test.
type run struct {
	tamper  tree     // built in the web folder first: what an admin or an intruder did
	pages   []string // each page's body is "<name> #<run number>"
	wantErr string   // with DIR for the web folder
}

// manifest is what the manifest holds when names are recorded.
func manifest(names ...string) string {
	return "# the files gpumon wrote in this folder: it removes only these when they are no longer needed\n" +
		strings.Join(names, "\n") + "\n"
}

func TestSyncFolder(t *testing.T) {
	for _, c := range []struct {
		name   string
		before tree // in the web folder, which has index.html too
		runs   []run
		after  tree
	}{
		{name: "the first run makes the folder and records its pages",
			runs: []run{{pages: []string{"b.html", "a.html"}}},
			after: tree{"groups": "/", "groups/a.html": "a.html #1", "groups/b.html": "b.html #1",
				"groups/.gpumon-pages": manifest("a.html", "b.html")}},
		{name: "a later run rewrites its pages and removes those gone",
			runs: []run{{pages: []string{"a.html", "b.html", "c.html"}}, {pages: []string{"a.html", "d.html"}}},
			after: tree{"groups": "/", "groups/a.html": "a.html #2", "groups/d.html": "d.html #2",
				"groups/.gpumon-pages": manifest("a.html", "d.html")}},
		{name: "a shrinking fleet keeps the files it never recorded",
			before: tree{"groups/about.html": "about", "groups/notes.txt": "notes"},
			runs:   []run{{pages: []string{"a.html", "b.html"}}, {pages: []string{"a.html"}}},
			after: tree{"groups": "/", "groups/a.html": "a.html #2", "groups/about.html": "about",
				"groups/notes.txt": "notes", "groups/.gpumon-pages": manifest("a.html")}},
		{name: "no pages removes the recorded ones, the record and the folder left empty",
			runs:  []run{{pages: []string{"a.html", "b.html"}}, {pages: nil}},
			after: tree{}},
		{name: "no pages keeps a folder that holds a file never recorded",
			before: tree{"groups/about.html": "about"},
			runs:   []run{{pages: []string{"a.html"}}, {pages: nil}},
			after:  tree{"groups": "/", "groups/about.html": "about"}},
		{name: "no pages and no folder makes nothing",
			runs:  []run{{pages: nil}},
			after: tree{}},
		{name: "a recorded page that became a link is neither followed nor removed",
			runs: []run{{pages: []string{"a.html", "b.html"}},
				{tamper: tree{"groups/b.html": "-> ../index.html"}, pages: []string{"a.html"}}},
			after: tree{"groups": "/", "groups/a.html": "a.html #2", "groups/b.html": "-> ../index.html",
				"groups/.gpumon-pages": manifest("a.html")}},
		{name: "a recorded page that became a folder is left alone",
			runs: []run{{pages: []string{"a.html", "b.html"}},
				{tamper: tree{"groups/b.html": "/", "groups/b.html/inner": "inner"}, pages: []string{"a.html"}}},
			after: tree{"groups": "/", "groups/a.html": "a.html #2", "groups/b.html": "/", "groups/b.html/inner": "inner",
				"groups/.gpumon-pages": manifest("a.html")}},
		{name: "a page that is a link is replaced, not followed",
			before: tree{"groups/a.html": "-> ../index.html"},
			runs:   []run{{pages: []string{"a.html"}}},
			after: tree{"groups": "/", "groups/a.html": "a.html #1",
				"groups/.gpumon-pages": manifest("a.html")}},
		{name: "a page that cannot be written does not stop the others",
			before: tree{"groups/b.html": "/", "groups/c.html": "/"},
			runs: []run{{pages: []string{"a.html", "b.html", "c.html", "d.html"},
				wantErr: "cannot write DIR/groups/b.html: a folder of that name is in the way (and 1 more files failed)"}},
			after: tree{"groups": "/", "groups/a.html": "a.html #1", "groups/b.html": "/", "groups/c.html": "/",
				"groups/d.html": "d.html #1", "groups/.gpumon-pages": manifest("a.html", "b.html", "c.html", "d.html")}},
		{name: "a hostile record removes nothing outside the folder nor below it",
			before: tree{
				"groups/.gpumon-pages": "../index.html\n/etc/passwd\n.\n..\nsub/x.html\n.hidden\n#c.html\n../about.html\n",
				"groups/sub/x.html":    "x", "groups/.hidden": "h", "groups/#c.html": "c", "about.html": "about"},
			runs: []run{{pages: []string{"a.html"}}, {pages: nil}},
			after: tree{"about.html": "about", "groups": "/", "groups/sub": "/", "groups/sub/x.html": "x",
				"groups/.hidden": "h", "groups/#c.html": "c"}},
		{name: "a record that is a link records nothing and is replaced",
			before: tree{"groups/.gpumon-pages": "-> list", "groups/list": "about.html\n", "groups/about.html": "about"},
			runs:   []run{{pages: []string{"a.html"}}},
			after: tree{"groups": "/", "groups/a.html": "a.html #1", "groups/about.html": "about",
				"groups/list": "about.html\n", "groups/.gpumon-pages": manifest("a.html")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			web := t.TempDir()
			build(t, web, c.before)
			build(t, web, tree{"index.html": "index"})
			for i, r := range c.runs {
				build(t, web, r.tamper)
				var pages []Page
				for _, name := range r.pages {
					pages = append(pages, Page{Name: name, Body: fmt.Appendf(nil, "%s #%d", name, i+1)})
				}
				err := syncFolder(filepath.Join(web, "groups"), pages)
				if got := strings.ReplaceAll(errText(err), web, "DIR"); got != r.wantErr {
					t.Errorf("run %d: error %q, want %q", i+1, got, r.wantErr)
				}
			}
			want := tree{"index.html": "index"}
			for k, v := range c.after {
				want[k] = v
			}
			if diff := cmp.Diff(want, snapshot(t, web)); diff != "" {
				t.Errorf("web folder after the runs (-want +got):\n%s", diff)
			}
		})
	}
}

// A groups folder that is not a real folder is refused, and nothing is
// written or removed, wherever it points (issue 19: `groups -> .` deleted
// index.html every run).
func TestSyncFolderRefuses(t *testing.T) {
	intruded := tree{"index.html": "index", "about.html": "about", ".gpumon-pages": manifest("about.html", "index.html")}
	for _, c := range []struct {
		name     string
		web      tree
		groups   string // syncFolder's folder, in the web folder
		wantErr  string // with DIR for the web folder
		wantHint string
		// with no pages there is nothing to do, nor anything wrong: a
		// folder that is not a real one holds nothing of ours to remove
		noPagesNoError bool
	}{
		{name: "a link to another folder", groups: "groups",
			web: tree{"groups": "-> ../other", "../other/index.html": "index", "../other/about.html": "about",
				"../other/.gpumon-pages": manifest("about.html", "index.html")},
			wantErr:        "cannot write pages into DIR/groups: it is a link to ../other",
			wantHint:       "pages are written only into a real folder, never through a link: remove the link (rm DIR/groups); the next run makes the folder",
			noPagesNoError: true},
		{name: "a link to the web folder", groups: "groups",
			web:            merge(intruded, tree{"groups": "-> ."}),
			wantErr:        "cannot write pages into DIR/groups: it is a link to .",
			wantHint:       "pages are written only into a real folder, never through a link: remove the link (rm DIR/groups); the next run makes the folder",
			noPagesNoError: true},
		{name: "a file", groups: "groups",
			web:            tree{"index.html": "index", "groups": "not a folder"},
			wantErr:        "cannot write pages into DIR/groups: it is a regular file, not a folder",
			wantHint:       "move it away (mv DIR/groups DIR/groups.old); the next run makes the folder",
			noPagesNoError: true},
		{name: "a missing web folder", groups: "missing/groups",
			web:            tree{"index.html": "index"},
			wantErr:        "cannot make folder DIR/missing/groups: folder DIR/missing does not exist",
			wantHint:       "create it (sudo install -d -o " + userName() + " DIR/missing) or change the path",
			noPagesNoError: true},
	} {
		for _, pages := range [][]Page{{{Name: "a.html", Body: []byte("a")}}, nil} {
			t.Run(fmt.Sprintf("%s, %d pages", c.name, len(pages)), func(t *testing.T) {
				base := t.TempDir()
				web := filepath.Join(base, "web")
				build(t, web, c.web)
				before := snapshot(t, base)
				err := syncFolder(filepath.Join(web, c.groups), pages)
				if diff := cmp.Diff(before, snapshot(t, base)); diff != "" {
					t.Errorf("files changed (-before +after):\n%s", diff)
				}
				wantErr, wantHint := c.wantErr, c.wantHint
				if c.noPagesNoError && pages == nil {
					wantErr, wantHint = "", ""
				}
				if got := strings.ReplaceAll(errText(err), web, "DIR"); got != wantErr {
					t.Errorf("error %q, want %q", got, wantErr)
				}
				if got := strings.ReplaceAll(hintOf(err), web, "DIR"); got != wantHint {
					t.Errorf("hint %q, want %q", got, wantHint)
				}
			})
		}
	}
}

func merge(a, b tree) tree {
	m := tree{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

func TestSyncFolderRefusesBadNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "../index.html", "/etc/passwd", "sub/a.html", ".gpumon-pages", ".hidden", "#a", "a\nb.html", strings.Repeat("a", 256)} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			web := t.TempDir()
			err := syncFolder(filepath.Join(web, "groups"), []Page{{Name: "a.html"}, {Name: name}})
			if err == nil {
				t.Error("no error")
			}
			if diff := cmp.Diff(tree{}, snapshot(t, web)); diff != "" {
				t.Errorf("files written (-want +got):\n%s", diff)
			}
		})
	}
}

// The folder syncFolder makes is 0755 whatever the umask: nginx reads it.
func TestSyncFolderMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "groups")
	old := syscall.Umask(0o077)
	err := syncFolder(dir, []Page{{Name: "a.html"}})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: os.ModeDir | 0o755, filepath.Join(dir, "a.html"): 0o644, filepath.Join(dir, manifestName): 0o644} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: %v, %v, want %v", path, fi.Mode(), err, want)
		}
	}
}

// A record that cannot be rewritten (a full file system) is the old one,
// whole: the next run still removes what it recorded.
func TestSyncFolderRecordSurvivesAFullDisk(t *testing.T) {
	dir := filepath.Join(testenv.MountTmpfs(t, t.TempDir(), "64k"), "groups")
	if err := syncFolder(dir, []Page{{Name: "a.html"}, {Name: "b.html"}, {Name: "c.html"}}); err != nil {
		t.Fatal(err)
	}
	testenv.FillFileSystem(t, filepath.Dir(dir))
	// a record bigger than the page of memory the old one frees when it is
	// truncated: rewritten in place, it would be cut short
	more := []Page{{Name: "a.html"}}
	for i := range 100 {
		more = append(more, Page{Name: fmt.Sprintf("group-%03d-of-a-fleet-that-grew-and-grew-again.html", i)})
	}
	err := syncFolder(dir, more)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("error %v, want ENOSPC", err)
	}
	want := tree{"a.html": "", "b.html": "", "c.html": "", ".gpumon-pages": manifest("a.html", "b.html", "c.html")}
	if diff := cmp.Diff(want, snapshot(t, dir)); diff != "" {
		t.Errorf("folder on a full disk (-want +got):\n%s", diff)
	}
	os.Remove(filepath.Join(filepath.Dir(dir), "filler"))
	if err := syncFolder(dir, []Page{{Name: "a.html"}}); err != nil {
		t.Fatal(err)
	}
	want = tree{"a.html": "", ".gpumon-pages": manifest("a.html")}
	if diff := cmp.Diff(want, snapshot(t, dir)); diff != "" {
		t.Errorf("folder once there is room (-want +got):\n%s", diff)
	}
}

// BenchmarkSyncFolder rewrites a folder of 100 group pages of 50 KiB, as
// render does for a big fleet each run.
func BenchmarkSyncFolder(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "groups")
	body := []byte(strings.Repeat("<p>gpu</p>\n", 50<<10/11))
	pages := make([]Page, 100)
	for i := range pages {
		pages[i] = Page{Name: fmt.Sprintf("group-%03d.html", i), Body: body}
	}
	b.SetBytes(int64(len(pages) * len(body)))
	for b.Loop() {
		if err := syncFolder(dir, pages); err != nil {
			b.Fatal(err)
		}
	}
}
