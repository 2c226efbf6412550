package publish

import (
	"io"
	"strings"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/sitefiles"
)

// File is one output of a run: the page, status.json or metrics.prom.
type File struct {
	Path  string // "" is not written
	Key   string // the setting that names Path, for the hint: "[render] prom"
	Write func(io.Writer) error
	// Pages go into PagesDir before Path, which links to them: a big
	// fleet's group pages. With none, the folder's earlier pages go.
	PagesDir string
	Pages    []sitefiles.Page
}

// write writes f alone; a failure leaves the previous file in place. The
// pages go first, the file that links to them next, and only then are the
// earlier pages removed: at no time does the served file link to a page
// that is not there.
func write(f File, now time.Time) error {
	if f.Path == "" {
		return nil
	}
	// what a run killed while writing left: an hour old, it is nobody's
	_ = sitefiles.RemoveLeftovers(f.Path, now.Add(-time.Hour))
	if err := sitefiles.WritePages(f.PagesDir, f.Pages); err != nil {
		return withKey(err, f.Key, f.Path+" was not replaced either, nor the earlier pages removed")
	}
	if err := sitefiles.Write(f.Path, f.Write); err != nil {
		return withKey(err, f.Key, "")
	}
	if f.PagesDir == "" {
		return nil
	}
	if err := sitefiles.PrunePages(f.PagesDir, f.Pages); err != nil {
		return withKey(err, f.Key, "")
	}
	return nil
}

// withKey adds to err's hint what became of the file and which setting
// moves it.
func withKey(err error, key, kept string) error {
	var parts []string
	for _, p := range []string{cli.Hint(err), kept} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if key != "" {
		parts = append(parts, key+" sets the path")
	}
	return cli.WithHint(err, "%s", strings.Join(parts, "; "))
}
