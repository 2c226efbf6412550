// Package sitefiles: a placeholder until the sitefiles branch is merged.
package sitefiles

import (
	"bufio"
	"io"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

func Write(path string, write func(io.Writer) error) error {
	f, err := renameio.NewPendingFile(path, renameio.WithStaticPermissions(0o644), renameio.WithTempDir(filepath.Dir(path)))
	if err != nil {
		return err
	}
	defer f.Cleanup()
	w := bufio.NewWriterSize(f, 64<<10)
	if err := write(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}

type Page struct {
	Name string
	Body []byte
}

func SyncFolder(dir string, pages []Page) error {
	if len(pages) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range pages {
		if err := Write(filepath.Join(dir, p.Name), func(w io.Writer) error { _, err := w.Write(p.Body); return err }); err != nil {
			return err
		}
	}
	return nil
}
