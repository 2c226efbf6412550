package sitefiles

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree is what a folder holds, by path relative to it: a file's content,
// "-> target" for a link, "/" for a folder.
type tree map[string]string

// snapshot is dir's tree, links not followed.
func snapshot(t testing.TB, dir string) tree {
	t.Helper()
	got := tree{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case rel == ".":
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			got[rel] = "-> " + target
			return err
		case d.IsDir():
			got[rel] = "/"
		default:
			b, err := os.ReadFile(path)
			got[rel] = string(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// build makes the files, links ("-> target") and folders ("/") of want in
// dir, in place of what is there.
func build(t testing.TB, dir string, want tree) {
	t.Helper()
	for _, rel := range slices.Sorted(maps.Keys(want)) { // parents first
		what := want[rel]
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(path); err == nil && !(what == "/" && fi.IsDir()) {
			os.RemoveAll(path) // replaced, e.g. a page by a link
		}
		var err error
		switch {
		case what == "/":
			err = os.MkdirAll(path, 0o755)
		case strings.HasPrefix(what, "-> "):
			err = os.Symlink(strings.TrimPrefix(what, "-> "), path)
		default:
			err = os.WriteFile(path, []byte(what), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// writeString is a write func for Write.
func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

// hintOf is err's hint, "" when it has none.
func hintOf(err error) string {
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}

// errText is err's message, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// syncFolder is what a run does with a folder of pages, the linking file
// left out: it makes dir hold exactly these pages among the files it made
// there: WritePages, then, if every page was written, PrunePages.
func syncFolder(dir string, pages []Page) error {
	if err := WritePages(dir, pages); err != nil {
		return err
	}
	return PrunePages(dir, pages)
}
