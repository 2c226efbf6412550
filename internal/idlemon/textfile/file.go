package textfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gpumon/gpumon/internal/cli"
	"github.com/gpumon/gpumon/internal/sitefiles"
)

// Write writes the text to dir/FileName(vendor) atomically (a temporary
// file in dir, renamed), mode 0644: node_exporter never reads half a file.
func (m *Metrics) Write(dir string, now time.Time) error {
	path := filepath.Join(dir, FileName(m.vendor))
	if !m.swept && isFolder(dir) {
		// an idlemon killed while writing left its temporary file; none
		// other writes this file, so every one is a leftover. Best effort:
		// node_exporter reads only *.prom files.
		_ = sitefiles.RemoveLeftovers(path, time.Now())
		m.swept = true
	}
	// sitefiles.Write: a hidden "*.tmp" beside path (never read by
	// node_exporter), fsynced, fchmod 0644, renamed; removed on any error
	err := sitefiles.Write(path, func(w io.Writer) error { return m.WriteTo(w, now) })
	if errors.Is(err, fs.ErrNotExist) && !isFolder(dir) {
		return cli.WithHint(fmt.Errorf("textfile_dir %s does not exist", dir),
			"create it (sudo install -d %s) and point node_exporter's --collector.textfile.directory at it, "+
				"or set textfile_dir to the folder node_exporter already reads", dir)
	}
	return err
}

func isFolder(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}
