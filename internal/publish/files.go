package publish

import (
	"io"
	"strings"

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

// write writes f alone; a failure leaves the previous file in place.
func write(f File) error {
	if f.Path == "" {
		return nil
	}
	var pagesErr error
	if f.PagesDir != "" {
		if err := sitefiles.SyncFolder(f.PagesDir, f.Pages); err != nil {
			if len(f.Pages) > 0 {
				// a page linking to pages that are not there is worse
				// than the last good one
				return withKey(err, f.Key, f.Path+" was not replaced either")
			}
			pagesErr = withKey(err, f.Key, "")
		}
	}
	if err := sitefiles.Write(f.Path, f.Write); err != nil {
		return cli.Join(pagesErr, withKey(err, f.Key, ""))
	}
	return pagesErr
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
