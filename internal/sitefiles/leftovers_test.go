package sitefiles

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A temporary file a killed run left is removed once it is old; one being
// written now, a link, and anything not named like Write's are not.
func TestRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	files := map[string]time.Time{
		".metrics.prom.0123456789abcdef.tmp":  old, // left by a killed run
		".metrics.prom.fedcba9876543210.tmp":  now, // being written
		".metrics.prom.0123.tmp":              old, // not Write's
		".index.html.0123456789abcdef.tmp":    old, // another file's
		"metrics.prom":                        old, // the file itself
		".metrics.prom.0123456789abcdeg.tmp":  old, // not hex
		"x.metrics.prom.0123456789abcdef.tmp": old, // not hidden
	}
	for name, mtime := range files {
		p := filepath.Join(dir, name)
		os.WriteFile(p, nil, 0o644)
		os.Chtimes(p, mtime, mtime)
	}
	os.Symlink("/etc/hostname", filepath.Join(dir, ".metrics.prom.aaaaaaaaaaaaaaaa.tmp"))
	if err := RemoveLeftovers(filepath.Join(dir, "metrics.prom"), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{".index.html.0123456789abcdef.tmp", ".metrics.prom.0123.tmp", ".metrics.prom.0123456789abcdeg.tmp",
		".metrics.prom.aaaaaaaaaaaaaaaa.tmp", ".metrics.prom.fedcba9876543210.tmp", "metrics.prom", "x.metrics.prom.0123456789abcdef.tmp"}
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
}
