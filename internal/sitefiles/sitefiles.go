// Package sitefiles writes the files of the published site (the page, its
// group pages, status.json, metrics.prom) so that each is replaced alone and
// safely. nginx and node_exporter read these files while they are rewritten,
// so a file is written beside its target and renamed over it: a reader sees
// the old file or the new one, and a failure keeps the old one. A folder of
// pages is written only when it is a real folder, not a link, and only the
// files a run recorded as its own are ever removed from it: a web folder is
// shared with files that are not ours (issue 19: a `groups` link made render
// delete index.html).
package sitefiles

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// fileMode is what every file is written with, whatever the umask: nginx
// and node_exporter run as other users and must read it.
const fileMode = 0o644

// buffers are the 64 KiB write buffers of writeIn: a folder of 100 pages
// would otherwise allocate 100.
var buffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// Write replaces path with what write produces: a temporary file in path's
// own folder, fsynced, mode 0644, renamed over path. A link at path is
// replaced, not followed. On any failure the old file stays, the temporary
// file is removed, and the error is an *Error.
func Write(path string, write func(io.Writer) error) error {
	dir, name := filepath.Split(path)
	if name == "" || name == "." || name == ".." {
		return &Error{Op: "write", Path: path, Err: fs.ErrInvalid, why: "it is not a file name"}
	}
	if dir == "" {
		dir = "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fileError("write", path, err)
	}
	defer root.Close()
	return writeIn(root, path, name, write)
}

// writeIn is Write for the file name in root, whose full path is path.
func writeIn(root *os.Root, path, name string, write func(io.Writer) error) error {
	f, tmp, err := createTemp(root, name)
	if err != nil {
		return fileError("write", path, err)
	}
	renamed := false
	defer func() {
		if !renamed { // also when write panics
			f.Close()
			root.Remove(tmp)
		}
	}()
	// fchmod, not the umask-masked mode of the open: 0644 whatever the umask
	if err := f.Chmod(fileMode); err != nil {
		return fileError("write", path, err)
	}
	fw := &fileWriter{f: f}
	w := buffers.Get().(*bufio.Writer)
	defer buffers.Put(w)
	w.Reset(fw)
	if err := write(w); err != nil {
		if fw.err != nil { // the file failed under write (a full disk), not write itself
			return fileError("write", path, fw.err)
		}
		return &Error{Op: "write", Path: path, Err: err, why: err.Error()}
	}
	if err := w.Flush(); err != nil {
		return fileError("write", path, err)
	}
	// the data must be on disk before the rename makes it the file, or a
	// crash could leave an empty file where the old one was
	if err := f.Sync(); err != nil {
		return fileError("write", path, err)
	}
	if err := f.Close(); err != nil {
		return fileError("write", path, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		return fileError("write", path, err)
	}
	renamed = true
	return nil
}

// createTemp makes a new hidden file beside name. Its name is random (so
// another user cannot make it first) and O_EXCL (so a file or link someone
// put there is never opened).
func createTemp(root *os.Root, name string) (*os.File, string, error) {
	base := name[:min(len(name), 200)] // the whole name within NAME_MAX (255)
	for range 100 {
		var b [8]byte
		rand.Read(b[:])
		tmp := "." + base + "." + hex.EncodeToString(b[:]) + ".tmp"
		f, err := root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, tmp, err
	}
	return nil, "", errors.New("no unused temporary file name")
}

// fileWriter keeps the first error of the file it writes, to tell a file
// that failed from a write func that did.
type fileWriter struct {
	f   *os.File
	err error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// IsLeftover reports whether name is a temporary file that Write made for
// the file target (".TARGET.<16 hex digits>.tmp"), left by a run killed
// while writing.
func IsLeftover(name, target string) bool {
	base := target[:min(len(target), 200)]
	rest, ok := strings.CutPrefix(name, "."+base+".")
	if !ok {
		return false
	}
	digits, ok := strings.CutSuffix(rest, ".tmp")
	return ok && len(digits) == 16 && strings.Trim(digits, "0123456789abcdef") == ""
}

// RemoveLeftovers removes the temporary files of Write beside path that
// are regular files last changed before olderThan: one being written by
// another run now is newer.
func RemoveLeftovers(path string, olderThan time.Time) error {
	dir, target := filepath.Dir(path), filepath.Base(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !IsLeftover(e.Name(), target) {
			continue
		}
		if fi, err := e.Info(); err != nil || !fi.ModTime().Before(olderThan) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
