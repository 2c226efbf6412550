package publish

import (
	"errors"
	"io"

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
	if f.PagesDir != "" {
		if err := sitefiles.SyncFolder(f.PagesDir, f.Pages); err != nil {
			// a page linking to pages that are not there is worse than
			// the last good one
			return withKey(err, f.Key, f.Path+" was not replaced either")
		}
	}
	if err := sitefiles.Write(f.Path, f.Write); err != nil {
		return withKey(err, f.Key, "the previous file stays")
	}
	return nil
}

// withKey adds to err's hint what became of the file and which setting
// moves it.
func withKey(err error, key, kept string) error {
	hint := ""
	if h, ok := errors.AsType[cli.Hinted](err); ok && h.Hint() != "" {
		hint = h.Hint() + "; "
	}
	if key != "" {
		return cli.WithHint(err, "%s%s (%s sets the path)", hint, kept, key)
	}
	return cli.WithHint(err, "%s%s", hint, kept)
}
