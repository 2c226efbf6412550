package publish

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
)

// A file whose making fails costs that file alone: the others are
// written, the old one stays, and the error names it with its setting.
func TestFilesFailAlone(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	os.WriteFile(path("b.json"), []byte("old b"), 0o644)
	text := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	var seen History
	err := Publish(context.Background(), Config{History: history.Config{}}, Run{
		Cluster: &cluster.Cluster{}, Now: time.Now(), Loc: time.UTC,
		Files: func(h History) []File {
			seen = h
			return []File{
				{Path: path("a.html"), Key: "[render] html", Write: text("new a")},
				{Path: path("b.json"), Key: "[render] json", Write: func(w io.Writer) error { return errors.New("encoding went wrong") }},
				{Path: path("missing/c.prom"), Key: "[render] prom", Write: text("new c")},
				{Path: "", Write: func(io.Writer) error { t.Error("a file without a path was written"); return nil }},
			}
		},
	})
	for name, want := range map[string]string{"a.html": "new a", "b.json": "old b"} {
		if b, _ := os.ReadFile(path(name)); string(b) != want {
			t.Errorf("%s holds %q, want %q", name, b, want)
		}
	}
	errs, ok := err.(cli.Errors)
	if !ok || len(errs) != 2 {
		t.Fatalf("error %v, want one for b.json and one for c.prom", err)
	}
	if !strings.Contains(errs[0].Error(), "encoding went wrong") || !strings.Contains(cli.Hint(errs[0]), "[render] json sets the path") {
		t.Errorf("b.json's error %q (hint %q)", errs[0], cli.Hint(errs[0]))
	}
	if !strings.Contains(errs[1].Error(), "does not exist") || !strings.Contains(cli.Hint(errs[1]), "[render] prom sets the path") {
		t.Errorf("c.prom's error %q (hint %q)", errs[1], cli.Hint(errs[1]))
	}
	if seen.Summary != nil || len(seen.Warnings) != 0 {
		t.Errorf("with history off the files were given %+v", seen)
	}
}
